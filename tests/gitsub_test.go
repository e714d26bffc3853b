package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A git source may be a folder inside a checkout: its .status files are
// what git -C <folder> status --porcelain=v1 --branch -- . prints, its
// .revs/<rev>/ is that folder of each commit, and its identity is the
// commit plus the changes under it only.
func TestSubFolderGitSourceMatchesGitCLI(t *testing.T) {
	requireFUSE(t)
	base := t.TempDir()
	repo := filepath.Join(base, "repo")
	must(t, os.Mkdir(repo, 0o755))
	makeRepo(t, repo)
	plain := filepath.Join(base, "plain")
	must(t, os.Mkdir(plain, 0o755))
	writeFile(t, filepath.Join(plain, "x"), "x\n", 0o644)
	srcDir := filepath.Join(repo, "src")
	e := newEnv(t, "", src{slug: "sub", kind: "git", path: srcDir}, src{slug: "plain", kind: "git", path: plain})
	dirs := []string{"", "deep", "deep/er"}
	compareStatus(t, e, "sub", srcDir, "initial", dirs)

	if !hasStatus(t, e.mnt, "plain", "UNAVAILABLE", "NOT_A_GIT_REPOSITORY", "") {
		t.Errorf("a folder outside any checkout: %q", sourceLine(t, e.mnt, "plain"))
	}
	head := strings.TrimSpace(gitOut(t, repo, "rev-parse", "HEAD"))
	f := sourceLine(t, e.mnt, "sub")
	if f == nil || f[2] != "AVAILABLE" || !strings.HasPrefix(f[4], "git:"+head+" WORKTREE_MODIFIED (") ||
		!strings.Contains(f[4], "f1.txt") || strings.Contains(f[4], "src/") || strings.Contains(f[4], "untracked") || strings.Contains(f[4], "docs") {
		t.Errorf("identity %q: want git:%s and the changes under src only, as paths of the source", f, head)
	}

	must(t, os.WriteFile(e.m("sub", "f5.txt"), []byte("edited through the mount\n"), 0o644))
	must(t, os.WriteFile(e.m("sub", "deep", "new2.txt"), []byte("new\n"), 0o644))
	must(t, os.Remove(e.m("sub", "f2.txt")))
	compareStatus(t, e, "sub", srcDir, "after writes through the mount", dirs)
	gitOut(t, repo, "add", "-A", "src")
	compareStatus(t, e, "sub", srcDir, "after git add of the folder", dirs)
	gitOut(t, repo, "commit", "-q", "-m", "src only", "--", "src")
	compareStatus(t, e, "sub", srcDir, "after a commit of the folder", dirs)
	head = strings.TrimSpace(gitOut(t, repo, "rev-parse", "HEAD"))
	eventually(t, 5*time.Second, "a clean sub-folder has the bare commit as identity (the rest of the checkout is still dirty)", func() bool {
		f := sourceLine(t, e.mnt, "sub")
		return f != nil && f[4] == "git:"+head
	})

	// .revs/<rev>/ is the folder src of each commit.
	for _, rev := range []string{head, "HEAD~1", "main"} {
		sha := strings.TrimSpace(gitOut(t, repo, "rev-parse", rev))
		names := strings.Split(strings.TrimRight(gitOut(t, repo, "ls-tree", "-r", "--name-only", "-z", sha, "--", "src"), "\x00"), "\x00")
		if len(names) < 3 {
			t.Fatalf("ls-tree %s src: %q", sha, names)
		}
		for _, n := range names {
			rel := strings.TrimPrefix(n, "src/")
			b, err := os.ReadFile(filepath.Join(e.m("sub"), ".revs", rev, rel))
			if want := gitOut(t, repo, "show", sha+":"+n); err != nil || string(b) != want {
				t.Errorf(".revs/%s/%s: %q, %v; want git show %s:%s = %q", rev, rel, b, err, sha, n, want)
			}
		}
		got, err := readDirNames(filepath.Join(e.m("sub"), ".revs", rev))
		want := strings.Split(strings.TrimRight(gitOut(t, repo, "ls-tree", "--name-only", "-z", sha+":src"), "\x00"), "\x00")
		if err != nil || strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf(".revs/%s lists %v, %v; want git ls-tree %s:src = %v", rev, got, err, sha, want)
		}
	}
	if _, err := os.Stat(filepath.Join(e.m("sub"), ".revs", head, "docs")); err == nil {
		t.Errorf(".revs shows a folder outside the source")
	}
}
