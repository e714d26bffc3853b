package gitfs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// benchFiles is the size of the generated checkout: NEURALIS_BENCH_FILES,
// default 5000.
func benchFiles() int {
	if n, err := strconv.Atoi(os.Getenv("NEURALIS_BENCH_FILES")); err == nil && n > 0 {
		return n
	}
	return 5000
}

var (
	fixtureOnce sync.Once
	fixtureDir  string
	fixtureErr  error
)

// TestMain removes the shared benchmark checkout.
func TestMain(m *testing.M) {
	code := m.Run()
	if fixtureDir != "" {
		os.RemoveAll(filepath.Dir(fixtureDir))
	}
	os.Exit(code)
}

// benchCheckout returns a committed checkout of benchFiles() files in
// 100-file folders two levels deep, an ignored node_modules of a fifth as
// many files, a few modified and a few untracked files. It is built once
// per test binary.
func benchCheckout(b *testing.B) string {
	b.Helper()
	gitEnv(b)
	fixtureOnce.Do(func() {
		n := benchFiles()
		base, err := os.MkdirTemp("", "gitfs-bench-")
		if err != nil {
			fixtureErr = err
			return
		}
		wt := filepath.Join(base, "wt")
		run := func(args ...string) {
			if fixtureErr != nil {
				return
			}
			cmd := exec.Command("git", args...)
			cmd.Dir = wt
			if out, err := cmd.CombinedOutput(); err != nil {
				fixtureErr = fmt.Errorf("git %v: %v: %s", args, err, out)
			}
		}
		os.MkdirAll(wt, 0o755)
		run("init", "-q", "-b", "main")
		// Files older than the index, so that (as in a real checkout) they
		// are not racily clean and stat data alone proves them unchanged.
		old := time.Now().Add(-time.Hour)
		mk := func(rel, content string) {
			p := filepath.Join(wt, rel)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil && fixtureErr == nil {
				fixtureErr = err
			}
			os.Chtimes(p, old, old)
		}
		for i := range n {
			mk(fmt.Sprintf("d%03d/s%02d/f%05d.txt", i/1000, (i/100)%10, i), fmt.Sprintf("file %d\n", i))
		}
		for i := range n / 5 {
			mk(fmt.Sprintf("node_modules/p%03d/f%05d.js", i/50, i), "x\n")
		}
		mk(".gitignore", "node_modules/\n*.log\n")
		run("add", "-A")
		run("commit", "-q", "-m", "bench")
		mk("d000/s00/f00000.txt", "modified\n")
		mk("d000/s01/f00100.txt", "modified too\n")
		mk("d000/untracked.txt", "u\n")
		mk("newdir/u.txt", "u\n")
		mk("d000/s02/x.log", "ignored\n")
		run("status", "--porcelain") // refresh the index as a user's shell would
		fixtureDir = wt
	})
	if fixtureErr != nil {
		b.Fatal(fixtureErr)
	}
	return fixtureDir
}

// reportGit runs git status --porcelain on the same checkout and reports
// its time per run as git-ns/op, and ours as a multiple of it (x-git).
func reportGit(b *testing.B, wt, dir string) {
	b.Helper()
	const runs = 5
	var total time.Duration
	for range runs {
		total += timeGit(b, wt, dir)
	}
	gitNs := float64(total.Nanoseconds() / runs)
	b.ReportMetric(gitNs, "git-ns/op")
	if b.N > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/gitNs, "x-git")
	}
}

// timeGit runs git status --porcelain=v1 --branch -- . in wt/dir once and
// returns how long it took.
func timeGit(b *testing.B, wt, dir string) time.Duration {
	b.Helper()
	cmd := exec.Command("git", "status", "--porcelain=v1", "--branch", "--", ".")
	cmd.Dir = filepath.Join(wt, dir)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("git status: %v: %s", err, out)
	}
	return time.Since(start)
}

// dropCaches writes back dirty data and drops the page, dentry and inode
// caches, so that the next status reads the disk as after a reboot. It
// skips the benchmark unless it runs as root.
func dropCaches(b *testing.B) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("dropping the page cache needs root")
	}
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		b.Skipf("cannot drop the page cache: %v", err)
	}
}

func benchStatus(b *testing.B, dir string) {
	wt := benchCheckout(b)
	ctx := context.Background()
	want, err := exec.Command("git", "-C", filepath.Join(wt, dir), "status", "--porcelain=v1", "--branch", "--", ".").Output()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r, err := Open(wt)
			if err != nil {
				b.Fatal(err)
			}
			got, err := r.Status(ctx, dir, nil)
			if err != nil {
				b.Fatal(err)
			}
			if string(got) != string(want) {
				b.Fatalf("Status(%q) differs from git\n--- git:\n%s--- ours:\n%s", dir, want, got)
			}
		}
		reportGit(b, wt, dir)
	})
	b.Run("cold-disk", func(b *testing.B) {
		// As cold, and with the page, dentry and inode caches dropped
		// before each run, as after a reboot: every stat and directory
		// read waits for the disk. Each iteration also drops the caches
		// and runs the git CLI, so that git-ns/op and x-git (our time over
		// git's) come from the same conditions. Root only.
		dropCaches(b)
		var ours, theirs time.Duration
		for b.Loop() {
			b.StopTimer()
			dropCaches(b)
			b.StartTimer()
			start := time.Now()
			r, err := Open(wt)
			if err != nil {
				b.Fatal(err)
			}
			got, err := r.Status(ctx, dir, nil)
			if err != nil {
				b.Fatal(err)
			}
			ours += time.Since(start)
			b.StopTimer()
			if string(got) != string(want) {
				b.Fatalf("Status(%q) differs from git\n--- git:\n%s--- ours:\n%s", dir, want, got)
			}
			dropCaches(b)
			theirs += timeGit(b, wt, dir)
			b.StartTimer()
		}
		b.ReportMetric(float64(theirs.Nanoseconds())/float64(b.N), "git-ns/op")
		b.ReportMetric(float64(ours)/float64(theirs), "x-git")
	})
	b.Run("invalidated", func(b *testing.B) {
		// The path after a write through the mount: caches of the index and
		// HEAD tree are warm, the result is not.
		r, err := Open(wt)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			r.Invalidate()
			if _, err := r.Status(ctx, dir, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("warm", func(b *testing.B) {
		r, err := Open(wt)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Status(ctx, dir, nil); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Status(ctx, dir, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkStatusRoot(b *testing.B) { benchStatus(b, "") }

func BenchmarkStatusSubdir(b *testing.B) { benchStatus(b, "d000") }
