package fs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"testing"
	"time"
)

// TestFewIdleReaders: after a burst of parallel requests, the mount keeps
// at most fuseReaders+1 goroutines waiting in read(2) on /dev/fuse, not
// GOMAXPROCS+1, and the daemon's GOMAXPROCS is as it was before the mount.
func TestFewIdleReaders(t *testing.T) {
	needRootFUSE(t)
	const procs = 8
	was := runtime.GOMAXPROCS(procs)
	t.Cleanup(func() { runtime.GOMAXPROCS(was) })
	back := t.TempDir()
	for i := range 64 {
		if err := os.WriteFile(filepath.Join(back, fmt.Sprintf("f%d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Readers of a mount an earlier test ended may still be leaving.
	before := settledReaders(t)
	_, mnt, err := mountTree(t, back, "off")
	if err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS after the mount = %d, want %d", got, procs)
	}
	// 32 callers at once, each reading every file: go-fuse starts a reader
	// whenever none is left waiting, so the burst makes many.
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range 64 {
				if _, err := os.ReadFile(filepath.Join(mnt, "d", fmt.Sprintf("f%d", i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// The readers that took the last requests go back to read(2) at once.
	n := settledReaders(t) - before
	if n < 1 {
		t.Fatalf("%d goroutines waiting on /dev/fuse after the burst, want at least 1 (is the count still right?)", n)
	}
	if want := fuseReaders(procs) + 1; n > want {
		t.Errorf("%d goroutines waiting on /dev/fuse after the burst with %d Ps, want at most %d", n, procs, want)
	}
	t.Logf("%d readers waiting with %d Ps", n, procs)
}

// settledReaders is idleReaders once it has held still for 100 ms (or
// after 2 s).
func settledReaders(t *testing.T) int {
	t.Helper()
	n, same := idleReaders(t), 0
	for range 100 {
		time.Sleep(20 * time.Millisecond)
		m := idleReaders(t)
		if m != n {
			n, same = m, 0
			continue
		}
		if same++; same == 5 {
			break
		}
	}
	return n
}

// idleReaders counts the goroutines of this process waiting in go-fuse's
// read of /dev/fuse.
func idleReaders(t *testing.T) int {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	n := 0
	for g := range bytes.SplitSeq(b.Bytes(), []byte("\n\n")) {
		if bytes.Contains(g, []byte("(*fuseFD).readRequest")) && bytes.Contains(g, []byte("syscall.Read(")) {
			n++
		}
	}
	return n
}
