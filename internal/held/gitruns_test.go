package held

import (
	"testing"

	"golang.org/x/sys/unix"
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
		if got := c.c.GitRuns(); len(got) != c.want {
			t.Errorf("%+v: GitRuns() = %q, want %d paths", c.c, got, c.want)
		}
	}
}
