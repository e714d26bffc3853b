package tests

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestHeldChmodOfAFolderAboveAMadeOneIsApproved: a chmod of a folder and
// a folder made in it, holding a file with another name beside it, are
// approved by --all. Before, the chmod carried the made folder's names,
// and their other names as links, which approving a chmod does not
// count: it failed as changed since listed every time, and --all
// stopped there (found by a data-integrity pass with fsstress).
func TestHeldChmodOfAFolderAboveAMadeOneIsApproved(t *testing.T) {
	e, view := heldEdgeEnv(t, `mkdir X && echo keep > X/keep.txt && chown -R 1001:1001 X`)
	if out, err := run(t, 1001, `set -e; cd "$V"; chmod 700 X; mkdir X/d; echo hello > X/d/f; ln X/d/f X/f2`, "V="+view); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	if out := sh(t, binPath+" review approve --all -c "+e.cfg); strings.Contains(out, "left held") {
		t.Errorf("approve --all left changes held:\n%s", out)
	}
	if list := sh(t, binPath+" review list -c "+e.cfg); !strings.Contains(list, "no held changes") {
		t.Errorf("held after approve --all:\n%s", list)
	}
	var x, f, f2 syscall.Stat_t
	must(t, syscall.Stat(e.b("d", "X"), &x))
	must(t, syscall.Stat(e.b("d", "X/d/f"), &f))
	must(t, syscall.Stat(e.b("d", "X/f2"), &f2))
	if x.Mode&0o7777 != 0o700 || f.Ino != f2.Ino || f.Nlink != 2 {
		t.Errorf("backing after approval: X mode %04o, X/d/f ino %d nlink %d, X/f2 ino %d", x.Mode&0o7777, f.Ino, f.Nlink, f2.Ino)
	}
	if b, err := os.ReadFile(e.b("d", "X/f2")); err != nil || string(b) != "hello\n" {
		t.Errorf("X/f2 = %q, %v", b, err)
	}
}

// TestHeldApproveAllLeavesConflictsHeld: approve --all lands every unit
// but those whose backing files moved since they were made, which it
// leaves held and names. Before, one conflicting unit refused the whole
// --all: an agent holding a change to a file rewritten often stalled
// every approval (found by a red-team pass).
func TestHeldApproveAllLeavesConflictsHeld(t *testing.T) {
	e, view := heldEdgeEnv(t, `echo a > a.txt && echo b > b.txt && chmod 666 a.txt b.txt`)
	if out, err := run(t, 1001, `set -e; cd "$V"; echo agent-a > a.txt; echo agent-b > b.txt`, "V="+view); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	writeFile(t, e.b("d", "a.txt"), "owner\n", 0o666)
	out := sh(t, binPath+" review approve --all -c "+e.cfg)
	if !strings.Contains(out, "approved") || !strings.Contains(out, "left held") || !strings.Contains(out, "d://a.txt") {
		t.Errorf("approve --all with one conflict:\n%s", out)
	}
	for name, want := range map[string]string{"a.txt": "owner\n", "b.txt": "agent-b\n"} {
		if b, _ := os.ReadFile(e.b("d", name)); string(b) != want {
			t.Errorf("%s = %q after approve --all; want %q", name, b, want)
		}
	}
	if list := sh(t, binPath+" review list -c "+e.cfg); !strings.Contains(list, "d://a.txt") || strings.Contains(list, "d://b.txt") {
		t.Errorf("held after approve --all:\n%s", list)
	}
}

// TestHeldLinkedFIFOsStayOneFile: two names of a held FIFO are one FIFO
// once approved, as in the agent's view. Before, each name became a FIFO
// of its own (found by a data-integrity pass with fsstress, on linked
// device nodes).
func TestHeldLinkedFIFOsStayOneFile(t *testing.T) {
	e, view := heldEdgeEnv(t, `mkdir f && chmod 777 f`)
	if out, err := run(t, 1001, `set -e; cd "$V/f"; mkfifo p; ln p q; mkdir sub; ln p sub/r; stat -c '%h %i' p q sub/r`, "V="+view); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	sh(t, binPath+" review approve --all -c "+e.cfg)
	var p, q, r syscall.Stat_t
	must(t, syscall.Lstat(e.b("d", "f/p"), &p))
	must(t, syscall.Lstat(e.b("d", "f/q"), &q))
	must(t, syscall.Lstat(e.b("d", "f/sub/r"), &r))
	if p.Mode&syscall.S_IFMT != syscall.S_IFIFO || p.Ino != q.Ino || p.Ino != r.Ino || p.Nlink != 3 {
		t.Errorf("after approval: p %o ino %d nlink %d, q ino %d, sub/r ino %d; want one FIFO of three names", p.Mode, p.Ino, p.Nlink, q.Ino, r.Ino)
	}
	if list := sh(t, binPath+" review list -c "+e.cfg); !strings.Contains(list, "no held changes") {
		t.Errorf("held after approve --all:\n%s", list)
	}
}
