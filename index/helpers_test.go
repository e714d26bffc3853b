package index

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeTree creates files (path → content) under dir.
func writeTree(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for p, c := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// age sets the mtime of every file under dir an hour back, as for a tree
// not written just before it was indexed: a file read within racyWindow of
// its mtime is read again at the next reconcile.
func age(tb testing.TB, dir string) {
	tb.Helper()
	old := time.Now().Add(-time.Hour)
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chtimes(p, old, old)
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// openTest opens an index in a fresh folder, closed when the test ends.
func openTest(tb testing.TB, dir string) *Index {
	tb.Helper()
	x, err := Open(Options{Dir: dir})
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { x.Close() })
	return x
}

// eventually polls cond until it holds or the deadline passes.
func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func search(tb testing.TB, x *Index, q Query, canRead func(string) bool) Result {
	tb.Helper()
	r, err := x.Search(context.Background(), q, canRead)
	if err != nil {
		tb.Fatalf("Search(%+v): %v", q, err)
	}
	return r
}

func uris(r Result) map[string]bool {
	m := map[string]bool{}
	for _, h := range r.Hits {
		m[h.URI] = true
	}
	return m
}
