package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMakeRunExample prepares what `make run` mounts with the same script
// (scripts/example.sh, twice: it must be idempotent), mounts its config the
// way the Makefile does, and walks the README's tour: the git source's
// .status and .revs/, search, and the agent's view, decided by the policy.
func TestMakeRunExample(t *testing.T) {
	requireFUSE(t)
	requireTool(t, "git", "git")
	dir := sharedTempDir(t)
	rd := filepath.Join(dir, "run")
	script := repoFile(t, "scripts/example.sh")
	sh(t, script+" "+rd)
	head := sh(t, "git -C "+rd+"/repo rev-parse HEAD")
	cfg1, err := os.ReadFile(filepath.Join(rd, "config.toml"))
	must(t, err)
	sh(t, script+" "+rd)
	if again := sh(t, "git -C "+rd+"/repo rev-parse HEAD"); again != head {
		t.Errorf("a second run of example.sh changed the checkout: HEAD %s then %s", head, again)
	}
	if cfg2, _ := os.ReadFile(filepath.Join(rd, "config.toml")); string(cfg2) != string(cfg1) {
		t.Errorf("a second run of example.sh changed config.toml")
	}

	// Under make uring-test the example is mounted over io_uring too (the
	// idempotence check above compared example.sh's own output).
	if tr := withTransport(string(cfg1)); tr != string(cfg1) {
		must(t, os.WriteFile(filepath.Join(rd, "config.toml"), []byte(tr), 0o644))
	}
	e := &env{t: t, dir: rd, mnt: filepath.Join(rd, "mnt"), state: filepath.Join(rd, "state"), cfg: filepath.Join(rd, "config.toml"), paths: map[string]string{}}
	e.start()
	agent := filepath.Join(rd, "agent")

	// .status is what git says, in the root and in a folder.
	want := sh(t, "git -C "+rd+"/repo status --porcelain=v1 --branch -- .")
	got, err := os.ReadFile(filepath.Join(e.mnt, "repo", ".status"))
	if err != nil || string(got) != want {
		t.Fatalf("repo/.status = %q, %v; git status says %q", got, err, want)
	}
	for _, line := range []string{"## main", "A  src/quiet.py", " M src/util.py", "?? notes.txt", " M secrets/api.txt"} {
		if !strings.Contains(string(got), line+"\n") {
			t.Errorf("repo/.status lacks %q (the example promises a staged, a modified and an untracked file):\n%s", line, got)
		}
	}
	// .revs: branches and tags, read-only commit trees.
	for _, p := range []string{".revs/main/README.md", ".revs/v0.1/src/util.py", ".revs/feature/docs/feature.md"} {
		if _, err := os.Stat(filepath.Join(e.mnt, "repo", p)); err != nil {
			t.Errorf("repo/%s: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(e.mnt, "repo", ".revs/main/docs/feature.md")); err == nil {
		t.Errorf(".revs/main shows a file committed only on the feature branch")
	}
	// Search, from the CLI and from inside the mount, once the first index
	// build (which runs after the mount serves) has reached the README.
	var out []byte
	eventually(t, 30*time.Second, "neuralisfs search neuralis to find the repo's README", func() bool {
		out, err = exec.Command(binPath, "search", "-c", e.cfg, "neuralis").CombinedOutput()
		return err == nil && strings.Contains(string(out), "repo://README.md")
	})
	eventually(t, 15*time.Second, "search in the mount finds the repo's README", func() bool {
		b, _ := os.ReadFile(filepath.Join(e.mnt, ".neuralis", "search", "neuralis"))
		return strings.Contains(string(b), "repo://README.md")
	})
	// The agent's view, as uid 1001: secrets are absent from listings and
	// from .status, and writes are refused.
	view, err := run(t, 1001, "cat "+agent+"/.neuralis/whoami; ls "+agent+"/repo; echo ---; cat "+agent+"/repo/.status; echo ---; echo x > "+agent+"/repo/src/app.py && echo WROTE")
	if err != nil && !strings.Contains(view, "---") {
		t.Fatalf("the agent's view: %v\n%s", err, view)
	}
	parts := strings.Split(view, "---\n")
	if len(parts) != 3 {
		t.Fatalf("the agent's view printed:\n%s", view)
	}
	if !strings.Contains(parts[0], "principal: agent") || strings.Contains(parts[0], "secrets") || !strings.Contains(parts[0], "src") {
		t.Errorf("whoami and ls in the agent's view:\n%s", parts[0])
	}
	if strings.Contains(parts[1], "secrets") || !strings.Contains(parts[1], " M src/util.py") {
		t.Errorf("the agent's .status should show src/util.py and hide secrets/:\n%s", parts[1])
	}
	if strings.Contains(parts[2], "WROTE") {
		t.Errorf("the agent wrote repo://src/app.py, which the policy denies")
	}
	if b, _ := os.ReadFile(filepath.Join(rd, "repo", "src", "app.py")); strings.TrimSpace(string(b)) == "x" {
		t.Errorf("the agent's write reached the checkout")
	}
}
