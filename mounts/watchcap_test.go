package mounts

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// lowerWatchCap lets the process place n more watches than it holds now,
// until the test ends.
func lowerWatchCap(t *testing.T, n int64) {
	t.Helper()
	old := watchCap.Load()
	watchCap.Store(watchesHeld.Load() + n)
	t.Cleanup(func() { watchCap.Store(old) })
}

// kernelWatches counts the watches the kernel holds for w's instance.
func kernelWatches(t *testing.T, w *Watcher) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(w.w.fd))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "inotify wd:")
}

// syncBuffer is a log's output, read while the watcher writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) count(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), sub)
}

func mkdirs(t *testing.T, dir string, n int) {
	t.Helper()
	for i := range n {
		if err := os.MkdirAll(filepath.Join(dir, fmt.Sprint(i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func openRoot(t *testing.T, dir string) *Root {
	t.Helper()
	root, err := OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The red team's mkdir of 200,000 folders through a mount left root 1,500
// inotify watches of 192,540, and every other process of root got ENOSPC.
// Past the cap the watcher places no watch: the source is reported
// DEGRADED once (one log line however many folders come), is not
// reported watched (so the short cache timeouts apply), and once watches
// are free again the folders past the cap are watched, the source is
// whole and rescanned, and changes in them are reported.
func TestWatcherKeepsToTheWatchCap(t *testing.T) {
	dir := t.TempDir()
	mkdirs(t, filepath.Join(dir, "a"), 30) // 32 folders with the root
	root := openRoot(t, dir)
	lowerWatchCap(t, 10)
	logs := &syncBuffer{}
	l := &changeLog{seen: map[Change]int{}}
	w, err := newWatcher(slog.New(slog.NewTextHandler(logs, nil)), time.Millisecond, 20*time.Millisecond, l.add)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var notesMu sync.Mutex
	var notes []string
	w.Notify(func(slug, reason string) {
		notesMu.Lock()
		notes = append(notes, slug+": "+reason)
		notesMu.Unlock()
	})
	w.Watch("s", root)
	if n := kernelWatches(t, w); n != 10 {
		t.Errorf("a tree of 32 folders under a cap of 10 holds %d watches in the kernel", n)
	}
	if reason := w.Failed("s"); !strings.HasPrefix(reason, "inotify watch cap reached") {
		t.Fatalf("Failed = %q", reason)
	}
	if w.Watching("s", "a/1") || w.Watching("s", "") {
		t.Errorf("a source past the cap is reported watched")
	}
	// More folders come: the root's watch reports them, none is watched,
	// and the log still has the one line.
	mkdirs(t, filepath.Join(dir, "b"), 4)
	l.wait(t, "mkdir b", Change{Slug: "s", Rel: "b"})
	time.Sleep(100 * time.Millisecond) // retrier passes, at the cap
	if n := kernelWatches(t, w); n != 10 {
		t.Errorf("after more folders came, %d watches in the kernel; want the cap, 10", n)
	}
	if n := logs.count("watch cap reached"); n != 1 {
		t.Errorf("%d log lines say the cap was reached; want 1:\n%s", n, logs.b.String())
	}
	notesMu.Lock()
	if len(notes) != 1 || !strings.HasPrefix(notes[0], "s: inotify watch cap reached") {
		t.Errorf("notified %q; want the cap once", notes)
	}
	notesMu.Unlock()

	// a goes, and its watches with it: the 6 folders left fit, and the
	// watcher places their watches by itself.
	if err := os.RemoveAll(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the source whole again", func() bool { return w.Failed("s") == "" })
	if !w.Watching("s", "b/1") {
		t.Errorf("whole again but not reported watched")
	}
	if n := kernelWatches(t, w); n != 6 {
		t.Errorf("%d watches in the kernel for 6 folders", n)
	}
	l.wait(t, "the rescan", Change{Slug: "s", Rescan: true})
	if err := os.WriteFile(filepath.Join(dir, "b", "3", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l.wait(t, "a file in a folder made past the cap", Change{Slug: "s", Rel: "b/3/f"})
	notesMu.Lock()
	if len(notes) != 2 || notes[1] != "s: " {
		t.Errorf("notified %q; want the cap, then whole again", notes)
	}
	notesMu.Unlock()
}

// The cap counts the watches of every watcher in the process, and a
// watcher's close gives its watches back.
func TestWatchCapIsCountedOverEveryWatcher(t *testing.T) {
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	dirA, dirB := t.TempDir(), t.TempDir()
	mkdirs(t, dirA, 14)
	mkdirs(t, dirB, 14) // 15 folders each
	lowerWatchCap(t, 20)
	nop := func([]Change) {}
	wa, err := newWatcher(discard, time.Millisecond, 20*time.Millisecond, nop)
	if err != nil {
		t.Fatal(err)
	}
	defer wa.Close()
	wb, err := newWatcher(discard, time.Millisecond, 20*time.Millisecond, nop)
	if err != nil {
		t.Fatal(err)
	}
	defer wb.Close()
	wa.Watch("a", openRoot(t, dirA))
	wb.Watch("b", openRoot(t, dirB))
	if wa.Failed("a") != "" || kernelWatches(t, wa) != 15 {
		t.Fatalf("the first watcher: Failed = %q, %d watches", wa.Failed("a"), kernelWatches(t, wa))
	}
	if n := kernelWatches(t, wb); n != 5 || !strings.HasPrefix(wb.Failed("b"), "inotify watch cap reached") {
		t.Fatalf("the second watcher, past a cap of 20: %d watches, Failed = %q", n, wb.Failed("b"))
	}
	wa.Close()
	waitFor(t, "the second watcher whole once the first closed", func() bool { return wb.Failed("b") == "" })
	if n := kernelWatches(t, wb); n != 15 {
		t.Errorf("%d watches for 15 folders", n)
	}
}

// Every watch the watcher stops holding leaves the count: folders moved
// away or removed, a source unwatched, a watcher closed. (A count that
// only grew would shrink the cap until the daemon watched nothing.)
func TestWatchCountFollowsTheWatches(t *testing.T) {
	before := watchesHeld.Load()
	dir, w, l := watchDir(t)
	mkdirs(t, filepath.Join(dir, "a"), 5)
	mkdirs(t, filepath.Join(dir, "b"), 5)
	mkdirs(t, filepath.Join(dir, "c"), 5)
	for _, d := range []string{"a/4", "b/4", "c/4"} {
		f := filepath.Join(dir, d, "f")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		l.wait(t, "a file in "+d, Change{Slug: "s", Rel: d + "/f"})
	}
	held := func() int64 { return watchesHeld.Load() - before }
	if held() != 19 || kernelWatches(t, w) != 19 {
		t.Fatalf("19 folders: %d watches counted, %d in the kernel", held(), kernelWatches(t, w))
	}
	if err := os.Rename(filepath.Join(dir, "a"), filepath.Join(t.TempDir(), "a")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watches of a and b dropped", func() bool { return held() == 7 && kernelWatches(t, w) == 7 })
	w.Unwatch("s")
	if held() != 0 || kernelWatches(t, w) != 0 {
		t.Errorf("unwatched: %d watches counted, %d in the kernel", held(), kernelWatches(t, w))
	}
	w.Watch("s", openRoot(t, dir))
	if held() != 7 {
		t.Errorf("watched again: %d watches counted; want 7", held())
	}
	w.Close()
	if held() != 0 {
		t.Errorf("closed: %d watches still counted", held())
	}
}

// The cap is half the per-user limit read at start.
func TestWatchCapIsHalfTheUserLimit(t *testing.T) {
	if capOf(192540) != 96270 || capOf(8192) != 4096 || capOf(0) != math.MaxInt64 {
		t.Errorf("capOf(192540, 8192, 0) = %d, %d, %d", capOf(192540), capOf(8192), capOf(0))
	}
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_watches")
	if err != nil {
		t.Skip(err)
	}
	if v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); watchLimit <= 0 || watchLimit > v {
		t.Errorf("watchLimit = %d; max_user_watches is %d", watchLimit, v)
	}
}
