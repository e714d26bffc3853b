package index

import (
	"context"
	"errors"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/blevesearch/bleve/v2"
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
			x.pendingB -= int64(len(o.pr.content))
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
	for len(x.pending) >= (batchWorkers+1)*x.opts.MaxBatch || x.pendingB > maxBatchBytes {
		if x.closing {
			return errors.New("index closed")
		}
		ch := x.progress
		x.mu.Unlock()
		x.signal()
		select {
		case <-ch:
		case <-x.done:
			x.mu.Lock()
			return errors.New("index closed")
		case <-ctx.Done():
			x.mu.Lock()
			return ctx.Err()
		}
		x.mu.Lock()
	}
	s, ok := x.sources[slug]
	if !ok || x.closing {
		return errors.New("index closed")
	}
	if _, ok := x.pending[uri]; ok {
		return nil
	}
	x.enqSeq++
	x.pending[uri] = &op{kind: opSync, pr: pr, internal: true, seq: x.enqSeq}
	if pr != nil {
		x.pendingB += int64(len(pr.content))
	}
	s.queued++
	x.signal()
	return nil
}

// run is the indexer goroutine: it waits for work, lets a burst gather for
// BatchDelay, then applies everything queued.
func (x *Index) run() {
	defer close(x.done)
	for {
		select {
		case <-x.wake:
		case <-x.quit:
			x.drain()
			return
		}
		t := time.NewTimer(x.opts.BatchDelay)
		select {
		case <-t.C:
		case <-x.quit:
			t.Stop()
		}
		x.drain()
	}
}

// drain applies what is queued until the queue is empty. Each round takes
// every change asked by callers but at most batchWorkers*MaxBatch of
// Reconcile's, so a
// write made during a long reconcile waits for one batch, not for the
// reconcile.
func (x *Index) drain() {
	for {
		x.mu.Lock()
		if len(x.pending) == 0 && len(x.dirOps) == 0 {
			x.doneSeq = x.enqSeq
			x.mu.Unlock()
			return
		}
		dirs := x.dirOps
		x.dirOps = nil
		ops := make(map[string]*op)
		internal := 0
		var restMin uint64 // lowest seq left in pending, 0 if none
		for uri, o := range x.pending {
			if o.internal && internal >= batchWorkers*x.opts.MaxBatch {
				if restMin == 0 || o.seq < restMin {
					restMin = o.seq
				}
				continue
			}
			if o.internal {
				internal++
			}
			ops[uri] = o
			delete(x.pending, uri)
			if o.pr != nil {
				x.pendingB -= int64(len(o.pr.content))
			}
			slug, _, _ := SplitURI(uri)
			if s, ok := x.sources[slug]; ok {
				s.queued--
			}
		}
		seq := x.enqSeq
		if restMin != 0 {
			seq = restMin - 1
		}
		x.mu.Unlock()
		x.apply(ops, dirs)
		x.mu.Lock()
		if seq > x.doneSeq {
			x.doneSeq = seq
		}
		close(x.progress)
		x.progress = make(chan struct{})
		var due []string
		for slug, s := range x.sources {
			if s.overflow && !s.reconciling && !x.closing {
				s.overflow = false
				due = append(due, slug)
			}
		}
		x.mu.Unlock()
		for _, slug := range due {
			x.backgroundReconcile(slug)
		}
	}
}

func (x *Index) backgroundReconcile(slug string) {
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
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

// item is one per-uri change being applied.
type item struct {
	slug, path string
	op         *op
	pr         prepared
	err        error
}

// apply turns queued changes into bleve batches.
func (x *Index) apply(ops map[string]*op, dirs []dirOp) {
	b := newBatcher(x)
	// Folder-wide changes first, in order; per-uri changes after them re-check
	// the disk, so a file recreated inside a removed folder comes back.
	for _, d := range dirs {
		x.mu.Lock()
		s, ok := x.sources[d.slug]
		var paths []string
		if ok {
			for p := range s.files {
				if d.dir == "" || p == d.dir || strings.HasPrefix(p, d.dir+"/") {
					paths = append(paths, p)
				}
			}
		}
		x.mu.Unlock()
		if !ok {
			continue
		}
		switch d.kind {
		case dirRemove:
			for _, p := range paths {
				b.remove(d.slug, p)
			}
		case dirAdd:
			fsys, rules, _ := x.sourceFS(d.slug)
			for _, p := range walkDir(fsys, rules, d.dir) {
				uri := URI(d.slug, p)
				if _, ok := ops[uri]; !ok {
					ops[uri] = &op{kind: opSync}
				}
			}
		}
	}
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
	// Callers' changes first, oldest first, in small batches so the first
	// ones are searchable soon; Reconcile's after, in path order.
	sort.Slice(callers, func(i, j int) bool { return callers[i].op.seq < callers[j].op.seq })
	sort.Slice(internal, func(i, j int) bool {
		if internal[i].slug != internal[j].slug {
			return internal[i].slug < internal[j].slug
		}
		return internal[i].path < internal[j].path
	})
	b.commit()
	// Chunks hold distinct uris, so they may be built and applied at once:
	// bleve builds a segment in the calling goroutine, and two calls keep
	// both cores busy during a first build.
	for _, group := range []struct {
		items []*item
		chunk int
	}{{callers, min(x.opts.MaxBatch, freshBatch)}, {internal, x.opts.MaxBatch}} {
		var chunks [][]*item
		for start := 0; start < len(group.items); start += group.chunk {
			chunks = append(chunks, group.items[start:min(start+group.chunk, len(group.items))])
		}
		parallel(context.Background(), len(chunks), batchWorkers, func(i int) {
			b := newBatcher(x)
			x.prepareAll(chunks[i])
			for _, it := range chunks[i] {
				b.add(it)
			}
			b.commit()
		})
	}
}

// walkDir lists the files below dir in s that pass the name rules.
func walkDir(fsys fs.FS, rules SourceRules, dir string) []string {
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
	entries, err := walk(context.Background(), fsys, root, rules, func(Skip) {})
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

// prepareAll reads the files of a chunk on prepareWorkers goroutines.
func (x *Index) prepareAll(chunk []*item) {
	parallel(context.Background(), len(chunk), prepareWorkers, func(i int) {
		it := chunk[i]
		if it.op.kind == opRemove {
			return
		}
		fsys, rules, ok := x.sourceFS(it.slug)
		if !ok {
			it.err = fs.ErrNotExist
			return
		}
		if pr := it.op.pr; pr != nil {
			// Read by Reconcile: still good if the file has not changed since.
			if info, err := lstat(fsys, it.path); err == nil && info.Mode().IsRegular() &&
				info.Size() == pr.size && info.ModTime().UnixNano() == pr.mtime {
				it.pr = *pr
				return
			}
		}
		it.pr, it.err = prepare(fsys, it.path, rules, nil)
	})
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
		if !errors.Is(it.err, fs.ErrNotExist) {
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
				entry: metaEntry{size: pr.size, mtime: pr.mtime}})
		}
		return
	}
	entry := metaEntry{size: pr.size, mtime: pr.mtime, digest: pr.digest, indexed: true}
	b.changes = append(b.changes, metaChange{slug: it.slug, path: it.path, entry: entry})
	if had && old.indexed && old.digest == pr.digest {
		return // same content: only size/mtime to remember
	}
	if err := b.batch.IndexAdvanced(x.document(it.slug, pr)); err != nil {
		x.log.Warn("index: cannot build document", "uri", URI(it.slug, it.path), "err", err)
		return
	}
	b.n++
	b.bytes += int64(len(pr.content))
	pr.content = nil
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
			x.unpersisted.Add(-1)
		})
		if err := x.bleve.Batch(b.batch); err != nil {
			x.log.Error("index batch failed", "err", err)
			changes, fresh = nil, nil // the next reconcile retries these files
		}
		b.batch = x.bleve.NewBatch()
		b.n, b.bytes = 0, 0
	} else {
		x.meta.enqueue(changes) // state-only changes: nothing for bleve to persist
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
