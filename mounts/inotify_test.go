package mounts

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// changeLog collects what a watcher reports.
type changeLog struct {
	mu   sync.Mutex
	seen map[Change]int
}

func (l *changeLog) add(cs []Change) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cs {
		l.seen[c]++
	}
}

// wait waits until every change in want has been reported.
func (l *changeLog) wait(t *testing.T, what string, want ...Change) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		var missing []Change
		for _, c := range want {
			if l.seen[c] == 0 {
				missing = append(missing, c)
			}
		}
		l.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			if len(missing) > 5 {
				missing = missing[:5]
			}
			t.Fatalf("%s: never reported (of %d): %+v", what, len(want), missing)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (l *changeLog) has(c Change) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[c] > 0
}

func watchDir(t *testing.T) (string, *Watcher, *changeLog) {
	t.Helper()
	dir := t.TempDir()
	root, err := OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	l := &changeLog{seen: map[Change]int{}}
	w, err := NewWatcher(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Millisecond, l.add)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	w.Watch("s", root)
	return dir, w, l
}

// A burst is read in batches, not an event at a time (what the watcher's
// own reader is for), and nothing of it is lost.
func TestWatcherReadsABurstInBatches(t *testing.T) {
	dir, w, l := watchDir(t)
	const n = 3000
	var want []Change
	before := w.w.reads.Load()
	start := time.Now()
	for i := range n {
		name := fmt.Sprintf("f%04d", i)
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		want = append(want, Change{Slug: "s", Rel: name})
	}
	l.wait(t, "files made in a burst", want...)
	elapsed := time.Since(start)
	reads := w.w.reads.Load() - before
	t.Logf("%d files (two events each) in %d reads over %v", n, reads, elapsed)
	// At most one read per eventPace, however fast or slow the files
	// came (fsnotify's reader read about once per event: some 6,000).
	if limit := int64(elapsed/eventPace) + 5; reads > limit {
		t.Errorf("%d files made in %v took %d reads of the event queue; want at most one per %v (%d)", n, elapsed, reads, eventPace, limit)
	}
}

// Moves and removals of watched folders, in and out of the tree, as the
// watcher was written to expect them (fsnotify's semantics).
func TestWatcherFollowsFoldersMovedAndRemoved(t *testing.T) {
	dir, w, l := watchDir(t)
	// (A folder made inside a new folder before its watch is placed is
	// watched but not reported: nothing could have cached it; its files
	// are.)
	if err := os.Mkdir(filepath.Join(dir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	l.wait(t, "mkdir a", Change{Slug: "s", Rel: "a"})
	if err := os.Mkdir(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	l.wait(t, "mkdir a/b", Change{Slug: "s", Rel: "a/b"})
	// A folder made is watched: a file made in it is reported.
	if err := os.WriteFile(filepath.Join(dir, "a", "b", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	l.wait(t, "a file in a new folder", Change{Slug: "s", Rel: "a/b/f"})

	// Moved inside the tree: gone at the old name, there at the new one,
	// and still watched there.
	if err := os.Rename(filepath.Join(dir, "a", "b"), filepath.Join(dir, "c")); err != nil {
		t.Fatal(err)
	}
	l.wait(t, "mv a/b c", Change{Slug: "s", Rel: "a/b", Gone: true}, Change{Slug: "s", Rel: "c"})
	if err := os.WriteFile(filepath.Join(dir, "c", "g"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	l.wait(t, "a file in the moved folder", Change{Slug: "s", Rel: "c/g"})
	if l.has(Change{Slug: "s", Rel: "a/b/g"}) {
		t.Error("a file made in a moved folder was reported under the folder's old name")
	}

	// Moved out of the tree: gone, and no longer reported.
	out := t.TempDir()
	if err := os.Rename(filepath.Join(dir, "c"), filepath.Join(out, "c")); err != nil {
		t.Fatal(err)
	}
	l.wait(t, "mv c out of the tree", Change{Slug: "s", Rel: "c", Gone: true})
	if err := os.WriteFile(filepath.Join(out, "c", "h"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Removed: gone.
	if err := os.RemoveAll(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	l.wait(t, "rm -r a", Change{Slug: "s", Rel: "a", Gone: true})
	if err := os.WriteFile(filepath.Join(dir, "last"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	l.wait(t, "a file made last", Change{Slug: "s", Rel: "last"})
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.seen {
		if c.Rel == "c/h" || c.Rel == "h" {
			t.Errorf("a change in a folder moved out of the tree was reported: %+v", c)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for p := range w.dirs {
		if p != dir {
			t.Errorf("still watched after every folder went: %s", p)
		}
	}
	w.w.mu.Lock()
	defer w.w.mu.Unlock()
	if len(w.w.byPath) != 1 || len(w.w.byWd) != 1 {
		t.Errorf("the reader keeps %d paths and %d descriptors; want only the top folder's", len(w.w.byPath), len(w.w.byWd))
	}
}

// A folder gone between the event that named it and its watch (made and
// removed at once: stress-ng's inotify stressor) is no failed watch: the
// source stays whole. (The watch limit still is one:
// TestWatcherPlacesMissingWatchesOnceTheLimitAllows.)
func TestWatcherTakesAFolderGoneBeforeItsWatchForNoFault(t *testing.T) {
	dir, w, _ := watchDir(t)
	root := w.roots["s"]
	if _, complete := w.addTree("s", root, "gone", true, false); !complete {
		t.Error("a folder that is not there made the tree incomplete")
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, complete := w.addTree("s", root, "file/x", true, false); !complete {
		t.Error("a path through a file (ENOTDIR) made the tree incomplete")
	}
	if r := w.Failed("s"); r != "" {
		t.Errorf("Failed = %q; want none", r)
	}
	if !w.Watching("s", "") {
		t.Error("the source is no longer reported as watched")
	}
}

// Removing a tree of folders forgets exactly their watches, through the
// index of folders by parent (kids), and leaves that index naming only
// watched folders: a sibling tree whose name shares the removed one's
// prefix (a2 beside a) keeps its watches.
func TestWatcherForgetsARemovedTreeOnly(t *testing.T) {
	dir, w, l := watchDir(t)
	for _, top := range []string{"a", "a2"} {
		for i := range 20 {
			if err := os.MkdirAll(filepath.Join(dir, top, fmt.Sprint("b", i%4), fmt.Sprint("c", i)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each leaf reports a file made in it once watched.
	for _, top := range []string{"a", "a2"} {
		for i := range 20 {
			rel := filepath.Join(top, fmt.Sprint("b", i%4), fmt.Sprint("c", i), "f")
			if err := os.WriteFile(filepath.Join(dir, rel), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			l.wait(t, "a file in "+rel, Change{Slug: "s", Rel: rel})
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	l.wait(t, "rm -r a", Change{Slug: "s", Rel: "a", Gone: true})
	// A file made last in a2 is reported: its watch is whole.
	if err := os.WriteFile(filepath.Join(dir, "a2", "b3", "c19", "g"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l.wait(t, "a file in a2", Change{Slug: "s", Rel: "a2/b3/c19/g"})
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.dirs) != 1+1+4+20 {
		t.Errorf("%d folders watched after rm -r a; want 26 (the top, a2, its 4 b's and 20 c's)", len(w.dirs))
	}
	for p := range w.dirs {
		if a := filepath.Join(dir, "a"); p == a || strings.HasPrefix(p, a+"/") {
			t.Errorf("still watched after rm -r a: %s", p)
		}
	}
	// The index of folders by parent names exactly the watched folders.
	if w.below.Len() != len(w.dirs) {
		t.Errorf("the index of folders by parent holds %d; want every watched folder (%d)", w.below.Len(), len(w.dirs))
	}
	for p := range w.dirs {
		if !w.below.Has(p) {
			t.Errorf("watched but not in the index of folders by parent: %s", p)
		}
	}
	if got := w.below.Below(filepath.Join(dir, "a2")); len(got) != 4+20 {
		t.Errorf("the index finds %d folders below a2; want 24", len(got))
	}
}
