package fs

import (
	"container/list"
	"context"
	"hash/fnv"
	iofs "io/fs"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/neuralis/neuralisfs/gitfs"
	"github.com/neuralis/neuralisfs/policy"
)

// Commit trees, read-only and served from git objects: a git-pinned
// source's whole tree, and `<slug>/.revs/<rev>/` in a git source. Policy
// applies to them through the path inside the tree, so a rule on
// `data://secrets/**` hides secrets/ in every commit too.

// revsDir is `<slug>/.revs/`: one folder per branch and tag; any other
// revision (a sha, abbreviated or not) can be looked up by name. A branch
// name with "/" is shown with "%2F".
type revsDir struct {
	fusefs.Inode
	t    *tree
	slug string
}

var (
	_ = (fusefs.NodeLookuper)((*revsDir)(nil))
	_ = (fusefs.NodeGetattrer)((*revsDir)(nil))
	_ = (fusefs.NodeOpendirHandler)((*revsDir)(nil))
)

func (d *revsDir) Getattr(ctx context.Context, f fusefs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctlAttr(&out.Attr, d.StableAttr().Ino, syscall.S_IFDIR|0o555)
	listingMayChange(&out.Attr)
	return 0
}

func (d *revsDir) OpendirHandle(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	if _, errno := d.t.caller(ctx); errno != 0 {
		return nil, 0, errno
	}
	h := &dirHandle{fd: -1}
	h.entries = append(h.entries, fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR}, fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR})
	for _, r := range d.t.fs.opts.Git.Revs(d.slug) {
		h.entries = append(h.entries, fuse.DirEntry{Name: strings.ReplaceAll(r, "/", "%2F"), Mode: syscall.S_IFDIR})
	}
	return h, 0, 0
}

func (d *revsDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	if _, errno := d.t.caller(ctx); errno != 0 {
		return nil, errno
	}
	rev, err := url.PathUnescape(name)
	if err != nil {
		return nil, syscall.ENOENT
	}
	tr, err := d.t.fs.opts.Git.Tree(d.slug, rev)
	if err != nil {
		return nil, toErrno(err)
	}
	n := &revNode{t: d.t, slug: d.slug, tr: tr}
	ino := revIno(d.slug, tr.Commit().String(), "")
	ctlAttr(&out.Attr, ino, syscall.S_IFDIR|0o555)
	// A branch moves: the name is looked up again every time.
	return d.NewInode(ctx, n, fusefs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino}), 0
}

// revNode is a file, folder or symlink of a commit tree.
type revNode struct {
	fusefs.Inode
	t    *tree
	slug string
	tr   *gitfs.Tree
	path string // inside the tree; "" is its root
	// pinned is set for a git-pinned source's top: it resolves its tree
	// through the git layer (which reports why when it cannot).
	pinned bool
	// data is the file's content, kept in a view without OPEN (noOpen)
	// for the READs after the first; elem is its place in tree.revs.
	data atomic.Pointer[bytesHandle]
	elem *list.Element
}

var (
	_ = (fusefs.NodeOnForgetter)((*revNode)(nil))
	_ = (fusefs.NodeLookuper)((*revNode)(nil))
	_ = (fusefs.NodeGetattrer)((*revNode)(nil))
	_ = (fusefs.NodeOpener)((*revNode)(nil))
	_ = (fusefs.NodeReader)((*revNode)(nil))
	_ = (fusefs.NodeReadlinker)((*revNode)(nil))
	_ = (fusefs.NodeOpendirHandler)((*revNode)(nil))
)

func revIno(slug, commit, p string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(slug + "\x00" + commit + "\x00" + p))
	return h.Sum64() | virtualInoBase
}

func (n *revNode) tree() (*gitfs.Tree, error) {
	if n.pinned {
		return n.t.fs.opts.Git.Tree(n.slug, "")
	}
	return n.tr, nil
}

func revMode(e gitfs.Entry) uint32 {
	switch {
	case e.Mode&iofs.ModeSymlink != 0:
		return syscall.S_IFLNK | 0o777
	case e.Mode.IsDir():
		return syscall.S_IFDIR | 0o555
	case e.Mode&0o111 != 0:
		return syscall.S_IFREG | 0o555
	}
	return syscall.S_IFREG | 0o444
}

func (n *revNode) fillEntry(s *state, out *fuse.Attr, tr *gitfs.Tree, p string, e gitfs.Entry) {
	out.Ino = revIno(n.slug, tr.Commit().String(), p)
	out.Mode = revMode(e)
	out.Size = uint64(e.Size)
	out.Nlink = 1
	out.Blksize = 4096
	out.Blocks = (out.Size + 511) / 512
	n.t.maskExec(s, n.slug, p, out)
}

func (n *revNode) Getattr(ctx context.Context, f fusefs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	tr, err := n.tree()
	if err != nil {
		if n.pinned {
			ctlAttr(&out.Attr, n.StableAttr().Ino, syscall.S_IFDIR|0o555)
			return 0
		}
		return toErrno(err)
	}
	e, err := tr.Stat(n.path)
	if err != nil {
		return toErrno(err)
	}
	n.fillEntry(n.t.fs.state(), &out.Attr, tr, n.path, e)
	if n.pinned {
		out.Ino = n.StableAttr().Ino
		if n.path == "" {
			listingMayChange(&out.Attr)
		}
	}
	return 0
}

func (n *revNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	w, errno := n.t.caller(ctx)
	if errno != 0 {
		return nil, errno
	}
	tr, err := n.tree()
	if err != nil {
		return nil, toErrno(err)
	}
	p := join(n.path, name)
	if errno := n.t.allow(w, "lookup", n.slug, p, policy.Read); errno != 0 {
		return nil, errno
	}
	e, err := tr.Stat(p)
	if err != nil {
		return nil, toErrno(err)
	}
	n.fillEntry(w.s, &out.Attr, tr, p, e)
	uni := n.t.uniform(w.s, n.slug, p)
	if n.pinned {
		// A pinned commit never changes.
		out.SetEntryTimeout(n.t.entryTimeout(w.s, "", "", uni))
		out.SetAttrTimeout(n.t.attrTimeout(w.s, "", "", uni))
	}
	ch := &revNode{t: n.t, slug: n.slug, tr: tr, path: p}
	return n.NewInode(ctx, ch, fusefs.StableAttr{Mode: out.Attr.Mode & syscall.S_IFMT, Ino: out.Attr.Ino}), 0
}

func (n *revNode) OpendirHandle(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	w, errno := n.t.caller(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	tr, err := n.tree()
	if err != nil {
		return nil, 0, toErrno(err)
	}
	ents, err := tr.ReadDir(n.path)
	if err != nil {
		return nil, 0, toErrno(err)
	}
	h := &dirHandle{fd: -1}
	h.entries = append(h.entries, fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR}, fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR})
	for _, e := range ents {
		p := join(n.path, e.Name)
		if !n.t.canRead(w, n.slug, p) {
			continue
		}
		h.entries = append(h.entries, fuse.DirEntry{Name: e.Name, Mode: revMode(e) & syscall.S_IFMT, Ino: revIno(n.slug, tr.Commit().String(), p)})
	}
	return h, 0, 0
}

func (n *revNode) Open(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return nil, 0, syscall.EROFS
	}
	w, errno := n.t.caller(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	if errno := n.t.allow(w, "open", n.slug, n.path, policy.Read); errno != 0 {
		return nil, 0, errno
	}
	if flags&fuse.FMODE_EXEC != 0 {
		if errno := n.t.allow(w, "open", n.slug, n.path, policy.Exec); errno != 0 {
			return nil, 0, errno
		}
	}
	if b := n.data.Load(); b != nil {
		return b, fuse.FOPEN_KEEP_CACHE, 0
	}
	tr, err := n.tree()
	if err != nil {
		return nil, 0, toErrno(err)
	}
	data, err := tr.ReadFile(n.path)
	if err != nil {
		return nil, 0, toErrno(err)
	}
	b := &bytesHandle{data: data}
	if n.t.noOpen {
		n.t.revs.keep(n, b)
	}
	// A commit's content never changes: the kernel may keep its pages.
	return b, fuse.FOPEN_KEEP_CACHE, 0
}

// OnForget drops the content a view without OPEN kept (Read).
func (n *revNode) OnForget() {
	if n.t.noOpen {
		n.t.revs.forget(n)
	}
}

func (n *revNode) Read(ctx context.Context, f fusefs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	b, ok := f.(*bytesHandle)
	if !ok && f == nil {
		// An open the kernel made without asking (noOpen): decided
		// as Open would at every READ, the content kept for the next.
		fh, _, errno := n.Open(ctx, syscall.O_RDONLY)
		if errno != 0 {
			return nil, errno
		}
		b, ok = fh.(*bytesHandle), true
	}
	if !ok {
		return nil, syscall.EBADF
	}
	return b.read(dest, off), 0
}

func (n *revNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	tr, err := n.tree()
	if err != nil {
		return nil, toErrno(err)
	}
	s, err := tr.Readlink(n.path)
	if err != nil {
		return nil, toErrno(err)
	}
	return []byte(s), 0
}
