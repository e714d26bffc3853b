package tests

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A read-only view is served without OPEN and RELEASE (fs/noopen.go): the
// kernel opens files itself, with handle 0, and never asks again. What
// the daemon decided at OPEN is decided elsewhere there, and this test
// tries to get past each: reads are decided at READ (and a reload that
// hides a file drops the pages the kernel kept, so a process holding it
// open, or reopening it through /proc/self/fd, reads nothing more), an
// exec the policy denies fails in the kernel's own permission check (the
// file shows no execute bits in the view, also after a reload that
// denies it), and virtual files (.status, .neuralis/, .revs/) are read
// whole and fresh without an open.
func TestReadOnlyViewWithoutOpenDecidesAtReadAndExec(t *testing.T) {
	view, data := agentViewData(t)
	writeFile(t, filepath.Join(data, "bin", "denied"), "#!/bin/sh\necho ran-denied\n", 0o755)
	writeFile(t, filepath.Join(data, "bin", "allowed"), "#!/bin/sh\necho ran-allowed\n", 0o755)
	os.Chmod(filepath.Join(data, "bin"), 0o777)
	big := make([]byte, 3<<20+123) // many READs, the last one short
	for i := range big {
		big[i] = byte('a' + (i*7+i/4096)%26)
	}
	must(t, os.WriteFile(filepath.Join(data, "public", "big.txt"), big, 0o644))
	writeFile(t, filepath.Join(data, "public", "later.txt"), "LATER-HIDDEN\n", 0o644)
	repo := filepath.Join(sharedTempDir(t), "repo")
	must(t, os.Mkdir(repo, 0o755))
	makeRepo(t, repo)
	sh(t, "chmod -R a+rwX "+repo)
	cfg := policyTOML + viewTOML("agent", view) + "read_only = true\n"
	e := newEnv(t, cfg, src{slug: "data", path: data}, src{slug: "repo", kind: "git", path: repo})
	v, vr := filepath.Join(view, "data"), filepath.Join(view, "repo")

	// Reads: small files, a large one (many READs with handle 0), twice.
	if out := agent(t, "cat "+v+"/public/p.txt "+v+"/ro/r.txt"); out != "public text\nread only\n" {
		t.Errorf("reads in the view: %q", out)
	}
	want := fmt.Sprintf("%x", sha256.Sum256(big))
	for i := range 2 {
		if out := agent(t, "sha256sum < "+v+"/public/big.txt"); !strings.HasPrefix(out, want) {
			t.Errorf("read %d of a 3 MiB file in the view: %q, want %s", i, out, want)
		}
	}
	if out := agent(t, "dd if="+v+"/public/big.txt bs=4096 skip=300 count=2 iflag=direct status=none | sha256sum"); !strings.HasPrefix(out, fmt.Sprintf("%x", sha256.Sum256(big[300*4096:302*4096]))) {
		t.Errorf("O_DIRECT read in the view: %q", out)
	}
	// Another uid reads nothing of what the kernel keeps for the agent:
	// the view's top folder is the agent's alone.
	if out, err := run(t, 1002, "cat "+v+"/public/p.txt "+v+"/public/big.txt 2>&1 | head -c 300"); err != nil || strings.Count(out, "Permission denied") != 2 {
		t.Errorf("another uid reading in the view: %v %q; want EACCES twice", err, out)
	}
	// Hidden names are still absent, for reading and for opening.
	for _, p := range []string{"secrets/k", "mixed/hidden/h.txt"} {
		if out, err := run(t, 1001, "cat "+filepath.Join(v, p)+" 2>&1"); err == nil || !strings.Contains(out, "No such file") {
			t.Errorf("cat %s in the view: %v %q; want ENOENT", p, err, out)
		}
	}

	// Exec: the denied file shows no execute bits and does not run; the
	// main mount still shows its bits (the view's answer is its own).
	out := agent(t, v+"/bin/allowed 2>&1; "+v+"/bin/denied 2>&1; stat -c '%A %n' "+v+"/bin/denied "+v+"/bin/allowed")
	if !strings.Contains(out, "ran-allowed") || strings.Contains(out, "ran-denied") || !strings.Contains(out, "Permission denied") ||
		!strings.Contains(out, "-rw-r--r-- "+v+"/bin/denied") || !strings.Contains(out, "-rwxr-xr-x "+v+"/bin/allowed") {
		t.Errorf("exec in the view:\n%s", out)
	}
	if out := sh(t, "stat -c '%A' "+e.m("data", "bin", "denied")); out != "-rwxr-xr-x\n" {
		t.Errorf("the main mount shows bin/denied as %q", out)
	}

	// Virtual files: read whole and fresh, their size in stat.
	main := agent(t, "cat "+e.m("repo", ".status"))
	st := agent(t, "cat "+vr+"/.status")
	if st != main || !strings.Contains(st, "src/f2.txt") {
		t.Errorf("the view's .status:\n%s\nthe main mount's, as the agent:\n%s", st, main)
	}
	if out := agent(t, "stat -c %s "+vr+"/.status"); out != fmt.Sprintf("%d\n", len(st)) {
		t.Errorf("stat of the view's .status gives size %q; its content is %d bytes", out, len(st))
	}
	sh(t, "echo more >> "+e.m("repo", "docs", "readme.md"))
	eventually(t, 5*time.Second, "a change to show in the view's .status", func() bool {
		return strings.Contains(agent(t, "cat "+vr+"/.status"), "docs/readme.md")
	})
	if out := agent(t, "cat "+view+"/.neuralis/whoami"); !strings.Contains(out, "principal: agent\n") || !strings.Contains(out, "view: agent\n") {
		t.Errorf(".neuralis/whoami in the view: %q", out)
	}
	committed := gitOut(t, repo, "show", "main:docs/readme.md")
	for range 2 {
		if out := agent(t, "cat "+vr+"/.revs/main/docs/readme.md"); out != committed {
			t.Errorf("a committed file in the view's .revs: %q, want %q", out, committed)
		}
	}

	// A reload that hides public/later.txt and denies running bin/allowed,
	// while the agent holds later.txt open and has read it.
	flags := sharedTempDir(t)
	os.Chmod(flags, 0o777)
	ready, goOn := filepath.Join(flags, "ready"), filepath.Join(flags, "go")
	script := `
import os, sys, time
p, ready, go = sys.argv[1:4]
fd = os.open(p, os.O_RDONLY)
print("before", os.pread(fd, 100, 0))
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.01)
for how in ("pread", "reopen", "path"):
    try:
        if how == "pread":
            b = os.pread(fd, 100, 0)
        elif how == "reopen":
            b = open("/proc/self/fd/%d" % fd, "rb").read()
        else:
            b = open(p, "rb").read()
        print(how, b)
    except OSError as e:
        print(how, "error", e.errno)
`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-c", script, filepath.Join(v, "public", "later.txt"), ready, goOn)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	var held strings.Builder
	cmd.Stdout, cmd.Stderr = &held, &held
	must(t, cmd.Start())
	eventually(t, 10*time.Second, "the agent to open and read later.txt", func() bool {
		_, err := os.Stat(ready)
		return err == nil
	})
	text, err := os.ReadFile(e.cfg)
	must(t, err)
	e.rewrite(string(text) + `
[[rule]]
uri = "data://public/later.txt"
who = ["role:agent"]
deny = ["read"]

[[rule]]
uri = "data://bin/allowed"
who = ["role:agent"]
deny = ["exec"]
`)
	if line := e.hup(); !strings.Contains(line, "msg=reloaded") {
		t.Fatalf("reload: %s", line)
	}
	writeFile(t, goOn, "", 0o644)
	err = cmd.Wait()
	got := held.String()
	if err != nil || !strings.Contains(got, "before b'LATER-HIDDEN\\n'") {
		t.Fatalf("the agent's reader: %v\n%s", err, got)
	}
	if strings.Count(got, "LATER-HIDDEN") != 1 || strings.Count(got, " error ") != 3 {
		t.Errorf("after the reload hid later.txt, a process holding it open read:\n%s\nwant an error from each of pread, reopen and path", got)
	}
	if out := agent(t, v+"/bin/allowed 2>&1; stat -c '%A' "+v+"/bin/allowed"); strings.Contains(out, "ran-allowed") || !strings.Contains(out, "Permission denied") || !strings.Contains(out, "-rw-r--r--") {
		t.Errorf("after the reload denied exec of bin/allowed, in the view:\n%s", out)
	}
	if out := agent(t, "cat "+v+"/public/p.txt"); out != "public text\n" {
		t.Errorf("after the reload, a file still allowed: %q", out)
	}
}
