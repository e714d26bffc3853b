package gitfs

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestStatusCacheAndInvalidate(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	write(t, wt, "a.txt", "a")
	write(t, wt, "sub/b.txt", "b")
	commitAll(t, wt, "init")
	r, err := Open(wt, Options{MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := r.Status(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	sub, _ := r.Status(ctx, "sub", nil)

	// A cached result comes back identical and fast.
	const n = 1000
	start := time.Now()
	for range n {
		again, err := r.Status(ctx, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(first) {
			t.Fatalf("cached Status changed: %q then %q", first, again)
		}
	}
	if per := time.Since(start) / n; per > time.Millisecond {
		t.Errorf("cached Status took %v per call; want well under 1ms", per)
	} else {
		t.Logf("cached Status: %v per call", per)
	}

	// A write through the mount is unseen until Invalidate (MaxAge < 0).
	write(t, wt, "sub/b.txt", "changed")
	if again, _ := r.Status(ctx, "sub", nil); string(again) != string(sub) {
		t.Fatalf("Status changed without Invalidate: %q", again)
	}
	r.Invalidate("sub/b.txt")
	got, err := r.Status(ctx, "sub", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := cliStatus(t, wt, "sub"); string(got) != want || !strings.Contains(want, " M sub/b.txt") {
		t.Errorf("after Invalidate: Status(sub) = %q; git says %q", got, want)
	}
	if got, _ := r.Status(ctx, "", nil); !strings.Contains(string(got), " M sub/b.txt") {
		t.Errorf("Invalidate(sub/b.txt) left the root's result stale: %q", got)
	}

	// A change under .git (a commit) is seen without Invalidate.
	commitAll(t, wt, "second")
	write(t, wt, "c.txt", "untracked") // needs Invalidate or the index change; the commit rewrote the index
	got, _ = r.Status(ctx, "", nil)
	if want := cliStatus(t, wt, ""); string(got) != want {
		t.Errorf("after commit: Status = %q; git says %q", got, want)
	}
}

func TestStatusMaxAge(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	write(t, wt, "a.txt", "a")
	commitAll(t, wt, "init")
	r, err := Open(wt, Options{MaxAge: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.Status(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	write(t, wt, "new.txt", "n")
	time.Sleep(100 * time.Millisecond)
	got, _ := r.Status(ctx, "", nil)
	if !strings.Contains(string(got), "?? new.txt") {
		t.Errorf("after MaxAge: Status = %q; want new.txt listed", got)
	}
}

// While the caller reports that it watches every change (and invalidates
// for it), results do not expire by age; once it stops, MaxAge holds again.
func TestStatusWatchedDoesNotExpire(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	write(t, wt, "a.txt", "a")
	commitAll(t, wt, "init")
	var watched atomic.Bool
	watched.Store(true)
	r, err := Open(wt, Options{MaxAge: 50 * time.Millisecond, Watched: watched.Load})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.Status(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	write(t, wt, "new.txt", "n") // unseen: nobody calls Invalidate
	time.Sleep(100 * time.Millisecond)
	if got, _ := r.Status(ctx, "", nil); strings.Contains(string(got), "new.txt") {
		t.Errorf("watched: the cached result expired by age: %q", got)
	}
	watched.Store(false)
	if got, _ := r.Status(ctx, "", nil); !strings.Contains(string(got), "?? new.txt") {
		t.Errorf("no longer watched: Status = %q; want new.txt listed after MaxAge", got)
	}
}

func TestStatusFilter(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	write(t, wt, "public/a.txt", "same content for rename")
	write(t, wt, "public/keep.txt", "k")
	write(t, wt, "secret/s.txt", "s")
	write(t, wt, "secret/moved.txt", "moved secret content")
	commitAll(t, wt, "init")
	git(t, wt, "mv", "public/a.txt", "public/b.txt")               // rename inside readable
	git(t, wt, "mv", "secret/moved.txt", "public/from-secret.txt") // rename out of a secret
	write(t, wt, "secret/s.txt", "changed")                        // modified secret
	write(t, wt, "public/keep.txt", "changed")                     // modified public
	write(t, wt, "secret/new.txt", "n")                            // untracked secret
	write(t, wt, "public/new.txt", "n")                            // untracked public
	write(t, wt, "newsecretdir/x", "x")                            // untracked dir
	canRead := func(p string) bool {
		return !strings.HasPrefix(p, "secret/") && p != "secret" && p != "newsecretdir"
	}
	r, err := Open(wt)
	if err != nil {
		t.Fatal(err)
	}
	all, err := r.Status(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := cliStatus(t, wt, ""); string(all) != want {
		t.Fatalf("unfiltered Status differs from git\n--- git:\n%s--- ours:\n%s", want, all)
	}
	got, err := r.Status(context.Background(), "", canRead)
	if err != nil {
		t.Fatal(err)
	}
	// Expected: the unfiltered lines minus those naming a rejected path,
	// but the rename out of secret/ is, to the reader, a file added.
	var want strings.Builder
	for _, line := range strings.SplitAfter(string(all), "\n") {
		if line == "R  secret/moved.txt -> public/from-secret.txt\n" {
			line = "A  public/from-secret.txt\n"
		}
		if strings.Contains(line, "secret/") || strings.Contains(line, "newsecretdir") {
			continue
		}
		want.WriteString(line)
	}
	if string(got) != want.String() {
		t.Errorf("filtered Status\n--- got:\n%s--- want:\n%s", got, want.String())
	}
	if strings.Contains(string(got), "secret/") {
		t.Errorf("filtered Status leaks a rejected path: %q", got)
	}
	if !strings.Contains(string(all), "R  secret/moved.txt -> public/from-secret.txt") {
		t.Errorf("test setup: want a rename out of secret/ in %q", all)
	}
}

func TestStatusScanTimeoutMarksIncomplete(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	for i := range 200 {
		write(t, wt, fmt.Sprintf("d%d/f%d", i%10, i), "x")
	}
	commitAll(t, wt, "init")
	write(t, wt, "d1/f1", "changed")
	r, err := Open(wt, Options{ScanTimeout: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := r.Status(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := strings.Cut(string(got), "\n")
	if want := "## main [incomplete: scan exceeded 1ns]"; header != want {
		t.Errorf("header = %q; want %q", header, want)
	}
	// The incomplete answer starts a full scan in the background; Identity
	// waits for it, and later callers get the complete result.
	commit, dirty, err := r.Identity(ctx)
	if err != nil {
		t.Fatalf("Identity after an incomplete scan: %v", err)
	}
	if commit == "" || strings.Join(dirty, ",") != "d1/f1" {
		t.Errorf("Identity = %s, %v; want HEAD and [d1/f1]", commit, dirty)
	}
	got, _ = r.Status(ctx, "", nil)
	if want := cliStatus(t, wt, ""); string(got) != want {
		t.Errorf("after the background scan: %q; git says %q", got, want)
	}

	// A cancelled caller gets an error, not a partial answer.
	r2, err := Open(wt, Options{ScanTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r2.Status(cctx, "", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Status with a cancelled context = %v; want context.Canceled", err)
	}
}

func TestStatusConcurrent(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	for i := range 100 {
		write(t, wt, fmt.Sprintf("d%d/f%d", i%5, i), "x")
	}
	commitAll(t, wt, "init")
	write(t, wt, "d1/f1", "changed")
	write(t, wt, "d2/new", "n")
	dirs := []string{"", "d0", "d1", "d2", "d3"}
	want := map[string]string{}
	for _, d := range dirs {
		want[d] = cliStatus(t, wt, d)
	}
	r, err := Open(wt)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 100)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				d := dirs[(g+i)%len(dirs)]
				if i%7 == 0 {
					r.Invalidate(d + "/f")
				}
				got, err := r.Status(context.Background(), d, nil)
				if err != nil {
					errs <- err
					return
				}
				if string(got) != want[d] {
					errs <- fmt.Errorf("Status(%q) = %q; want %q", d, got, want[d])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestInvalidateGitignoreReachesSubfolders(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	write(t, wt, "a/b/t.txt", "t")
	commitAll(t, wt, "init")
	write(t, wt, "a/b/x.log", "x")
	r, err := Open(wt, Options{MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, d := range []string{"", "a", "a/b"} {
		if got, _ := r.Status(ctx, d, nil); !strings.Contains(string(got), "?? a/b/x.log") {
			t.Fatalf("Status(%q) = %q; want x.log untracked", d, got)
		}
	}
	write(t, wt, "a/.gitignore", "*.log\n")
	r.Invalidate("a/.gitignore")
	for _, d := range []string{"", "a", "a/b"} {
		got, _ := r.Status(ctx, d, nil)
		if want := cliStatus(t, wt, d); string(got) != want {
			t.Errorf("after Invalidate(a/.gitignore): Status(%q) = %q; git says %q", d, got, want)
		}
	}
}

// TestNoFUSEDependency keeps the layering of DESIGN §2: gitfs must not
// depend on go-fuse.
func TestNoFUSEDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	if strings.Contains(string(out), "hanwen/go-fuse") {
		t.Error("gitfs depends on go-fuse")
	}
}
