package mounts

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The *xattrat calls (Linux 6.13) read a name's extended attributes
// relative to its confined parent descriptor, one syscall instead of an
// O_PATH open, a /proc lookup and a close. Older kernels answer ENOSYS
// and the /proc path is used from then on.
const (
	sysGetxattrat  = 464
	sysListxattrat = 465
)

var noXattrat atomic.Bool

type xattrArgs struct {
	value uint64
	size  uint32
	flags uint32
}

// getxattrat reads attr of name in dfd without following a final symlink.
func getxattrat(dfd int, name, attr string, dest []byte) (int, error) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return 0, err
	}
	a, err := unix.BytePtrFromString(attr)
	if err != nil {
		return 0, err
	}
	var args xattrArgs
	if len(dest) > 0 {
		args.value = uint64(uintptr(unsafe.Pointer(&dest[0])))
		args.size = uint32(len(dest))
	}
	n, _, e := unix.Syscall6(sysGetxattrat, uintptr(dfd), uintptr(unsafe.Pointer(p)), unix.AT_SYMLINK_NOFOLLOW,
		uintptr(unsafe.Pointer(a)), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// listxattrat lists the attributes of name in dfd without following a
// final symlink.
func listxattrat(dfd int, name string, dest []byte) (int, error) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return 0, err
	}
	var ptr unsafe.Pointer
	if len(dest) > 0 {
		ptr = unsafe.Pointer(&dest[0])
	}
	n, _, e := unix.Syscall6(sysListxattrat, uintptr(dfd), uintptr(unsafe.Pointer(p)), unix.AT_SYMLINK_NOFOLLOW,
		uintptr(ptr), uintptr(len(dest)), 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// Getxattr reads the extended attribute attr of rel into dest.
func (r *Root) Getxattr(rel, attr string, dest []byte) (int, error) {
	if rel != "" && !noXattrat.Load() {
		dfd, name, err := r.parent("getxattr", rel)
		if err != nil {
			return 0, err
		}
		n, err := getxattrat(dfd, name, attr, dest)
		unix.Close(dfd)
		if err != unix.ENOSYS {
			return n, r.wrap("getxattr", rel, err)
		}
		noXattrat.Store(true)
	}
	fd, err := r.openPath("getxattr", rel)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	n, err := unix.Getxattr(procPath(fd), attr, dest)
	return n, r.wrap("getxattr", rel, err)
}

// Listxattr lists the extended attributes of rel into dest.
func (r *Root) Listxattr(rel string, dest []byte) (int, error) {
	if rel != "" && !noXattrat.Load() {
		dfd, name, err := r.parent("listxattr", rel)
		if err != nil {
			return 0, err
		}
		n, err := listxattrat(dfd, name, dest)
		unix.Close(dfd)
		if err != unix.ENOSYS {
			return n, r.wrap("listxattr", rel, err)
		}
		noXattrat.Store(true)
	}
	fd, err := r.openPath("listxattr", rel)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	n, err := unix.Listxattr(procPath(fd), dest)
	return n, r.wrap("listxattr", rel, err)
}

// Setxattr sets an extended attribute of rel.
func (r *Root) Setxattr(rel, attr string, data []byte, flags int) error {
	fd, err := r.openPath("setxattr", rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return r.wrap("setxattr", rel, unix.Setxattr(procPath(fd), attr, data, flags))
}

// Removexattr removes an extended attribute of rel.
func (r *Root) Removexattr(rel, attr string) error {
	fd, err := r.openPath("removexattr", rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return r.wrap("removexattr", rel, unix.Removexattr(procPath(fd), attr))
}

// A mode passed to Create, Mkdir or Mknod may carry the caller's umask
// (WithUmask). It is applied the way the kernel's VFS applies it on a
// filesystem with POSIX ACLs: not at all when the new name's folder has a
// default ACL (the ACL decides), and otherwise cleared from the mode.
const (
	umaskFlag  = 1 << 31
	umaskShift = 16
)

// WithUmask returns mode carrying umask for Create, Mkdir and Mknod.
func WithUmask(mode, umask uint32) uint32 {
	return mode&^(umaskFlag|0o777<<umaskShift) | umaskFlag | (umask&0o777)<<umaskShift
}

// maskMode applies a umask carried by mode (see WithUmask) for a name
// made in the folder dfd, and returns the plain mode.
func maskMode(dfd int, mode uint32) uint32 {
	if mode&umaskFlag == 0 {
		return mode
	}
	umask := mode >> umaskShift & 0o777
	mode &^= umaskFlag | 0o777<<umaskShift
	if mode&umask == 0 || hasDefaultACL(dfd) {
		return mode
	}
	return mode &^ umask
}

// hasDefaultACL reports whether the folder dfd has a default ACL.
func hasDefaultACL(dfd int) bool {
	var n int
	var err error
	if !noXattrat.Load() {
		n, err = getxattrat(dfd, ".", "system.posix_acl_default", nil)
		if err == unix.ENOSYS {
			noXattrat.Store(true)
		}
	}
	if noXattrat.Load() {
		n, err = unix.Getxattr(procPath(dfd), "system.posix_acl_default", nil)
	}
	return err == nil && n > 0
}
