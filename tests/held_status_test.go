package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An agent whose writes are held reads a .status that describes the
// worktree it sees — its edits, deletions, renames, new folders, its own
// .gitignore, git add and git commit — byte for byte what the git CLI
// prints when the agent runs it on the same mount, in its view and in the
// main mount; the owner and another principal keep seeing the backing
// checkout's status.
func TestHeldStatusIsTheAgentsWorktree(t *testing.T) {
	requireFUSE(t)
	requireTool(t, "bwrap", "bubblewrap")
	e, _, view, repo := heldRepoEnv(t)

	gitArgs := `git -c safe.directory='*' --no-optional-locks`
	env := append(gitEnv(), "LC_ALL=C")
	// statusPair returns .status and git's own status of folder dir as
	// uid, inside a sandbox bound to mnt (at /work) when box is set.
	statusPair := func(uid int, mnt, dir string, box bool) (string, string) {
		t.Helper()
		at, prefix := filepath.Join(mnt, "g", dir), ""
		if box {
			at, prefix = filepath.Join("/work/g", dir), sandbox(mnt, "/work")
		}
		script := prefix + `bash -c 'cat "$D/.status"; echo "=== git"; ` + gitArgs + ` -C "$D" status --porcelain=v1 --branch -- .'`
		out, err := run(t, uid, script, append(env, "D="+at)...)
		if err != nil {
			t.Fatalf("status of %s as uid %d: %v\n%s", at, uid, err, out)
		}
		st, g, ok := strings.Cut(out, "=== git\n")
		if !ok {
			t.Fatalf("status of %s as uid %d: no git output:\n%s", at, uid, out)
		}
		return st, g
	}
	dirs := []string{"", "src", "src/deep", "docs", "untracked", "agentdir", "agentdir/sub", "own"}
	exists := func(uid int, p string) bool {
		_, err := run(t, uid, `test -d "$P"`, "P="+p)
		return err == nil
	}
	// compare checks every folder as uid in mnt against git there.
	compare := func(step string, uid int, mnt string, box bool) map[string]string {
		t.Helper()
		got := map[string]string{}
		for _, d := range dirs {
			if !exists(uid, filepath.Join(mnt, "g", d)) {
				continue
			}
			st, g := statusPair(uid, mnt, d, box)
			if st != g {
				t.Errorf("%s: .status of g/%s as uid %d in %s differs from git status there:\n--- .status\n%s--- git\n%s", step, d, uid, mnt, st, g)
			}
			got[d] = st
		}
		return got
	}

	owner := compare("before", 0, e.mnt, false)
	if owner[""] == "" || !strings.Contains(owner[""], "src/f2.txt") {
		t.Fatalf("the backing checkout's status is not what makeRepo made:\n%s", owner[""])
	}
	backing := gitOut(t, repo, "-c", "safe.directory=*", "--no-optional-locks", "status", "--porcelain=v1", "--branch")
	if owner[""] != backing {
		t.Fatalf("root's .status differs from git status on the backing checkout:\n%s\nwant\n%s", owner[""], backing)
	}

	agent := func(script string) {
		t.Helper()
		out, err := run(t, 1001, sandbox(view, "/work")+`bash -c 'set -e; cd /work/g; `+strings.ReplaceAll(script, "'", `'\''`)+`'`, env...)
		if err != nil {
			t.Fatalf("agent: %v\n%s\n%s", err, script, out)
		}
	}
	check := func(step string) {
		t.Helper()
		views := compare(step+" (view)", 1001, view, true)
		mains := compare(step+" (main mount)", 1001, e.mnt, false)
		for d, st := range views {
			if mains[d] != st {
				t.Errorf("%s: the agent's .status of g/%s differs between its view and the main mount:\n%s\n---\n%s", step, d, st, mains[d])
			}
		}
		for _, uid := range []int{0, 1002} {
			for d, st := range compare(step+" (others)", uid, e.mnt, false) {
				if st != owner[d] {
					t.Errorf("%s: uid %d's .status of g/%s changed with the agent's held writes:\n%s\nwant\n%s", step, uid, d, st, owner[d])
				}
			}
		}
		if now := gitOut(t, repo, "-c", "safe.directory=*", "--no-optional-locks", "status", "--porcelain=v1", "--branch"); now != backing {
			t.Errorf("%s: the backing checkout changed:\n%s", step, now)
		}
	}

	agent(`echo edit >> src/f5.txt
rm src/f2.txt
mkdir -p agentdir/sub && echo a > agentdir/sub/a.txt
mv docs/readme.md docs/README.md
chmod +x src/deep/er/d.txt
echo y > build/new.o
ln -s src/f5.txt newlink
rm -rf untracked/sub`)
	check("worktree edits")
	views := compare("worktree edits (view)", 1001, view, true)
	for _, want := range []string{" M src/f5.txt", " D src/f2.txt", "?? agentdir/", " D docs/readme.md", "?? docs/README.md", " M src/deep/er/d.txt", "?? newlink"} {
		if !strings.Contains(views[""], want+"\n") {
			t.Errorf("the agent's .status lacks %q:\n%s", want, views[""])
		}
	}

	agent(`printf 'ignored.log\nbuild/\nagentdir/\n' > .gitignore
mkdir own && cd own && git init -q && echo hi > f && git add f && git -c user.name=a -c user.email=a@x commit -qm m`)
	check("its own .gitignore and a repository of its own")

	agent(`git -c safe.directory='*' add -A src docs && git -c safe.directory='*' -c user.name=a -c user.email=a@x commit -qm "agent's commit" && echo later >> src/f1.txt`)
	check("its own git add and commit")
	views = compare("after the commit (view)", 1001, view, true)
	if !strings.Contains(views[""], "## main...origin/main [ahead 2]") {
		t.Errorf("the agent's commit does not show in its .status header:\n%s", views[""])
	}
}

// An agent whose writes are held cannot make its .status read files
// outside the source: a HEAD that climbs out with "..", refs made a
// symlink to a host folder and a symlinked .gitignore answer the same
// whether the host file they name exists or not.
func TestHeldStatusReadsNothingOutside(t *testing.T) {
	requireFUSE(t)
	e, base, view, repo := heldRepoEnv(t)
	hostDir := filepath.Join(base, "host")
	must(t, os.Mkdir(hostDir, 0o755))
	writeFile(t, filepath.Join(hostDir, "there"), "0123456789012345678901234567890123456789\n", 0o644)
	writeFile(t, filepath.Join(hostDir, "ignore"), "*\n", 0o644)
	climb := strings.Repeat("../", strings.Count(repo, "/")+3) + strings.TrimPrefix(hostDir, "/")

	// status reads .status in the view as the agent after script ran
	// there, and restores the held .git afterwards. HEAD is saved with
	// cat, not cp: restored to its original bytes, the layer's copy goes
	// at the release that follows the close (README, "Copies that
	// changed nothing go"), and cp, racing that, may find two inode
	// numbers and skip the file.
	status := func(script string) string {
		t.Helper()
		out, err := run(t, 1001, `set -e; cd "$V/g"; cat .git/HEAD > /tmp/head-$$; `+script+`; r=0; cat .status > /tmp/out-$$ 2>&1 || r=$?; echo "read: $r"; cat /tmp/out-$$; cp /tmp/head-$$ .git/HEAD; rm -f /tmp/head-$$ /tmp/out-$$`, "V="+view, "H="+climb)
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return out
	}
	for _, c := range []struct{ name, there, absent string }{
		{"a HEAD that climbs out", `printf 'ref: %s/there\n' "$H" > .git/HEAD`, `printf 'ref: %s/absent\n' "$H" > .git/HEAD`},
		{"refs made a symlink", `rm -rf .git/refs/tags && ln -s "$(pwd)/$H" .git/refs/tags && printf 'ref: refs/tags/there\n' > .git/HEAD`, `rm -rf .git/refs/tags && ln -s "$(pwd)/$H" .git/refs/tags && printf 'ref: refs/tags/absent\n' > .git/HEAD`},
		{"a symlinked .gitignore", `ln -sf "$(pwd)/$H/ignore" untracked/.gitignore`, `ln -sf "$(pwd)/$H/nothing" untracked/.gitignore`},
	} {
		there, absent := status(c.there), status(c.absent)
		if strings.ReplaceAll(there, "there", "X") != strings.ReplaceAll(absent, "absent", "X") {
			t.Errorf("%s: .status tells whether a host file exists:\n--- present\n%s--- absent\n%s", c.name, there, absent)
		}
	}
	// Everyone else still reads the checkout's status.
	want := gitOut(t, repo, "-c", "safe.directory=*", "--no-optional-locks", "status", "--porcelain=v1", "--branch")
	if got, err := os.ReadFile(e.m("g", ".status")); err != nil || string(got) != want {
		t.Errorf("root's .status: %v\n%s\nwant\n%s", err, got, want)
	}
}

// heldRepoEnv mounts a git checkout (makeRepo) the agent owns as source
// "g", its writes held, with its view (heldConfig) in base.
func heldRepoEnv(t *testing.T) (e *env, base, view, repo string) {
	t.Helper()
	base = sharedTempDir(t)
	view = filepath.Join(base, "view")
	must(t, os.Mkdir(view, 0o755))
	repo = filepath.Join(base, "repo")
	must(t, os.Mkdir(repo, 0o755))
	makeRepo(t, repo)
	sh(t, `chown -R 1001:1001 "$R" && chmod -R a+rwX "$R"`, "R="+repo)
	return newEnv(t, heldConfig(view), src{slug: "g", kind: "git", path: repo}), base, view, repo
}
