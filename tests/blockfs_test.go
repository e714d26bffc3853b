package tests

import (
	"context"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// blockFS is a loopback mount of a folder, served by the test process,
// whose GETATTR of one file name waits while the test holds it: a backing
// folder that is slow on demand, so that a request of the daemon that
// stats that file waits for as long as the test wants.
type blockFS struct {
	dir   string // the mount
	name  string // the file name whose GETATTR waits
	reads bool   // its READs wait instead (mountBlockReads)
	syncs bool   // the fsyncs of every file wait instead (mountBlockFsyncs)

	mu      sync.Mutex
	held    chan struct{} // open while held
	reached chan struct{} // closed by the first GETATTR that waits
}

// mountBlockFS serves real at a new folder until the test ends. Its
// attributes are never cached (every stat of a file reaches the test
// process) and its names are, for an hour (a stat of a file looked up
// before waits only in GETATTR, holding no folder lock).
func mountBlockFS(t *testing.T, real, name string) *blockFS {
	t.Helper()
	return mountBlock(t, real, &blockFS{dir: t.TempDir(), name: name})
}

// mountBlockReads is mountBlockFS whose READs of the file name wait
// while the test holds them, its GETATTRs never: a file slow to read.
// Every read of it reaches the test process (direct I/O).
func mountBlockReads(t *testing.T, real, name string) *blockFS {
	t.Helper()
	return mountBlock(t, real, &blockFS{dir: t.TempDir(), name: name, reads: true})
}

// mountBlockFsyncs is mountBlockFS whose fsyncs of any file (opened or
// created on it) wait while the test holds them: a disk slow to sync.
func mountBlockFsyncs(t *testing.T, real string) *blockFS {
	t.Helper()
	return mountBlock(t, real, &blockFS{dir: t.TempDir(), syncs: true})
}

func mountBlock(t *testing.T, real string, b *blockFS) *blockFS {
	t.Helper()
	var st syscall.Stat_t
	must(t, syscall.Stat(real, &st))
	root := &fusefs.LoopbackRoot{Path: real, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fusefs.LoopbackRoot, _ *fusefs.Inode, name string, _ *syscall.Stat_t) fusefs.InodeEmbedder {
		return &blockNode{LoopbackNode: fusefs.LoopbackNode{RootData: r}, name: name, b: b}
	}
	root.RootNode = root.NewNode(root, nil, "", &st)
	zero, hour := time.Duration(0), time.Hour
	srv, err := fusefs.Mount(b.dir, root.RootNode, &fusefs.Options{
		AttrTimeout:  &zero,
		EntryTimeout: &hour,
		MountOptions: fuse.MountOptions{FsName: real, Name: "blockfs", DirectMount: true},
	})
	must(t, err)
	t.Cleanup(func() {
		b.release()
		if err := srv.Unmount(); err != nil {
			syscall.Unmount(b.dir, syscall.MNT_DETACH)
		}
	})
	return b
}

// hold makes the GETATTRs of b.name wait from now on.
func (b *blockFS) hold() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held, b.reached = make(chan struct{}), make(chan struct{})
}

// release lets the waiting GETATTRs go on, and the later ones through.
func (b *blockFS) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held != nil {
		close(b.held)
		b.held = nil
	}
}

// waitReached waits until a GETATTR (or READ) of b.name, or an FSYNC,
// waits.
func (b *blockFS) waitReached(t *testing.T, d time.Duration) {
	t.Helper()
	b.mu.Lock()
	reached := b.reached
	b.mu.Unlock()
	select {
	case <-reached:
	case <-time.After(d):
		t.Fatalf("no GETATTR of %s reached the backing mount within %v", b.name, d)
	}
}

// blockNode is a loopback node whose GETATTR (or, for mountBlockReads,
// READ) waits while its blockFS is held, if it has the blockFS's name;
// for mountBlockFsyncs, every file's FSYNC waits.
type blockNode struct {
	fusefs.LoopbackNode
	name string
	b    *blockFS
}

var (
	_ = (fusefs.NodeGetattrer)((*blockNode)(nil))
	_ = (fusefs.NodeOpener)((*blockNode)(nil))
	_ = (fusefs.NodeCreater)((*blockNode)(nil))
	_ = (fusefs.FileReader)((*blockFile)(nil))
	_ = (fusefs.FileFsyncer)((*blockFile)(nil))
)

func (n *blockNode) Getattr(ctx context.Context, f fusefs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if n.name == n.b.name && !n.b.reads && !n.b.syncs {
		if errno := n.b.wait(ctx); errno != 0 {
			return errno
		}
	}
	return n.LoopbackNode.Getattr(ctx, f, out)
}

func (n *blockNode) Open(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 || !n.b.syncs && (n.name != n.b.name || !n.b.reads) {
		return fh, fl, errno
	}
	lf, ok := fh.(*fusefs.LoopbackFile)
	if !ok {
		return fh, fl, errno
	}
	if n.b.syncs {
		return &blockFile{LoopbackFile: lf, b: n.b}, fl, 0
	}
	return &blockFile{LoopbackFile: lf, b: n.b}, fl | fuse.FOPEN_DIRECT_IO, 0
}

func (n *blockNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fusefs.Inode, fusefs.FileHandle, uint32, syscall.Errno) {
	ino, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if lf, ok := fh.(*fusefs.LoopbackFile); ok && errno == 0 && n.b.syncs {
		return ino, &blockFile{LoopbackFile: lf, b: n.b}, fl, 0
	}
	return ino, fh, fl, errno
}

// blockFile is a handle of the blockFS's file whose READs wait.
type blockFile struct {
	*fusefs.LoopbackFile
	b *blockFS
}

func (f *blockFile) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if f.b.reads {
		if errno := f.b.wait(ctx); errno != 0 {
			return nil, errno
		}
	}
	return f.LoopbackFile.Read(ctx, buf, off)
}

func (f *blockFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if f.b.syncs {
		if errno := f.b.wait(ctx); errno != 0 {
			return errno
		}
	}
	return f.LoopbackFile.Fsync(ctx, flags)
}

// wait waits while b is held, and tells waitReached that a request
// waits.
func (b *blockFS) wait(ctx context.Context) syscall.Errno {
	b.mu.Lock()
	held, reached := b.held, b.reached
	if held != nil {
		select {
		case <-reached:
		default:
			close(reached)
		}
	}
	b.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done(): // the kernel interrupted the caller
			return syscall.EINTR
		}
	}
	return 0
}

// path is rel's path on the mount.
func (b *blockFS) path(rel string) string { return filepath.Join(b.dir, rel) }
