package fs

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/uring"
)

// FUSE over io_uring (issue 20). go-fuse mounts the directory itself, as
// for a /dev/fuse mount (so its Server can Unmount), and answers INIT,
// offering FUSE_OVER_IO_URING; mountUring finds the /dev/fuse descriptor
// it opened, and internal/uring registers one io_uring queue per possible
// CPU on that connection. From then on the kernel sends the requests
// through the rings, and internal/uring also reads what the kernel still
// sends on /dev/fuse (FORGET, INTERRUPT). One go-fuse ProtocolServer over
// the same RawFileSystem answers both, so the node tree is the same, and
// an INTERRUPT reaches its request whichever transport brought it.
//
// go-fuse's Server keeps what only it can do: notifications (Inode.Notify*)
// and the passthrough backing-fd ioctls go through its descriptor. Its
// Serve starts only once the connection has ended: it then reads ENODEV at
// once, closes its descriptor and releases Wait and Unmount. A go-fuse
// Server reading /dev/fuse while the rings serve would take INTERRUPTs for
// ring requests it never saw and answer EAGAIN, and the kernel drops an
// INTERRUPT so answered for a ring request: the request would run to its
// end, its ctx never cancelled.

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

// mountUring mounts rfs on dir with go-fuse's Server for INIT,
// notifications and unmounting, and internal/uring serving the requests.
// With required unset, a kernel that does not negotiate io_uring or
// refuses the rings leaves the mount to go-fuse over /dev/fuse.
//
// ex is opened on the mount's descriptor (closed again when the mount is
// given up).
func mountUring(dir string, rfs fuse.RawFileSystem, mo fuse.MountOptions, required bool, ex *expirer) (*fuse.Server, *uring.Rings, error) {
	mo.ExtraCapabilities |= fuse.CAP_OVER_IO_URING
	var srv *fuse.Server
	var rings *uring.Rings
	var err error
	for try := 1; ; try++ {
		srv, rings, err = startUring(dir, rfs, &mo, ex)
		if !errors.Is(err, errWhichFD) || try == 3 {
			break
		}
	}
	switch {
	case err == nil:
		go func() {
			rings.Wait()
			srv.Serve()
		}()
	case srv == nil:
		return nil, nil, fmt.Errorf("mount %s: %w", dir, err)
	case errors.Is(err, uring.ErrRefused) || errors.Is(err, uring.ErrNotNegotiated):
		if required {
			abandon(srv, dir)
			return nil, nil, fmt.Errorf("mount %s: [mount] io_uring = \"on\", but the kernel did not take the rings: %w", dir, err)
		}
		slog.Warn("FUSE over io_uring refused, using /dev/fuse", "mountpoint", dir, "err", err)
		rings = nil
		go srv.Serve()
	default:
		// The connection negotiated io_uring but has no ready ring: the
		// kernel would hold every request (see uring.ErrRefused).
		abandon(srv, dir)
		return nil, nil, fmt.Errorf("mount %s: FUSE over io_uring: %w", dir, err)
	}
	// go-fuse's poll hack (the mount is served by now): see its WaitMount.
	if err := srv.WaitMount(); err != nil {
		srv.Unmount()
		return nil, nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	transport := "/dev/fuse"
	if rings != nil {
		transport = "io_uring"
	}
	slog.Info("serving", "mountpoint", dir, "transport", transport)
	return srv, rings, nil
}

// devFuseMu serializes the mounts of this process while they open /dev/fuse
// descriptors (go-fuse's NewServer, Attach's dup), so that newServerFD
// can tell which descriptor a mount opened.
var devFuseMu sync.Mutex

// startUring has go-fuse mount dir and answer INIT, and attaches the rings
// to the /dev/fuse descriptor it opened. It returns go-fuse's Server,
// unserved, whenever the mount was made.
func startUring(dir string, rfs fuse.RawFileSystem, mo *fuse.MountOptions, ex *expirer) (*fuse.Server, *uring.Rings, error) {
	devFuseMu.Lock()
	defer devFuseMu.Unlock()
	srv, fd, err := newServerFD(dir, rfs, mo)
	if err != nil {
		return nil, nil, err
	}
	ex.open(fd, srv.KernelSettings())
	rings, err := uring.Attach(fd, dir, uringHandler(rfs, *mo), initRequest(srv.KernelSettings()), 0)
	return srv, rings, err
}

// errWhichFD: newServerFD could not tell which /dev/fuse descriptor
// go-fuse opened for the mount.
var errWhichFD = errors.New("could not tell which /dev/fuse descriptor go-fuse opened for the mount")

// newServerFD has go-fuse mount dir and answer INIT, and returns its
// Server and the /dev/fuse descriptor it opened for the mount (go-fuse
// keeps that to itself): the one descriptor on /dev/fuse that appeared
// while NewServer ran. The caller holds devFuseMu, which keeps this
// process's other mounts from opening one meanwhile; should something else
// have, the mount is given up with errWhichFD, never served on a guess.
func newServerFD(dir string, rfs fuse.RawFileSystem, mo *fuse.MountOptions) (*fuse.Server, int, error) {
	srv, fd, err := serverAndFD(dir, rfs, mo)
	if err != nil {
		if srv != nil {
			abandon(srv, dir)
		}
		return nil, -1, err
	}
	return srv, fd, nil
}

// serverAndFD is newServerFD without giving up the mount when it cannot
// tell which descriptor it opened: it then returns the Server with an
// errWhichFD. A mount served over /dev/fuse needs the descriptor only for
// the notifications go-fuse does not send (expirer).
func serverAndFD(dir string, rfs fuse.RawFileSystem, mo *fuse.MountOptions) (*fuse.Server, int, error) {
	before, err := devFuseFDs()
	if err != nil {
		return nil, -1, err
	}
	srv, err := newServer(rfs, dir, mo)
	if err != nil {
		return nil, -1, err
	}
	after, err := devFuseFDs()
	var fresh []int
	for fd := range after {
		if !before[fd] {
			fresh = append(fresh, fd)
		}
	}
	if err != nil || len(fresh) != 1 {
		return srv, -1, fmt.Errorf("%w (%d new descriptors, %v)", errWhichFD, len(fresh), err)
	}
	return srv, fresh[0], nil
}

// devFuseFDs lists this process's descriptors open on /dev/fuse. It reads
// the links in /proc/self/fd first: an fstat of a descriptor of a file on
// some FUSE mount would be a request to that mount.
func devFuseFDs() (map[int]bool, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	fds := map[int]bool{}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || l != "/dev/fuse" {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == unix.Mkdev(10, 229) {
			fds[fd] = true
		}
	}
	return fds, nil
}

// abandon gives up a mount go-fuse made and answered INIT for, before
// anything served it: it is detached, and go-fuse's Serve then reads
// ENODEV and closes its descriptor.
func abandon(srv *fuse.Server, dir string) {
	unix.Unmount(dir, unix.MNT_DETACH)
	go srv.Serve()
	srv.Wait()
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
// ProtocolServer never calls rfs.Init: when it answers INIT as well
// (uring.Mount, the tests), the node tree has no *fuse.Server and
// Inode.Notify* return ENOSYS. In mountUring go-fuse's Server answers INIT
// and calls Init.
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

// RingInterrupts counts the INTERRUPTs that cancelled a request of a mount
// served over io_uring, over every mount of f.
func (f *FS) RingInterrupts() uint64 {
	f.treesMu.Lock()
	defer f.treesMu.Unlock()
	var n uint64
	for _, t := range f.trees {
		if t.rings != nil {
			n += t.rings.Interrupts()
		}
	}
	return n
}
