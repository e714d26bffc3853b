package fs

import (
	"context"
	"sync"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// dirHandle is an open folder: its entries are read once at opendir,
// filtered by the caller's read policy and completed with virtual
// entries, then served by offset. It is never cached by the kernel
// (listings differ by principal; DESIGN.md §11).
type dirHandle struct {
	mu      sync.Mutex
	fd      int // the backing folder, for fsyncdir; -1 for virtual folders
	entries []fuse.DirEntry
	idx     int
}

var (
	_ = (fusefs.FileReaddirenter)((*dirHandle)(nil))
	_ = (fusefs.FileSeekdirer)((*dirHandle)(nil))
	_ = (fusefs.FileReleasedirer)((*dirHandle)(nil))
	_ = (fusefs.FileFsyncdirer)((*dirHandle)(nil))
)

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
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
	if off > uint64(len(d.entries)) {
		return syscall.EINVAL
	}
	d.idx = int(off)
	return 0
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return 0
	}
	return toErrno(unix.Fsync(d.fd))
}

// readDir lists the open backing folder fd (at rel) for the caller. The
// handle takes fd.
func (n *node) readDir(w who, rel string, fd int) (*dirHandle, syscall.Errno) {
	d := &dirHandle{fd: fd}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, toErrno(err)
	}
	filter := !(n.t.fs.trivial && n.t.view == nil) && n.t.fs.pol != nil
	hide := n.hidden(rel)
	buf := make([]byte, 64*1024)
	for {
		cnt, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, toErrno(err)
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
				continue
			}
			if filter && !n.t.canRead(w, n.slug, join(rel, de.Name)) {
				continue
			}
			de.Ino = n.t.fs.ino(st.Dev, de.Ino)
			de.Off = 0
			d.entries = append(d.entries, de)
		}
	}
	d.entries = append(d.entries, n.virtualEntries(w, rel)...)
	return d, 0
}
