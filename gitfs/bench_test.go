package gitfs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
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
// its time per run as git-ns/op.
func reportGit(b *testing.B, wt, dir string) {
	b.Helper()
	const runs = 5
	var total time.Duration
	for range runs {
		cmd := exec.Command("git", "status", "--porcelain=v1", "--branch", "--", ".")
		cmd.Dir = filepath.Join(wt, dir)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git status: %v: %s", err, out)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Nanoseconds()/runs), "git-ns/op")
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
