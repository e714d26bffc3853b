package fs

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/neuralis/neuralisfs/internal/uring"
)

// uringHandler answers raw FUSE requests from internal/uring's transports
// (its io_uring queues and /dev/fuse) with go-fuse's ProtocolServer over
// rfs, so both transports reach the same node tree. It adds
// FUSE_OVER_IO_URING to the capabilities INIT may grant; the kernel offers
// it only while its switch is on.
//
// ProtocolServer never calls rfs.Init, so the node tree has no
// *fuse.Server: Inode.Notify* return ENOSYS on this transport (see
// internal/uring's package doc, "What stays on /dev/fuse").
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
