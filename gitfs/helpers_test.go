package gitfs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitEnv isolates the git CLI (and this package, which reads the same
// variables) from the machine's configuration for the rest of the test.
func gitEnv(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("git CLI unavailable: %v", err)
	}
	home := t.TempDir()
	cfg := filepath.Join(home, "gitconfig")
	if err := os.WriteFile(cfg, []byte("[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"HOME":                home,
		"XDG_CONFIG_HOME":     filepath.Join(home, ".config"),
		"GIT_CONFIG_GLOBAL":   cfg,
		"GIT_CONFIG_NOSYSTEM": "1",
		"GIT_AUTHOR_NAME":     "A U Thor",
		"GIT_AUTHOR_EMAIL":    "author@example.com",
		"GIT_COMMITTER_NAME":  "C O Mitter",
		"GIT_COMMITTER_EMAIL": "committer@example.com",
		"GIT_AUTHOR_DATE":     "2026-01-02T03:04:05Z",
		"GIT_COMMITTER_DATE":  "2026-01-02T03:04:05Z",
		"LC_ALL":              "C",
	} {
		t.Setenv(k, v)
	}
	return home
}

// git runs the git CLI in dir and returns its stdout.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, errb.String())
	}
	return out.String()
}

// newRepo runs git init in a fresh directory and returns it.
func newRepo(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "wt")
	git(t, filepath.Dir(dir), "init", "-q", "-b", "main", dir)
	return dir
}

// write creates (or replaces) the file rel below root with content.
func write(t testing.TB, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func commitAll(t testing.TB, wt, msg string) {
	t.Helper()
	git(t, wt, "add", "-A")
	git(t, wt, "commit", "-q", "--allow-empty", "-m", msg)
}

// cliStatus is the reference output.
func cliStatus(t testing.TB, wt, dir string) string {
	t.Helper()
	return git(t, filepath.Join(wt, filepath.FromSlash(dir)), "status", "--porcelain=v1", "--branch", "--", ".")
}

// checkStatus asserts that Status(dir) equals the CLI's output, computing
// ours both before the CLI runs (git status may refresh the index) and
// after, each with a fresh Repo.
func checkStatus(t *testing.T, wt string, dirs ...string) {
	t.Helper()
	if len(dirs) == 0 {
		dirs = []string{""}
	}
	for _, dir := range dirs {
		before := ourStatus(t, wt, dir)
		want := cliStatus(t, wt, dir)
		after := ourStatus(t, wt, dir)
		t.Logf("Status(%q):\n%s", dir, want)
		if before != want {
			t.Errorf("Status(%q) before git ran differs from git status\n--- git:\n%s--- ours:\n%s", dir, want, before)
		}
		if after != want {
			t.Errorf("Status(%q) after git ran differs from git status\n--- git:\n%s--- ours:\n%s", dir, want, after)
		}
	}
}

func ourStatus(t *testing.T, wt, dir string) string {
	t.Helper()
	r, err := Open(wt)
	if err != nil {
		t.Fatalf("Open(%s): %v", wt, err)
	}
	b, err := r.Status(context.Background(), dir, nil)
	if err != nil {
		t.Fatalf("Status(%q): %v", dir, err)
	}
	return string(b)
}

// execGit prepares a git command whose failure the caller tolerates.
func execGit(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	return cmd
}
