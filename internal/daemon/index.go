package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/neuralis/neuralisfs/fs"
	"github.com/neuralis/neuralisfs/index"
	"github.com/neuralis/neuralisfs/internal/asuser"
	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/internal/held"
	"github.com/neuralis/neuralisfs/internal/journal"
	"github.com/neuralis/neuralisfs/internal/lowprio"
	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
	"golang.org/x/sys/unix"
)

// IndexSource is how a configured source is indexed: its files through the
// confined FS, with its admission settings. git-pinned sources are served
// from objects and are not indexed.
func IndexSource(s *mounts.Source, cfg *mounts.Config) (index.Source, bool) {
	if s.Config.Kind == mounts.KindGitPinned {
		return index.Source{}, false
	}
	max := s.Config.MaxFileBytes
	if max == 0 {
		max = cfg.Index.MaxFileBytes
	}
	return index.Source{Slug: s.Slug(), FS: s.FS(), Include: s.Config.Include, Exclude: s.Config.Exclude, MaxFileBytes: max}, true
}

// indexRun is the index while it runs: a reload that turns it off
// cancels its reconciles and waits for them before closing it.
type indexRun struct {
	x      *index.Index
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	done   bool           // stop began: no more reconciles
	wg     sync.WaitGroup // reconciles running
	// waiting holds the slugs with a reconcile asked for and not begun
	// (mu): asked again meanwhile, it is the same one (a storm of
	// watcher rescans queued one walk of the tree each). turns has a
	// reconcile of a slug wait for the one running.
	waiting map[string]bool
	turns   map[string]*sync.Mutex
}

// ix is the running index, or nil.
func (d *Daemon) ix() *index.Index {
	if r := d.idx.Load(); r != nil {
		return r.x
	}
	return nil
}

// goReconcile runs f in a goroutine counted by r and the daemon, unless
// r is stopping.
func (r *indexRun) goReconcile(d *Daemon, f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	r.wg.Add(1)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer r.wg.Done()
		f()
	}()
}

// stop cancels r's reconciles, waits for them and closes the index.
func (r *indexRun) stop() error {
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	return r.x.Close()
}

// startIndex opens the index under state_dir when cfg enables it; the
// caller reconciles the sources (in the background: the mount is usable
// meanwhile).
func (d *Daemon) startIndex() error {
	if !d.cfg.IndexEnabled() {
		return nil
	}
	r, err := d.openIndex(d.cfg)
	if err != nil {
		return err
	}
	d.idx.Store(r)
	return nil
}

// openIndex opens the index under state_dir with cfg's settings and gives
// it every source of the running config.
func (d *Daemon) openIndex(cfg *mounts.Config) (*indexRun, error) {
	delay := 20 * time.Millisecond
	if cfg.Index.BatchDelay != nil {
		delay = cfg.Index.BatchDelay.Duration
	}
	x, err := index.Open(index.Options{Dir: filepath.Join(d.cfg.StateDirPath(), "index"), BatchDelay: delay, Logger: d.log})
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	for _, s := range d.srcs() {
		if is, ok := IndexSource(s, cfg); ok {
			if err := x.AddSource(is); err != nil {
				x.Close()
				return nil, fmt.Errorf("index source %s: %w", s.Slug(), err)
			}
		}
	}
	ctx, cancel := context.WithCancel(d.ctx)
	return &indexRun{x: x, ctx: ctx, cancel: cancel}, nil
}

// setIndex turns the index on or off as a reload's cfg says. Turned on,
// it is opened as at start (what it held is kept across, and brought up
// to date by reconciling every source in the background), and the mounts
// tell it of their changes and answer .neuralis/search from it; turned
// off, the mounts stop telling it, searches say search is off, its
// reconciles are cancelled and it is closed. Its folder under state_dir
// stays.
func (d *Daemon) setIndex(cfg *mounts.Config) error {
	on := cfg.IndexEnabled()
	if (d.idx.Load() != nil) == on {
		return nil
	}
	if !on {
		r := d.idx.Swap(nil)
		d.fsys.SetIndex(nil, nil)
		if err := r.stop(); err != nil {
			d.log.Warn("closing the index", "err", err)
		}
		return nil
	}
	r, err := d.openIndex(cfg)
	if err != nil {
		return err
	}
	d.idx.Store(r)
	d.fsys.SetIndex(r.x, searcher{d})
	d.reconcileAll()
	return nil
}

// reconcileAll brings every available source's documents up to date.
func (d *Daemon) reconcileAll() {
	for _, s := range d.srcs() {
		if _, err := s.Root(); err == nil {
			d.reconcile(s.Slug())
		}
	}
}

// reconcile brings slug's documents up to date with its folder in the
// background, drawing progress on the terminal for long first builds.
func (d *Daemon) reconcile(slug string) {
	r := d.idx.Load()
	if r == nil || d.sourceKind(slug) == mounts.KindGitPinned {
		return
	}
	r.mu.Lock()
	if r.waiting == nil {
		r.waiting, r.turns = map[string]bool{}, map[string]*sync.Mutex{}
	}
	if r.waiting[slug] {
		r.mu.Unlock()
		return
	}
	r.waiting[slug] = true
	turn := r.turns[slug]
	if turn == nil {
		turn = &sync.Mutex{}
		r.turns[slug] = turn
	}
	r.mu.Unlock()
	r.goReconcile(d, func() {
		turn.Lock()
		defer turn.Unlock()
		r.mu.Lock()
		delete(r.waiting, slug)
		r.mu.Unlock()
		lowprio.LowerIO() // the first build, at background priority (issue 15)
		defer holdBuildMemory()()
		tty := isTerminal(os.Stderr)
		start := time.Now()
		st, err := r.x.Reconcile(r.ctx, slug, func(p index.Progress) {
			if !tty || p.Done {
				return
			}
			eta := "?"
			if p.ETA > 0 {
				eta = p.ETA.Round(time.Second).String()
			}
			fmt.Fprintf(os.Stderr, "\rindexing %s: %d/%d files, %.1f/%.1f MB, %.0f files/s, ETA %s   ",
				slug, p.Files, p.Total, float64(p.Bytes)/1e6, float64(p.TotalBytes)/1e6, p.Rate, eta)
		})
		if tty {
			fmt.Fprint(os.Stderr, "\r\033[K")
		}
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				d.log.Warn("index reconcile", "source", slug, "err", err)
			}
			return
		}
		d.log.Info("indexed", "source", slug, "walked", st.Walked, "reindexed", st.Reindexed, "removed", st.Removed, "took", time.Since(start).Round(time.Millisecond))
	})
}

func (d *Daemon) sourceKind(slug string) string {
	for _, s := range d.srcs() {
		if s.Slug() == slug {
			return s.Config.Kind
		}
	}
	return ""
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// errSearchOff answers a search while the index is off.
var errSearchOff = errors.New("search is off: the index is disabled in the config ([index] enabled = false)")

// searcher answers .neuralis/search/<query> from the index.
type searcher struct{ d *Daemon }

func (s searcher) SearchText(ctx context.Context, q string, p *policy.Principal, canRead func(string) bool) ([]byte, error) {
	// The mount's canRead already checks a held file where p sees it.
	r, err := s.d.search(ctx, p, index.Query{Q: q, Limit: 20}, canRead, canRead)
	if err != nil {
		return nil, err
	}
	return index.FormatText(r), nil
}

// search runs q for p: the index's hits that canRead allows, and, where p
// holds writes, p's held state in their place (README "Held writes"):
// hits for paths p's layer changed, deleted or renamed away are dropped,
// and the layer's own files that canReadHeld allows are searched in an
// overlay (heldOverlay) and listed first. Nobody else's search
// sees anything of p's layer.
//
// A reload that turns the index off, or replaces it, closes the one a
// search runs in: the search then answers as the index left by the reload
// would (search is off), rather than "index closed" (seen in
// TestReloadStormUnderLoad).
func (d *Daemon) search(ctx context.Context, p *policy.Principal, q index.Query, canRead, canReadHeld func(uri string) bool) (index.Result, error) {
	for {
		x := d.ix()
		if x == nil {
			return index.Result{}, errSearchOff
		}
		r, err := d.searchIn(ctx, x, p, q, canRead, canReadHeld)
		if errors.Is(err, index.ErrClosed) && d.ix() != x {
			continue // closed by a reload, which swaps it out first
		}
		return r, err
	}
}

func (d *Daemon) searchIn(ctx context.Context, x *index.Index, p *policy.Principal, q index.Query, canRead, canReadHeld func(uri string) bool) (index.Result, error) {
	lays := d.heldLayers(p)
	if len(lays) == 0 {
		return x.Search(ctx, q, canRead)
	}
	res, err := x.Search(ctx, q, func(u string) bool {
		slug, rel, ok := index.SplitURI(u)
		if !ok {
			return false
		}
		if l := lays[slug]; l != nil && l.Where(rel) != held.Lower {
			return false // the held state decides this path
		}
		return canRead(u)
	})
	if err != nil {
		return index.Result{}, err
	}
	o, err := d.heldOverlay(ctx, x, p, lays, canReadHeld)
	if err != nil {
		return index.Result{}, err
	}
	if o == nil {
		return res, nil
	}
	defer o.Release()
	hr, err := o.Search(ctx, q, nil)
	if err != nil {
		return index.Result{}, err
	}
	// Scores of the two indexes are not comparable: held hits first.
	limit := q.Limit
	if limit <= 0 {
		limit = 20
	}
	limit = min(limit, 1000)
	out := index.Result{
		Total:             hr.Total + res.Total,
		Hits:              append(hr.Hits, res.Hits...),
		TotalIsLowerBound: hr.TotalIsLowerBound || res.TotalIsLowerBound,
		Stopped:           res.Stopped,
		NotSearched:       hr.NotSearched,
	}
	if out.Stopped == "" {
		out.Stopped = hr.Stopped
	}
	if len(out.Hits) > limit {
		out.Hits = out.Hits[:limit]
	}
	return out, nil
}

// overlayIdle is how long a principal's search overlay is kept unused.
const overlayIdle = time.Minute

// heldFile is a held file a search may read.
type heldFile struct {
	uri, rel string
	l        *held.Layer
	st       unix.Stat_t
}

// heldOverlay returns the overlay of p's held files that canReadHeld
// allows, with a reference to release; nil when there are none. It reads
// the newest first, at most index.MaxOverlayBytes and
// index.MaxOverlayFiles of them (each admitted by its source's
// max_file_bytes, as the index admits files); the rest are reported as not
// searched. The overlay is shared by p's searches while the files it holds
// keep their inode, size and times and the config is the same (any reload
// builds it again), and p's searches build one at a time
// (index.OverlayCache): before, every search built its own of all p held,
// and one search over 20 MiB of held random words took 95–174 s and 2.4 GB.
func (d *Daemon) heldOverlay(ctx context.Context, x *index.Index, p *policy.Principal, lays map[string]*held.Layer, canReadHeld func(uri string) bool) (*index.Overlay, error) {
	var files []heldFile
	for slug, l := range lays {
		max := int64(-1)
		if src := d.source(slug); src != nil {
			if is, ok := IndexSource(src, d.live.Load().cfg); ok {
				max = is.Rules().MaxFileBytes
				if max == 0 {
					max = index.DefaultMaxFileBytes
				}
			}
		}
		for _, rel := range l.UpperFiles() {
			u := index.URI(slug, rel)
			st, err := l.Upper().Lstat(rel)
			if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || (max >= 0 && st.Size > max) || !canReadHeld(u) {
				continue
			}
			files = append(files, heldFile{uri: u, rel: rel, l: l, st: st})
		}
	}
	if len(files) == 0 {
		return nil, nil
	}
	// Newest first: what the principal changed last is what it most
	// likely looks for.
	sort.Slice(files, func(i, j int) bool {
		a, b := files[i].st.Mtim, files[j].st.Mtim
		if a != b {
			return a.Nano() > b.Nano()
		}
		return files[i].uri < files[j].uri
	})
	var take, skip []heldFile
	var total int64
	for _, f := range files {
		if len(take) < index.MaxOverlayFiles && total+f.st.Size <= index.MaxOverlayBytes {
			take = append(take, f)
			total += f.st.Size
		} else {
			skip = append(skip, f)
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "%p %p\n", x, d.live.Load())
	for _, f := range take {
		st := &f.st
		fmt.Fprintf(h, "%q %d %d %d %d %d\n", f.uri, st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano(), st.Dev)
	}
	notSearched := make([]string, len(skip))
	for i, f := range skip {
		notSearched[i] = f.uri
		fmt.Fprintf(h, "skip %q\n", f.uri)
	}
	state := string(h.Sum(nil))
	return d.overlays.Get(ctx, x, p.Name, state, func() (map[string]index.OverlayDoc, []string, error) {
		docs := make(map[string]index.OverlayDoc, len(take))
		for _, f := range take {
			// At most the size stat gave (and the bound counted): a file
			// grown since has another state, and the next search reads it
			// again.
			if b, err := readHeld(f.l.Upper(), f.rel, f.st.Size); err == nil {
				b = b[:min(int64(len(b)), f.st.Size)]
				docs[f.uri] = index.OverlayDoc{Content: b, ModTime: time.Unix(f.st.Mtim.Unix())}
			}
		}
		return docs, notSearched, nil
	})
}

// heldLayers returns p's layers by slug, where p's writes are held.
func (d *Daemon) heldLayers(p *policy.Principal) map[string]*held.Layer {
	if d.held == nil || p == nil {
		return nil
	}
	var lays map[string]*held.Layer
	for _, s := range d.srcs() {
		if !d.policy().Holds(p, s.Slug()) {
			continue
		}
		if l := d.held.Get(p.Name, s.Slug()); l != nil {
			if lays == nil {
				lays = map[string]*held.Layer{}
			}
			lays[s.Slug()] = l
		}
	}
	return lays
}

// readHeld reads up to max+1 bytes (max < 0: all) of a layer's file.
func readHeld(r *mounts.Root, rel string, max int64) ([]byte, error) {
	fd, err := r.OpenNoAtime(rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if max < 0 {
		return io.ReadAll(f)
	}
	return io.ReadAll(io.LimitReader(f, max+1))
}

// fileSight is what a caller could see of the sources' files on the mount,
// where the kernel checks mode bits and ACLs before the policy is asked:
// the daemon answers search and history as root, so it checks them as the
// caller (package asuser). A nil worker checks nothing: root, the
// daemon's own uid, or a daemon not running as root (which reads only
// what its own uid may, and shows what the policy allows).
type fileSight struct {
	d    *Daemon
	w    *asuser.Worker
	none bool // the checks could not be made: show nothing
}

// peerFiles starts the checks for a control-socket peer; done ends them.
func (d *Daemon) peerFiles(peer control.Peer) (fileSight, func()) {
	c := credOf(peer)
	if c.Exempt() {
		return fileSight{d: d}, func() {}
	}
	w, err := asuser.Start(c)
	if err != nil {
		if !errors.Is(err, asuser.ErrNotRoot) {
			d.log.Warn("cannot check file permissions as the caller; showing it nothing", "uid", peer.UID, "err", err)
			return fileSight{d: d, none: true}, func() {}
		}
		return fileSight{d: d}, func() {}
	}
	return fileSight{d: d, w: w}, w.Close
}

func (f fileSight) root(u string) (*mounts.Root, string, bool) {
	slug, rel, err := policy.ParseURI(u)
	if err != nil {
		return nil, "", false
	}
	r, err := f.d.sourceRoot(slug)
	return r, rel, err == nil
}

// canRead reports whether the caller may read the file u on the mount.
func (f fileSight) canRead(u string) bool {
	if f.w == nil {
		return !f.none
	}
	r, rel, ok := f.root(u)
	return ok && f.w.CanRead(r, rel)
}

// canReadHeld is canRead for a file of p's held layer.
func (f fileSight) canReadHeld(p *policy.Principal, u string) bool {
	if f.w == nil {
		return !f.none
	}
	slug, rel, err := policy.ParseURI(u)
	if err != nil || f.d.held == nil || p == nil {
		return false
	}
	l := f.d.held.Get(p.Name, slug)
	return l != nil && f.w.CanRead(l.Upper(), rel)
}

// readable says what of l's diffs the caller may read: the backing
// files and the layer's own files its file permissions let it open.
func (f fileSight) readable(l *held.Layer) *held.Readable {
	if f.w == nil {
		if f.none {
			no := func(string) bool { return false }
			return &held.Readable{Backing: no, Held: no}
		}
		return nil
	}
	return &held.Readable{
		Backing: func(rel string) bool { return f.canRead(l.Slug + "://" + rel) },
		Held:    func(rel string) bool { return f.w.CanRead(l.Upper(), rel) },
	}
}

// canSee reports whether the caller may learn the name u on the mount.
func (f fileSight) canSee(u string) bool {
	if f.w == nil {
		return !f.none
	}
	r, rel, ok := f.root(u)
	return ok && f.w.CanSee(r, rel)
}

// canSeeHeld reports whether the caller may learn the name rel of l's
// tree as l's principal sees it on the mount.
func (f fileSight) canSeeHeld(l *held.Layer, rel string) bool {
	if f.w == nil {
		return !f.none
	}
	r, err := f.d.sourceRoot(l.Slug)
	return err == nil && f.w.CanSee(l.Tree(r), rel)
}

// names is what the caller may learn of held changes.
func (f fileSight) names() readerSight {
	return readerSight{read: f.readable, see: f.canSee, seeHeld: f.canSeeHeld}
}

// filesReadable returns a check of the caller's file permissions on the
// files of slug (relative paths), for an identity or a count that goes
// over every file: each's check (readEach, in one batch) is made at the
// first call, and a path the index does not have is checked alone.
func (d *Daemon) filesReadable(slug string, readEach func(rels []string) []bool) func(rel string) bool {
	var once sync.Once
	var ok map[string]bool
	return func(rel string) bool {
		once.Do(func() {
			ok = map[string]bool{}
			if x := d.ix(); x != nil {
				docs := x.Docs(slug)
				for i, r := range readEach(docs) {
					ok[docs[i]] = r
				}
			}
		})
		if r, known := ok[rel]; known {
			return r
		}
		return readEach([]string{rel})[0]
	}
}

// searchReadable is files.canRead for one search, which checks every
// match (index.keptQuery): one file at a time, each a hand-off to the
// caller's worker thread, until it has checked as many files of a
// source as a tenth of those the index holds, then all of that source's
// files in one batch (filesReadable), a few µs each. `func` over the Go
// tree as uid 1001 (6,700 matches) took 0.13–0.19 s checked one by one.
func (d *Daemon) searchReadable(files fileSight) func(u string) bool {
	if files.w == nil {
		return files.canRead
	}
	var mu sync.Mutex
	checked := map[string]int{}
	batch := map[string]func(rel string) bool{}
	return func(u string) bool {
		slug, rel, ok := index.SplitURI(u)
		if !ok {
			return false
		}
		mu.Lock()
		b := batch[slug]
		if b == nil {
			checked[slug]++
			if n := checked[slug]; n >= 64 && n%64 == 0 {
				if x := d.ix(); x != nil && n*10 >= x.Documents(slug) {
					b = d.filesReadable(slug, func(rels []string) []bool { return files.canReadEach(slug, rels) })
					batch[slug] = b
				}
			}
		}
		mu.Unlock()
		if b != nil {
			return b(rel)
		}
		return files.canRead(u)
	}
}

// canReadEach is canRead for each file of slug at rels, in one batch.
func (f fileSight) canReadEach(slug string, rels []string) []bool {
	out := make([]bool, len(rels))
	if f.w == nil {
		for i := range out {
			out[i] = !f.none
		}
		return out
	}
	r, err := f.d.sourceRoot(slug)
	if err != nil {
		return out
	}
	return f.w.CanReadEach(r, rels)
}

// canReadFor is the read filter of the principal behind uid/gid.
func (d *Daemon) canReadFor(uid, gid uint32) func(uri string) bool {
	p := d.policy().Resolve(uid, gid)
	return func(u string) bool {
		slug, rel, err := policy.ParseURI(u)
		if err != nil {
			return false
		}
		return d.policy().SourceVisible(p, slug) && d.policy().Decide(p, slug, rel, policy.Read).Allowed
	}
}

// SourceInfo is one source in `neuralisfs status`.
type SourceInfo struct {
	Slug     string        `json:"slug"`
	Kind     string        `json:"kind"`
	Status   mounts.Status `json:"status"`
	Identity string        `json:"identity,omitempty"`
	Index    *index.SourceStats
	// Partial says the caller may not read every file of the source:
	// Index counts the files it may read, and leaves out the queue,
	// the last update's time and freshness.
	Partial bool `json:"partial,omitempty"`
}

// MountInfo is one mount the daemon serves and its transport.
type MountInfo struct {
	Mountpoint string `json:"mountpoint"`
	Transport  string `json:"transport"`
}

// StatusReply is the answer to the status request.
type StatusReply struct {
	Sources  []SourceInfo `json:"sources"`
	Queued   int          `json:"queued"`
	Batches  int64        `json:"batches"`
	IndexDir string       `json:"index_dir,omitempty"`
	IndexMB  float64      `json:"index_mb"`
	// Partial says the caller may not read every file of every source:
	// the index's size, queue and batches are left out (they move when
	// files hidden from it change).
	Partial bool `json:"partial,omitempty"`
	// IndexOn and JournalOn say whether the index and the journal run
	// ([index] enabled, [journal] enabled; a reload turns them on and off).
	IndexOn   bool `json:"index_on"`
	JournalOn bool `json:"journal_on"`
	// Mounts names the transport serving each mountpoint (/dev/fuse or
	// io_uring).
	Mounts []MountInfo `json:"mounts"`
	// Unmounted lists the views of the running config that are not
	// mounted: unmounted by hand, or refused at a reload. The next
	// reload mounts them again.
	Unmounted []string `json:"unmounted,omitempty"`
}

// handle answers a control request for peer.
func (d *Daemon) handle(ctx context.Context, peer control.Peer, req control.Request) (any, error) {
	p := d.policy().Resolve(peer.UID, peer.GID)
	switch req.Op {
	case "search":
		if d.ix() == nil {
			return nil, errSearchOff
		}
		if req.Source != "" && !d.policy().SourceVisible(p, req.Source) {
			return nil, fmt.Errorf("unknown source %q", req.Source)
		}
		files, done := d.peerFiles(peer)
		defer done()
		canRead := d.canReadFor(peer.UID, peer.GID)
		filesRead := d.searchReadable(files)
		res, err := d.search(ctx, p, index.Query{Q: req.Query, Source: req.Source, PathGlob: req.Path, Ext: req.Ext, Limit: req.Limit}, func(u string) bool {
			return canRead(u) && filesRead(u)
		}, func(u string) bool {
			return canRead(u) && files.canReadHeld(p, u)
		})
		if err == nil && !d.readsEverything(p) {
			// Scores weigh terms by how many documents hold them, hidden
			// ones included: a score would tell whether some hidden file
			// holds a word. Hits keep their order.
			for i := range res.Hits {
				res.Hits[i].Score = 0
			}
		}
		return res, err
	case "status":
		rep := StatusReply{Mounts: []MountInfo{}}
		mounted := map[string]bool{}
		for _, mp := range d.mountpoints() {
			mounted[mp] = true
			rep.Mounts = append(rep.Mounts, MountInfo{Mountpoint: mp, Transport: d.fsys.Transport(mp)})
		}
		for _, v := range d.live.Load().cfg.Views {
			if !mounted[v.Mountpoint] {
				rep.Unmounted = append(rep.Unmounted, v.Mountpoint)
			}
		}
		var stats index.Stats
		x := d.ix()
		rep.IndexOn, rep.JournalOn = x != nil, d.jr() != nil
		if x != nil {
			stats = x.Stats()
			rep.IndexDir = filepath.Join(d.cfg.StateDirPath(), "index")
			if d.readsEverything(p) {
				rep.Queued, rep.Batches = stats.Queued, stats.Batches
				rep.IndexMB = float64(dirSize(rep.IndexDir)) / 1e6
			} else {
				// They move when files hidden from the caller change.
				rep.Partial = true
			}
		}
		// The daemon reads as root: the peer's own file permissions may
		// hide files too (a 0600 file, a 0700 folder), whose content
		// moves the identity and which the counts would count.
		files, done := d.peerFiles(peer)
		defer done()
		for _, s := range d.srcs() {
			if !d.policy().SourceVisible(p, s.Slug()) || !d.policy().Decide(p, s.Slug(), "", policy.Read).Allowed {
				continue
			}
			var canRead func(string) bool
			if !d.policy().ReadsAll(p, s.Slug()) || files.w != nil || files.none {
				byPolicy := d.canReadFor(peer.UID, peer.GID)
				slug := s.Slug()
				byFiles := d.filesReadable(slug, func(rels []string) []bool { return files.canReadEach(slug, rels) })
				canRead = func(u string) bool {
					_, rel, err := policy.ParseURI(u)
					return err == nil && byPolicy(u) && byFiles(rel)
				}
			}
			st, id := d.sourceStatusFor(ctx, s.Slug(), canRead)
			info := SourceInfo{Slug: s.Slug(), Kind: s.Config.Kind, Status: st, Identity: id}
			for i := range stats.Sources {
				if stats.Sources[i].Slug == s.Slug() {
					info.Index = &stats.Sources[i]
					if canRead != nil {
						// The index's figures count hidden files too:
						// documents are counted again, and what moves
						// when a hidden file changes (its queue, the
						// time of its last update, freshness) is left
						// out.
						ix := info.Index
						ix.Documents, ix.Bytes = x.CountFor(s.Slug(), canRead)
						ix.Queued, ix.LastIndexed, ix.FreshnessMedian, ix.FreshnessWorst, ix.Overflowed = 0, time.Time{}, 0, 0, false
						info.Partial = true
					}
				}
			}
			rep.Sources = append(rep.Sources, info)
		}
		return rep, nil
	case "history":
		j := d.jr()
		if j == nil {
			return nil, errJournalOff
		}
		if _, _, err := policy.ParseURI(strings.TrimSuffix(req.URI, "/")); err != nil && !strings.HasSuffix(req.URI, "://") {
			return nil, fmt.Errorf("%q is not a uri (<slug>://<path>)", req.URI)
		}
		if slug, _, ok := strings.Cut(req.URI, "://"); ok && !d.policy().SourceVisible(p, slug) {
			return nil, fmt.Errorf("unknown source %q", slug)
		}
		files, done := d.peerFiles(peer)
		defer done()
		canRead := d.canReadFor(peer.UID, peer.GID)
		recs, err := j.History(req.URI, func(u string) bool { return canRead(u) && files.canSee(u) })
		if err != nil && !errors.Is(err, journal.ErrNoRecord) {
			return nil, err
		}
		var readContent func(string) bool
		if !credOf(peer).Exempt() {
			readContent = files.canRead
		}
		return historyReply(hideDigests(visibleHistory(req.URI, recs), readContent, credOf(peer)), droppedFor(j, credOf(peer))), nil
	case "revert":
		return d.revert(p, peer, req.URI, req.ID)
	case "review-list", "review-diff", "review-approve", "review-reject":
		return d.review(p, peer, req)
	case "reload":
		return d.askReload(peer, req.Config)
	case "collect":
		return d.collectReq(ctx, p, peer, req) // collect.go
	case "mcp-read", "mcp-list", "mcp-status", "mcp-write":
		return d.mcp(ctx, p, peer, req) // mcp.go
	}
	return nil, fmt.Errorf("unknown request %q", req.Op)
}

func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// readsEverything reports whether p may read every file of every source,
// so that nothing it is shown can depend on a file hidden from it.
func (d *Daemon) readsEverything(p *policy.Principal) bool {
	for _, s := range d.srcs() {
		if !d.policy().ReadsAll(p, s.Slug()) {
			return false
		}
	}
	return true
}

// sourceStatus is what `.neuralis/sources` and `status` show: the folder's
// status, refined by git state or the index, and the identity.
func (d *Daemon) sourceStatus(ctx context.Context, slug string) (mounts.Status, string) {
	return d.sourceStatusFor(ctx, slug, nil)
}

// sourceStatusFor is sourceStatus for a reader who may read only the uris
// canRead allows (nil: everything): the identity covers only those files
// (README "Policy": hidden files are missing from every listing and
// count).
func (d *Daemon) sourceStatusFor(ctx context.Context, slug string, canRead func(uri string) bool) (mounts.Status, string) {
	var relRead func(string) bool
	if canRead != nil {
		relRead = func(rel string) bool { return canRead(slug + "://" + rel) }
	}
	if st, id, ok := d.git.status(ctx, slug, relRead); ok {
		return d.degradeIfFull(st), id
	}
	if st, id, ok := d.feedStatus(slug, relRead); ok { // feeds.go
		return d.degradeIfFull(st), id
	}
	var src *mounts.Source
	for _, s := range d.srcs() {
		if s.Slug() == slug {
			src = s
		}
	}
	if src == nil {
		return mounts.Status{State: mounts.Unavailable, Code: mounts.CodeSourceMissing}, ""
	}
	st := src.Status()
	id := ""
	if x := d.ix(); x != nil && st.State != mounts.Unavailable {
		building := false
		for _, ss := range x.Stats().Sources {
			if ss.Slug == slug && ss.Reconciling {
				building = true
			}
		}
		if building {
			if st.State == mounts.Available {
				st = mounts.Status{State: mounts.Degraded, Reason: "the index is being built"}
			}
		} else {
			id = x.IdentityFor(slug, canRead)
		}
	}
	return d.degradeIfFull(st), id
}

// fsStatus adapts sourceStatus for fs.Options.SourceStatus.
func (d *Daemon) fsStatus(slug string) (mounts.Status, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.sourceStatus(ctx, slug)
}

// fsStatusFor adapts sourceStatusFor for fs.ReaderStatus (canRead takes
// paths relative to the source; filesEach, when not nil, checks the
// reader's file permissions on a batch of them).
func (d *Daemon) fsStatusFor(slug string, canRead func(rel string) bool, filesEach func(rels []string) []bool) (mounts.Status, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	byFiles := func(string) bool { return true }
	if filesEach != nil {
		byFiles = d.filesReadable(slug, filesEach)
	}
	return d.sourceStatusFor(ctx, slug, func(u string) bool {
		s, rel, err := policy.ParseURI(u)
		return err == nil && s == slug && canRead(rel) && byFiles(rel)
	})
}

var _ fs.Searcher = searcher{}
