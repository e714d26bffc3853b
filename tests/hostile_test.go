package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An agent that makes FIFOs where the daemon reads files (.gitignore, an
// exclude file, a tracked file, a file the indexer will read) must not hang
// anything: .status answers, search still finds new writes, the journal
// keeps working, and other callers are served.
func TestFIFOsDoNotHangTheDaemon(t *testing.T) {
	requireFUSE(t)
	repo := filepath.Join(t.TempDir(), "repo")
	must(t, os.MkdirAll(filepath.Join(repo, "sub"), 0o777))
	sh(t, "cd "+repo+" && git init -q && echo a > a.txt && echo b > sub/b.txt && git add -A && git -c user.name=t -c user.email=t@x commit -q -m a && chmod -R a+rwX .")
	e := newEnv(t, "", src{slug: "r", kind: "git", path: repo})
	out, err := run(t, 1001, `set -e
cd "$M"
mkfifo .gitignore sub/.gitignore notes.txt
rm sub/b.txt && mkfifo sub/b.txt
mkfifo .git/info/exclude 2>/dev/null || true
echo "hostile but searchable zebracorn" > later.txt
`, "M="+e.m("r"))
	if err != nil {
		t.Fatalf("agent script: %v\n%s", err, out)
	}
	read := func(p string) (string, error) {
		type res struct {
			b   []byte
			err error
		}
		ch := make(chan res, 1)
		go func() {
			b, err := os.ReadFile(p)
			ch <- res{b, err}
		}()
		select {
		case r := <-ch:
			return string(r.b), r.err
		case <-time.After(20 * time.Second):
			t.Fatalf("reading %s hung", p)
			return "", nil
		}
	}
	for _, d := range []string{"", "sub"} {
		got, err := read(filepath.Join(e.m("r", d), ".status"))
		if err != nil {
			t.Fatalf("%s/.status: %v", d, err)
		}
		if !strings.HasPrefix(got, "## ") {
			t.Errorf("%s/.status does not start with a branch line: %q", d, got)
		}
	}
	e.found(t, "zebracorn", "r://later.txt")
	// The mount still serves everyone.
	if _, err := read(e.m("r", "a.txt")); err != nil {
		t.Errorf("reading a.txt after the FIFOs: %v", err)
	}
}
