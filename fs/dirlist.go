package fs

import (
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// noOpendir serves a mount's folders without OPENDIR and RELEASEDIR round
// trips (issue 15). Once the daemon answers one OPENDIR with ENOSYS, a
// kernel that offered FUSE_NO_OPENDIR_SUPPORT (Linux ≥ 5.1) stops sending
// OPENDIR and RELEASEDIR for the whole mount: every opendir(3) succeeds in
// the kernel with file handle 0 and the listing is cached as if the daemon
// had answered FOPEN_CACHE_DIR|FOPEN_KEEP_CACHE (fs/fuse/file.c,
// fuse_file_open). That is sound only where every caller gets the same
// listing, so the tree uses it only in a view (a main mount may get
// per-principal rules at a reload) — the kernel never asks again who is
// listing.
// The cached listing is dropped when the folder changes through the mount
// (the kernel bumps the folder's version), when the watcher invalidates
// the folder's content, and at the next opendir after its attributes
// expire when its mtime has moved (AUTO_INVAL_DATA; kernels since 6.13
// give a change right after a stat a fine-grained mtime, so two changes
// never share one).
//
// go-fuse's bridge keeps a folder's listing in the handle made at OPENDIR
// and answers READDIR with handle 0 with nothing, so READDIR and
// READDIRPLUS with handle 0 are served here: the folder is opened through
// the bridge with the request's own caller (the node's OpendirHandle
// decides policy and lists it as before), and the handle is kept for the
// next chunk of the same listing, keyed by node, until the listing ends
// (an empty reply), so a folder is listed once per opendir(3), not once
// per chunk.
type noOpendir struct {
	fuse.RawFileSystem // the bridge
	t                  *tree
	srv                *fuse.Server

	mu      sync.Mutex
	streams []dirStream // most recently used last; at most maxStreams
}

// dirStream is a listing in progress: a bridge handle of node, whose next
// chunk starts at off.
type dirStream struct {
	node, fh, off uint64
}

// maxStreams bounds the listings kept between chunks. A reader that stops
// before the end (`ls | head`, a crashed find) leaves its handle here until
// it is pushed out.
const maxStreams = 64

func (n *noOpendir) Init(s *fuse.Server) {
	n.srv = s
	n.RawFileSystem.Init(s)
}

// supported reports whether the kernel offered FUSE_NO_OPENDIR_SUPPORT: an
// older kernel returns an ENOSYS from OPENDIR to the caller.
func (n *noOpendir) supported() bool {
	return n.srv != nil && n.srv.KernelSettings().Flags64()&fuse.CAP_NO_OPENDIR_SUPPORT != 0
}

// OpenDir answers ENOSYS once the folder could be opened by the caller, so
// the first opendir(3) of the mount fails for no one: a caller refused by
// the node (a view's stranger, a missing source) gets its error, and the
// kernel asks again at the next opendir.
func (n *noOpendir) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := n.RawFileSystem.OpenDir(cancel, in, out)
	if st != fuse.OK || !n.supported() {
		return st
	}
	n.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: in.InHeader, Fh: out.Fh})
	*out = fuse.OpenOut{}
	return fuse.ENOSYS
}

func (n *noOpendir) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if in.Fh != 0 {
		return n.RawFileSystem.ReadDir(cancel, in, out)
	}
	return n.read(cancel, in, out, n.RawFileSystem.ReadDir)
}

func (n *noOpendir) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if in.Fh != 0 {
		return n.RawFileSystem.ReadDirPlus(cancel, in, out)
	}
	return n.read(cancel, in, out, n.RawFileSystem.ReadDirPlus)
}

// read serves one chunk of a listing without an opendir handle. Offset 0
// starts a new listing (opendir or rewinddir: the folder is read afresh);
// a later offset continues the listing of the same node that stopped
// there, or, when none did (a seekdir, or a stream pushed out), any
// listing of the node, or a new one, which the bridge seeks (the offsets
// are positions in the listing).
func (n *noOpendir) read(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList, serve func(<-chan struct{}, *fuse.ReadIn, *fuse.DirEntryList) fuse.Status) fuse.Status {
	if _, errno := n.t.caller(&fuse.Context{Caller: in.Caller, Cancel: cancel}); errno != 0 {
		return fuse.Status(errno)
	}
	var fh uint64
	if in.Offset != 0 {
		fh = n.take(in.NodeId, in.Offset)
	}
	if fh == 0 {
		var oo fuse.OpenOut
		if st := n.RawFileSystem.OpenDir(cancel, &fuse.OpenIn{InHeader: in.InHeader, Flags: syscall.O_RDONLY}, &oo); st != fuse.OK {
			return st
		}
		fh = oo.Fh
	}
	r := *in
	r.Fh = fh
	st := serve(cancel, &r, out)
	if st != fuse.OK || out.Offset == in.Offset {
		// An error, or the end of the listing: the kernel asks no more.
		n.release(in.InHeader, fh)
		return st
	}
	n.put(dirStream{node: in.NodeId, fh: fh, off: out.Offset}, in.InHeader)
	return st
}

// take removes and returns the handle of a listing of node, preferring the
// one that stopped at off; 0 if there is none.
func (n *noOpendir) take(node, off uint64) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	pick := -1
	for i, s := range n.streams {
		if s.node == node {
			pick = i
			if s.off == off {
				break
			}
		}
	}
	if pick < 0 {
		return 0
	}
	fh := n.streams[pick].fh
	n.streams = append(n.streams[:pick], n.streams[pick+1:]...)
	return fh
}

// put keeps s for the next chunk, pushing out the least recently used
// listing when there are too many.
func (n *noOpendir) put(s dirStream, h fuse.InHeader) {
	n.mu.Lock()
	n.streams = append(n.streams, s)
	var old dirStream
	if len(n.streams) > maxStreams {
		old = n.streams[0]
		n.streams = append(n.streams[:0], n.streams[1:]...)
	}
	n.mu.Unlock()
	if old.fh != 0 {
		h.NodeId = old.node
		n.release(h, old.fh)
	}
}

func (n *noOpendir) release(h fuse.InHeader, fh uint64) {
	n.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: h, Fh: fh})
}

// Forget first closes the kept listings of the node: the bridge drops a
// forgotten node's entry, handles and all, and releasing a handle of a
// node it no longer knows would panic. The kernel forgets a node only once
// nothing holds it, so no READDIR on it is in flight.
func (n *noOpendir) Forget(node, nlookup uint64) {
	n.mu.Lock()
	var drop []dirStream
	kept := n.streams[:0]
	for _, s := range n.streams {
		if s.node == node {
			drop = append(drop, s)
		} else {
			kept = append(kept, s)
		}
	}
	n.streams = kept
	n.mu.Unlock()
	for _, s := range drop {
		n.release(fuse.InHeader{NodeId: s.node}, s.fh)
	}
	n.RawFileSystem.Forget(node, nlookup)
}

// releaseAll closes every kept listing (at unmount).
func (n *noOpendir) releaseAll() {
	n.mu.Lock()
	streams := n.streams
	n.streams = nil
	n.mu.Unlock()
	for _, s := range streams {
		n.release(fuse.InHeader{NodeId: s.node}, s.fh)
	}
}

// listingMayChange gives a virtual folder whose listing changes without
// any request through the mount (the branches in .revs/, the top of a
// git-pinned source whose rev moves) a new mtime at every stat. Where the
// kernel keeps listings (noOpendir), it compares the folder's mtime at
// each opendir once its attributes expired (they are never cached for
// these folders) and then reads the listing again.
func listingMayChange(out *fuse.Attr) {
	now := time.Now()
	out.Mtime, out.Mtimensec = uint64(now.Unix()), uint32(now.Nanosecond())
}
