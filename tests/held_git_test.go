package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// heldGitSeed makes the repository the agent works on: six commits of
// thirty files in five folders.
const heldGitSeed = `set -e
cd "$W"
git init -q -b main repo && cd repo
for i in $(seq 1 30); do mkdir -p dir$((i%5)); seq 1 $((i*50)) > dir$((i%5))/f$i.txt; done
printf '*.o\nbuild/\n' > .gitignore
git add -A && git commit -qm c0
for c in 1 2 3 4 5; do for i in $(seq $c 5 30); do echo "edit $c" >> dir$((i%5))/f$i.txt; done; git commit -qam c$c; done
`

// heldGitWork is what the agent does to the repository with git: the
// lock files, renames, packs, pruned loose objects and emptied folders of
// branches, a merge, a rebase, a stash, tags, gc and repack, a clean.
const heldGitWork = `set -e
cd "$W/repo"
g() { git -c safe.directory='*' -c gc.auto=0 "$@"; }
g checkout -q -b feature
for i in 1 2 3; do echo "feature $i" >> dir1/f1.txt; g mv dir2/f$((i*5+2)).txt dir3/moved$i.txt; g commit -qam feature$i; done
g checkout -q main
echo main-change >> dir4/f4.txt; g commit -qam mainchange
g merge -q --no-edit feature
g checkout -q -b topic HEAD~2
echo topic >> dir0/f5.txt; g commit -qam topic1
g rebase -q main
echo stash-me >> dir0/f10.txt; g stash -q; g stash pop -q; g commit -qam afterstash
mkdir -p build && echo x > build/out.o && touch a.o
g tag -a v1 -m v1
g pack-refs --all
g gc -q --aggressive --prune=now
g repack -adq
g checkout -q main
g clean -fdxq
g branch -qD topic
g reflog expire --expire=now --all
g prune
g fsck --full --no-progress
`

// heldGitState is a repository as git reads it: HEAD, refs, status,
// reachable objects, fsck, the worktree and the names in .git (less the
// pack files, whose bytes may differ between two identical runs, and the
// index, which records inode numbers and times).
const heldGitState = `set -e
cd "$W/repo"
g() { git -c safe.directory='*' "$@"; }
echo "HEAD $(g symbolic-ref HEAD) $(g rev-parse HEAD)"
g for-each-ref --format='%(refname) %(objectname)'
g status --porcelain=v1 --branch --ignored
g rev-list --all --objects | sort
g fsck --full --no-progress 2>&1 | sort
g count-objects -v | grep -v size
find . -path ./.git -prune -o -printf '%y %m %s %p\n' | LC_ALL=C sort
find . -path ./.git -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
find .git -printf '%y %p\n' | grep -v '^f .git/objects/pack/\|^f .git/index$' | LC_ALL=C sort
`

// An agent's git history, made with held writes — branches, a merge, a
// rebase, a stash, tags, packed refs, gc, repack, prune and clean — reads
// in its view as the same work on a plain copy does, leaves the backing
// repository as it was, and once approved is in the backing repository
// exactly as it was made, for git as for the files.
func TestHeldGitHistoryLandsAsItWasMade(t *testing.T) {
	requireFUSE(t)
	requireTool(t, "bwrap", "bubblewrap")
	base := sharedTempDir(t)
	view := filepath.Join(base, "view")
	must(t, os.Mkdir(view, 0o755))
	e := newEnv(t, heldConfig(view), src{slug: "d"})
	env := append(gitEnv(), "LC_ALL=C")
	sh(t, heldGitSeed, append(env, "W="+e.b("d"))...)
	sh(t, `chown -R 1001:1001 "$W" && chmod -R a+rwX "$W"`, "W="+e.b("d"))
	plain := filepath.Join(base, "plain")
	sh(t, `cp -a "$B" "$P"`, "B="+e.b("d"), "P="+plain)
	state := func(uid int, dir string) string {
		t.Helper()
		out, err := run(t, uid, heldGitState, append(env, "W="+dir, "HOME=/tmp")...)
		if err != nil {
			t.Fatalf("state of %s as uid %d: %v\n%s", dir, uid, err, out)
		}
		return out
	}
	before := state(1001, e.b("d"))
	work := func(mnt, at string) {
		t.Helper()
		script := sandbox(mnt, "/work") + "bash -c '" + strings.ReplaceAll(heldGitWork, "'", `'\''`) + "'"
		if out, err := run(t, 1001, script, append(env, "W="+at)...); err != nil {
			t.Fatalf("git work in %s: %v\n%s", mnt, err, out)
		}
	}
	work(plain, "/work")
	want := state(1001, plain)
	work(view, "/work/d")
	if got := state(1001, filepath.Join(view, "d")); got != want {
		t.Errorf("the agent's repository in its view differs from the same work on a plain copy:\n--- view\n%s\n--- plain\n%s", got, want)
	}
	if got := state(1001, e.b("d")); got != before {
		t.Errorf("the backing repository changed before approval:\n--- now\n%s\n--- before\n%s", got, before)
	}
	if out, err := run(t, 0, binPath+" review approve --all -c "+e.cfg); err != nil {
		t.Fatalf("review approve --all: %v\n%s", err, out)
	}
	if got := state(1001, e.b("d")); got != want {
		t.Errorf("the backing repository after approval differs from the work on a plain copy:\n--- backing\n%s\n--- plain\n%s", got, want)
	}
	if got := reviewJSON(t, 0, e, "list"); len(got) != 0 {
		t.Errorf("held changes left after approve --all: %v", got)
	}
	if got := state(1001, filepath.Join(view, "d")); got != want {
		t.Errorf("the agent's view after approval:\n%s", got)
	}

	// More of the same work on what was approved, in the main mount this
	// time, then rejected: the backing repository stays as approved and
	// the agent sees it again.
	const more = `set -e
cd "$W/repo"
g() { git -c safe.directory='*' -c gc.auto=0 "$@"; }
g checkout -q -b again
echo again >> dir1/f1.txt; g commit -qam again
g checkout -q main; g merge -q --no-edit again; g branch -qD again
g gc -q --prune=now
`
	if out, err := run(t, 1001, sandbox(e.mnt, "/work")+"bash -c '"+strings.ReplaceAll(more, "'", `'\''`)+"'", append(env, "W=/work/d")...); err != nil {
		t.Fatalf("more git work in the main mount: %v\n%s", err, out)
	}
	if got := state(1001, e.m("d")); got == want {
		t.Fatal("the second round of work changed nothing the agent can see")
	}
	if out, err := run(t, 0, binPath+" review reject --all -c "+e.cfg); err != nil {
		t.Fatalf("review reject --all: %v\n%s", err, out)
	}
	for _, dir := range []string{e.b("d"), e.m("d"), filepath.Join(view, "d")} {
		if got := state(1001, dir); got != want {
			t.Errorf("%s after the rejection differs from what was approved:\n%s", dir, got)
		}
	}
}
