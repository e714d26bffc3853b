package index

import (
	"context"
	"math"

	"github.com/blevesearch/bleve/v2/mapping"
	bsearch "github.com/blevesearch/bleve/v2/search"
	"github.com/blevesearch/bleve/v2/search/query"
	"github.com/blevesearch/bleve/v2/search/searcher"
	bindex "github.com/blevesearch/bleve_index_api"
)

// Ranges over size and mtime (size:>1000, mtime:>"2026-01-01") are answered
// from what the index remembers of every file (the side state), not from
// index terms: bleve indexes a number as 16 terms, one per precision, and
// the two fields were an eighth of the CPU of a build and a sixth of the
// index for a query few people type.

// rangeIDs is the most documents a range lists by uri; past it, every
// document is visited and kept if its uri is in the range.
var rangeIDs = 2000

// rangeQuery matches the documents whose size (bytes) or mtime (ns since
// the epoch) is in [min, max].
type rangeQuery struct {
	x        *Index
	field    string // "size" or "mtime"
	min, max int64
	boost    float64
}

// newRangeQuery turns bleve's range queries over size and mtime into
// rangeQuery; ok is false for any other query.
func (x *Index) newRangeQuery(q query.Query) (query.Query, bool) {
	var field string
	var lo, hi float64
	var incLo, incHi *bool
	var boost *query.Boost
	switch q := q.(type) {
	case *query.NumericRangeQuery:
		field, incLo, incHi, boost = q.FieldVal, q.InclusiveMin, q.InclusiveMax, q.BoostVal
		lo, hi = math.Inf(-1), math.Inf(1)
		if q.Min != nil {
			lo = *q.Min
		}
		if q.Max != nil {
			hi = *q.Max
		}
	case *query.DateRangeQuery:
		field, incLo, incHi, boost = q.FieldVal, q.InclusiveStart, q.InclusiveEnd, q.BoostVal
		lo, hi = math.Inf(-1), math.Inf(1)
		if !q.Start.IsZero() {
			lo = float64(q.Start.UnixNano())
		}
		if !q.End.IsZero() {
			hi = float64(q.End.UnixNano())
		}
	default:
		return nil, false
	}
	if field != "size" && field != "mtime" {
		return nil, false
	}
	// bleve's defaults: the minimum is included, the maximum is not.
	r := &rangeQuery{x: x, field: field, min: math.MinInt64, max: math.MaxInt64, boost: boost.Value()}
	if incLo == nil || *incLo {
		r.min = ceilInt64(lo)
	} else {
		r.min = floorInt64(lo) + 1
		if floorInt64(lo) == math.MaxInt64 {
			r.min, r.max = 1, 0 // nothing is above the largest value
		}
	}
	if incHi != nil && *incHi {
		r.max = min(r.max, floorInt64(hi))
	} else {
		if c := ceilInt64(hi); c == math.MinInt64 {
			r.min, r.max = 1, 0
		} else {
			r.max = min(r.max, c-1)
		}
	}
	return r, true
}

func floorInt64(f float64) int64 { return clampInt64(math.Floor(f)) }
func ceilInt64(f float64) int64  { return clampInt64(math.Ceil(f)) }

func clampInt64(f float64) int64 {
	switch {
	case math.IsNaN(f):
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

// in reports whether the entry e is in the range.
func (q *rangeQuery) in(e metaEntry) bool {
	v := e.size
	if q.field == "mtime" {
		v = e.mtime
	}
	return e.indexed && q.min <= v && v <= q.max
}

// Searcher lists the documents in range from the side state: a few by uri,
// many by visiting every document and keeping those in the list.
func (q *rangeQuery) Searcher(ctx context.Context, i bindex.IndexReader, mp mapping.IndexMapping, opts bsearch.SearcherOptions) (bsearch.Searcher, error) {
	var uris []string
	q.x.mu.Lock()
	for slug, s := range q.x.sources {
		for p, e := range s.files {
			if q.in(e) {
				uris = append(uris, URI(slug, p))
			}
		}
	}
	q.x.mu.Unlock()
	if len(uris) <= rangeIDs {
		dq := query.NewDocIDQuery(uris)
		dq.SetBoost(q.boost)
		return dq.Searcher(ctx, i, mp, opts)
	}
	keep := make(map[string]struct{}, len(uris))
	for _, u := range uris {
		keep[u] = struct{}{}
	}
	all := query.NewMatchAllQuery()
	all.SetBoost(q.boost)
	s, err := all.Searcher(ctx, i, mp, opts)
	if err != nil {
		return nil, err
	}
	return searcher.NewFilteringSearcher(ctx, s, func(_ *bsearch.SearchContext, d *bsearch.DocumentMatch) bool {
		id, err := i.ExternalID(d.IndexInternalID)
		if err != nil {
			return false
		}
		_, ok := keep[id]
		return ok
	}), nil
}
