package index

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/search/query"
	"github.com/bmatcuk/doublestar/v4"
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
	// TotalIsLowerBound reports that counting stopped early: with a filter
	// (canRead or PathGlob), Search examines the best countCap matches (more
	// only while it has fewer than Limit hits) and Total counts the readable
	// ones among them.
	TotalIsLowerBound bool `json:"total_is_lower_bound,omitempty"`
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
	// countCap is how many matches a filtered Search examines per request;
	// it bounds the work of counting readable hits.
	countCap = 1000
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
		return Result{}, errors.New("index closed")
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
			pq := query.NewPrefixQuery(lit)
			pq.SetField("path")
			conj = append(conj, pq)
		}
	}
	var bq query.Query = user
	if len(conj) > 1 {
		bq = query.NewConjunctionQuery(conj)
	}

	var res Result
	keep := func(uri string) (slug, p string, ok bool) {
		slug, p, ok = SplitURI(uri)
		if !ok {
			return "", "", false
		}
		if _, _, known := x.sourceFS(slug); !known {
			return "", "", false // a source no longer configured
		}
		if glob != "" {
			if m, _ := doublestar.Match(glob, p); !m {
				return "", "", false
			}
		}
		if canRead != nil && !canRead(uri) {
			return "", "", false
		}
		return slug, p, true
	}
	filtered := canRead != nil || glob != "" || x.hasStale()
	size := limit
	if filtered {
		// One request usually covers both the hits and the count.
		size = max(limit, countCap)
	}
	for from := 0; ; {
		req := bleve.NewSearchRequestOptions(bq, size, from, false)
		sr, err := x.bleve.SearchInContext(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			return Result{}, badQueryf("query %q cannot be run: %s", q.Q, firstLine(err.Error()))
		}
		for _, h := range sr.Hits {
			slug, p, ok := keep(h.ID)
			if !ok {
				continue
			}
			res.Total++
			if len(res.Hits) < limit {
				res.Hits = append(res.Hits, Hit{URI: h.ID, Source: slug, Path: p, Score: h.Score})
			}
		}
		from += len(sr.Hits)
		if !filtered {
			res.Total = int(sr.Total)
			break
		}
		if len(sr.Hits) == 0 || uint64(from) >= sr.Total {
			break
		}
		if len(res.Hits) >= limit {
			// Enough hits; the count covers what was examined.
			res.TotalIsLowerBound = true
			break
		}
		// Keep paging until Limit readable hits or no more matches, so a
		// caller who may read few documents still finds them.
	}
	for i := range res.Hits {
		res.Hits[i].Lines = x.snippet(res.Hits[i].Source, res.Hits[i].Path, m)
	}
	return res, nil
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
	m := &matcher{terms: map[string]bool{}}
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
	terms    map[string]bool
	phrases  [][]string
	patterns []*regexp.Regexp
}

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
			pq := query.NewMatchPhraseQuery(q.Match)
			pq.SetField(q.FieldVal)
			if b := q.BoostVal; b != nil {
				pq.SetBoost(float64(*b))
			}
			if !neg {
				m.phrases = append(m.phrases, toks)
			}
			return pq, nil
		}
		if !neg {
			for _, t := range toks {
				m.terms[t] = true
			}
		}
	case *query.MatchPhraseQuery:
		if isContentField(q.FieldVal) && !neg {
			if toks := tokens(q.MatchPhrase); len(toks) == 1 {
				m.terms[toks[0]] = true
			} else if len(toks) > 1 {
				m.phrases = append(m.phrases, toks)
			}
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
		if isContentField(q.FieldVal) {
			q.Wildcard = strings.ToLower(q.Wildcard)
			if !neg {
				m.patterns = append(m.patterns, regexp.MustCompile("^"+wildcardRegexp(q.Wildcard)+"$"))
			}
		}
	case *query.RegexpQuery:
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
		term string
	}
	var toks []tok
	var buf []byte
	eachToken(line, func(i, j int) {
		if j-i > maxTokenBytes {
			return
		}
		buf = appendLower(buf[:0], line[i:j])
		toks = append(toks, tok{span{i, j}, string(buf)})
	})
	var out []span
	for k, t := range toks {
		if m.terms[t.term] {
			out = append(out, t.span)
			continue
		}
		matched := false
		for _, re := range m.patterns {
			if re.MatchString(t.term) {
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
				if toks[k+n].term != w {
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
	content, err := readBounded(fsys, p, rules.maxBytes())
	if err != nil {
		x.Update(URI(slug, p))
		return nil
	}
	var lines []Line
	n := 0
	for len(content) > 0 && len(lines) < maxSnippetLines {
		n++
		line := content
		if i := bytes.IndexByte(content, '\n'); i >= 0 {
			line, content = content[:i], content[i+1:]
		} else {
			content = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		spans := m.match(line)
		if len(spans) == 0 {
			continue
		}
		lines = append(lines, makeLine(n, line, spans))
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
func FormatText(r Result) []byte {
	var b bytes.Buffer
	for _, h := range r.Hits {
		if len(h.Lines) == 0 {
			fmt.Fprintf(&b, "%s\n", h.URI)
			continue
		}
		for _, l := range h.Lines {
			fmt.Fprintf(&b, "%s:%d: %s\n", h.URI, l.N, l.Text)
		}
	}
	switch {
	case len(r.Hits) == 0:
		b.WriteString("# no matches\n")
	case r.TotalIsLowerBound:
		fmt.Fprintf(&b, "# %d of at least %d matching files shown\n", len(r.Hits), r.Total)
	case r.Total > len(r.Hits):
		fmt.Fprintf(&b, "# %d of %d matching files shown\n", len(r.Hits), r.Total)
	}
	return b.Bytes()
}
