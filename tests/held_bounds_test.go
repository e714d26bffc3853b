package tests

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// peakRSS is the daemon's peak resident set (VmHWM) in KiB.
func (e *env) peakRSS(tb testing.TB) int64 {
	tb.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", e.cmd.Process.Pid))
	must(tb, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			must(tb, err)
			return n
		}
	}
	tb.Fatalf("no VmHWM in /proc/%d/status", e.cmd.Process.Pid)
	return 0
}

// A repository the agent made in its view whose branch names an object
// that inflates to 400 MB (1.7 MB on disk) costs .status no more than its
// header: it is refused before go-git inflates it. Before, one such
// .status took 16 s and 1.9 GB of the daemon, three at once 3.7 GB.
func TestHeldStatusRefusesAZipBomb(t *testing.T) {
	requireFUSE(t)
	base := sharedTempDir(t)
	view := filepath.Join(base, "view")
	must(t, os.Mkdir(view, 0o755))
	repo := filepath.Join(base, "repo")
	must(t, os.Mkdir(repo, 0o755))
	makeRepo(t, repo)
	sh(t, `chown -R 1001:1001 "$R" && chmod -R a+rwX "$R"`, "R="+repo)
	e := newEnv(t, heldConfig(view), src{slug: "g", kind: "git", path: repo})
	view = filepath.Join(view, "g")
	for _, tt := range []struct{ name, hash, answer string }{
		// A branch that names a blob names no commit: go-git's answer,
		// found from the header alone.
		{"blob", "git hash-object -w --stdin", "Input/output error"},
		{"commit", "git hash-object -t commit --literally -w --stdin", "File too large"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if out, err := run(t, 1001, `set -e
mkdir "$V/zb-$N" && cd "$V/zb-$N"
git init -q
H=$(head -c 400000000 /dev/zero | `+tt.hash+`)
echo "$H" > ".git/$(git symbolic-ref HEAD)"`, append(gitEnv(), "V="+view, "N="+tt.name)...); err != nil {
				t.Fatalf("making the repository: %v\n%s", err, out)
			}
			before := e.peakRSS(t)
			start := time.Now()
			out, err := run(t, 1001, `cat "$V/zb-$N/.status" & cat "$V/zb-$N/.status" & cat "$V/zb-$N/.status"; wait`, "V="+view, "N="+tt.name)
			took := time.Since(start)
			peak := e.peakRSS(t)
			t.Logf("three .status at once: %v, daemon VmHWM %d MiB (%d MiB before); %v\n%s", took, peak>>10, before>>10, err, out)
			if took > 5*time.Second || peak-before > 200<<10 {
				t.Errorf("three .status of a 400 MB %s took %v and raised the daemon's peak RSS by %d MiB", tt.name, took, (peak-before)>>10)
			}
			if !strings.Contains(out, tt.answer) {
				t.Errorf(".status of a repository whose HEAD is a 400 MB %s answered %v:\n%s\nwant %q", tt.name, err, out, tt.answer)
			}
		})
	}
}
