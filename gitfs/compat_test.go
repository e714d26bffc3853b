package gitfs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Regression tests for states where Status used to disagree with git
// status; each compares with the git CLI before and after git ran
// (checkStatus), at the root and in the folders listed.

// sh runs a shell script in dir with the test's git environment.
func sh(t *testing.T, dir, script string) {
	t.Helper()
	cmd := execGit(dir)
	cmd.Path, cmd.Args = "/bin/sh", []string{"sh", "-ec", script}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("script failed: %v\n%s\n%s", err, script, out)
	}
}

func TestStatusCompatMatchesGit(t *testing.T) {
	for _, tt := range []struct {
		name   string
		script string
		dirs   []string
	}{
		// The assume-unchanged bit hides worktree changes (CE_VALID).
		{"assume unchanged", `
			echo a > a; echo b > b; echo c > c; git add .; git commit -qm1
			git update-index --assume-unchanged a c
			echo aa >> a; rm c
			git update-index --skip-worktree b; echo bb >> b`, nil},
		// A sparse checkout compares skip-worktree files that are present.
		{"sparse checkout, files outside reappear", `
			mkdir a b; echo a > a/f; echo b > b/f; echo b > b/g; echo r > r
			git add .; git commit -qm1
			git sparse-checkout set --no-cone /a/ /r
			mkdir b; echo changed > b/f; echo b > b/g`, []string{"", "a", "b"}},
		// A negated directory pattern does not un-ignore its files.
		{"negated directory", `
			printf '*.log\nbuild/*\n!build/keep/\n' > .gitignore; git add .; git commit -qm1
			mkdir -p build/keep; touch build/out build/keep/k build/keep/k.log
			git config status.showUntrackedFiles all`, []string{"", "build", "build/keep"}},
		// Pattern syntax as wildmatch.c reads it.
		{"ignore patterns", `
			printf 'a[bc]d\n[!x]y\n[[:digit:]]z\n**/foo\nbar/**\nbaz/**/qux\n*.[oa]\n\\*star\nsp\\ \nmid/*/end\n/root*\ntrail  \n' > .gitignore
			touch t; git add .; git commit -qm1
			mkdir -p x/foo bar/b baz/q/r/qux baz/qux mid/m/end mid/m/n/end sub
			touch abd acd aed xy ay 1z az x/foo/f bar/b/c baz/q/r/qux/f baz/qux/g l.o l.a '*star' 'sp ' mid/m/end/f mid/m/n/end/g root1 sub/root2 sub/abd trail
			git config status.showUntrackedFiles all`, []string{"", "sub", "mid"}},
		// A directory where the index has a file: git drops "dir/" but
		// lists what is inside in "all" mode.
		{"file replaced by directory", `
			echo a > a; mkdir d; echo x > d/x; git add .; git commit -qm1
			rm a; mkdir a; echo y > a/y; rm -r d; echo d > d`, []string{"", "a"}},
		{"file replaced by directory, all", `
			echo a > a; git add .; git commit -qm1
			rm a; mkdir -p a/s; echo y > a/y; echo z > a/s/z
			git config status.showUntrackedFiles all`, []string{"", "a"}},
		// Line endings: git hashes the file after its clean conversion.
		{"autocrlf after checkout and touch", `
			git config core.autocrlf true
			printf 'a\nb\n' > a.txt; printf 'x\r\ny\r\n' > w.txt; git add . 2>/dev/null; git commit -qm1
			rm a.txt w.txt; git checkout -- .; touch -d '+2 seconds' a.txt w.txt`, nil},
		{"eol attributes after checkout and touch", `
			printf '*.bat text eol=crlf\n*.sh text eol=lf\n*.txt text\n*.bin binary\n' > .gitattributes
			printf 'a\nb\n' > x.bat; printf 'a\nb\n' > y.sh; printf 'q\r\nw\n' > z.txt; printf 'b\r\n' > b.bin
			git add . 2>/dev/null; git commit -qm1
			rm x.bat z.txt; git checkout -- .; touch -d '+2 seconds' x.bat z.txt b.bin`, nil},
		{"text=auto with CRLF in the index", `
			mkdir sub; printf '* text=auto\n' > .gitattributes; printf '*.txt -text\n' > sub/.gitattributes
			printf 'a\r\nb\r\n' > sub/a.txt; printf 'a\r\nb\r\n' > sub/b.dat; printf 'c\r\n' > c.dat
			git add . 2>/dev/null; git commit -qm1
			git config core.autocrlf true; touch -d '+2 seconds' sub/a.txt sub/b.dat c.dat`, []string{"", "sub"}},
		{"ident", `
			echo '*.c ident' > .gitattributes; printf 'x $Id$ y\n' > a.c; git add .; git commit -qm1
			rm a.c; git checkout a.c; touch -d '+2 seconds' a.c`, nil},
		// git as built by default (no USE_NSEC) compares whole seconds
		// only: a change that keeps the size and the mtime's second is not
		// seen unless racy. ctime is left out with core.trustCtime to make
		// the test independent of the clock.
		{"same second, same size", `
			git config core.trustCtime false
			echo aaaa > f; touch -d '2020-01-01 00:00:00.1' f; git add f; git commit -qm1
			echo bbbb > f; touch -d '2020-01-01 00:00:00.7' f`, nil},
		// Intent-to-add entries: invisible to the index side, additions
		// (and rename destinations) on the worktree side.
		{"intent to add renamed in the worktree", `
			echo hello world this is a file > a; git add a; git commit -qm1
			mv a b; git add -N b`, nil},
		{"intent to add over HEAD", `
			echo x > a; echo y > b; git add .; git commit -qm1
			git rm -q --cached a; git add -N a`, nil},
		// Submodules: a gitlink moved is an exact rename; one replaced by
		// a file is a type change.
		{"submodule renamed", `
			git init -q sub; (cd sub; echo s > s; git add s; git commit -qm s)
			git add sub 2>/dev/null; git commit -qm1; git mv sub sub2`, nil},
		{"submodule replaced by a file", `
			git init -q sub; (cd sub; echo s > s; git add s; git commit -qm s)
			git add sub 2>/dev/null; git commit -qm1; rm -rf sub; echo f > sub`, nil},
		// A folder that is the path of a submodule entry but no
		// repository of its own counts that entry: git -C dir status --
		// . matches the gitlink named dir (found by a differential pass).
		{"submodule turned into plain files", `
			git init -q sub; (cd sub; echo s > s; git add s; git commit -qm s)
			git add sub 2>/dev/null; git commit -qm1
			git rm -q --cached sub; rm -rf sub/.git; git add sub`, []string{"", "sub"}},
		{"submodule entry left, folder emptied", `
			git init -q sm; (cd sm; echo s > s; git add s; git commit -qm s)
			git init -q sm2; (cd sm2; echo t > t; git add t; git commit -qm t)
			git add sm sm2 2>/dev/null; git commit -qm1
			h=$(git -C sm2 rev-parse HEAD); rm -rf sm/.git sm/s
			git update-index --cacheinfo 160000,$h,sm
			git rm -q --cached sm2; rm -rf sm2; mkdir sm2`, []string{"", "sm", "sm2"}},
		// Rename detection as diffcore-rename.c does it.
		{"rename to a bigger file", `
			seq 1 100 > old.template; git add .; git commit -qm1
			git rm -q old.template; (seq 1 100; seq 1000 1039) > new.txtar; git add new.txtar`, nil},
		{"copies", `
			seq 1 100 > a; seq 1 100 > b; echo x > s; git add .; git commit -qm1
			seq 1 100 > a2; seq 1 90 > b2; echo y >> a; cp s s2; git add .
			git config status.renames copies`, nil},
		{"renames off", `
			seq 1 100 > a; git add .; git commit -qm1; git mv a b
			git config status.renames false`, nil},
		{"renames off by diff.renames", `
			seq 1 100 > a; git add .; git commit -qm1; git mv a b
			git config diff.renames false`, nil},
		{"rename limit", `
			for i in 1 2 3 4 5 6; do seq $i $((i+80)) > f$i; done; git add .; git commit -qm1
			for i in 1 2 3 4 5 6; do git mv f$i g$i; echo more >> g$i; done; git add .
			git config diff.renameLimit 3`, nil},
		{"status rename limit over diff's", `
			for i in 1 2 3 4 5 6; do seq $i $((i+80)) > f$i; done; git add .; git commit -qm1
			for i in 1 2 3 4 5 6; do git mv f$i g$i; echo more >> g$i; done; git add .
			git config diff.renameLimit 3; git config status.renameLimit 10`, nil},
		{"empty files and symlinks", `
			touch e1 e2; mkdir d; touch d/e1; ln -s target l1; ln -s other l2; git add .; git commit -qm1
			git mv e1 x1; git mv d/e1 d/y; git rm -q --cached e2; touch n1; git add n1
			git mv l1 m1; git rm -q --cached l2; ln -s target l3; git add l3`, nil},
		{"many identical sources", `
			for i in $(seq 1 110); do echo same > a$i; done; git add .; git commit -qm1
			for i in $(seq 1 110); do git mv a$i b$i; done; echo same > z; git add z`, nil},
		{"base names", `
			mkdir -p x y z w; seq 1 50 > x/f.c; seq 1 50 > y/f.c; seq 100 150 > x/g.c; git add .; git commit -qm1
			git mv x/f.c w/f.c; git mv x/g.c z/g.c; echo q >> z/g.c; git rm -q y/f.c; seq 1 49 > w/h.c; git add .`, nil},
		// go-git refuses a branch.<b>.merge without refs/heads/; git finds
		// no upstream for it.
		{"merge name without refs/heads", `
			echo a > a; git add a; git commit -qm1; git branch side
			git config branch.main.remote origin; git config branch.main.merge main
			git config remote.origin.fetch '+refs/heads/*:refs/remotes/origin/*'
			git update-ref refs/remotes/origin/main side`, nil},
		{"upstream is a local branch by short name", `
			echo a > a; git add a; git commit -qm1; git branch side; echo b > b; git add b; git commit -qm2
			git config branch.main.remote .; git config branch.main.merge side`, nil},
		// Every kind of unmerged entry: DD, AU and UA from a rename/rename
		// conflict, rename/delete, rename/add, modify/delete edited
		// afterwards, a file against a folder, cherry-pick and stash pop.
		{"conflict rename/rename", `
			echo base > f; echo keep > k; git add .; git commit -qm base
			git checkout -qb other; git mv f theirs; git commit -qm t
			git checkout -q main; git mv f ours; git commit -qm o
			git merge -q other || true`, nil},
		{"conflict rename/delete", `
			printf 'line1\nline2\nline3\n' > f; git add .; git commit -qm base
			git checkout -qb other; git rm -q f; git commit -qm t
			git checkout -q main; git mv f g; git commit -qm o
			git merge -q other || true`, nil},
		{"conflict rename/add", `
			echo base > f; git add .; git commit -qm base
			git checkout -qb other; echo new > g; git add g; git commit -qm t
			git checkout -q main; git mv f g; git commit -qm o
			git merge -q other || true`, nil},
		{"conflict modify/delete, then edited", `
			echo base > f; echo b > g; git add .; git commit -qm base
			git checkout -qb other; git rm -q f; echo bb > g; git commit -qam t
			git checkout -q main; echo ours > f; echo bbb > g; git commit -qam o
			git merge -q other || true
			echo edited >> g; rm -f f`, nil},
		{"conflict file/folder", `
			echo base > x; git add .; git commit -qm base
			git checkout -qb other; git rm -q x; mkdir x; echo in > x/y; git add x; git commit -qm t
			git checkout -q main; echo changed > x; git commit -qam o
			git merge -q other || true`, nil},
		{"conflict in a cherry-pick", `
			echo a > f; git add .; git commit -qm a
			git checkout -qb other; echo b > f; git commit -qam b
			git checkout -q main; echo c > f; git commit -qam c
			git cherry-pick other || true`, nil},
		{"conflict in a stash pop", `
			echo a > f; git add .; git commit -qm a
			echo b > f; git stash -q; echo c > f; git commit -qam c
			git stash pop || true`, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gitEnv(t)
			wt := newRepo(t)
			sh(t, wt, tt.script)
			checkStatus(t, wt, tt.dirs...)
		})
	}
}

// Shallow clones, grafts and replace refs change what the ahead/behind
// walk sees.
func TestAheadBehindHistoryMatchesGit(t *testing.T) {
	gitEnv(t)
	base := t.TempDir()
	sh(t, base, `
		git init -q -b main up; cd up
		for i in A B C; do echo $i > f; git add f; git commit -qm $i; done
		cd ..; git clone -q --bare up up.git
		git -c protocol.file.allow=always clone -q --depth 1 "file://$PWD/up.git" shallow
		cd up; git reset -q --hard HEAD~1; echo E > f; git commit -qam E; git push -q -f ../up.git main
		cd ../shallow; git fetch -q --depth 1`)
	checkStatus(t, filepath.Join(base, "shallow"))

	wt := newRepo(t)
	sh(t, wt, `
		for i in 1 2 3 4 5; do echo $i > f$i; git add .; git commit -qm c$i; done
		git branch -q up HEAD~3; git branch -q -u up`)
	checkStatus(t, wt)
	sh(t, wt, `echo "$(git rev-parse HEAD~1) $(git rev-parse HEAD~4)" > .git/info/grafts`)
	checkStatus(t, wt)
	os.Remove(filepath.Join(wt, ".git/info/grafts"))
	sh(t, wt, `git replace HEAD~1 HEAD~3`)
	checkStatus(t, wt)
	sh(t, wt, `git replace -d HEAD~1 >/dev/null; git replace HEAD HEAD~2`)
	checkStatus(t, wt)
}

// Ahead/behind on random histories with merges and skewed commit dates:
// git's counts come from date-ordered walks with shortcuts, not from the
// exact set difference.
func TestAheadBehindSkewedDatesMatchGit(t *testing.T) {
	gitEnv(t)
	seeds := 4
	if testing.Short() {
		seeds = 1
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			wt := newRepo(t)
			const n = 40
			ids := make([]string, n)
			for i := range n {
				date := 1600000000 + rng.IntN(200)*3600
				blob := strings.TrimSpace(gitIn(t, wt, fmt.Sprintf("%d\n", i), "hash-object", "-w", "--stdin"))
				tree := strings.TrimSpace(gitIn(t, wt, "100644 blob "+blob+"\tf\n", "mktree"))
				args := []string{"commit-tree", tree, "-m", fmt.Sprint("c", i)}
				if i > 0 {
					p1 := ids[i-1-rng.IntN(min(i, 5))]
					args = append(args, "-p", p1)
					if i > 3 && rng.IntN(4) == 0 {
						if p2 := ids[rng.IntN(i)]; p2 != p1 {
							args = append(args, "-p", p2)
						}
					}
				}
				t.Setenv("GIT_COMMITTER_DATE", fmt.Sprintf("@%d +0000", date))
				ids[i] = strings.TrimSpace(git(t, wt, args...))
			}
			for i, id := range ids {
				git(t, wt, "update-ref", fmt.Sprintf("refs/heads/b%d", i), id)
			}
			for range 12 {
				a, b := rng.IntN(n), rng.IntN(n)
				git(t, wt, "checkout", "-q", "-f", fmt.Sprintf("b%d", a))
				git(t, wt, "config", fmt.Sprintf("branch.b%d.remote", a), ".")
				git(t, wt, "config", fmt.Sprintf("branch.b%d.merge", a), fmt.Sprintf("refs/heads/b%d", b))
				want := strings.SplitN(cliStatus(t, wt, ""), "\n", 2)[0]
				got := strings.SplitN(ourStatus(t, wt, ""), "\n", 2)[0]
				if got != want {
					t.Errorf("b%d...b%d: git says %q, Status %q", a, b, want, got)
				}
			}
		})
	}
}

// gitIn runs git with stdin.
func gitIn(t *testing.T, dir, stdin string, args ...string) string {
	t.Helper()
	cmd := execGit(dir, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return string(out)
}

// The index in version 4 (prefix-compressed names) and split.
func TestIndexFormatsStatusMatchesGit(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	for i := range 30 {
		write(t, wt, fmt.Sprintf("dir%d/sub/file%d.txt", i%4, i), fmt.Sprint(i))
	}
	commitAll(t, wt, "init")
	git(t, wt, "update-index", "--index-version", "4")
	write(t, wt, "dir1/sub/file1.txt", "changed")
	write(t, wt, "dir2/new.txt", "new")
	git(t, wt, "add", "dir2/new.txt")
	git(t, wt, "rm", "-q", "--cached", "dir3/sub/file3.txt")
	checkStatus(t, wt, "", "dir1", "dir3")
	git(t, wt, "update-index", "--split-index")
	time.Sleep(10 * time.Millisecond)
	write(t, wt, "dir0/sub/file0.txt", "changed too")
	git(t, wt, "add", "dir0")
	checkStatus(t, wt, "", "dir0", "dir1")
}

// Racily clean files (written in the second the index was, as after a
// checkout) are hashed once, not at every status: git would write their
// refreshed stat data back to the index, which this package never does.
// A later change to such a file is still seen.
func TestRacilyCleanFilesAreHashedOnce(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	for i := range 20 {
		write(t, wt, fmt.Sprintf("f%02d", i), fmt.Sprintf("content %02d\n", i))
	}
	// Timestamps ahead of the index: every entry is racy.
	sh(t, wt, `touch -d '+30 seconds' f*; git add .; git commit -qm1; touch -d '+30 seconds' f*`)
	r, err := Open(wt, Options{MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	status := func() string {
		t.Helper()
		r.Invalidate()
		b, err := r.Status(ctx, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// Files stamped in the future are never trusted (their timestamps are
	// not before the hashing); stamped in the past, they are remembered.
	status()
	if n := r.hashed.Load(); n != 20 {
		t.Fatalf("first status hashed %d files; want 20 racily clean ones", n)
	}
	sh(t, wt, `touch -d '-30 seconds' f*`)            // stat data changed, content not
	time.Sleep(cleanMemoSlack + 100*time.Millisecond) // ctime is now
	status()
	before := r.hashed.Load()
	if got := status(); got != "## main\n" {
		t.Fatalf("status = %q", got)
	}
	if n := r.hashed.Load() - before; n != 0 {
		t.Errorf("a second status hashed %d files; want none", n)
	}
	// Same size, same second: only the nanoseconds and ctime change.
	sh(t, wt, `m=$(stat -c %Y f03); echo 'CONTENT 03' > f03; touch -d "@$m" f03`)
	checkStatus(t, wt)
	if got := status(); !strings.Contains(got, " M f03") {
		t.Errorf("a remembered file changed in place is not seen:\n%s", got)
	}
}

// Settings written after Open (git config, git branch -u) are seen.
func TestStatusSeesConfigChanges(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	sh(t, wt, `echo a > a; git add a; git commit -qm1; git branch side; echo b > b; git add b; git commit -qm2; mkdir d; touch d/x`)
	r, err := Open(wt, Options{MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, step := range []string{
		"",
		"git branch -q -u side",
		"git config status.showUntrackedFiles all",
		"git config core.quotePath false; touch é",
	} {
		if step != "" {
			sh(t, wt, step)
			r.Invalidate() // as the mount's watcher does for worktree files
		}
		b, err := r.Status(ctx, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := cliStatus(t, wt, ""); string(b) != want {
			t.Errorf("after %q: Status\n%s\ngit\n%s", step, b, want)
		}
	}
}

// A Git LFS checkout: the index holds pointers, the worktree the content.
// git runs git-lfs's clean filter on files whose stat data changed; their
// SHA-256 and size are compared with the pointer instead (here against a
// stand-in git-lfs that writes the same pointers).
func TestLFSFilesMatchGit(t *testing.T) {
	gitEnv(t)
	bin := t.TempDir()
	lfs := `#!/bin/sh
tmp=$(mktemp); cat > "$tmp"
case "$1" in
clean)
  if head -c 40 "$tmp" | grep -q '^version https://git-lfs'; then cat "$tmp"
  else printf 'version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %s\n' "$(sha256sum "$tmp" | cut -d' ' -f1)" "$(stat -c %s "$tmp")"; fi;;
*) cat "$tmp";;
esac
rm -f "$tmp"
`
	if err := os.WriteFile(filepath.Join(bin, "git-lfs"), []byte(lfs), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	wt := newRepo(t)
	sh(t, wt, `
		git config filter.lfs.clean 'git-lfs clean -- %f'
		git config filter.lfs.smudge 'git-lfs smudge -- %f'
		git config filter.lfs.required true
		echo '*.bin filter=lfs diff=lfs merge=lfs -text' > .gitattributes
		head -c 3000 /dev/urandom > a.bin; head -c 2000 /dev/urandom > b.bin; seq 1 100 > c.bin
		git add .; git commit -qm1
		git cat-file -p HEAD:a.bin | grep -q '^oid sha256:'
		touch -d '+3 seconds' a.bin b.bin c.bin
		head -c 2000 /dev/urandom > b.bin`)
	checkStatus(t, wt)
}

// Rules that reach every folder, kept in the checkout: a submodule's
// ignore setting in .gitmodules, and files core.excludesFile and
// core.attributesFile name. A change to one is seen in every folder's
// status, whether the mount tells of it (Invalidate of its path) or not
// (the cached results check the files' stat data); before, only the
// folders above the file were read again, and a subfolder's status kept
// the old rules for good (found by a differential pass).
func TestStatusSeesRulesOfTheWholeCheckout(t *testing.T) {
	gitEnv(t)
	t.Setenv("GIT_OPTIONAL_LOCKS", "0") // git status must not refresh the index, which would drop every cached result
	wt := newRepo(t)
	sh(t, wt, `set -e
mkdir cfg sub mods
echo '*.zz' > cfg/ignore; : > cfg/attrs
git config core.excludesFile "$PWD/cfg/ignore"; git config core.attributesFile "$PWD/cfg/attrs"
printf 'a\r\nb\r\n' > sub/a.txt; echo k > sub/keep
git init -q mods/plain; (cd mods/plain; echo p > p; git add p; git commit -qm p)
git add -A 2>/dev/null; git commit -qm1
touch sub/b.zz; echo changed > mods/plain/p; touch -d '+2 seconds' sub/a.txt`)
	r, err := Open(wt, Options{MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, step := range []struct{ script, told string }{
		{"", ""},
		{"echo '#' > cfg/ignore", "cfg/ignore"},
		{"echo '*.zz' > cfg/ignore; sleep 0.01", ""},
		{"echo '*.txt text' > cfg/attrs", "cfg/attrs"},
		{"git config -f .gitmodules submodule.mods/plain.path mods/plain; git config -f .gitmodules submodule.mods/plain.ignore all", ".gitmodules"},
		{"git config -f .gitmodules submodule.mods/plain.ignore none; sleep 0.01", ""},
	} {
		if step.script != "" {
			sh(t, wt, step.script)
		}
		if step.told != "" {
			r.Invalidate(step.told) // as the mount does for a write through it
		}
		for _, dir := range []string{"", "sub", "mods"} {
			b, err := r.Status(ctx, dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := cliStatus(t, wt, dir); string(b) != want {
				t.Errorf("after %q (told %q): Status(%q)\n%s\ngit\n%s", step.script, step.told, dir, b, want)
			}
		}
	}
}
