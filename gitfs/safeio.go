package gitfs

import (
	"errors"
	"io"
	"os"
	"syscall"

	"github.com/go-git/go-billy/v5"
)

// Everything gitfs reads lives in a tree that agents may write to through
// the mount, so any of it may be a FIFO (or a device node, for root)
// instead of a file. Opening a FIFO for reading blocks until a writer
// comes: every open here is non-blocking, and only regular files are read.

// errNotRegular is returned for a name that is not a regular file.
var errNotRegular = errors.New("not a regular file")

// openRegular opens path for reading without blocking, following a final
// symlink unless nofollow, and refuses anything but a regular file.
func openRegular(path string, nofollow bool) (*os.File, error) {
	flags := os.O_RDONLY | syscall.O_NONBLOCK
	if nofollow {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: path, Err: errNotRegular}
	}
	return f, nil
}

// readRegular is os.ReadFile for regular files only (see openRegular).
func readRegular(path string) ([]byte, error) {
	f, err := openRegular(path, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// nonblockFS hands go-git its files opened without blocking: a FIFO in
// .git reads as empty (and fails to parse) instead of hanging the reader.
type nonblockFS struct{ billy.Filesystem }

func (f nonblockFS) Open(name string) (billy.File, error) {
	return f.OpenFile(name, os.O_RDONLY, 0)
}

func (f nonblockFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR) == 0 {
		flag |= syscall.O_NONBLOCK
	}
	return f.Filesystem.OpenFile(name, flag, perm)
}

func (f nonblockFS) Chroot(path string) (billy.Filesystem, error) {
	c, err := f.Filesystem.Chroot(path)
	if err != nil {
		return nil, err
	}
	return nonblockFS{c}, nil
}
