package fs

import (
	"context"
	"errors"
	iofs "io/fs"
	"log/slog"
	"syscall"

	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// toErrno is the only place where Go errors become errno values
// (STYLE.md "Errors": go-fuse's ToErrno turns wrapped errors into ENOTSUP).
func toErrno(err error) syscall.Errno {
	var errno syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.Is(err, policy.ErrReadOnly):
		return syscall.EROFS
	case errors.Is(err, policy.ErrDenied):
		return syscall.EACCES
	case errors.Is(err, mounts.ErrUnavailable):
		return syscall.ENOMEDIUM
	case errors.Is(err, mounts.ErrBadPath):
		return syscall.EINVAL
	case errors.As(err, &errno): // sees through *PathError and %w chains
		return errno
	case errors.Is(err, iofs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, iofs.ErrPermission):
		return syscall.EACCES
	case errors.Is(err, iofs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, context.Canceled):
		return syscall.EINTR // go-fuse cancels ctx when the caller is interrupted
	}
	slog.Error("unmapped error, returning EIO", "err", err) // log here, once per error (rclone's translateError does too)
	return syscall.EIO
}
