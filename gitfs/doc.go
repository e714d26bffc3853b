// Package gitfs reads git state through go-git: status of a checkout, branch
// and upstream, commit trees, and the rendering of virtual .status files.
//
// It never runs the git binary and knows nothing of FUSE.
//
// # Opening
//
// Open takes a worktree root whose .git is a directory or a "gitdir:" file
// (linked worktrees, submodules); OpenBare takes a bare repository or a git
// directory, for commit trees only. Neither searches parent directories.
// Errors wrap ErrNotGitRepository or ErrFormatUnsupported (SHA-256 objects,
// reftable refs, unknown extensions in a version-1 repository, and, at
// Status time, a sparse index); the message names the reason.
//
// go-git v5.19.3 refuses every repository with extensions.worktreeConfig
// (it lower-cases extension names, then looks them up in camel-cased
// tables, and does not list worktreeConfig as supported anyway). This
// package checks the extensions itself and hands go-git a storage whose
// Config hides the [extensions] section; config.worktree is read as git
// does.
//
// # Status
//
// Repo.Status renders what `git -C <worktree>/<dir> status --porcelain=v1
// --branch -- .` prints, byte for byte, minus lines for paths the caller
// may not read. It does not use go-git's Worktree.Status (slow, no path
// scope). Instead:
//
//   - the index is decoded with go-git's plumbing/format/index and kept
//     while the file's stat data is unchanged;
//   - index entries below dir are compared with the worktree by stat data
//     (mtime, ctime, inode, uid, gid, size, exec bit, file type) from
//     parallel workers; only files whose stat data differs, or that are
//     racily clean (mtime not before the index file's), are hashed;
//   - the index is compared with the HEAD tree below dir (flattened once per
//     tree), with git's default staged rename detection (exact, then unique
//     base names at 75%, then best matches at 50% with git's span-hash
//     similarity);
//   - untracked files are found by walking dir only: lstat semantics
//     throughout (symlinks are entries, never followed), ignored
//     directories, nested repositories and ".git" are never entered, a
//     directory holding no tracked file is shown once as "?? dir/" unless
//     status.showUntrackedFiles says "all" or "no"; ignore rules come from
//     .gitignore at every level, info/exclude and core.excludesFile
//     (default $XDG_CONFIG_HOME/git/ignore), parsed with go-git's
//     plumbing/format/gitignore;
//   - submodules are 'M' when their HEAD moved or (unless
//     submodule.<name>.ignore or diff.ignoreSubmodules says otherwise)
//     they have modified or untracked content, found by a nested status.
//
// Settings are read from the same files git reads (system unless
// GIT_CONFIG_NOSYSTEM, global from GIT_CONFIG_GLOBAL or XDG/home, the
// repository's config, config.worktree); [include] is not followed. Used
// keys: core.quotePath, core.fileMode, core.excludesFile,
// status.showUntrackedFiles, branch.<b>.remote/merge, remote.<r>.fetch,
// submodule.<name>.ignore, diff.ignoreSubmodules.
//
// # Caching and bounds
//
// Results are cached per dir. A cached result is served while the stat
// data of index, HEAD, packed-refs, config, info/exclude and the branch and
// upstream ref files is unchanged, Invalidate was not called for an
// overlapping path, and it is younger than Options.MaxAge (default 2s; this
// bounds how long edits made behind the mount's back stay unseen). Serving
// a cached result costs a handful of stat calls (tens of microseconds).
// Concurrent callers for the same dir share one computation.
//
// A scan that runs past Options.ScanTimeout (default 2s) is answered with
// what was found so far and the header line suffixed with
// " [incomplete: scan exceeded <timeout>]", for example
//
//	## main...origin/main [ahead 1] [incomplete: scan exceeded 2s]
//
// and a full scan continues in the background (bounded at 10 minutes);
// until it finishes, readers get the incomplete answer without waiting
// again, and afterwards the complete one. Identity waits for it.
//
// # Known differences from git
//
//   - No clean/smudge filters, core.autocrlf or .gitattributes: a file
//     whose only difference is what a filter would normalise shows as
//     modified where git shows it clean.
//   - A sparse index ("sdir") is refused with ErrFormatUnsupported. go-git's
//     index decoder cannot read a split index ("link") either; this package
//     merges it with its shared index itself (split-index.c, EWAH bitmaps).
//     The untracked cache ("UNTR") and fsmonitor data are ignored (they are
//     optional caches), so such indexes work.
//   - Copy detection, status.renames/diff.renames=false and
//     diff.renameLimit other than git's default are not honoured; git's
//     cap of four candidates per destination in inexact rename matching is
//     not applied (it only matters when many files are nearly equal).
//   - core.ignoreCase and core.symlinks=false are not honoured.
//     core.trustctime=false and core.checkStat=minimal are not either, which
//     only costs extra hashing (ctime, inode and owner are always compared).
//   - A cached parent result does not watch a submodule's own index and
//     HEAD; Options.MaxAge bounds that staleness.
//
// # Commit trees
//
// ResolveRev resolves branches, tags (peeled), remote-tracking branches,
// full or abbreviated ids, HEAD and go-git revision syntax; Tree gives
// Stat, ReadDir, ReadFile, Open and Readlink over one commit, from loose
// or packed objects (packs written after Open, by git gc or git repack,
// are found too), on bare repositories too; missing paths wrap
// io/fs.ErrNotExist. Decoded trees are kept in a small LRU.
package gitfs
