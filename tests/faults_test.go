package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tmpfsAt mounts a tmpfs of size at dir (made when missing) and unmounts
// it when the test ends (registered now, so it runs after the cleanups
// registered later: the daemon stops first).
func tmpfsAt(t *testing.T, dir, size string) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs at %s: %v\n%s", dir, err, out)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
}

// fill writes filler until the filesystem under it has no room left.
func fill(t *testing.T, filler string) {
	t.Helper()
	f, err := os.OpenFile(filler, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	must(t, err)
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !strings.Contains(err.Error(), "no space left") {
				t.Fatalf("filling %s: %v", filler, err)
			}
			return
		}
	}
}

// sourceState is the output of `neuralisfs status` and the line of
// .neuralis/sources for slug.
func (e *env) sourceState(t *testing.T, slug string) (status, sources string) {
	t.Helper()
	status, _ = e.cli(t, 0, "status") // its reason is on the line below the source's
	b, _ := os.ReadFile(filepath.Join(e.mnt, ".neuralis", "sources"))
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, slug) {
			sources += line + "\n"
		}
	}
	return status, sources
}

// A full disk under state_dir: the mount keeps serving, what cannot be
// kept is recorded as not kept, status says DEGRADED with the reason, and
// once space returns later changes are journaled and indexed again.
func TestStateDirFull(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	e.stop()
	tmpfsAt(t, e.state, "4m")
	for i := range 20 {
		writeFile(t, e.b("data", fmt.Sprintf("f%02d.txt", i)), fmt.Sprintf("original %d %s\n", i, strings.Repeat("x", 20000)), 0o644)
	}
	e.start()
	must(t, os.WriteFile(e.m("data", "f00.txt"), []byte("before the disk filled\n"), 0o644))
	if recs := e.history(t, "data://f00.txt"); len(recs) != 1 || !recs[0].Kept {
		t.Fatalf("history before the disk filled: %+v", recs)
	}
	e.found(t, "filled", "data://f00.txt")
	filler := filepath.Join(e.state, "filler")
	fill(t, filler)

	// Writes flow through the mount while state_dir is full: overwrites
	// (the journal must keep the old content), new files, removals.
	for i := 1; i < 10; i++ {
		name := fmt.Sprintf("f%02d.txt", i)
		want := fmt.Sprintf("overwritten while full %d tokenwhilefull%d\n", i, i)
		if err := os.WriteFile(e.m("data", name), []byte(want), 0o644); err != nil {
			t.Fatalf("write %s through the mount with state_dir full: %v", name, err)
		}
		if b, _ := os.ReadFile(e.b("data", name)); string(b) != want {
			t.Errorf("backing %s = %q; want %q", name, b, want)
		}
	}
	must(t, os.WriteFile(e.m("data", "new-full.txt"), []byte("created tokennewfull\n"), 0o644))
	must(t, os.Remove(e.m("data", "f10.txt")))
	must(t, os.Rename(e.m("data", "f11.txt"), e.m("data", "f11-moved.txt")))

	for i := 1; i < 10; i++ {
		u := fmt.Sprintf("data://f%02d.txt", i)
		recs := e.history(t, u)
		if len(recs) == 0 {
			t.Errorf("history %s: no record of the overwrite made while state_dir was full", u)
			continue
		}
		if recs[0].Kept {
			// Kept is only claimed with the content readable: revert it.
			continue
		}
		out, err := exec.Command(binPath, "revert", "-c", e.cfg, u).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "not kept") {
			t.Errorf("revert %s of a record not kept: %v %s", u, err, out)
		} else if i == 1 {
			t.Logf("revert of a change not kept: %s", strings.TrimSpace(string(out)))
		}
	}
	if recs := e.history(t, "data://f10.txt"); len(recs) == 0 {
		t.Errorf("history of the removal made while full: none")
	}
	st, srcs := e.sourceState(t, "data")
	if !strings.Contains(st, "DEGRADED") || !strings.Contains(st, "no space") {
		t.Errorf("status while state_dir is full:\n%s", st)
	}
	if !strings.Contains(srcs, "DEGRADED") || !strings.Contains(srcs, "no space") {
		t.Errorf(".neuralis/sources while state_dir is full:\n%s", srcs)
	}
	t.Logf("while full: status %q, .neuralis/sources %q", strings.TrimSpace(st), strings.TrimSpace(srcs))

	// Space returns: everything recovers by itself.
	must(t, os.Remove(filler))
	eventually(t, 20*time.Second, "status back to AVAILABLE after space returned", func() bool {
		// A change that journals successfully is what clears the state.
		os.WriteFile(e.m("data", "f12.txt"), []byte("after space returned tokenafterfull\n"), 0o644)
		st, srcs := e.sourceState(t, "data")
		return !strings.Contains(st, "DEGRADED") && !strings.Contains(srcs, "DEGRADED")
	})
	must(t, os.WriteFile(e.m("data", "f13.txt"), []byte("later change tokenlater\n"), 0o644))
	recs := e.history(t, "data://f13.txt")
	if len(recs) == 0 || !recs[0].Kept {
		t.Errorf("history of a change after space returned: %+v", recs)
	}
	e.revert(t, "data://f13.txt")
	same(t, e.b("data", "f13.txt"), fmt.Sprintf("original 13 %s\n", strings.Repeat("x", 20000)), 0o644)
	// The index catches up: what was written while full and after is found.
	e.found(t, "tokenafterfull", "data://f12.txt")
	e.found(t, "tokenwhilefull5", "data://f05.txt")
	e.found(t, "tokennewfull", "data://new-full.txt")
	e.notFound(t, "original", "data://f10.txt")
}

// A full backing disk: a write through the mount that does not fit gets
// ENOSPC, the file is as the same writes leave it on a plain folder of the
// same size, and the journal holds no partial state for it.
func TestBackingDiskFull(t *testing.T) {
	requireFUSE(t)
	dir := sharedTempDir(t)
	backing, plain := filepath.Join(dir, "backing"), filepath.Join(dir, "plain")
	tmpfsAt(t, backing, "1m")
	tmpfsAt(t, plain, "1m")
	original := strings.Repeat("original line\n", 100<<10/14)
	for _, d := range []string{backing, plain} {
		writeFile(t, filepath.Join(d, "old.txt"), original, 0o644)
	}
	e := newEnv(t, "", src{slug: "data", path: backing})
	// The same writes on both: dd past the end of the disk, an overwrite
	// (O_TRUNC) that does not fit, an append that does not fit.
	workload := `cd "$D"
dd if=/dev/urandom of=big.bin bs=64k count=32 2>&1 | grep -o 'No space left on device' | head -1
python3 - <<'PY'
import errno, os
for name, flags in (("old.txt", os.O_WRONLY | os.O_TRUNC), ("append.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND)):
    fd = os.open(name, flags, 0o644)
    try:
        for i in range(64):
            os.write(fd, bytes([65 + i % 26]) * 32768)
        print(name, "fitted")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
    finally:
        os.close(fd)
PY
sync .
for f in big.bin old.txt append.txt; do printf '%s %s\n' "$f" "$(stat -c %s "$f")"; done`
	onPlain := sh(t, workload, "D="+plain)
	onMount := sh(t, workload, "D="+e.m("data"))
	if onMount != onPlain {
		t.Errorf("writes past a full disk: through the mount\n%s\non a plain folder\n%s", onMount, onPlain)
	}
	if strings.Count(onMount, "ENOSPC") != 2 || !strings.Contains(onMount, "No space left on device") {
		t.Errorf("the writes that do not fit did not all get ENOSPC:\n%s", onMount)
	}
	t.Logf("through the mount and on a plain tmpfs of the same size:\n%s", onMount)
	// Same bytes where the sizes agree: what the kernel wrote, in order.
	for _, f := range []string{"old.txt", "append.txt"} {
		a, _ := os.ReadFile(filepath.Join(backing, f))
		b, _ := os.ReadFile(filepath.Join(plain, f))
		if string(a) != string(b) {
			t.Errorf("%s differs from the plain folder's (%d and %d bytes)", f, len(a), len(b))
		}
	}
	// The journal: old.txt's record keeps the whole original (state_dir is
	// not full), the new files are recorded as created; nothing partial.
	recs := e.history(t, "data://old.txt")
	if len(recs) != 1 || !recs[0].Kept {
		t.Fatalf("history of the overwrite that hit ENOSPC: %+v", recs)
	}
	for _, f := range []string{"big.bin", "append.txt"} {
		if recs := e.history(t, "data://"+f); len(recs) != 1 || recs[0].Before != "absent" {
			t.Errorf("history of %s, created by a write that hit ENOSPC: %+v", f, recs)
		}
	}
	st, _ := e.sourceState(t, "data")
	if strings.Contains(st, "DEGRADED") {
		t.Errorf("a full backing disk degraded the source (only state_dir's matters):\n%s", st)
	}
	// Room again: reverting brings back the whole original.
	must(t, os.Remove(e.m("data", "big.bin")))
	must(t, os.Remove(e.m("data", "append.txt")))
	e.revert(t, "data://old.txt")
	same(t, filepath.Join(backing, "old.txt"), original, 0o644)
}
