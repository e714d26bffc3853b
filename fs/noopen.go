package fs

import (
	"container/list"
	"context"
	"sync"
	"syscall"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// noOpen serves a read-only view's files without OPEN and RELEASE round
// trips (issue 15). Once the daemon answers one OPEN with ENOSYS, a kernel
// that offered FUSE_NO_OPEN_SUPPORT stops sending OPEN and
// RELEASE for the whole mount: every open(2) of a file succeeds in the
// kernel with file handle 0, as if the daemon had answered
// FOPEN_KEEP_CACHE (fs/fuse/file.c, fuse_file_open), so a warm `grep -r`
// costs no request at all. The kernel never asks again who opens what,
// so every decision made at OPEN is made elsewhere in such a view:
//
//   - Read: at each READ, which opens the file for the request's caller
//     through node.Open (policy, held layer, the node's identity), reads
//     and closes it. Pages the kernel keeps were read under that check;
//     a reload that hides a file drops its pages with its name (prune).
//   - Exec: a regular file the principal may not execute shows no execute
//     bits in the view (maskExec), so execve(2) fails in the kernel's own
//     permission check (EACCES, as the daemon's refusal; no audit line).
//   - Write: the view is read-only; the kernel refuses every write first.
//   - Virtual files (.status, .neuralis/): rendered at GETATTR, which
//     reports their size, and read from that snapshot (ctlFile).
//
// Locks are the kernel's own on every mount (EnableLocks is off), LSEEK
// answers ENOSYS (the kernel then seeks by the size it knows), and FLUSH
// already answers ENOSYS. Only read-only views use it: a writable file
// needs its OPEN (truncation, the journal's copy, held writes), and the
// main mount may get per-principal rules at a reload.
type noOpen struct {
	fuse.RawFileSystem // the bridge, or what wraps it
	srv                *fuse.Server
}

func (n *noOpen) Init(s *fuse.Server) {
	n.srv = s
	n.RawFileSystem.Init(s)
}

// supported reports whether the kernel offered FUSE_NO_OPEN_SUPPORT: an
// older kernel returns an ENOSYS from OPEN to the caller.
func (n *noOpen) supported() bool {
	return n.srv != nil && n.srv.KernelSettings().Flags64()&fuse.CAP_NO_OPEN_SUPPORT != 0
}

// Open answers ENOSYS once the file could be opened by the caller, so the
// first open(2) of the mount fails for no one: a caller the node refuses
// gets its error, and the kernel asks again at the next open.
func (n *noOpen) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := n.RawFileSystem.Open(cancel, in, out)
	if st != fuse.OK || !n.supported() {
		return st
	}
	n.RawFileSystem.Release(cancel, &fuse.ReleaseIn{InHeader: in.InHeader, Fh: out.Fh, Flags: in.Flags})
	*out = fuse.OpenOut{}
	return fuse.ENOSYS
}

// readNoHandle serves a READ the kernel sent with handle 0 (an open it
// made without asking): the caller opens the file as an OPEN would,
// and the bytes are copied out before the descriptor is closed.
func (n *node) readNoHandle(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	fh, _, errno := n.Open(ctx, syscall.O_RDONLY)
	if errno != 0 {
		return nil, errno
	}
	h := fh.(*fileHandle)
	defer h.Release(ctx)
	res, errno := h.Read(ctx, dest, off)
	if errno != 0 {
		return nil, errno
	}
	b, st := res.Bytes(dest)
	res.Done()
	if !st.Ok() {
		return nil, syscall.Errno(st)
	}
	return fuse.ReadResultData(b), 0
}

// Read reads through the handle, or, with none, as readNoHandle.
func (n *node) Read(ctx context.Context, f fusefs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if r, ok := f.(fusefs.FileReader); ok {
		return r.Read(ctx, dest, off)
	}
	if f != nil {
		return nil, syscall.EBADF
	}
	return n.readNoHandle(ctx, dest, off)
}

// maskExec clears the execute bits of a regular file the view's principal
// may not execute, in a view served without OPEN (noOpen), where the
// kernel's permission check is the only one an execve(2) meets.
func (t *tree) maskExec(s *state, slug, rel string, out *fuse.Attr) {
	if t.noOpen && out.Mode&syscall.S_IFMT == syscall.S_IFREG && out.Mode&0o111 != 0 && !s.execs(t.view, slug, rel) {
		out.Mode &^= 0o111
	}
}

// ctlSnap is a virtual file's content as last rendered for a GETATTR
// without a handle: for which process and when (also its mtime, so the
// kernel, which drops its pages when a file's mtime or size moves,
// AUTO_INVAL_DATA, never keeps pages of another rendering).
type ctlSnap struct {
	data []byte
	pid  uint32
	gen  uint64 // FS.vgen
	at   time.Time
}

// snapReuse is how long one process reading a virtual file is served one
// rendering of it: `cat` alone asks for the attributes three times (its
// fstat, and before its first read and its last, AUTO_INVAL_DATA), and
// rendering each time would cost three renderings of .status or three
// searches, and could give a reader the start of one and the end of
// another.
const snapReuse = time.Second

// snapshot renders c for the caller, or gives the rendering the same
// process was given less than snapReuse ago when no change reached the
// daemon since, and keeps it for the READs that follow.
func (c *ctlFile) snapshot(ctx context.Context) (*ctlSnap, syscall.Errno) {
	w, errno := c.t.caller(ctx)
	if errno != 0 {
		return nil, errno
	}
	gen := c.t.fs.vgen.Load()
	if old := c.snap.Load(); old != nil && old.pid == w.pid && old.gen == gen && time.Since(old.at) < snapReuse {
		return old, 0
	}
	data, err := c.content(ctx, w)
	if err != nil {
		return nil, toErrno(err)
	}
	s := &ctlSnap{data: data, pid: w.pid, gen: gen, at: time.Now()}
	c.snap.Store(s)
	return s, 0
}

// revCache bounds the commit files' content a view without OPEN keeps on
// their nodes (revNode.Read): the kernel may hold a node long after its
// last read, and a READ without the content would read the whole blob
// from git again. The content kept least recently goes first once the
// total passes revCacheMax; the newest is kept whatever its size.
type revCache struct {
	mu    sync.Mutex
	lru   list.List // of *revNode, least recently kept first
	bytes int
}

const revCacheMax = 64 << 20

// keep keeps b as n's content.
func (c *revCache) keep(n *revNode, b *bytesHandle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop(n)
	n.data.Store(b)
	n.elem = c.lru.PushBack(n)
	c.bytes += len(b.data)
	for c.bytes > revCacheMax && c.lru.Len() > 1 {
		c.drop(c.lru.Front().Value.(*revNode))
	}
}

// forget drops what n keeps.
func (c *revCache) forget(n *revNode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop(n)
}

func (c *revCache) drop(n *revNode) {
	if n.elem == nil {
		return
	}
	c.lru.Remove(n.elem)
	n.elem = nil
	if b := n.data.Swap(nil); b != nil {
		c.bytes -= len(b.data)
	}
}
