package fs

import (
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Kept listings in a main mount whose rules differ by principal (issue 15).
//
// The kernel keeps one listing per folder and serves it to every open of
// the folder the daemon answers FOPEN_CACHE_DIR|FOPEN_KEEP_CACHE; an open
// answered without FOPEN_KEEP_CACHE drops it (fs/fuse/dir.c,
// fuse_dir_open), and only reads through an open answered
// FOPEN_CACHE_DIR fill it (fs/fuse/readdir.c). A main mount still sends
// every OPENDIR (it never answers ENOSYS, dirlist.go), so the daemon
// decides at each open, for its caller, whether the kept listing may be
// served:
//
//   - A folder's listing is offered for keeping only when the last full
//     listing of it (any caller's) had no name the policy decides
//     differently for different callers, under the running config and at
//     the folder's present path (a folder above it renamed behind the
//     mount moves the node, not the folder's stamp), and the folder's
//     stamp (inode, size, ctime) has not moved since; and,
//     as in a mount with no rules, only where the watcher tells the
//     kernel of changes behind the mount.
//   - A handle so offered (dirHandle.shared) lists only names decided
//     alike for everyone, whoever opened it. What the kernel keeps is
//     therefore the same for every caller whatever came into the folder
//     meanwhile: a name decided per principal that came after the record
//     is left out of that listing (as a name added after opendir may be),
//     and the listing records that, so the next open lists afresh and
//     drops the kernel's copy.
//   - Nothing of this depends on the record for safety: the record only
//     decides when a kept listing is complete.
//   - A reload makes every record stale (it names the state it was
//     decided by), so the next open of each folder drops the kernel's
//     copy, and prune drops the copies of folders the kernel knows at once
//     (reload.go), for processes that hold them open.
//
// The opening caller's own right to list the folder is decided at every
// OPENDIR, as before.

// listRecord is what the last full listing of a folder found.
type listRecord struct {
	s     *state // the config it was decided by
	rel   string // the folder's path it was decided for
	stamp stamp  // the folder as that listing found it (pagecache.go)
	alike bool   // every name was decided alike for every caller
}

// keptList decides, for a plain open d of the backing folder fd at rel in
// a main mount whose rules differ by principal, whether the kernel may
// keep and serve the folder's listing, and sets up d for it. It returns
// the open flags, or an error of listing the folder.
//
// A folder with no record under the running config and its present stamp
// is listed at once when opendir(3) opens it (O_DIRECTORY|O_NONBLOCK, as
// glibc and fts open a folder they read: its first readdir would list it
// anyway), so the open that records it may already be kept. Other opens
// of a folder (for fsync, fchdir, or as a descriptor for *at calls) are
// listed only if they read, so that a program fsyncing a large folder
// after each file it makes does not list the folder each time.
func (n *node) keptList(w who, rel string, fd int, flags uint32, d *dirHandle) (uint32, syscall.Errno) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return 0, 0
	}
	stamp := stampOf(&st)
	watched := n.t.fs.watched(n.slug, rel)
	if rec := n.listed.Load(); rec != nil && rec.s == w.s && rec.rel == rel && rec.stamp == stamp {
		if rec.alike && watched {
			d.shared = true
			return fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, 0
		}
		return 0, 0 // as it was: a plain listing
	}
	d.stamp = &stamp
	if !watched || flags&(syscall.O_DIRECTORY|syscall.O_NONBLOCK) != syscall.O_DIRECTORY|syscall.O_NONBLOCK {
		return 0, 0 // recorded at its readdir, if one comes
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if errno := d.loadLocked(); errno != 0 {
		return 0, errno
	}
	if !d.alike || d.s != w.s {
		return 0, 0
	}
	// Every name is decided alike for everyone: this listing is the one
	// a shared handle would make.
	d.shared = true
	return fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, 0
}

// keptListing reports whether the kernel may keep a listing of in that
// a reload must drop.
func keptListing(in *fusefs.Inode) bool {
	n, ok := in.Operations().(*node)
	if !ok {
		return false
	}
	rec := n.listed.Load()
	return rec != nil && rec.alike
}
