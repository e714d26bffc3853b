package mounts

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkWatchTree is the watcher's share of a daemon's start-up: every
// folder of a tree of 2,000 folders (5 files each) listed and watched.
func BenchmarkWatchTree(b *testing.B) {
	dir := b.TempDir()
	for i := range 2000 {
		d := filepath.Join(dir, fmt.Sprintf("a%02d/b%02d/c%d", i%20, i/20%10, i/200))
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		for j := range 5 {
			os.WriteFile(filepath.Join(d, fmt.Sprint("f", j)), nil, 0o644)
		}
	}
	r, err := OpenRoot(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	n := 0
	for b.Loop() {
		w, err := NewWatcher(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second, func([]Change) {})
		if err != nil {
			b.Fatal(err)
		}
		w.Watch("x", r)
		n = len(w.dirs)
		w.Close()
	}
	b.ReportMetric(float64(n), "folders")
}

// BenchmarkWatchRemoveTree is the watcher's handling of an rm -rf of
// 1,000 folders, bottom-up as rm removes them, in a source of 20,000
// watched folders (the events only: the folders are recorded, not made).
func BenchmarkWatchRemoveTree(b *testing.B) {
	w := &Watcher{dirs: map[string]watched{}}
	put := func(rel string) { w.putDir("/src/"+rel, watched{slug: "s", rel: rel}) }
	for i := range 20000 {
		put(fmt.Sprintf("k%02d/d%05d", i%20, i))
	}
	for b.Loop() {
		for i := range 1000 {
			put(fmt.Sprintf("gone/d%04d", i))
		}
		for i := range 1000 {
			w.dropTree("s", fmt.Sprintf("/src/gone/d%04d", i))
		}
	}
}
