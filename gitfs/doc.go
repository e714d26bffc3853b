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
// Status time, an index with an unknown mandatory extension); the message
// names the reason.
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
// scope, and different from git in many states). Instead it follows git's
// own code paths (git 2.3x), which the tests compare with the git CLI:
//
//   - the index is decoded here (read-cache.c: versions 2, 3 and 4, the
//     assume-unchanged, skip-worktree and intent-to-add bits, a split index
//     merged with its shared index, a sparse index's directory entries
//     expanded from their trees) and kept while the file's stat data is
//     unchanged;
//   - index entries below dir are compared with the worktree as git's
//     refresh and diff-files do, from parallel workers: assume-unchanged
//     and skip-worktree entries are skipped (with a sparse checkout, a
//     skip-worktree file that exists is compared after all); stat data
//     (mtime and ctime seconds, inode, owner, size, exec bit, file type;
//     git as built by default ignores sub-second times) first, and only
//     files whose stat data differs, or that are racily clean (mtime not
//     before the index file's, in seconds), are hashed, after the clean
//     conversion git would apply (end of lines from core.autocrlf and the
//     text, crlf and eol attributes; the ident attribute);
//   - the index is compared with the HEAD tree below dir (flattened once per
//     tree), intent-to-add entries being invisible there; renames (and
//     copies, with status.renames or diff.renames = copies) are found on
//     both sides, as diffcore-rename.c does: exact matches, unique base
//     names at 75%, then the best matches from a matrix of four candidates
//     per destination scored with git's span hashes, within
//     status.renameLimit or diff.renameLimit; in the worktree, intent-to-add
//     files are the additions;
//   - untracked files are found by walking dir only: lstat semantics
//     throughout (symlinks are entries, never followed), ignored
//     directories, nested repositories and ".git" are never entered, a
//     directory holding no tracked file is shown once as "?? dir/" unless
//     status.showUntrackedFiles says "all" or "no"; ignore rules come from
//     .gitignore at every level (from the index when skip-worktree),
//     info/exclude and core.excludesFile (default
//     $XDG_CONFIG_HOME/git/ignore), matched as dir.c and wildmatch.c do;
//   - submodules are 'M' when their HEAD moved or (unless
//     submodule.<name>.ignore or diff.ignoreSubmodules says otherwise)
//     they have modified or untracked content, found by a nested status;
//   - ahead and behind are counted as `git rev-list --left-right --count`
//     does, with its date-ordered merge-base search and five-commit slop,
//     so that histories with skewed commit dates give git's numbers;
//     shallow boundaries, info/grafts and replace refs are honoured.
//
// Settings are read from the same files git reads (system unless
// GIT_CONFIG_NOSYSTEM, global from GIT_CONFIG_GLOBAL or XDG/home, the
// repository's config, config.worktree); [include] is not followed. Used
// keys: core.quotePath, core.fileMode, core.symlinks, core.trustCtime,
// core.checkStat, core.autocrlf, core.excludesFile, core.attributesFile,
// core.sparseCheckout, sparse.expectFilesOutsideOfPatterns,
// core.useReplaceRefs, status.showUntrackedFiles, status.renames,
// status.renameLimit, diff.renames, diff.renameLimit, diff.<driver>.binary,
// branch.<b>.remote/merge, remote.<r>.fetch, submodule.<name>.ignore,
// diff.ignoreSubmodules.
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
// # One reader's worktree
//
// StatusView is Status for a reader who sees the worktree through a View:
// which host file holds each path and how each folder lists (the mount
// shows a principal its held changes over the checkout). Files, folders,
// .gitignore and .gitattributes come through the view; when the git dir
// is the worktree's own .git folder and the reader changed something in
// it, so do HEAD, loose and packed refs, the index and loose objects
// (config, info/, packs and submodules are always the checkout's). It
// shares the Repo's object store and commit caches but caches no result
// and neither uses nor feeds the clean-content memo.
//
// # Known differences from git
//
//   - Clean filters (a filter attribute with filter.<driver>.clean or
//     .process) and working-tree-encoding are not applied: a file whose
//     stat data changed is hashed as it is on disk (git would run the
//     repository's command).
//   - Objects missing from a partial clone are not fetched: a rename
//     whose source blob is missing is reported as a deletion and an
//     addition (git fetches it first).
//   - With a commit-graph file, git orders its merge-base search by
//     generation numbers; this package always orders by commit date. The
//     two differ only for histories with skewed commit dates.
//   - The untracked cache and fsmonitor data are ignored (they are
//     optional caches); status.showUntrackedFiles = false/true is taken as
//     no/normal (git 2.46 and later; older git refuses the values).
//   - core.ignoreCase and core.precomposeUnicode are not honoured.
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
