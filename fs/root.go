package fs

import (
	"context"
	"encoding/binary"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// CtlName is the reserved name of the control folder in the mount root.
const CtlName = ".neuralis"

// rootNode is the top of a mount: one folder per source the caller can
// see, and the control folder.
type rootNode struct {
	fusefs.Inode
	t     *tree
	ctl   *fusefs.Inode
	start time.Time

	// mu guards tops and pins: the top folder of each source, by the
	// source (a reload adds and drops sources while requests run; a
	// request finds the top of the source its own state names).
	mu   sync.RWMutex
	tops map[*mounts.Source]*node
	pins map[*mounts.Source]*revNode // git-pinned sources, served from objects
}

var (
	_ = (fusefs.NodeOnAdder)((*rootNode)(nil))
	_ = (fusefs.NodeLookuper)((*rootNode)(nil))
	_ = (fusefs.NodeGetattrer)((*rootNode)(nil))
	_ = (fusefs.NodeOpendirHandler)((*rootNode)(nil))
	_ = (fusefs.NodeStatfser)((*rootNode)(nil))
	_ = (fusefs.NodeGetxattrer)((*rootNode)(nil))
	_ = (fusefs.NodeListxattrer)((*rootNode)(nil))
)

func (r *rootNode) OnAdd(ctx context.Context) {
	r.start = time.Now()
	r.tops = map[*mounts.Source]*node{}
	r.pins = map[*mounts.Source]*revNode{}
	f := r.t.fs
	s := f.state()
	for _, slug := range s.order {
		r.AddChild(slug, r.addSource(ctx, s.srcs[slug]), true)
	}
	r.ctl = r.NewPersistentInode(ctx, newCtlDir(r.t), fusefs.StableAttr{Mode: syscall.S_IFDIR, Ino: f.newVirtualIno()})
	r.AddChild(CtlName, r.ctl, true)
}

// addSource makes the top folder of src.
func (r *rootNode) addSource(ctx context.Context, src *mounts.Source) *fusefs.Inode {
	f := r.t.fs
	slug := src.Slug()
	attr := fusefs.StableAttr{Mode: syscall.S_IFDIR, Ino: f.newVirtualIno()}
	if src.Config.Kind == mounts.KindGitPinned && f.opts.Git != nil {
		pin := &revNode{t: r.t, slug: slug, pinned: true}
		ch := r.NewPersistentInode(ctx, pin, attr)
		r.mu.Lock()
		r.pins[src] = pin
		r.mu.Unlock()
		return ch
	}
	top := &node{t: r.t, src: src, slug: slug, top: true}
	ch := r.NewPersistentInode(ctx, top, attr)
	r.mu.Lock()
	r.tops[src] = top
	r.mu.Unlock()
	return ch
}

// dropSource forgets the top folder of src, once called slug (a reload
// removed or replaced it; the kernel was told).
func (r *rootNode) dropSource(slug string, src *mounts.Source) {
	r.mu.Lock()
	var in *fusefs.Inode
	if top := r.tops[src]; top != nil {
		in = &top.Inode
	} else if pin := r.pins[src]; pin != nil {
		in = &pin.Inode
	}
	delete(r.tops, src)
	delete(r.pins, src)
	r.mu.Unlock()
	if in == nil {
		return
	}
	if r.GetChild(slug) == in {
		r.RmChild(slug)
	}
	in.ForgetPersistent()
}

// kid is the top folder of slug in s: a node, or a git-pinned tree.
func (r *rootNode) kid(s *state, slug string) (*node, *revNode) {
	src := s.srcs[slug]
	if src == nil {
		return nil, nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.tops[src], r.pins[src]
}

// source is the top node of slug in the running config, or nil.
func (r *rootNode) source(slug string) *node {
	top, _ := r.kid(r.t.fs.state(), slug)
	return top
}

// visible reports whether the caller sees the source at all.
func (r *rootNode) visible(w who, slug string) bool {
	if w.s.pol == nil {
		return true
	}
	return w.s.pol.SourceVisible(w.p, slug) && r.t.canRead(w, slug, "")
}

func (r *rootNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	w, errno := r.t.caller(ctx)
	if errno != 0 {
		return nil, errno
	}
	if name == CtlName {
		ctlAttr(&out.Attr, r.ctl.StableAttr().Ino, syscall.S_IFDIR|0o555)
		return r.ctl, 0
	}
	top, pin := r.kid(w.s, name)
	if pin != nil {
		if !r.visible(w, name) {
			r.t.audit(w, "lookup", uri(name, ""), "visible_to")
			return nil, syscall.ENOENT
		}
		var ao fuse.AttrOut
		pin.Getattr(ctx, nil, &ao)
		out.Attr = ao.Attr
		return &pin.Inode, 0
	}
	if top == nil {
		if _, ok := w.s.srcs[name]; ok {
			// A source a reload is adding right now.
			return nil, syscall.ENOENT
		}
		// No such source for anyone: cacheable (a reload that adds it
		// invalidates the name).
		out.SetEntryTimeout(r.t.entryTimeout(w.s, "", "", true))
		return nil, syscall.ENOENT
	}
	if !r.visible(w, name) {
		r.t.audit(w, "lookup", uri(name, ""), "visible_to")
		return nil, syscall.ENOENT
	}
	var ao fuse.AttrOut
	if errno := top.Getattr(ctx, nil, &ao); errno != 0 {
		return nil, errno
	}
	out.Attr = ao.Attr
	uni := r.t.uniform(w.s, name, "")
	out.SetEntryTimeout(r.t.entryTimeout(w.s, "", "", uni))
	out.SetAttrTimeout(r.t.attrTimeout(w.s, "", "", uni))
	return &top.Inode, 0
}

func (r *rootNode) Getattr(ctx context.Context, f fusefs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	s := r.t.fs.state()
	out.Mode = syscall.S_IFDIR | 0o755
	out.Ino = 1
	out.Nlink = uint32(2 + len(s.order))
	r.t.hideCounts(s, "", &out.Attr, nil)
	out.Uid = r.t.fs.opts.DaemonUID
	out.Gid = uint32(os.Getegid())
	if r.t.view != "" && s.pol != nil {
		v, ok := s.pol.PrincipalByName(r.t.view)
		if !ok {
			v = &policy.Principal{} // a reload dropped it: the view is being unmounted
		}
		// A view caches everything for its principal; its top is that
		// principal's alone, so no other uid can walk the kernel's cached
		// names (and stat what the principal looked up) without a request.
		out.Mode = syscall.S_IFDIR | 0o700
		if len(v.UIDs) > 0 {
			out.Uid = v.UIDs[0]
		}
		if topACL(s.pol, v) != nil {
			out.Mode = syscall.S_IFDIR | 0o750 // the group bits are the ACL's mask
		}
		if len(v.GIDs) > 0 {
			out.Gid = v.GIDs[0]
			if len(v.UIDs) == 0 {
				out.Mode = syscall.S_IFDIR | 0o750
			}
		}
	}
	t := uint64(r.start.Unix())
	out.Atime, out.Mtime, out.Ctime = t, t, t
	out.SetTimeout(r.t.attrTimeout(s, "", "", true))
	return 0
}

// aclAccess is the name of a file's access ACL, aclDefault of a folder's
// default ACL.
const (
	aclAccess  = "system.posix_acl_access"
	aclDefault = "system.posix_acl_default"
)

// topACL is the access ACL of a view's top when its principal has more
// than one uid (nil otherwise): each of them may walk it, as the owner,
// UIDs[0], may. The mode bits alone let only the owner in, so the
// principal's other uids could not reach the view by a path from its
// mountpoint (LTP's tests that set their uid to nobody, of a principal
// with uids root and nobody, could not make their folder). A uid an
// earlier [[principal]] lists is that principal's, not this one's: it is
// left out, as it is left out of the view. The kernel checks the ACL
// itself (default_permissions, POSIX ACLs on); with none it falls back to
// the mode, which is then 0700.
func topACL(pol *policy.Set, v *policy.Principal) []byte {
	var users []uint32
	for _, u := range v.UIDs[min(1, len(v.UIDs)):] {
		if u != v.UIDs[0] && pol.Resolve(u, ^uint32(0)) == v && !slices.Contains(users, u) {
			users = append(users, u)
		}
	}
	if len(users) == 0 {
		return nil
	}
	slices.Sort(users)
	// The xattr's form (linux/posix_acl_xattr.h): a version, then
	// entries of tag, permissions and id, in the kernel's order.
	const (
		version                       = 2
		userObj, user, groupObj, mask = 0x01, 0x02, 0x04, 0x10
		other                         = 0x20
		undefined                     = ^uint32(0)
		rwx, rx, none                 = 7, 5, 0
	)
	b := binary.LittleEndian.AppendUint32(nil, version)
	entry := func(tag, perm uint16, id uint32) {
		b = binary.LittleEndian.AppendUint16(b, tag)
		b = binary.LittleEndian.AppendUint16(b, perm)
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	entry(userObj, rwx, undefined)
	for _, u := range users {
		entry(user, rx, u)
	}
	entry(groupObj, none, undefined)
	entry(mask, rx, undefined)
	entry(other, none, undefined)
	return b
}

// viewTopACL is topACL for this mount's top: nil outside a view.
func (r *rootNode) viewTopACL() []byte {
	s := r.t.fs.state()
	if r.t.view == "" || s.pol == nil {
		return nil
	}
	v, ok := s.pol.PrincipalByName(r.t.view)
	if !ok {
		return nil
	}
	return topACL(s.pol, v)
}

func (r *rootNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	acl := r.viewTopACL()
	if attr != aclAccess || acl == nil {
		return 0, syscall.ENODATA
	}
	if len(dest) == 0 {
		return uint32(len(acl)), 0
	}
	if len(dest) < len(acl) {
		return uint32(len(acl)), syscall.ERANGE
	}
	return uint32(copy(dest, acl)), 0
}

func (r *rootNode) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	if r.viewTopACL() == nil {
		return 0, 0
	}
	name := aclAccess + "\x00"
	if len(dest) == 0 {
		return uint32(len(name)), 0
	}
	if len(dest) < len(name) {
		return uint32(len(name)), syscall.ERANGE
	}
	return uint32(copy(dest, name)), 0
}

func (r *rootNode) OpendirHandle(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	w, errno := r.t.caller(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	d := &dirHandle{fd: -1}
	d.entries = append(d.entries,
		fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: 1},
		fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: 1},
		fuse.DirEntry{Name: CtlName, Mode: syscall.S_IFDIR, Ino: r.ctl.StableAttr().Ino})
	for _, slug := range w.s.order {
		if !r.visible(w, slug) {
			continue
		}
		top, pin := r.kid(w.s, slug)
		var ino uint64
		switch {
		case top != nil:
			ino = top.StableAttr().Ino
		case pin != nil:
			ino = pin.StableAttr().Ino
		default:
			continue // being added by a reload
		}
		d.entries = append(d.entries, fuse.DirEntry{Name: slug, Mode: syscall.S_IFDIR, Ino: ino})
	}
	return d, 0, 0
}

func (r *rootNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var st unix.Statfs_t
	s := r.t.fs.state()
	for _, slug := range s.order {
		if root, err := s.srcs[slug].Root(); err == nil {
			if st, err = root.Statfs(); err == nil {
				break
			}
		}
	}
	out.Bsize = uint32(st.Bsize)
	out.Frsize = uint32(st.Frsize)
	out.Blocks, out.Bfree, out.Bavail = st.Blocks, st.Bfree, st.Bavail
	out.Files, out.Ffree = st.Files, st.Ffree
	out.NameLen = 255
	return 0
}
