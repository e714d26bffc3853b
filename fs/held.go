package fs

import (
	"context"
	"errors"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/held"
	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// Held writes (DESIGN.md §12): a write a review rule holds for the caller's
// principal goes to that principal's layer (package held) instead of the
// backing file, and the principal sees its layer over the backing files
// everywhere it looks; everyone else sees the backing files. In the main
// mount nothing in a source with review rules is cached by the kernel for
// everyone (policy.Set.Uniform is false there), so every walk reaches the
// daemon with the real caller; a view is one principal's, so its caches
// hold its own view.

// layer returns the caller's layer in the node's source when the caller's
// principal holds writes there and has a layer (nil otherwise: the backing
// files are what it sees).
func (n *node) layer(w who) *held.Layer {
	f := n.t.fs
	if f.opts.Held == nil || w.p == nil || w.s.pol == nil || !w.s.pol.Holds(w.p, n.slug) {
		return nil
	}
	return f.opts.Held.Get(w.p.Name, n.slug)
}

// see returns the root that holds rel for the caller (its layer's own
// files, or the backing ones) and the layer, or ENOENT when the caller
// deleted rel in its layer.
func (n *node) see(w who, r *mounts.Root, rel string) (*mounts.Root, *held.Layer, syscall.Errno) {
	lay := n.layer(w)
	if lay == nil {
		return r, nil, 0
	}
	r2, err := lay.Root(r, rel)
	if err != nil {
		return nil, lay, toErrno(err)
	}
	return r2, lay, 0
}

// seeXattrs is see for the extended attributes of rel
// (held.Layer.XattrRoots): names for every name but the POSIX ACLs,
// acls for those. layered says the answer is not the backing file's own
// as every caller sees it, so it is neither kept nor answered from what
// was kept.
func (n *node) seeXattrs(w who, r *mounts.Root, rel string) (names, acls *mounts.Root, layered bool, _ syscall.Errno) {
	lay := n.layer(w)
	if lay == nil {
		return r, r, false, 0
	}
	if lay.Where(rel) != held.Upper {
		r2, err := lay.Root(r, rel)
		return r2, r2, r2 != r, toErrno(err)
	}
	names, acls, err := lay.XattrRoots(r, rel, w.uid)
	return names, acls, true, toErrno(err)
}

// lstatAs stats rel as the caller sees it: its layer's entry (a folder
// copied up in place keeps its inode number), ENOENT where it deleted
// rel in its layer, else the backing file.
func (n *node) lstatAs(w who, r *mounts.Root, rel string) (unix.Stat_t, syscall.Errno) {
	if lay := n.layer(w); lay != nil {
		st, _, err := lay.Lstat(r, rel)
		if err == nil && n.t.view != "" {
			lay.MovedIno(r, rel, &st)
		}
		if err == nil {
			n.heldLinks(w, lay, r, rel, &st)
		}
		return st, toErrno(err)
	}
	st, err := r.Lstat(rel)
	if err == nil {
		n.viewLinks(w, &st)
	}
	return st, toErrno(err)
}

// allowWrite is allow for Write; held reports that the write is held for
// review, and lay is then the caller's layer (made on first use).
func (t *tree) allowWrite(w who, op, slug, rel string) (lay *held.Layer, errno syscall.Errno) {
	if t.detached.Load() {
		return nil, syscall.EROFS
	}
	if w.s.trivial && t.view == "" || w.s.pol == nil {
		return nil, 0
	}
	d := w.s.pol.Decide(w.p, slug, rel, policy.Write)
	if !d.Allowed {
		t.audit(w, op, uri(slug, rel), d.Rule.Where())
		if d.ReadOnly {
			return nil, syscall.EROFS
		}
		return nil, syscall.EACCES
	}
	if !d.Held && !t.heldAround(w, slug, rel) {
		return nil, 0
	}
	if t.fs.opts.Held == nil {
		return nil, syscall.EROFS
	}
	if op != "unlink" && op != "rmdir" && op != "rename" && t.fs.opts.Held.CheckQuota(w.p.Name) != nil {
		// Removing and renaming add nothing: they stay possible past the
		// bound, so a principal can make room.
		t.auditHeld(w, "quota", uri(slug, rel), d.Rule.Where())
		return nil, syscall.EDQUOT
	}
	lay, err := t.fs.opts.Held.Ensure(w.p.Name, slug)
	if err != nil {
		t.fs.log.Error("held changes: cannot open the layer", "principal", w.p.Name, "source", slug, "err", err)
		return nil, syscall.EIO
	}
	t.auditHeld(w, op, uri(slug, rel), d.Rule.Where())
	return lay, 0
}

// heldAround reports whether a write the policy lets the caller make
// directly must be held all the same: its principal holds writes in the
// source, and its layer shows rel, or a folder above it, as the backing
// files do not (held.Layer.Direct) — inside a folder it renamed or made
// under review, rel has no backing place to be written at.
func (t *tree) heldAround(w who, slug, rel string) bool {
	if t.fs.opts.Held == nil || w.p == nil || !w.s.pol.Holds(w.p, slug) {
		return false
	}
	lay := t.fs.opts.Held.Get(w.p.Name, slug)
	if lay == nil {
		return false
	}
	src := w.s.srcs[slug]
	if src == nil {
		return false
	}
	r, err := src.Root()
	if err != nil {
		return false
	}
	return !lay.Direct(r, rel)
}

// overQuota refuses a held change that would grow slug://rel past the
// principal's [review] max_bytes (held.Layer.CheckSize), and records it
// in the audit log as allowWrite records a refused open.
func (t *tree) overQuota(w who, slug, rel string) syscall.Errno {
	rule := ""
	if w.s != nil && w.s.pol != nil {
		rule = w.s.pol.Decide(w.p, slug, rel, policy.Write).Rule.Where()
	}
	t.auditHeld(w, "quota", uri(slug, rel), rule)
	return syscall.EDQUOT
}

// allowWrite2 decides a write that touches two names (rename, link): both
// held (one layer), or neither; a move between held and direct names is
// EXDEV, so mv copies and deletes, each decided on its own.
func (t *tree) allowWrite2(w who, op, slug, a, b string) (*held.Layer, syscall.Errno) {
	la, errno := t.allowWrite(w, op, slug, a)
	if errno != 0 {
		return nil, errno
	}
	lb, errno := t.allowWrite(w, op, slug, b)
	if errno != 0 {
		return nil, errno
	}
	if (la == nil) != (lb == nil) {
		return nil, syscall.EXDEV
	}
	return la, 0
}

// auditHeld records a held write (or a refused one, op "quota") in the
// audit log.
func (t *tree) auditHeld(w who, op, u, rule string) {
	if t.fs.opts.Audit == nil {
		return
	}
	if h, ok := t.fs.opts.Audit.(HeldAuditor); ok {
		h.Held(Denial{Principal: principalName(w), UID: w.uid, GID: w.gid, PID: w.pid, Op: op, URI: u, Rule: rule})
	}
}

// HeldAuditor is an Auditor that also records held writes.
type HeldAuditor interface {
	Held(d Denial)
}

// heldErrno maps the layer's errors.
func heldErrno(err error) syscall.Errno {
	if errors.Is(err, held.ErrQuota) {
		return syscall.EDQUOT
	}
	return toErrno(err)
}

// heldChanged tells the other mounts of the caller's principal (its
// views, or the main mount) that the principal's view of slug://rels
// changed through this one: their kernels may cache the old view.
func (t *tree) heldChanged(slug string, rels ...string) {
	t.fs.forgetXattrs() // xattrcache.go
	t.othersChanged(slug, rels...)
}

// heldDropped is heldChanged for every mount of the principal, this one
// too: its layer dropped a copy it left unchanged at rels (held.Layer.Closed),
// so each name shows the backing file, another inode, again.
func (t *tree) heldDropped(slug string, rels []string) {
	t.heldChanged(slug, rels...)
	go func() {
		for _, rel := range rels {
			t.invalidate(mounts.Change{Slug: slug, Rel: rel})
		}
	}()
}

// heldMoved drops, in this mount, the names the kernel keeps below a
// folder the principal renamed in its layer (moving, now slug://rel) that
// name other files now: the rename copied the files in it up, each a file
// of its own (another inode number), while the kernel moved its names
// along with the folder. Kept, a cached stat showed the old file's number
// and an open of it the copy's (ESTALE, then a fresh lookup): stat and
// fstat of one file disagreed. The notifications go from a goroutine:
// the kernel holds the folder's lock until the rename is answered.
func (t *tree) heldMoved(slug, rel string, moving *fusefs.Inode) {
	go t.invalidateBelow(slug, rel, moving)
}

// invalidateBelow drops the names the kernel keeps below dir (slug://rel)
// that no longer name the file it knows them as.
func (t *tree) invalidateBelow(slug, rel string, dir *fusefs.Inode) {
	t.invalidateBelowOnce(slug, rel, dir, map[*fusefs.Inode]bool{})
}

// invalidateBelowOnce is invalidateBelow going into each folder once
// (dropBelowOnce).
func (t *tree) invalidateBelowOnce(slug, rel string, dir *fusefs.Inode, seen map[*fusefs.Inode]bool) {
	if t.fs.stopped.Load() || seen[dir] {
		return
	}
	seen[dir] = true
	for name, ch := range dir.Children() {
		crel := join(rel, name)
		if !t.stillIs(slug, crel, ch) {
			dir.NotifyEntry(name)
		} else if ch.IsDir() {
			t.invalidateBelowOnce(slug, crel, ch, seen)
		}
	}
}

// stillIs is FS.stillIs as this mount's kernel is shown slug://rel: in a
// view of a principal with a layer there, what its layer shows. A folder
// the principal made or moved keeps its own node once approved (package
// held keeps its copy), so a process of the principal working inside it
// keeps its working folder: its name must not be dropped.
func (t *tree) stillIs(slug, rel string, ch *fusefs.Inode) bool {
	s := t.fs.state()
	if t.view == "" || t.fs.opts.Held == nil || s.pol == nil {
		return t.fs.stillIs(slug, rel, ch)
	}
	p, ok := s.pol.PrincipalByName(t.view)
	if !ok || !s.pol.Holds(p, slug) {
		return t.fs.stillIs(slug, rel, ch)
	}
	lay := t.fs.opts.Held.Get(p.Name, slug)
	src := s.srcs[slug]
	if lay == nil || src == nil {
		return t.fs.stillIs(slug, rel, ch)
	}
	r, err := src.Root()
	if err != nil {
		return false
	}
	st, _, err := lay.Lstat(r, rel)
	if err == nil {
		lay.MovedIno(r, rel, &st)
	}
	return err == nil && t.fs.same(&st, ch)
}

// HeldChanged drops what every mount's kernel caches for slug://rels: an
// approval or a rejection changed what the holding principal sees there.
func (f *FS) HeldChanged(slug string, rels []string) {
	f.forgetXattrs() // xattrcache.go
	var cs []mounts.Change
	for _, r := range rels {
		cs = append(cs, mounts.Change{Slug: slug, Rel: r})
	}
	f.treesMu.Lock()
	trees := append([]*tree(nil), f.trees...)
	f.treesMu.Unlock()
	for _, t := range trees {
		for _, c := range cs {
			t.invalidate(c)
		}
	}
}

// heldOpen opens rel for a caller that has a layer: a held write-open
// copies the backing file up first and opens the layer's copy; a read
// opens whichever file the caller sees. done is false when the caller has
// no layer and the write is not held (the ordinary open then runs).
func (n *node) heldOpen(w who, lay *held.Layer, r *mounts.Root, rel string, flags uint32) (*fileHandle, syscall.Errno, bool) {
	if lay == nil {
		if lay = n.layer(w); lay == nil {
			return nil, 0, false
		}
	}
	oflags := int(flags)&^(syscall.O_APPEND|fuse.FMODE_EXEC|syscall.O_CREAT|syscall.O_EXCL) | syscall.O_NOCTTY
	wr := writing(flags)
	fd, upper, err := lay.OpenFile(r, rel, oflags, wr)
	if err != nil {
		if errors.Is(err, held.ErrQuota) {
			return nil, syscall.EDQUOT, true
		}
		return nil, goneErrno(err), true // as Open
	}
	if wr && flags&syscall.O_TRUNC != 0 && w.uid != 0 {
		killSetID(fd)
	}
	var st unix.Stat_t
	if errno := n.sameNodeStat(fd, &st); errno != 0 {
		closeHeld(lay, fd, wr)
		return nil, errno, true
	}
	fh := newFileHandle(n, w, rel, fd, wr, flags)
	if upper {
		fh.hold(lay)
		if !wr && st.Mode&unix.S_IFMT == unix.S_IFREG {
			// Counted, so that a removal while it is open keeps
			// counting the file: Release tells the layer.
			lay.Reading(st.Ino)
			fh.readIno = st.Ino
		}
	}
	if wr {
		n.t.heldChanged(n.slug, rel)
	}
	return fh, 0, true
}

// heldCreate is Create for a held write: the new file is the layer's.
func (n *node) heldCreate(ctx context.Context, w who, lay *held.Layer, r *mounts.Root, crel string, flags, mode uint32, uid, gid int, out *fuse.EntryOut) (*fusefs.Inode, fusefs.FileHandle, uint32, syscall.Errno) {
	oflags := int(flags)&^(syscall.O_APPEND|fuse.FMODE_EXEC) | syscall.O_EXCL
	var st unix.Stat_t
	fd, err := lay.MakeFile(r, crel, func(up *mounts.Root) (fd int, err error) {
		fd, st, err = up.Create(crel, oflags, mode&^syscall.S_IFMT, uid, gid)
		return fd, err
	})
	if err != nil {
		if errors.Is(err, syscall.EEXIST) && flags&syscall.O_EXCL == 0 {
			return nil, nil, 0, syscall.ESTALE // as Create: look it up afresh
		}
		return nil, nil, 0, heldErrno(err)
	}
	n.t.heldChanged(n.slug, crel)
	n.entry(out, w.s, crel, &st)
	ch := n.newChild(ctx, &st)
	cn, ok := ch.Operations().(*node)
	if !ok {
		closeHeld(lay, fd, true)
		return nil, nil, 0, syscall.EIO
	}
	fh := newFileHandle(cn, w, crel, fd, true, flags)
	fh.hold(lay)
	return ch, fh, 0, 0
}

// closeHeld closes fd, which lay.OpenFile or lay.MakeFile opened (for
// writing when wr), and tells the layer.
func closeHeld(lay *held.Layer, fd int, wr bool) {
	var st unix.Stat_t
	if wr && unix.Fstat(fd, &st) == nil {
		lay.Closed(st.Ino)
	}
	unix.Close(fd)
}

// writeRoot decides a write of rel and returns where it is made: the
// layer's copy (copied up first) when it is held, else the backing root.
func (n *node) writeRoot(w who, op string, r *mounts.Root, rel string) (*mounts.Root, syscall.Errno) {
	r, _, errno := n.writeLayer(w, op, r, rel)
	return r, errno
}

// writeLayer is writeRoot that also returns the layer when the write is
// held (nil when it is not).
func (n *node) writeLayer(w who, op string, r *mounts.Root, rel string) (*mounts.Root, *held.Layer, syscall.Errno) {
	lay, errno := n.t.allowWrite(w, op, n.slug, rel)
	if errno != 0 || lay == nil {
		return r, nil, errno
	}
	if err := lay.CopyUp(r, rel); err != nil {
		return nil, nil, heldErrno(err)
	}
	n.t.heldChanged(n.slug, rel)
	return lay.Upper(), lay, 0
}

// openHeldDir opens the folder rel as the caller's layer shows it.
func (n *node) openHeldDir(w who, lay *held.Layer, r *mounts.Root, rel string) (fusefs.FileHandle, uint32, syscall.Errno) {
	if lay.Where(rel) == held.Absent {
		return nil, 0, syscall.ENOENT
	}
	d := &dirHandle{fd: -1, n: n, rel: rel, lay: lay}
	d.load = func() syscall.Errno { return d.listHeld(w, lay, r) }
	var keep uint32
	if n.t.cacheAll(w.s) && n.t.fs.watched(n.slug, rel) {
		keep = fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
	}
	return d, keep, 0
}

// listHeld is list for a caller with a layer (d.mu held).
func (d *dirHandle) listHeld(w who, lay *held.Layer, r *mounts.Root) syscall.Errno {
	n, rel := d.n, d.rel
	d.stats = map[string]unix.Stat_t{}
	ents, err := lay.List(r, rel)
	if err != nil {
		return toErrno(err)
	}
	filter := !(w.s.trivial && n.t.view == "") && w.s.pol != nil
	hide := n.hidden(rel)
	d.entries = append(d.entries, fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR}, fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR})
	for _, e := range ents {
		crel := join(rel, e.Name)
		if hide != nil && hide[e.Name] {
			n.t.fs.shadow(n.slug, crel)
			continue
		}
		if daemonName(e.Name) {
			continue
		}
		if filter && !n.t.canRead(w, n.slug, crel) {
			continue
		}
		st := e.St
		if filter && !layerShows(w.s, n.slug, crel, st.Mode) {
			continue
		}
		if n.t.view != "" {
			lay.MovedIno(r, crel, &st)
		}
		n.heldLinks(w, lay, r, crel, &st)
		d.stats[e.Name] = st
		d.entries = append(d.entries, fuse.DirEntry{Name: e.Name, Ino: n.ino(&st), Mode: st.Mode & syscall.S_IFMT})
	}
	return 0
}

// Reviewer renders a principal's own held changes for
// `.neuralis/review/` (list, or every diff), showing only what canRead
// allows.
type Reviewer interface {
	// ReviewText renders principal's held changes that canRead allows,
	// and of those what files, the caller's own file permissions, let
	// it see.
	ReviewText(principal string, canRead func(uri string) bool, files ReviewSight, diff bool) ([]byte, error)
}

// ReviewSight is what a caller's own file permissions let it see of its
// held changes (the daemon reads as root).
type ReviewSight struct {
	// Open says whether it may read a backing file; OpenHeld, a file
	// of its own tree as it sees it on the mount.
	Open, OpenHeld func(uri string) bool
	// See says whether it may learn a backing name; SeeHeld, a name of
	// its own tree.
	See, SeeHeld func(uri string) bool
}

// reviewContent renders .neuralis/review/list or diff for the caller: its
// own principal's held changes only.
func (t *tree) reviewContent(diff bool) ctlContent {
	return func(ctx context.Context, w who) ([]byte, error) {
		if t.fs.opts.Review == nil || w.p == nil {
			return []byte("no held changes\n"), nil
		}
		// The daemon reads as root: the caller is shown a name, or the
		// content of a file, only where its own file permissions would
		// let it learn or read it on the mount.
		files, done := t.sightFor(w)
		defer done()
		layer := func(slug string) *held.Layer {
			if t.fs.opts.Held == nil {
				return nil
			}
			return t.fs.opts.Held.Get(w.p.Name, slug)
		}
		backing := func(check func(s *sight, slug, rel string) bool) func(string) bool {
			return func(u string) bool {
				slug, rel, err := policy.ParseURI(u)
				return err == nil && check(files, slug, rel)
			}
		}
		inTree := func(check func(s *sight, lay *held.Layer, slug, rel string) bool) func(string) bool {
			return func(u string) bool {
				slug, rel, err := policy.ParseURI(u)
				if err != nil {
					return false
				}
				lay := layer(slug)
				return lay != nil && check(files, lay, slug, rel)
			}
		}
		return t.fs.opts.Review.ReviewText(w.p.Name, func(u string) bool {
			slug, rel, err := policy.ParseURI(u)
			return err == nil && t.canRead(w, slug, rel)
		}, ReviewSight{
			Open:     backing((*sight).canRead),
			OpenHeld: inTree((*sight).canReadHeld),
			See:      backing((*sight).canSee),
			SeeHeld:  inTree((*sight).canSeeHeld),
		}, diff)
	}
}

// sameNode answers ESTALE when fd is not the file the kernel's node is: a
// held file copied up since the name was looked up is a file of its own
// (its own inode number), and the kernel must look the name up again
// (an OPEN answered ESTALE is retried once with a fresh lookup) so that
// the copy gets a node of its own; so must a file replaced behind the
// mount before the kernel heard of it. Two files behind one node would share
// its passthrough backing file (go-fuse keeps one per node, and so does
// the kernel): the principal's writes would reach the backing file, or
// another caller would read the principal's held content.
func (n *node) sameNode(fd int) syscall.Errno {
	var st unix.Stat_t
	return n.sameNodeStat(fd, &st)
}

// sameNodeStat is sameNode, leaving fd's stat in st.
func (n *node) sameNodeStat(fd int, st *unix.Stat_t) syscall.Errno {
	if err := unix.Fstat(fd, st); err != nil {
		return toErrno(err)
	}
	if n.ino(st) != n.StableAttr().Ino {
		return syscall.ESTALE
	}
	return 0
}

// heldLinkTarget copies the target of a held link up before the link is
// made, so that both names are one file of the layer. When the copy is a
// new file (a backing file copied up now), the kernel's node for trel is
// still the backing file's, and would keep its attributes (a link count
// of 1, the backing inode number) after the link: ESTALE makes linkat(2)
// look trel up again (once, with LOOKUP_REVAL), which finds the copy, and
// the link is then made on the copy's node. A copy made for a link that
// then fails (EEXIST) is an unchanged copy: no change to review.
func (n *node) heldLinkTarget(lay *held.Layer, r *mounts.Root, tn *node, trel, crel string) syscall.Errno {
	if _, _, err := lay.Lstat(r, crel); err == nil {
		return syscall.EEXIST
	}
	if err := lay.CopyUp(r, trel); err != nil {
		return heldErrno(err)
	}
	st, err := lay.Upper().Lstat(trel)
	if err != nil {
		return toErrno(err)
	}
	if tn.ino(&st) != tn.StableAttr().Ino {
		n.t.heldChanged(n.slug, trel)
		return syscall.ESTALE
	}
	return 0
}

// countedLinks marks a folder's Stat_t.Nlink as the link count its caller
// sees (heldLinks), which hideCounts then reports instead of 1. No file
// system counts 2^40 links.
const countedLinks = 1 << 40

// viewLinks gives st, the stat of a folder in a view, its link count on
// disk (countedLinks) when the view's principal may read everything in
// the source: the count then tells of nothing hidden from it, and a view
// has no other caller whose kernel cache could keep it (a reload that
// changes the principal's rules drops the view's cached folder
// attributes: prune). In the main mount every caller shares the kernel's
// cache, so folders keep one link under a policy (hideCounts); held
// folders get their count from heldLinks.
func (n *node) viewLinks(w who, st *unix.Stat_t) {
	if n.t.view == "" || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Nlink&countedLinks != 0 {
		return
	}
	if w.s.pol != nil && (w.p == nil || !w.s.pol.ReadsAll(w.p, n.slug)) {
		return
	}
	st.Nlink |= countedLinks
}

// heldLinks gives st, the stat of the folder rel as the caller with the
// layer lay sees it, the link count a plain folder has (2 plus the
// subfolders it sees in it, its own made and deleted ones counted) when
// the caller may read everything in the source, so that the count tells
// of nothing hidden from it. Everyone else's folders keep one link under
// a policy (hideCounts). Tools that count links (find's leaf
// optimisation, pjdfstest's rename/24) then see in a held folder what
// they see on a plain one.
func (n *node) heldLinks(w who, lay *held.Layer, r *mounts.Root, rel string, st *unix.Stat_t) {
	if lay == nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || w.s.pol == nil || w.p == nil || !w.s.pol.ReadsAll(w.p, n.slug) {
		return
	}
	if c, ok := lay.DirLinks(r, rel); ok {
		st.Nlink = c | countedLinks
	}
}
