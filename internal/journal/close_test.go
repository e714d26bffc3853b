package journal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A reload may turn the journal off while a change through the mount is
// keeping content: a Keep, Created or Renamed on a closed journal answers
// ErrClosed, and the readers answer an error or nothing; none panics, and
// every record written before Close is there after a reopen.
func TestCallsAfterCloseAnswer(t *testing.T) {
	for _, batched := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "j")
		j, err := Open(Options{Dir: dir, Batched: batched})
		if err != nil {
			t.Fatal(err)
		}
		src := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(src, bytes.Repeat([]byte("kept before close\n"), 20000), 0o644); err != nil {
			t.Fatal(err)
		}
		keep := func(uri string) error {
			fd, err := unix.Open(src, unix.O_RDONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			var st unix.Stat_t
			unix.Fstat(fd, &st)
			return j.Keep(ev("open", uri), File{FD: fd, Readable: true, Mode: st.Mode, Size: st.Size, Links: uint64(st.Nlink)}, false)
		}
		// Keeps running on other goroutines while the journal closes.
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var kept sync.Map
		var refused atomic.Int64 // keeps that answered ErrClosed
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					uri := "d://g" + string(rune('a'+g)) + "/" + string(rune('a'+i%26))
					if err := keep(uri); err == nil {
						kept.Store(uri, true)
					} else if errors.Is(err, ErrClosed) {
						refused.Add(1)
					} else {
						t.Errorf("batched=%v: Keep while closing: %v", batched, err)
						return
					}
					j.Created(ev("create", uri+"x"))
					j.History(uri, nil)
				}
			}()
		}
		// Close once keeps are under way, and end them once one has
		// answered ErrClosed.
		deadline := time.Now().Add(10 * time.Second)
		for n := 0; n < 20 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			n = 0
			kept.Range(func(any, any) bool { n++; return true })
		}
		if err := j.Close(); err != nil {
			t.Fatalf("batched=%v: Close: %v", batched, err)
		}
		if err := keep("d://after"); !errors.Is(err, ErrClosed) {
			t.Errorf("batched=%v: Keep after Close = %v; want ErrClosed", batched, err)
		}
		if err := j.Created(ev("create", "d://after")); !errors.Is(err, ErrClosed) {
			t.Errorf("batched=%v: Created after Close = %v; want ErrClosed", batched, err)
		}
		if err := j.Renamed(ev("rename", "d://after2"), "d://after"); !errors.Is(err, ErrClosed) {
			t.Errorf("batched=%v: Renamed after Close = %v; want ErrClosed", batched, err)
		}
		j.History("d://", nil)
		j.Dropped()
		j.Stats()
		for refused.Load() < 3 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if refused.Load() < 3 {
			t.Errorf("batched=%v: the keeps running across Close were not refused with ErrClosed", batched)
		}
		close(stop)
		wg.Wait()

		j2, err := Open(Options{Dir: dir, Batched: batched})
		if err != nil {
			t.Fatalf("batched=%v: reopen: %v", batched, err)
		}
		kept.Range(func(k, _ any) bool {
			if h, err := j2.History(k.(string), nil); err != nil || len(h) == 0 {
				t.Errorf("batched=%v: %s was kept before Close, and after a reopen has no record: %v", batched, k, err)
			}
			return true
		})
		j2.Close()
	}
}
