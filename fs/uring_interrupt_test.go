package fs

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/gitfs"
	"github.com/neuralis/neuralisfs/internal/held"
)

// slowGit is a GitState whose .status takes until the request is cancelled
// (go-fuse cancels ctx when the caller is interrupted) or, failing that,
// the whole of slowGitFallback.
type slowGit struct {
	entered   chan struct{} // one value per Status call
	cancelled atomic.Int32  // Status calls that saw ctx.Done()
}

const slowGitFallback = 8 * time.Second

func (g *slowGit) Changed(slug, rel string)                   {}
func (g *slowGit) Virtual(slug, rel string) []string          { return []string{StatusName} }
func (g *slowGit) Revs(slug string) []string                  { return nil }
func (g *slowGit) Tree(slug, rev string) (*gitfs.Tree, error) { return nil, errors.ErrUnsupported }

func (g *slowGit) Status(ctx context.Context, slug, rel string, canRead func(string) bool, _ *held.View) ([]byte, error) {
	g.entered <- struct{}{}
	select {
	case <-ctx.Done():
		g.cancelled.Add(1)
		return nil, ctx.Err()
	case <-time.After(slowGitFallback):
		return []byte("## not cancelled\n"), nil
	}
}

// TestInterruptCancelsRequest: a caller blocked in open(2) of a .status
// that takes long is sent a signal; the kernel sends INTERRUPT, the
// request's ctx is cancelled, and open returns EINTR at once. Over
// /dev/fuse go-fuse does this itself; over io_uring the INTERRUPT still
// comes through /dev/fuse, for a request go-fuse's server never saw
// (issue 20).
func TestInterruptCancelsRequest(t *testing.T) {
	for _, mode := range []string{"off", "on"} {
		t.Run("io_uring="+mode, func(t *testing.T) {
			if mode == "on" {
				uringSwitchOn(t)
			} else {
				needRootFUSE(t) // "off" never offers io_uring: the switch can stay as it is
			}
			g := &slowGit{entered: make(chan struct{}, 4)}
			back := t.TempDir()
			f, mnt, err := mountTreeWith(t, back, mode, func(o *Options) { o.Git = g })
			if err != nil {
				t.Fatalf("mount: %v", err)
			}
			if got, want := f.Transport(mnt), map[string]string{"off": "/dev/fuse", "on": "io_uring"}[mode]; got != want {
				t.Fatalf("transport %q, want %q", got, want)
			}
			// The Go runtime's handler takes SIGUSR1 (with SA_RESTART,
			// which does not restart a FUSE request the daemon answered
			// with EINTR).
			sig := make(chan os.Signal, 4)
			signal.Notify(sig, syscall.SIGUSR1)
			defer signal.Stop(sig)

			type result struct {
				err     error
				elapsed time.Duration
			}
			tids := make(chan int, 1)
			res := make(chan result, 1)
			p := filepath.Join(mnt, "d", StatusName)
			go func() {
				// One thread, so that the signal goes to the one blocked
				// in open. unix.Open, not os.Open: os.Open retries EINTR.
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				tids <- unix.Gettid()
				start := time.Now()
				fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err == nil {
					unix.Close(fd)
				}
				res <- result{err, time.Since(start)}
			}()
			tid := <-tids
			select {
			case <-g.entered:
			case <-time.After(5 * time.Second):
				t.Fatal("the open of .status never reached the daemon")
			}
			before := f.RingInterrupts()
			sent := time.Now()
			if err := unix.Tgkill(os.Getpid(), tid, unix.SIGUSR1); err != nil {
				t.Fatalf("tgkill: %v", err)
			}
			r := <-res
			took := time.Since(sent)
			if !errors.Is(r.err, syscall.EINTR) || took > 2*time.Second {
				t.Errorf("open(%s) after a signal: %v, %v after the signal; want EINTR within 2s", p, r.err, took.Round(time.Millisecond))
			}
			if n := g.cancelled.Load(); n != 1 {
				t.Errorf("the daemon saw %d cancellations, want 1", n)
			}
			if mode == "on" {
				if n := f.RingInterrupts() - before; n != 1 {
					t.Errorf("%d interrupts delivered to ring requests, want 1", n)
				}
			}
			t.Logf("open returned %v %v after the signal (%v in all)", r.err, took.Round(time.Microsecond), r.elapsed.Round(time.Millisecond))
			// The mount still serves.
			if _, err := os.ReadDir(filepath.Join(mnt, "d")); err != nil {
				t.Errorf("readdir after the interrupt: %v", err)
			}
		})
	}
}
