package fs

import (
	"os"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// noLabels answers a question for a security label that is not there
// (GETXATTR security.selinux, ENODATA from the node) with EOPNOTSUPP
// (issue 15). `ls -l` asks every name it lists for its label through
// lgetxattr(2), and the kernel keeps no answer of the filesystem's to any
// xattr but an ACL, so a listing of N names cost N round trips, warm or
// cold. ls (coreutils' getfilecon_cache) stops asking a device for
// labels once one answer says it does not support them, so the same
// listing costs one. The question reaches the daemon only when no
// security module answered it (vfs_getxattr asks the LSM first for
// security.*): for the kernel the mount carries no labels, which is what
// EOPNOTSUPP says. A label that is there is read and answered as before,
// and every other name keeps its ENODATA (README "Limits and decisions").
// Only where SELinux is off (labelsOff): where it is on, it answers for
// the mount itself, and a policy labelling FUSE from xattrs would read
// EOPNOTSUPP as a filesystem without them.
type noLabels struct {
	fuse.RawFileSystem
}

// labelAttr is the security label coreutils' ls asks for.
const labelAttr = "security.selinux"

func (n *noLabels) GetXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	sz, st := n.RawFileSystem.GetXAttr(cancel, header, attr, dest)
	if st == fuse.ENOATTR && attr == labelAttr {
		return 0, fuse.ENOTSUP
	}
	return sz, st
}

// labelsOff reports whether the kernel runs without SELinux (no
// selinuxfs), so that no security module reads labels of this mount.
func labelsOff() bool {
	_, err := os.Stat("/sys/fs/selinux/enforce")
	return err != nil
}
