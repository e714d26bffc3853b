package fs

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/uring"
)

// FUSE over io_uring (issue 20). The mount is made by internal/uring
// (mount(2) on a /dev/fuse fd it opens) and handed to go-fuse's own server
// through the magic mountpoint /dev/fd/N, so /dev/fuse keeps go-fuse's
// whole behaviour: INIT, every request the kernel queues before the rings
// are ready, FORGET, INTERRUPT, notifications (Inode.Notify*) and the
// passthrough backing-fd ioctls. Once INIT is done internal/uring registers
// one io_uring queue per possible CPU on the same connection, and from then
// on the kernel sends the requests through the rings; they are answered by
// go-fuse's ProtocolServer over the same RawFileSystem (so the same node
// tree and the same answers).
//
// Known gap: an INTERRUPT for a request that came through a ring reaches
// go-fuse's server, which does not know that request; the request runs to
// its end instead of being cancelled.

// wantUring decides from [mount] io_uring whether to mount over io_uring.
// "on" without the kernel's feature is an error naming the switch.
func wantUring(dir, mode string) (bool, error) {
	switch mode {
	case "", "off":
		return false, nil
	}
	ok, why := uring.Available()
	if ok {
		return true, nil
	}
	if mode == "on" {
		return false, fmt.Errorf("mount %s: [mount] io_uring = \"on\", but %s", dir, why)
	}
	slog.Info("FUSE over io_uring unavailable, using /dev/fuse", "mountpoint", dir, "why", why)
	return false, nil
}

// mountUring mounts rfs on dir with go-fuse serving /dev/fuse and
// internal/uring serving the rings. With required unset, a kernel that
// refuses the rings leaves the mount on /dev/fuse.
func mountUring(dir string, rfs fuse.RawFileSystem, mo fuse.MountOptions, required bool) (*fuse.Server, *uring.Rings, error) {
	mo.ExtraCapabilities |= fuse.CAP_OVER_IO_URING
	// go-fuse tries a direct mount before it looks for the magic
	// mountpoint; left on, it would mount a second filesystem over
	// /dev/fd/N, which resolves to /dev/fuse itself.
	mo.DirectMount = false
	mo.DirectMountStrict = false
	extra := append([]string(nil), mo.Options...)
	if mo.AllowOther {
		extra = append(extra, "allow_other")
	}
	if mo.MaxWrite > 0 {
		extra = append(extra, "max_read="+strconv.Itoa(mo.MaxWrite))
	}
	fd, err := uring.OpenMount(dir, uring.Options{FsName: mo.FsName, Subtype: mo.Name, Extra: extra})
	if err != nil {
		return nil, nil, err
	}
	srv, err := fuse.NewServer(rfs, "/dev/fd/"+strconv.Itoa(fd), &mo)
	if err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		unix.Close(fd)
		return nil, nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		srv.Wait()
		return nil, nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	rings, err := uring.Attach(fd, dir, uringHandler(rfs, mo), initRequest(srv.KernelSettings()), 0)
	if err != nil && !errors.Is(err, uring.ErrRefused) {
		// The connection negotiated io_uring but has no ready ring: the
		// kernel would hold every request (see uring.ErrRefused).
		unix.Unmount(dir, unix.MNT_DETACH)
		srv.Wait()
		return nil, nil, fmt.Errorf("mount %s: FUSE over io_uring: %w", dir, err)
	}
	if err != nil {
		if required {
			unix.Unmount(dir, unix.MNT_DETACH)
			srv.Wait()
			return nil, nil, fmt.Errorf("mount %s: [mount] io_uring = \"on\", but the kernel refused the rings: %w", dir, err)
		}
		slog.Warn("FUSE over io_uring refused, using /dev/fuse", "mountpoint", dir, "err", err)
		pollHack(dir)
		slog.Info("serving", "mountpoint", dir, "transport", "/dev/fuse")
		return srv, nil, nil
	}
	pollHack(dir)
	slog.Info("serving", "mountpoint", dir, "transport", "io_uring")
	return srv, rings, nil
}

// pollHack has the kernel learn at once that the filesystem does not poll,
// as go-fuse's WaitMount does for the mounts it makes (it cannot for a
// /dev/fd/N mount): a POLL for its magic file is answered ENOSYS, and the
// kernel sends no more. Otherwise the first epoll_ctl the Go runtime makes
// on one of the mount's files from this very process waits for a POLL
// answer while holding its P, which can starve the goroutines that would
// answer it.
func pollHack(dir string) {
	fd, err := unix.Open(filepath.Join(dir, ".go-fuse-epoll-hack"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	unix.Close(fd)
}

// initRequest rebuilds the raw INIT request the kernel sent, for priming
// the ProtocolServer that answers the rings. go-fuse's InitIn starts with
// the request header, so it is the whole request.
func initRequest(in *fuse.InitIn) []byte {
	b := append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(in)), unsafe.Sizeof(*in))...)
	*(*uint32)(unsafe.Pointer(&b[0])) = uint32(len(b))
	*(*uint32)(unsafe.Pointer(&b[4])) = 26 // FUSE_INIT
	*(*uint64)(unsafe.Pointer(&b[8])) = 1  // unique
	return b
}

// uringHandler answers raw FUSE requests from internal/uring's transports
// with go-fuse's ProtocolServer over rfs, so every transport reaches the
// same node tree. It adds FUSE_OVER_IO_URING to the capabilities INIT may
// grant; the kernel offers it only while its switch is on.
//
// ProtocolServer never calls rfs.Init: when it answers /dev/fuse as well
// (uring.Mount, the tests), the node tree has no *fuse.Server and
// Inode.Notify* return ENOSYS. mountUring leaves /dev/fuse to go-fuse's
// server, which does call Init.
func uringHandler(rfs fuse.RawFileSystem, mo fuse.MountOptions) uring.Handler {
	mo.ExtraCapabilities |= fuse.CAP_OVER_IO_URING
	ps := fuse.NewProtocolServer(rfs, &mo)
	return func(in, out [][]byte) (int, syscall.Errno) {
		n, st := ps.HandleRequest(in, out)
		if !st.Ok() {
			return 0, syscall.Errno(st)
		}
		return n, 0
	}
}

// Transport says which transport serves the mount at dir: "io_uring" or
// "/dev/fuse" ("" when dir is not one of f's mounts).
func (f *FS) Transport(dir string) string {
	f.treesMu.Lock()
	defer f.treesMu.Unlock()
	for _, t := range f.trees {
		if t.dir == dir {
			if t.onRings.Load() {
				return "io_uring"
			}
			return "/dev/fuse"
		}
	}
	return ""
}

// RingRequests counts the requests that came through io_uring queues, over
// every mount of f.
func (f *FS) RingRequests() uint64 {
	f.treesMu.Lock()
	defer f.treesMu.Unlock()
	var n uint64
	for _, t := range f.trees {
		if t.rings != nil {
			n += t.rings.Requests()
		}
	}
	return n
}
