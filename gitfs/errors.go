package gitfs

import "errors"

var (
	// ErrNotGitRepository is wrapped by Open and OpenBare when the path is not
	// a git checkout (or bare repository) that can be read.
	ErrNotGitRepository = errors.New("not a git repository")

	// ErrFormatUnsupported is wrapped when the repository uses a format this
	// package cannot read (SHA-256 objects, reftable refs, a sparse index, an
	// unknown repository extension). The message names the reason.
	ErrFormatUnsupported = errors.New("git repository format unsupported")
)
