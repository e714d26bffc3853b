package index

import (
	"context"
	"fmt"
	"sync"
	"testing/fstest"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/index/scorch"
)

// MaxOverlayBytes and MaxOverlayFiles bound the files one overlay indexes
// (OverlayCache.Get's caller picks them): what a caller holds past them is
// not searched, and the result says so (Result.NotSearched). Files of
// random words, every one of them a new term, are the worst case: 4 MiB
// of them take the overlay about 2.5 s of one CPU and a few hundred MiB
// while it is built (BenchmarkSearchOverlayRandomWords); text, where words
// repeat, is cheaper. Before the bound an agent that held 20 MiB of such
// files kept the daemon busy 95–174 s and 2.4 GB per search.
const (
	MaxOverlayBytes = 4 << 20
	MaxOverlayFiles = 10000
)

// OverlayDoc is a file an overlay searches: its content and mtime.
type OverlayDoc struct {
	Content []byte
	ModTime time.Time
}

// Overlay is a memory-only index of files as one caller sees them where
// that differs from the backing files (held writes, DESIGN.md §12),
// searched as Search searches the index. It is safe for concurrent use;
// Release drops a reference, and the last one frees it.
type Overlay struct {
	x *Index
	// NotSearched are the caller's files the overlay was not given (past
	// MaxOverlayBytes or MaxOverlayFiles), reported with every result.
	notSearched []string

	mu   sync.Mutex
	refs int // guarded by mu
}

// NewOverlay indexes docs (files by uri) as if they were the only files
// of their sources. Each document is admitted by the rules of its source
// in x (name, include, exclude, size, text), analysed, matched and cut
// into snippets exactly as Search does; nothing of docs reaches x.
// Documents of sources not added to x are skipped. notSearched are uris
// the caller left out, which every result of the overlay names. The
// overlay starts with one reference, the caller's.
func (x *Index) NewOverlay(docs map[string]OverlayDoc, notSearched []string) (*Overlay, error) {
	bySlug := map[string]fstest.MapFS{}
	for u, d := range docs {
		slug, p, ok := SplitURI(u)
		if !ok {
			continue
		}
		if _, _, known := x.sourceFS(slug); !known {
			continue
		}
		m := bySlug[slug]
		if m == nil {
			m = fstest.MapFS{}
			bySlug[slug] = m
		}
		m[p] = &fstest.MapFile{Data: d.Content, Mode: 0o644, ModTime: d.ModTime}
	}
	// scorch in memory (no path), not bleve.NewMemOnly's upsidedown over
	// a treap: for 4 MiB of random words 2.5 s and 0.6 GB allocated
	// instead of 16.5 s and 2.8 GB.
	mem, err := bleve.NewUsing("", newMapping(), scorch.Name, scorch.Name, nil)
	if err != nil {
		return nil, fmt.Errorf("overlay index: %w", err)
	}
	ox := &Index{log: x.log, bleve: mem, sources: map[string]*source{}, overlay: true}
	batch := mem.NewBatch()
	for slug, m := range bySlug {
		_, rules, _ := x.sourceFS(slug)
		s := &source{Source: Source{Slug: slug, FS: m}, rules: rules, files: map[string]metaEntry{}}
		ox.sources[slug] = s
		for p := range m {
			pr, err := prepare(m, p, rules, nil, nil)
			if err != nil || !pr.ok {
				continue
			}
			a := contentFrequencies(pr.content)
			pr.terms, pr.content = &a, nil
			// size: and mtime: ranges are answered from files.
			s.files[p] = metaEntry{size: pr.size, mtime: pr.mtime, digest: pr.digest, indexed: true}
			if err := batch.IndexAdvanced(ox.document(slug, &pr)); err != nil {
				mem.Close()
				return nil, fmt.Errorf("overlay index: %w", err)
			}
		}
	}
	if err := mem.Batch(batch); err != nil {
		mem.Close()
		return nil, fmt.Errorf("overlay index: %w", err)
	}
	return &Overlay{x: ox, notSearched: notSearched, refs: 1}, nil
}

// Search runs q over the overlay's documents. canRead filters as for
// Index.Search. Scores come from the overlay's own term statistics and are
// not comparable with the index's. The result names the files the overlay
// was not given (Result.NotSearched).
func (o *Overlay) Search(ctx context.Context, q Query, canRead func(uri string) bool) (Result, error) {
	r, err := o.x.Search(ctx, q, canRead)
	if err != nil {
		return r, err
	}
	r.NotSearched = append([]string(nil), o.notSearched...)
	return r, nil
}

// acquire adds a reference.
func (o *Overlay) acquire() {
	o.mu.Lock()
	o.refs++
	o.mu.Unlock()
}

// Release drops a reference; the last frees the overlay's index.
func (o *Overlay) Release() {
	o.mu.Lock()
	o.refs--
	last := o.refs == 0
	o.mu.Unlock()
	if last {
		o.x.bleve.Close()
	}
}

// OverlayCache keeps one Overlay per key (a principal) for searches to
// share, so that repeated searches over files that did not change build
// nothing, and builds at most one per key at a time and at most
// maxOverlayBuilds in all: a caller's searches then cost the daemon one
// bounded build at a time however many it sends. An overlay nobody asked
// for within its idle time is dropped. The zero value is not usable; use
// NewOverlayCache.
type OverlayCache struct {
	idle   time.Duration
	builds chan struct{}

	mu    sync.Mutex
	slots map[string]*overlaySlot // guarded by mu
}

// maxOverlayBuilds bounds the overlays built at once, whoever asks.
const maxOverlayBuilds = 2

type overlaySlot struct {
	turn chan struct{} // one Get at a time per key

	// Guarded by OverlayCache.mu.
	state string
	o     *Overlay
	timer *time.Timer
}

// NewOverlayCache returns a cache that drops an overlay unused for idle.
func NewOverlayCache(idle time.Duration) *OverlayCache {
	return &OverlayCache{idle: idle, builds: make(chan struct{}, maxOverlayBuilds), slots: map[string]*overlaySlot{}}
}

// Get returns key's overlay for the files whose state (a digest of their
// names, sizes and times, say) is state, with a reference the caller must
// Release. When the cached one has another state it calls load for the
// documents and the files left out, outside every lock but key's own, and
// builds a new one with x. Callers for the same key wait for each other,
// or give up with ctx's error.
func (c *OverlayCache) Get(ctx context.Context, x *Index, key, state string, load func() (map[string]OverlayDoc, []string, error)) (*Overlay, error) {
	c.mu.Lock()
	s := c.slots[key]
	if s == nil {
		s = &overlaySlot{turn: make(chan struct{}, 1)}
		c.slots[key] = s
	}
	c.mu.Unlock()
	if err := take(ctx, s.turn); err != nil {
		return nil, err
	}
	defer func() { <-s.turn }()

	c.mu.Lock()
	if s.o != nil && s.state == state {
		o := s.o
		o.acquire()
		c.touch(key, s)
		c.mu.Unlock()
		return o, nil
	}
	c.drop(s)
	c.mu.Unlock()

	if err := take(ctx, c.builds); err != nil {
		return nil, err
	}
	defer func() { <-c.builds }()
	docs, notSearched, err := load()
	if err != nil {
		return nil, err
	}
	o, err := x.NewOverlay(docs, notSearched)
	if err != nil {
		return nil, err
	}
	o.acquire() // the cache's
	c.mu.Lock()
	s.o, s.state = o, state
	c.touch(key, s)
	c.mu.Unlock()
	return o, nil
}

// touch restarts s's idle timer. Callers hold c.mu.
func (c *OverlayCache) touch(key string, s *overlaySlot) {
	if s.timer != nil {
		s.timer.Stop()
	}
	var t *time.Timer
	t = time.AfterFunc(c.idle, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		// Not while a Get holds the key's turn: it may be using s.o.
		if c.slots[key] == s && s.timer == t && len(s.turn) == 0 {
			c.drop(s)
		}
	})
	s.timer = t
}

// drop releases s's overlay. Callers hold c.mu.
func (c *OverlayCache) drop(s *overlaySlot) {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if s.o != nil {
		s.o.Release()
		s.o, s.state = nil, ""
	}
}

// Close drops every cached overlay (those still in use are freed when
// their users release them).
func (c *OverlayCache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, s := range c.slots {
		c.drop(s)
		delete(c.slots, k)
	}
}

// take takes a place in the semaphore sem, or gives up with ctx's error.
func take(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
