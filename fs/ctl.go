package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/neuralis/neuralisfs/internal/asuser"
	"github.com/neuralis/neuralisfs/internal/held"
	"github.com/neuralis/neuralisfs/mounts"
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
	// sub is set for a folder below .neuralis/ (it has no search/ or
	// history/ of its own).
	sub bool
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
	d.add("collection", t.renderCollection)
	return d
}

func (d *ctlDir) add(name string, c ctlContent) {
	d.files[name] = c
	d.order = append(d.order, name)
}

func (d *ctlDir) OnAdd(ctx context.Context) {
	if d.query != nil || d.sub {
		return
	}
	rv := &ctlDir{t: d.t, files: map[string]ctlContent{}, sub: true}
	rv.add("list", d.t.reviewContent(false))
	rv.add("diff", d.t.reviewContent(true))
	ch0 := d.NewPersistentInode(ctx, rv, fusefs.StableAttr{Mode: syscall.S_IFDIR, Ino: d.t.fs.newVirtualIno()})
	d.AddChild("review", ch0, true)
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
	if d.query == nil && !d.sub && (name == "search" || name == "history" || name == "review") {
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
	if d.query == nil && !d.sub {
		h.entries = append(h.entries, fuse.DirEntry{Name: "search", Mode: syscall.S_IFDIR}, fuse.DirEntry{Name: "history", Mode: syscall.S_IFDIR}, fuse.DirEntry{Name: "review", Mode: syscall.S_IFDIR})
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
	// snap is the content as last rendered for a GETATTR in a view
	// without OPEN (noOpen), which its READs are served from.
	snap atomic.Pointer[ctlSnap]
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
	} else if f == nil && c.t.noOpen {
		// The kernel reads through its page cache, up to this size,
		// and asks for the attributes at each read(2) (they are never
		// cached): the content is rendered now.
		s, errno := c.snapshot(ctx)
		if errno != 0 {
			return errno
		}
		out.Size = uint64(len(s.data))
		out.SetTimes(nil, &s.at, &s.at)
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
	if !ok && f == nil {
		// An open the kernel made without asking (noOpen): the content
		// the last GETATTR rendered, whose size the kernel reads to.
		s := c.snap.Load()
		if s == nil {
			var errno syscall.Errno
			if s, errno = c.snapshot(ctx); errno != 0 {
				return nil, errno
			}
		}
		b, ok = &bytesHandle{data: s.data}, true
	}
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

// ReaderStatus may be offered by the GitState (Options.Git): the status
// and identity of a source as a reader who may read only what canRead
// allows sees it — a WORKTREE_MODIFIED list without the paths hidden from
// them, a folder's digest over the files they can read. A digest or list
// over every file would name hidden files, tell when one changes, and
// confirm a guess of one's content. Without it, such readers are shown no
// identity.
type ReaderStatus interface {
	SourceStatusFor(slug string, canRead func(rel string) bool, filesEach func(rels []string) []bool) (mounts.Status, string)
}

// renderSources lists every source the caller can see with its status.
func (t *tree) renderSources(ctx context.Context, w who) ([]byte, error) {
	var b bytes.Buffer
	transport := "/dev/fuse"
	if t.onRings.Load() {
		transport = "io_uring"
	}
	b.WriteString("# transport: " + transport + "\n")
	b.WriteString("# slug\tkind\tstatus\tcode\tidentity\treason\n")
	// The daemon reads as root: a caller's own file permissions may hide
	// files too (a 0600 file, a 0700 folder), whose content moves the
	// identity and whose changes a checkout's status lists.
	files, done := t.sightFor(w)
	defer done()
	for _, slug := range w.s.order {
		if !t.root.visible(w, slug) {
			continue
		}
		src := w.s.srcs[slug]
		st := src.Status()
		identity := ""
		partial := files.w != nil || files.none || w.s.pol != nil && !(w.s.trivial && t.view == "") && !w.s.pol.ReadsAll(w.p, slug)
		switch rs, ok := t.fs.opts.Git.(ReaderStatus); {
		case partial && ok:
			var each func([]string) []bool
			if files.w != nil || files.none {
				each = func(rels []string) []bool { return files.canReadEach(slug, rels) }
			}
			st, identity = rs.SourceStatusFor(slug, func(rel string) bool { return t.canRead(w, slug, rel) }, each)
		case partial:
			if t.fs.opts.SourceStatus != nil {
				st, _ = t.fs.opts.SourceStatus(slug)
			}
		case t.fs.opts.SourceStatus != nil:
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
	if t.view != "" {
		view = "view: " + t.view + "\n"
	}
	return fmt.Appendf(nil, "uid: %d\ngid: %d\nprincipal: %s\nroles: %s\n%s", w.uid, w.gid, name, roles, view), nil
}

// Collector renders .neuralis/collection: principal's own collection as
// JSON (the daemon's `neuralisfs collect --json`), of the files canRead
// accepts.
type Collector interface {
	CollectionJSON(ctx context.Context, principal string, canRead func(uri string) bool) ([]byte, error)
}

// renderCollection renders .neuralis/collection for the caller.
func (t *tree) renderCollection(ctx context.Context, w who) ([]byte, error) {
	if t.fs.opts.Collection == nil {
		return []byte("{}\n"), nil
	}
	name := policy.Owner
	if w.p != nil {
		name = w.p.Name
	}
	// The daemon reads as root; the caller gets only what its file
	// permissions let it read on the mount.
	files, done := t.sightFor(w)
	defer done()
	return t.fs.opts.Collection.CollectionJSON(ctx, name, func(u string) bool {
		slug, rel, err := policy.ParseURI(u)
		return err == nil && files.canRead(slug, rel)
	})
}

// searchContent renders `.neuralis/search/<query>`: the name is the
// query, with %2F for "/" (and any other %-escape).
func (t *tree) searchContent(name string) ctlContent {
	return func(ctx context.Context, w who) ([]byte, error) {
		q, err := url.PathUnescape(name)
		if err != nil {
			q = name
		}
		search := t.fs.searcher()
		if search == nil {
			return []byte("search is off: the index is disabled ([index] enabled = false)\n"), nil
		}
		files, done := t.sightFor(w)
		defer done()
		canRead := func(u string) bool {
			slug, rel, err := policy.ParseURI(u)
			if err != nil {
				return false
			}
			if !t.root.visible(w, slug) || !t.canRead(w, slug, rel) {
				return false
			}
			// A held file is checked where the caller sees it.
			if lay := t.heldLayer(w, slug); lay != nil {
				return files.canReadHeld(lay, slug, rel)
			}
			return files.canRead(slug, rel)
		}
		out, err := search.SearchText(ctx, q, w.p, canRead)
		if err != nil && ctx.Err() != nil {
			// The caller was interrupted (go-fuse cancels ctx on
			// INTERRUPT): EINTR, which Go's os package and Python
			// retry. Rendered, the error became the file's content: Go's
			// runtime preempts goroutines with SIGURG, so a Go
			// program's open of the file now and then read "context
			// canceled" (tests/index_test.go).
			return nil, err
		}
		if err != nil {
			return []byte(err.Error() + "\n"), nil // a bad query, in one sentence
		}
		return out, nil
	}
}

// sight is what the caller could see of the sources' files on the mount,
// for one answer the daemon renders itself (.neuralis/search, .status,
// history): it reads as root, while on the mount the kernel checks mode
// bits and ACLs against the caller (default_permissions) before the
// policy is asked. So the caller's file permissions are checked too, on a
// thread that has taken its identity (package asuser). A sight without a
// worker checks nothing: for root, the daemon's own uid, or a daemon not
// running as root (which reads only what its own uid may).
type sight struct {
	t    *tree
	w    *asuser.Worker
	none bool // the checks could not be made: nothing is visible
	// cred is the caller's (with its groups unless exempt).
	cred asuser.Cred
}

// sightFor starts the checks for the caller; done ends them. FUSE passes
// the caller's uid, gid and pid; its groups are read from /proc.
func (t *tree) sightFor(w who) (*sight, func()) {
	c := asuser.Cred{UID: w.uid, GID: w.gid}
	if c.Exempt() {
		return &sight{t: t, cred: c}, func() {}
	}
	c.Groups = asuser.Groups(w.pid)
	wk, err := asuser.Start(c)
	if err != nil {
		if errors.Is(err, asuser.ErrNotRoot) {
			return &sight{t: t, cred: c}, func() {}
		}
		t.fs.log.Warn("cannot check file permissions as the caller; showing it nothing", "uid", w.uid, "err", err)
		return &sight{t: t, none: true, cred: c}, func() {}
	}
	return &sight{t: t, w: wk, cred: c}, wk.Close
}

func (s *sight) root(slug string) (*mounts.Root, bool) {
	src := s.t.fs.state().srcs[slug]
	if src == nil {
		return nil, false
	}
	r, err := src.Root()
	return r, err == nil
}

// canRead reports whether the caller may read the file slug://rel on the mount.
func (s *sight) canRead(slug, rel string) bool {
	if s.w == nil {
		return !s.none
	}
	r, ok := s.root(slug)
	return ok && s.w.CanRead(r, rel)
}

// heldLayer is the caller's layer in slug when it holds writes there
// (nil otherwise), as node.layer.
func (t *tree) heldLayer(w who, slug string) *held.Layer {
	if t.fs.opts.Held == nil || w.p == nil || w.s.pol == nil || !w.s.pol.Holds(w.p, slug) {
		return nil
	}
	return t.fs.opts.Held.Get(w.p.Name, slug)
}

// canReadHeld is canRead for a caller who sees lay over the backing files.
func (s *sight) canReadHeld(lay *held.Layer, slug, rel string) bool {
	if s.w == nil {
		return !s.none
	}
	r, ok := s.root(slug)
	if !ok {
		return false
	}
	at, err := lay.Root(r, rel)
	return err == nil && s.w.CanRead(at, rel)
}

// canReadEach is canRead for each of rels in slug, in one batch.
func (s *sight) canReadEach(slug string, rels []string) []bool {
	out := make([]bool, len(rels))
	if s.w == nil {
		for i := range out {
			out[i] = !s.none
		}
		return out
	}
	r, ok := s.root(slug)
	if !ok {
		return out
	}
	return s.w.CanReadEach(r, rels)
}

// canSeeHeld is canSee for a caller who sees lay over the backing files.
func (s *sight) canSeeHeld(lay *held.Layer, slug, rel string) bool {
	if s.w == nil {
		return !s.none
	}
	r, ok := s.root(slug)
	return ok && s.w.CanSee(lay.Tree(r), rel)
}

// canSee reports whether the caller may learn the name slug://rel on the mount.
func (s *sight) canSee(slug, rel string) bool {
	if s.w == nil {
		return !s.none
	}
	r, ok := s.root(slug)
	return ok && s.w.CanSee(r, rel)
}
