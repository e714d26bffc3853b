package fs

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// owner is the uid and gid a file created for the caller should get: the
// caller's when the daemon runs as root (DESIGN.md §4), else the daemon's
// own (-1: leave as created).
func (f *FS) owner(w who) (int, int) {
	if os.Geteuid() != 0 {
		return -1, -1
	}
	return int(w.uid), int(w.gid)
}

// renameAllowed applies the policy's rename rule: write on both uris, and a
// folder may not carry anything across a rule boundary.
func (t *tree) renameAllowed(w who, slug, oldRel, newRel string, isDir bool) syscall.Errno {
	if w.s.pol == nil || (w.s.trivial && t.view == "") {
		return 0
	}
	err := w.s.pol.CanRename(w.p, slug, oldRel, newRel, isDir)
	if err == nil {
		return 0
	}
	rule := "default"
	var pe interface{ RuleWhere() string }
	if errors.As(err, &pe) {
		rule = pe.RuleWhere()
	}
	t.audit(w, "rename", uri(slug, oldRel)+" -> "+uri(slug, newRel), rule)
	if errors.Is(err, policy.ErrReadOnly) {
		return syscall.EROFS
	}
	return syscall.EACCES
}

// beforeChange runs before the mount overwrites or truncates an existing
// file (the journal hooks in here). Only a regular file reaches OPEN or a
// truncate through the mount.
func (f *FS) beforeChange(w who, slug, rel, op string) {
	f.journalBefore(w, slug, rel, op, false, true)
}

// beforeRemove is beforeChange for an unlink or a rename over the name
// child of dir, whose node (when the kernel knows it) tells whether the
// file is still open.
func (f *FS) beforeRemove(w who, slug, rel, op string, child *fusefs.Inode) {
	if f.journal() == nil {
		return
	}
	open, regular := false, false
	if child != nil {
		regular = child.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFREG
		if cn, ok := child.Operations().(*node); ok {
			open = cn.handles.open()
		}
	}
	f.journalBefore(w, slug, rel, op, open, regular)
}

func (f *FS) journalBefore(w who, slug, rel, op string, open, regular bool) {
	j := f.journal()
	if j == nil {
		return
	}
	j.Before(JournalEvent{Principal: principalName(w), UID: w.uid, PID: w.pid, Op: op, Slug: slug, Rel: rel, Open: open, Regular: regular})
}

// beforeOpen is beforeChange for a write-open the mount makes through fd
// (see Journal.BeforeOpen).
func (f *FS) beforeOpen(w who, slug, rel string, fd int, st *unix.Stat_t) {
	j := f.journal()
	if j == nil {
		return // turned off since the open checked
	}
	j.BeforeOpen(JournalEvent{Principal: principalName(w), UID: w.uid, PID: w.pid, Op: "open", Slug: slug, Rel: rel, Regular: true}, fd, st)
}

// created records a new name made through the mount, left as st.
func (f *FS) created(by *tree, w who, slug, rel string, st *unix.Stat_t) {
	f.forgetXattrs() // names changed (xattrcache.go)
	if j := f.journal(); j != nil {
		j.Created(JournalEvent{Principal: principalName(w), UID: w.uid, PID: w.pid, Op: "create", Slug: slug, Rel: rel})
	}
	f.changedTo(by, slug, rel, st)
}

func principalName(w who) string {
	if w.p == nil {
		return ""
	}
	return w.p.Name
}

// ownWindow is how long a change the mount made itself keeps the watcher's
// echo of it from invalidating the kernel's caches: the kernel already
// knows about changes that went through it, and dropping its fresh entries
// while an untar, editor save or build is still using them would cost a
// second round of lookups. What was held back is invalidated once the
// path has been quiet for the window, so an external change to the same
// path inside it is seen then (README "Changes made behind the mount's
// back").
const ownWindow = 2 * time.Second

// ownChanges remembers paths the mount itself just changed, and the
// watcher's reports about them that were held back.
type ownChanges struct {
	mu   sync.Mutex
	m    map[string]ownMark // slug + "\x00" + rel
	held map[mounts.Change]struct{}
	tick *time.Timer
	// moving counts the renames through the mount in flight that move
	// each path (FS.moving).
	moving map[string]int
	// prune is the size at which mark next drops the marks past the
	// window: twice what the last pass left, so a burst whose marks are
	// all within the window is not scanned at every mark.
	prune int
}

// ownPruneAt is the fewest marks mark looks through to drop old ones.
const ownPruneAt = 50000

// ownMark is when the mount last changed a path and, where it knows it,
// how the file was left: a watcher report finding the file exactly so is
// the echo of that change.
type ownMark struct {
	when time.Time
	left *fileState // nil: unknown, or removed
	by   *tree      // the mount the change went through
}

// fileState is what any change to a file alters: a write or a chmod moves
// ctime, a replacement changes the inode.
type fileState struct {
	ino, size    uint64
	mode         uint32
	ctime, mtime unix.Timespec
}

func stateOf(st *unix.Stat_t) *fileState {
	return &fileState{ino: st.Ino, size: uint64(st.Size), mode: st.Mode, ctime: st.Ctim, mtime: st.Mtim}
}

func ownKey(slug, rel string) string { return slug + "\x00" + rel }

// mark records that the mount changed slug://rel now, leaving it as st
// (nil when not known or removed).
func (o *ownChanges) mark(slug, rel string, st *unix.Stat_t, by *tree) {
	now := time.Now()
	m := ownMark{when: now, by: by}
	if st != nil {
		m.left = stateOf(st)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]ownMark{}
	}
	if len(o.m) >= max(o.prune, ownPruneAt) {
		for k, t := range o.m {
			if now.Sub(t.when) > ownWindow {
				delete(o.m, k)
			}
		}
		o.prune = 2 * len(o.m)
	}
	o.m[ownKey(slug, rel)] = m
}

// recent reports whether the mount itself changed slug://rel within the window.
func (o *ownChanges) recent(slug, rel string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, ok := o.m[ownKey(slug, rel)]
	return ok && time.Since(t.when) < ownWindow
}

// moving holds back the watcher's reports of slug://rels, which the
// rename ctx is serving moves, until go-fuse has moved the node too
// (negCache.Rename ends the hold). Between the backing folder's rename
// and that move, the node is still at the old name, which is gone from
// disk: a report of it then would be taken for an external removal and
// drop the name from the node, and go-fuse's move would find no node to
// move. The kernel, which moved its own entry, would then send the file's
// next request (a link, a chmod) for a node with no path: ENOENT. It
// marks nothing for a call not served through negCache.Rename.
func (f *FS) moving(ctx context.Context, slug string, rels ...string) {
	c, ok := ctx.(*fuse.Context)
	if !ok || c.Cancel == nil {
		return
	}
	v, ok := f.renaming.Load(c.Cancel)
	if !ok {
		return
	}
	keys := v.(*[]string)
	n := len(*keys)
	for _, rel := range rels {
		*keys = append(*keys, ownKey(slug, rel))
	}
	f.own.startMoving((*keys)[n:])
}

func (o *ownChanges) startMoving(keys []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.moving == nil {
		o.moving = map[string]int{}
	}
	for _, k := range keys {
		o.moving[k]++
	}
}

func (o *ownChanges) doneMoving(keys []string) {
	if len(keys) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range keys {
		if o.moving[k]--; o.moving[k] <= 0 {
			delete(o.moving, k)
		}
	}
}

// isMoving reports whether a rename through the mount is moving slug://rel now.
func (o *ownChanges) isMoving(slug, rel string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.moving[ownKey(slug, rel)] > 0
}

// changed records that the mount changed slug://rel through the mount
// by and tells the index, git and the other mounts it may have new
// content.
func (f *FS) changed(by *tree, slug, rel string) { f.changedTo(by, slug, rel, nil) }

// changedTo is changed for a change that left the file as st.
func (f *FS) changedTo(by *tree, slug, rel string, st *unix.Stat_t) {
	f.own.mark(slug, rel, st, by)
	f.vgen.Add(1)
	f.tellChanged(slug, rel)
	f.alsoShown(slug, mounts.Change{Rel: rel})
	by.othersChanged(slug, rel)
}

// othersChanged tells the daemon's other mounts (the main mount and the
// views) that slug://rels changed through this one: their kernels may
// cache the old names, attributes, pages and listings, and the watcher's
// echo of a change made through a mount is held back (ownWindow). It runs
// after the request (notifications from inside one can deadlock).
func (t *tree) othersChanged(slug string, rels ...string) {
	f := t.fs
	f.treesMu.Lock()
	if len(f.trees) < 2 {
		f.treesMu.Unlock()
		return
	}
	trees := append([]*tree(nil), f.trees...)
	f.treesMu.Unlock()
	// Only mounts whose kernel has seen a path's folder cache anything of
	// it, and most changes are in folders no other mount has looked at (an
	// untar, a build): a goroutine for each of those would wake a thread
	// per change. A lookup that learns the folder after this check reads
	// it as it is now; the held watcher report comes after anyway.
	var tell []*tree
	for _, o := range trees {
		if o == t {
			continue
		}
		for _, rel := range rels {
			if _, known := o.child(mounts.Change{Slug: slug, Rel: rel}); known {
				tell = append(tell, o)
				break
			}
		}
	}
	if len(tell) == 0 {
		return
	}
	go func() {
		for _, o := range tell {
			for _, rel := range rels {
				o.invalidate(mounts.Change{Slug: slug, Rel: rel})
			}
		}
	}()
}

func (f *FS) tellChanged(slug, rel string) {
	if ix := f.indexer(); ix != nil {
		ix.Update(uri(slug, rel))
	}
	if f.opts.Git != nil {
		f.opts.Git.Changed(slug, rel)
	}
}

// removed records that the mount removed slug://rel and tells the index
// and git.
func (f *FS) removed(by *tree, slug, rel string, isDir bool) {
	f.forgetXattrs() // names changed (xattrcache.go)
	f.own.mark(slug, rel, nil, by)
	f.tellRemoved(slug, rel, isDir)
	f.alsoShown(slug, mounts.Change{Rel: rel, Gone: true})
	by.othersChanged(slug, rel)
}

func (f *FS) tellRemoved(slug, rel string, isDir bool) {
	if ix := f.indexer(); ix != nil {
		if isDir {
			ix.RemovePrefix(uri(slug, rel) + "/")
		}
		ix.Remove(uri(slug, rel))
	}
	if f.opts.Git != nil {
		f.opts.Git.Changed(slug, rel)
	}
}

// renamed tells the index and git that a name moved (or two swapped).
func (f *FS) renamed(by *tree, w who, slug, oldRel, newRel string, isDir, exchange bool) {
	f.forgetXattrs() // names changed (xattrcache.go)
	f.own.mark(slug, oldRel, nil, by)
	f.own.mark(slug, newRel, nil, by)
	f.alsoShown(slug, mounts.Change{Rel: oldRel, Gone: !exchange}, mounts.Change{Rel: newRel})
	by.othersChanged(slug, oldRel, newRel)
	if j := f.journal(); j != nil && !isDir && !exchange {
		j.Renamed(JournalEvent{Principal: principalName(w), UID: w.uid, PID: w.pid, Op: "rename", Slug: slug, Rel: newRel}, oldRel)
	}
	if ix := f.indexer(); ix != nil {
		if exchange {
			ix.Update(uri(slug, oldRel))
			ix.Update(uri(slug, newRel))
			if isDir {
				ix.RemovePrefix(uri(slug, oldRel) + "/")
				ix.RemovePrefix(uri(slug, newRel) + "/")
			}
		} else {
			ix.Rename(uri(slug, oldRel), uri(slug, newRel), isDir)
		}
	}
	if f.opts.Git != nil {
		f.opts.Git.Changed(slug, oldRel)
		f.opts.Git.Changed(slug, newRel)
	}
}

// Changed takes changes seen on the backing folders and makes them
// visible: the kernel's cached names, attributes and pages for them are
// invalidated in every mount, and the index and git state are told. The
// watcher's echoes of changes made through the mount are skipped. It must
// not be called from a FUSE request.
func (f *FS) Changed(changes []mounts.Change) { f.apply(changes, false) }

// Refresh is Changed for changes the daemon made to the backing folders
// itself (a revert): they are always invalidated.
func (f *FS) Refresh(changes []mounts.Change) { f.apply(changes, true) }

func (f *FS) apply(changes []mounts.Change, force bool) {
	f.applyTo(f.state().withLayers(changes), force)
}

func (f *FS) applyTo(changes []mounts.Change, force bool) {
	f.forgetXattrs()
	f.treesMu.Lock()
	trees := append([]*tree(nil), f.trees...)
	f.treesMu.Unlock()
	for _, c := range changes {
		if !force && !c.Rescan && f.own.isMoving(c.Slug, c.Rel) {
			f.hold(c) // see moving
			continue
		}
		if !force && !c.Rescan && f.own.recent(c.Slug, c.Rel) && !f.staleNow(trees, c) {
			f.hold(c) // most likely the echo of a change made through the mount
			continue
		}
		for _, t := range trees {
			t.invalidate(c)
		}
		if c.Rescan {
			if f.opts.Git != nil {
				f.opts.Git.Changed(c.Slug, "")
			}
			continue
		}
		// Not marked as the mount's own: a second external change to the
		// same path must not be taken for an echo.
		if c.Gone {
			f.tellRemoved(c.Slug, c.Rel, true)
		} else {
			f.tellChanged(c.Slug, c.Rel)
		}
	}
}

// staleNow reports whether a kernel holds c's path as a file it no
// longer is on disk: a name that is gone, or that now names another file.
// No change made through the mount leaves a kernel so (it drops the name
// it removes and moves the one it renames), so such a report inside
// ownWindow is an external change, and it is applied at once rather than
// held: the kernel would otherwise keep answering for a removed or
// replaced file until the window ends. A change that left the same file
// (a write, a chmod) cannot be told from the echo of the mount's own, and
// is held.
func (f *FS) staleNow(trees []*tree, c mounts.Change) bool {
	disk := f.onDisk(c)
	for _, t := range trees {
		ch, _ := t.child(c)
		if ch == nil {
			continue // nothing cached to be stale (the echo of a removal through the mount, mostly)
		}
		if st, err := disk(); err != nil || !f.same(st, ch) {
			return true
		}
	}
	return false
}

// hold keeps a reported change to a path the mount just changed itself
// until the path has been quiet for ownWindow.
func (f *FS) hold(c mounts.Change) {
	o := &f.own
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held == nil {
		o.held = map[mounts.Change]struct{}{}
	}
	o.held[c] = struct{}{}
	if o.tick == nil {
		o.tick = time.AfterFunc(ownWindow, f.release)
	}
}

// release applies the held changes whose paths are quiet now. A change
// is taken for the echo of the mount's own when the kernel already knows
// the path as it is on disk: still absent, or the same file exactly as the
// mount's last change left it (inode, size, mode, ctime and mtime; only a
// same-size external write within the same clock tick as the mount's own
// change could hide behind that) and the change went through that very
// mount: the kernels of the others (views) heard of it only from
// othersChanged, which may have raced their own lookups. Anything else was an
// external change inside the window, and the kernel sees it now, at the
// latest ownWindow after the mount's last change to that path. The index
// is not told (it already read the mount's own change; an external one
// inside the window waits for its reconcile).
func (f *FS) release() {
	o := &f.own
	type quiet struct {
		c    mounts.Change
		left *fileState
		by   *tree
	}
	var qs []quiet
	o.mu.Lock()
	now := time.Now()
	for c := range o.held {
		t, ok := o.m[ownKey(c.Slug, c.Rel)]
		if ok && now.Sub(t.when) < ownWindow || o.moving[ownKey(c.Slug, c.Rel)] > 0 {
			continue
		}
		qs = append(qs, quiet{c, t.left, t.by})
		delete(o.held, c)
	}
	if len(o.held) > 0 {
		o.tick = time.AfterFunc(ownWindow/2, f.release)
	} else {
		o.tick = nil
	}
	o.mu.Unlock()
	if len(qs) == 0 {
		return
	}
	f.treesMu.Lock()
	trees := append([]*tree(nil), f.trees...)
	f.treesMu.Unlock()
	for _, q := range qs {
		disk := f.onDisk(q.c)
		external := false
		for _, t := range trees {
			ch, known := t.child(q.c)
			if !known {
				continue // the kernel has not seen the folder (or it went): nothing cached
			}
			st, err := disk()
			if err != nil && ch == nil {
				continue // absent on disk, and not known to the kernel
			}
			if t == q.by && err == nil && ch != nil && f.same(st, ch) && q.left != nil && *stateOf(st) == *q.left {
				continue // as the mount's own change left it, through this mount
			}
			external = true
			t.invalidate(q.c)
		}
		if external && f.opts.Git != nil {
			f.opts.Git.Changed(q.c.Slug, q.c.Rel)
		}
	}
}

// SourceChanged is called when a source's root was opened, closed or
// replaced: everything the kernel knows below it is dropped.
func (f *FS) SourceChanged(slug string) {
	f.Changed([]mounts.Change{{Slug: slug, Rescan: true}})
	f.treesMu.Lock()
	trees := append([]*tree(nil), f.trees...)
	f.treesMu.Unlock()
	for _, t := range trees {
		if !f.stopped.Load() {
			t.root.NotifyEntry(slug)
		}
	}
}

// Stop makes the filesystem send the kernel no more invalidations: the
// daemon calls it before it stops serving its mounts. An invalidation
// waits for the folder's lock, which a request may hold until the daemon
// answers it; sent while the servers stop, it could wait for good and
// keep the daemon from exiting.
func (f *FS) Stop() { f.stopped.Store(true) }

// invalidate drops what the kernel caches for one change in this mount.
func (t *tree) invalidate(c mounts.Change) {
	if t.fs.stopped.Load() {
		return
	}
	top := t.root.source(c.Slug)
	if top == nil {
		return
	}
	if c.Rescan {
		t.fs.log.Info("dropping every cached name of a source (its changes may have been missed)", "source", c.Slug, "mountpoint", t.dir)
		top.NotifyContent(0, 0)
		pruneAll(&top.Inode)
		return
	}
	dir := &top.Inode
	segs := strings.Split(c.Rel, "/")
	for _, s := range segs[:len(segs)-1] {
		dir = dir.GetChild(s)
		if dir == nil {
			return // the kernel has not seen the folder: nothing cached
		}
	}
	name := segs[len(segs)-1]
	ch := dir.GetChild(name)
	if f := afterInvalidateLooked.Load(); f != nil {
		(*f)(c.Slug, c.Rel)
	}
	still := ch != nil && t.stillIs(c.Slug, c.Rel, ch) // one lstat for both questions
	drop := ch == nil || c.Gone || !still
	if pol := t.fs.state().pol; ch != nil && !still && !ch.IsDir() && (pol == nil || !pol.Reviews()) {
		// Before the kernel is told (it may ask about the node at once).
		// A file's node forgets the name too: with a hard link left
		// it is known by that one (go-fuse takes the name added last
		// for the node's path, and a request through the other name
		// would ask the backing folder for the gone one: ENOENT),
		// and with none, what its open handles reach is all there
		// is (orphan.go), as after an unlink through the mount. A
		// later lookup gives the node the name again. Not where
		// writes are held: a principal's node at the name may be
		// its layer's copy, which the backing folder's change does
		// not remove.
		dir.RmChild(name)
	}
	if ch != nil {
		ch.NotifyContent(0, 0)
	}
	if drop {
		// Only a name that is gone or now names another file is dropped:
		// dropping a folder's name detaches it from every process whose
		// working directory it is.
		if ch == nil {
			// No node: the kernel may keep "no such file" there, or
			// have looked the name up since GetChild (a process's cd
			// into the folder, which dropping the name would take
			// away from it). Expired, the entry is looked up again at
			// its next use and kept if it is still the same node.
			t.expireEntry(dir, name)
		} else {
			if ch.IsDir() {
				t.fs.droppedFolder(t, c)
			}
			dir.NotifyEntry(name)
			if ch.IsDir() {
				dropBelow(ch)
			}
		}
	}
	dir.NotifyContent(0, 0)
}

// afterInvalidateLooked, when set (by tests), runs in invalidate between
// its look for the kernel's node of a changed name and what it tells the
// kernel.
var afterInvalidateLooked atomic.Pointer[func(slug, rel string)]

// droppedFolder logs that the kernel is told to forget the name of a
// folder it holds, as it takes that folder away from every process
// working in it (getcwd then answers ENOENT until someone looks the name
// up again): a folder removed or replaced behind the mount. At most one
// line a second, saying how many went unlogged since the last.
func (f *FS) droppedFolder(t *tree, c mounts.Change) {
	now := time.Now().UnixNano()
	last := f.dropLogged.Load()
	if now-last < int64(time.Second) || !f.dropLogged.CompareAndSwap(last, now) {
		f.dropsUnlogged.Add(1)
		return
	}
	f.log.Info("dropping a folder's cached name", "uri", uri(c.Slug, c.Rel), "gone", c.Gone, "mountpoint", t.dir, "unlogged_before", f.dropsUnlogged.Swap(0))
}

// dropBelow drops what the kernel may hold below the folder in, which
// left its place behind the mount: every name below it, and the listing
// and attributes of every folder there. Dropping the folder's own name
// drops only what nobody uses below it; and when the kernel looked the
// folder up at a new name first (the same inode: a rename), it moved the
// whole subtree there, names and kept listings included, before the
// watcher told of the old name. What the policy decides below a renamed
// folder is decided for the new paths, so each name is looked up and
// each folder listed again (through the nodes, wherever the kernel has
// them now).
func dropBelow(in *fusefs.Inode) { dropBelowOnce(in, map[*fusefs.Inode]bool{}) }

// dropBelowOnce is dropBelow that goes into each folder once: a folder
// the kernel's tree holds below itself (see maxDepth) would recurse
// without end (the daemon died of a stack overflow in a data-integrity
// pass's reproduction).
func dropBelowOnce(in *fusefs.Inode, seen map[*fusefs.Inode]bool) {
	if seen[in] {
		return
	}
	seen[in] = true
	in.NotifyContent(0, 0)
	for name, ch := range in.Children() {
		if ch.IsDir() {
			dropBelowOnce(ch, seen)
		}
		in.NotifyEntry(name)
	}
}

// lstat stats slug://rel on its backing folder.
func (f *FS) lstat(slug, rel string) (unix.Stat_t, error) {
	src := f.state().srcs[slug]
	if src == nil {
		return unix.Stat_t{}, syscall.ENOENT
	}
	r, err := src.Root()
	if err != nil {
		return unix.Stat_t{}, err
	}
	return r.Lstat(rel)
}

// same reports whether st is the file the kernel knows as ch (same inode
// number and type).
func (f *FS) same(st *unix.Stat_t, ch *fusefs.Inode) bool {
	sa := ch.StableAttr()
	dev := st.Dev
	if cn, ok := ch.Operations().(*node); ok {
		dev = layerDev(cn.src, dev)
	}
	return f.ino(dev, st.Ino) == sa.Ino && st.Mode&syscall.S_IFMT == sa.Mode&syscall.S_IFMT
}

// onDisk returns a function that stats c's path at its first call, and
// gives the same answer at every later one: the watcher's echo needs the
// backing file only where a mount's kernel holds a node for it, and then
// once for every mount.
func (f *FS) onDisk(c mounts.Change) func() (*unix.Stat_t, error) {
	var (
		st     unix.Stat_t
		err    error
		looked bool
	)
	return func() (*unix.Stat_t, error) {
		if !looked {
			st, err = f.lstat(c.Slug, c.Rel)
			looked = true
		}
		return &st, err
	}
}

// stillIs reports whether slug://rel is still the file the kernel knows as
// ch.
func (f *FS) stillIs(slug, rel string, ch *fusefs.Inode) bool {
	st, err := f.lstat(slug, rel)
	return err == nil && f.same(&st, ch)
}

// child finds the inode the kernel knows for c's path in this mount. known
// is false when the kernel has not seen its folder.
func (t *tree) child(c mounts.Change) (ch *fusefs.Inode, known bool) {
	top := t.root.source(c.Slug)
	if top == nil {
		return nil, false
	}
	dir := &top.Inode
	segs := strings.Split(c.Rel, "/")
	for _, s := range segs[:len(segs)-1] {
		if dir = dir.GetChild(s); dir == nil {
			return nil, false
		}
	}
	return dir.GetChild(segs[len(segs)-1]), true
}

// pruneAll invalidates every name the kernel has cached below dir.
func pruneAll(dir *fusefs.Inode) { pruneAllOnce(dir, map[*fusefs.Inode]bool{}) }

// pruneAllOnce is pruneAll going into each folder once (dropBelowOnce).
func pruneAllOnce(dir *fusefs.Inode, seen map[*fusefs.Inode]bool) {
	if seen[dir] {
		return
	}
	seen[dir] = true
	for name, ch := range dir.Children() {
		if ch.IsDir() {
			pruneAllOnce(ch, seen)
		}
		dir.NotifyEntry(name)
	}
}
