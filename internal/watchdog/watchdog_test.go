package watchdog

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary plays both processes: run with Command it is the
// watchdog (Start re-executes /proc/self/exe), and with daemonEnv set it
// is a daemon that starts one, prints the watchdog's pid and waits.
const daemonEnv = "WATCHDOG_TEST_DAEMON"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Command {
		os.Exit(Main(os.Args[2:], os.Stdout, os.Stderr))
	}
	if os.Getenv(daemonEnv) != "" {
		os.Exit(testDaemon())
	}
	os.Exit(m.Run())
}

// testDaemon starts a watchdog, prints its pid and exits 0 on SIGTERM.
func testDaemon() int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	if err := Start(slog.Default()); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println(childOf(os.Getpid()))
	<-term
	return 0
}

// childOf finds a child process of pid by scanning /proc (0 if none).
func childOf(pid int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c)); err == nil {
			f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
			if len(f) > 1 && f[1] == strconv.Itoa(pid) {
				return c
			}
		}
	}
	return 0
}

// startDaemon runs the test binary as a daemon with a watchdog and
// returns both pids.
func startDaemon(t *testing.T) (*exec.Cmd, int, *strings.Builder) {
	t.Helper()
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), daemonEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	w, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || w == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the test daemon said %q; stderr:\n%s", line, stderr.String())
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		syscall.Kill(w, syscall.SIGKILL)
	})
	return cmd, w, &stderr
}

// gone reports whether pid ended (a zombie counts: its parent died).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

func waitGone(t *testing.T, pid int, d time.Duration, what string) {
	t.Helper()
	for deadline := time.Now().Add(d); !gone(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: process %d still runs after %v", what, pid, d)
		}
	}
}

// The watchdog outlives signals meant for the daemon, ignores a wake-up
// while the daemon runs, and ends with the daemon: on a clean exit and on
// SIGKILL.
func TestLifecycle(t *testing.T) {
	t.Run("clean exit", func(t *testing.T) {
		d, w, _ := startDaemon(t)
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
			syscall.Kill(w, sig)
		}
		time.Sleep(100 * time.Millisecond)
		if gone(w) {
			t.Fatal("the watchdog ended on a signal meant for the daemon")
		}
		d.Process.Signal(syscall.SIGTERM)
		if err := d.Wait(); err != nil {
			t.Fatalf("daemon: %v", err)
		}
		waitGone(t, w, 5*time.Second, "after the daemon exited")
	})
	t.Run("SIGKILL", func(t *testing.T) {
		d, w, stderr := startDaemon(t)
		// A stray wake-up while the daemon runs touches nothing.
		syscall.Kill(w, deathSignal)
		time.Sleep(Grace + 200*time.Millisecond)
		if gone(w) {
			t.Fatal("the watchdog ended on a stray wake-up")
		}
		d.Process.Kill()
		d.Wait()
		waitGone(t, w, 5*time.Second, "after the daemon was killed")
		if s := stderr.String(); !strings.Contains(s, "not exiting; still watching") || strings.Contains(s, "abort") {
			t.Errorf("watchdog log:\n%s", s)
		}
	})
}

// Main refuses to watch anything but its parent.
func TestMainRefusesOthers(t *testing.T) {
	var out, errb strings.Builder
	if code := Main([]string{"1"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "internal command") {
		t.Errorf("Main(1) = %d, %q", code, errb.String())
	}
}

func TestParseThread(t *testing.T) {
	// Lines as /proc showed them for a daemon killed during an entry
	// invalidation (tests/kill_test.go): the main thread a zombie, one
	// thread in the kernel with SIGKILL pending.
	for _, tt := range []struct {
		name   string
		stat   string
		status string
		state  byte
		dying  bool
	}{
		{"zombie main thread", "24235 (neuralisfs) Z 1765 23273 2453 0 -1 4228108 1223 0", "SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n", 'Z', true},
		{"stuck with SIGKILL pending", "24238 (neuralisfs) D 1765 23273 2453 0 -1 4194368 156 0", "SigPnd:\t0000000000000100\nShdPnd:\t0000000000000000\n", 'D', true},
		{"group SIGKILL", "24238 (neuralisfs) D 1765 23273 2453 0 -1 4194368 156 0", "SigPnd:\t0000000000000000\nShdPnd:\t0000000000000100\n", 'D', true},
		{"in do_exit", "24239 (neuralisfs) D 1765 23273 2453 0 -1 4194372 156 0", "SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n", 'D', true},
		{"busy", "24240 (neuralisfs) D 1765 23273 2453 0 -1 4194368 156 0", "SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n", 'D', false},
		{"SIGTERM pending", "24240 (neuralisfs) S 1765 23273 2453 0 -1 4194368 156 0", "SigPnd:\t0000000000004000\nShdPnd:\t0000000000000000\n", 'S', false},
		{"odd name", "24241 (a) b) R 1) R 1765 23273 2453 0 -1 4194368 156 0", "SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n", 'R', false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			th, ok := parseThread(1, tt.stat, tt.status)
			if !ok || th.state != tt.state || th.dying() != tt.dying {
				t.Errorf("parseThread = %+v, %v; want state %c, dying %v", th, ok, tt.state, tt.dying)
			}
		})
	}
	if _, ok := parseThread(1, "garbage", ""); ok {
		t.Error("parseThread accepted garbage")
	}
}

func TestParseConnection(t *testing.T) {
	n, ok := parseConnection("pos:\t0\nflags:\t0100002\nmnt_id:\t24\nino:\t89\nfuse_connection:\t40\n")
	if !ok || n != 40 {
		t.Errorf("parseConnection = %d, %v; want 40", n, ok)
	}
	if _, ok := parseConnection("pos:\t0\nflags:\t0100002\n"); ok {
		t.Error("parseConnection found a connection in a descriptor without one")
	}
}
