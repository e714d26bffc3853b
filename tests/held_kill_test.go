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

// TestHeldApproveSurvivesKill: the daemon is killed (SIGKILL) in the
// middle of approving a large held change — files replaced, made and
// removed — and started again. Nothing is lost or torn: every backing
// file is either as it was or as the agent left it, whole; what did not
// land is still held and listed, and what landed is not; no landing name
// (.neuralisfs-*) is left; and approving again lands exactly the agent's
// tree. An approval is the only time the daemon writes held work into
// the backing files, so a crash there is where a review could lose it.
func TestHeldApproveSurvivesKill(t *testing.T) {
	e, vd := heldEdgeEnv(t, "mkdir a b c && chmod 777 a b c")
	view := filepath.Dir(vd)
	const replaced, made, removed = 600, 200, 100
	old := func(i int) string { return fmt.Sprintf("backing %d\n", i) }
	agents := func(i int) string { return strings.Repeat(fmt.Sprintf("the agent's %d\n", i), 1+i%50) }
	name := func(i int) string { return fmt.Sprintf("%c/f%04d", "abc"[i%3], i) }
	for i := range replaced + removed {
		writeFile(t, e.b("d", name(i)), old(i), 0o666)
	}
	// The agent's change, held: replace the first files, remove the
	// last ones, make new ones.
	if out, err := run(t, 1001, fmt.Sprintf(`python3 - "$M" <<'PY'
import os, sys
os.chdir(sys.argv[1])
name = lambda i: "%%s/f%%04d" %% ("abc"[i %% 3], i)
for i in list(range(%d)) + list(range(%d, %d)):
    with open(name(i), "w") as f:
        f.write(("the agent's %%d\n" %% i) * (1 + i %% 50))
for i in range(%d, %d):
    os.remove(name(i))
PY`, replaced, replaced+removed, replaced+removed+made, replaced, replaced+removed), "M="+vd); err != nil {
		t.Fatalf("the agent's change: %v\n%s", err, out)
	}
	total := replaced + removed + made
	if items := reviewJSON(t, 0, e, "list"); len(items) != total {
		t.Fatalf("review list has %d changes, want %d", len(items), total)
	}
	// What the backing file i is as it was, and as the agent left it.
	wantBefore := func(i int) (string, bool) {
		if i < replaced+removed {
			return old(i), true
		}
		return "", false
	}
	wantAfter := func(i int) (string, bool) {
		if i >= replaced && i < replaced+removed {
			return "", false
		}
		return agents(i), true
	}
	state := func(i int) (string, bool) {
		b, err := os.ReadFile(e.b("d", name(i)))
		if os.IsNotExist(err) {
			return "", false
		}
		must(t, err)
		return string(b), true
	}
	landedCount := func() int {
		n := 0
		for i := range total {
			got, ok := state(i)
			if a, aok := wantAfter(i); got == a && ok == aok {
				if b, bok := wantBefore(i); got != b || ok != bok {
					n++
				}
			}
		}
		return n
	}

	approve := exec.Command(binPath, "review", "approve", "--all", "-c", e.cfg)
	approve.Dir = "/"
	var approveOut syncBuffer
	approve.Stdout, approve.Stderr = &approveOut, &approveOut
	must(t, approve.Start())
	deadline := time.Now().Add(time.Minute)
	landed := 0
	for landed < 50 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
		landed = landedCount()
	}
	e.kill()
	approve.Wait()
	landed = landedCount()
	t.Logf("killed with %d of %d changes landed", landed, total)
	if landed == 0 || landed == total {
		t.Fatalf("the kill did not cut the approval short (%d of %d changes landed)", landed, total)
	}
	syscall.Unmount(view, syscall.MNT_DETACH) // the killed daemon's view
	e.start()

	// Every file is whole: as it was, or as the agent left it.
	done := map[string]bool{}
	for i := range total {
		got, ok := state(i)
		b, bok := wantBefore(i)
		a, aok := wantAfter(i)
		switch {
		case got == a && ok == aok:
			done["d://"+name(i)] = true
		case got == b && ok == bok:
		default:
			t.Errorf("after the kill, %s is %q (exists %v): neither as it was nor as the agent left it", name(i), trunc(got), ok)
		}
	}
	leftovers := func(when string) {
		t.Helper()
		out := sh(t, `find "$B" -name '.neuralisfs-*'`, "B="+e.b("d"))
		if out != "" {
			t.Errorf("%s, landing names are left in the backing folder:\n%s", when, out)
		}
	}
	leftovers("after the kill and a restart")
	// What did not land is still held, and what landed is not.
	listed := map[string]bool{}
	for _, it := range reviewJSON(t, 0, e, "list") {
		listed[it.URI] = true
	}
	for i := range total {
		uri := "d://" + name(i)
		if done[uri] == listed[uri] {
			t.Errorf("after the restart %s is landed=%v and listed=%v: each change is one or the other", uri, done[uri], listed[uri])
		}
	}
	// The agent still sees its tree, landed or held.
	if out, err := run(t, 1001, `cd "$M" && find . -type f | sort | xargs md5sum | md5sum`, "M="+vd); err != nil {
		t.Errorf("the agent's tree after the restart: %v\n%s", err, out)
	}

	// Approving again lands the rest: the backing tree is the agent's.
	if out, err := run(t, 0, binPath+" review approve --all -c "+e.cfg); err != nil {
		t.Fatalf("approving again after the restart: %v\n%s", err, out)
	}
	for i := range total {
		got, ok := state(i)
		if a, aok := wantAfter(i); got != a || ok != aok {
			t.Errorf("after approving again, %s is %q (exists %v), want %q (exists %v)", name(i), trunc(got), ok, trunc(a), aok)
		}
	}
	if items := reviewJSON(t, 0, e, "list"); len(items) != 0 {
		t.Errorf("after approving again %d changes are still listed, first %+v", len(items), items[0])
	}
	leftovers("after approving again")
}

// trunc shortens s for a message.
func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
