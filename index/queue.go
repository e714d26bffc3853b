package index

import (
	"context"
	"errors"
	"io/fs"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/blevesearch/bleve/v2"

	"github.com/neuralis/neuralisfs/internal/lowprio"
)

type opKind uint8

const (
	opSync   opKind = iota // make the document agree with the file (Update)
	opRemove               // drop the document (Remove)
)

// op is a queued change to one uri.
type op struct {
	kind  opKind
	since time.Time // first Update call coalesced into this op; zero for internal work
	pr    *prepared // content read by Reconcile, used if the file is unchanged since
	// internal marks work found by Reconcile rather than asked by a caller.
	internal bool
	seq      uint64
}

type dirOpKind uint8

const (
	dirRemove dirOpKind = iota // drop every document at or below the folder
	dirAdd                     // walk the folder and sync every file (rename target)
)

// dirOp is a queued change to a whole folder.
type dirOp struct {
	kind dirOpKind
	slug string
	dir  string // "" is the whole source
	seq  uint64
}

// Update queues uri to be made to agree with its file: indexed if it exists
// and is admitted, removed otherwise. It never blocks. Uris of sources not
// added, or with a path that is not clean, are ignored.
func (x *Index) Update(uri string) { x.enqueue(uri, opSync, time.Now()) }

// Remove queues the removal of the document of uri. It never blocks.
func (x *Index) Remove(uri string) { x.enqueue(uri, opRemove, time.Time{}) }

// RemovePrefix queues the removal of the document at uriPrefix and of every
// document below it (a folder removed or renamed away). "<slug>://" removes a
// whole source. It never blocks.
func (x *Index) RemovePrefix(uriPrefix string) {
	slug, p, ok := SplitURI(uriPrefix)
	if !ok {
		return
	}
	x.enqueueDir(dirOp{kind: dirRemove, slug: slug, dir: strings.TrimSuffix(p, "/")})
}

// Rename queues the move of oldURI to newURI. For a folder every document
// below oldURI is removed and the folder at newURI is walked and indexed.
// It never blocks.
func (x *Index) Rename(oldURI, newURI string, isDir bool) {
	if !isDir {
		x.Remove(oldURI)
		x.Update(newURI)
		return
	}
	x.RemovePrefix(oldURI)
	slug, p, ok := SplitURI(newURI)
	if !ok {
		return
	}
	x.enqueueDir(dirOp{kind: dirAdd, slug: slug, dir: strings.TrimSuffix(p, "/")})
}

func (x *Index) signal() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

func (x *Index) enqueue(uri string, kind opKind, since time.Time) {
	slug, p, ok := SplitURI(uri)
	if !ok || !validPath(p) {
		return
	}
	x.mu.Lock()
	s, ok := x.sources[slug]
	if !ok || x.closing {
		x.mu.Unlock()
		return
	}
	x.enqSeq++
	if o, ok := x.pending[uri]; ok {
		o.kind, o.seq, o.internal = kind, x.enqSeq, false
		if o.pr != nil {
			x.pendingB -= o.pr.mem()
			o.pr = nil
		}
		if o.since.IsZero() {
			o.since = since
		}
	} else if len(x.pending) >= x.opts.MaxQueue {
		// Bounded memory: drop the change and let a reconcile find it.
		if !s.overflow {
			x.log.Warn("index queue full, source will be reconciled", "source", slug)
		}
		s.overflow = true
	} else {
		x.pending[uri] = &op{kind: kind, since: since, seq: x.enqSeq}
		s.queued++
	}
	x.mu.Unlock()
	x.signal()
}

func (x *Index) enqueueDir(d dirOp) {
	x.mu.Lock()
	if _, ok := x.sources[d.slug]; !ok || x.closing {
		x.mu.Unlock()
		return
	}
	x.enqSeq++
	d.seq = x.enqSeq
	x.dirOps = append(x.dirOps, d)
	// Content Reconcile read below the folder may be of files moved or
	// removed with it: read them again when their turn comes. (Only
	// Reconcile's changes hold content, so the loop is skipped when none
	// does: an rm -rf sends a folder-wide change per folder.)
	if x.pendingB > 0 {
		for uri, o := range x.pending {
			if o.pr == nil {
				continue
			}
			if slug, p, _ := SplitURI(uri); slug == d.slug && below(p, d.dir) {
				x.pendingB -= o.pr.mem()
				o.pr = nil
			}
		}
	}
	x.mu.Unlock()
	x.signal()
}

// enqueuePrepared queues content Reconcile already read. It never replaces a
// change queued by a caller (that one is newer), and it waits while the
// queue is full, so a reconcile is paced by the indexer.
func (x *Index) enqueuePrepared(ctx context.Context, slug, path string, pr *prepared) error {
	uri := URI(slug, path)
	x.mu.Lock()
	defer x.mu.Unlock()
	for len(x.pending) >= (batchWorkers+1)*x.opts.MaxBatch || x.pendingB > maxQueuedBytes {
		if x.closing {
			return ErrClosed
		}
		ch := x.progress
		x.mu.Unlock()
		x.signal()
		select {
		case <-ch:
		case <-x.done:
			x.mu.Lock()
			return ErrClosed
		case <-ctx.Done():
			x.mu.Lock()
			return ctx.Err()
		}
		x.mu.Lock()
	}
	s, ok := x.sources[slug]
	if !ok || x.closing {
		return ErrClosed
	}
	if _, ok := x.pending[uri]; ok {
		return nil
	}
	x.enqSeq++
	x.pending[uri] = &op{kind: opSync, pr: pr, internal: true, seq: x.enqSeq}
	if pr != nil {
		x.pendingB += pr.mem()
	}
	s.queued++
	x.signal()
	return nil
}

// run is the indexer goroutine: it waits for work, lets a burst gather for
// BatchDelay, then applies everything queued.
func (x *Index) run() {
	lowprio.LowerIO() // issue 15: indexing must not slow the requests in front of it
	defer close(x.done)
	for {
		select {
		case <-x.wake:
		case <-x.quit:
			x.drain() // only waits for the batches being built
			return
		}
		t := time.NewTimer(time.Duration(x.delay.Load()))
		select {
		case <-t.C:
			x.deferWhileBusy()
		case <-x.quit:
			t.Stop()
		}
		x.drain()
	}
}

// SetBatchDelay changes Options.BatchDelay (0 or less: the default)
// from the next batch on, as a reload of the config does.
func (x *Index) SetBatchDelay(d time.Duration) {
	if d <= 0 {
		d = defaultBatchDelay
	}
	x.delay.Store(int64(d))
}

// maxDefer bounds how long a burst of requests defers callers' changes
// (counted from BatchDelay after the first of them): past it the indexer
// applies what is queued (paced, see lowprio) even while requests keep
// coming.
const maxDefer = 5 * time.Second

// deferWhileBusy lets a burst of requests end before its changes are
// applied: while the mount serves bursts of requests (lowprio.Busy) the
// changes gather into a few large batches, built once the burst is over,
// instead of a small batch every BatchDelay competing with the burst for
// the CPU (and every small batch a segment for scorch to merge). It
// returns once the daemon is idle, maxDefer has passed since the indexer
// woke for these changes, a full set of batches is queued, or the index
// closes. It reads only the queue's length under the lock, which every
// request's Update takes too.
func (x *Index) deferWhileBusy() {
	end := time.Now().Add(maxDefer)
	for lowprio.Busy() && time.Now().Before(end) {
		x.mu.Lock()
		n := len(x.pending)
		x.mu.Unlock()
		if n == 0 || n >= batchWorkers*x.opts.MaxBatch {
			return
		}
		t := time.NewTimer(lowprio.Quiet / 2)
		select {
		case <-t.C:
		case <-x.quit:
			t.Stop()
			return
		}
	}
}

// drain applies what is queued until the queue is empty and every batch is
// applied. It hands batches to up to batchWorkers builder goroutines
// without waiting for one to finish before starting the next: bleve builds
// a segment in the calling goroutine, and during a first build two of them
// at once, never waiting on each other, keep both cores busy. A batch holds
// either callers' changes (oldest first, at most freshBatch, so the first
// are searchable soon) or, when no caller waits, Reconcile's (at most
// MaxBatch), so a write made during a long reconcile waits for a builder,
// not for the reconcile. A uri is never in two batches at once, so changes
// to it apply in order. Folder-wide changes wait until no batch is being
// built. Once the index closes it starts no batch and returns when the
// ones being built have stopped: what is still queued is left to the next
// start's reconcile (a file's side state changes only when its batch is
// applied, so that reconcile reads every file whose change was queued),
// and a daemon asked to stop does not index a burst's worth of files at
// idle priority first.
func (x *Index) drain() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for {
		if x.quitCtx.Err() != nil {
			if x.building == 0 {
				x.settleLocked()
				return
			}
			x.waitLocked()
			continue
		}
		switch {
		case len(x.dirOps) > 0 && x.building == 0:
			dirs := x.dirOps
			x.dirOps = nil
			ops := x.takeLocked(true)
			x.building++
			x.mu.Unlock()
			x.apply(ops, dirs)
			x.mu.Lock()
			x.building--
			x.settleLocked()
		case len(x.dirOps) == 0 && len(x.pending) > 0 && x.building < batchWorkers:
			ops := x.takeLocked(false)
			if len(ops) == 0 {
				x.waitLocked() // every uri queued is in a batch being built
				continue
			}
			j := &job{minSeq: ^uint64(0)}
			for uri, o := range ops {
				x.inflight[uri] = true
				j.minSeq = min(j.minSeq, o.seq)
			}
			x.jobs[j] = true
			x.building++
			go x.build(j, ops)
		case len(x.dirOps) == 0 && len(x.pending) == 0 && x.building == 0:
			x.settleLocked()
			return
		default:
			x.waitLocked()
		}
	}
}

// waitLocked waits, with x.mu held around it, until a batch is applied or
// something is queued.
func (x *Index) waitLocked() {
	ch := x.progress
	x.mu.Unlock()
	select {
	case <-ch:
	case <-x.wake:
	}
	x.mu.Lock()
}

// job is a batch handed to a builder goroutine.
type job struct {
	minSeq uint64 // lowest seq of its changes
}

// takeLocked removes the next batch's changes from pending: with all set,
// every caller's change (folder-wide changes are applied with them);
// otherwise the oldest freshBatch callers' changes, or if there are none up
// to MaxBatch of Reconcile's (in path order, within maxBatchBytes of text
// already read). Uris in a batch being built stay queued.
func (x *Index) takeLocked(all bool) map[string]*op {
	type entry struct {
		uri string
		o   *op
	}
	var callers, internal []entry
	for uri, o := range x.pending {
		if x.inflight[uri] {
			continue
		}
		if o.internal {
			internal = append(internal, entry{uri, o})
		} else {
			callers = append(callers, entry{uri, o})
		}
	}
	var take []entry
	switch {
	case all:
		take = callers
	case len(callers) > 0:
		sort.Slice(callers, func(i, j int) bool { return callers[i].o.seq < callers[j].o.seq })
		take = callers[:min(len(callers), x.callersBatch())]
	default:
		sort.Slice(internal, func(i, j int) bool { return internal[i].uri < internal[j].uri })
		var bytes int64
		for _, e := range internal {
			if len(take) == x.opts.MaxBatch || bytes >= maxBatchBytes {
				break
			}
			take = append(take, e)
			if e.o.pr != nil {
				bytes += e.o.pr.size
			}
		}
	}
	ops := make(map[string]*op, len(take))
	for _, e := range take {
		ops[e.uri] = e.o
		delete(x.pending, e.uri)
		if e.o.pr != nil {
			x.pendingB -= e.o.pr.mem()
		}
		slug, _, _ := SplitURI(e.uri)
		if s, ok := x.sources[slug]; ok {
			s.queued--
		}
	}
	return ops
}

// build applies one batch of changes and releases its uris.
func (x *Index) build(j *job, ops map[string]*op) {
	lowprio.LowerIO()
	x.apply(ops, nil)
	x.mu.Lock()
	for uri := range ops {
		delete(x.inflight, uri)
	}
	delete(x.jobs, j)
	x.building--
	x.settleLocked()
	x.mu.Unlock()
}

// settleLocked records what is applied after a batch: every change queued
// before the oldest one still pending or being built. It wakes Flush and
// enqueuePrepared, and starts the reconciles of sources whose changes were
// dropped.
func (x *Index) settleLocked() {
	next := x.enqSeq + 1 // oldest change not applied
	for _, o := range x.pending {
		next = min(next, o.seq)
	}
	for _, d := range x.dirOps {
		next = min(next, d.seq)
	}
	for j := range x.jobs {
		next = min(next, j.minSeq)
	}
	if next-1 > x.doneSeq {
		x.doneSeq = next - 1
	}
	close(x.progress)
	x.progress = make(chan struct{})
	for slug, s := range x.sources {
		if s.overflow && !s.reconciling && !x.closing {
			s.overflow = false
			x.backgroundReconcile(slug)
		}
	}
}

func (x *Index) backgroundReconcile(slug string) {
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		lowprio.LowerIO()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-x.quit:
				cancel()
			case <-ctx.Done():
			}
		}()
		if _, err := x.Reconcile(ctx, slug, nil); err != nil && ctx.Err() == nil {
			x.log.Warn("background reconcile failed", "source", slug, "err", err)
		}
	}()
}

// below reports whether path p is the folder dir or below it; every path
// is below "" (a whole source).
func below(p, dir string) bool {
	return dir == "" || p == dir || len(p) > len(dir) && p[len(dir)] == '/' && p[:len(dir)] == dir
}

// documentsBelow lists the paths of slug's documents at or below any of
// folders ("" is the whole source). It walks each path's parents, so it
// costs one pass over the source's documents however many folders there
// are.
func (x *Index) documentsBelow(slug string, folders map[string]bool) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	s, ok := x.sources[slug]
	if !ok {
		return nil
	}
	var paths []string
	if folders[""] {
		for p := range s.files {
			paths = append(paths, p)
		}
		return paths
	}
	for p := range s.files {
		for q := p; ; {
			if folders[q] {
				paths = append(paths, p)
				break
			}
			i := strings.LastIndexByte(q, '/')
			if i < 0 {
				break
			}
			q = q[:i]
		}
	}
	return paths
}

// item is one per-uri change being applied.
type item struct {
	slug, path string
	op         *op
	pr         prepared
	err        error
}

// callersBatch bounds the callers' changes in one batch: freshBatch, so
// the first of a burst are searchable soon once it ends; MaxBatch while the
// mount serves a burst (lowprio.Busy; issue 15), when nobody waits for
// them to be searchable yet: every batch is a segment, and the fewer the
// segments a burst leaves, the less scorch merges during and after it.
func (x *Index) callersBatch() int {
	if lowprio.Busy() {
		return x.opts.MaxBatch
	}
	return min(x.opts.MaxBatch, freshBatch)
}

// apply turns queued changes into bleve batches: folder-wide changes first,
// in order, then the per-uri changes (callers' oldest first, in batches of
// callersBatch on batchWorkers goroutines; Reconcile's in path order).
func (x *Index) apply(ops map[string]*op, dirs []dirOp) {
	b := newBatcher(x)
	// Per-uri changes after folder-wide ones re-check the disk, so a file
	// recreated inside a removed folder comes back; so the removals can
	// all go first, found in one pass over each source's documents
	// whatever the number of folders (an rm -rf of a tree removes every
	// folder of it).
	removed := map[string]map[string]bool{} // slug → folders removed ("" the whole source)
	for _, d := range dirs {
		if d.kind == dirRemove {
			if removed[d.slug] == nil {
				removed[d.slug] = map[string]bool{}
			}
			removed[d.slug][d.dir] = true
		}
	}
	for slug, folders := range removed {
		for _, p := range x.documentsBelow(slug, folders) {
			b.remove(slug, p)
		}
	}
	for _, d := range dirs {
		if d.kind != dirAdd {
			continue
		}
		fsys, rules, ok := x.sourceFS(d.slug)
		if !ok {
			continue
		}
		for _, p := range walkDir(x.quitCtx, fsys, rules, d.dir) {
			uri := URI(d.slug, p)
			if _, ok := ops[uri]; !ok {
				ops[uri] = &op{kind: opSync}
			}
		}
	}
	b.commit()
	var callers, internal []*item
	for uri, o := range ops {
		slug, p, _ := SplitURI(uri)
		it := &item{slug: slug, path: p, op: o}
		if o.internal {
			internal = append(internal, it)
		} else {
			callers = append(callers, it)
		}
	}
	sort.Slice(callers, func(i, j int) bool { return callers[i].op.seq < callers[j].op.seq })
	sort.Slice(internal, func(i, j int) bool {
		if internal[i].slug != internal[j].slug {
			return internal[i].slug < internal[j].slug
		}
		return internal[i].path < internal[j].path
	})
	for _, group := range []struct {
		items []*item
		chunk int
	}{{callers, x.callersBatch()}, {internal, x.opts.MaxBatch}} {
		var chunks [][]*item
		for start := 0; start < len(group.items); start += group.chunk {
			chunks = append(chunks, group.items[start:min(start+group.chunk, len(group.items))])
		}
		// A closing index starts no chunk and applies none it had not
		// finished reading: drain says why that loses nothing.
		background(x.quitCtx, len(chunks), batchWorkers, func(i int) {
			b := newBatcher(x)
			x.prepareAll(chunks[i])
			if x.quitCtx.Err() != nil {
				return
			}
			for _, it := range chunks[i] {
				b.add(it)
			}
			b.commit()
		})
	}
}

// walkDir lists the files below dir in s that pass the name rules.
func walkDir(ctx context.Context, fsys fs.FS, rules SourceRules, dir string) []string {
	if dir != "" {
		for d := dir; d != "."; d = parentDir(d) {
			if ok, _ := AdmitDir(d, rules); !ok {
				return nil
			}
		}
	}
	root := dir
	if root == "" {
		root = "."
	}
	entries, err := walk(ctx, fsys, root, rules, func(Skip) {})
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.path)
	}
	return out
}

func parentDir(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "."
	}
	return p[:i]
}

// prepareAll reads the files of a chunk on prepareWorkers goroutines and
// counts the terms of those whose content changed. What Reconcile read is
// used as is: a change since reaches the queue as a caller's change, which
// replaces it (see enqueue, enqueueDir).
func (x *Index) prepareAll(chunk []*item) {
	background(x.quitCtx, len(chunk), prepareWorkers, func(i int) {
		it := chunk[i]
		if it.op.kind == opRemove {
			return
		}
		if pr := it.op.pr; pr != nil && (!pr.ok || pr.terms != nil || !x.changed(it.slug, pr)) {
			it.pr = *pr
			return
		}
		fsys, rules, ok := x.sourceFS(it.slug)
		if !ok {
			it.err = fs.ErrNotExist
			return
		}
		it.pr, it.err = readFile(fsys, it.path, rules, nil, func(pr *prepared) bool { return x.changed(it.slug, pr) })
	})
}

// changed reports whether pr's content differs from what the index holds.
func (x *Index) changed(slug string, pr *prepared) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	s, ok := x.sources[slug]
	if !ok {
		return true
	}
	old, had := s.files[pr.path]
	return !(had && old.indexed && old.digest == pr.digest)
}

// batcher accumulates documents into bleve batches and records, once a batch
// is applied, the new per-file state, freshness and counters.
type batcher struct {
	x       *Index
	batch   *bleve.Batch
	n       int
	bytes   int64
	changes []metaChange // applied to the in-memory state after the batch
	fresh   []freshObs
}

type freshObs struct {
	slug  string
	since time.Time
}

func newBatcher(x *Index) *batcher { return &batcher{x: x, batch: x.bleve.NewBatch()} }

func (b *batcher) remove(slug, p string) {
	b.batch.Delete(URI(slug, p))
	b.changes = append(b.changes, metaChange{slug: slug, path: p, del: true})
	b.n++
	b.maybeCommit()
}

func (b *batcher) add(it *item) {
	x := b.x
	if !it.op.since.IsZero() {
		b.fresh = append(b.fresh, freshObs{slug: it.slug, since: it.op.since})
	}
	if it.op.kind == opRemove {
		b.remove(it.slug, it.path)
		return
	}
	x.mu.Lock()
	old, had := x.sources[it.slug].files[it.path]
	x.mu.Unlock()
	// A change from a caller always reaches bleve, which also heals a
	// document the side store lost track of; Reconcile's work only when the
	// index holds the file.
	mustDelete := had || !it.op.internal
	if it.err != nil {
		// A path that now crosses a symlink or a file (ELOOP, ENOTDIR under
		// the confined open) is as gone as a missing one, and so is one
		// that became a socket between its stat and its open (ENXIO:
		// pjdfstest reuses names across file types).
		if !errors.Is(it.err, fs.ErrNotExist) && !errors.Is(it.err, syscall.ELOOP) && !errors.Is(it.err, syscall.ENOTDIR) && !errors.Is(it.err, syscall.ENXIO) {
			x.log.Warn("index: cannot read file", "uri", URI(it.slug, it.path), "err", it.err)
		}
		if mustDelete {
			b.remove(it.slug, it.path)
		}
		return
	}
	pr := &it.pr
	if !pr.ok {
		if mustDelete {
			b.remove(it.slug, it.path)
		}
		if pr.reason == ReasonBinary || pr.reason == ReasonNotUTF8 {
			// Remember refused content so a restart need not read it again.
			b.changes = append(b.changes, metaChange{slug: it.slug, path: it.path,
				entry: metaEntry{size: pr.size, mtime: pr.mtime, racy: pr.racy}})
		}
		return
	}
	entry := metaEntry{size: pr.size, mtime: pr.mtime, digest: pr.digest, indexed: true, racy: pr.racy}
	b.changes = append(b.changes, metaChange{slug: it.slug, path: it.path, entry: entry})
	if had && old.indexed && old.digest == pr.digest {
		return // same content: only size/mtime to remember
	}
	if pr.terms == nil {
		// Not reached: prepareAll counts the terms of changed content. Left
		// unrecorded, the file is read again by the next reconcile.
		b.changes = b.changes[:len(b.changes)-1]
		x.log.Warn("index: content not analysed", "uri", URI(it.slug, it.path))
		return
	}
	if err := b.batch.IndexAdvanced(x.document(it.slug, pr)); err != nil {
		x.log.Warn("index: cannot build document", "uri", URI(it.slug, it.path), "err", err)
		return
	}
	b.n++
	b.bytes += pr.size
	pr.terms = nil
	b.maybeCommit()
}

func (b *batcher) maybeCommit() {
	if b.n >= b.x.opts.MaxBatch || b.bytes >= maxBatchBytes {
		b.commit()
	}
}

// commit applies the batch, then the in-memory state; the side store is
// written when bleve reports the batch persisted.
func (b *batcher) commit() {
	x := b.x
	changes, fresh := b.changes, b.fresh
	b.changes, b.fresh = nil, nil
	if b.n > 0 {
		persisted := changes
		x.unpersisted.Add(1)
		b.batch.SetPersistedCallback(func(err error) {
			if err == nil {
				x.meta.enqueue(persisted)
			}
			x.deferMu.Lock()
			if x.unpersisted.Add(-1) == 0 {
				if err == nil {
					x.meta.enqueue(x.deferredMeta)
				}
				// After an error they are dropped: the files are re-read
				// at the next start, which costs a read and loses nothing.
				x.deferredMeta = nil
			}
			x.deferMu.Unlock()
		})
		if err := x.bleve.Batch(b.batch); err != nil {
			x.log.Error("index batch failed", "err", err)
			changes, fresh = nil, nil // the next reconcile retries these files
		}
		x.countBatch()
		b.batch = x.bleve.NewBatch()
		b.n, b.bytes = 0, 0
	} else {
		// State-only changes: nothing for bleve to persist, but they must
		// not reach the side store before the batches applied earlier.
		x.deferMu.Lock()
		if x.unpersisted.Load() > 0 {
			x.deferredMeta = append(x.deferredMeta, changes...)
		} else {
			x.meta.enqueue(changes)
		}
		x.deferMu.Unlock()
	}
	now := time.Now()
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(changes) > 0 || len(fresh) > 0 {
		x.batches++
	}
	for _, c := range changes {
		s, ok := x.sources[c.slug]
		if !ok {
			continue
		}
		if old, had := s.files[c.path]; had && old.indexed {
			s.docs--
			s.bytes -= old.size
		}
		if c.del {
			delete(s.files, c.path)
			continue
		}
		s.files[c.path] = c.entry
		if c.entry.indexed {
			s.docs++
			s.bytes += c.entry.size
		}
		s.lastIndexed = now
	}
	for _, f := range fresh {
		if s, ok := x.sources[f.slug]; ok {
			d := now.Sub(f.since)
			s.fresh[s.nFresh%freshnessWindow] = d
			s.nFresh++
			if x.onFresh != nil {
				x.onFresh(d)
			}
		}
	}
}
