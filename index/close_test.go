package index

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// indexedTree is an open index of source "s", a folder of files, walked
// once; the caller closes it.
func indexedTree(t *testing.T, files map[string]string) *Index {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, files)
	x, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.AddSource(Source{Slug: "s", FS: os.DirFS(dir)}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Reconcile(context.Background(), "s", nil); err != nil {
		t.Fatal(err)
	}
	return x
}

// A reload may turn the index off while a search, a status or a change
// through the mount is using it: every call on a closed index answers an
// error or nothing, and none panics or blocks.
func TestCallsAfterCloseAnswer(t *testing.T) {
	x := indexedTree(t, map[string]string{"a.txt": "closeword\n"})
	if r := search(t, x, Query{Q: "closeword"}, nil); len(r.Hits) != 1 {
		t.Fatalf("before Close: %+v", r)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Search(context.Background(), Query{Q: "closeword"}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("a search of a closed index answered %v, want ErrClosed", err)
	}
	if _, err := x.Reconcile(context.Background(), "s", nil); err == nil {
		t.Error("a reconcile of a closed index answered no error")
	}
	x.Update(URI("s", "a.txt"))
	x.Remove(URI("s", "a.txt"))
	x.RemovePrefix(URI("s", "d") + "/")
	x.Rename(URI("s", "a.txt"), URI("s", "b.txt"), false)
	x.Stats()
	x.CountFor("s", nil)
	x.IdentityFor("s", nil)
	x.SetBatchDelay(0)
	// Nothing is queued after Close: a flush waits for nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	x.Flush(ctx)
	if ctx.Err() != nil {
		t.Error("a flush of a closed index waited until its deadline")
	}
}

// Searches and changes running while the index closes end with an
// answer or an error.
func TestCloseDuringSearches(t *testing.T) {
	files := map[string]string{}
	for i := range 200 {
		files[fmt.Sprintf("f%03d.txt", i)] = fmt.Sprintf("closeword number%d\n", i)
	}
	x := indexedTree(t, files)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var calls, failed atomic.Int64 // calls made; searches that answered an error
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if g%2 == 0 {
					if _, err := x.Search(context.Background(), Query{Q: "closeword"}, nil); err != nil {
						failed.Add(1)
					}
				} else {
					x.Update(URI("s", fmt.Sprintf("f%03d.txt", i%200)))
					x.Stats()
				}
				calls.Add(1)
			}
		}()
	}
	eventually(t, "calls before Close", func() bool { return calls.Load() >= 40 })
	if failed.Load() != 0 {
		t.Errorf("%d searches of the open index failed", failed.Load())
	}
	if err := x.Close(); err != nil {
		t.Error(err)
	}
	eventually(t, "searches after Close answering an error", func() bool { return failed.Load() >= 4 })
	close(stop)
	wg.Wait()
}

// A search that the index's Close overtakes, past its own check, answers
// ErrClosed too (the daemon then answers as the index a reload left
// would), not "query cannot be run: index closed" as if the query were
// at fault.
func TestSearchClosedUnderItAnswersErrClosed(t *testing.T) {
	x := indexedTree(t, map[string]string{"a.txt": "closeword\n"})
	x.Flush(context.Background())
	// bleve's own Close, as Index.Close would make it under a search
	// already past the check (Index.Close then would close it twice).
	if err := x.bleve.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Search(context.Background(), Query{Q: "closeword"}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("a search whose bleve index closed under it: %v, want ErrClosed", err)
	}
}
