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

// A .git file an agent writes can point anywhere on the host. Neither a
// checkout found inside a git source nor a child of a repos source may
// show another repository's branch or file names through .status.
func TestGitfileCannotReachOutsideTheSource(t *testing.T) {
	requireFUSE(t)
	base := t.TempDir()
	secret := filepath.Join(base, "secret")
	sh(t, "mkdir -p "+secret+" && cd "+secret+" && git init -q -b secret-branch && echo s > topsecret-name.txt && git add -A && git -c user.name=t -c user.email=t@x commit -q -m s")
	repo := filepath.Join(base, "repo")
	many := filepath.Join(base, "many")
	sh(t, "mkdir -p "+repo+" "+many+" && cd "+repo+" && git init -q && echo a > a.txt && git add -A && git -c user.name=t -c user.email=t@x commit -q -m a && chmod -R a+rwX "+repo+" "+many)
	e := newEnv(t, "", src{slug: "r", kind: "git", path: repo}, src{slug: "m", kind: "repos", path: many})
	out, err := run(t, 1001, `set -e
for d in "$R/evil" "$M/evil"; do
  mkdir -p "$d"
  echo "gitdir: $S/.git" > "$d/.git"
done
mkdir -p "$R/evil2/.git" && cp -r "$S/.git/." "$R/evil2/.git/" 2>/dev/null || true
echo "$S/.git" > "$R/evil2/.git/commondir"
`, "R="+e.m("r"), "M="+e.m("m"), "S="+secret)
	if err != nil {
		t.Fatalf("agent script: %v\n%s", err, out)
	}
	for _, p := range []string{e.m("r", "evil", ".status"), e.m("m", "evil", ".status"), e.m("r", "evil2", ".status"), e.m("r", ".status")} {
		b, _ := os.ReadFile(p)
		for _, leak := range []string{"secret-branch", "topsecret-name"} {
			if strings.Contains(string(b), leak) {
				t.Errorf("%s shows %q from a repository outside the source:\n%s", p, leak, b)
			}
		}
	}
}
