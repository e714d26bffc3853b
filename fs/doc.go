// Package fs is the FUSE node tree of neuralisfs: every syscall on the mount
// arrives here, is decided for the calling principal, is carried out on the
// backing folder through a confined mounts.Root, and is then told to the
// index and to git state.
//
// It is the only package that imports go-fuse (aliased fusefs) and the only
// place where Go errors become errno values (errno.go).
//
// Caching rules (DESIGN.md §4, §11): every entry and attribute whose policy
// decision is the same for every principal is cached by the kernel for the
// configured timeouts; everything else is answered with zero timeouts, so
// each walk reaches the daemon with the real caller. Listings are kept by
// the kernel only on mounts where every caller gets the same one (a view,
// or no rules), which are also served without OPENDIR (dirlist.go).
// Negative lookups are cached
// only where the name is absent for everyone. Changes made to the backing
// folders behind the mount's back are turned into kernel invalidations
// (Changed).
//
// Hidden names (hidden.go): an operation that makes or moves something onto
// a name the caller may not read (create, mkdir, mknod, symlink, link,
// rename) is refused with EACCES, decided by the read rule before the
// backing folder is asked, so the answer is the same whether or not a file
// has that name and nothing there is touched. Every other operation on a
// hidden name fails at its lookup with ENOENT, as on a free name.
//
// Reload: everything a config decides (the policy, the sources, the memo
// of uniform answers) is one immutable state behind an atomic pointer;
// each request loads it once. FS.Reload publishes a new state, waits for
// the requests decided by the old one that can answer with cacheable
// entries (counted by the raw wrapper, negCache), and then invalidates in
// every mount what the new state decides differently (reload.go).
package fs
