package tests

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A view keeps symlink targets in the kernel (FUSE_CACHE_SYMLINKS):
// readlink, and every walk through a link, costs no request once the
// target is known. Every change must still show: a link replaced behind
// the mount (after the watcher's report) or through the main mount (at
// once), and a reload that hides a link must drop its kept target, even
// for a process holding an O_PATH descriptor of it. The main mount, where
// READLINK is decided per caller, keeps nothing.
func TestViewKeepsSymlinkTargetsUntilTheyChange(t *testing.T) {
	requireFUSE(t)
	e, view, base := reloadEnv(t, "")
	e.stop()
	// The links are made while nothing is mounted: no watcher report of
	// their making can drop a target the view has just kept.
	b := e.b("data")
	sh(t, "cd "+b+" && ln -s public.txt pub.link && ln -s n.txt notes/n.link && echo other > other.txt")
	e.args = []string{"-debug"}
	e.start()
	v := filepath.Join(view, "data")
	readlink := func(uid int, p string) string {
		t.Helper()
		out, err := run(t, uid, "readlink "+p)
		if err != nil {
			return "error: " + strings.TrimSpace(out)
		}
		return strings.TrimSpace(out)
	}

	// Kept: 100 readlinks and walks through the link in the view send
	// at most one READLINK; the main mount asks every time.
	readlink(1001, v+"/pub.link")
	run(t, 1001, "stat "+v+"/marker-sl-1 2>/dev/null")
	if out, err := run(t, 1001, "for i in $(seq 50); do readlink "+v+"/pub.link; cat "+v+"/pub.link; done > /dev/null"); err != nil {
		t.Fatalf("reading the link in the view: %v\n%s", err, out)
	}
	log := debugLogUpTo(t, e, 1001, v+"/marker-sl-2")
	if n := strings.Count(log[strings.Index(log, `\"marker-sl-1\"`):], ": READLINK "); n > 1 {
		t.Errorf("50 readlinks and 50 opens through a link in the view sent %d READLINK; want at most 1", n)
	}
	run(t, 0, "stat "+e.m("data")+"/marker-sl-3 2>/dev/null")
	sh(t, "for i in $(seq 20); do readlink "+e.m("data")+"/pub.link; done > /dev/null")
	log = debugLogUpTo(t, e, 0, e.m("data")+"/marker-sl-4")
	if n := strings.Count(log[strings.Index(log, `\"marker-sl-3\"`):], ": READLINK "); n < 20 {
		t.Errorf("20 readlinks in the main mount sent %d READLINK; want 20 (nothing kept there)", n)
	}

	// Replaced behind the mount: seen once the watcher reports it.
	sh(t, "cd "+b+" && ln -s other.txt pub.new && mv -T pub.new pub.link")
	eventually(t, 5*time.Second, "the view to show a link replaced behind the mount", func() bool {
		return readlink(1001, v+"/pub.link") == "other.txt"
	})
	// Replaced through the main mount: the main mount tells the view
	// right after its request (othersChanged, fs/change.go), from a
	// goroutine, so not always before ln returns: under GOMAXPROCS=1 CI
	// once read the old target right after. The watcher's report, which
	// is not held back while the view holds the old link (staleNow),
	// would show it too; either way within a second.
	sh(t, "ln -sfn public.txt "+e.m("data")+"/pub.link")
	eventually(t, time.Second, "the view to show a link replaced through the main mount", func() bool {
		return readlink(1001, v+"/pub.link") == "public.txt"
	})

	// Hidden by a reload while a process holds the link: its kept target
	// goes with the name.
	cmd := exec.Command("/usr/bin/python3", "-c", `
import os, sys, time
fd = os.open(sys.argv[1], os.O_PATH | os.O_NOFOLLOW)
print(os.readlink("", dir_fd=fd), flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
try:
    print(os.readlink("", dir_fd=fd), flush=True)
except OSError as e:
    print("error", e.strerror, flush=True)
`, v+"/notes/n.link", filepath.Join(b, "go"))
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	lines := bufio.NewScanner(stdout)
	var got []string
	if lines.Scan() { // the agent read the link once
		got = append(got, lines.Text())
	}
	e.rewrite(base + denyNotes)
	if line := e.hup(); !strings.Contains(line, "reloaded") {
		t.Fatalf("reload: %s", line)
	}
	must(t, os.WriteFile(filepath.Join(b, "go"), nil, 0o644))
	for lines.Scan() {
		got = append(got, lines.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the agent's process: %v (it printed %q)", err, got)
	}
	if len(got) != 2 || got[0] != "n.txt" || !strings.HasPrefix(got[1], "error") {
		t.Errorf("a link hidden by a reload, read through a descriptor held from before, gave %q; want its target, then an error", got)
	}
	if got := readlink(1001, v+"/notes/n.link"); !strings.HasPrefix(got, "error") {
		t.Errorf("the hidden link reads %q in the view; want an error", got)
	}
}
