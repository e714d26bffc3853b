package index

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// SearchOverlay searches the given documents as Search searches files:
// the same admission, queries, filters and snippets, and nothing of them
// reaches the index.
// searchOverlay runs q over docs in an overlay made for the call and
// dropped after it.
func searchOverlay(ctx context.Context, x *Index, q Query, docs map[string]OverlayDoc, canRead func(uri string) bool) (Result, error) {
	o, err := x.NewOverlay(docs, nil)
	if err != nil {
		return Result{}, err
	}
	defer o.Release()
	return o.Search(ctx, q, canRead)
}

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
		r, err := searchOverlay(context.Background(), x, q, docs, func(u string) bool { return u != "data://secret.txt" })
		if err != nil {
			t.Fatalf("searchOverlay(%+v): %v", q, err)
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

// An OverlayCache builds a key's overlay once for the same state, again
// for another, and once for many callers asking at the same time; a
// result names the files the overlay was not given.
func TestOverlayCache(t *testing.T) {
	x, _ := newTestIndex(t, map[string]string{"a.txt": "alpha\n"})
	c := NewOverlayCache(time.Minute)
	defer c.Close()
	var loads atomic.Int32
	load := func(word string) func() (map[string]OverlayDoc, []string, error) {
		return func() (map[string]OverlayDoc, []string, error) {
			loads.Add(1)
			time.Sleep(20 * time.Millisecond) // let the others pile up
			return map[string]OverlayDoc{"data://h.txt": {Content: []byte(word + "\n"), ModTime: time.Now()}}, []string{"data://big.txt"}, nil
		}
	}
	get := func(state, word string) Result {
		t.Helper()
		o, err := c.Get(context.Background(), x, "agent", state, load(word))
		if err != nil {
			t.Fatal(err)
		}
		defer o.Release()
		r, err := o.Search(context.Background(), Query{Q: word}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := c.Get(context.Background(), x, "agent", "s1", load("firstword"))
			if err != nil {
				errs <- err.Error()
				return
			}
			o.Release()
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := loads.Load(); n != 1 {
		t.Errorf("8 searches at once over the same held files built %d overlays; want 1", n)
	}
	if r := get("s1", "firstword"); len(r.Hits) != 1 || len(r.NotSearched) != 1 || r.NotSearched[0] != "data://big.txt" {
		t.Errorf("cached overlay: %+v", r)
	}
	if n := loads.Load(); n != 1 {
		t.Errorf("a search with the same state built again (%d builds)", n)
	}
	if r := get("s2", "secondword"); len(r.Hits) != 1 {
		t.Errorf("new state: %+v", r)
	}
	if n := loads.Load(); n != 2 {
		t.Errorf("a search with another state built %d overlays in all; want 2", n)
	}
	// A caller that gives up while another builds gets ctx's error.
	// The build holds the key's turn until the check is made: a turn
	// free by then would race ctx in Get's select.
	ctx, cancel := context.WithCancel(context.Background())
	started, release, built := make(chan bool), make(chan bool), make(chan bool)
	go func() {
		defer close(built)
		o, err := c.Get(context.Background(), x, "agent", "s3", func() (map[string]OverlayDoc, []string, error) {
			close(started)
			<-release
			return nil, nil, nil
		})
		if err == nil {
			o.Release()
		}
	}()
	<-started
	cancel()
	if _, err := c.Get(ctx, x, "agent", "s3", load("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Get while another builds, cancelled: %v", err)
	}
	close(release)
	<-built
}

// FormatText names the held files a search did not look in.
func TestFormatTextNotSearched(t *testing.T) {
	var ns []string
	for i := range 12 {
		ns = append(ns, fmt.Sprintf("data://f%02d.txt", i))
	}
	got := string(FormatText(Result{NotSearched: ns}))
	for _, want := range []string{"# no matches in the files searched\n", "# 12 held file(s) not searched", "data://f09.txt and 2 more\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("FormatText = %q; want %q in it", got, want)
		}
	}
}
