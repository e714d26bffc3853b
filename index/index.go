package index

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/custom"
	"github.com/blevesearch/bleve/v2/document"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search/searcher"
)

// Options configure an Index. The zero value of every field but Dir has a
// usable default.
type Options struct {
	// Dir holds the index (a folder under state_dir). It is created if missing.
	Dir string
	// BatchDelay is how long the indexer waits after the first queued change
	// before applying a batch, so a burst of writes costs one batch. Default 20ms.
	BatchDelay time.Duration
	// MaxBatch bounds the documents in one batch. Default 500.
	MaxBatch int
	// MaxQueue bounds the distinct uris waiting in the queue. Changes past it
	// are dropped and the source is marked for a reconcile, which finds them
	// again. Default 65536.
	MaxQueue int
	// Logger receives warnings and progress of background work. Default: discard.
	Logger *slog.Logger
}

const (
	defaultBatchDelay = 20 * time.Millisecond
	defaultMaxBatch   = 500
	defaultMaxQueue   = 1 << 16
	// freshBatch bounds the documents of a batch of callers' changes once
	// a burst ends (see callersBatch): small batches keep the time from
	// Update to searchable short.
	freshBatch = 200
	// maxBatchBytes bounds the text of one batch.
	maxBatchBytes = 64 << 20
	// maxQueuedBytes bounds the memory held by what Reconcile queued (terms
	// counted ahead of the builders). Less memory is faster here: every page
	// a build touches first costs a fault, and on the Go tree 64 MiB of
	// queue and batches of 1,000 made a third of its CPU page faults.
	maxQueuedBytes = 16 << 20
	// batchWorkers build and apply bleve batches at once.
	batchWorkers = 2
	// prepareWorkers read, admit and hash files for a batch in parallel.
	prepareWorkers = 2
	// freshnessWindow is how many recent updates freshness is computed over.
	freshnessWindow = 100
	// mappingVersion changes whenever the mapping or the tokenizer changes;
	// an index built with another version is rebuilt from scratch.
	// 2: content without term vectors (phrases are checked in the files).
	// 3: dir, the folders above a file, for path filters; size and mtime
	// not indexed (ranges over them are answered from the side state).
	mappingVersion = "neuralisfs-index-3"
	// closePersistWait bounds how long Close waits for bleve to persist.
	closePersistWait = 10 * time.Second
)

// ErrClosed is what an Index answers once Close has begun: a reload
// that turns the index off closes it under searches and changes in
// flight.
var ErrClosed = errors.New("index closed")

// Index is the full-text index of every added source. All methods are safe
// for concurrent use. Changes are queued without blocking and applied in
// batches by one goroutine; Search sees a change once its batch is applied.
type Index struct {
	opts  Options
	delay atomic.Int64 // Options.BatchDelay (SetBatchDelay changes it)
	log   *slog.Logger
	bleve bleve.Index
	meta  *metaStore

	mu       sync.Mutex // guards the fields below and every *source
	sources  map[string]*source
	pending  map[string]*op // by uri, coalesced: the last change wins
	dirOps   []dirOp        // folder-wide changes, applied in order before pending
	pendingB int64          // content bytes held by prepared ops in pending
	enqSeq   uint64         // incremented by every enqueue
	doneSeq  uint64         // every enqueue up to doneSeq is applied
	progress chan struct{}  // closed and replaced after every applied batch
	batches  int64
	closing  bool
	// strayChecked: sources whose strays dropStrays has looked for.
	strayChecked map[string]bool
	// staleSources: the side store knows sources that were not added (yet).
	staleSources bool
	// Batches being applied (see drain), also guarded by mu.
	building int             // batches being applied
	jobs     map[*job]bool   // batches handed to builder goroutines
	inflight map[string]bool // uris in those batches

	unpersisted atomic.Int64 // batches applied whose persisted callback has not run
	// deferMu guards deferredMeta and orders it with unpersisted reaching
	// zero: state-only side-store changes (a file re-read with the digest
	// the index holds) made while batches are unpersisted. Written at
	// once they could claim a document an earlier batch has not yet put
	// on disk, and a daemon killed then would never re-read the file
	// (found by tests/kill_test.go); so they wait for every batch applied
	// before them.
	deferMu      sync.Mutex
	deferredMeta []metaChange

	scorch      *scorch.Scorch // for onScorchEvent; nil if bleve is not scorch
	mergeMu     sync.Mutex     // guards the fields below
	mergeHolds  int            // Reconciles holding merges (holdMerges)
	heldBatches int            // batches applied since merges were first held
	mergeFree   chan struct{}  // closed when mergeHolds drops to 0
	busyBatches int            // batches applied since a merge was last let through (mergeWhenIdle)

	// onFresh, if set before the first Update, sees every freshness sample
	// (benchmarks); it is called with mu held.
	onFresh func(time.Duration)

	wake chan struct{} // cap 1: there is work
	quit chan struct{} // closed by Close
	// quitCtx is done once Close begins, just before quit is closed: for
	// waits that take a context.
	quitCtx    context.Context
	quitCancel context.CancelFunc
	done       chan struct{} // closed when the indexer goroutine returns
	wg         sync.WaitGroup

	// overlay: a memory-only index of SearchOverlay, with no indexer.
	overlay bool
}

// source is the index's state for one source. Fields are guarded by Index.mu
// except reconcileMu.
type source struct {
	Source
	rules       SourceRules
	files       map[string]metaEntry // what is applied to the index, by path
	docs        int
	bytes       int64
	queued      int
	lastIndexed time.Time
	fresh       [freshnessWindow]time.Duration
	nFresh      int
	overflow    bool // changes were dropped: a reconcile is due
	reconciling bool

	reconcileMu sync.Mutex // one Reconcile per source at a time
}

// Open opens the index in opts.Dir, creating it if needed, and starts the
// indexer. Only one process may open a Dir at a time.
//
// Durability: batches are applied with bleve's unsafe_batch, so Update
// returns quickly and a batch is searchable before it is on disk. The
// per-file state that makes restarts cheap (size, mtime, digest) is written
// only once bleve reports the batch persisted, so after a crash or an
// unclean stop the next Reconcile re-reads exactly the files whose batches
// may have been lost.
func Open(opts Options) (*Index, error) {
	clauseLimit.Do(func() { searcher.DisjunctionMaxClauseCount = MaxQueryTerms })
	if opts.Dir == "" {
		return nil, errors.New("index options have no Dir")
	}
	if opts.BatchDelay <= 0 {
		opts.BatchDelay = defaultBatchDelay
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = defaultMaxBatch
	}
	if opts.MaxQueue <= 0 {
		opts.MaxQueue = defaultMaxQueue
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("index %s: %w", opts.Dir, err)
	}
	meta, fresh, err := openMeta(filepath.Join(opts.Dir, "meta.db"), mappingVersion)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", opts.Dir, err)
	}
	bdir := filepath.Join(opts.Dir, "bleve")
	if fresh {
		// No state, or state of another version: start from an empty index.
		if err := os.RemoveAll(bdir); err != nil {
			meta.close()
			return nil, fmt.Errorf("index %s: %w", opts.Dir, err)
		}
	}
	bi, err := openBleve(bdir)
	if err != nil && !fresh {
		log.Warn("index unreadable, rebuilding", "dir", bdir, "err", err)
		if err = meta.reset(mappingVersion); err == nil {
			if err = os.RemoveAll(bdir); err == nil {
				bi, err = openBleve(bdir)
			}
		}
	}
	if err != nil {
		meta.close()
		return nil, fmt.Errorf("index %s: %w", opts.Dir, err)
	}
	x := &Index{
		opts:     opts,
		log:      log,
		bleve:    bi,
		meta:     meta,
		sources:  make(map[string]*source),
		pending:  make(map[string]*op),
		progress: make(chan struct{}),
		jobs:     make(map[*job]bool),
		inflight: make(map[string]bool),
		wake:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	x.delay.Store(int64(opts.BatchDelay))
	x.quitCtx, x.quitCancel = context.WithCancel(context.Background())
	x.staleSources = len(meta.slugs()) > 0
	x.registerGate()
	go x.run()
	return x, nil
}

func openBleve(dir string) (bleve.Index, error) {
	cfg := map[string]interface{}{"unsafe_batch": true, "eventCallbackName": scorchEvents}
	if _, err := os.Stat(dir); err == nil {
		return bleve.OpenUsing(dir, cfg)
	}
	return bleve.NewUsing(dir, newMapping(), scorch.Name, scorch.Name, cfg)
}

// contentAnalyzer is the name of the content analyzer in the mapping.
const contentAnalyzer = "neuralis"

// newMapping describes the fields for query parsing. Documents are built by
// hand (see document) with the same options; nothing is stored, so hits carry
// only their uri and snippets are cut from the files themselves.
func newMapping() mapping.IndexMapping {
	im := bleve.NewIndexMapping()
	if err := im.AddCustomAnalyzer(contentAnalyzer, map[string]interface{}{
		"type":      custom.Name,
		"tokenizer": tokenizerName,
	}); err != nil {
		panic(err) // static configuration
	}
	kw := func() *mapping.FieldMapping {
		f := mapping.NewKeywordFieldMapping()
		f.Store, f.IncludeInAll, f.DocValues, f.IncludeTermVectors = false, false, false, false
		return f
	}
	dm := bleve.NewDocumentStaticMapping()
	for _, name := range []string{"uri", "source", "path", "name", "ext", "dir"} {
		dm.AddFieldMappingsAt(name, kw())
	}
	size := mapping.NewNumericFieldMapping()
	size.Store, size.IncludeInAll, size.DocValues = false, false, false
	dm.AddFieldMappingsAt("size", size)
	mtime := mapping.NewDateTimeFieldMapping()
	mtime.Store, mtime.IncludeInAll, mtime.DocValues = false, false, false
	dm.AddFieldMappingsAt("mtime", mtime)
	content := mapping.NewTextFieldMapping()
	content.Analyzer = contentAnalyzer
	// No term vectors: positions would double the cost of a build and
	// triple the index; phrases are checked in the files (searchPhrases).
	content.Store, content.IncludeInAll, content.DocValues, content.IncludeTermVectors = false, false, false, false
	dm.AddFieldMappingsAt("content", content)
	im.DefaultMapping = dm
	im.DefaultAnalyzer = contentAnalyzer
	im.DefaultField = "content"
	im.IndexDynamic, im.StoreDynamic, im.DocValuesDynamic = false, false, false
	return im
}

// document builds the bleve document of an admitted file.
func (x *Index) document(slug string, pr *prepared) *document.Document {
	uri := URI(slug, pr.path)
	d := document.NewDocument(uri)
	kw := func(name, v string) { d.AddField(newKeywordField(name, []byte(v))) }
	name := path.Base(pr.path)
	kw("uri", uri)
	kw("source", slug)
	kw("path", pr.path)
	kw("name", name)
	if ext := extOf(name); ext != "" {
		kw("ext", ext)
	}
	if dirs := ancestors(pr.path); len(dirs) > 0 {
		d.AddField(newKeywordsField("dir", dirs))
	}
	d.AddField(newAnalyzedField("content", *pr.terms, pr.size))
	return d
}

// ancestors lists the folders above the slash path p, outermost first:
// "a/b/c.go" gives "a" and "a/b". They are the terms of the field dir, so a
// path filter on a folder ("a/b/**") is one term, not one per file below it.
func ancestors(p string) []string {
	var out []string
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// extOf is the lower-cased extension of a file name without the dot
// ("go", "md"), or "" ("Makefile", ".bashrc").
func extOf(name string) string {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || i == len(name)-1 {
		return ""
	}
	return strings.ToLower(name[i+1:])
}

// AddSource makes src known to the index and loads what the index remembers
// of it. It reads no files: call Reconcile (in the background) to bring the
// index up to date. Adding a slug again replaces its settings.
func (x *Index) AddSource(src Source) error {
	if err := src.validate(); err != nil {
		return err
	}
	files, err := x.meta.load(src.Slug)
	if err != nil {
		return fmt.Errorf("index source %s: %w", src.Slug, err)
	}
	x.mu.Lock()
	first := !x.strayChecked[src.Slug]
	if x.strayChecked == nil {
		x.strayChecked = map[string]bool{}
	}
	x.strayChecked[src.Slug] = true
	x.mu.Unlock()
	if first {
		x.dropStrays(src.Slug, files)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if s, ok := x.sources[src.Slug]; ok {
		s.Source, s.rules = src, src.Rules()
		return nil
	}
	s := &source{Source: src, rules: src.Rules(), files: files}
	for _, e := range files {
		if e.indexed {
			s.docs++
			s.bytes += e.size
		}
	}
	x.sources[src.Slug] = s
	x.staleSources = false
	for _, slug := range x.meta.slugs() {
		if _, ok := x.sources[slug]; !ok {
			x.staleSources = true
		}
	}
	return nil
}

// Close stops the indexer and closes the index. Batches being built stop
// too; changes not yet applied are left to the next start's Reconcile,
// which reads every file whose size or mtime differs from what the index
// holds (see drain).
func (x *Index) Close() error {
	x.mu.Lock()
	if x.closing {
		x.mu.Unlock()
		return errors.New("index already closed")
	}
	x.closing = true
	x.mu.Unlock()
	// Cancelled before quit is closed: the indexer goroutine, woken by
	// quit, drains with quitCtx already done, so it applies nothing more
	// (the other order let it apply queued folder changes in between,
	// which TestCloseWithChangesQueuedLosesNothing caught once under load).
	x.quitCancel()
	close(x.quit)
	<-x.done
	x.wg.Wait() // background reconciles
	// bleve's Close does not wait for the persister; give it a moment so the
	// side store is complete and the next start reads nothing again.
	for deadline := time.Now().Add(closePersistWait); x.unpersisted.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	err := x.bleve.Close()
	x.unregisterGate()
	if err2 := x.meta.close(); err == nil {
		err = err2
	}
	return err
}

// Flush waits until every change queued before the call is searchable.
func (x *Index) Flush(ctx context.Context) error {
	x.mu.Lock()
	seq := x.enqSeq
	for x.doneSeq < seq {
		ch := x.progress
		x.mu.Unlock()
		select {
		case <-ch:
		case <-x.done:
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
		x.mu.Lock()
	}
	x.mu.Unlock()
	return nil
}

// sourceFS returns the file system and rules of slug, read under the lock
// (AddSource may replace them).
func (x *Index) sourceFS(slug string) (fs.FS, SourceRules, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s, ok := x.sources[slug]
	if !ok {
		return nil, SourceRules{}, false
	}
	return s.FS, s.rules, true
}

// source returns the state of slug.
func (x *Index) source(slug string) (*source, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s, ok := x.sources[slug]
	return s, ok
}

// dropStrays removes the documents of slug that the side store does not
// know as indexed (files). The side store is written after bleve reports
// a batch persisted, so a daemon killed in between leaves documents bleve
// kept and the store never heard of; Reconcile re-reads the files still
// there, but a file since removed, or now refused (emptied, grown past the
// limit), would stay findable (found by tests/kill_test.go). It costs one
// count when the two agree, which is every start after a clean stop.
func (x *Index) dropStrays(slug string, files map[string]metaEntry) {
	indexed := 0
	for _, e := range files {
		if e.indexed {
			indexed++
		}
	}
	q := bleve.NewTermQuery(slug)
	q.SetField("source")
	req := bleve.NewSearchRequestOptions(q, 0, 0, false)
	res, err := x.bleve.Search(req)
	if err != nil || res.Total == uint64(indexed) {
		return
	}
	req = bleve.NewSearchRequestOptions(q, int(res.Total), 0, false)
	if res, err = x.bleve.Search(req); err != nil {
		x.log.Warn("index: cannot list documents to drop strays", "source", slug, "err", err)
		return
	}
	b := x.bleve.NewBatch()
	prefix := URI(slug, "")
	for _, h := range res.Hits {
		p, ok := strings.CutPrefix(h.ID, prefix)
		if e, known := files[p]; !ok || !known || !e.indexed {
			b.Delete(h.ID)
		}
	}
	if b.Size() == 0 {
		return
	}
	x.log.Info("index: dropping documents an interrupted run left behind", "source", slug, "documents", b.Size())
	if err := x.bleve.Batch(b); err != nil {
		x.log.Warn("index: cannot drop strays", "source", slug, "err", err)
	}
}
