package fs

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// state is what one config decides: the policy, the sources and the memo
// of uniform answers. It is never changed once published (FS.cur); a
// reload publishes a new one. Every request loads it once (tree.caller)
// and is decided by it throughout, so no request mixes two configs.
type state struct {
	pol     *policy.Set
	trivial bool // no policy decisions to make: skip them all
	srcs    map[string]*mounts.Source
	order   []string
	tm      Timeouts

	uniMu sync.Mutex
	uni   map[string]bool // uri → Set.Uniform
}

func newState(pol *policy.Set, sources []*mounts.Source, tm Timeouts) *state {
	s := &state{pol: pol, trivial: pol == nil || pol.Trivial(), srcs: map[string]*mounts.Source{}, tm: tm}
	for _, src := range sources {
		s.srcs[src.Slug()] = src
		s.order = append(s.order, src.Slug())
	}
	return s
}

// state is the running config's state.
func (f *FS) state() *state { return f.cur.Load() }

// uniform is Set.Uniform, memoized for the life of s.
func (s *state) uniform(slug, rel string) bool {
	if s.pol == nil {
		return true
	}
	key := slug + "://" + rel
	s.uniMu.Lock()
	u, ok := s.uni[key]
	s.uniMu.Unlock()
	if ok {
		return u
	}
	u = s.pol.Uniform(slug, rel)
	s.uniMu.Lock()
	if s.uni == nil || len(s.uni) > 200000 {
		s.uni = map[string]bool{}
	}
	s.uni[key] = u
	s.uniMu.Unlock()
	return u
}

// reads reports whether the principal called name may read slug://rel
// (and see its source) in s.
func (s *state) reads(name, slug, rel string) bool {
	if _, ok := s.srcs[slug]; !ok && s.pol != nil {
		return false
	}
	return s.may(name, slug, rel, policy.Read)
}

// execs reports whether the principal called name may execute slug://rel
// in s.
func (s *state) execs(name, slug, rel string) bool { return s.may(name, slug, rel, policy.Exec) }

// may decides c on slug://rel for the principal called name in s.
func (s *state) may(name, slug, rel string, c policy.Cap) bool {
	if s.pol == nil {
		return true
	}
	p, ok := s.pol.PrincipalByName(name)
	return ok && s.pol.Decide(p, slug, rel, c).Allowed
}

// holds reports whether the principal called name has its writes to slug
// held in s: it then sees its layer over the backing files there.
func (s *state) holds(name, slug string) bool {
	if s.pol == nil {
		return false
	}
	p, ok := s.pol.PrincipalByName(name)
	return ok && s.pol.Holds(p, slug)
}

// gate counts the requests that may answer with something the kernel
// caches (lookups, attributes, creates, listings), by generation: a
// reload starts a new generation after publishing the new state and
// waits until every request of the old one has answered, so none can
// hand the kernel an entry decided by the old state after the kernel's
// caches were invalidated. Entering costs two atomic loads and an add.
type gate struct {
	gen      atomic.Uint64
	inflight [2]atomic.Int64
}

// enter counts a request; pass the result to leave when it has answered.
// The generation is read again after counting, so a request counted in a
// generation read the state after that generation began or is waited for
// by the turn that ends it.
func (g *gate) enter() uint64 {
	for {
		gen := g.gen.Load()
		g.inflight[gen&1].Add(1)
		if g.gen.Load() == gen {
			return gen & 1
		}
		g.inflight[gen&1].Add(-1)
	}
}

func (g *gate) leave(slot uint64) { g.inflight[slot].Add(-1) }

// turn starts a new generation and waits until the requests of the old
// one have answered, or until limit has passed (a request can wait on the
// backing filesystem indefinitely); it returns how many are still running.
func (g *gate) turn(limit time.Duration) int64 {
	slot := (g.gen.Add(1) - 1) & 1
	deadline := time.Now().Add(limit)
	wait := 50 * time.Microsecond
	for g.inflight[slot].Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(wait)
		wait = min(2*wait, 10*time.Millisecond)
	}
	return g.inflight[slot].Load()
}

// ReloadReport says what a reload did to the kernel's caches.
type ReloadReport struct {
	// Invalidated counts the names and inodes invalidated in the kernel,
	// over every mount.
	Invalidated int
	// Running counts requests decided by the old config that had not
	// answered when the kernel's caches were invalidated (normally 0).
	Running int64
	// StillOpen lists the files opened through a mount before the reload
	// whose access the new config no longer grants their opener as it
	// was granted (see stillOpen).
	StillOpen []StillOpen
}

// StillOpen is a file opened before a reload, read or written through a
// descriptor the reload cannot take back: with passthrough the kernel
// sends its reads and writes straight to the backing file, and Linux
// has no way to revoke an open file (as after a chmod on disk, the
// descriptor keeps the access it was opened with until it is closed).
type StillOpen struct {
	URI       string
	Principal string
	UID, PID  uint32
	Access    string // "write" or "read"
	// Now is what the new config decides for a new open: "held" (its
	// writes are held for review), "refused", or "gone" (its source is
	// no longer served, or was replaced).
	Now string
}

func (s StillOpen) String() string {
	now := map[string]string{
		"held":    "its writes are now held for review, but writes through this descriptor still reach the file",
		"refused": "the new config refuses it, but this descriptor keeps it",
		"gone":    "its source is no longer served as it was, but this descriptor still reaches the file",
	}[s.Now]
	return fmt.Sprintf("%s is open for %s by %s (uid %d, pid %d) since before the reload: %s until it is closed",
		s.URI, s.Access, s.Principal, s.UID, s.PID, now)
}

// reloadWait bounds how long a reload waits for requests decided by the
// old config before it invalidates the kernel's caches anyway.
const reloadWait = 5 * time.Second

// Reload makes pol and sources the running config of every mount at once:
// a source whose *mounts.Source is new (added, or replaced because its
// config changed) gets a new top folder, one no longer listed disappears.
// Once the new state is published and every request decided by the old
// one has answered, it invalidates in the kernel, in the main mount and
// in every view, exactly the cached entries whose answer the new config
// changes:
//
//   - a source added, removed or replaced: its name in the mount's root
//     (with everything below it, and a negative entry for an added one);
//   - in the main mount, a known name whose entry was cacheable (the old
//     policy decided it the same for everyone) and now is not, or whose
//     one answer changed; in a view, a known name whose answer for the
//     view's principal changed. The kernel drops what is below it too.
//     Names the kernel knows nothing of have nothing cached; negative
//     entries are cached only for names absent on disk, which a reload
//     does not make present (except sources, above);
//   - the attributes of every mount's root (its link count, a view's
//     owner), of every known folder when the policy stops or starts
//     hiding link counts, and the listing of every known folder of a
//     mount whose listings the kernel may keep (a view, or a main mount
//     without policy).
//
// When Reload returns the new decisions serve everywhere. The kernel is
// notified with reloadMu held, which no request ever takes, and with no
// lock of a node held (DESIGN.md §11). It must not be called from a FUSE
// request; the caller closes the sources that were
// dropped after it returns.
func (f *FS) Reload(pol *policy.Set, sources []*mounts.Source, tm Timeouts) ReloadReport {
	f.reloadMu.Lock()
	defer f.reloadMu.Unlock()
	defer f.forgetXattrs() // layers and sources may have changed
	old := f.state()
	nw := newState(pol, sources, tm)
	f.treesMu.Lock()
	trees := append([]*tree(nil), f.trees...)
	f.treesMu.Unlock()
	for _, t := range trees {
		for _, slug := range nw.order {
			if src := nw.srcs[slug]; src != old.srcs[slug] {
				t.root.addSource(context.Background(), src)
			}
		}
	}
	f.cur.Store(nw)
	var rep ReloadReport
	rep.Running = f.gate.turn(reloadWait)
	for _, t := range trees {
		rep.Invalidated += t.reloaded(old, nw)
	}
	rep.StillOpen = f.stillOpen(nw)
	for _, t := range trees {
		for _, slug := range old.order {
			if src := old.srcs[slug]; src != nw.srcs[slug] {
				t.root.dropSource(slug, src)
			}
		}
	}
	return rep
}

// openFiles is the set of open files of every mount: a node whose name
// came to name another file (a held copy made, a rename over it) is no
// longer in its mount's tree, but what is open of it still reaches the
// file it opened. An open adds one and its release removes it; a
// reload reads the set.
type openFiles struct {
	mu sync.Mutex
	m  map[*fileHandle]struct{}
}

func (o *openFiles) add(h *fileHandle) {
	o.mu.Lock()
	if o.m == nil {
		o.m = map[*fileHandle]struct{}{}
	}
	o.m[h] = struct{}{}
	o.mu.Unlock()
}

func (o *openFiles) remove(h *fileHandle) {
	o.mu.Lock()
	delete(o.m, h)
	o.mu.Unlock()
}

func (o *openFiles) all() []*fileHandle {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]*fileHandle, 0, len(o.m))
	for h := range o.m {
		out = append(out, h)
	}
	return out
}

// stillOpen lists the open files that nw would not let their openers
// open as they did: a handle writing the backing file directly whose
// writes nw holds or refuses, one reading it whose reads nw refuses,
// and any in a source nw no longer serves as it was. A handle of a held
// copy is not listed (whatever nw decides, what it writes waits for
// review), nor one of a file with no name left (no rule decides it).
func (f *FS) stillOpen(nw *state) []StillOpen {
	var out []StillOpen
	for _, h := range f.files.all() {
		out = append(out, h.narrowed(nw)...)
	}
	slices.SortFunc(out, func(a, b StillOpen) int {
		return cmp.Or(cmp.Compare(a.URI, b.URI), cmp.Compare(a.PID, b.PID), cmp.Compare(a.Access, b.Access))
	})
	return out
}

// narrowed is stillOpen for one handle.
func (h *fileHandle) narrowed(nw *state) []StillOpen {
	n, t := h.n, h.n.t
	if h.lay != nil {
		return nil
	}
	rel, ok := n.rel()
	if !ok {
		// Not in the tree: the file it opened is no longer at its
		// name in this mount, but it may be there on disk still.
		var st unix.Stat_t
		if h.rel == "" || unix.Fstat(h.rawFd, &st) != nil || st.Nlink == 0 {
			return nil
		}
		rel = h.rel
	}
	so := StillOpen{URI: uri(n.slug, rel), UID: h.by.uid, PID: h.by.pid}
	w, errno := t.resolve(nw, h.by.uid, h.by.gid, h.by.pid)
	if w.p != nil {
		so.Principal = w.p.Name
	}
	var out []StillOpen
	add := func(access, now string) {
		so.Access, so.Now = access, now
		out = append(out, so)
	}
	var accesses []string
	if h.writer {
		accesses = append(accesses, "write")
	}
	if h.reads {
		accesses = append(accesses, "read")
	}
	switch {
	case nw.srcs[n.slug] != n.src:
		for _, a := range accesses {
			add(a, "gone")
		}
		return out
	case errno != 0:
		// A view whose principal changed: it is unmounted and mounted
		// again, but what was open in it stays open.
		for _, a := range accesses {
			add(a, "refused")
		}
		return out
	case nw.pol == nil || nw.trivial && t.view == "":
		return nil
	}
	if h.writer {
		d := nw.pol.Decide(w.p, n.slug, rel, policy.Write)
		switch {
		case !d.Allowed:
			add("write", "refused")
		case d.Held:
			add("write", "held")
		}
	}
	if h.reads && !nw.pol.Decide(w.p, n.slug, rel, policy.Read).Allowed {
		add("read", "refused")
	}
	return out
}

// reloaded invalidates what the kernel caches in this mount that the
// change from old to nw decides differently (see Reload); it returns how
// many notifications it sent.
func (t *tree) reloaded(old, nw *state) int {
	// The top's listing too, which a view keeps: a source added or
	// removed (or shown to the principal, or hidden) is a name more or
	// less there. Before, only its attributes went, and a view's `ls`
	// of its top went on without an added source, and with a removed
	// one, for as long as the kernel kept the listing (found by a
	// red-team pass). It is one READDIR of a few names after a reload.
	t.root.NotifyContent(0, 0)
	n := 1
	slugs := slices.Clone(old.order)
	for _, slug := range nw.order {
		if _, ok := old.srcs[slug]; !ok {
			slugs = append(slugs, slug)
		}
	}
	for _, slug := range slugs {
		if old.srcs[slug] != nw.srcs[slug] {
			n += t.forgetName(&t.root.Inode, slug)
			continue
		}
		if old.trivial && nw.trivial && t.view == "" {
			continue // nothing is decided, before or after
		}
		if t.view != "" && old.holds(t.view, slug) != nw.holds(t.view, slug) {
			// The view's principal sees its layer over the backing files
			// now, or no longer: every name below may answer otherwise
			// (its held files, the backing ones it deleted), absent
			// names the kernel keeps too. Before, they kept answering
			// as before for watched_timeout (a data-integrity pass).
			n += t.forgetName(&t.root.Inode, slug)
			continue
		}
		if t.stale(old, nw, slug, "") {
			n += t.forgetName(&t.root.Inode, slug)
			continue
		}
		top, pin := t.root.kid(nw, slug)
		switch {
		case top != nil:
			n += t.prune(old, nw, slug, &top.Inode, "")
		case pin != nil:
			n += t.prune(old, nw, slug, &pin.Inode, "")
		}
	}
	return n
}

// prune invalidates the known names below dir (at rel in slug) whose
// cached answer nw changes, and what else of the folder the kernel keeps
// that may now be wrong.
func (t *tree) prune(old, nw *state, slug string, dir *fusefs.Inode, rel string) int {
	n := 0
	attrs := t.showsCounts(old, slug) != t.showsCounts(nw, slug) // link counts and sizes of folders
	if t.cacheAll(old) || keptListing(dir) {
		dir.NotifyContent(0, 0) // the listing the kernel may keep, and attributes
		n++
	} else if attrs {
		dir.NotifyContent(-1, 0)
		n++
	}
	for name, ch := range dir.Children() {
		var crel string
		switch op := ch.Operations().(type) {
		case *node:
			crel = join(rel, name)
		case *revNode:
			crel = op.path
		default:
			// Virtual names are never cached. Below .revs/, commit
			// trees are looked up afresh each time, but a view keeps
			// their symlinks' targets, and one without OPEN their
			// pages (forgetName).
			if t.view != "" {
				n += dropPages(ch)
			}
			continue
		}
		if t.stale(old, nw, slug, crel) {
			n += t.forgetName(dir, name)
			continue
		}
		if ch.IsDir() {
			n += t.prune(old, nw, slug, ch, crel)
		} else if attrs || t.noOpen && old.execs(t.view, slug, crel) != nw.execs(t.view, slug, crel) {
			// Link counts, or the execute bits maskExec shows.
			ch.NotifyContent(-1, 0)
			n++
		}
	}
	return n
}

// forgetName drops name in dir from the kernel's caches. In a view it
// also drops the pages kept of every file and symlink at or below it: a
// process holding a file open in a view without OPEN (noopen.go), or
// opening it again through /proc/self/fd, would read them with no
// request reaching the daemon, and one holding an O_PATH descriptor of a
// symlink would read its cached target. A READ decided under the old
// policy cannot put its bytes back after: the kernel locks the pages a
// READ fills until its answer, and the invalidation waits for each
// locked page (invalidate_inode_pages2_range).
func (t *tree) forgetName(dir *fusefs.Inode, name string) int {
	n := 1
	if t.view != "" {
		if ch := dir.GetChild(name); ch != nil {
			n += dropPages(ch)
		}
	}
	dir.NotifyEntry(name)
	return n
}

// dropPages drops the pages (and attributes) the kernel keeps of the
// files at or below in; it returns how many notifications it sent.
func dropPages(in *fusefs.Inode) int {
	if !in.IsDir() {
		in.NotifyContent(0, 0)
		return 1
	}
	n := 0
	for _, ch := range in.Children() {
		n += dropPages(ch)
	}
	return n
}

// stale reports whether an entry for slug://rel the kernel may have
// cached in this mount under old is wrong under nw.
func (t *tree) stale(old, nw *state, slug, rel string) bool {
	if t.view != "" {
		// Everything is cached in a view, decided for its principal.
		return old.reads(t.view, slug, rel) != nw.reads(t.view, slug, rel)
	}
	if !(old.trivial || old.uniform(slug, rel)) {
		return false // answered with zero timeouts: nothing cached
	}
	if !(nw.trivial || nw.uniform(slug, rel)) {
		return true // may no longer be cached for everyone
	}
	// One answer for everyone, before and after: did it change?
	return old.reads(policy.Owner, slug, rel) != nw.reads(policy.Owner, slug, rel)
}

// Timeouts are how long the kernel may cache names and attributes
// ([mount] entry_timeout, attr_timeout, watched_timeout; see
// Options.EntryTimeout). A reload sets them for every answer after it:
// what the kernel cached before keeps the timeout it was given.
type Timeouts struct {
	Entry, Attr, Watched time.Duration
}
