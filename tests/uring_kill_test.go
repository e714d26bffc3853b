package tests

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// uringSwitchOn turns the kernel's FUSE over io_uring switch on for the
// test and puts back what it found when the test ends (after the daemon
// stopped: cleanups run last-in first-out). It skips on a kernel without
// the feature.
func uringSwitchOn(t *testing.T) {
	t.Helper()
	requireFUSE(t)
	const param = "/sys/module/fuse/parameters/enable_uring"
	was, err := os.ReadFile(param)
	if err != nil {
		t.Skipf("kernel without FUSE over io_uring: %v", err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(param, was, 0o644); err != nil {
			t.Errorf("putting %s back to %q: %v", param, strings.TrimSpace(string(was)), err)
		}
	})
	if err := os.WriteFile(param, []byte("Y\n"), 0o644); err != nil {
		t.Fatalf("turning %s on: %v", param, err)
	}
	t.Setenv("NEURALISFS_TEST_IO_URING", "on") // newEnv's configs say io_uring = "on"
}

// A daemon SIGKILLed while its rings hold requests (eight readers stat,
// read and list the mount without pause) leaves a stale mount: the readers
// fail at once instead of hanging (ECANCELED for a request the dead rings
// held, as Linux 6.18 ends them, ENOTCONN or ECONNABORTED for the next),
// the daemon exits, and `neuralisfs mount` recovers the mountpoint and
// serves it over io_uring again. Five rounds.
func TestUringKillMidRequests(t *testing.T) {
	uringSwitchOn(t)
	dir := sharedTempDir(t)
	data := filepath.Join(dir, "src-data")
	const dirs, per = 8, 50
	for d := range dirs {
		for i := range per {
			writeFile(t, filepath.Join(data, fmt.Sprintf("d%d/f%d", d, i)), strings.Repeat(fmt.Sprintf("d%d f%d\n", d, i), 200), 0o644)
		}
	}
	e := newEnv(t, "", src{slug: "data", path: data})
	r := rand.New(rand.NewPCG(20, 3))
	for round := range 5 {
		if b, err := os.ReadFile(filepath.Join(e.mnt, ".neuralis", "sources")); err != nil || !strings.HasPrefix(string(b), "# transport: io_uring\n") {
			t.Fatalf("round %d: .neuralis/sources = %.40q, %v; want the mount over io_uring", round, b, err)
		}
		var ops atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					d := e.m("data", fmt.Sprintf("d%d", (w+i)%dirs))
					p := filepath.Join(d, fmt.Sprintf("f%d", i%per))
					var err error
					switch i % 3 {
					case 0:
						_, err = os.Stat(p)
					case 1:
						_, err = os.ReadFile(p)
					case 2:
						_, err = os.ReadDir(d)
					}
					if err != nil {
						errs <- err
						return
					}
					ops.Add(1)
				}
			}()
		}
		// Kill once the readers are under way (on one CPU, right after a
		// remount, they may take a while to get going), then at a random
		// point of the load.
		for deadline := time.Now().Add(10 * time.Second); ops.Load() < 100; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: only %d requests answered in 10s: the mount is not serving", round, ops.Load())
			}
		}
		time.Sleep(time.Duration(r.IntN(300)) * time.Millisecond)
		before := ops.Load()
		e.cmd.Process.Kill()
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the daemon did not exit within 10s of SIGKILL", round)
		}
		e.cmd = nil
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: readers of the mount still blocked 10s after the daemon died", round)
		}
		close(errs)
		seen := map[syscall.Errno]int{}
		for err := range errs {
			var errno syscall.Errno
			if !errors.As(err, &errno) || (errno != syscall.ECANCELED && errno != syscall.ENOTCONN && errno != syscall.ECONNABORTED) {
				t.Errorf("round %d: a reader failed with %v; want ECANCELED, ENOTCONN or ECONNABORTED", round, err)
			}
			seen[errno]++
		}
		var st syscall.Statfs_t
		if err := syscall.Statfs(e.mnt, &st); !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ECONNABORTED) {
			t.Fatalf("round %d: statfs after SIGKILL = %v; want ENOTCONN or ECONNABORTED (a stale mount)", round, err)
		}
		e.start()
		if b, err := os.ReadFile(e.m("data", "d3", "f7")); err != nil || string(b) != strings.Repeat("d3 f7\n", 200) {
			t.Fatalf("round %d: read after the remount: %.20q, %v", round, b, err)
		}
		t.Logf("round %d: %d requests before the kill; the readers' errors: %v", round, before, seen)
	}
}
