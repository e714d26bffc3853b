package index

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// ErrUnknownSource is returned for a slug that was never added.
var ErrUnknownSource = errors.New("unknown source")

// Progress describes a running Reconcile, for a progress line.
type Progress struct {
	Files      int64         `json:"files"`       // files checked so far
	Total      int64         `json:"total"`       // files to check (known once the walk is done)
	Bytes      int64         `json:"bytes"`       // bytes read so far
	TotalBytes int64         `json:"total_bytes"` // bytes of the changed files that must be read
	Rate       float64       `json:"rate"`        // bytes read per second
	ETA        time.Duration `json:"eta"`         // estimate of the time left; 0 when unknown or done
	Done       bool          `json:"done"`
}

// ReconcileStats counts what a Reconcile did.
type ReconcileStats struct {
	Walked    int           `json:"walked"`    // files seen (pruned folders are not entered)
	Read      int           `json:"read"`      // files read because their size or mtime changed
	Reindexed int           `json:"reindexed"` // files whose content was (re)indexed
	Removed   int           `json:"removed"`   // documents removed (file gone or no longer admitted)
	Skipped   int           `json:"skipped"`   // files seen but not admitted
	Unchanged int           `json:"unchanged"` // files left alone (same size and mtime, or same digest)
	Duration  time.Duration `json:"duration"`
}

// progressEvery is the least time between two progress reports.
const progressEvery = 200 * time.Millisecond

// Reconcile brings the index of slug up to date with its files: it walks the
// source, reads only files whose size or mtime differ from what the index
// remembers, re-indexes only those whose content digest changed, and removes
// documents of files gone or no longer admitted. It returns once every change
// it found is searchable. The index stays usable meanwhile; run it in the
// background. progress, if not nil, is called at most every 200ms and once at
// the end, from another goroutine than the caller's.
func (x *Index) Reconcile(ctx context.Context, slug string, progress func(Progress)) (ReconcileStats, error) {
	s, ok := x.source(slug)
	if !ok {
		return ReconcileStats{}, fmt.Errorf("reconcile %q: %w", slug, ErrUnknownSource)
	}
	s.reconcileMu.Lock()
	defer s.reconcileMu.Unlock()
	x.mu.Lock()
	s.reconciling = true
	fsys, rules := s.FS, s.rules
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		s.reconciling = false
		x.mu.Unlock()
	}()

	start := time.Now()
	var (
		mu sync.Mutex // guards st and p
		st ReconcileStats
		p  Progress
	)
	stopProgress := x.reportProgress(start, progress, func() Progress {
		mu.Lock()
		defer mu.Unlock()
		return p
	})
	entries, err := walk(ctx, fsys, ".", rules, func(sk Skip) {
		if !strings.HasSuffix(sk.Path, "/") {
			st.Walked++
			st.Skipped++
		}
	})
	if err != nil {
		stopProgress(false)
		return st, fmt.Errorf("reconcile %s: %w", slug, err)
	}

	type candidate struct {
		walkEntry
		old metaEntry
		had bool
	}
	var toRead []candidate
	var refused []string // known files now over the size bound
	var errs []error
	enqueue := func(path string, pr *prepared) {
		if err := x.enqueueInternal(ctx, slug, path, pr); err != nil {
			errs = append(errs, err)
		}
	}
	mu.Lock()
	p.Total = int64(len(entries))
	mu.Unlock()
	// Compare the walk with what the index remembers, a chunk at a time
	// under x.mu (s.files is not copied: at a restart it is the whole
	// source). matched counts the walked paths the index knows: when it is
	// every path the index knows, no file is gone.
	const chunk = 4096
	matched := 0
	for i := 0; i < len(entries); i += chunk {
		var walked, unchanged, skipped, removed, files int
		var totalBytes int64
		x.mu.Lock()
		for _, e := range entries[i:min(i+chunk, len(entries))] {
			old, had := s.files[e.path]
			if had {
				matched++
			}
			walked++
			size := e.info.Size()
			switch {
			case had && !old.racy && old.size == size && old.mtime == e.info.ModTime().UnixNano():
				unchanged++
				if !old.indexed {
					skipped++
				}
				files++
			case !sizeOK(size, rules):
				skipped++
				files++
				if had {
					if old.indexed {
						removed++
					}
					refused = append(refused, e.path)
				}
			default:
				toRead = append(toRead, candidate{e, old, had})
				totalBytes += size
			}
		}
		x.mu.Unlock()
		mu.Lock()
		st.Walked += walked
		st.Unchanged += unchanged
		st.Skipped += skipped
		st.Removed += removed
		p.Files += int64(files)
		p.TotalBytes += totalBytes
		mu.Unlock()
	}
	// What the index holds but the walk did not admit by name or find.
	var gone []string
	x.mu.Lock()
	someGone := matched != len(s.files)
	x.mu.Unlock()
	if someGone {
		walked := make(map[string]struct{}, len(entries))
		for _, e := range entries {
			walked[e.path] = struct{}{}
		}
		x.mu.Lock()
		for path, old := range s.files {
			if _, ok := walked[path]; !ok {
				if old.indexed {
					st.Removed++
				}
				gone = append(gone, path)
			}
		}
		x.mu.Unlock()
	}
	for _, path := range refused {
		enqueue(path, nil)
	}
	sort.Strings(gone)
	for _, path := range gone {
		enqueue(path, nil)
	}

	if len(toRead) > x.opts.MaxBatch {
		// A build: merge once it is searchable (see merges.go).
		defer x.holdMerges()()
	}
	background(ctx, len(toRead), prepareWorkers, func(i int) {
		c := toRead[i]
		// Terms are counted now, on the reader's core, unless the content
		// is what the index holds.
		pr, err := readFile(fsys, c.path, rules, c.info, func(pr *prepared) bool {
			return !(c.had && c.old.indexed && c.old.digest == pr.digest)
		})
		mu.Lock()
		p.Files++
		p.Bytes += c.info.Size()
		st.Read++
		switch {
		case err != nil:
			if c.had && c.old.indexed {
				st.Removed++
			}
			mu.Unlock()
			if c.had {
				x.enqueueInternal(ctx, slug, c.path, nil)
			}
			return
		case !pr.ok:
			st.Skipped++
			if c.had && c.old.indexed {
				st.Removed++
			}
		case c.had && c.old.indexed && c.old.digest == pr.digest:
			st.Unchanged++
		default:
			st.Reindexed++
		}
		mu.Unlock()
		if err := x.enqueueInternal(ctx, slug, c.path, &pr); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	if err := ctx.Err(); err != nil {
		stopProgress(false)
		return st, err
	}
	if err := x.Flush(ctx); err != nil {
		stopProgress(false)
		return st, err
	}
	st.Duration = time.Since(start)
	stopProgress(true)
	if len(errs) > 0 {
		return st, fmt.Errorf("reconcile %s: %w", slug, errs[0])
	}
	return st, nil
}

func sizeOK(size int64, rules SourceRules) bool {
	ok, _ := admitSize(size, rules)
	return ok
}

// reportProgress calls fn with snapshots of get every progressEvery until the
// returned stop is called; stop reports once more, marked done if ok.
func (x *Index) reportProgress(start time.Time, fn func(Progress), get func() Progress) (stop func(ok bool)) {
	if fn == nil {
		return func(bool) {}
	}
	snap := func() Progress {
		p := get()
		if el := time.Since(start).Seconds(); el > 0 {
			p.Rate = float64(p.Bytes) / el
		}
		if p.Rate > 0 && p.TotalBytes > p.Bytes {
			p.ETA = time.Duration(float64(p.TotalBytes-p.Bytes) / p.Rate * float64(time.Second))
		}
		return p
	}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				fn(snap())
			case <-quit:
				return
			}
		}
	}()
	return func(ok bool) {
		close(quit)
		<-done
		p := snap()
		p.Done, p.ETA = ok, 0
		fn(p)
	}
}

// enqueueInternal queues work found by Reconcile: pr is content already read,
// or nil to make the document agree with the disk.
func (x *Index) enqueueInternal(ctx context.Context, slug, path string, pr *prepared) error {
	return x.enqueuePrepared(ctx, slug, path, pr)
}

// SourceStats describes the index of one source.
type SourceStats struct {
	Slug            string        `json:"slug"`
	Documents       int           `json:"documents"`
	Bytes           int64         `json:"bytes"`
	Queued          int           `json:"queued"`
	LastIndexed     time.Time     `json:"last_indexed"`
	FreshnessMedian time.Duration `json:"freshness_median"` // Update call to searchable, over the last 100 updates
	FreshnessWorst  time.Duration `json:"freshness_worst"`
	Reconciling     bool          `json:"reconciling"`
	Overflowed      bool          `json:"overflowed"` // changes were dropped; a reconcile is due
}

// Stats describes the whole index.
type Stats struct {
	Sources []SourceStats `json:"sources"` // by slug
	Queued  int           `json:"queued"`  // changes waiting, all sources
	Batches int64         `json:"batches"` // batches applied since Open
}

// Stats returns counters for `neuralisfs status`.
func (x *Index) Stats() Stats {
	x.mu.Lock()
	defer x.mu.Unlock()
	st := Stats{Queued: len(x.pending) + len(x.dirOps), Batches: x.batches}
	for slug, s := range x.sources {
		ss := SourceStats{
			Slug: slug, Documents: s.docs, Bytes: s.bytes, Queued: s.queued,
			LastIndexed: s.lastIndexed, Reconciling: s.reconciling, Overflowed: s.overflow,
		}
		n := min(s.nFresh, freshnessWindow)
		if n > 0 {
			d := append([]time.Duration(nil), s.fresh[:n]...)
			sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
			ss.FreshnessMedian, ss.FreshnessWorst = d[n/2], d[n-1]
		}
		st.Sources = append(st.Sources, ss)
	}
	sort.Slice(st.Sources, func(i, j int) bool { return st.Sources[i].Slug < st.Sources[j].Slug })
	return st
}

// Identity returns the identity of what the index holds for slug, as Scan
// defines it ("sha256:…" over sorted path and content digest of admitted
// files), or "" for an unknown slug. It is exact once a Reconcile has run.
func (x *Index) Identity(slug string) string { return x.IdentityFor(slug, nil) }

// IdentityFor is Identity over the files a reader may read (canRead gets
// each file's uri; nil means every file). A digest over files a reader
// cannot see would tell them when one changes, and would confirm a guess
// of a hidden file's path and content; over what they can read it is the
// identity of the source as they see it.
func (x *Index) IdentityFor(slug string, canRead func(uri string) bool) string {
	x.mu.Lock()
	s, ok := x.sources[slug]
	if !ok {
		x.mu.Unlock()
		return ""
	}
	paths := make([]string, 0, s.docs)
	digests := make(map[string][sha256.Size]byte, s.docs)
	for p, e := range s.files {
		if e.indexed {
			paths = append(paths, p)
			digests[p] = e.digest
		}
	}
	x.mu.Unlock()
	if canRead != nil {
		kept := paths[:0]
		for _, p := range paths {
			if canRead(URI(slug, p)) {
				kept = append(kept, p)
			}
		}
		paths = kept
	}
	return identityHash(paths, digests)
}

// Docs lists the paths of slug's indexed documents, in no order.
// Documents is how many files of slug the index holds.
func (x *Index) Documents(slug string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s, ok := x.sources[slug]; ok {
		return s.docs
	}
	return 0
}

func (x *Index) Docs(slug string) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	s, ok := x.sources[slug]
	if !ok {
		return nil
	}
	out := make([]string, 0, s.docs)
	for p, e := range s.files {
		if e.indexed {
			out = append(out, p)
		}
	}
	return out
}

// CountFor returns the documents and their bytes of slug that a reader may
// read (canRead gets each uri; nil means all), for `status` shown to a
// reader from whom some files are hidden: their number is hidden too.
func (x *Index) CountFor(slug string, canRead func(uri string) bool) (docs int, bytes int64) {
	x.mu.Lock()
	s, ok := x.sources[slug]
	if !ok {
		x.mu.Unlock()
		return 0, 0
	}
	type doc struct {
		p    string
		size int64
	}
	all := make([]doc, 0, s.docs)
	for p, e := range s.files {
		if e.indexed {
			all = append(all, doc{p, e.size})
		}
	}
	x.mu.Unlock()
	for _, d := range all {
		if canRead == nil || canRead(URI(slug, d.p)) {
			docs++
			bytes += d.size
		}
	}
	return docs, bytes
}
