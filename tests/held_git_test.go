package tests

import (
	"os"
	"path/filepath"
	"slices"
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

// gitRepoEnv mounts the config config makes for a view's mountpoint
// over a source d holding heldGitSeed's repository, which uid 1001 owns;
// env is what git runs with.
func gitRepoEnv(t *testing.T, config func(view string) string) (e *env, view string, env []string) {
	view = filepath.Join(sharedTempDir(t), "view")
	must(t, os.Mkdir(view, 0o755))
	e = newEnv(t, config(view), src{slug: "d"})
	env = append(gitEnv(), "LC_ALL=C")
	sh(t, heldGitSeed, append(env, "W="+e.b("d"))...)
	sh(t, `chown -R 1001:1001 "$W" && chmod -R a+rwX "$W"`, "W="+e.b("d"))
	return e, view, env
}

// An agent's git history, made with held writes — branches, a merge, a
// rebase, a stash, tags, packed refs, gc, repack, prune and clean — reads
// in its view as the same work on a plain copy does, leaves the backing
// repository as it was, and once approved is in the backing repository
// exactly as it was made, for git as for the files.
func TestHeldGitHistoryLandsAsItWasMade(t *testing.T) {
	requireFUSE(t)
	requireTool(t, "bwrap", "bubblewrap")
	e, view, env := gitRepoEnv(t, heldConfig)
	base := filepath.Dir(view)
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

// What git reads commands from — a repository's config (core.fsmonitor
// runs at a plain git status), its hooks, a new .git — lets an agent run
// commands as whoever next runs git there once it lands. Such held
// changes say so in review list and review diff, and review approve
// --all leaves them held, with the changes that must land with them (a
// hard link of a hook): a reviewer approves one by naming it.
func TestHeldGitRunsIsLeftForAReviewer(t *testing.T) {
	requireFUSE(t)
	e, view, env := gitRepoEnv(t, heldConfig)
	// Hooks in the worktree, as husky keeps them.
	sh(t, `set -e
cd "$W/repo"
git -c safe.directory='*' config core.hooksPath .husky
mkdir .husky
printf '#!/bin/sh\n' > .husky/pre-commit
chown -R 1001:1001 . && chmod -R a+rwX .`, append(env, "W="+e.b("d"))...)
	backing := func() string {
		return sh(t, `cd "$W" && find . -printf '%y %m %s %p\n' | LC_ALL=C sort && cat repo/.git/config`, "W="+e.b("d"))
	}
	before := backing()
	if out, err := run(t, 1001, `set -e
cd "$M/repo"
printf '[core]\n\tfsmonitor = /tmp/evil\n' >> .git/config
printf '#!/bin/sh\ntouch /tmp/owned\n' > .git/hooks/pre-commit
chmod +x .git/hooks/pre-commit
ln .git/hooks/pre-commit linked-hook.txt
mkdir -p ../newrepo/.git/hooks
echo 'ref: refs/heads/main' > ../newrepo/.git/HEAD
echo sample > .git/hooks/post-update.sample
echo plain > plain.txt
echo 'touch /tmp/owned' >> .husky/pre-commit
printf '[core]\n\thooksPath = .agenthooks\n' >> .git/config
mkdir .agenthooks && printf '#!/bin/sh\n' > .agenthooks/post-checkout
git -c safe.directory='*' add plain.txt`, append(env, "M="+filepath.Join(view, "d"), "HOME=/tmp")...); err != nil {
		t.Fatalf("the agent's changes: %v\n%s", err, out)
	}
	list := sh(t, binPath+" review list -c "+e.cfg)
	for _, l := range strings.Split(strings.TrimSpace(list), "\n")[1:] {
		flagged := strings.Contains(l, "GIT RUNS IT")
		want := strings.Contains(l, "d://repo/.git/config") || strings.Contains(l, "pre-commit") || strings.Contains(l, "d://newrepo") || // .husky/pre-commit too
			strings.Contains(l, "d://repo/.agenthooks") || // named by the held config
			strings.Contains(l, "linked-hook.txt") // the hook's other name
		if flagged != want {
			t.Errorf("review list line %q: flagged %v, want %v", l, flagged, want)
		}
	}
	// The agent's own list, inside the mount, marks the same changes.
	own, err := run(t, 1001, `cat "$M/.neuralis/review/list"`, "M="+view)
	if err != nil {
		t.Fatalf("the agent's .neuralis/review/list: %v\n%s", err, own)
	}
	for _, l := range strings.Split(strings.TrimSpace(own), "\n") {
		marked := strings.HasSuffix(l, "\tgit-runs")
		want := strings.Contains(l, "d://repo/.git/config") || strings.Contains(l, "pre-commit") || strings.Contains(l, "d://newrepo") ||
			strings.Contains(l, "d://repo/.agenthooks") || strings.Contains(l, "linked-hook.txt")
		if marked != want {
			t.Errorf("the agent's list line %q: marked %v, want %v", l, marked, want)
		}
	}
	diff := sh(t, binPath+" review diff -c "+e.cfg)
	for _, want := range []string{"# git runs commands from d://repo/.git/config: approving this lets agent run commands", "# git runs commands from d://repo/.git/hooks/pre-commit"} {
		if !strings.Contains(diff, want) {
			t.Errorf("review diff does not say %q:\n%s", want, diff)
		}
	}
	out := sh(t, binPath+" review approve --all -c "+e.cfg)
	for _, want := range []string{"d://repo/.git/config (git runs commands from d://repo/.git/config", "d://repo/linked-hook.txt (git runs commands from d://repo/.git/hooks/pre-commit", "left held", "approved"} {
		if !strings.Contains(out, want) {
			t.Errorf("review approve --all does not say %q:\n%s", want, out)
		}
	}
	if got := sh(t, `cat "$W/repo/.git/config"; ls "$W/repo/.git/hooks"; ls "$W"`, "W="+e.b("d")); strings.Contains(got, "fsmonitor =") || strings.Contains(got, "\npre-commit\n") || strings.Contains(got, "newrepo") {
		t.Errorf("approve --all landed what git runs:\n%s", got)
	}
	for _, f := range []string{"repo/plain.txt", "repo/.git/hooks/post-update.sample"} {
		if _, err := os.Stat(e.b("d", f)); err != nil {
			t.Errorf("approve --all left %s held: %v", f, err)
		}
	}
	if idx := sh(t, `git -C "$W/repo" -c safe.directory='*' ls-files plain.txt`, append(env, "W="+e.b("d"))...); strings.TrimSpace(idx) != "plain.txt" {
		t.Errorf("approve --all did not land the agent's git add (the index): %q", idx)
	}
	if after := backing(); after == before {
		t.Error("approve --all approved nothing")
	}
	left := map[string]bool{}
	for _, it := range reviewJSON(t, 0, e, "list") {
		left[it.URI] = true
	}
	for _, u := range []string{"d://repo/.git/config", "d://repo/.git/hooks/pre-commit", "d://repo/linked-hook.txt", "d://newrepo", "d://repo/.husky/pre-commit", "d://repo/.agenthooks"} {
		if !left[u] {
			t.Errorf("%s is not left held after approve --all: %v", u, left)
		}
	}
	if len(left) != 6 {
		t.Errorf("held after approve --all: %v, want the six git runs from and its link", left)
	}
	// Named, it lands.
	sh(t, binPath+" review approve d://repo/.git/config -c "+e.cfg)
	if b, _ := os.ReadFile(e.b("d", "repo/.git/config")); !strings.Contains(string(b), "fsmonitor = /tmp/evil") {
		t.Errorf("approving .git/config by its uri did not land it:\n%s", b)
	}
}

const gitRunsRules = `
[[principal]]
name = "agent"
uids = [1001]

[[rule]]
uri = "*://**/.git/**/{config,config.worktree,commondir}"
who = ["agent"]
deny = ["write"]

[[rule]]
uri = "*://**/.git/**/hooks/**"
who = ["agent"]
deny = ["write"]

[[rule]]
uri = "*://**/.git"
who = ["agent"]
deny = ["write"]
`

// Where an agent writes directly, rules denying it write on what git
// runs are the guard README shows: they hold against appending, a
// rename or a link onto the name, replacing the folder of hooks, and a
// new repository, while the agent's commits still work.
func TestGitRunsRulesGuardDirectWrites(t *testing.T) {
	requireFUSE(t)
	e, _, env := gitRepoEnv(t, func(string) string { return gitRunsRules })
	m := e.m("d")
	if out, err := run(t, 1001, `set -e
cd "$M/repo"
g() { git -c safe.directory='*' "$@"; }
g checkout -q -b agent-work
echo more >> dir1/f1.txt
g commit -qam agent
g log --oneline -1`, append(env, "M="+m, "HOME=/tmp")...); err != nil || !strings.Contains(out, "agent") {
		t.Errorf("the agent's commit under the rules: %v\n%s", err, out)
	}
	before := sh(t, `cd "$W" && cat repo/.git/config && find repo/.git/hooks . -maxdepth 1 -printf '%y %p %l\n' | LC_ALL=C sort`, "W="+e.b("d"))
	for _, attempt := range []string{
		`printf '[core]\n\tfsmonitor = /tmp/evil\n' >> repo/.git/config`,
		`printf '[core]\n\tfsmonitor = /tmp/evil\n' > x.cfg && mv x.cfg repo/.git/config`,
		`echo x > y.txt && ln y.txt repo/.git/hooks/pre-commit`,
		`printf '#!/bin/sh\n' > repo/.git/hooks/pre-commit`,
		`mv repo/.git/hooks/pre-commit.sample repo/.git/hooks/pre-commit`,
		`mkdir hk && mv repo/.git/hooks repo/.git/hooks-old`,
		`mkdir -p hk2 && rmdir repo/.git/hooks 2>/dev/null || ln -s ../../hk2 repo/.git/hooks`,
		`mkdir -p newrepo/.git`,
		`mkdir -p nr/g && mv nr/g nr/.git`,
		`ln -s /tmp/elsewhere sub.git && mv sub.git dir1/.git`,
		`echo 'gitdir: /tmp/evil' > dir2/.git`,
		`echo ../../evil > repo/.git/commondir`,
		`printf '[core]\n\tfsmonitor = /tmp/evil\n' > repo/.git/config.worktree`,
		`mkdir -p repo/.git/modules/m/hooks && printf '#!/bin/sh\n' > repo/.git/modules/m/hooks/post-checkout`,
		`rm -rf repo/.git`, // removes what it may (objects, refs), not config, hooks or .git
	} {
		if out, err := run(t, 1001, `cd "$M" && `+attempt, "M="+m, "HOME=/tmp"); err == nil {
			t.Errorf("as the agent, %q succeeded:\n%s", attempt, out)
		}
	}
	after := sh(t, `cd "$W" && cat repo/.git/config && find repo/.git/hooks . -maxdepth 1 -printf '%y %p %l\n' | LC_ALL=C sort`, "W="+e.b("d"))
	after = strings.NewReplacer("f ./y.txt \n", "", "d ./hk \n", "", "d ./hk2 \n", "", "d ./nr \n", "", "f ./x.cfg \n", "", "l ./sub.git /tmp/elsewhere\n", "", "d ./newrepo \n", "").Replace(after)
	if after != before {
		t.Errorf("what git runs changed:\n--- after\n%s\n--- before\n%s", after, before)
	}
}

// Git takes any folder holding HEAD, objects/ and refs/ for a repository
// when it searches upward, and reads its config: a bare repository's
// config and hooks, and the files that make a folder one, are marked "git
// runs it" and left held by approve --all, like a .git folder's. Before,
// only names under .git were: the agent made a folder of the owner's
// a repository whose config ran a command at the owner's next git status
// there (found by a red-team pass). A file named HEAD or config in a
// folder that is no repository is an ordinary change.
func TestHeldBareRepositoryIsLeftForAReviewer(t *testing.T) {
	e, view := heldEdgeEnv(t, `mkdir tools notgit conf && echo x > tools/x.txt
git init -q --bare srv.git
chmod -R a+rwX .`)
	evil := filepath.Join(sharedTempDir(t), "ran")
	if out, err := run(t, 1001, `set -e; cd "$V"
printf 'ref: refs/heads/main\n' > tools/HEAD && mkdir tools/objects tools/refs
printf '[core]\n\tbare = false\n\tworktree = ..\n\tfsmonitor = "touch %s; false"\n' "$EVIL" > tools/config
printf '[core]\n\tfsmonitor = "touch %s; false"\n' "$EVIL" >> srv.git/config
printf '#!/bin/sh\ntouch %s\n' "$EVIL" > srv.git/hooks/post-receive
echo sample > srv.git/hooks/new.sample
mkdir -p srv.git/objects/ab && echo blob > srv.git/objects/ab/cdef
echo 'ref: refs/heads/x' > notgit/HEAD
echo 'plain = 1' > conf/config`, "V="+view, "EVIL="+evil); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	list := sh(t, binPath+" review list -c "+e.cfg)
	marked := []string{"d://tools/HEAD", "d://tools/config", "d://tools/objects", "d://tools/refs", "d://srv.git/config", "d://srv.git/hooks/post-receive"}
	plain := []string{"d://srv.git/hooks/new.sample", "d://srv.git/objects/ab", "d://notgit/HEAD", "d://conf/config"}
	checkGitRunsMarks(t, list, marked, plain)
	sh(t, binPath+" review approve --all -c "+e.cfg)
	for _, p := range []string{"notgit/HEAD", "conf/config", "srv.git/hooks/new.sample", "srv.git/objects/ab/cdef"} {
		if _, err := os.Stat(e.b("d", p)); err != nil {
			t.Errorf("approve --all left the plain change %s held: %v", p, err)
		}
	}
	for _, p := range []string{"tools/HEAD", "tools/config", "srv.git/hooks/post-receive"} {
		if _, err := os.Stat(e.b("d", p)); err == nil {
			t.Errorf("approve --all landed %s, which git runs commands from", p)
		}
	}
	if b, _ := os.ReadFile(e.b("d", "srv.git", "config")); strings.Contains(string(b), "fsmonitor") {
		t.Errorf("approve --all landed the bare repository's config:\n%s", b)
	}
	sh(t, `cd "$D/tools" && git status >/dev/null 2>&1; cd "$D/srv.git" && git -c safe.directory='*' log >/dev/null 2>&1; true`, "D="+e.b("d"))
	if _, err := os.Stat(evil); err == nil {
		t.Errorf("the agent's command ran at the owner's git status")
	}
}

// TestHeldGitDirectoriesAsGitSeesThemAreLeftForAReviewer: git takes a
// folder for a repository when objects and refs pass access(X_OK) (a
// symlink or an executable file does, not only a folder) or when a
// commondir names a folder that has them; a core.hooksPath may be set in
// a file the config includes, or name a folder of another source. Each
// way made a folder of the owner's run the agent's command at the
// owner's next git command, and approve --all landed it unmarked (found
// by a red-team pass).
func TestHeldGitDirectoriesAsGitSeesThemAreLeftForAReviewer(t *testing.T) {
	e, view := heldEdgeEnv(t, `mkdir symgit exegit cdgit common scripts
git init -q wt && git -C wt config include.path ../.gitconfig && printf '[core]\n\thooksPath = .githooks\n' > wt/.gitconfig
chmod -R a+rwX .`)
	evil := filepath.Join(sharedTempDir(t), "ran")
	if out, err := run(t, 1001, `set -e; cd "$V"
cfg() { printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ..\n\tfsmonitor = "touch %s; false"\n' "$EVIL" > "$1/config"; }
printf 'ref: refs/heads/main\n' > symgit/HEAD && ln -s . symgit/objects && ln -s . symgit/refs && cfg symgit
printf 'ref: refs/heads/main\n' > exegit/HEAD && : > exegit/objects && : > exegit/refs && chmod 755 exegit/objects exegit/refs && cfg exegit
printf 'ref: refs/heads/main\n' > cdgit/HEAD && echo ../common > cdgit/commondir && mkdir common/objects common/refs && cfg common
printf '#!/bin/sh\ntouch %s\n' "$EVIL" > scripts/post-checkout && chmod 755 scripts/post-checkout
echo 'not run' > scripts/update && echo notes > scripts/update.txt
mkdir -p wt/.githooks && printf '#!/bin/sh\ntouch %s\n' "$EVIL" > wt/.githooks/pre-commit && chmod 755 wt/.githooks/pre-commit`, "V="+view, "EVIL="+evil); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	list := sh(t, binPath+" review list -c "+e.cfg)
	marked := []string{"d://symgit/HEAD", "d://symgit/objects", "d://symgit/refs", "d://symgit/config",
		"d://exegit/HEAD", "d://exegit/objects", "d://exegit/refs", "d://exegit/config",
		"d://cdgit/HEAD", "d://cdgit/commondir", "d://common/config",
		"d://scripts/post-checkout", "d://wt/.githooks"}
	plain := []string{"d://scripts/update", "d://scripts/update.txt"}
	checkGitRunsMarks(t, list, marked, plain)
	sh(t, binPath+" review approve --all -c "+e.cfg)
	for _, p := range []string{"scripts/update", "scripts/update.txt", "common/objects"} {
		if _, err := os.Lstat(e.b("d", p)); err != nil {
			t.Errorf("approve --all left the plain change %s held: %v", p, err)
		}
	}
	for _, p := range []string{"symgit/config", "exegit/objects", "cdgit/commondir", "common/config", "scripts/post-checkout", "wt/.githooks/pre-commit"} {
		if _, err := os.Lstat(e.b("d", p)); err == nil {
			t.Errorf("approve --all landed %s, which git runs commands from", p)
		}
	}
	sh(t, `for d in symgit exegit cdgit; do (cd "$D/$d" && git status >/dev/null 2>&1); done
cd "$D/wt" && git commit -q --allow-empty -m x >/dev/null 2>&1; true`, "D="+e.b("d"))
	if _, err := os.Stat(evil); err == nil {
		t.Errorf("the agent's command ran at the owner's git command")
	}
}

// checkGitRunsMarks checks that `review list` (list) marks GIT RUNS IT
// every uri of marked and none of plain, and lists them all.
func checkGitRunsMarks(t *testing.T, list string, marked, plain []string) {
	t.Helper()
	seen := 0
	for _, l := range strings.Split(strings.TrimSpace(list), "\n")[1:] {
		flagged := strings.Contains(l, "GIT RUNS IT")
		switch u := strings.Fields(l)[2]; {
		case slices.Contains(marked, u):
			seen++
			if !flagged {
				t.Errorf("review list does not mark %s:\n%s", u, l)
			}
		case slices.Contains(plain, u):
			seen++
			if flagged {
				t.Errorf("review list marks %s, which runs nothing:\n%s", u, l)
			}
		}
	}
	if seen != len(marked)+len(plain) {
		t.Errorf("review list has %d of the %d changes:\n%s", seen, len(marked)+len(plain), list)
	}
}
