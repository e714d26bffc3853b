package fs

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/held"
	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// node is a file, folder, symlink or special file of a source, served from
// the backing folder. The source's top folder is a node too (top is set);
// it is persistent and keeps a fixed inode number while the backing folder
// comes and goes.
type node struct {
	fusefs.Inode
	t    *tree
	src  *mounts.Source
	slug string
	top  bool
	// handles are the node's open files (see orphan.go).
	handles handleSet
	// toldCtime is the ctime of the attributes last answered to a
	// GETATTR or SETATTR (fill): a writer's release that finds the file
	// so need not make the kernel drop them (fileHandle.Release).
	toldCtime atomic.Int64
	// absent are extended attributes known not to exist (xattrcache.go).
	absent atomic.Pointer[absentXattrs]
	// pc decides which opens the kernel's page cache serves (pagecache.go).
	pc pageCache
	// linked is set on a file the backing folder gave more than one link
	// (noteLinks): its requests check that the name they go by is still
	// its own (liveName).
	linked atomic.Bool
	// listed is what the last full listing of a folder found, in a main
	// mount whose rules differ by principal (keptlist.go).
	listed atomic.Pointer[listRecord]
	// removed is a folder's attributes as rmdir through the mount found
	// them, for a process still working in it (orphan.go).
	removed atomic.Pointer[unix.Stat_t]
	// madeIn is the layer a file made with O_TMPFILE where the caller's
	// writes are held was made in; nil for one made in the backing folder
	// and for every other file (tmpfile.go: a file with no name may be
	// linked only where it was made).
	madeIn atomic.Pointer[held.Layer]
}

var (
	_ = (fusefs.NodeLookuper)((*node)(nil))
	_ = (fusefs.NodeGetattrer)((*node)(nil))
	_ = (fusefs.NodeSetattrer)((*node)(nil))
	_ = (fusefs.NodeOpener)((*node)(nil))
	_ = (fusefs.NodeCreater)((*node)(nil))
	_ = (fusefs.NodeOpendirHandler)((*node)(nil))
	_ = (fusefs.NodeMkdirer)((*node)(nil))
	_ = (fusefs.NodeMknoder)((*node)(nil))
	_ = (fusefs.NodeRmdirer)((*node)(nil))
	_ = (fusefs.NodeUnlinker)((*node)(nil))
	_ = (fusefs.NodeRenamer)((*node)(nil))
	_ = (fusefs.NodeSymlinker)((*node)(nil))
	_ = (fusefs.NodeReadlinker)((*node)(nil))
	_ = (fusefs.NodeLinker)((*node)(nil))
	_ = (fusefs.NodeStatfser)((*node)(nil))
	_ = (fusefs.NodeGetxattrer)((*node)(nil))
	_ = (fusefs.NodeSetxattrer)((*node)(nil))
	_ = (fusefs.NodeRemovexattrer)((*node)(nil))
	_ = (fusefs.NodeListxattrer)((*node)(nil))
	_ = (fusefs.NodeCopyFileRanger)((*node)(nil))
	_ = (fusefs.NodeGetlker)((*node)(nil))
	_ = (fusefs.NodeSetlker)((*node)(nil))
	_ = (fusefs.NodeSetlkwer)((*node)(nil))
	_ = (fusefs.NodeLseeker)((*node)(nil))
	_ = (fusefs.NodeAllocater)((*node)(nil))
	_ = (fusefs.NodeFsyncer)((*node)(nil))
	_ = (fusefs.NodeFlusher)((*node)(nil))
)

// rel is the node's path relative to its source root; ok is false for a
// node that is no longer linked into the tree (deleted while open).
func (n *node) rel() (string, bool) {
	if n.top {
		return "", true
	}
	var segs []string
	var p *fusefs.Inode = &n.Inode
	for {
		name, parent := p.Parent()
		if parent == nil || len(segs) > maxDepth {
			// Past maxDepth the parents go round: go-fuse keys nodes by
			// inode number, and a folder number the backing file system
			// freed and gave to another folder while the kernel still held
			// the old node linked the old node in at the new place too.
			// Folders swapping numbers (an agent's renames in a view while
			// the owner deleted and remade the tree) made a node its own
			// ancestor, and this loop grew without end: the daemon at
			// 50–90 % CPU and 1.3 GB, the request never answered, and
			// the folders it locked hung every process that touched them
			// (a data-integrity pass). The request now fails as for a
			// node that left the tree.
			return "", false
		}
		segs = append(segs, name)
		if pn, ok := parent.Operations().(*node); ok && pn.top {
			break
		}
		if _, ok := parent.Operations().(*node); !ok {
			return "", false
		}
		p = parent
	}
	for i, j := 0, len(segs)-1; i < j; i, j = i+1, j-1 {
		segs[i], segs[j] = segs[j], segs[i]
	}
	return strings.Join(segs, "/"), true
}

// maxDepth bounds the folders above a node: more than PATH_MAX (4096
// bytes) allows.
const maxDepth = 4096

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// prep resolves the caller, the node's path and the source's root: the
// common start of every operation (gocryptfs' prepareAtSyscall).
func (n *node) prep(ctx context.Context) (who, string, *mounts.Root, syscall.Errno) {
	w, errno := n.t.caller(ctx)
	if errno != 0 {
		return w, "", nil, errno
	}
	rel, ok := n.rel()
	if !ok {
		return w, "", nil, syscall.ENOENT
	}
	r, err := n.src.Root()
	if err != nil {
		return w, rel, nil, toErrno(err)
	}
	if n.linked.Load() {
		rel = n.liveName(w.s, r, rel)
	}
	return w, rel, r, 0
}

// liveName is rel, the name a hard-linked file's requests go by (go-fuse
// takes the name the file was found by last), or, when that name has gone
// from the backing folder or names another file now, another name the
// file is known by: the gone one is dropped from the node, as the
// watcher's report of it will (tree.invalidate), and a request the kernel
// sends before that report, such as a permission check's GETATTR or ACL
// read through the name left, finds the file rather than ENOENT
// (TestHardLinkKeepsItsLocksWhenANameGoes failed about 1 run in 20 under
// the race detector so). A name left alone is kept: a file with none has
// only its open handles (orphan.go). Not where writes are held: there
// the node may be a principal's layer copy, which the backing folder's
// change does not remove.
func (n *node) liveName(s *state, r *mounts.Root, rel string) string {
	if s.pol != nil && s.pol.Reviews() {
		return rel
	}
	for range 8 {
		// The pair the node goes by now (another request may have
		// dropped the one rel was made from meanwhile).
		name, parent := n.Parent()
		if parent == nil {
			return rel
		}
		pn, ok := parent.Operations().(*node)
		if !ok {
			return rel
		}
		prel, ok := pn.rel()
		if !ok {
			return rel
		}
		cur := join(prel, name)
		st, err := r.Lstat(cur)
		if err == nil && n.t.fs.same(&st, &n.Inode) {
			return cur
		}
		if err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ENOTDIR) {
			return cur
		}
		if parent.GetChild(name) != &n.Inode {
			continue
		}
		parent.RmChild(name)
		if _, ok := n.rel(); !ok {
			parent.AddChild(name, &n.Inode, false) // its only name: kept
			return cur
		}
	}
	return rel
}

func fromStat(out *fuse.Attr, st *unix.Stat_t) {
	out.FromStat((*syscall.Stat_t)(unsafe.Pointer(st)))
}

// hideCounts keeps a folder's link count from counting subfolders a
// principal may not see: where a policy hides something in the source
// slug ("" for the mount's top, which lists the sources), folders report
// one link, as btrfs does ("unknown"; find then does not rely on it),
// unless st's count is the caller's own (countedLinks). st may be nil.
func (t *tree) hideCounts(s *state, slug string, out *fuse.Attr, st *unix.Stat_t) {
	if out.Mode&syscall.S_IFMT == syscall.S_IFDIR && !t.showsCounts(s, slug) {
		if st != nil && st.Nlink&countedLinks != 0 {
			out.Nlink = uint32(st.Nlink &^ countedLinks)
		} else {
			out.Nlink = 1
		}
		// Sizes count entries (tmpfs) or name bytes (btrfs): a fixed
		// size, as ext4 shows for a small folder, tells nothing.
		out.Size = 4096
		out.Blocks = 8
	}
}

// showsCounts reports whether the main mount shows every caller the
// folders of slug with their link counts and sizes on disk: with no
// policy in force, or in a source where the policy hides nothing from
// anyone (policy.Set.HidesNothing; never for the mount's top, slug "").
// A view counts by its principal (viewLinks, heldLinks).
func (t *tree) showsCounts(s *state, slug string) bool {
	if t.view != "" {
		return false
	}
	return s.trivial || slug != "" && s.pol != nil && s.pol.HidesNothing(slug)
}

// fill sets out from st with our inode numbering.
func (n *node) fill(s *state, out *fuse.Attr, st *unix.Stat_t) {
	n.noteLinks(st)
	n.toldCtime.Store(st.Ctim.Nano())
	fromStat(out, st)
	n.t.hideCounts(s, n.slug, out, st)
	if n.top {
		out.Ino = n.StableAttr().Ino
		return
	}
	out.Ino = n.ino(st)
	if n.t.noOpen && out.Mode&0o111 != 0 {
		rel, _ := n.rel() // only for a file that shows execute bits
		n.t.maskExec(s, n.slug, rel, out)
	}
}

// newChild makes (or finds) the inode for a backing file found by stat.
func (n *node) newChild(ctx context.Context, st *unix.Stat_t) *fusefs.Inode {
	child := &node{t: n.t, src: n.src, slug: n.slug}
	child.noteLinks(st)
	return n.NewInode(ctx, child, fusefs.StableAttr{
		Mode: st.Mode & syscall.S_IFMT,
		Ino:  n.ino(st),
	})
}

// noteLinks marks n as a file that may be known by more than one name
// (see liveName) when the backing folder gives it more than one link. (go-fuse
// picks a node already known by the file's number over a new one after
// Lookup returns, so the mark is made whenever the file is seen so:
// found, stat'ed, linked.)
func (n *node) noteLinks(st *unix.Stat_t) {
	if st.Nlink > 1 && st.Mode&syscall.S_IFMT != syscall.S_IFDIR && !n.linked.Load() {
		n.linked.Store(true)
	}
}

// foundChild is newChild for a name looked up: a folder go-fuse still
// keeps under that name is reused rather than replaced.
//
// go-fuse finds a known inode by its identity only while the kernel
// holds it. A folder the kernel forgot stays in go-fuse's tree while it
// has children — a hard-linked file the kernel still holds through its
// other name — but is no longer found by identity, so a new lookup of
// its name would make a second inode and put it under the name. The old
// one would keep its children and its stale idea of where it is: a
// rename of the new one does not move it, and the file's path, taken
// through it, would name the folder's old place — an ENOENT, or another
// file's name there (found by fsstress: lchown of a hard-linked symlink
// after its other folder was forgotten, looked up and exchanged).
// Reusing the folder keeps one inode per folder, as go-fuse keeps one per
// file the kernel holds.
func (n *node) foundChild(ctx context.Context, name string, st *unix.Stat_t) *fusefs.Inode {
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		sa := fusefs.StableAttr{Mode: syscall.S_IFDIR, Ino: n.ino(st)}
		if old := n.GetChild(name); old != nil && old.StableAttr() == sa {
			if on, ok := old.Operations().(*node); ok && on.src == n.src {
				return old
			}
		}
	}
	return n.newChild(ctx, st)
}

// entry fills an EntryOut for a child at rel with the right cache timeouts.
func (n *node) entry(out *fuse.EntryOut, s *state, rel string, st *unix.Stat_t) {
	fromStat(&out.Attr, st)
	n.t.hideCounts(s, n.slug, &out.Attr, st)
	out.Attr.Ino = n.ino(st)
	n.t.maskExec(s, n.slug, rel, &out.Attr)
	uni := n.t.uniform(s, n.slug, rel)
	out.SetEntryTimeout(n.t.entryTimeout(s, n.slug, rel, uni))
	out.SetAttrTimeout(n.t.fileAttrTimeout(s, n.slug, rel, uni, st))
}

// nameMax is NAME_MAX of the file systems sources live on (ext4, xfs,
// btrfs, tmpfs): the kernel's FUSE client allows names up to 1024 bytes
// and leaves the rest to the daemon.
const nameMax = 255

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	if len(name) > nameMax {
		// As the backing file system would answer, also where the name's
		// folder is only in a principal's layer, and so absent on the
		// backing side (which answered ENOENT first).
		return nil, syscall.ENAMETOOLONG
	}
	w, rel, r, errno := n.prep(ctx)
	if errno != 0 {
		return nil, errno
	}
	if daemonName(name) {
		return nil, syscall.ENOENT
	}
	crel := join(rel, name)
	if v := n.virtualLookup(ctx, w, rel, name, out); v != nil {
		return v, 0
	}
	if errno := n.t.allow(w, "lookup", n.slug, crel, policy.Read); errno != 0 {
		return nil, errno
	}
	st, errno := n.lstatAs(w, r, crel)
	if errno != 0 {
		if errno == syscall.ENOENT && n.t.uniform(w.s, n.slug, crel) {
			// Absent for everyone: the kernel may remember that; a later
			// create through the mount or a watched change clears it.
			out.SetEntryTimeout(n.t.entryTimeout(w.s, n.slug, crel, true))
		}
		return nil, errno
	}
	if !layerShows(w.s, n.slug, crel, st.Mode) {
		out.SetEntryTimeout(n.t.entryTimeout(w.s, n.slug, crel, true)) // absent for everyone
		return nil, syscall.ENOENT
	}
	n.entry(out, w.s, crel, &st)
	return n.foundChild(ctx, name, &st), 0
}

func (n *node) Getattr(ctx context.Context, f fusefs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if fh, ok := f.(*fileHandle); ok && fh != nil {
		var st unix.Stat_t
		if err := unix.Fstat(fh.fd(), &st); err != nil {
			return toErrno(err)
		}
		s := n.t.fs.state()
		n.fill(s, &out.Attr, &st)
		rel, _ := n.rel()
		out.SetTimeout(n.t.fileAttrTimeout(s, n.slug, rel, n.t.uniform(s, n.slug, rel), &st))
		return 0
	}
	w, rel, r, errno := n.prep(ctx)
	if errno == syscall.ENOENT {
		if fd, ok := n.orphanFd(); ok {
			defer unix.Close(fd)
			return n.orphanAttr(fd, out)
		}
		if n.removedAttr(out) {
			return 0
		}
		errno = n.lostName(errno)
	}
	if errno != 0 {
		if n.top && errno == syscall.ENOMEDIUM {
			// A missing source still shows as a folder in the root, so
			// `ls` lists it; entering it answers the error.
			out.Mode = syscall.S_IFDIR | 0o555
			out.Ino = n.StableAttr().Ino
			out.Nlink = 2
			return 0
		}
		return errno
	}
	if !n.top {
		if errno := n.t.allow(w, "getattr", n.slug, rel, policy.Read); errno != 0 {
			return errno
		}
	}
	st, errno := n.lstatAs(w, r, rel)
	if errno == syscall.ENOENT {
		// Removed behind the mount while the kernel still holds the
		// name: ESTALE, as for a name given a file of another kind
		// (otherKind), so that the path walk asking (stat(2), or the
		// permission check of an open(2) with O_CREAT) looks the name up
		// afresh and meets what is there now, where ENOENT would end an
		// open that a plain folder lets create the file again.
		return syscall.ESTALE
	}
	if errno != 0 {
		return errno
	}
	if n.otherKind(&st) {
		return syscall.ESTALE
	}
	n.fill(w.s, &out.Attr, &st)
	out.SetTimeout(n.t.fileAttrTimeout(w.s, n.slug, rel, n.t.uniform(w.s, n.slug, rel), &st))
	return 0
}

// lostName is the answer, in place of prep's ENOENT, to a question about
// a node that lost its name and has no open handle to answer from: ESTALE
// when it is a name a rename through the mount replaced (an editor's
// save). The kernel can still ask about the replaced file's inode for a
// path walk that found it just before the rename: the rename drops the
// replaced file's attributes, so the permission check of an open (with
// default_permissions) asks for them again (GETATTR, and GETXATTR of its
// ACL), and stat, chmod, readlink and the xattr calls ask as they are.
// On a plain folder those calls act on the file they found, or on the
// new one; ENOENT would fail them, and the kernel retries none but ESTALE
// (with a fresh lookup, LOOKUP_REVAL), which meets the file at the name
// now, or answers ENOENT if there is none. A name removed through the
// mount is never found again: the kernel drops its entry first. Other
// errors pass as they are.
func (n *node) lostName(errno syscall.Errno) syscall.Errno {
	if errno != syscall.ENOENT || n.top {
		return errno
	}
	if _, named := n.rel(); named {
		return errno
	}
	return syscall.ESTALE
}

// otherKind reports whether st, found at the node's path, is a file of
// another kind than the node: its name was given a folder where a file
// was, or the reverse, behind the mount, and the kernel has not heard
// yet. The node's attributes must not come from st then: go-fuse keeps a
// node's kind and would pair it with st's permission bits (a folder that
// a 0644 file replaced would refuse its owner's search, EACCES, where a
// plain folder answers ENOTDIR). ESTALE is the answer instead: stat(2),
// chmod(2) and a path walk's permission check then look the name up
// afresh (retry_estale, LOOKUP_REVAL), as NFS clients do, and meet the
// new file.
func (n *node) otherKind(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT != n.StableAttr().Mode&unix.S_IFMT
}

func (n *node) Setattr(ctx context.Context, f fusefs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	fh, _ := f.(*fileHandle)
	w, rel, r, errno := n.prep(ctx)
	if errno == syscall.ENOENT && !n.top {
		return n.lostName(n.orphanSetattr(fh, in, out))
	}
	if errno != 0 {
		return errno
	}
	lay, errno := n.t.allowWrite(w, "setattr", n.slug, rel)
	if errno != 0 {
		return errno
	}
	lower := r
	if lay != nil {
		// Held: the change is made on the layer's copy.
		if err := lay.CopyUp(r, rel); err != nil {
			return heldErrno(err)
		}
		r = lay.Upper()
		if fh != nil && fh.lay != lay {
			fh = nil // a handle of the backing file
		}
	} else {
		n.t.fs.own.mark(n.slug, rel, nil, n.t)
	}
	// Without a handle, resolve the path once (O_PATH, confined) and make
	// every change through that descriptor.
	fd, isLink := -1, false
	if fh != nil {
		fd = fh.fd()
	} else {
		pfd, err := r.OpenPath(rel)
		if err != nil {
			return toErrno(err)
		}
		defer unix.Close(pfd)
		fd = pfd
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return toErrno(err)
		}
		if n.otherKind(&st) {
			return syscall.ESTALE
		}
		isLink = st.Mode&unix.S_IFMT == unix.S_IFLNK
	}
	trunc := func(sz int64) error {
		if lay != nil {
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return err
			}
			if lay.CheckSize(rel, st.Ino, st.Size, sz) != nil {
				return n.t.overQuota(w, n.slug, rel)
			}
		}
		if lay == nil && (fh == nil || !fh.writer) {
			// A write handle's content was kept when it was opened.
			n.t.fs.beforeChange(w, n.slug, rel, "truncate")
		}
		var err error
		if fh != nil {
			err = unix.Ftruncate(fh.fd(), sz)
		} else {
			err = r.Truncate(rel, sz)
		}
		if err == nil && lay == nil {
			n.t.fs.changed(n.t, n.slug, rel)
		}
		return err
	}
	var linkTimes func([2]unix.Timespec) error
	if isLink {
		linkTimes = func(ts [2]unix.Timespec) error { return r.Utimens(rel, ts) }
	}
	if errno := setattrFd(fd, in, trunc, linkTimes); errno != 0 {
		return errno
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return toErrno(err)
	}
	if lay != nil {
		lay.Wrote(rel)
		lay.KeepIno(lower, rel, &st)
		if n.t.view != "" {
			lay.MovedIno(lower, rel, &st)
		}
		n.t.heldChanged(n.slug, rel)
	} else if in.Valid&fuse.FATTR_SIZE == 0 && in.Valid&setattrChanges != 0 {
		// A mode, owner or time change is git's too (a chmod +x is a
		// change to git): its .status is read again at once, not when
		// the watcher's report of it comes (tens of ms later; found by a
		// differential pass). A truncation told them all: changed.
		if g := n.t.fs.opts.Git; g != nil {
			g.Changed(n.slug, rel)
		}
		n.t.othersChanged(n.slug, rel)
	}
	n.heldLinks(w, n.layer(w), lower, rel, &st)
	if lay == nil {
		n.viewLinks(w, &st)
	}
	n.fill(w.s, &out.Attr, &st)
	out.SetTimeout(n.t.fileAttrTimeout(w.s, n.slug, rel, n.t.uniform(w.s, n.slug, rel), &st))
	return 0
}

// setattrChanges are the SETATTR bits that ask for a change; FATTR_FH and
// FATTR_LOCKOWNER only say where the request comes from.
const setattrChanges = fuse.FATTR_MODE | fuse.FATTR_UID | fuse.FATTR_GID | fuse.FATTR_SIZE |
	fuse.FATTR_ATIME | fuse.FATTR_MTIME | fuse.FATTR_ATIME_NOW | fuse.FATTR_MTIME_NOW |
	fuse.FATTR_CTIME

// setattrFd makes the changes of in to the file open at fd: mode, owner,
// size (through trunc) and times (through linkTimes when fd is a symlink's
// O_PATH descriptor, which has no writable /proc path).
func setattrFd(fd int, in *fuse.SetAttrIn, trunc func(int64) error, linkTimes func([2]unix.Timespec) error) syscall.Errno {
	if in.Valid&setattrChanges == 0 {
		// chown(path, -1, -1) reaches us as a SETATTR that changes nothing
		// (the kernel sends its ATTR_CTIME only when it keeps the times
		// itself, with writeback caching). On disk the same call still
		// stamps the ctime; make it on the backing file so the mount shows
		// what a plain folder would.
		if err := unix.Fchownat(fd, "", -1, -1, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return toErrno(err)
		}
		return 0
	}
	if m, ok := in.GetMode(); ok {
		if linkTimes != nil {
			return syscall.EOPNOTSUPP
		}
		if err := mounts.ChmodFd(fd, m&07777); err != nil {
			return toErrno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		su, sg := -1, -1
		if uok {
			su = int(uid)
		}
		if gok {
			sg = int(gid)
		}
		if err := unix.Fchownat(fd, "", su, sg, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return toErrno(err)
		}
	}
	if sz, ok := in.GetSize(); ok {
		if err := trunc(int64(sz)); err != nil {
			return toErrno(err)
		}
	}
	if in.Valid&fuse.FATTR_KILL_SUIDGID != 0 {
		// A truncate by a caller without CAP_FSETID, or any chown
		// (HANDLE_KILLPRIV_V2): the daemon's own truncation, made with
		// its root privileges, keeps the bits.
		killSetID(fd)
	}
	mtime, mok := in.GetMTime()
	atime, aok := in.GetATime()
	if mok || aok {
		ts := [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(atime.UnixNano())
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mtime.UnixNano())
		}
		if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
			ts[0] = unix.Timespec{Nsec: unix.UTIME_NOW}
		}
		if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
			ts[1] = unix.Timespec{Nsec: unix.UTIME_NOW}
		}
		var err error
		if linkTimes != nil {
			err = linkTimes(ts)
		} else {
			err = mounts.UtimesFd(fd, ts[:])
		}
		if err != nil {
			return toErrno(err)
		}
	}
	return 0
}

// openCaps is what an open with flags needs.
func openCaps(flags uint32) []policy.Cap {
	var caps []policy.Cap
	switch flags & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		caps = append(caps, policy.Read)
	case syscall.O_WRONLY:
		caps = append(caps, policy.Write)
	default:
		caps = append(caps, policy.Read, policy.Write)
	}
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		caps = append(caps, policy.Write)
	}
	if flags&fuse.FMODE_EXEC != 0 {
		caps = append(caps, policy.Exec)
	}
	return caps
}

// goneErrno is the answer to an OPEN of a node whose name no longer
// leads to a file of its kind on the backing folder: removed, or replaced
// by a symlink (ELOOP: the daemon never follows one) or under a file
// (ENOTDIR), behind the mount before the kernel heard of it (the watcher
// is milliseconds behind, and its echo of a path the mount changed itself
// waits out ownWindow). ESTALE makes the kernel look the path up afresh
// and open again (do_filp_open retries once with LOOKUP_REVAL): an
// O_CREAT open then makes the file, and any other open answers as the
// name now is, as on a plain folder. Anything else is err's errno.
func goneErrno(err error) syscall.Errno {
	switch errno := toErrno(err); errno {
	case syscall.ENOENT, syscall.ENOTDIR, syscall.ELOOP:
		return syscall.ESTALE
	default:
		return errno
	}
}

func writing(flags uint32) bool {
	return flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	w, rel, r, errno := n.prep(ctx)
	if errno != 0 {
		if _, ok := n.rel(); !ok && !n.top {
			// The node has no name: a file removed while open, opened
			// again through /proc/self/fd/N (orphanOpen); or one that
			// lost its name between the kernel's lookup and this OPEN,
			// a rename through the mount replacing it (an editor's
			// save) or a removal. On a plain folder the open then
			// finds the file at the name now; ESTALE makes the kernel
			// look the name up again and open that (as goneErrno).
			if w, cerr := n.t.caller(ctx); cerr == 0 {
				if fh, errno := n.orphanOpen(w, flags); errno != syscall.ESTALE {
					if errno != 0 {
						return nil, 0, errno
					}
					return fh, 0, 0
				}
			}
			return nil, 0, syscall.ESTALE
		}
		return nil, 0, errno
	}
	if errno := n.t.fs.opens.room(quotaKey(w)); errno != 0 {
		return nil, 0, errno
	}
	var lay *held.Layer
	for _, c := range openCaps(flags) {
		if c == policy.Write {
			var errno syscall.Errno
			if lay, errno = n.t.allowWrite(w, "open", n.slug, rel); errno != 0 {
				return nil, 0, errno
			}
			continue
		}
		if errno := n.t.allow(w, "open", n.slug, rel, c); errno != 0 {
			return nil, 0, errno
		}
	}
	wr := writing(flags)
	if lay != nil || !wr {
		if fh, errno, done := n.heldOpen(w, lay, r, rel, flags); done {
			return fh, 0, errno
		}
	}
	// O_NOCTTY: the kernel knows the node as a regular file, but a
	// terminal swapped in behind the mount must never become the
	// daemon's controlling terminal.
	oflags := int(flags)&^(syscall.O_APPEND|fuse.FMODE_EXEC|syscall.O_CREAT|syscall.O_EXCL) | syscall.O_NOCTTY
	fd := -1
	var st unix.Stat_t // of fd, for a read-only open
	if wr && n.t.fs.journal() != nil {
		var errno syscall.Errno
		if fd, errno = n.openKept(w, rel, r, oflags); errno != 0 {
			return nil, 0, errno
		}
	}
	if fd < 0 {
		if wr {
			n.t.fs.beforeChange(w, n.slug, rel, "open")
			n.t.fs.own.mark(n.slug, rel, nil, n.t)
		}
		var err error
		fd, err = r.Open(rel, oflags, 0)
		if err != nil && wr && flags&syscall.O_APPEND != 0 && errors.Is(err, syscall.EPERM) {
			// An append-only file (chattr +a) opens for writing only
			// with O_APPEND, which oflags leaves out (WRITE requests come
			// with the offset the kernel chose, and pwrite on an O_APPEND
			// descriptor ignores it). Such a file can only grow at its
			// end, which is where every write through this descriptor
			// then goes (xfstests generic/079).
			fd, err = r.Open(rel, oflags|syscall.O_APPEND, 0)
		}
		if err != nil {
			return nil, 0, goneErrno(err)
		}
		if errno := n.sameNodeStat(fd, &st); errno != 0 {
			unix.Close(fd)
			return nil, 0, errno
		}
	}
	if wr && flags&syscall.O_TRUNC != 0 {
		if w.uid != 0 {
			killSetID(fd)
		}
		n.t.fs.changed(n.t, n.slug, rel)
	}
	h := newFileHandle(n, w, rel, fd, wr, flags)
	if wr {
		return h, 0, 0
	}
	return h, n.cacheOpen(h, w, rel, flags, &st), 0
}

// openKept opens rel for a write-open with oflags when the journal keeps
// what it overwrites: read-write and without O_TRUNC, so the journal
// reads the content through the descriptor the caller gets (one confined
// open instead of two), and only then truncated as O_TRUNC asks. It
// returns -1 (and no error) when that cannot be done — the file is not
// open read-write to the daemon, or is not a regular file — and Open then
// takes the ordinary way: the journal opens the file itself, and the
// open goes with the caller's flags. (The caller's access mode still
// holds: the kernel sends no READ for a file opened write-only, and
// passthrough opens its own backing file with the caller's flags.)
func (n *node) openKept(w who, rel string, r *mounts.Root, oflags int) (int, syscall.Errno) {
	if oflags&syscall.O_DIRECT != 0 {
		// The journal's read would need aligned buffers.
		return -1, 0
	}
	// No access time stamped by the journal's read: the caller's
	// write-open would not stamp it on a plain folder.
	how := oflags&^(syscall.O_TRUNC|syscall.O_ACCMODE) | syscall.O_RDWR
	fd, err := r.OpenNoAtime(rel, how)
	if err != nil {
		return -1, 0
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, 0
	}
	if n.ino(&st) != n.StableAttr().Ino {
		unix.Close(fd) // replaced behind the mount (sameNode)
		return -1, syscall.ESTALE
	}
	n.t.fs.beforeOpen(w, n.slug, rel, fd, &st)
	if oflags&syscall.O_ACCMODE != syscall.O_WRONLY {
		// The caller reads through fd (unless passthrough serves it): its
		// reads stamp the access time as they would on a plain folder.
		// (F_SETFL sets the status flags — O_NOATIME, O_NONBLOCK, … — to
		// how's, which has no O_NOATIME.)
		unix.FcntlInt(uintptr(fd), unix.F_SETFL, how)
	}
	n.t.fs.own.mark(n.slug, rel, nil, n.t)
	if oflags&syscall.O_TRUNC != 0 {
		if err := unix.Ftruncate(fd, 0); err != nil {
			unix.Close(fd)
			return -1, toErrno(err)
		}
	}
	return fd, 0
}

// killSetID clears the set-user-id bit, and the set-group-id bit of a
// group-executable file, of the file open at fd (an O_PATH descriptor
// too), as truncation by a caller without CAP_FSETID does. With
// ATOMIC_O_TRUNC the kernel truncates through our OPEN and leaves this to
// us, and with HANDLE_KILLPRIV_V2 its SETATTRs ask for it; the daemon's
// own truncation, done with its root privileges, keeps the bits.
// (security.capability is dropped by the backing filesystem on any
// truncation.)
func killSetID(fd int) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	kill := uint32(0)
	if st.Mode&unix.S_ISUID != 0 {
		kill |= unix.S_ISUID
	}
	if st.Mode&(unix.S_ISGID|unix.S_IXGRP) == unix.S_ISGID|unix.S_IXGRP {
		kill |= unix.S_ISGID
	}
	if kill != 0 {
		mounts.ChmodFd(fd, st.Mode&07777&^kill) // Fchmod refuses O_PATH
	}
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fusefs.Inode, fusefs.FileHandle, uint32, syscall.Errno) {
	w, rel, r, errno := n.prep(ctx)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	crel := join(rel, name)
	if errno := n.t.hiddenName(w, "create", n.slug, crel); errno != 0 {
		return nil, nil, 0, errno
	}
	if errno := n.t.fs.opens.room(quotaKey(w)); errno != 0 {
		return nil, nil, 0, errno
	}
	lay, errno := n.t.allowWrite(w, "create", n.slug, crel)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if n.reserved(rel, name) {
		return nil, nil, 0, syscall.EPERM
	}
	uid, gid := n.t.fs.owner(w)
	if lay != nil {
		return n.heldCreate(ctx, w, lay, r, crel, flags, mode, uid, gid, out)
	}
	// Always exclusive: CREATE comes when the kernel believes the name
	// absent, which a cached negative entry, a racing create or a name
	// hidden from this caller can make untrue. Opening (and chowning) the
	// file that is there would skip the kernel's permission check on it,
	// the policy's read check and the journal. ESTALE makes the kernel
	// look the name up afresh and open it the ordinary way (do_filp_open
	// retries once with LOOKUP_REVAL). A name hidden from the caller never
	// gets here (hiddenName).
	oflags := int(flags)&^(syscall.O_APPEND|fuse.FMODE_EXEC) | syscall.O_EXCL
	fd, st, err := r.Create(crel, oflags, mode&^syscall.S_IFMT, uid, gid)
	if err != nil {
		if errors.Is(err, syscall.EEXIST) && flags&syscall.O_EXCL == 0 {
			return nil, nil, 0, syscall.ESTALE
		}
		return nil, nil, 0, toErrno(err)
	}
	n.t.fs.created(n.t, w, n.slug, crel, &st)
	n.entry(out, w.s, crel, &st)
	ch := n.newChild(ctx, &st)
	cn := ch.Operations().(*node)
	if cn.absentCacheable(crel) {
		// The kernel asks at the file's first write whether it has
		// capabilities to drop; a file just made has none.
		cn.keepAbsent(n.t.fs.xattrGen(), "security.capability")
	}
	fh := newFileHandle(cn, w, crel, fd, true, flags)
	return ch, fh, 0, 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	w, rel, r, errno := n.prep(ctx)
	if errno == syscall.ENOENT && n.removedAttr(nil) {
		// A process working in a folder removed through the mount lists
		// it (ls): the kernel answers every readdir of it itself, as
		// ENOENT, which the C library reads as an empty folder.
		return &dirHandle{fd: -1}, 0, 0
	}
	if errno != 0 {
		return nil, 0, errno
	}
	if errno := n.t.allow(w, "opendir", n.slug, rel, policy.Read); errno != 0 {
		return nil, 0, errno
	}
	if errno := n.t.fs.opens.room(quotaKey(w)); errno != 0 {
		return nil, 0, errno
	}
	if lay := n.layer(w); lay != nil {
		return n.openHeldDir(w, lay, r, rel)
	}
	fd, err := r.Open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, 0, toErrno(err)
	}
	d := n.openDir(w, rel, fd)
	if !n.t.cacheAll(w.s) {
		// Rules differ by principal (never in a view): only a listing
		// the same for everyone may be kept (keptlist.go).
		keep, errno := n.keptList(w, rel, fd, flags, d)
		if errno != 0 {
			d.Releasedir(ctx, 0)
			return nil, 0, errno
		}
		return d, keep, 0
	}
	if n.t.fs.watched(n.slug, rel) {
		// Every caller gets this same listing, and every change to the
		// folder reaches the kernel (through the mount, or as the
		// watcher's invalidation): it may keep the listing.
		return d, fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, 0
	}
	return d, 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	return n.makeChild(ctx, "mkdir", name, out, func(r *mounts.Root, crel string, uid, gid int) (unix.Stat_t, error) {
		return r.Mkdir(crel, mode&^syscall.S_IFMT, uid, gid)
	})
}

func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	// The kernel already refuses device nodes to callers without CAP_MKNOD;
	// the daemon, which runs as root, refuses them too for anyone but root,
	// so no caller can make a device node in a backing folder through it.
	if t := mode & syscall.S_IFMT; t == syscall.S_IFCHR || t == syscall.S_IFBLK {
		if c, ok := fuse.FromContext(ctx); !ok || c.Uid != 0 {
			return nil, syscall.EPERM
		}
	}
	return n.makeChild(ctx, "mknod", name, out, func(r *mounts.Root, crel string, uid, gid int) (unix.Stat_t, error) {
		return r.Mknod(crel, mode, int(dev), uid, gid)
	})
}

// makeChild is the common path of mkdir, mknod and symlink: write on the
// new name, no reserved names, owned by the caller, then the index, git and
// journal hear of it.
func (n *node) makeChild(ctx context.Context, op, name string, out *fuse.EntryOut, mk func(r *mounts.Root, crel string, uid, gid int) (unix.Stat_t, error)) (*fusefs.Inode, syscall.Errno) {
	w, rel, r, errno := n.prep(ctx)
	if errno != 0 {
		return nil, errno
	}
	crel := join(rel, name)
	if errno := n.t.hiddenName(w, op, n.slug, crel); errno != 0 {
		return nil, errno
	}
	lay, errno := n.t.allowWrite(w, op, n.slug, crel)
	if errno != 0 {
		return nil, errno
	}
	if n.reserved(rel, name) {
		return nil, syscall.EPERM
	}
	uid, gid := n.t.fs.owner(w)
	if lay != nil {
		var st unix.Stat_t
		err := lay.Make(r, crel, func(up *mounts.Root) (err error) {
			st, err = mk(up, crel, uid, gid)
			return err
		})
		if err != nil {
			return nil, heldErrno(err)
		}
		n.t.heldChanged(n.slug, crel)
		n.heldLinks(w, lay, r, crel, &st)
		n.entry(out, w.s, crel, &st)
		return n.newChild(ctx, &st), 0
	}
	st, err := mk(r, crel, uid, gid)
	if err != nil {
		return nil, toErrno(err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		n.t.fs.forgetXattrs() // a new name (xattrcache.go)
		n.t.fs.changedTo(n.t, n.slug, crel, &st)
	} else {
		n.t.fs.created(n.t, w, n.slug, crel, &st)
	}
	n.viewLinks(w, &st)
	n.entry(out, w.s, crel, &st)
	return n.newChild(ctx, &st), 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	w, rel, r, errno := n.prep(ctx)
	if errno != 0 {
		return errno
	}
	crel := join(rel, name)
	lay, errno := n.t.allowWrite(w, "rmdir", n.slug, crel)
	if errno != 0 {
		return errno
	}
	var child *node
	if ch := n.GetChild(name); ch != nil {
		child, _ = ch.Operations().(*node)
	}
	if lay != nil {
		var st unix.Stat_t
		if child != nil {
			// The kernel holds the folder: a process may be working in
			// it (as below).
			st, _, _ = lay.Lstat(r, crel)
		}
		if err := lay.Remove(r, crel, true); err != nil {
			return heldErrno(err)
		}
		if st.Mode != 0 {
			child.replaced(&st)
		}
		n.t.heldChanged(n.slug, crel)
		return 0
	}
	if child == nil {
		if err := r.Rmdir(crel); err != nil {
			return toErrno(err)
		}
	} else {
		// The kernel holds the folder: a process may be working in it.
		st, err := r.RmdirStat(crel)
		if err != nil {
			return toErrno(err)
		}
		child.replaced(&st)
	}
	n.t.fs.removed(n.t, n.slug, crel, true)
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	w, rel, r, errno := n.prep(ctx)
	if errno != 0 {
		return errno
	}
	crel := join(rel, name)
	lay, errno := n.t.allowWrite(w, "unlink", n.slug, crel)
	if errno != 0 {
		return errno
	}
	if lay != nil {
		if err := lay.Remove(r, crel, false); err != nil {
			return heldErrno(err)
		}
		n.t.heldChanged(n.slug, crel)
		return 0
	}
	n.t.fs.beforeRemove(w, n.slug, crel, "unlink", n.GetChild(name))
	if err := r.Unlink(crel); err != nil {
		return toErrno(err)
	}
	n.t.fs.removed(n.t, n.slug, crel, false)
	return 0
}

// afterBackingRename, when set (by tests), runs in Rename between the
// backing folder's rename and go-fuse's move of the node, where a
// watcher report of the rename may come in (FS.moving).
var afterBackingRename atomic.Pointer[func(slug, oldRel, newRel string)]

func (n *node) Rename(ctx context.Context, name string, newParent fusefs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok || np.src != n.src {
		// Another source (or the virtual root): mv falls back to copy.
		return syscall.EXDEV
	}
	w, rel, r, errno := n.prep(ctx)
	if errno != 0 {
		return errno
	}
	nrel, ok := np.rel()
	if !ok {
		return syscall.ENOENT
	}
	oldRel, newRel := join(rel, name), join(nrel, newName)
	if errno := n.t.hiddenMove(w, "rename", n.slug, oldRel, newRel); errno != 0 {
		return errno
	}
	if np.reserved(nrel, newName) {
		return syscall.EPERM
	}
	lay, errno := n.t.allowWrite2(w, "rename", n.slug, oldRel, newRel)
	if errno != 0 {
		return errno
	}
	n.t.fs.moving(ctx, n.slug, oldRel, newRel)
	if lay != nil {
		st, _, err := lay.Lstat(r, oldRel)
		if err != nil {
			return toErrno(err)
		}
		if errno := n.t.renameAllowed(w, n.slug, oldRel, newRel, st.Mode&unix.S_IFMT == unix.S_IFDIR); errno != 0 {
			return errno
		}
		moving := n.GetChild(name)
		gone, goneSt := np.replacedDir(newName, st.Mode, flags, func() (unix.Stat_t, error) {
			st, _, err := lay.Lstat(r, newRel)
			return st, err
		})
		if err := lay.Rename(r, oldRel, newRel, uint(flags)); err != nil {
			return heldErrno(err)
		}
		gone.replaced(goneSt)
		n.t.heldChanged(n.slug, oldRel, newRel)
		if st.Mode&unix.S_IFMT == unix.S_IFDIR && moving != nil {
			n.t.heldMoved(n.slug, newRel, moving)
		}
		return 0
	}
	st, err := r.Lstat(oldRel)
	if err != nil {
		return toErrno(err)
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if errno := n.t.renameAllowed(w, n.slug, oldRel, newRel, isDir); errno != 0 {
		return errno
	}
	if flags&unix.RENAME_EXCHANGE != 0 {
		nst, err := r.Lstat(newRel)
		if err != nil {
			return toErrno(err)
		}
		if errno := n.t.renameAllowed(w, n.slug, newRel, oldRel, nst.Mode&unix.S_IFMT == unix.S_IFDIR); errno != 0 {
			return errno
		}
	} else {
		n.t.fs.beforeRemove(w, n.slug, newRel, "rename", np.GetChild(newName))
	}
	gone, goneSt := np.replacedDir(newName, st.Mode, flags, func() (unix.Stat_t, error) { return r.Lstat(newRel) })
	if err := r.Rename(oldRel, newRel, uint(flags)); err != nil {
		return toErrno(err)
	}
	if f := afterBackingRename.Load(); f != nil {
		(*f)(n.slug, oldRel, newRel)
	}
	gone.replaced(goneSt)
	n.t.fs.renamed(n.t, w, n.slug, oldRel, newRel, isDir, flags&unix.RENAME_EXCHANGE != 0)
	return 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	return n.makeChild(ctx, "symlink", name, out, func(r *mounts.Root, crel string, uid, gid int) (unix.Stat_t, error) {
		return r.Symlink(target, crel, uid, gid)
	})
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	w, rel, r, errno := n.prep(ctx)
	if errno != 0 {
		return nil, n.lostName(errno)
	}
	if errno := n.t.allow(w, "readlink", n.slug, rel, policy.Read); errno != 0 {
		return nil, errno
	}
	r, _, errno = n.see(w, r, rel)
	if errno != 0 {
		return nil, errno
	}
	b, err := r.Readlink(rel)
	return b, toErrno(err)
}

func (n *node) Link(ctx context.Context, target fusefs.InodeEmbedder, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	tn, ok := target.(*node)
	if !ok || tn.src != n.src {
		return nil, syscall.EXDEV
	}
	w, rel, r, errno := n.prep(ctx)
	if errno != 0 {
		return nil, errno
	}
	trel, ok := tn.rel()
	if !ok {
		return n.linkNameless(ctx, w, r, rel, tn, name, out) // tmpfile.go
	}
	crel := join(rel, name)
	if errno := n.t.hiddenMove(w, "link", n.slug, trel, crel); errno != 0 {
		return nil, errno
	}
	if n.reserved(rel, name) {
		return nil, syscall.EPERM
	}
	lay, errno := n.t.allowWrite2(w, "link", n.slug, trel, crel)
	if errno != 0 {
		return nil, errno
	}
	if errno := n.t.renameAllowed(w, n.slug, trel, crel, false); errno != 0 {
		return nil, errno
	}
	var st unix.Stat_t
	var err error
	if lay != nil {
		if errno := n.heldLinkTarget(lay, r, tn, trel, crel); errno != 0 {
			return nil, errno
		}
		st, err = lay.Link(r, trel, crel)
	} else {
		st, err = r.Link(trel, crel)
	}
	return n.linkDone(ctx, w, lay, tn, crel, &st, err, out)
}

// linkDone answers a LINK of tn that made crel (st and err from making
// it): in the caller's layer lay when the link is held there, else in the
// backing folder, where the index, git and the journal hear of it.
func (n *node) linkDone(ctx context.Context, w who, lay *held.Layer, tn *node, crel string, st *unix.Stat_t, err error, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	if lay != nil {
		if err != nil {
			return nil, heldErrno(err)
		}
		n.t.heldChanged(n.slug, crel)
	} else {
		if err != nil {
			return nil, toErrno(err)
		}
		tn.noteLinks(st)
		n.t.fs.created(n.t, w, n.slug, crel, st)
	}
	n.entry(out, w.s, crel, st)
	return n.newChild(ctx, st), 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	r, err := n.src.Root()
	if err != nil {
		return toErrno(err)
	}
	st, err := r.Statfs()
	if err != nil {
		return toErrno(err)
	}
	out.FromStatfsT((*syscall.Statfs_t)(unsafe.Pointer(&st)))
	return 0
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	w, rel, r, errno := n.prep(ctx)
	if errno == syscall.ENOENT {
		if sz, errno, ok := n.orphanXattr(false, func(fd int) (int, error) { return unix.Fgetxattr(fd, attr, dest) }); ok {
			return uint32(sz), errno
		}
		errno = n.lostName(errno)
	}
	if errno != 0 {
		return 0, errno
	}
	if errno := n.t.allow(w, "getxattr", n.slug, rel, policy.Read); errno != 0 {
		return 0, errno
	}
	names, acls, layered, errno := n.seeXattrs(w, r, rel)
	if errno != 0 {
		return 0, errno
	}
	r = names
	if isACL(attr) {
		r = acls
	}
	// Only an answer about the backing file is kept, and only a caller
	// that sees the backing file there (no layer, or a layer that holds
	// nothing at rel) is answered from it.
	keep := !layered && n.absentCacheable(rel)
	if keep && n.knownAbsent(attr) {
		return 0, syscall.ENODATA
	}
	gen := n.t.fs.xattrGen()
	sz, err := r.Getxattr(rel, attr, dest)
	if keep && errors.Is(err, syscall.ENODATA) {
		n.keepAbsent(gen, attr)
	}
	return uint32(sz), toErrno(err)
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	w, rel, r, errno := n.prep(ctx)
	if errno == syscall.ENOENT {
		uid := uint32(0)
		if c, ok := fuse.FromContext(ctx); ok {
			uid = c.Uid
		}
		if sz, errno, ok := n.orphanXattr(false, func(fd int) (int, error) {
			return listFor(uid, dest, func(b []byte) (int, error) { return unix.Flistxattr(fd, b) })
		}); ok {
			return uint32(sz), errno
		}
		errno = n.lostName(errno)
	}
	if errno != 0 {
		return 0, errno
	}
	if errno := n.t.allow(w, "listxattr", n.slug, rel, policy.Read); errno != 0 {
		return 0, errno
	}
	names, acls, layered, errno := n.seeXattrs(w, r, rel)
	if errno != 0 {
		return 0, errno
	}
	// As Getxattr: only an answer about the backing file is kept or used.
	keep := !layered && n.absentCacheable(rel)
	if keep && n.knownAbsent(noAttrs) {
		return 0, 0
	}
	gen := n.t.fs.xattrGen()
	all := 0
	list := func(b []byte) (int, error) { return names.Listxattr(rel, b) }
	if acls != names {
		list = func(b []byte) (int, error) { return mixedList(names, acls, rel, b) }
	}
	sz, err := listFor(w.uid, dest, func(b []byte) (int, error) {
		k, err := list(b)
		all = k
		return k, err
	})
	if keep && err == nil && all == 0 {
		n.keepAbsent(gen, noAttrs)
	}
	return uint32(sz), toErrno(err)
}

// isACL says whether an attribute is one of a file's POSIX ACLs.
func isACL(name string) bool {
	return name == aclAccess || name == aclDefault
}

// mixedList is a listxattr(2) of rel into dest (its size for an empty
// dest) with the names of names but the POSIX ACLs, and those of acls
// (held.Layer.XattrRoots).
func mixedList(names, acls *mounts.Root, rel string, dest []byte) (int, error) {
	all, err := readNames(func(b []byte) (int, error) { return names.Listxattr(rel, b) })
	if err != nil {
		return 0, err
	}
	var out []byte
	for name := range strings.SplitSeq(strings.TrimSuffix(string(all), "\x00"), "\x00") {
		if name != "" && !isACL(name) {
			out = append(append(out, name...), 0)
		}
	}
	for _, name := range []string{aclAccess, aclDefault} {
		if _, err := acls.Getxattr(rel, name, nil); err == nil {
			out = append(append(out, name...), 0)
		}
	}
	return fill(dest, out)
}

// listFor runs list, a listxattr of a file into a buffer, for a caller
// of uid: one other than root is not shown the trusted.* names, as on
// ext4, where the kernel lists them only to CAP_SYS_ADMIN. The daemon
// reads the list as root, and passed them on to any caller until a
// red-team pass saw uid 1001 list them (getxattr of one already answered
// ENODATA: the kernel refuses it before it reaches the daemon). With an
// empty dest it answers the size the filtered list needs, as
// listxattr(2) does. A list read into dest is filtered there: one
// listxattr, as for root; only a size query, or a dest the unfiltered
// list does not fit, reads the names into a buffer of their own.
func listFor(uid uint32, dest []byte, list func([]byte) (int, error)) (int, error) {
	if uid == 0 {
		return list(dest)
	}
	if len(dest) > 0 {
		k, err := list(dest)
		if err == nil {
			return copy(dest, dropTrusted(dest[:k])), nil
		}
		if !errors.Is(err, unix.ERANGE) {
			return 0, err
		}
	}
	names, err := readNames(list)
	if err != nil {
		return 0, err
	}
	return fill(dest, dropTrusted(names))
}

// readNames reads a whole listxattr(2) answer of list into a buffer of
// its own: its size first, then the names (again when they grew in
// between).
func readNames(list func([]byte) (int, error)) ([]byte, error) {
	for {
		sz, err := list(nil)
		if err != nil || sz == 0 {
			return nil, err
		}
		names := make([]byte, sz)
		k, err := list(names)
		if errors.Is(err, unix.ERANGE) {
			continue // grew in between
		}
		if err != nil {
			return nil, err
		}
		return names[:k], nil
	}
}

// fill answers a listxattr(2) of names into dest: the size they need
// for an empty dest, ERANGE for one too small.
func fill(dest, names []byte) (int, error) {
	switch {
	case len(dest) == 0:
		return len(names), nil
	case len(dest) < len(names):
		return 0, unix.ERANGE
	}
	return copy(dest, names), nil
}

// dropTrusted is the NUL-separated list of names without the trusted.*
// ones, in a new slice.
func dropTrusted(names []byte) []byte {
	kept := make([]byte, 0, len(names))
	for name := range bytes.SplitSeq(names, []byte{0}) {
		if len(name) > 0 && !bytes.HasPrefix(name, []byte("trusted.")) {
			kept = append(append(kept, name...), 0)
		}
	}
	return kept
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	kill := flags&killSGIDFlag != 0
	flags &^= killSGIDFlag
	w, rel, r, errno := n.prep(ctx)
	if errno == syscall.ENOENT {
		if _, errno, ok := n.orphanXattr(true, func(fd int) (int, error) {
			err := unix.Fsetxattr(fd, attr, data, int(flags))
			if err == nil && kill {
				err = killSGID(fd)
			}
			return 0, err
		}); ok {
			return errno
		}
		errno = n.lostName(errno)
	}
	if errno != 0 {
		return errno
	}
	var lay *held.Layer
	if r, lay, errno = n.writeLayer(w, "setxattr", r, rel); errno != 0 {
		return errno
	}
	defer n.t.fs.forgetXattrs()
	set := r.Setxattr
	if lay != nil {
		set = lay.SetXattr // counted in the principal's bound
	}
	if err := set(rel, attr, data, int(flags)); err != nil || !kill {
		if errors.Is(err, held.ErrQuota) {
			return n.t.overQuota(w, n.slug, rel)
		}
		return toErrno(err)
	}
	fd, err := r.OpenPath(rel)
	if err != nil {
		return toErrno(err)
	}
	defer unix.Close(fd)
	return toErrno(killSGID(fd))
}

// killSGIDFlag marks, in Setxattr's flags, an access ACL whose setter is
// neither in the file's group nor has CAP_FSETID (the kernel's
// FUSE_SETXATTR_ACL_KILL_SGID; negCache.SetXAttr puts it there, as
// go-fuse's node API drops the request's extended flags). XATTR_CREATE
// and XATTR_REPLACE are the low bits.
const killSGIDFlag = 1 << 30

// killSGID clears the set-group-id bit of the file open at fd (an O_PATH
// descriptor too), as setting an access ACL does on a plain folder when
// its setter is neither in the file's group nor has CAP_FSETID
// (posix_acl_update_mode). The daemon sets the ACL with its own
// privileges, so the backing filesystem keeps the bit (xfstests
// generic/375).
func killSGID(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_ISGID == 0 {
		return err
	}
	return mounts.ChmodFd(fd, st.Mode&0o7777&^unix.S_ISGID)
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	w, rel, r, errno := n.prep(ctx)
	if errno == syscall.ENOENT {
		if _, errno, ok := n.orphanXattr(true, func(fd int) (int, error) { return 0, unix.Fremovexattr(fd, attr) }); ok {
			return errno
		}
		errno = n.lostName(errno)
	}
	if errno != 0 {
		return errno
	}
	var lay *held.Layer
	if r, lay, errno = n.writeLayer(w, "removexattr", r, rel); errno != 0 {
		return errno
	}
	defer n.t.fs.forgetXattrs()
	if lay != nil {
		return toErrno(lay.RemoveXattr(rel, attr))
	}
	return toErrno(r.Removexattr(rel, attr))
}

func (n *node) CopyFileRange(ctx context.Context, fhIn fusefs.FileHandle, offIn uint64, out *fusefs.Inode, fhOut fusefs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	in, ok1 := fhIn.(*fileHandle)
	o, ok2 := fhOut.(*fileHandle)
	if !ok1 || !ok2 {
		return 0, syscall.EXDEV
	}
	if errno := o.mayGrow(ctx, int64(offOut+length), false); errno != 0 {
		return 0, errno
	}
	ri, wo := int64(offIn), int64(offOut)
	cnt, err := unix.CopyFileRange(in.fd(), &ri, o.fd(), &wo, int(length), int(flags))
	if err == nil {
		o.dirty.Store(true)
	}
	return uint32(cnt), toErrno(err)
}

// File operations go to the handle (go-fuse routes them there when the
// node does not implement them; these forwarders keep the interface
// checks above honest and add nothing).
func (n *node) Getlk(ctx context.Context, f fusefs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	if fh, ok := f.(*fileHandle); ok {
		return fh.Getlk(ctx, owner, lk, flags, out)
	}
	return syscall.EBADF
}

func (n *node) Setlk(ctx context.Context, f fusefs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	if fh, ok := f.(*fileHandle); ok {
		return fh.Setlk(ctx, owner, lk, flags)
	}
	return syscall.EBADF
}

func (n *node) Setlkw(ctx context.Context, f fusefs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	if fh, ok := f.(*fileHandle); ok {
		return fh.Setlkw(ctx, owner, lk, flags)
	}
	return syscall.EBADF
}

func (n *node) Lseek(ctx context.Context, f fusefs.FileHandle, off uint64, whence uint32) (uint64, syscall.Errno) {
	if fh, ok := f.(*fileHandle); ok {
		return fh.Lseek(ctx, off, whence)
	}
	if f == nil {
		// An open the kernel made without asking (noOpen): ENOSYS tells
		// it to seek data and holes itself, by the size it knows.
		return 0, syscall.ENOSYS
	}
	return 0, syscall.EBADF
}

func (n *node) Allocate(ctx context.Context, f fusefs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	if fh, ok := f.(*fileHandle); ok {
		if fh.lay != nil && mode&unix.FALLOC_FL_KEEP_SIZE != 0 && mode&unix.FALLOC_FL_PUNCH_HOLE == 0 {
			// Blocks past the file's end: a held file is counted by
			// its length, which this would not change.
			return syscall.EOPNOTSUPP
		}
		end := int64(off + size)
		if mode&unix.FALLOC_FL_INSERT_RANGE != 0 {
			end = -int64(size) // grows by size wherever it inserts
		}
		if errno := fh.mayGrow(ctx, end, mode&unix.FALLOC_FL_PUNCH_HOLE != 0); errno != 0 {
			return errno
		}
		errno := fh.Allocate(ctx, off, size, mode)
		if errno == 0 {
			fh.dirty.Store(true)
		}
		return errno
	}
	return syscall.EBADF
}

func (n *node) Fsync(ctx context.Context, f fusefs.FileHandle, flags uint32) syscall.Errno {
	if fh, ok := f.(*fileHandle); ok {
		return fh.Fsync(ctx, flags)
	}
	// fsync without a handle (the kernel sends FSYNCDIR without one where
	// it opens folders itself, dirlist.go): sync the file the caller
	// sees, its layer's copy where it holds one.
	w, rel, r, errno := n.prep(ctx)
	if errno != 0 {
		return errno
	}
	var lay *held.Layer
	if r, lay, errno = n.see(w, r, rel); errno != 0 {
		return errno
	}
	fd, err := r.Open(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return toErrno(err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil || lay == nil {
		return toErrno(err)
	}
	return toErrno(lay.Sync(rel))
}

// Flush answers ENOSYS, which tells the kernel never to send FLUSH again
// on this mount: writes already reached the backing file (through
// passthrough or WRITE requests), so a flush has nothing to do, and it
// would cost a synchronous round trip on every close(2). Locks are kept by
// the kernel itself (the mount does not take over POSIX or flock locks), so
// close needs no FLUSH to release them.
func (n *node) Flush(ctx context.Context, f fusefs.FileHandle) syscall.Errno {
	return syscall.ENOSYS
}
