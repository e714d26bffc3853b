package watchdog

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// sysConnections is where systemd mounts the FUSE control filesystem.
const sysConnections = "/sys/fs/fuse/connections"

// fusectlMagic is FUSE_CTL_SUPER_MAGIC, the control filesystem's statfs
// type.
const fusectlMagic = 0x65735543

// abort aborts FUSE connections: the kernel fails every request waiting
// on them, and every later one, with ECONNABORTED.
func abort(conns []uint64) error {
	dir, err := fusectl()
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	var errs []error
	for _, c := range conns {
		fd, err := unix.Openat(dir, fmt.Sprintf("%d/abort", c), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			_, err = unix.Write(fd, []byte("1"))
			unix.Close(fd)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("connection %d: %w", c, err))
		}
	}
	return errors.Join(errs...)
}

// fusectl opens the root of the FUSE control filesystem: the system's
// mount at /sys/fs/fuse/connections when there is one, else a detached
// mount of our own, which no one else sees and which goes away when the
// descriptor closes (fsopen/fsmount need CAP_SYS_ADMIN).
func fusectl() (int, error) {
	var st unix.Statfs_t
	if unix.Statfs(sysConnections, &st) == nil && st.Type == fusectlMagic {
		fd, err := unix.Open(sysConnections, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("%s: %w", sysConnections, err)
		}
		return fd, nil
	}
	fs, err := unix.Fsopen("fusectl", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("the FUSE control filesystem is not mounted on %s, and mounting it failed: %w", sysConnections, err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("fusectl: fsconfig: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("fusectl: fsmount: %w", err)
	}
	return mnt, nil
}
