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

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// TestFewIdleReaders: after a burst of parallel requests, the mount keeps
// at most fuseReaders+1 goroutines waiting in read(2) on /dev/fuse, not
// GOMAXPROCS+1, and the daemon's GOMAXPROCS is as it was before the mount.
// The same burst on a mount of go-fuse's own loopback, served with
// go-fuse's defaults, first shows that it leaves more than that waiting
// there: otherwise the test could not tell the cap from a weak burst.
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
	want := fuseReaders(procs) + 1

	// Readers of a mount an earlier test ended may still be leaving.
	before := settledReaders(t)
	ctl := t.TempDir()
	root, err := fusefs.NewLoopbackRoot(back)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fusefs.Mount(ctl, root, &fusefs.Options{MountOptions: fuse.MountOptions{DirectMount: true}})
	if err != nil {
		t.Fatal(err)
	}
	readerBurst(t, ctl)
	n := settledReaders(t) - before
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	if n <= want {
		t.Fatalf("go-fuse's defaults left %d goroutines waiting on /dev/fuse after the burst, not more than the cap of %d: the burst cannot show the cap (or the count no longer finds them)", n, want)
	}

	before = settledReaders(t)
	_, mnt, err := mountTree(t, back, "off")
	if err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS after the mount = %d, want %d", got, procs)
	}
	readerBurst(t, filepath.Join(mnt, "d"))
	m := settledReaders(t) - before
	if m < 1 || m > want {
		t.Errorf("%d goroutines waiting on /dev/fuse after the burst with %d Ps, want 1 to %d (go-fuse's defaults: %d)", m, procs, want, n)
	}
	t.Logf("readers waiting with %d Ps: %d (go-fuse's defaults: %d)", procs, m, n)
}

// readerBurst has 32 callers at once read every file of dir: go-fuse
// starts a reader whenever none is left waiting, so the burst makes many,
// and they go back to read(2) when it ends.
func readerBurst(t *testing.T, dir string) {
	t.Helper()
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range 64 {
				if _, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("f%d", i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
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
