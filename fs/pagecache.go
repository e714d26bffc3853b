package fs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Files read again are served from the kernel's page cache (issue 15).
//
// A file opened with passthrough is read from the backing file, and the
// kernel marks its access time stale after every such read
// (fuse_file_accessed in fs/fuse/passthrough.c), so the next stat or
// fstat of it is a GETATTR, which also drops the ACL the kernel cached for
// it (one more GETXATTR for a caller that does not own it). A warm
// `grep -r` in a view cost four round trips a file: OPEN, GETATTR,
// GETXATTR, RELEASE. A file read through the kernel's page cache with
// FOPEN_KEEP_CACHE costs OPEN and RELEASE once its pages are in, and
// nothing marks its attributes stale.
//
// Not every open can be cached. The kernel opens an inode in one mode at
// a time — cached, or passthrough — and fails an open of the other mode
// with EIO while any is open (fs/fuse/iomode.c); go-fuse gives every open
// of an inode with a passthrough open the same backing file, so the daemon
// must never offer passthrough while the node has a cached open. And the
// kernel reads cached pages up to the size its attributes give, where a
// passthrough read finds the backing file's real end. So a read-only open
// is cached only when
//
//   - the file is a regular file of at most pageCacheMax bytes, opened
//     without O_DIRECT, in a folder the watcher covers (so a change behind
//     the mount reaches the kernel's attributes and pages), decided alike
//     for every caller (a view, a mount without rules, or a name no rule
//     tells apart: the pages are the backing file's for whoever the
//     policy lets open it, and no principal's held layer shows another
//     file there). Each open is still decided for its caller; an open
//     the kernel is not told to keep the pages at drops them. On a
//     read-only mount the kernel does not mark access times stale
//     (fuse_invalidate_atime checks IS_RDONLY), so there cached mode
//     would only add the read-in;
//   - it is unchanged (inode, size, ctime) since the previous open of
//     the node, or it is the node's first cached open and the file is at
//     most firstStoreMax bytes. So the first open of a larger file, and
//     the first after a change, goes passthrough (a large file read once
//     is not copied into a second page cache). A small file is cached
//     from its first open: passthrough would mark its access time stale,
//     and its next stat or fstat (grep's, at its second read) would cost
//     a GETATTR and, for a caller that does not own it, a GETXATTR of its
//     ACL. The open that brings a file into the page cache stores its
//     content there itself (storePages), so no READ follows;
//   - its last change is older than pageCacheSettle, past the watcher's
//     latency and the time it holds the echo of the mount's own changes
//     (ownWindow), so the kernel has heard of it.
//
// The kernel keeps the node's pages across opens (FOPEN_KEEP_CACHE) only
// while the file is as it was when they were last read in: any change to
// it — through the mount, through another view, behind it — moves its
// ctime, and the next open drops them. Every other open (a write, a large
// file, a first read) goes passthrough unless a cached open of the node is
// still live, in which case it is cached too, without keeping pages: an
// O_APPEND writer then appends at the backing file's real end (its
// descriptor is switched to O_APPEND), and when that was not where the
// kernel thought the end was, the node's pages and attributes are dropped
// at once (dropPages), so nothing is written over and nothing stale is
// read for longer than the kernel takes to hear of it.
type pageCache struct {
	mu    sync.Mutex
	seen  stamp // the file as the previous open of the node found it
	pages stamp // the file the kernel's pages of the node were read from; zero when unknown
	live  int   // open handles the kernel serves in cached mode
	// cached is set once the kernel has served an open of the node in
	// cached mode: until then it holds no page of it (passthrough reads
	// and mappings go to the backing file).
	cached bool
}

// stamp identifies one state of a file's content: every change to a
// file, a utimes included, moves its ctime (since 6.13 a change after a
// stat gets a fine-grained one, so two never share it once the daemon
// looked).
type stamp struct {
	ino, size uint64
	ctime     int64 // ns
}

func stampOf(st *unix.Stat_t) stamp {
	return stamp{ino: st.Ino, size: uint64(st.Size), ctime: st.Ctim.Nano()}
}

const (
	// pageCacheMax is the largest file served from the page cache:
	// larger ones (packfiles, media, build output) stay passthrough,
	// which streams them without a daemon copy or a second cache.
	pageCacheMax = 1 << 20
	// pageCacheSettle is how long a file must have stayed unchanged.
	pageCacheSettle = 2 * ownWindow
	// firstStoreMax is the largest file cached from its first open: the
	// copy (a pread and a store into the kernel's pages) then costs the
	// OPEN a few microseconds, against two round trips at its next
	// read; most source files are smaller.
	firstStoreMax = 64 << 10
)

// cacheOpen decides a read-only open of n at rel, whose descriptor
// fstat'ed as st, for h: it returns FOPEN_KEEP_CACHE when the kernel's
// pages may be kept, and marks h to be served in cached mode (see
// fileHandle.PassthroughFd) when the file is small or read again
// unchanged.
func (n *node) cacheOpen(h *fileHandle, w who, rel string, flags uint32, st *unix.Stat_t) uint32 {
	if flags&syscall.O_DIRECT != 0 || st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Size > pageCacheMax {
		return 0
	}
	if n.t.readOnly || !n.t.uniform(w.s, n.slug, rel) || !n.t.fs.watched(n.slug, rel) {
		return 0
	}
	s := stampOf(st)
	settled := time.Since(time.Unix(0, s.ctime)) > pageCacheSettle
	pc := &n.pc
	pc.mu.Lock()
	again := s == pc.seen
	pc.seen = s
	kept := s == pc.pages
	first := !pc.cached && s.size <= firstStoreMax
	pc.mu.Unlock()
	if !again && !first || !settled {
		return 0
	}
	h.cacheAt = s
	if kept || n.storePages(h.rawFd, s) {
		return fuse.FOPEN_KEEP_CACHE
	}
	return 0
}

// storePages puts the content of the file open at fd, whose fstat gave s,
// into the kernel's page cache of n (FUSE_NOTIFY_STORE) before the open
// that reads it in is answered, and reports whether the kernel now holds
// it all, as the file is: the open may then keep the pages.
//
// Without it the kernel read the pages in through READ requests after
// the open, and a READ marks the node's access time stale
// (fuse_readpages_end calls fuse_invalidate_atime), so the next stat of
// the file was a GETATTR too: a file read three times cost OPEN,
// RELEASE; OPEN, GETATTR, READ, RELEASE; OPEN, GETATTR, RELEASE. A
// store is one write to /dev/fuse, not a round trip, and marks nothing
// stale.
//
// What the kernel holds of n at this point was read from the file as s
// has it. At the node's first cached open it holds nothing. Otherwise the
// open before this one found s too, and an open without FOPEN_KEEP_CACHE
// dropped every page then; pages read in since, through a handle still
// open, came from the backing file. A change between the
// read here and the store is caught by the second fstat: the open is
// then answered without FOPEN_KEEP_CACHE, which drops the pages; a
// change after it moves the ctime and reaches the kernel as every change
// does (the watcher, or the change made through the mount).
func (n *node) storePages(fd int, s stamp) bool {
	if s.size == 0 {
		return true
	}
	bp := storeBufs.Get().(*[]byte)
	defer storeBufs.Put(bp)
	buf := (*bp)[:s.size]
	for off := 0; off < len(buf); {
		k, err := unix.Pread(fd, buf[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil || k == 0 {
			return false // shorter than s says: it changed
		}
		off += k
	}
	if n.WriteCache(0, buf) != 0 {
		return false
	}
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && stampOf(&st) == s
}

// storeBufs holds buffers of pageCacheMax bytes for storePages.
var storeBufs = sync.Pool{New: func() any {
	b := make([]byte, pageCacheMax)
	return &b
}}

// mode decides whether the kernel serves h with passthrough: go-fuse asks
// (PassthroughFd) only while the node has no passthrough open, and
// serves the open in cached mode when told no.
func (f *fileHandle) mode() bool {
	pc := &f.n.pc
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if f.passthr && f.cacheAt == (stamp{}) && pc.live == 0 {
		return true
	}
	f.cached = true
	pc.cached = true
	pc.live++
	// The open drops the pages unless it keeps them (cacheOpen), and
	// what is read in from now on is the file at cacheAt; a cached
	// open that was not asked for (a writer joining live readers, or
	// passthrough off) leaves them unknown.
	pc.pages = f.cacheAt
	if f.appender {
		// Append where the backing file ends, not where the kernel
		// last knew it to (see the type's comment).
		if fl, err := unix.FcntlInt(uintptr(f.rawFd), unix.F_GETFL, 0); err == nil {
			unix.FcntlInt(uintptr(f.rawFd), unix.F_SETFL, fl|unix.O_APPEND)
		}
	}
	return false
}

// released forgets a cached open, once its RELEASE is done: ctx is the
// Release's, and when negCache.Release serves it, the open is forgotten
// after go-fuse has dropped its reference to the node's backing file (see
// negCache.Release). Until then the node counts the open as live, so no
// passthrough open of the node is let in.
//
// Without that, a RELEASE of a cached open served beside the OPEN of a
// passthrough one — a reader closing as a writer opens: the kernel has
// let go of the cached open before it sends RELEASE, so the kernel
// allows the passthrough open — let the OPEN find no live cached open
// and register a backing file, which go-fuse's release of the cached
// handle then unregistered: the kernel failed that open with EIO (its
// backing id was gone), or the next passthrough open of the inode, with
// another backing file while the first was still in use (EBUSY), with
// EIO too. stress-ng's lease stressor, a process opening a file for
// appending and for reading by turns with others opening it for writing,
// failed that way within seconds (tests/pagecache_test.go).
func (f *fileHandle) released(ctx context.Context) {
	if !f.cached {
		return
	}
	if c, ok := ctx.(*fuse.Context); ok && c.Cancel != nil {
		if rs, ok := f.n.t.fs.releasing.Load(c.Cancel); ok {
			rs.(*cachedRelease).pc = &f.n.pc
			return
		}
	}
	f.n.pc.forgetOpen()
}

// forgetOpen forgets one cached open of the node.
func (pc *pageCache) forgetOpen() {
	pc.mu.Lock()
	pc.live--
	pc.mu.Unlock()
}

// cachedRelease is the cached open one RELEASE ends, if it ends one.
type cachedRelease struct{ pc *pageCache }

// appended checks a cached appender's write that ended at end in the
// kernel's view: when the backing file ends elsewhere, another writer
// had made it longer than the kernel knew, the bytes went to the real
// end, and the kernel's pages and size are wrong until dropped.
func (f *fileHandle) appended(end int64) {
	var st unix.Stat_t
	if unix.Fstat(f.rawFd, &st) == nil && st.Size == end {
		return
	}
	f.n.dropPages()
}

// dropPages makes the kernel forget n's pages and attributes and the
// next open read them afresh; sent from a goroutine, as every
// invalidation (never from inside a request).
func (n *node) dropPages() {
	n.pc.mu.Lock()
	n.pc.pages = stamp{}
	n.pc.mu.Unlock()
	go func() {
		if !n.t.fs.stopped.Load() {
			n.NotifyContent(0, 0)
		}
	}()
}
