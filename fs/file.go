package fs

import (
	"context"
	"sync/atomic"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/held"
)

// fileHandle is an open backing file. Reads and writes go to the backing
// descriptor (or, with passthrough, straight from the kernel to it, and
// never reach us); on release of a handle that could have written, the
// index and git state hear about the file.
type fileHandle struct {
	*fusefs.LoopbackFile
	n       *node
	rawFd   int
	writer  bool        // opened for writing (or created)
	dirty   atomic.Bool // a write, truncate or copy reached us through it
	passthr bool
	// lay is set for a handle of a held file (the layer's own copy);
	// readIno, for one open for reading only, is the inode number the
	// layer counts it under (held.Layer.ClosedReader).
	lay     *held.Layer
	readIno uint64
	// Page cache (pagecache.go): cacheAt is the file as a read-only open
	// found it when it may be served from the kernel's page cache;
	// cached is set when the kernel serves the handle so; appender
	// for a write-open with O_APPEND.
	cacheAt  stamp
	cached   bool
	appender bool
	// opened is a writer's backing file as the open found it (see
	// Release).
	opened stamp
	// by is who opened it, at rel ("" for a file made with no name),
	// and reads whether for reading: a reload names the handles whose
	// access the new config no longer grants (reload.go, StillOpen).
	by    who
	rel   string
	reads bool
	// quota is whose open it counts (openquota.go).
	quota opener
}

var (
	_ = (fusefs.FileReleaser)((*fileHandle)(nil))
	_ = (fusefs.FileWriter)((*fileHandle)(nil))
	_ = (fusefs.FilePassthroughFder)((*fileHandle)(nil))
)

// newFileHandle makes the handle of w's open of n with flags (O_APPEND
// matters to a writer: see pagecache.go).
func newFileHandle(n *node, w who, rel string, fd int, writer bool, flags uint32) *fileHandle {
	lf := fusefs.NewLoopbackFile(fd).(*fusefs.LoopbackFile)
	h := &fileHandle{LoopbackFile: lf, n: n, rawFd: fd, writer: writer, passthr: n.t.fs.opts.Passthrough,
		appender: writer && flags&syscall.O_APPEND != 0,
		by:       who{uid: w.uid, gid: w.gid, pid: w.pid}, rel: rel, reads: flags&syscall.O_ACCMODE != syscall.O_WRONLY}
	if writer {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			h.opened = stampOf(&st)
		}
	}
	h.quota = quotaKey(w)
	n.t.fs.opens.take(h.quota)
	n.handles.add(h)
	n.t.fs.files.add(h)
	return h
}

// fd is the backing descriptor; valid until Release.
func (f *fileHandle) fd() int { return f.rawFd }

// mayGrow checks a change that makes a held file end at end bytes (-n:
// n bytes longer than it is) against the principal's max_bytes. frees
// says the change gives space back (a hole punched): always allowed.
// A handle of a file that is not held needs no check.
func (f *fileHandle) mayGrow(ctx context.Context, end int64, frees bool) syscall.Errno {
	if f.lay == nil || frees {
		return 0
	}
	var st unix.Stat_t
	if err := unix.Fstat(f.fd(), &st); err != nil {
		return toErrno(err)
	}
	if end < 0 {
		end = st.Size - end
	}
	if end <= st.Size {
		return 0 // no growth: an overwrite, the common write
	}
	rel, ok := f.n.rel()
	if !ok {
		rel = "" // removed while open: not the file its old name has now
	}
	if f.lay.CheckSize(rel, st.Ino, st.Size, end) != nil {
		w, _ := f.n.t.caller(ctx)
		return f.n.t.overQuota(w, f.n.slug, rel)
	}
	return 0
}

// PassthroughFd offers the backing descriptor to the kernel when
// passthrough is on and the open is not one the page cache serves
// (pagecache.go). go-fuse falls back to normal I/O when the kernel or
// our privileges do not allow it.
func (f *fileHandle) PassthroughFd() (int, bool) {
	if !f.mode() {
		return -1, false
	}
	return f.rawFd, true
}

// hold marks f as a handle of a file in lay (the principal's own copy).
// The kernel never serves it with passthrough: its writes must reach
// the daemon, which checks each one that grows the file against the
// principal's max_bytes (with passthrough, one dd through a descriptor
// opened under the bound wrote on past it). Every open of a held file's
// node is a held one (a copy-up gives the file a node of its own:
// sameNode), so the node is never asked for both modes at once.
func (f *fileHandle) hold(lay *held.Layer) {
	f.lay = lay
	f.passthr = false
}

// mayWrite checks a write of n bytes at off through f (at the file's end
// for an appender, which the descriptor decides) against max_bytes.
func (f *fileHandle) mayWrite(ctx context.Context, off int64, n int) syscall.Errno {
	if f.lay == nil {
		return 0
	}
	end := off + int64(n)
	if f.appender && f.cached {
		end = -int64(n)
	}
	return f.mayGrow(ctx, end, false)
}

func (f *fileHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := f.mayWrite(ctx, off, len(data)); errno != 0 {
		return 0, errno
	}
	f.dirty.Store(true)
	n, errno := f.LoopbackFile.Write(ctx, data, off)
	if errno == 0 && f.cached && f.appender {
		f.appended(off + int64(n))
	}
	return n, errno
}

func (f *fileHandle) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	if f.lay != nil {
		n := 0
		for _, d := range data {
			n += len(d)
		}
		if errno := f.mayWrite(ctx, off, n); errno != 0 {
			return 0, errno
		}
	}
	f.dirty.Store(true)
	n, errno := f.LoopbackFile.Writev(ctx, data, off)
	if errno == 0 && f.cached && f.appender {
		f.appended(off + int64(n))
	}
	return n, errno
}

func (f *fileHandle) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	f.dirty.Store(true)
	return f.LoopbackFile.Setattr(ctx, in, out)
}

// Fsync syncs the file, and for a file in a principal's layer also the
// layer's record of it (held.Layer.Sync): the name of a file the
// principal made must survive a crash as its content does.
func (f *fileHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if errno := f.LoopbackFile.Fsync(ctx, flags); errno != 0 || f.lay == nil {
		return errno
	}
	rel, ok := f.n.rel()
	if !ok {
		return 0 // no name left to keep (unlinked while open)
	}
	return toErrno(f.lay.Sync(rel))
}

// Release closes the backing file and, for a handle that could have
// written (with passthrough the writes never reach us, so every write-open
// counts), tells the index and git that the file changed.
func (f *fileHandle) Release(ctx context.Context) syscall.Errno {
	f.released(ctx)
	wrote := f.writer || f.dirty.Load()
	var st unix.Stat_t
	var stErr error = syscall.ENOENT
	if wrote {
		stErr = unix.Fstat(f.rawFd, &st) // how this handle left the file
	}
	f.n.handles.remove(f)
	f.n.t.fs.files.remove(f)
	f.n.t.fs.opens.give(f.quota)
	errno := f.LoopbackFile.Release(ctx)
	if f.readIno != 0 {
		// Closed now: a file with no name left is free (held.Layer's
		// nameless count).
		f.lay.ClosedReader(f.readIno)
	}
	if f.writer && stErr == nil && stampOf(&st) != f.opened && st.Ctim.Nano() != f.n.toldCtime.Load() && !f.n.t.fs.stopped.Load() {
		// A write(2) through the mount makes the kernel drop the times
		// it caches, but a store into a shared writable mapping of a
		// passthrough file changes the backing file's pages and times
		// without a request or a word to the FUSE inode: stat after the
		// writer is done (munmap, close) showed the times from before
		// until the attributes timed out, where a plain folder shows
		// the new ones (xfstests generic/080, generic/215). The last
		// mapping goes before this release comes (it holds the file).
		// Not when the kernel's attributes came from the file as it is
		// now (a futimens after the writes, as tar and cp -p make: a
		// stat after them would cost a GETATTR each).
		// Attributes only (offset -1): no page is touched, so it is
		// safe from inside a request. FLUSH, which close(2) waits for,
		// is off on this mount (node.Flush), so a stat racing the
		// release may still see the old times.
		f.n.NotifyContent(-1, 0)
	}
	if wrote && f.lay != nil {
		// A held file: the backing one did not change.
		rel, ok := f.n.rel()
		if f.writer && stErr == nil {
			if !ok {
				f.lay.Closed(st.Ino)
			} else if gone := f.lay.Released(rel, st.Ino); len(gone) > 0 {
				f.n.t.heldDropped(f.n.slug, gone)
			}
		}
		if ok {
			f.lay.Wrote(rel)
		}
		return errno
	}
	if wrote {
		if rel, ok := f.n.rel(); ok {
			if stErr == nil {
				f.n.t.fs.changedTo(f.n.t, f.n.slug, rel, &st)
			} else {
				f.n.t.fs.changed(f.n.t, f.n.slug, rel)
			}
		}
	}
	return errno
}
