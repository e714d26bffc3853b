package tests

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gitEnv is the environment for the git CLI in tests: no user or system
// config, fixed identities and dates.
func gitEnv() []string {
	return []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@x",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@x", "GIT_AUTHOR_DATE=2020-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2020-01-01T00:00:00Z"}
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), gitEnv()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return string(out)
}

// makeRepo builds a checkout in dir with many kinds of change.
func makeRepo(t *testing.T, dir string) {
	t.Helper()
	script := `set -e
cd "$DIR"
git init -q -b main
git config core.quotePath true
mkdir -p src/deep/er docs "with space" "ünïcode"
for i in 1 2 3 4 5; do echo "file $i" > src/f$i.txt; done
echo deep > src/deep/er/d.txt
echo doc > docs/readme.md
echo s > "with space/a b.txt"
echo u > "ünïcode/ü.txt"
echo 'q' > 'src/quo"te.txt'
printf 'ignored.log\nbuild/\n' > .gitignore
ln -s src/f1.txt link
git add -A
git commit -q -m first
git clone -q --bare . ../remote.git
git remote add origin ../remote.git
git fetch -q origin
git branch -q -u origin/main
echo more >> src/f1.txt
git add src/f1.txt
echo again >> src/f1.txt
echo changed >> src/f2.txt
rm src/f3.txt
git mv src/f4.txt src/f4-renamed.txt
echo new > src/added.txt && git add src/added.txt
mkdir -p untracked/sub && echo u > untracked/sub/x.txt
echo u > src/deep/new.txt
echo ig > ignored.log
mkdir -p build && echo b > build/out.o
echo excluded > secret.local && echo 'secret.local' >> .git/info/exclude
rm link && echo notalink > link
echo doc2 >> docs/readme.md && git commit -q -m second -- docs/readme.md
`
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), append(gitEnv(), "DIR="+dir)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("making the repo: %v\n%s", err, out)
	}
}

// statusDirs are the folders whose .status the differential test compares.
var statusDirs = []string{"", "src", "src/deep", "src/deep/er", "docs", "with space", "ünïcode", "untracked", "untracked/sub"}

func TestStatusMatchesGitCLI(t *testing.T) {
	requireFUSE(t)
	base := t.TempDir()
	repo := filepath.Join(base, "repo")
	must(t, os.Mkdir(repo, 0o755))
	makeRepo(t, repo)
	e := newEnv(t, "", src{slug: "r", kind: "git", path: repo})
	compare := func(when string) {
		t.Helper()
		compareStatus(t, e, "r", repo, when, statusDirs)
	}
	compare("initial")
	// git on the mount sees what git on the checkout sees: the virtual
	// names answer by name but are not listed, so they are neither
	// untracked files to git nor walked by find (and .revs/ answers
	// ENOENT, not EIO, for names that are no revision: git looks up
	// .gitignore in every folder it walks).
	if onMount, onDisk := gitOut(t, e.m("r"), "status", "--porcelain=v1", "-uall"), gitOut(t, repo, "status", "--porcelain=v1", "-uall"); onMount != onDisk {
		t.Errorf("git status on the mount differs from the checkout's:\n--- mount\n%s--- checkout\n%s", onMount, onDisk)
	}
	if out := sh(t, `cd "$M" && find . -name .status -o -name .revs; ls -a; ls -a src`, "M="+e.m("r")); strings.Contains(out, ".status") || strings.Contains(out, ".revs") {
		t.Errorf("virtual names are listed:\n%s", out)
	}
	if _, err := os.ReadFile(e.m("r", "src", ".status")); err != nil {
		t.Errorf("src/.status by name: %v", err)
	}
	for _, name := range []string{".gitignore", ".git", "no-such-branch", "HEAD~99"} {
		if _, err := os.Lstat(filepath.Join(e.m("r"), ".revs", name)); !errors.Is(err, syscall.ENOENT) {
			t.Errorf(".revs/%s: %v; want ENOENT", name, err)
		}
	}
	// A write through the mount shows in the next read.
	must(t, os.WriteFile(e.m("r", "src", "f5.txt"), []byte("edited through the mount\n"), 0o644))
	must(t, os.WriteFile(e.m("r", "docs", "new.md"), []byte("new\n"), 0o644))
	must(t, os.Remove(e.m("r", "src", "f1.txt")))
	compare("after writes through the mount")
	// A mode change through the mount shows in the very next read, as a
	// write does (before, only once the watcher reported it).
	must(t, os.Chmod(e.m("r", "src", "f2.txt"), 0o755))
	must(t, os.Chmod(e.m("r", "src", "deep", "er", "d.txt"), 0o755))
	for _, d := range []string{"", "src", "src/deep/er"} {
		want := gitOut(t, filepath.Join(repo, d), "status", "--porcelain=v1", "--branch", "--", ".")
		if got, err := os.ReadFile(filepath.Join(e.m("r", d), ".status")); err != nil || string(got) != want {
			t.Errorf("right after chmod +x through the mount: %q/.status: %v\n--- git\n%s--- mount\n%s", d, err, want, got)
		}
	}
	// Changes git makes (through the mount: git runs inside it).
	cmd := exec.Command("git", "-C", e.m("r"), "add", "-A")
	cmd.Env = append(os.Environ(), gitEnv()...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git add on the mount: %v %s", err, out)
	}
	compare("after git add -A on the mount")
	if files := gitOut(t, repo, "ls-files"); strings.Contains(files, ".status") || strings.Contains(files, ".revs") {
		t.Errorf("git add -A on the mount added virtual files:\n%s", files)
	}
	// Detached HEAD, behind and ahead.
	gitOut(t, repo, "commit", "-q", "-m", "third")
	compare("ahead of upstream")
	gitOut(t, repo, "checkout", "-q", "--detach", "HEAD~1")
	compare("detached")
	// .status is read-only and never shadows a write.
	if err := os.WriteFile(filepath.Join(e.m("r"), ".status"), []byte("x"), 0o644); err == nil {
		t.Errorf("wrote to .status")
	}
	// Ignored and untracked files are not in the index of git's .status... and
	// .status is not inside .git.
	if _, err := os.Stat(filepath.Join(e.m("r"), ".git", ".status")); err == nil {
		t.Errorf(".git/ has a .status")
	}
}

func TestStatusHidesWhatTheCallerCannotRead(t *testing.T) {
	requireFUSE(t)
	repo := filepath.Join(t.TempDir(), "repo")
	must(t, os.Mkdir(repo, 0o755))
	os.Chmod(filepath.Dir(repo), 0o755)
	makeRepo(t, repo)
	sh(t, "echo "+canary+" > "+filepath.Join(repo, "src", "deep", canary+".txt")+"; chmod -R a+rwX "+repo)
	e := newEnv(t, `
[[principal]]
name = "agent"
uids = [1001]
roles = ["agent"]

[[rule]]
uri = "r://src/deep/**"
who = ["role:agent"]
deny = ["read"]
`, src{slug: "r", kind: "git", path: repo})
	own, err := os.ReadFile(filepath.Join(e.m("r"), ".status"))
	must(t, err)
	if !strings.Contains(string(own), canary) || !strings.Contains(string(own), "src/deep/") {
		t.Fatalf("owner's .status lacks the untracked file:\n%s", own)
	}
	out := agent(t, "cat "+filepath.Join(e.m("r"), ".status")+" "+filepath.Join(e.m("r", "src"), ".status"))
	if strings.Contains(out, "src/deep") {
		t.Errorf("agent's .status shows a hidden folder:\n%s", out)
	}
	if !strings.Contains(out, "src/f2.txt") {
		t.Errorf("agent's .status lacks what it may read:\n%s", out)
	}
	// Commit trees obey the same rules: src/deep/ is hidden in every commit.
	gitOut(t, repo, "add", "-A")
	gitOut(t, repo, "commit", "-q", "-m", "with the canary")
	revs := filepath.Join(e.m("r"), ".revs", "main")
	out = agent(t, "ls "+filepath.Join(revs, "src")+"; cat "+filepath.Join(revs, "src", "deep")+"/* 2>&1; stat "+filepath.Join(revs, "src", "deep")+" 2>&1; find "+revs+" 2>&1 | grep -c deep")
	if !strings.Contains(out, "No such file") || strings.Contains(out, "deep\n") {
		t.Errorf("agent sees src/deep in .revs:\n%s", out)
	}
	if own := sh(t, "cat "+filepath.Join(revs, "src", "deep", canary+".txt")); !strings.Contains(own, canary) {
		t.Errorf("owner cannot read the committed file in .revs: %q", own)
	}
}

func TestRevsAndPinnedTreesMatchGitShow(t *testing.T) {
	requireFUSE(t)
	repo := filepath.Join(t.TempDir(), "repo")
	must(t, os.Mkdir(repo, 0o755))
	makeRepo(t, repo)
	gitOut(t, repo, "gc", "-q") // packed objects with deltas
	sha := strings.TrimSpace(gitOut(t, repo, "rev-parse", "HEAD~1"))
	bare := filepath.Join(filepath.Dir(repo), "remote.git")
	e := newEnv(t, "",
		src{slug: "r", kind: "git", path: repo},
		src{slug: "pin", kind: "git-pinned", path: bare, extra: `rev = "main"`})
	files := strings.Fields(gitOut(t, repo, "ls-tree", "-r", "--name-only", "-z", sha))
	files = strings.Split(strings.Join(files, " "), "\x00")
	check := func(root, rev string) {
		t.Helper()
		n := 0
		for _, f := range files {
			if f == "" {
				continue
			}
			want := gitOut(t, repo, "show", rev+":"+f)
			p := filepath.Join(root, f)
			fi, err := os.Lstat(p)
			if err != nil {
				t.Errorf("%s: %v", p, err)
				continue
			}
			var got string
			if fi.Mode()&os.ModeSymlink != 0 {
				got, _ = os.Readlink(p)
			} else {
				b, _ := os.ReadFile(p)
				got = string(b)
			}
			if got != want {
				t.Errorf("%s differs from git show %s:%s", p, rev, f)
			}
			n++
		}
		if n == 0 {
			t.Errorf("no files compared under %s", root)
		}
		if err := os.WriteFile(filepath.Join(root, "src", "f1.txt"), []byte("x"), 0o644); err == nil {
			t.Errorf("wrote into a commit tree %s", root)
		}
	}
	check(filepath.Join(e.m("r"), ".revs", sha), sha)
	check(filepath.Join(e.m("r"), ".revs", sha[:10]), sha)
	check(e.m("pin"), strings.TrimSpace(gitOut(t, bare, "rev-parse", "main")))
	ents, err := os.ReadDir(filepath.Join(e.m("r"), ".revs"))
	must(t, err)
	if len(ents) == 0 || ents[0].Name() != "main" {
		t.Errorf(".revs lists %v; want the branch main", ents)
	}
	srcs, _ := os.ReadFile(filepath.Join(e.mnt, ".neuralis", "sources"))
	if !strings.Contains(string(srcs), "pin\tgit-pinned\tAVAILABLE") || !strings.Contains(string(srcs), "WORKTREE_MODIFIED") {
		t.Errorf(".neuralis/sources:\n%s", srcs)
	}
}

func TestReposSourceShowsEachCheckout(t *testing.T) {
	requireFUSE(t)
	base := t.TempDir()
	repos := filepath.Join(base, "repos")
	for _, name := range []string{"one", "two"} {
		dir := filepath.Join(repos, name)
		must(t, os.MkdirAll(dir, 0o755))
		gitOut(t, dir, "init", "-q", "-b", "main")
		writeFile(t, filepath.Join(dir, "f.txt"), name+"\n", 0o644)
		gitOut(t, dir, "add", "-A")
		gitOut(t, dir, "commit", "-q", "-m", "c")
		writeFile(t, filepath.Join(dir, "untracked.txt"), "u\n", 0o644)
	}
	must(t, os.Mkdir(filepath.Join(repos, "plain"), 0o755))
	// A checkout symlinked from outside the source is not one of its checkouts.
	outside := filepath.Join(base, "outside")
	must(t, os.MkdirAll(outside, 0o755))
	gitOut(t, outside, "init", "-q")
	must(t, os.Symlink(outside, filepath.Join(repos, "linked")))
	e := newEnv(t, "", src{slug: "rs", kind: "repos", path: repos})
	for _, name := range []string{"one", "two"} {
		got, err := os.ReadFile(filepath.Join(e.m("rs", name), ".status"))
		want := gitOut(t, filepath.Join(repos, name), "status", "--porcelain=v1", "--branch", "--", ".")
		if err != nil || string(got) != want {
			t.Errorf("%s/.status = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, p := range []string{filepath.Join(e.m("rs"), ".status"), filepath.Join(e.m("rs", "plain"), ".status"), filepath.Join(e.m("rs", "linked"), ".status")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists; only checkouts have a .status", p)
		}
	}
}

// A real file named like a virtual one is shadowed, not lost: it stays on
// disk and .neuralis/sources names it.
func TestShadowedBackingFileIsReported(t *testing.T) {
	requireFUSE(t)
	repo := filepath.Join(t.TempDir(), "repo")
	must(t, os.Mkdir(repo, 0o755))
	gitOut(t, repo, "init", "-q", "-b", "main")
	writeFile(t, filepath.Join(repo, ".status"), "my own notes\n", 0o644)
	e := newEnv(t, "", src{slug: "r", kind: "git", path: repo})
	b, _ := os.ReadFile(filepath.Join(e.m("r"), ".status"))
	if !strings.HasPrefix(string(b), "## ") {
		t.Errorf(".status is not the virtual one: %q", b)
	}
	if err := os.WriteFile(filepath.Join(e.m("r"), ".status"), []byte("x"), 0o644); err == nil {
		t.Errorf("overwrote the shadowed name through the mount")
	}
	os.ReadDir(e.m("r"))
	srcs, _ := os.ReadFile(filepath.Join(e.mnt, ".neuralis", "sources"))
	if !strings.Contains(string(srcs), "hidden by virtual names: .status") {
		t.Errorf(".neuralis/sources does not report the shadowed file:\n%s", srcs)
	}
	if b, _ := os.ReadFile(filepath.Join(repo, ".status")); string(b) != "my own notes\n" {
		t.Errorf("the backing file changed: %q", b)
	}
}

// A submodule and a clone inside a checkout answer for themselves, as
// git -C <that folder> does, while the outer .status shows them as the
// outer repository sees them.
func TestStatusOfNestedCheckoutsMatchesGitCLI(t *testing.T) {
	requireFUSE(t)
	base := t.TempDir()
	lib := filepath.Join(base, "lib")
	repo := filepath.Join(base, "repo")
	sh(t, `set -e
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@x GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@x
git init -q -b main "$LIB" && cd "$LIB" && echo l > l.txt && git add -A && git commit -q -m l
git init -q -b main "$REPO" && cd "$REPO" && echo a > a.txt && git add -A && git commit -q -m a
git -c protocol.file.allow=always submodule add -q "$LIB" sub
git commit -q -m sub
git clone -q "$LIB" inner
echo changed >> sub/l.txt
echo new > sub/untracked.txt
echo more >> inner/l.txt
`, "LIB="+lib, "REPO="+repo)
	e := newEnv(t, "", src{slug: "r", kind: "git", path: repo})
	for _, d := range []string{"", "sub", "inner"} {
		want := gitOut(t, filepath.Join(repo, d), "status", "--porcelain=v1", "--branch", "--", ".")
		got, err := os.ReadFile(filepath.Join(e.m("r", d), ".status"))
		if err != nil {
			t.Fatalf("%s/.status: %v", d, err)
		}
		if string(got) != want {
			t.Errorf("%s/.status differs from git -C %s status\n--- git\n%s--- mount\n%s", d, d, want, got)
		}
	}
	// A write through the mount inside the inner clone shows in its .status.
	must(t, os.WriteFile(e.m("r", "inner", "n.txt"), []byte("n\n"), 0o644))
	want := gitOut(t, filepath.Join(repo, "inner"), "status", "--porcelain=v1", "--branch", "--", ".")
	got, _ := os.ReadFile(e.m("r", "inner", ".status"))
	if string(got) != want {
		t.Errorf("inner/.status after a write\n--- git\n%s--- mount\n%s", want, got)
	}
}

// compareStatus compares <slug>/<d>/.status on the mount with git status
// run in repo/<d>, for each folder of dirs that is there; the mount may
// need a moment to see what git just wrote to the index.
func compareStatus(t *testing.T, e *env, slug, repo, when string, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		if fi, err := os.Stat(filepath.Join(repo, d)); err != nil || !fi.IsDir() {
			continue // checked out away, or not a folder now
		}
		want := gitOut(t, filepath.Join(repo, d), "status", "--porcelain=v1", "--branch", "--", ".")
		var got []byte
		deadline := time.Now().Add(3 * time.Second)
		for {
			var err error
			got, err = os.ReadFile(filepath.Join(e.m(slug, d), ".status"))
			if err != nil {
				t.Fatalf("%s: read %q/.status: %v", when, d, err)
			}
			if string(got) == want || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if string(got) != want {
			t.Errorf("%s: %q/.status differs from git status\n--- git\n%s--- mount\n%s", when, d, want, got)
		}
	}
}

// nestedCloneEnv mounts, as git source r, a repository made by
// repoFiles (shell run in it before its commit) and then more (run in it
// after; $LIB is a library repository made by libFiles, to clone from).
// It returns the mount and the repository's folder.
func nestedCloneEnv(t *testing.T, libFiles, repoFiles, more string) (*env, string) {
	requireFUSE(t)
	base := t.TempDir()
	lib := filepath.Join(base, "lib")
	repo := filepath.Join(base, "repo")
	sh(t, `set -e
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@x GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@x
git init -q -b main "$LIB" && cd "$LIB" && `+libFiles+` && git add -A && git commit -q -m l
git init -q -b main "$REPO" && cd "$REPO" && `+repoFiles+` && git add -A && git commit -q -m a
`+more+"\n", "LIB="+lib, "REPO="+repo)
	return newEnv(t, "", src{slug: "r", kind: "git", path: repo}), repo
}

// replaceXByY moves x away (to old) and y into its place, through the
// mount.
func replaceXByY(t *testing.T, e *env) {
	t.Helper()
	must(t, os.Rename(e.m("r", "x"), e.m("r", "old")))
	must(t, os.Rename(e.m("r", "y"), e.m("r", "x")))
}

// A folder moved into place through the mount, holding a clone deeper
// down, after .status was read at the same paths when they were plain
// folders of the outer repository: every folder the move brought answers
// as git -C does there now (what was found at and below the moved name is
// looked at again), and a write inside the clone shows in its .status.
func TestStatusAfterACloneIsMovedUnderAReadFolder(t *testing.T) {
	e, repo := nestedCloneEnv(t, "mkdir deeper && echo l > deeper/l.txt",
		"mkdir -p x/sub/deeper && echo a > x/sub/deeper/a.txt",
		`mkdir -p y && git clone -q "$LIB" y/sub && echo more >> y/sub/deeper/l.txt`)
	dirs := []string{"x", "x/sub", "x/sub/deeper"}
	compareStatus(t, e, "r", repo, "before the move", dirs)
	replaceXByY(t, e)
	compareStatus(t, e, "r", repo, "after the clone moved in", append(dirs, "old/sub/deeper"))
	must(t, os.WriteFile(e.m("r", "x", "sub", "deeper", "n.txt"), []byte("n\n"), 0o644))
	compareStatus(t, e, "r", repo, "after a write inside the clone", dirs)
}

// The other way round, and deeper: a clone at x/s1/s2 whose .status was
// read only in its folder d (so nothing above the clone was looked at),
// then x replaced through the mount by a tree where s1/s2/d is a plain
// folder of the outer repository. The record of the clone must go with
// x, though no folder between x and it was ever recorded.
func TestStatusAfterACloneDeepBelowIsReplaced(t *testing.T) {
	e, repo := nestedCloneEnv(t, "mkdir d && echo l > d/l.txt",
		"mkdir -p y/s1/s2/d && echo a > y/s1/s2/d/a.txt",
		`mkdir -p x/s1 && git clone -q "$LIB" x/s1/s2 && echo more >> x/s1/s2/d/l.txt`)
	compareStatus(t, e, "r", repo, "the clone's folder", []string{"x/s1/s2/d"})
	replaceXByY(t, e)
	compareStatus(t, e, "r", repo, "after the clone was replaced", []string{"x/s1/s2/d", "old/s1/s2/d"})
}
