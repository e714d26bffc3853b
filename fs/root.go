package fs

import (
	"context"
	"os"
	"syscall"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
)

// CtlName is the reserved name of the control folder in the mount root.
const CtlName = ".neuralis"

// rootNode is the top of a mount: one folder per source the caller can
// see, and the control folder.
type rootNode struct {
	fusefs.Inode
	t     *tree
	tops  map[string]*node
	pins  map[string]*revNode // git-pinned sources, served from objects
	ctl   *fusefs.Inode
	start time.Time
}

var (
	_ = (fusefs.NodeOnAdder)((*rootNode)(nil))
	_ = (fusefs.NodeLookuper)((*rootNode)(nil))
	_ = (fusefs.NodeGetattrer)((*rootNode)(nil))
	_ = (fusefs.NodeOpendirHandler)((*rootNode)(nil))
	_ = (fusefs.NodeStatfser)((*rootNode)(nil))
)

func (r *rootNode) OnAdd(ctx context.Context) {
	r.start = time.Now()
	r.tops = map[string]*node{}
	r.pins = map[string]*revNode{}
	f := r.t.fs
	for _, slug := range f.order {
		if f.srcs[slug].Config.Kind == mounts.KindGitPinned && f.opts.Git != nil {
			pin := &revNode{t: r.t, slug: slug, pinned: true}
			ch := r.NewPersistentInode(ctx, pin, fusefs.StableAttr{Mode: syscall.S_IFDIR, Ino: f.newVirtualIno()})
			r.AddChild(slug, ch, true)
			r.pins[slug] = pin
			continue
		}
		top := &node{t: r.t, src: f.srcs[slug], slug: slug, top: true}
		ch := r.NewPersistentInode(ctx, top, fusefs.StableAttr{Mode: syscall.S_IFDIR, Ino: f.newVirtualIno()})
		r.AddChild(slug, ch, true)
		r.tops[slug] = top
	}
	r.ctl = r.NewPersistentInode(ctx, newCtlDir(r.t), fusefs.StableAttr{Mode: syscall.S_IFDIR, Ino: f.newVirtualIno()})
	r.AddChild(CtlName, r.ctl, true)
}

// source is the top node of slug, or nil.
func (r *rootNode) source(slug string) *node { return r.tops[slug] }

// visible reports whether the caller sees the source at all.
func (r *rootNode) visible(w who, slug string) bool {
	if r.t.fs.pol == nil {
		return true
	}
	return r.t.fs.pol.SourceVisible(w.p, slug) && r.t.canRead(w, slug, "")
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
	if pin := r.pins[name]; pin != nil {
		if !r.visible(w, name) {
			r.t.audit(w, "lookup", uri(name, ""), "visible_to")
			return nil, syscall.ENOENT
		}
		var ao fuse.AttrOut
		pin.Getattr(ctx, nil, &ao)
		out.Attr = ao.Attr
		return &pin.Inode, 0
	}
	top := r.tops[name]
	if top == nil {
		// No such source for anyone: cacheable.
		out.SetEntryTimeout(r.t.entryTimeout("", "", true))
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
	uni := r.t.uniform(name, "")
	out.SetEntryTimeout(r.t.entryTimeout("", "", uni))
	out.SetAttrTimeout(r.t.attrTimeout("", "", uni))
	return &top.Inode, 0
}

func (r *rootNode) Getattr(ctx context.Context, f fusefs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o755
	out.Ino = 1
	out.Nlink = uint32(2 + len(r.tops))
	r.t.hideCounts(&out.Attr)
	out.Uid = r.t.fs.opts.DaemonUID
	out.Gid = uint32(os.Getegid())
	if v := r.t.view; v != nil {
		// A view caches everything for its principal; its top is that
		// principal's alone, so no other uid can walk the kernel's cached
		// names (and stat what the principal looked up) without a request.
		out.Mode = syscall.S_IFDIR | 0o700
		if len(v.UIDs) > 0 {
			out.Uid = v.UIDs[0]
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
	out.SetTimeout(r.t.attrTimeout("", "", true))
	return 0
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
	for _, slug := range r.t.fs.order {
		if !r.visible(w, slug) {
			continue
		}
		d.entries = append(d.entries, fuse.DirEntry{Name: slug, Mode: syscall.S_IFDIR, Ino: r.GetChild(slug).StableAttr().Ino})
	}
	return d, 0, 0
}

func (r *rootNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var st unix.Statfs_t
	for _, slug := range r.t.fs.order {
		if root, err := r.t.fs.srcs[slug].Root(); err == nil {
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
