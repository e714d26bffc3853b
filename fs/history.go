package fs

import (
	"context"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/policy"
)

// historyDir is `.neuralis/history/` and every folder below it:
// `.neuralis/history/<slug>/<path>` is a folder where the source has a
// folder, and otherwise a read-only file listing the journaled versions of
// that file (deleted files included) that the caller may read.
type historyDir struct {
	fusefs.Inode
	t    *tree
	slug string // "" at .neuralis/history itself
	rel  string
}

var (
	_ = (fusefs.NodeLookuper)((*historyDir)(nil))
	_ = (fusefs.NodeGetattrer)((*historyDir)(nil))
	_ = (fusefs.NodeOpendirHandler)((*historyDir)(nil))
)

func (h *historyDir) Getattr(ctx context.Context, f fusefs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctlAttr(&out.Attr, h.StableAttr().Ino, syscall.S_IFDIR|0o555)
	return 0
}

func (h *historyDir) OpendirHandle(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	w, errno := h.t.caller(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	d := &dirHandle{fd: -1}
	d.entries = append(d.entries, fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR}, fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR})
	if h.slug == "" {
		for _, slug := range w.s.order {
			if h.t.root.visible(w, slug) {
				d.entries = append(d.entries, fuse.DirEntry{Name: slug, Mode: syscall.S_IFDIR})
			}
		}
	}
	return d, 0, 0
}

func (h *historyDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	w, errno := h.t.caller(ctx)
	if errno != 0 {
		return nil, errno
	}
	j := h.t.fs.journal()
	slug, rel := h.slug, join(h.rel, name)
	if h.slug == "" {
		slug, rel = name, ""
		if _, ok := w.s.srcs[slug]; !ok || !h.t.root.visible(w, slug) {
			return nil, syscall.ENOENT
		}
	} else if !h.t.canRead(w, slug, rel) {
		return nil, syscall.ENOENT
	}
	dir := rel == ""
	if !dir {
		if r, err := w.s.srcs[slug].Root(); err == nil {
			if st, err := r.Lstat(rel); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				dir = true
			}
		}
	}
	ino := h.t.fs.newVirtualIno()
	if dir {
		ctlAttr(&out.Attr, ino, syscall.S_IFDIR|0o555)
		return h.NewInode(ctx, &historyDir{t: h.t, slug: slug, rel: rel}, fusefs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino}), 0
	}
	if j == nil {
		return nil, syscall.ENOENT
	}
	content := func(ctx context.Context, w who) ([]byte, error) {
		files, done := h.t.sightFor(w)
		defer done()
		return j.History(slug, rel, func(u string) bool {
			s, r, err := policy.ParseURI(u)
			return err == nil && h.t.root.visible(w, s) && h.t.canRead(w, s, r) && files.canSee(s, r)
		}, func(u string) bool {
			s, r, err := policy.ParseURI(u)
			return err == nil && files.canRead(s, r)
		}, files.cred)
	}
	ctlAttr(&out.Attr, ino, syscall.S_IFREG|0o444)
	return h.NewInode(ctx, &ctlFile{t: h.t, content: content}, fusefs.StableAttr{Mode: syscall.S_IFREG, Ino: ino}), 0
}
