package held

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
)

func TestGitRuns(t *testing.T) {
	for rel, want := range map[string]bool{
		".git":                                 true,
		"sub/.git":                             true,
		".git/config":                          true,
		".git/config.worktree":                 true,
		"vendor/x/.git/config":                 true,
		".git/hooks":                           true,
		".git/hooks/pre-commit":                true,
		".git/hooks/pre-commit.sample":         false,
		".git/modules/lib/config":              true,
		".git/modules/a/b/hooks/post-checkout": true,
		".git/modules/lib/hooks/x.sample":      false,
		".git/worktrees/w/config.worktree":     true,
		".git/index":                           false,
		".git/HEAD":                            false,
		".git/objects/ab/cdef":                 false,
		".git/refs/heads/config":               false,
		".git/refs/heads/hooks/x":              false,
		".git/logs/refs/heads/hooks":           false,
		".git/info/exclude":                    false,
		".git/commondir":                       true,
		".git/worktrees/w/commondir":           true,
		".git/refs/heads/commondir":            false,
		"config":                               false,
		"hooks/pre-commit":                     false,
		".github/workflows/ci.yml":             false,
		"a.git/config":                         false,
		".gitignore":                           false,
	} {
		if got := GitRuns(rel); got != want {
			t.Errorf("GitRuns(%q) = %v, want %v", rel, got, want)
		}
	}
	cases := []struct {
		c    Change
		want int
	}{
		{Change{Op: "modify", Path: ".git/config"}, 1},
		{Change{Op: "delete", Path: ".git/hooks/pre-commit"}, 0},
		{Change{Op: "rmdir", Path: ".git"}, 0},
		{Change{Op: "mkdir", Path: "new", Inside: []string{"new/.git", "new/.git/config", "new/.git/HEAD"}}, 2},
		{Change{Op: "rename", Path: ".git/hooks/pre-commit", From: ".git/hooks/pre-commit.sample"}, 1},
		{Change{Op: "symlink", Type: "symlink", Path: ".git/modules/lib"}, 1},
		{Change{Op: "symlink", Type: "symlink", Path: "docs/link"}, 0},
		{Change{Op: "create", Path: "a.txt", Links: []string{".git/hooks/post-merge"}}, 1},
		{Change{Op: "modify", Path: ".git/index"}, 0},
		{Change{Op: "replace", Type: "file", Path: ".git/config", Digest: "sha256:a", Mode: 0o644,
			Base: Base{Type: unix.S_IFREG, Digest: "sha256:a", Mode: 0o644}}, 0},
		{Change{Op: "replace", Type: "file", Path: ".git/config", Digest: "sha256:b", Mode: 0o644,
			Base: Base{Type: unix.S_IFREG, Digest: "sha256:a", Mode: 0o644}}, 1},
		{Change{Op: "chmod", Type: "file", Path: ".git/hooks/pre-push", Digest: "sha256:a", Mode: 0o755,
			Base: Base{Type: unix.S_IFREG, Digest: "sha256:a", Mode: 0o644}}, 1},
	}
	for _, c := range cases {
		if got := c.c.GitRuns(nil); len(got) != c.want {
			t.Errorf("%+v: GitRuns() = %q, want %d paths", c.c, got, c.want)
		}
	}
}

// TestHookDirs: a folder of the worktree that a repository's config names
// in core.hooksPath (relative to the worktree, or absolute inside the
// source) is one git runs; one outside the source, or in a repository
// that sets none, is not.
func TestHookDirs(t *testing.T) {
	back := t.TempDir()
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(back, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(".git/config", "[core]\n\tbare = false\n[include]\n\tpath = ../shared.gitconfig\n[includeIf \"gitdir:/ci/\"]\n\tpath = "+filepath.Join(back, "ci/git.cfg")+"\n[include]\n\tpath = ~/.gitconfig-extra\n[core]\n\tHooksPath = .husky/_\n")
	write("lib/.git/config", "[core]\n\thookspath = "+filepath.Join(back, "lib/githooks")+"\n")
	write("out/.git/config", "[core]\n\thooksPath = ../../elsewhere\n")
	write("plain/.git/config", "[core]\n\tbare = false\n")
	r, err := mounts.OpenRoot(back)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHookDirs(r)
	for p, want := range map[string]bool{
		".husky/_/pre-commit":   true,
		".husky/_":              true,
		".husky/pre-commit":     false,
		"src/a.go":              false,
		"lib/githooks/pre-push": true,
		"lib/githooks":          true,
		"lib/src/x":             false,
		"out/hooks/x":           false,
		"plain/.husky/_/x":      false,
		"deep/er/.husky/_/x":    false,
		"shared.gitconfig":      true,
		"ci/git.cfg":            true,
		"ci/other":              false,
		".gitconfig-extra":      false,
	} {
		if got := h.runs(p); got != want {
			t.Errorf("runs(%q) = %v, want %v", p, got, want)
		}
	}
	c := Change{Op: "modify", Type: "file", Path: ".husky/_/pre-commit"}
	if got := c.GitRuns(h); len(got) != 1 {
		t.Errorf("GitRuns of a hook under core.hooksPath = %q", got)
	}
}
