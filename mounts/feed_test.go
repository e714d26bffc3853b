package mounts

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The feed loop itself, without a mount and under -race: a good fetch,
// 304s, a failure after it (DEGRADED, content kept), the state kept for
// the next run. tests/feeds_test.go checks the same through the mount.
func TestHTTPFeedLoop(t *testing.T) {
	var down atomic.Bool
	var notModified atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header().Set("ETag", `"e1"`)
		if r.Header.Get("If-None-Match") == `"e1"` {
			notModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		io.WriteString(w, "body\n")
	}))
	defer srv.Close()
	cfg := SourceConfig{Slug: "f", Kind: KindHTTP, Cache: filepath.Join(t.TempDir(), "f"),
		Refresh: &Duration{100 * time.Millisecond}, Files: []FeedFileConfig{{Path: "d/a.txt", URL: srv.URL}}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	runFor := func(f *feed, until func() bool) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { f.run(ctx, log, func() {}); close(done) }()
		deadline := time.Now().Add(10 * time.Second)
		for !until() {
			if time.Now().After(deadline) {
				cancel()
				<-done
				t.Fatalf("not within 10s; status %v", f.status())
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		<-done
	}
	f := newFeed(cfg)
	if st := f.status(); st.State != Unavailable || st.Code != CodeNotFetchedYet {
		t.Errorf("before any fetch: %v", st)
	}
	runFor(f, func() bool { return notModified.Load() >= 2 })
	if st := f.status(); st.State != Available {
		t.Errorf("after good fetches: %v", st)
	}
	if b, err := os.ReadFile(filepath.Join(cfg.Cache, "tree", "d", "a.txt")); err != nil || string(b) != "body\n" {
		t.Errorf("cached %q, %v", b, err)
	}
	if id := f.identity(nil); !strings.HasPrefix(id, "sha256:") || !strings.HasSuffix(id, ` ETag d/a.txt="e1"`) {
		t.Errorf("identity %q", id)
	}
	if id := f.identity(func(string) bool { return false }); id != "" {
		t.Errorf("identity over no readable file: %q", id)
	}

	down.Store(true)
	g := newFeed(cfg) // a restart: the state kept says what was fetched
	if st := g.status(); st.State != Available {
		t.Errorf("restarted with the last good content: %v", st)
	}
	runFor(g, func() bool { return g.status().State == Degraded })
	if st := g.status(); !strings.Contains(st.Reason, "d/a.txt: "+srv.URL+" answered 502 Bad Gateway") {
		t.Errorf("degraded reason %q", st.Reason)
	}
	if b, err := os.ReadFile(filepath.Join(cfg.Cache, "tree", "d", "a.txt")); err != nil || string(b) != "body\n" {
		t.Errorf("a failing feed lost its content: %q, %v", b, err)
	}
}

func TestCleanETag(t *testing.T) {
	for in, want := range map[string]string{`"abc"`: `"abc"`, `W/"x-1"`: `W/"x-1"`, `abc`: "", "\"a\tb\"": "", `"a"b"`: "", `""`: `""`} {
		if got := cleanETag(in); got != want {
			t.Errorf("cleanETag(%q) = %q; want %q", in, got, want)
		}
	}
}
