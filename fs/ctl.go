package fs

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strings"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/neuralis/neuralisfs/policy"
)

// The control folder <mountpoint>/.neuralis/ (DESIGN.md §8): read-only,
// virtual, rendered per caller at open and never cached by the kernel.

// ctlContent renders a control file for the caller.
type ctlContent func(ctx context.Context, w who) ([]byte, error)

// ctlDir is a virtual folder whose children are control files, or, for
// search/, any name at all (the name is the query).
type ctlDir struct {
	fusefs.Inode
	t     *tree
	files map[string]ctlContent
	order []string
	// query, when set, makes every name a file rendered by query(name).
	query func(name string) ctlContent
}

var (
	_ = (fusefs.NodeLookuper)((*ctlDir)(nil))
	_ = (fusefs.NodeGetattrer)((*ctlDir)(nil))
	_ = (fusefs.NodeOpendirHandler)((*ctlDir)(nil))
)

func newCtlDir(t *tree) *ctlDir {
	d := &ctlDir{t: t, files: map[string]ctlContent{}}
	d.add("sources", t.renderSources)
	d.add("whoami", t.renderWhoami)
	return d
}

func (d *ctlDir) add(name string, c ctlContent) {
	d.files[name] = c
	d.order = append(d.order, name)
}

func (d *ctlDir) OnAdd(ctx context.Context) {
	if d.query != nil {
		return
	}
	s := &ctlDir{t: d.t, files: map[string]ctlContent{}, query: d.t.searchContent}
	ch := d.NewPersistentInode(ctx, s, fusefs.StableAttr{Mode: syscall.S_IFDIR, Ino: d.t.fs.newVirtualIno()})
	d.AddChild("search", ch, true)
	h := &historyDir{t: d.t}
	ch = d.NewPersistentInode(ctx, h, fusefs.StableAttr{Mode: syscall.S_IFDIR, Ino: d.t.fs.newVirtualIno()})
	d.AddChild("history", ch, true)
}

func ctlAttr(out *fuse.Attr, ino uint64, mode uint32) {
	out.Ino = ino
	out.Mode = mode
	out.Nlink = 1
	if mode&syscall.S_IFDIR != 0 {
		out.Nlink = 2
	}
}

func (d *ctlDir) Getattr(ctx context.Context, f fusefs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctlAttr(&out.Attr, d.StableAttr().Ino, syscall.S_IFDIR|0o555)
	return 0
}

func (d *ctlDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	if _, errno := d.t.caller(ctx); errno != 0 {
		return nil, errno
	}
	if d.query == nil && (name == "search" || name == "history") {
		ch := d.GetChild(name)
		ctlAttr(&out.Attr, ch.StableAttr().Ino, syscall.S_IFDIR|0o555)
		return ch, 0
	}
	var c ctlContent
	if d.query != nil {
		c = d.query(name)
	} else if c = d.files[name]; c == nil {
		return nil, syscall.ENOENT
	}
	ino := d.t.fs.newVirtualIno()
	ctlAttr(&out.Attr, ino, syscall.S_IFREG|0o444)
	return d.NewInode(ctx, &ctlFile{content: c, t: d.t}, fusefs.StableAttr{Mode: syscall.S_IFREG, Ino: ino}), 0
}

func (d *ctlDir) OpendirHandle(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	if _, errno := d.t.caller(ctx); errno != 0 {
		return nil, 0, errno
	}
	h := &dirHandle{fd: -1}
	h.entries = append(h.entries, fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR}, fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR})
	if d.query == nil {
		h.entries = append(h.entries, fuse.DirEntry{Name: "search", Mode: syscall.S_IFDIR}, fuse.DirEntry{Name: "history", Mode: syscall.S_IFDIR})
	}
	for _, name := range d.order {
		h.entries = append(h.entries, fuse.DirEntry{Name: name, Mode: syscall.S_IFREG})
	}
	return h, 0, 0
}

// ctlFile is a control file; its content is rendered at open for the caller.
type ctlFile struct {
	fusefs.Inode
	t       *tree
	content ctlContent
}

var (
	_ = (fusefs.NodeOpener)((*ctlFile)(nil))
	_ = (fusefs.NodeGetattrer)((*ctlFile)(nil))
	_ = (fusefs.NodeReader)((*ctlFile)(nil))
)

func (c *ctlFile) Getattr(ctx context.Context, f fusefs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctlAttr(&out.Attr, c.StableAttr().Ino, syscall.S_IFREG|0o444)
	if b, ok := f.(*bytesHandle); ok {
		out.Size = uint64(len(b.data))
	}
	return 0
}

func (c *ctlFile) Open(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return nil, 0, syscall.EROFS
	}
	w, errno := c.t.caller(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	data, err := c.content(ctx, w)
	if err != nil {
		return nil, 0, toErrno(err)
	}
	return &bytesHandle{data: data}, fuse.FOPEN_DIRECT_IO, 0
}

func (c *ctlFile) Read(ctx context.Context, f fusefs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	b, ok := f.(*bytesHandle)
	if !ok {
		return nil, syscall.EBADF
	}
	return b.read(dest, off), 0
}

// bytesHandle is an open virtual file: content fixed at open.
type bytesHandle struct{ data []byte }

func (b *bytesHandle) read(dest []byte, off int64) fuse.ReadResult {
	if off >= int64(len(b.data)) {
		return fuse.ReadResultData(nil)
	}
	end := min(off+int64(len(dest)), int64(len(b.data)))
	return fuse.ReadResultData(b.data[off:end])
}

// renderSources lists every source the caller can see with its status.
func (t *tree) renderSources(ctx context.Context, w who) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# slug\tkind\tstatus\tcode\tidentity\treason\n")
	for _, slug := range t.fs.order {
		if !t.root.visible(w, slug) {
			continue
		}
		src := t.fs.srcs[slug]
		st := src.Status()
		identity := ""
		if t.fs.opts.SourceStatus != nil {
			st, identity = t.fs.opts.SourceStatus(slug)
		}
		reason := st.Reason
		if sh := t.fs.shadowedIn(slug); len(sh) > 0 {
			var vis []string
			for _, p := range sh {
				if t.canRead(w, slug, p) {
					vis = append(vis, p)
				}
			}
			if len(vis) > 0 {
				if reason != "" {
					reason += "; "
				}
				reason += "backing files hidden by virtual names: " + strings.Join(vis, ", ")
			}
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\t%s\t%s\n", slug, src.Config.Kind, st.State, dash(st.Code), dash(identity), dash(reason))
	}
	return b.Bytes(), nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return strings.ReplaceAll(s, "\n", " ")
}

func (t *tree) renderWhoami(ctx context.Context, w who) ([]byte, error) {
	name, roles := "owner", ""
	if w.p != nil {
		name, roles = w.p.Name, strings.Join(w.p.Roles, ",")
	}
	view := ""
	if t.view != nil {
		view = "view: " + t.view.Name + "\n"
	}
	return fmt.Appendf(nil, "uid: %d\ngid: %d\nprincipal: %s\nroles: %s\n%s", w.uid, w.gid, name, roles, view), nil
}

// searchContent renders `.neuralis/search/<query>`: the name is the
// query, with %2F for "/" (and any other %-escape).
func (t *tree) searchContent(name string) ctlContent {
	return func(ctx context.Context, w who) ([]byte, error) {
		q, err := url.PathUnescape(name)
		if err != nil {
			q = name
		}
		if t.fs.opts.Search == nil {
			return []byte("search is off: this mount was started without an index\n"), nil
		}
		canRead := func(u string) bool {
			slug, rel, err := policy.ParseURI(u)
			if err != nil {
				return false
			}
			return t.root.visible(w, slug) && t.canRead(w, slug, rel)
		}
		out, err := t.fs.opts.Search.SearchText(ctx, q, canRead)
		if err != nil {
			return []byte(err.Error() + "\n"), nil
		}
		return out, nil
	}
}
