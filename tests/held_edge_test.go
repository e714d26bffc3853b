package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// heldEdgeEnv is a daemon whose agent (uid 1001) has every write held,
// with a view, over one source d seeded by seed (run as root in the
// backing folder, $D).
func heldEdgeEnv(t *testing.T, seed string) (*env, string) {
	t.Helper()
	requireFUSE(t)
	base := sharedTempDir(t)
	view := filepath.Join(base, "view")
	must(t, os.Mkdir(view, 0o755))
	e := newEnv(t, heldConfig(view), src{slug: "d"})
	sh(t, "set -e\ncd \"$D\"\n"+seed, "D="+e.b("d"))
	return e, filepath.Join(view, "d")
}

// A folder the agent first writes in is copied up (made in its layer):
// it keeps its inode number, so a process working inside it keeps its
// working folder. (pjdfstest run from a held folder found it: after the
// first create in the folder, getcwd answered ENOENT and `cd ..` failed,
// because the kernel saw a new inode under the folder's name and dropped
// the one the process was in.)
func TestHeldFolderKeepsItsInodeWhenCopiedUp(t *testing.T) {
	e, view := heldEdgeEnv(t, "mkdir -p w1/sub w2 && echo a > w1/a && chmod -R 0777 .")
	script := `set -e
cd "$M/$F"
before=$(stat -c %i .)
echo x > new.txt
mkdir made
# A fresh walk of the name (zero timeouts in the main mount; the view
# hears of the change from the main mount's write).
after=$(stat -c %i "$M/$F")
test "$before" = "$after" || { echo "inode $before became $after"; exit 1; }
/usr/bin/python3 -c 'import os; print(os.getcwd())'
ls .. >/dev/null
ls -i "$M" | grep -q " $F\$"
cd ..
test "$(stat -c %i "$F")" = "$before"
`
	for _, at := range []struct{ m, f string }{{e.m("d"), "w1"}, {view, "w2"}} {
		out, err := run(t, 1001, script, "M="+at.m, "F="+at.f)
		if err != nil {
			t.Errorf("working inside %s/%s as the agent: %v\n%s", at.m, at.f, err, out)
		}
		if !strings.Contains(out, at.f) {
			t.Errorf("getcwd in %s/%s printed %q", at.m, at.f, out)
		}
	}
	// The backing folders did not change.
	if _, err := os.Stat(e.b("d", "w1", "new.txt")); err == nil {
		t.Error("the held create reached the backing folder")
	}
}
