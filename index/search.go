package index

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/mapping"
	bsearch "github.com/blevesearch/bleve/v2/search"
	"github.com/blevesearch/bleve/v2/search/query"
	"github.com/blevesearch/bleve/v2/search/searcher"
	bindex "github.com/blevesearch/bleve_index_api"
	"github.com/bmatcuk/doublestar/v4"

	"github.com/neuralis/neuralisfs/internal/rawname"
)

// ErrBadQuery is wrapped by the error Search returns for a query it cannot
// parse or run; the error's message is one sentence naming the problem.
var ErrBadQuery = errors.New("bad query")

type badQuery struct{ msg string }

func (e *badQuery) Error() string        { return e.msg }
func (e *badQuery) Is(target error) bool { return target == ErrBadQuery }

func badQueryf(format string, args ...any) error {
	return &badQuery{msg: fmt.Sprintf(format, args...)}
}

// Query is a search request.
type Query struct {
	// Q is bleve query-string syntax over the content: terms, "phrases",
	// +must, -not, prefix*, wild?cards, /regexp/, and field:value for the
	// fields path, name, ext, source, uri (exact), size and mtime (ranges,
	// e.g. size:>1000). Matching is case-insensitive. A bare word that the
	// tokenizer splits (fmt.Println) is searched as a phrase. Empty Q
	// matches every document (with the filters below).
	Q string `json:"q"`
	// Source keeps hits of one source slug.
	Source string `json:"source,omitempty"`
	// PathGlob keeps hits whose path matches a doublestar pattern.
	PathGlob string `json:"path_glob,omitempty"`
	// Ext keeps hits with this extension ("go" or ".go", case-insensitive).
	Ext string `json:"ext,omitempty"`
	// Limit bounds the hits returned: default 20, at most 1000.
	Limit int `json:"limit,omitempty"`
}

// Result is what Search found. Total and Hits count only documents the
// caller may read, so a denied principal learns nothing from them.
type Result struct {
	Total int   `json:"total"`
	Hits  []Hit `json:"hits"`
	// TotalIsLowerBound reports that counting stopped early: a query
	// with phrases checks candidates a page at a time, and stops once it
	// has Limit hits; Total counts the matches among the pages checked.
	TotalIsLowerBound bool `json:"total_is_lower_bound,omitempty"`
	// Stopped, when set, says why the search stopped before it had
	// looked at every match (see maxPhraseCheckBytes); the hits and the
	// count cover what it looked at.
	Stopped string `json:"stopped,omitempty"`
	// NotSearched are the caller's held files the search did not look
	// in: past what one search indexes of them (MaxOverlayBytes,
	// MaxOverlayFiles), newest first. Their backing versions are not
	// searched either (the held state decides those paths), so a match
	// in them is neither found nor ruled out.
	NotSearched []string `json:"not_searched,omitempty"`
}

// Hit is one matching file.
type Hit struct {
	URI    string  `json:"uri"`
	Source string  `json:"source"`
	Path   string  `json:"path"`
	Score  float64 `json:"score"`
	Lines  []Line  `json:"lines,omitempty"`
}

// Line is a line of a hit that contains a match, read from the file at
// search time.
type Line struct {
	N int `json:"n"` // 1-based
	// Text is Raw with every match wrapped in HighlightStart/HighlightEnd,
	// and "…" where a long line was cut.
	Text string `json:"text"`
	// Raw is the line (or, for a line longer than maxLineBytes, the window
	// around its first match) without markers.
	Raw string `json:"raw"`
	// Matches are [start, end) byte offsets of the matches in Raw.
	Matches [][2]int `json:"matches"`
}

// Highlight markers in Line.Text: plain text, rare in source code, and one
// rune each so a column count survives.
const (
	HighlightStart = "«"
	HighlightEnd   = "»"
)

const (
	defaultLimit = 20
	maxLimit     = 1000
	// phrasePage is how many candidates of a query with phrases are read and
	// checked per step: enough that a phrase in few files gets an exact
	// total, few enough that a common one costs milliseconds, not a grep.
	phrasePage = 50
	// snippetWorkers read the files of hits for snippets at once.
	snippetWorkers = 4
	// maxSnippetLines is how many matching lines a hit shows.
	maxSnippetLines = 3
	// maxLineBytes cuts long lines around the first match.
	maxLineBytes = 240
)

// Search runs q and returns the hits the caller may read, best first, with
// up to three matching lines each. canRead is asked for every candidate
// before anything is counted or cut to Limit; nil means every document is
// readable (faster: the total then comes straight from the index).
func (x *Index) Search(ctx context.Context, q Query, canRead func(uri string) bool) (Result, error) {
	x.mu.Lock()
	closing := x.closing
	x.mu.Unlock()
	if closing {
		return Result{}, ErrClosed
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	limit = min(limit, maxLimit)
	user, m, err := x.parseQuery(q.Q)
	if err != nil {
		return Result{}, err
	}
	conj := []query.Query{user}
	if q.Source != "" {
		conj = append(conj, termQuery("source", q.Source))
	}
	if ext := strings.ToLower(strings.TrimPrefix(q.Ext, ".")); ext != "" {
		conj = append(conj, termQuery("ext", ext))
	}
	glob := strings.TrimPrefix(q.PathGlob, "/")
	if glob != "" {
		if !doublestar.ValidatePattern(glob) {
			return Result{}, badQueryf("path glob %q is not a valid doublestar pattern", q.PathGlob)
		}
		if lit := literalPrefix(glob); lit != "" {
			conj = append(conj, pathPrefixQuery(lit))
		}
	}
	var bq query.Query = user
	if len(conj) > 1 {
		bq = query.NewConjunctionQuery(conj)
	}
	if canRead != nil {
		// Expanded over the words of readable files only (visible.go).
		bq = &visibleQuery{inner: bq, canRead: canRead}
	}

	if canRead != nil || glob != "" || x.hasStale() {
		// Matched, counted and ranked among what the caller may see only.
		bq = keptQuery{q: bq, keep: func(uri string) bool {
			slug, p, ok := SplitURI(uri)
			if !ok {
				return false
			}
			if _, _, known := x.sourceFS(slug); !known {
				return false // a source no longer configured
			}
			if glob != "" {
				if m, _ := doublestar.Match(glob, p); !m {
					return false
				}
			}
			return canRead == nil || canRead(uri)
		}}
	}
	var res Result
	if len(m.phraseQs) > 0 {
		res, err = x.searchPhrases(ctx, bq, m, limit, q.Q)
	} else {
		res, err = x.searchTerms(ctx, bq, limit, q.Q)
	}
	if err != nil {
		return Result{}, err
	}
	if !m.empty() {
		// Reading the files is most of a search: a few at a time.
		parallel(ctx, len(res.Hits), snippetWorkers, func(i int) {
			res.Hits[i].Lines = x.snippet(res.Hits[i].Source, res.Hits[i].Path, m)
		})
	}
	return res, nil
}

// MaxQueryTerms bounds how many indexed words one wildcard, regexp,
// prefix, fuzzy or range clause may expand to. Each word costs a posting
// list to merge (about 70 µs here): "*e*" over the Go tree's 284,000
// words took 10 s of the daemon's CPU, and any caller who may search can
// send it again and again. Past the bound a query is refused in one
// sentence instead. It is bleve's searcher.DisjunctionMaxClauseCount,
// which is process-wide; the first Open sets it.
const MaxQueryTerms = 50000

var clauseLimit sync.Once

// runSearch runs one bleve request, turning its errors into one sentence.
func (x *Index) runSearch(ctx context.Context, req *bleve.SearchRequest, qs string) (*bleve.SearchResult, error) {
	sr, err := x.bleve.SearchInContext(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, bleve.ErrorIndexClosed) {
			return nil, ErrClosed // closed under the search
		}
		if strings.Contains(err.Error(), "TooManyClauses") {
			return nil, badQueryf("query %q matches more than %d different words; make its wildcards, regexps or prefixes narrower", qs, searcher.DisjunctionMaxClauseCount)
		}
		return nil, badQueryf("query %q cannot be run: %s", qs, firstLine(err.Error()))
	}
	return sr, nil
}

// searchTerms runs a query without phrases: bleve's total is the count.
// A filtered query (keptQuery) holds only the documents the caller may
// see, so the total counts those alone.
func (x *Index) searchTerms(ctx context.Context, bq query.Query, limit int, qs string) (Result, error) {
	sr, err := x.runSearch(ctx, bleve.NewSearchRequestOptions(bq, limit, 0, false), qs)
	if err != nil {
		return Result{}, err
	}
	res := Result{Total: int(sr.Total)}
	for _, h := range sr.Hits {
		if slug, p, ok := SplitURI(h.ID); ok {
			res.Hits = append(res.Hits, Hit{URI: h.ID, Source: slug, Path: p, Score: h.Score})
		}
	}
	return res, nil
}

// keptQuery is q with every document keep refuses left out of the
// index's own matching: bleve then counts and ranks only what the caller
// may see. Before, a filtered search examined the best countCap matches,
// hidden ones among them, and took its count from the visible ones among
// those and its "at least" from the index's total of every match, so the
// count told whether hidden files held a word, how many files a hidden
// folder had, and their sizes and times (a red-team pass: "20 of 1000"
// against "20 of at least 999" once a hidden file held the second word).
// keep runs for every match, not only for the best ones.
type keptQuery struct {
	q    query.Query
	keep func(uri string) bool
}

func (k keptQuery) Searcher(ctx context.Context, i bindex.IndexReader, mp mapping.IndexMapping, opts bsearch.SearcherOptions) (bsearch.Searcher, error) {
	s, err := k.q.Searcher(ctx, i, mp, opts)
	if err != nil {
		return nil, err
	}
	return searcher.NewFilteringSearcher(ctx, s, func(_ *bsearch.SearchContext, d *bsearch.DocumentMatch) bool {
		id, err := i.ExternalID(d.IndexInternalID)
		return err == nil && k.keep(id)
	}), nil
}

// searchPhrases runs a query with phrases. The index keeps no positions
// (they cost half of a first build and most of the index's size), so it
// goes in two steps per page of candidates. First the query with every
// phrase relaxed to the conjunction of its terms (and a negated phrase to
// nothing) finds candidates, best first, which keep filters; their files are
// read and checked for every phrase, phrasePage of them at a time and on
// prepareWorkers goroutines. Then the exact query, where each phrase is its
// terms filtered by those checks, runs over the candidates of the page, so
// +, - and OR around phrases mean what they say. Paging goes on only while
// there are fewer than limit hits; Total is then a lower bound.
func (x *Index) searchPhrases(ctx context.Context, bq query.Query, m *matcher, limit int, qs string) (Result, error) {
	var res Result
	size := max(limit, phrasePage)
	for from := 0; ; {
		m.exact = false
		sr, err := x.runSearch(ctx, bleve.NewSearchRequestOptions(bq, size, from, false), qs)
		if err != nil {
			return Result{}, err
		}
		var cands []string
		for _, h := range sr.Hits {
			if _, _, ok := SplitURI(h.ID); ok {
				cands = append(cands, h.ID)
			}
		}
		if len(cands) > 0 {
			if err := x.checkPhrases(ctx, cands, m); err != nil {
				return Result{}, err
			}
			m.exact = true
			eq := query.NewConjunctionQuery([]query.Query{query.NewDocIDQuery(cands), bq})
			er, err := x.runSearch(ctx, bleve.NewSearchRequestOptions(eq, len(cands), 0, false), qs)
			if err != nil {
				return Result{}, err
			}
			for _, h := range er.Hits {
				slug, p, _ := SplitURI(h.ID)
				res.Total++
				if len(res.Hits) < limit {
					res.Hits = append(res.Hits, Hit{URI: h.ID, Source: slug, Path: p, Score: h.Score})
				}
			}
		}
		from += len(sr.Hits)
		if len(sr.Hits) == 0 || uint64(from) >= sr.Total {
			break
		}
		if len(res.Hits) >= limit {
			res.TotalIsLowerBound = true
			break
		}
		if m.checked >= maxPhraseCheckBytes {
			res.TotalIsLowerBound = true
			res.Stopped = fmt.Sprintf("stopped after checking the %d best candidates (%d MiB) for the phrase; add words or filters to narrow it", from, m.checked>>20)
			break
		}
	}
	return res, nil
}

// checkPhrases reads the files of cands and records, for every phrase of m,
// the uris whose content holds it. A file that cannot be read holds none.
func (x *Index) checkPhrases(ctx context.Context, cands []string, m *matcher) error {
	found := make([][]bool, len(cands)) // [cand][phrase]
	// The hits are among the candidates: their snippets are cut from what
	// was read here, not from a second read. What is kept is bounded by
	// maxReadCache as it is read (a page may be a thousand candidates of
	// max_file_bytes each; the rest is dropped once checked).
	if m.read == nil {
		m.read = make(map[string][]byte)
	}
	var keepMu sync.Mutex
	parallel(ctx, len(cands), prepareWorkers, func(i int) {
		slug, p, _ := SplitURI(cands[i])
		fsys, rules, ok := x.sourceFS(slug)
		if !ok {
			return
		}
		content, err := readBounded(fsys, p, rules.maxBytes())
		if err != nil {
			return
		}
		found[i] = containsPhrases(content, m.phraseQs)
		keepMu.Lock()
		m.checked += int64(len(content))
		if m.readBytes+len(content) <= maxReadCache {
			m.read[cands[i]] = content
			m.readBytes += len(content)
		}
		keepMu.Unlock()
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, pq := range m.phraseQs {
		pq.holds = make(map[string]bool)
	}
	for i, f := range found {
		for k, ok := range f {
			if ok {
				m.phraseQs[k].holds[cands[i]] = true
			}
		}
	}
	return nil
}

// hasStale reports whether the index may hold documents of sources that are
// not added (configured) any more, so hits must be checked one by one.
func (x *Index) hasStale() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.staleSources
}

func termQuery(field, term string) query.Query {
	t := query.NewTermQuery(term)
	t.SetField(field)
	return t
}

// pathPrefixQuery matches the paths that start with lit. A whole folder
// ("a/b/") is one term of the field dir; anything else is a prefix query
// over path, one term per file it matches.
func pathPrefixQuery(lit string) query.Query {
	if i := strings.LastIndexByte(lit, '/'); i > 0 && i == len(lit)-1 {
		return termQuery("dir", lit[:i])
	}
	pq := query.NewPrefixQuery(lit)
	pq.SetField("path")
	return pq
}

// wildcardFolder reports the folder of a path wildcard that means "every
// file below a folder" ("a/b/**" or "a/b/*": a bleve wildcard's * matches
// "/" too).
func wildcardFolder(w string) (string, bool) {
	dir := strings.TrimRight(w, "*")
	if len(dir) == len(w) || len(dir) < 2 || dir[len(dir)-1] != '/' {
		return "", false
	}
	dir = dir[:len(dir)-1]
	if strings.ContainsAny(dir, `*?\`) || strings.HasPrefix(dir, "/") {
		return "", false
	}
	return dir, true
}

// literalPrefix is the part of a glob before its first special character.
func literalPrefix(glob string) string {
	if i := strings.IndexAny(glob, `*?[{\`); i >= 0 {
		return glob[:i]
	}
	return glob
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(s)
}

// parseQuery parses the query string, makes content terms match the lower-
// cased index, and collects what snippets should highlight.
func (x *Index) parseQuery(s string) (query.Query, *matcher, error) {
	m := &matcher{x: x, terms: map[string]bool{}}
	if strings.TrimSpace(s) == "" {
		return query.NewMatchAllQuery(), m, nil
	}
	parsed, err := query.NewQueryStringQuery(s).Parse()
	if err != nil {
		return nil, nil, badQueryf("query %q is not valid: %s", s, firstLine(err.Error()))
	}
	q, err := m.normalize(parsed, false)
	if err != nil {
		return nil, nil, badQueryf("query %q is not valid: %s", s, err)
	}
	return q, m, nil
}

// matcher finds, in a line of text, what a query matched.
type matcher struct {
	x        *Index
	terms    map[string]bool
	phrases  [][]string // positive phrases, to highlight
	patterns []*regexp.Regexp
	// phraseQs are every phrase of the query, positive or negated, and
	// exact switches them from relaxed to checked (see searchPhrases).
	phraseQs []*phraseQuery
	exact    bool
	// read is the content of files checked for phrases, by uri, for
	// their snippets (at most maxReadCache bytes).
	read      map[string][]byte
	readBytes int
	// checked is the bytes of candidate files read for phrase checks.
	checked int64
}

// maxReadCache bounds the content a search with phrases keeps for snippets.
const maxReadCache = 16 << 20

// maxPhraseCheckBytes bounds what one search reads to check phrases. A
// phrase of common words that the files rarely hold in that order ("the
// the the") would otherwise read every file holding the words: 1.5 s for
// the Go tree, the whole source for a bigger one, for anyone who may
// search, as often as they ask. Past the bound the search stops paging
// and says so (Result.Stopped).
var maxPhraseCheckBytes int64 = 64 << 20

// knownFields are the fields a query may name; "" is the default (content).
var knownFields = map[string]bool{
	"": true, "content": true, "path": true, "name": true, "ext": true,
	"source": true, "uri": true, "size": true, "mtime": true,
}

func isContentField(f string) bool { return f == "" || f == "content" }

func tokens(s string) []string {
	var out []string
	b := []byte(s)
	eachToken(b, func(i, j int) { out = append(out, string(lowerBytes(b[i:j]))) })
	return out
}

// normalize rewrites q for the index and records its positive content terms.
func (m *matcher) normalize(q query.Query, neg bool) (query.Query, error) {
	if fq, ok := q.(query.FieldableQuery); ok && !knownFields[fq.Field()] {
		return nil, fmt.Errorf("there is no field %q (fields: content, path, name, ext, source, uri, size, mtime)", fq.Field())
	}
	switch q := q.(type) {
	case *query.BooleanQuery:
		for _, sub := range []*query.Query{&q.Must, &q.Should, &q.Filter} {
			if *sub != nil {
				n, err := m.normalize(*sub, neg)
				if err != nil {
					return nil, err
				}
				*sub = n
			}
		}
		if q.MustNot != nil {
			n, err := m.normalize(q.MustNot, !neg)
			if err != nil {
				return nil, err
			}
			q.MustNot = n
		}
	case *query.ConjunctionQuery:
		for i := range q.Conjuncts {
			n, err := m.normalize(q.Conjuncts[i], neg)
			if err != nil {
				return nil, err
			}
			q.Conjuncts[i] = n
		}
	case *query.DisjunctionQuery:
		for i := range q.Disjuncts {
			n, err := m.normalize(q.Disjuncts[i], neg)
			if err != nil {
				return nil, err
			}
			q.Disjuncts[i] = n
		}
	case *query.NumericRangeQuery, *query.DateRangeQuery:
		if m.x != nil {
			if r, ok := m.x.newRangeQuery(q); ok {
				return r, nil
			}
		}
	case *query.MatchQuery:
		if q.FieldVal == "ext" {
			q.Match = strings.ToLower(strings.TrimPrefix(q.Match, "."))
		}
		if !isContentField(q.FieldVal) {
			return q, nil
		}
		toks := tokens(q.Match)
		if len(toks) > 1 {
			// fmt.Println is one word to the person typing it.
			return m.phrase(toks, q.BoostVal, neg), nil
		}
		if !neg {
			for _, t := range toks {
				m.terms[t] = true
			}
		}
	case *query.MatchPhraseQuery:
		if !isContentField(q.FieldVal) {
			return q, nil
		}
		switch toks := tokens(q.MatchPhrase); len(toks) {
		case 0:
			return q, nil
		case 1:
			tq := query.NewTermQuery(toks[0])
			tq.SetField("content")
			if b := q.BoostVal; b != nil {
				tq.SetBoost(float64(*b))
			}
			if !neg {
				m.terms[toks[0]] = true
			}
			return tq, nil
		default:
			return m.phrase(toks, q.BoostVal, neg), nil
		}
	case *query.TermQuery:
		if isContentField(q.FieldVal) {
			q.Term = strings.ToLower(q.Term)
			if !neg {
				m.terms[q.Term] = true
			}
		}
	case *query.FuzzyQuery:
		if isContentField(q.FieldVal) {
			q.Term = strings.ToLower(q.Term)
			if !neg {
				m.terms[q.Term] = true
			}
		}
	case *query.PrefixQuery:
		if isContentField(q.FieldVal) {
			q.Prefix = strings.ToLower(q.Prefix)
			if !neg {
				m.patterns = append(m.patterns, regexp.MustCompile("^"+regexp.QuoteMeta(q.Prefix)))
			}
		}
	case *query.WildcardQuery:
		if dir, ok := wildcardFolder(q.Wildcard); ok && q.FieldVal == "path" {
			// One term instead of one per file below the folder.
			tq := query.NewTermQuery(dir)
			tq.SetField("dir")
			if b := q.BoostVal; b != nil {
				tq.SetBoost(float64(*b))
			}
			return tq, nil
		}
		if automatonTooBig(wildcardRegexp(q.Wildcard)) {
			return nil, fmt.Errorf("the wildcard %s needs too large an automaton to search with; use fewer ? and *", q.Wildcard)
		}
		if isContentField(q.FieldVal) {
			q.Wildcard = strings.ToLower(q.Wildcard)
			if !neg {
				m.patterns = append(m.patterns, regexp.MustCompile("^"+wildcardRegexp(q.Wildcard)+"$"))
			}
		}
	case *query.RegexpQuery:
		if automatonTooBig(q.Regexp) {
			return nil, fmt.Errorf("/%s/ needs too large an automaton to search with; use fewer or smaller repetitions (x{n,m}, .*) and character classes", q.Regexp)
		}
		if isContentField(q.FieldVal) {
			re, err := regexp.Compile("^(?:" + q.Regexp + ")$")
			if err != nil {
				return nil, fmt.Errorf("/%s/ is not a valid regular expression", q.Regexp)
			}
			if !neg {
				m.patterns = append(m.patterns, re)
			}
		}
	}
	return q, nil
}

// phrase returns the query for the content phrase toks (two or more tokens).
func (m *matcher) phrase(toks []string, boost *query.Boost, neg bool) query.Query {
	pq := &phraseQuery{m: m, toks: toks, neg: neg, boost: 1}
	if boost != nil {
		pq.boost = float64(*boost)
	}
	m.phraseQs = append(m.phraseQs, pq)
	if !neg {
		m.phrases = append(m.phrases, toks)
	}
	return pq
}

// phraseQuery matches the documents whose content holds toks one after
// another. The index keeps no positions: relaxed (m.exact false) it is the
// conjunction of the terms, a superset, or, negated, nothing, so that the
// query around it is a superset too; exact, it is that conjunction filtered
// by holds, which checkPhrases fills from the files of the candidates.
type phraseQuery struct {
	m     *matcher
	toks  []string
	neg   bool
	boost float64
	holds map[string]bool // uris checked to hold the phrase
}

func (q *phraseQuery) Searcher(ctx context.Context, i bindex.IndexReader, mp mapping.IndexMapping, opts bsearch.SearcherOptions) (bsearch.Searcher, error) {
	if !q.m.exact && q.neg {
		// Not a MatchNone query: bleve drops those from conjunctions in
		// query-string mode, which would widen a conjunction under -.
		return query.NewDocIDQuery(nil).Searcher(ctx, i, mp, opts)
	}
	terms := make([]query.Query, len(q.toks))
	for k, t := range q.toks {
		tq := query.NewTermQuery(t)
		tq.SetField("content")
		tq.SetBoost(q.boost)
		terms[k] = tq
	}
	if q.m.exact {
		// The documents checked to hold the phrase, as a clause that
		// leads the conjunction (it holds at most a page of candidates)
		// and adds nothing to the score: a filter over the terms'
		// matches would visit every one of them.
		ids := make([]string, 0, len(q.holds))
		for id := range q.holds {
			ids = append(ids, id)
		}
		held := query.NewDocIDQuery(ids)
		held.SetBoost(0)
		terms = append(terms, held)
	}
	return query.NewConjunctionQuery(terms).Searcher(ctx, i, mp, opts)
}

// containsPhrases reports, for each phrase, whether the tokens of content
// hold it: consecutive tokens as the index counts them (tokens over
// maxTokenBytes are skipped), across lines.
func containsPhrases(content []byte, pqs []*phraseQuery) []bool {
	found := make([]bool, len(pqs))
	left := len(pqs)
	type partial struct{ q, n int } // phrase q, its first n tokens seen
	var live, next []partial
	var buf []byte
	eachToken(content, func(i, j int) {
		if left == 0 || j-i > maxTokenBytes {
			return
		}
		buf = appendLower(buf[:0], content[i:j])
		next = next[:0]
		for _, p := range live {
			if found[p.q] || string(buf) != pqs[p.q].toks[p.n] {
				continue
			}
			if p.n+1 == len(pqs[p.q].toks) {
				found[p.q] = true
				left--
				continue
			}
			next = append(next, partial{p.q, p.n + 1})
		}
		for k, pq := range pqs {
			if !found[k] && string(buf) == pq.toks[0] {
				next = append(next, partial{k, 1})
			}
		}
		live, next = next, live
	})
	return found
}

func wildcardRegexp(w string) string {
	var b strings.Builder
	for _, r := range w {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	return b.String()
}

func (m *matcher) empty() bool {
	return len(m.terms) == 0 && len(m.phrases) == 0 && len(m.patterns) == 0
}

type span struct{ start, end int }

// match returns the spans of line that the query matched, in order.
func (m *matcher) match(line []byte) []span {
	type tok struct {
		span
		lo, hi int // the lower-cased term in low
	}
	var toks []tok
	var low []byte
	eachToken(line, func(i, j int) {
		if j-i > maxTokenBytes {
			return
		}
		lo := len(low)
		low = appendLower(low, line[i:j])
		toks = append(toks, tok{span{i, j}, lo, len(low)})
	})
	term := func(t tok) []byte { return low[t.lo:t.hi] }
	var out []span
	for k, t := range toks {
		if m.terms[string(term(t))] {
			out = append(out, t.span)
			continue
		}
		matched := false
		for _, re := range m.patterns {
			if re.Match(term(t)) {
				out = append(out, t.span)
				matched = true
				break
			}
		}
		if matched {
			continue
		}
		for _, ph := range m.phrases {
			if k+len(ph) > len(toks) {
				continue
			}
			ok := true
			for n, w := range ph {
				if string(term(toks[k+n])) != w {
					ok = false
					break
				}
			}
			if ok {
				out = append(out, span{t.start, toks[k+len(ph)-1].end})
				break
			}
		}
	}
	return mergeSpans(out)
}

// literals returns lower-case ASCII strings one of which every line that
// match finds something in contains, or false when there are none to
// look for (a pattern without a literal prefix, a non-ASCII term).
func (m *matcher) literals() ([][]byte, bool) {
	var out [][]byte
	add := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if s[i] >= utf8.RuneSelf {
				return false
			}
		}
		out = append(out, []byte(s))
		return s != ""
	}
	for t := range m.terms {
		if !add(t) {
			return nil, false
		}
	}
	for _, ph := range m.phrases {
		if !add(ph[0]) {
			return nil, false
		}
	}
	for _, re := range m.patterns {
		if lit, _ := re.LiteralPrefix(); !add(lit) {
			return nil, false
		}
	}
	return out, true
}

func appendLower(dst, b []byte) []byte {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return append(dst, lowerBytes(b)...)
		}
	}
	for _, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

func mergeSpans(s []span) []span {
	if len(s) < 2 {
		return s
	}
	out := s[:1]
	for _, x := range s[1:] {
		last := &out[len(out)-1]
		if x.start <= last.end {
			last.end = max(last.end, x.end)
			continue
		}
		out = append(out, x)
	}
	return out
}

// snippet reads the file of a hit through its source and returns up to
// maxSnippetLines lines with matches. A file that cannot be read any more
// gets no lines and is queued for an update, which drops a stale document.
func (x *Index) snippet(slug, p string, m *matcher) []Line {
	if m.empty() {
		return nil
	}
	fsys, rules, ok := x.sourceFS(slug)
	if !ok {
		return nil
	}
	if content, ok := m.read[URI(slug, p)]; ok {
		return m.lines(content)
	}
	content, err := readBounded(fsys, p, rules.maxBytes())
	if err != nil {
		if !x.overlay {
			x.Update(URI(slug, p))
		}
		return nil
	}
	return m.lines(content)
}

// lines returns up to maxSnippetLines lines of content with matches. When
// the query has literals, only the lines that contain one (in a copy with
// ASCII letters lower-cased, found with bytes.Index) are tokenized.
func (m *matcher) lines(content []byte) []Line {
	lits, ok := m.literals()
	var lc []byte // content with ASCII letters lower-cased, when searching for literals
	if ok {
		lc = make([]byte, len(content))
		ascii := true
		for i, c := range content {
			ascii = ascii && c < utf8.RuneSelf
			lc[i] = lowerASCII[c]
		}
		// The literals are ASCII, and a token that lower-cases to ASCII is
		// ASCII itself, but for two runes: U+0130 (İ, lower-cased to i)
		// and U+212A (the Kelvin sign, to k). Where they occur, every line
		// is tokenized.
		if !ascii && (bytes.Contains(content, []byte("\u0130")) || bytes.Contains(content, []byte("\u212a"))) {
			ok = false
		}
	}
	next := make([]int, len(lits)) // next occurrence of each literal at or after off; -1: none
	for i := range next {
		next[i] = -2 // not searched yet
	}
	var lines []Line
	n, counted := 1, 0 // n is the number of the line at byte counted
	for off := 0; off < len(content) && len(lines) < maxSnippetLines; {
		start := off
		if ok {
			start = -1
			for i, lit := range lits {
				if next[i] == -2 || (next[i] >= 0 && next[i] < off) {
					next[i] = -1
					if j := bytes.Index(lc[off:], lit); j >= 0 {
						next[i] = off + j
					}
				}
				if next[i] >= 0 && (start < 0 || next[i] < start) {
					start = next[i]
				}
			}
			if start < 0 {
				break
			}
			start = bytes.LastIndexByte(content[off:start], '\n') + off + 1
		}
		end := len(content)
		if i := bytes.IndexByte(content[start:], '\n'); i >= 0 {
			end = start + i
		}
		n += bytes.Count(content[counted:start], []byte("\n"))
		counted = start
		line := bytes.TrimSuffix(content[start:end], []byte("\r"))
		if spans := m.match(line); len(spans) > 0 {
			lines = append(lines, makeLine(n, line, spans))
		}
		off = end + 1
	}
	return lines
}

func readBounded(fsys fs.FS, p string, max int64) ([]byte, error) {
	info, err := lstat(fsys, p)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fs.ErrNotExist
	}
	if max < 0 {
		max = info.Size()
	}
	f, err := fsys.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, 0, min(info.Size(), max)+1)
	return readAllInto(limitReader(f, max), buf)
}

// makeLine cuts a long line around its first match and adds the markers.
func makeLine(n int, line []byte, spans []span) Line {
	start, end := 0, len(line)
	if len(line) > maxLineBytes {
		start = max(0, spans[0].start-maxLineBytes/3)
		for start > 0 && !utf8.RuneStart(line[start]) {
			start--
		}
		end = min(len(line), start+maxLineBytes)
		for end < len(line) && !utf8.RuneStart(line[end]) {
			end--
		}
	}
	raw := line[start:end]
	var text strings.Builder
	if start > 0 {
		text.WriteString("…")
	}
	var matches [][2]int
	pos := 0
	for _, sp := range spans {
		s, e := sp.start-start, sp.end-start
		if e <= 0 || s >= len(raw) {
			continue
		}
		s, e = max(s, 0), min(e, len(raw))
		text.Write(raw[pos:s])
		text.WriteString(HighlightStart)
		text.Write(raw[s:e])
		text.WriteString(HighlightEnd)
		pos = e
		matches = append(matches, [2]int{s, e})
	}
	text.Write(raw[pos:])
	if end < len(line) {
		text.WriteString("…")
	}
	return Line{N: n, Text: text.String(), Raw: string(raw), Matches: matches}
}

// FormatText renders r for people and agents: one line per matching line,
// "uri:line: text" with matches in «», a bare uri for a hit with no line to
// show (a match in its path or name), and a last line when more hits exist
// than are shown.
//
// A file name (or line) can hold any byte but "/" and NUL: a uri with a
// control character is written Go-quoted ("data://a\nb"), and control
// characters in a line are written as \xNN escapes, so nobody who can
// name a file can forge result lines or send escape sequences to the
// terminal of whoever reads the results.
func FormatText(r Result) []byte {
	var b bytes.Buffer
	for _, h := range r.Hits {
		u := QuoteURI(h.URI)
		if len(h.Lines) == 0 {
			fmt.Fprintf(&b, "%s\n", u)
			continue
		}
		for _, l := range h.Lines {
			fmt.Fprintf(&b, "%s:%d: %s\n", u, l.N, escapeControls(l.Text))
		}
	}
	switch {
	case len(r.Hits) == 0 && r.Stopped != "":
		b.WriteString("# no matches so far\n")
	case len(r.Hits) == 0 && len(r.NotSearched) > 0:
		b.WriteString("# no matches in the files searched\n")
	case len(r.Hits) == 0:
		b.WriteString("# no matches\n")
	case r.TotalIsLowerBound:
		fmt.Fprintf(&b, "# %d of at least %d matching files shown\n", len(r.Hits), r.Total)
	case r.Total > len(r.Hits):
		fmt.Fprintf(&b, "# %d of %d matching files shown\n", len(r.Hits), r.Total)
	}
	if r.Stopped != "" {
		fmt.Fprintf(&b, "# %s\n", r.Stopped)
	}
	if n := len(r.NotSearched); n > 0 {
		fmt.Fprintf(&b, "# %d held file(s) not searched (a search reads at most %d MiB and %d held files, the newest first):", n, MaxOverlayBytes>>20, MaxOverlayFiles)
		for i, u := range r.NotSearched {
			if i == maxNotSearchedShown {
				fmt.Fprintf(&b, " and %d more", n-i)
				break
			}
			fmt.Fprintf(&b, " %s", QuoteURI(u))
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

// maxNotSearchedShown bounds the held files FormatText names as not
// searched.
const maxNotSearchedShown = 10

// QuoteURI returns u as it is, or Go-quoted when it holds a control
// character (a newline or tab in a file name would otherwise start a
// forged line or column of output, an escape sequence drive a terminal).
func QuoteURI(u string) string {
	if !hasControl(u) {
		return u
	}
	return rawname.Quote(u)
}

// hasControl reports whether s has a character written escaped
// (rawname.Hidden: controls, bidirectional controls, characters that
// show as nothing or as a space), or is not valid UTF-8: a name holding
// U+202E or U+200B showed in search, history and .neuralis/review/list
// as another name (found by red-team passes).
func hasControl(s string) bool { return rawname.HasHidden(s) }

// escapeControls writes control characters other than tab as \xNN (and
// C1 controls as \u00NN), leaving everything else as it is.
func escapeControls(s string) string {
	if !hasControl(s) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", r)
		case r >= 0x80 && rawname.Hidden(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		case r == utf8.RuneError:
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				fmt.Fprintf(&b, "\\x%02x", s[i])
				continue
			}
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
