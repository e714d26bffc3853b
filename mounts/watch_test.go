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
