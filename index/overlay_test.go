package index

import (
	"context"
	"strings"
	"testing"
	"time"
)

// SearchOverlay searches the given documents as Search searches files:
// the same admission, queries, filters and snippets, and nothing of them
// reaches the index.
func TestSearchOverlay(t *testing.T) {
	x, _ := newTestIndex(t, map[string]string{"a.txt": "alpha overlayword\n"})
	now := time.Now()
	doc := func(s string) OverlayDoc { return OverlayDoc{Content: []byte(s), ModTime: now} }
	docs := map[string]OverlayDoc{
		"data://new.txt":       doc("one\nthe quick overlayword fox\n"),
		"data://bin.txt":       doc("overlayword\x00binary"),
		"data://big.txt":       doc(strings.Repeat("overlayword ", int(DefaultMaxFileBytes)/12+10)),
		"data://.git/config":   doc("overlayword\n"),
		"data://secret.txt":    doc("overlayword\n"),
		"nosuchsource://x.txt": doc("overlayword\n"),
		"data://docs/guide.md": doc("a guide with overlayword\n"),
	}
	run := func(q Query) Result {
		t.Helper()
		r, err := x.SearchOverlay(context.Background(), q, docs, func(u string) bool { return u != "data://secret.txt" })
		if err != nil {
			t.Fatalf("SearchOverlay(%+v): %v", q, err)
		}
		return r
	}
	r := run(Query{Q: "overlayword"})
	got := uris(r)
	if len(got) != 2 || !got["data://new.txt"] || !got["data://docs/guide.md"] || r.Total != 2 {
		t.Fatalf("hits = %v (total %d); want new.txt and docs/guide.md only", got, r.Total)
	}
	for _, h := range r.Hits {
		if h.URI == "data://new.txt" && (len(h.Lines) != 1 || h.Lines[0].N != 2 || h.Lines[0].Text != "the quick «overlayword» fox") {
			t.Errorf("snippet of new.txt = %+v", h.Lines)
		}
	}
	if got := uris(run(Query{Q: `"quick overlayword"`})); len(got) != 1 || !got["data://new.txt"] {
		t.Errorf("phrase: hits = %v", got)
	}
	if got := uris(run(Query{Q: "overlayword", Ext: "md"})); len(got) != 1 || !got["data://docs/guide.md"] {
		t.Errorf("ext filter: hits = %v", got)
	}
	if got := uris(run(Query{Q: "overlayword", PathGlob: "docs/**"})); len(got) != 1 || !got["data://docs/guide.md"] {
		t.Errorf("path filter: hits = %v", got)
	}
	if got := uris(run(Query{Q: "+overlayword +size:<27"})); len(got) != 1 || !got["data://docs/guide.md"] {
		t.Errorf("size range: hits = %v", got)
	}
	// The index itself is untouched.
	if got := uris(search(t, x, Query{Q: "overlayword"}, nil)); len(got) != 1 || !got["data://a.txt"] {
		t.Errorf("index hits after the overlay = %v; want a.txt only", got)
	}
}
