package index

import (
	"context"
	"fmt"
	"sync"

	"github.com/blevesearch/bleve/v2/mapping"
	bsearch "github.com/blevesearch/bleve/v2/search"
	"github.com/blevesearch/bleve/v2/search/query"
	"github.com/blevesearch/bleve/v2/search/searcher"
	bindex "github.com/blevesearch/bleve_index_api"
)

// A search by a caller who may not read every file expands its wildcard,
// regexp, prefix, fuzzy and range clauses over the words of the files it
// may read only.
//
// bleve expands such a clause over the field's whole term dictionary and
// refuses the query past searcher.DisjunctionMaxClauseCount words
// (MaxQueryTerms). Counted over every file, the refusal told whether
// files hidden from the caller hold words the clause matches: a caller
// that put exactly the bound's number of words of its own in a file the
// index takes, then searched /fill[a-z]{4}|hunter2/, was refused if some
// hidden file held hunter2 and answered if none did, and rebuilt such a
// word letter by letter in a few dozen queries (a red-team pass,
// 2026-12-07). visibleQuery runs the query against visibleReader, whose
// term dictionaries yield a word only once a file the caller may read
// holds it (its postings are read until one does): the expansion, its
// count and the refusal then depend on readable files only. Words that
// only hidden files hold matched only hidden files, whose hits were
// dropped anyway, so the hits are the same. The cost is one posting list
// opened per candidate word, read until a readable file: a clause whose
// words are in readable files costs little more; one over many words
// only hidden files hold reads their postings.
type visibleQuery struct {
	inner   query.Query
	canRead func(uri string) bool
}

func (q *visibleQuery) Searcher(ctx context.Context, i bindex.IndexReader, m mapping.IndexMapping, opts bsearch.SearcherOptions) (bsearch.Searcher, error) {
	return q.inner.Searcher(ctx, &visibleReader{IndexReader: i, ctx: ctx, canRead: q.canRead}, m, opts)
}

// visibleReader is an index reader whose term dictionaries hold only the
// words of documents canRead allows.
type visibleReader struct {
	bindex.IndexReader
	ctx     context.Context
	canRead func(uri string) bool
	mu      sync.Mutex
	seen    map[string]bool // field\x00term → held by a readable document
}

// visible reports whether a document canRead allows holds term in field.
func (r *visibleReader) visible(field string, term []byte) (bool, error) {
	key := field + "\x00" + string(term)
	r.mu.Lock()
	v, ok := r.seen[key]
	r.mu.Unlock()
	if ok {
		return v, nil
	}
	tfr, err := r.IndexReader.TermFieldReader(r.ctx, term, field, false, false, false)
	if err != nil {
		return false, err
	}
	defer tfr.Close()
	found := false
	var doc bindex.TermFieldDoc
	for {
		if err := r.ctx.Err(); err != nil {
			return false, err
		}
		d, err := tfr.Next(&doc)
		if err != nil {
			return false, err
		}
		if d == nil {
			break
		}
		id, err := r.IndexReader.ExternalID(d.ID)
		if err == nil && r.canRead(id) {
			found = true
			break
		}
	}
	r.mu.Lock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	r.seen[key] = found
	r.mu.Unlock()
	return found, nil
}

func (r *visibleReader) wrap(field string, d bindex.FieldDict, err error) (bindex.FieldDict, error) {
	if err != nil {
		return nil, err
	}
	return &visibleDict{FieldDict: d, r: r, field: field}, nil
}

func (r *visibleReader) FieldDict(field string) (bindex.FieldDict, error) {
	d, err := r.IndexReader.FieldDict(field)
	return r.wrap(field, d, err)
}

func (r *visibleReader) FieldDictRange(field string, start, end []byte) (bindex.FieldDict, error) {
	d, err := r.IndexReader.FieldDictRange(field, start, end)
	return r.wrap(field, d, err)
}

func (r *visibleReader) FieldDictPrefix(field string, prefix []byte) (bindex.FieldDict, error) {
	d, err := r.IndexReader.FieldDictPrefix(field, prefix)
	return r.wrap(field, d, err)
}

func (r *visibleReader) FieldDictRegexp(field, re string) (bindex.FieldDict, error) {
	ir, ok := r.IndexReader.(bindex.IndexReaderRegexp)
	if !ok {
		return nil, fmt.Errorf("the index cannot expand regular expressions")
	}
	d, err := ir.FieldDictRegexp(field, re)
	return r.wrap(field, d, err)
}

func (r *visibleReader) FieldDictRegexpAutomaton(field, re string) (bindex.FieldDict, bindex.RegexAutomaton, error) {
	ir, ok := r.IndexReader.(bindex.IndexReaderRegexp)
	if !ok {
		return nil, nil, fmt.Errorf("the index cannot expand regular expressions")
	}
	d, a, err := ir.FieldDictRegexpAutomaton(field, re)
	w, err := r.wrap(field, d, err)
	return w, a, err
}

func (r *visibleReader) FieldDictFuzzy(field, term string, fuzziness int, prefix string) (bindex.FieldDict, error) {
	ir, ok := r.IndexReader.(bindex.IndexReaderFuzzy)
	if !ok {
		return nil, fmt.Errorf("the index cannot expand fuzzy terms")
	}
	d, err := ir.FieldDictFuzzy(field, term, fuzziness, prefix)
	return r.wrap(field, d, err)
}

func (r *visibleReader) FieldDictFuzzyAutomaton(field, term string, fuzziness int, prefix string) (bindex.FieldDict, bindex.FuzzyAutomaton, error) {
	ir, ok := r.IndexReader.(bindex.IndexReaderFuzzy)
	if !ok {
		return nil, nil, fmt.Errorf("the index cannot expand fuzzy terms")
	}
	d, a, err := ir.FieldDictFuzzyAutomaton(field, term, fuzziness, prefix)
	w, err := r.wrap(field, d, err)
	return w, a, err
}

// FieldDictContains answers for the numeric and date ranges, which
// enumerate their candidate words and keep those the field holds.
func (r *visibleReader) FieldDictContains(field string) (bindex.FieldDictContains, error) {
	ir, ok := r.IndexReader.(bindex.IndexReaderContains)
	if !ok {
		return nil, fmt.Errorf("the index cannot look words up")
	}
	d, err := ir.FieldDictContains(field)
	if err != nil {
		return nil, err
	}
	return &visibleContains{FieldDictContains: d, r: r, field: field}, nil
}

// visibleDict is a term dictionary without the words no readable
// document holds.
type visibleDict struct {
	bindex.FieldDict
	r     *visibleReader
	field string
	kept  int // words let through
}

func (d *visibleDict) Next() (*bindex.DictEntry, error) {
	for {
		e, err := d.FieldDict.Next()
		if err != nil || e == nil {
			return e, err
		}
		ok, err := d.r.visible(d.field, []byte(e.Term))
		if err != nil {
			return nil, err
		}
		if ok {
			// Past the bound the clause is refused as bleve would refuse
			// it, counted in words readable files hold (runSearch turns
			// the error into its sentence); stopping here also bounds
			// the posting lists read.
			if d.kept++; d.kept > searcher.DisjunctionMaxClauseCount {
				return nil, fmt.Errorf("TooManyClauses: more than %d words readable files hold", searcher.DisjunctionMaxClauseCount)
			}
			return e, nil
		}
	}
}

// visibleContains is FieldDictContains without the words no readable
// document holds.
type visibleContains struct {
	bindex.FieldDictContains
	r     *visibleReader
	field string
}

func (c *visibleContains) Contains(key []byte) (bool, error) {
	ok, err := c.FieldDictContains.Contains(key)
	if err != nil || !ok {
		return false, err
	}
	return c.r.visible(c.field, key)
}
