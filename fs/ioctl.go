package fs

import (
	"context"
	"syscall"
	"unsafe"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/policy"
)

var _ = (fusefs.NodeIoctler)((*node)(nil))

// _IOR('X', 31, struct fsxattr) and _IOW('X', 32, struct fsxattr): not in
// x/sys/unix.
const (
	fsIocFsGetXattr = 0x801c581f
	fsIocFsSetXattr = 0x401c5820
)

// Ioctl passes on only the inode-flag ioctls behind lsattr and chattr.
// The kernel forwards any ioctl whose size is encoded in its number, and
// the daemon runs them with its own privileges on the backing file: left
// to go-fuse's loopback default, a caller with a read-only descriptor
// could shut down or resize the backing filesystem (EXT4_IOC_SHUTDOWN,
// EXT4_IOC_RESIZE_FS), read its label, or name descriptors of the
// daemon's (EXT4_IOC_MOVE_EXT). Everything else is ENOTTY, as on a
// filesystem without ioctls. For the flag setters, the kernel has already
// checked that the caller owns the file and may set immutable or
// append-only (CAP_LINUX_IMMUTABLE) before the request reaches us. A
// principal whose writes are held reads the flags of the file it sees and
// may not set any (EPERM).
func (n *node) Ioctl(ctx context.Context, f fusefs.FileHandle, cmd uint32, arg uint64, input []byte, output []byte) (int32, syscall.Errno) {
	var c policy.Cap
	switch cmd {
	case unix.FS_IOC_GETFLAGS, fsIocFsGetXattr:
		c = policy.Read
	case unix.FS_IOC_SETFLAGS, fsIocFsSetXattr:
		c = policy.Write
	default:
		return 0, syscall.ENOTTY
	}
	w, rel, r, errno := n.prep(ctx)
	fd := -1
	switch {
	case errno == syscall.ENOENT:
		d, ok := n.orphanFd()
		if !ok {
			return 0, errno
		}
		if c == policy.Write {
			if errno := n.orphanChange(d); errno != 0 {
				unix.Close(d)
				return 0, errno
			}
		}
		fd = d
	case errno != 0:
		return 0, errno
	default:
		if !n.top && c == policy.Write {
			lay, errno := n.t.allowWrite(w, "ioctl", n.slug, rel)
			if errno != 0 {
				return 0, errno
			}
			if lay != nil {
				// Inode flags are not held for review: set on the
				// backing file they would skip it, and on the layer's
				// copy (immutable, append-only) they could keep the
				// layer from ever dropping it.
				return 0, syscall.EPERM
			}
		} else if !n.top {
			if errno := n.t.allow(w, "ioctl", n.slug, rel, c); errno != 0 {
				return 0, errno
			}
			// The flags of the file the caller sees: its layer's copy
			// where it holds one.
			if r, _, errno = n.see(w, r, rel); errno != 0 {
				return 0, errno
			}
		}
		d, err := r.Open(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return 0, toErrno(err)
		}
		fd = d
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, toErrno(err)
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFDIR {
		return 0, syscall.ENOTTY
	}
	// Both structures (an int of flags, struct fsxattr) fit; the kernel
	// sizes input and output from the ioctl number.
	var buf [64]byte
	if c == policy.Write {
		copy(buf[:], input)
	}
	res, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(cmd), uintptr(unsafe.Pointer(&buf[0])))
	if e != 0 {
		return 0, e
	}
	if c == policy.Read {
		copy(output, buf[:])
	} else {
		// The flags moved the file's ctime, which the kernel would keep
		// showing from its cache (xfstests generic/277): drop its
		// attributes, only them (offset -1: no page lock, so safe from
		// inside the request), before the ioctl returns.
		n.NotifyContent(-1, 0)
		if rel, ok := n.rel(); ok {
			n.t.fs.changed(n.t, n.slug, rel)
		}
	}
	return int32(res), 0
}
