package mounts

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Folders moved away and removed while watched: the reader drops their
// watches while the watcher drops the same ones. With fsnotify (before
// the watcher read inotify itself) the two used to wait for each other
// forever (found by stress-ng's inotify stressor, which froze the mount).
// After the churn the watcher must still deliver changes and close.
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

// userInotifyLimit is the inotify watch limit of the caller's user
// namespace. The test changes it in a user namespace of its own, where
// it binds only that namespace's processes: lowering the machine's
// fs.inotify.max_user_watches would starve every other watcher of uid 0
// on the machine (other mounts and tests) while it is low.
const userInotifyLimit = "/proc/sys/user/max_inotify_watches"

// When the inotify limit is below the tree's folder count, the source's
// watches are reported failed with the reason; once the limit allows,
// the watcher places the missing watches by itself, says the source is
// whole again, asks for a rescan, and reports changes in the folders it
// could not watch before.
func TestWatcherPlacesMissingWatchesOnceTheLimitAllows(t *testing.T) {
	if os.Getenv("NEURALISFS_TEST_IN_USERNS") == "" {
		if os.Geteuid() != 0 {
			t.Skip("needs root: the test runs in a user namespace of its own that maps uid 0")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestWatcherPlacesMissingWatchesOnceTheLimitAllows$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "NEURALISFS_TEST_IN_USERNS=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		}
		out, err := cmd.CombinedOutput()
		var pe *os.PathError
		if errors.As(err, &pe) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) {
			t.Skipf("cannot start a process in a new user namespace: %v", err)
		}
		if err != nil || !strings.Contains(string(out), "--- PASS: TestWatcherPlacesMissingWatchesOnceTheLimitAllows") {
			t.Fatalf("in its user namespace: %v\n%s", err, out)
		}
		return
	}
	old, err := os.ReadFile(userInotifyLimit)
	if err != nil {
		t.Skipf("no per-namespace inotify limit: %v", err)
	}
	setLimit := func(v string) {
		t.Helper()
		if err := os.WriteFile(userInotifyLimit, []byte(v), 0); err != nil {
			t.Fatalf("set %s: %v", userInotifyLimit, err)
		}
	}
	t.Cleanup(func() {
		setLimit(string(old))
		if now, _ := os.ReadFile(userInotifyLimit); string(now) != string(old) {
			t.Errorf("%s is %q, not %q as found", userInotifyLimit, now, old)
		}
	})

	dir := t.TempDir()
	for i := range 30 {
		if err := os.MkdirAll(filepath.Join(dir, "a", fmt.Sprint(i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root, err := OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	setLimit("10") // 32 folders
	changes := make(chan Change, 1024)
	w, err := newWatcher(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Millisecond, 20*time.Millisecond, func(cs []Change) {
		for _, c := range cs {
			changes <- c
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	notes := make(chan string, 16)
	w.Notify(func(slug, reason string) { notes <- slug + ": " + reason })
	w.Watch("s", root)
	if reason := w.Failed("s"); !strings.Contains(reason, "inotify watch limit reached") {
		t.Fatalf("with 10 watches for 32 folders: Failed = %q", reason)
	}
	if w.Watching("s", "a/1") {
		t.Errorf("a source missing watches is reported watched")
	}
	timeout := time.After(30 * time.Second)
	next := func(what string) string {
		t.Helper()
		select {
		case n := <-notes:
			return n
		case <-timeout:
			t.Fatalf("never notified: %s", what)
		}
		return ""
	}
	if n := next("the failure"); !strings.HasPrefix(n, "s: inotify watch limit reached") {
		t.Errorf("notified %q", n)
	}
	setLimit(string(old))
	if n := next("the recovery"); n != "s: " {
		t.Errorf("notified %q; want the source whole again", n)
	}
	if reason := w.Failed("s"); reason != "" || !w.Watching("s", "a/1") {
		t.Errorf("after the limit was raised: Failed = %q, Watching = %v", reason, w.Watching("s", "a/1"))
	}
	// The rescan, then a change in every folder, even those that had no
	// watch before, is reported.
	for i := range 30 {
		if err := os.WriteFile(filepath.Join(dir, "a", fmt.Sprint(i), "f"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]bool{"": true}
	for i := range 30 {
		want[fmt.Sprintf("a/%d/f", i)] = true
	}
	for len(want) > 0 {
		select {
		case c := <-changes:
			if c.Rescan {
				delete(want, "")
			} else {
				delete(want, c.Rel)
			}
		case <-timeout:
			t.Fatalf("changes never reported: %v", want)
		}
	}
}
