// Package tests drives the built neuralisfs binary on real FUSE mounts with
// real clients (cp, mv, tar, git, bwrap...), comparing against the same
// operations on a plain folder where that makes sense.
package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "neuralisfs-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755) // other uids run the CLI in tests
	binPath = filepath.Join(dir, "neuralisfs")
	out, err := exec.Command("go", "build", "-o", binPath, "github.com/neuralis/neuralisfs/cmd/neuralisfs").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building neuralisfs: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireFUSE skips a test that needs FUSE and root where they are
// missing, except under CI=true, where it fails instead.
func requireFUSE(tb testing.TB) {
	tb.Helper()
	why := ""
	if _, err := os.Stat("/dev/fuse"); err != nil {
		why = "FUSE unavailable: " + err.Error()
	} else if os.Geteuid() != 0 {
		why = "these tests mount with allow_other and act as other uids: they need root"
	}
	if why == "" {
		return
	}
	skipOutsideCI(tb, "%s", why)
}

// skipOutsideCI skips a test whose tools, kernel or backing filesystem
// this machine lacks, and fails it under CI=true instead: CI's machine
// has them (scripts/deps.sh installs the tools), so a skip there would
// let what the test covers break unseen.
func skipOutsideCI(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf(format+" (CI=true: failing instead of skipping)", args...)
	}
	tb.Skipf(format, args...)
}

// requireTool is skipOutsideCI unless the command name is installed; pkg
// is the Debian package that has it, which scripts/deps.sh installs.
func requireTool(tb testing.TB, name, pkg string) {
	tb.Helper()
	if _, err := exec.LookPath(name); err != nil {
		skipOutsideCI(tb, "%s is missing (Debian package %s; scripts/deps.sh installs it)", name, pkg)
	}
}

// src describes a source for newEnv.
type src struct {
	slug  string
	kind  string // default local
	extra string // more TOML lines for the [[source]]
	// path is the backing folder; empty makes one under the test's temp dir.
	path string
	// missing leaves the folder uncreated.
	missing bool
}

// env is one running daemon with its mount.
type env struct {
	t      testing.TB
	dir    string
	mnt    string
	state  string
	cfg    string
	paths  map[string]string // slug → backing folder
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan error
	// args are more arguments for `neuralisfs mount` (say -debug), for a
	// start after newEnv's.
	args []string
}

// sharedTempDir is a test's temporary folder that other uids may walk
// into (0755, as is the folder above it): the agent and alice act on the
// mount and the backing folders in tests.
func sharedTempDir(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	return dir
}

// newEnv writes a config with the sources and extra TOML (principals,
// rules, views...), starts `neuralisfs mount` and waits until it reports
// the mount ready. The daemon is stopped with SIGTERM when the test ends,
// and must exit and leave no mount behind.
func newEnv(tb testing.TB, extra string, sources ...src) *env {
	tb.Helper()
	return newEnvArgs(tb, nil, extra, sources...)
}

// newDebugEnv is newEnv with the daemon's request trace on (-debug) from
// its first start, for tests that count the requests a workload sends.
func newDebugEnv(tb testing.TB, extra string, sources ...src) *env {
	tb.Helper()
	return newEnvArgs(tb, []string{"-debug"}, extra, sources...)
}

// newEnvArgs is newEnv with args for `neuralisfs mount` (env.args).
func newEnvArgs(tb testing.TB, args []string, extra string, sources ...src) *env {
	tb.Helper()
	requireFUSE(tb)
	dir := sharedTempDir(tb)
	e := &env{t: tb, dir: dir, mnt: filepath.Join(dir, "mnt"), state: filepath.Join(dir, "state"), paths: map[string]string{}, args: args}
	must(tb, os.Mkdir(e.mnt, 0o755))
	var b strings.Builder
	fmt.Fprintf(&b, "state_dir = %q\n\n", e.state)
	for _, s := range sources {
		p := s.path
		if p == "" {
			p = filepath.Join(dir, "src-"+s.slug)
			if !s.missing {
				must(tb, os.Mkdir(p, 0o777))
				os.Chmod(p, 0o777)
			}
		}
		e.paths[s.slug] = p
		kind := s.kind
		if kind == "" {
			kind = "local"
		}
		fmt.Fprintf(&b, "[[source]]\nslug = %q\nkind = %q\npath = %q\n%s\n\n", s.slug, kind, p, s.extra)
	}
	b.WriteString(withTransport(extra))
	e.cfg = filepath.Join(dir, "config.toml")
	must(tb, os.WriteFile(e.cfg, []byte(b.String()), 0o644))
	e.start()
	return e
}

func (e *env) start() {
	tb := e.t
	tb.Helper()
	cmd := exec.Command(binPath, append(append([]string{"mount", "-c", e.cfg}, e.args...), e.mnt)...)
	cmd.Dir = "/"
	stdout, err := cmd.StdoutPipe()
	must(tb, err)
	e.stderr = &syncBuffer{}
	cmd.Stderr = e.stderr
	must(tb, cmd.Start())
	e.cmd = cmd
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			if !sent && strings.Contains(sc.Text(), "mounted at "+e.mnt) {
				ready <- true
				sent = true
			}
		}
		if !sent {
			ready <- false
		}
	}()
	e.done = make(chan error, 1)
	go func() { e.done <- cmd.Wait() }()
	select {
	case ok := <-ready:
		if !ok {
			<-e.done
			tb.Fatalf("neuralisfs mount exited before it was ready:\n%s", e.stderr)
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		tb.Fatalf("neuralisfs mount not ready within 15s:\n%s", e.stderr)
	}
	tb.Cleanup(e.stop)
}

// logged waits up to 5 s for the daemon's log to say s. The log reaches
// e.stderr through os/exec's copying goroutine, which may trail the
// "mounted at" line on stdout that start waits for: on one CPU a check
// right after start sometimes found the log still empty.
func (e *env) logged(s string) bool {
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(e.stderr.String(), s) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// offersNoOpendir skips the test where the kernel does not offer
// FUSE_NO_OPENDIR_SUPPORT (Linux < 5.1), which the daemon's INIT log (with
// -debug) names; on a kernel that has it a log without it fails the test
// instead, so that a changed log or INIT cannot skip it in CI.
func (e *env) offersNoOpendir(tb testing.TB) {
	tb.Helper()
	if e.logged("NO_OPENDIR_SUPPORT") {
		return
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		var major, minor int
		if n, _ := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); n == 2 && (major > 5 || major == 5 && minor >= 1) {
			tb.Fatalf("Linux %d.%d offers FUSE_NO_OPENDIR_SUPPORT, but the daemon's log does not name it:\n%s", major, minor, e.stderr)
		}
	}
	tb.Skip("this kernel does not offer FUSE_NO_OPENDIR_SUPPORT (Linux < 5.1)")
}

// stop sends SIGTERM and waits for a clean exit with the mount gone.
func (e *env) stop() {
	if e.cmd == nil {
		// Killed (kill leaves a stale mount) and not started again: a
		// test that failed in between must not leave the mount behind.
		if mounted(e.mnt) {
			syscall.Unmount(e.mnt, syscall.MNT_DETACH)
		}
		return
	}
	// What the daemon saw says more about a failure that shows only in
	// CI than the test's own message: its log up to the stop.
	var digest string
	if e.t.Failed() {
		digest = logDigest(e.stderr.String())
	}
	e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-e.done:
		if err != nil {
			e.t.Errorf("neuralisfs exited with %v:\n%s", err, e.stderr)
		} else if digest != "" {
			e.t.Logf("the daemon's log, as the test failed:\n%s", digest)
		}
	case <-time.After(15 * time.Second):
		// SIGQUIT first: the Go runtime prints every goroutine's stack
		// on the way out, which says where the shutdown waited.
		e.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-e.done:
		case <-time.After(5 * time.Second):
			e.cmd.Process.Kill()
			<-e.done
		}
		e.t.Errorf("neuralisfs did not exit within 15s of SIGTERM (its goroutines at SIGQUIT are at the end):\n%s", e.stderr)
	}
	e.cmd = nil
	if mounted(e.mnt) {
		e.t.Errorf("%s is still mounted after the daemon exited", e.mnt)
		syscall.Unmount(e.mnt, syscall.MNT_DETACH)
	}
}

// logDigest is what a daemon log says worth reading after a failure: its
// warnings and errors (at most 40) and its last 40 lines.
func logDigest(log string) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	var warn []string
	for _, l := range lines {
		if strings.Contains(l, " level=WARN ") || strings.Contains(l, " level=ERROR ") {
			warn = append(warn, l)
		}
	}
	if len(warn) > 40 {
		warn = append(warn[:20:20], append([]string{"…"}, warn[len(warn)-20:]...)...)
	}
	tail := lines[max(0, len(lines)-40):]
	return "warnings and errors:\n" + strings.Join(warn, "\n") + "\nlast lines:\n" + strings.Join(tail, "\n")
}

// syncBuffer is a bytes.Buffer the daemon's stderr is copied into while
// the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// kill stops the daemon with SIGKILL, leaving a stale mount.
func (e *env) kill() {
	e.cmd.Process.Kill()
	<-e.done
	e.cmd = nil
}

func mounted(dir string) bool {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// m is the path of slug's folder on the mount.
func (e *env) m(slug string, parts ...string) string {
	return filepath.Join(append([]string{e.mnt, slug}, parts...)...)
}

// b is the path of slug's backing folder.
func (e *env) b(slug string, parts ...string) string {
	return filepath.Join(append([]string{e.paths[slug]}, parts...)...)
}

// run runs a shell script as uid (0 = root) with a deadline and returns
// its combined output. The working folder is "/" so that starting the
// child never touches the mount.
func run(tb testing.TB, uid int, script string, env ...string) (string, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), env...)
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		cmd.Env = append(cmd.Env, "HOME=/tmp")
	}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		tb.Fatalf("script timed out:\n%s\n%s", script, out)
	}
	return string(out), err
}

// sh runs a script as root and fails the test when it fails.
func sh(tb testing.TB, script string, env ...string) string {
	tb.Helper()
	out, err := run(tb, 0, script, env...)
	if err != nil {
		tb.Fatalf("script failed: %v\n--- script\n%s\n--- output\n%s", err, script, out)
	}
	return out
}

// eventually polls cond until it holds or the deadline passes.
func eventually(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func writeFile(tb testing.TB, path, content string, mode os.FileMode) {
	tb.Helper()
	must(tb, os.MkdirAll(filepath.Dir(path), 0o755))
	must(tb, os.WriteFile(path, []byte(content), mode))
	must(tb, os.Chmod(path, mode)) // past the test process's umask
}

// sandbox is the command prefix that runs a program the way an agent's
// container does: in a bubblewrap sandbox with the system read-only and
// only the mount bound in (at at), nothing else of the host's /tmp.
func sandbox(mnt, at string) string {
	return fmt.Sprintf("bwrap --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp --bind %q %q --unshare-pid --die-with-parent --chdir / ", mnt, at)
}

// withTransport adds [mount] io_uring = $NEURALISFS_TEST_IO_URING to a
// config's extra TOML when that is set: .ci/run runs the real-mount tests
// a second time over FUSE's io_uring transport, with the kernel's switch
// on, where the kernel has it.
func withTransport(extra string) string {
	tr := os.Getenv("NEURALISFS_TEST_IO_URING")
	if tr == "" {
		return extra
	}
	line := "io_uring = \"" + tr + "\"\n"
	if strings.Contains(extra, "[mount]\n") {
		return strings.Replace(extra, "[mount]\n", "[mount]\n"+line, 1)
	}
	return extra + "\n[mount]\n" + line
}
