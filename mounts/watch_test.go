package mounts

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Folders moved away and removed while watched make fsnotify report
// errors from its reader while it holds its lock; the watcher drops the
// same watches meanwhile. The two used to wait for each other forever
// (found by stress-ng's inotify stressor, which froze the mount). After
// the churn the watcher must still deliver changes and close.
func TestWatcherSurvivesMovedAwayFolders(t *testing.T) {
	dir := t.TempDir()
	root, err := OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var batches atomic.Int64
	seen := make(chan string, 1024)
	w, err := NewWatcher(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Millisecond, func(cs []Change) {
		batches.Add(1)
		for _, c := range cs {
			select {
			case seen <- c.Rel:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Watch("s", root)
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		a := filepath.Join(dir, fmt.Sprintf("a%d", i%4))
		if err := os.MkdirAll(filepath.Join(a, "x", "y"), 0o755); err != nil {
			t.Fatal(err)
		}
		// Give the watcher time to watch the new folders, then move
		// them away and remove them under its feet.
		if i%8 == 0 {
			time.Sleep(time.Millisecond)
		}
		b := a + "-moved"
		os.Rename(filepath.Join(a, "x"), filepath.Join(a, "x2"))
		os.Rename(a, b)
		os.RemoveAll(b)
	}
	for len(seen) > 0 {
		<-seen
	}
	// Still alive: a new file is reported.
	if err := os.WriteFile(filepath.Join(dir, "after"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for found := false; !found; {
		select {
		case rel := <-seen:
			found = rel == "after"
		case <-timeout:
			t.Fatal("the watcher stopped delivering changes after folders were moved away and removed under it")
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher does not close: its event and error goroutines are stuck")
	}
}

// Folders whose absolute path is PATH_MAX bytes or longer cannot be
// watched (inotify takes a path). They are left unwatched, Watching says
// so for them, and the source is not marked failed for it: the rest of
// the tree keeps its watches and its long cache timeouts (issue 16).
func TestWatcherLeavesTooDeepFoldersUnwatched(t *testing.T) {
	dir := t.TempDir()
	root, err := OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	levels := deepDir(t, root, 5000)
	seen := make(chan string, 1024)
	w, err := NewWatcher(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Millisecond, func(cs []Change) {
		for _, c := range cs {
			seen <- c.Rel
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Watch("s", root)
	// A deep folder made while watched is left out the same way.
	if _, err := root.Mkdir(levels[len(levels)-1]+"/later", 0o755, -1, -1); err != nil {
		t.Fatal(err)
	}
	// A change at the top and one in the deepest watched folder reach the
	// watcher once it has handled the events before them.
	var shallow, deep string
	for _, lv := range levels {
		if !tooDeep(dir, lv+"/x") {
			deep = lv + "/marker"
		}
	}
	shallow = "marker"
	for _, m := range []string{deep, shallow} {
		fd, _, err := root.Create(m, unix.O_WRONLY, 0o644, -1, -1)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
	}
	want := map[string]bool{shallow: true, deep: true}
	timeout := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case rel := <-seen:
			delete(want, rel)
		case <-timeout:
			t.Fatalf("changes never reported: %v", want)
		}
	}
	if reason := w.Failed("s"); reason != "" {
		t.Errorf("a deep tree marked the source failed: %s", reason)
	}
	if !w.Watching("s", shallow) || !w.Watching("s", deep) {
		t.Errorf("folders short enough to watch are reported unwatched")
	}
	for _, rel := range []string{levels[len(levels)-1], levels[len(levels)-1] + "/later/f"} {
		if w.Watching("s", rel) {
			t.Errorf("a folder %d bytes deep is reported watched", len(dir)+1+len(rel))
		}
	}
}
