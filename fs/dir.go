package fs

import (
	"context"
	"sync"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/held"
)

// dirHandle is an open folder: its entries are read once, at the first
// readdir, filtered by the caller's read policy and completed with virtual
// entries, then served by offset. The kernel caches a listing only where
// every caller gets the same one (see OpendirHandle; DESIGN.md §11), and
// then often serves it from its cache without a readdir, so nothing is
// read until one comes.
type dirHandle struct {
	mu      sync.Mutex
	fd      int         // the backing folder, for fsyncdir; -1 for virtual folders
	lay     *held.Layer // the layer of a caller that holds the folder (openHeldDir), for fsyncdir
	entries []fuse.DirEntry
	idx     int
	// load lists the folder at the first readdir (nil once done);
	// relist is the same for a plain folder, kept for a rewind after a
	// reload (Seekdir).
	load, relist func() syscall.Errno
	// quota is whose open the backing descriptor counts (openquota.go).
	quota opener

	// For READDIRPLUS: the folder's node and the stat of each entry, taken
	// at opendir through the same confined descriptor that was listed, so
	// the kernel's per-entry lookups cost no further path walks.
	n     *node
	rel   string
	stats map[string]unix.Stat_t
	// brief are the names whose READDIRPLUS entries are left empty (see
	// node.brief). They have no stat in stats.
	brief map[string]bool
	// s is the state the listing was filtered by.
	s *state

	// In a main mount with rules that differ by principal (keptList):
	// shared is set on a handle the kernel was told it may keep the
	// listing of for every caller, so it lists only the names decided
	// alike for everyone; stamp is the folder's at opendir, for the
	// record the listing leaves (nil: none).
	shared bool
	stamp  *stamp
	alike  bool // the listing found only names decided alike for everyone
}

var (
	_ = (fusefs.FileReaddirenter)((*dirHandle)(nil))
	_ = (fusefs.FileSeekdirer)((*dirHandle)(nil))
	_ = (fusefs.FileReleasedirer)((*dirHandle)(nil))
	_ = (fusefs.FileFsyncdirer)((*dirHandle)(nil))
	_ = (fusefs.FileLookuper)((*dirHandle)(nil))
)

// Lookup answers the lookups the kernel makes for READDIRPLUS from the stat
// taken at opendir; names it did not list go to the node's own Lookup.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	d.mu.Lock()
	d.loadLocked()
	st, ok := d.stats[name]
	brief := d.brief[name]
	s := d.s
	d.mu.Unlock()
	if d.n == nil {
		return nil, syscall.ENOENT
	}
	if brief {
		// Any error leaves the entry empty (go-fuse's readDirMaybeLookup
		// then adds no node): the kernel shows the name as a plain dirent.
		return nil, syscall.ENOENT
	}
	if !ok || s != d.n.t.fs.state() {
		// Not listed, or listed under a config a reload replaced: decide
		// afresh.
		return d.n.Lookup(ctx, name, out)
	}
	crel := join(d.rel, name)
	d.n.entry(out, s, crel, &st)
	return d.n.foundChild(ctx, name, &st), 0
}

// loadLocked lists the folder if that has not been done yet.
func (d *dirHandle) loadLocked() syscall.Errno {
	if d.load == nil {
		return 0
	}
	errno := d.load()
	d.load = nil
	return errno
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if errno := d.loadLocked(); errno != 0 {
		return nil, errno
	}
	if d.idx >= len(d.entries) {
		return nil, 0
	}
	e := d.entries[d.idx]
	d.idx++
	e.Off = uint64(d.idx)
	return &e, 0
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off == 0 && d.relist != nil && d.load == nil && d.s != d.n.t.fs.state() {
		// A rewind of a folder listed under a config a reload replaced
		// lists it afresh, by the running config: a narrowed rule holds
		// for a handle opened before it too. (Plain folders only: a
		// held layer's listing is not redone.)
		if d.fd >= 0 {
			if _, err := unix.Seek(d.fd, 0, 0); err != nil {
				return toErrno(err)
			}
		}
		d.entries, d.idx, d.load = nil, 0, d.relist
	}
	if errno := d.loadLocked(); errno != 0 {
		return errno
	}
	if off > uint64(len(d.entries)) {
		return syscall.EINVAL
	}
	d.idx = int(off)
	return 0
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	if d.n != nil {
		d.n.handles.remove(d)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
		d.n.t.fs.opens.give(d.quota) // taken by openDir, the only maker with a descriptor
	}
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lay != nil {
		// A folder as a principal with a layer sees it: what it holds
		// there is in its layer.
		return toErrno(d.lay.Sync(d.rel))
	}
	if d.fd < 0 {
		return 0
	}
	return toErrno(unix.Fsync(d.fd))
}

// openDir makes the handle of the open backing folder fd (at rel) for the
// caller; it is listed at the first readdir. The handle takes fd.
func (n *node) openDir(w who, rel string, fd int) *dirHandle {
	d := &dirHandle{fd: fd, n: n, rel: rel}
	d.load = func() syscall.Errno { return d.list(w) }
	d.relist = d.load
	if fd >= 0 {
		// Reached through it once the folder is removed (orphan.go).
		n.handles.add(d)
		d.quota = quotaKey(w)
		n.t.fs.opens.take(d.quota)
	}
	return d
}

// list reads the folder's entries for the caller (d.mu held).
func (d *dirHandle) list(w who) syscall.Errno {
	n, rel, fd := d.n, d.rel, d.fd
	d.stats = map[string]unix.Stat_t{}
	d.brief = map[string]bool{}
	if fd < 0 {
		return syscall.EBADF
	}
	if s := n.t.fs.state(); w.s != s {
		// Opened before a reload: list by the running config.
		var errno syscall.Errno
		if w, errno = n.t.resolve(s, w.uid, w.gid, w.pid); errno != 0 {
			return errno
		}
	}
	d.s = w.s
	filter := !(w.s.trivial && n.t.view == "") && w.s.pol != nil
	hide := n.hidden(rel)
	dev := ^uint64(0) // the folder's device, for brief entries' inode numbers
	alike := true     // every name listed is decided alike for everyone
	ask := d.shared || d.stamp != nil
	buf := make([]byte, 64*1024)
	for {
		cnt, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return toErrno(err)
		}
		if cnt <= 0 {
			break
		}
		b := buf[:cnt]
		for len(b) > 0 {
			var de fuse.DirEntry
			used := de.Parse(b)
			if used <= 0 {
				break
			}
			b = b[used:]
			if de.Name == "." || de.Name == ".." {
				de.Off = 0
				d.entries = append(d.entries, de)
				continue
			}
			if hide != nil && hide[de.Name] {
				n.t.fs.shadow(n.slug, join(rel, de.Name))
				continue
			}
			if daemonName(de.Name) {
				continue
			}
			crel := join(rel, de.Name)
			uni := n.t.uniform(w.s, n.slug, crel) // true at once where every caller is decided alike
			if ask && !uni {
				alike = false
				if d.shared {
					continue // not in a listing kept for everyone
				}
			}
			if filter && !n.t.canRead(w, n.slug, crel) {
				continue
			}
			// A brief entry needs no stat: getdents gave its type (unless
			// the backing filesystem does not tell) and inode number.
			if de.Mode != 0 && n.brief(w, crel, uni) {
				if filter && !layerShows(w.s, n.slug, crel, de.Mode) {
					continue
				}
				if dev == ^uint64(0) {
					var st unix.Stat_t
					if err := unix.Fstat(fd, &st); err != nil {
						return toErrno(err)
					}
					dev = layerDev(n.src, st.Dev)
				}
				d.brief[de.Name] = true
				de.Ino = n.t.fs.ino(dev, de.Ino)
				de.Off = 0
				d.entries = append(d.entries, de)
				continue
			}
			var cst unix.Stat_t
			if unix.Fstatat(fd, de.Name, &cst, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue // removed meanwhile
			}
			if filter && !layerShows(w.s, n.slug, crel, cst.Mode) {
				continue
			}
			d.stats[de.Name] = cst
			de.Ino = n.ino(&cst)
			de.Mode = cst.Mode & syscall.S_IFMT
			de.Off = 0
			d.entries = append(d.entries, de)
		}
	}
	d.alike = alike
	switch {
	case d.stamp != nil:
		n.listed.Store(&listRecord{s: w.s, rel: rel, stamp: *d.stamp, alike: alike})
	case d.shared && !alike:
		// A name decided per principal came since the last record: the
		// next opendir lists afresh, and the kernel drops its copy.
		n.listed.Store(&listRecord{s: w.s})
	}
	return 0
}

// brief reports whether the READDIRPLUS entry of child crel (uniform:
// decided alike for every caller) is better
// left empty (node id 0: a plain dirent, name, type and inode number, to
// the kernel; fs/fuse/readdir.c, fuse_direntplus_link) than filled with a
// stat: when its entry and attribute timeouts are zero (a name the policy
// decides differently per principal in the main mount), the kernel looks
// it up again at its next use anyway, and a full entry would only cost a
// stat here and an inode on both sides. Names whose entries the kernel
// may keep always get full entries (README, "Brief READDIRPLUS entries").
func (n *node) brief(w who, crel string, uniform bool) bool {
	if n.t.cacheAll(w.s) && w.s.tm.Entry > 0 {
		return false // every timeout here is EntryTimeout or WatchedTimeout > 0
	}
	return n.t.entryTimeout(w.s, n.slug, crel, uniform) == 0
}
