package tests

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// repoFile is the path of a file of this repository (tests run in tests/).
func repoFile(tb testing.TB, rel string) string {
	tb.Helper()
	_, here, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(here), "..", rel)
}

// TestSystemdUnitVerifies runs systemd-analyze verify on the shipped units,
// with @BINDIR@ pointing at the test binary and the generated man page on
// MANPATH (Documentation=man:neuralisfs(1) is checked too). Warnings fail
// the test as errors do.
func TestSystemdUnitVerifies(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd)")
	}
	dir := t.TempDir()
	man := filepath.Join(dir, "man", "man1")
	must(t, os.MkdirAll(man, 0o755))
	page, err := exec.Command(binPath, "man").Output()
	must(t, err)
	writeFile(t, filepath.Join(man, "neuralisfs.1"), string(page), 0o644)
	for _, unit := range []struct{ file, as string }{
		{"neuralisfs.service", "neuralisfs.service"},
		{"neuralisfs@.service", "neuralisfs@work.service"},
	} {
		data, err := os.ReadFile(repoFile(t, "packaging/"+unit.file))
		must(t, err)
		text := strings.ReplaceAll(string(data), "@BINDIR@", filepath.Dir(binPath))
		for _, want := range []string{"Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "neuralisfs mount -c /etc/neuralisfs/"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s lacks %q", unit.file, want)
			}
		}
		writeFile(t, filepath.Join(dir, unit.file), text, 0o644)
		cmd := exec.Command("systemd-analyze", "verify", "./"+unit.as)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "MANPATH="+filepath.Join(dir, "man"))
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(string(out), "Failed to initialize") {
			t.Skipf("systemd-analyze cannot run in this container: %s", out)
		}
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", unit.as, err, out)
		}
	}
}

// TestSystemdNotify runs the daemon with NOTIFY_SOCKET, as systemd runs a
// Type=notify service, and reads what it says there: READY=1 once the
// mount and its view serve, STOPPING=1 once SIGTERM starts the unmount.
func TestSystemdNotify(t *testing.T) {
	requireFUSE(t)
	sockDir := t.TempDir()
	sock := filepath.Join(sockDir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	must(t, err)
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	view := filepath.Join(sharedTempDir(t), "view")
	must(t, os.Mkdir(view, 0o755))
	e := newEnv(t, `
[[principal]]
name = "agent"
uids = [1001]

[[view]]
principal = "agent"
mountpoint = "`+view+`"
`, src{slug: "data"})
	read := func() string {
		t.Helper()
		buf := make([]byte, 4096)
		conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("reading NOTIFY_SOCKET: %v\n%s", err, e.stderr)
		}
		return string(buf[:n])
	}
	msg := read()
	if !strings.HasPrefix(msg, "READY=1\n") || !strings.Contains(msg, "STATUS=serving ") || !strings.Contains(msg, e.mnt) || !strings.Contains(msg, view) {
		t.Fatalf("first notification %q; want READY=1 and a STATUS naming %s and %s", msg, e.mnt, view)
	}
	if !mounted(e.mnt) || !mounted(view) {
		t.Fatalf("READY=1 sent before both mounts serve")
	}
	// A reload (ExecReload sends SIGHUP): RELOADING=1, then READY=1.
	must(t, e.cmd.Process.Signal(syscall.SIGHUP))
	if msg := read(); !strings.HasPrefix(msg, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Fatalf("notification after SIGHUP %q; want RELOADING=1 with MONOTONIC_USEC", msg)
	}
	if msg := read(); !strings.HasPrefix(msg, "READY=1\n") {
		t.Fatalf("notification after the reload %q; want READY=1", msg)
	}
	e.stop()
	if msg := read(); msg != "STOPPING=1" {
		t.Fatalf("notification after SIGTERM %q; want STOPPING=1", msg)
	}
	if mounted(view) {
		t.Errorf("%s is still mounted after the daemon exited", view)
	}
}
