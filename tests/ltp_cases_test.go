package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ltpCases holds, as one script, what the Linux Test Project's syscall
// tests found the mount doing differently from a plain folder (session
// 31: mknod05); each line it prints must be the same on the mount as on
// the backing filesystem itself. It runs as root in $ROOT.
const ltpCases = `
set -e
cd "$ROOT"

# mknod05: root makes a set-group-id FIFO in a setgid folder of a group
# it is not in; it keeps the bit (root may) and takes the folder's group.
mkdir sgid
chown 65534:4242 sgid
chmod 2777 sgid
python3 -c 'import os; os.mknod("sgid/fifo", 0o12777)'
echo "root's fifo in a setgid folder: $(stat -c '%A %g' sgid/fifo)"
`

// ltpAgentCases is the part a caller other than root runs, in $W: it
// makes FIFOs and regular files with mknod, set-id bits asked for, and
// they keep them, as files made with open(O_CREAT) do; folders never
// take them. ltpAgentList lists what it made.
const (
	ltpAgentCases = `
set -e
cd "$W"
/usr/bin/python3 - <<'EOF'
import os
os.umask(0)
for name, mode in (("suid", 0o4755), ("sgid", 0o2755), ("both", 0o6755)):
    os.mkfifo(name + ".fifo", mode)
    os.mknod(name + ".file", 0o100000 | mode)
    os.close(os.open(name + ".created", os.O_CREAT | os.O_WRONLY, mode))
    os.mkdir(name + ".dir", mode)
EOF
`
	ltpAgentList = `shopt -s nullglob; cd "$W" && for f in *; do echo "$f: $(stat -c '%A %u:%g' "$f")"; done`
)

func TestLTPCasesLikePlainFolder(t *testing.T) {
	requireFUSE(t)
	requireTool(t, "setpriv", "util-linux")
	e := newEnv(t, "", src{slug: "data"})
	native := sharedTempDir(t)
	cases := func(root string) string {
		out := sh(t, ltpCases, "ROOT="+root)
		w := filepath.Join(root, "agent")
		must(t, os.Mkdir(w, 0o777))
		must(t, os.Chmod(w, os.ModeSticky|0o777))
		if o, err := run(t, 1001, ltpAgentCases, "W="+w); err != nil {
			t.Fatalf("the agent's cases in %s: %v\n%s", w, err, o)
		}
		return out + sh(t, ltpAgentList, "W="+w)
	}
	want := cases(native)
	for _, line := range []string{
		"root's fifo in a setgid folder: prwxr-sr-x 4242",
		"both.fifo: prwsr-sr-x 1001:1001",
		"both.file: -rwsr-sr-x 1001:1001",
	} {
		if !strings.Contains(want, line) {
			t.Fatalf("the plain folder does not show %q: the cases cannot tell anything:\n%s", line, want)
		}
	}
	if got := cases(e.m("data")); got != want {
		t.Errorf("the mount differs from a plain folder\n--- plain folder\n%s\n--- mount\n%s", want, got)
	}
}

// TestLTPAgentCasesHeldLikePlainFolder runs the agent's part in a view
// where every write of it is held: its view shows the set-id bits it
// asked for, and approving lands them in the backing folder.
func TestLTPAgentCasesHeldLikePlainFolder(t *testing.T) {
	e, view := heldEdgeEnv(t, "mkdir agent && chown 1001:1001 agent")
	native := filepath.Join(sharedTempDir(t), "agent")
	must(t, os.Mkdir(native, 0o777))
	must(t, os.Chown(native, 1001, 1001))
	for _, w := range []string{native, filepath.Join(view, "agent")} {
		if o, err := run(t, 1001, ltpAgentCases, "W="+w); err != nil {
			t.Fatalf("the agent's cases in %s: %v\n%s", w, err, o)
		}
	}
	want := sh(t, ltpAgentList, "W="+native)
	if !strings.Contains(want, "both.fifo: prwsr-sr-x 1001:1001") {
		t.Fatalf("the plain folder does not keep set-id bits on a FIFO: the case cannot tell anything:\n%s", want)
	}
	if got, err := run(t, 1001, ltpAgentList, "W="+filepath.Join(view, "agent")); err != nil || got != want {
		t.Errorf("the agent's held view differs from a plain folder (%v)\n--- plain folder\n%s\n--- view\n%s", err, want, got)
	}
	if got := sh(t, ltpAgentList, "W="+e.b("d", "agent")); got != "" {
		t.Errorf("held changes reached the backing folder before approval:\n%s", got)
	}
	if out, err := run(t, 0, binPath+" review approve --all -c "+e.cfg); err != nil {
		t.Fatalf("review approve --all: %v\n%s", err, out)
	}
	if got := sh(t, ltpAgentList, "W="+e.b("d", "agent")); got != want {
		t.Errorf("approved, the backing folder differs from a plain folder\n--- plain folder\n%s\n--- backing folder\n%s", want, got)
	}
}
