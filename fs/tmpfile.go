package fs

import (
	"context"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
)

// open(2) with O_TMPFILE: the kernel sends TMPFILE for the folder, and
// the file it gets has no name until the caller links it into place
// (linkat(2) of its descriptor with AT_EMPTY_PATH, or of
// /proc/self/fd/N with AT_SYMLINK_FOLLOW), which reaches us as a LINK
// of a node with no name.
//
// Policy. A file with no name has no uri, so the folder's decides: the
// caller needs write on the folder itself (a rule for the folder's
// files only, `dir/*.txt`, does not let a tmpfile in; the created file
// would be one of no pattern). Linking it then needs write on the new
// name and that name not hidden, as any new name does. Nothing else can
// reach the file meanwhile: it has no name on the mount or in the
// backing folder, and its content is the caller's own.
//
// Where the caller's writes are held for review, the tmpfile is made in
// its layer (held.Layer.MakeNameless: the folder as the caller sees it,
// copied up as for a new name there, the review bound checked as for a
// create), and linking it makes a new held name (Layer.Make), which the
// review lists as a created file; a tmpfile never linked leaves nothing
// to review. A tmpfile may be linked only where it was made: one made in
// a layer into a folder whose writes the same layer holds, one made in
// the backing folder into a folder written directly; anything else is
// EXDEV, as a link across file systems (a held file never gets a name
// among the backing files before approval). The journal keeps nothing
// for a tmpfile (there is nothing it overwrites); once linked, the
// index, the journal and git hear of the new name as of any file made
// through the mount.

var _ = (fusefs.NodeTmpfiler)((*node)(nil))

func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fusefs.Inode, fusefs.FileHandle, uint32, syscall.Errno) {
	w, rel, r, errno := n.prep(ctx)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	lay, errno := n.t.allowWrite(w, "tmpfile", n.slug, rel)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if errno := n.t.fs.opens.room(quotaKey(w)); errno != 0 {
		return nil, nil, 0, errno
	}
	uid, gid := n.t.fs.owner(w)
	// O_NOCTTY as in Open; O_APPEND as in Create (WRITE requests carry
	// the kernel's offset).
	oflags := int(flags)&^(syscall.O_APPEND|fuse.FMODE_EXEC) | syscall.O_NOCTTY
	var fd int
	var st unix.Stat_t
	var err error
	if lay != nil {
		// In the caller's layer: the folder as it sees it, copied up.
		fd, err = lay.MakeNameless(r, rel, func(up *mounts.Root) (fd int, err error) {
			fd, st, err = up.Tmpfile(rel, oflags, mode&^syscall.S_IFMT, uid, gid)
			return fd, err
		})
		if err != nil {
			return nil, nil, 0, heldErrno(err)
		}
	} else if fd, st, err = r.Tmpfile(rel, oflags, mode&^syscall.S_IFMT, uid, gid); err != nil {
		return nil, nil, 0, toErrno(err)
	}
	fromStat(&out.Attr, &st)
	out.Attr.Ino = n.ino(&st)
	out.SetAttrTimeout(n.t.attrTimeout(w.s, n.slug, rel, n.t.uniform(w.s, n.slug, rel)))
	ch := n.newChild(ctx, &st)
	cn := ch.Operations().(*node)
	cn.madeIn.Store(lay)
	fh := newFileHandle(cn, w, "", fd, true, flags)
	fh.hold(lay)
	return ch, fh, 0, 0
}

// linkNameless gives tn, a file with no name (a tmpfile, or a file
// removed while open), the name name in n; see the top of this file.
// The backing file system decides whether the file may have a name again
// (mounts.Root.LinkFd); the kernel has refused the link already for a
// file removed while open, or made with O_EXCL.
func (n *node) linkNameless(ctx context.Context, w who, r *mounts.Root, rel string, tn *node, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	crel := join(rel, name)
	if errno := n.t.hiddenName(w, "link", n.slug, crel); errno != 0 {
		return nil, errno
	}
	if n.reserved(rel, name) {
		return nil, syscall.EPERM
	}
	lay, errno := n.t.allowWrite(w, "link", n.slug, crel)
	if errno != 0 {
		return nil, errno
	}
	if tn.madeIn.Load() != lay {
		// Not where it was made (see the top of this file).
		return nil, syscall.EXDEV
	}
	fd, ok := tn.orphanFd()
	if !ok {
		return nil, syscall.ENOENT
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	var err error
	if lay != nil {
		err = lay.Make(r, crel, func(up *mounts.Root) (err error) {
			st, err = up.LinkFd(fd, crel)
			return err
		})
	} else {
		st, err = r.LinkFd(fd, crel)
	}
	return n.linkDone(ctx, w, lay, tn, crel, &st, err, out)
}
