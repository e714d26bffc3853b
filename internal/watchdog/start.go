package watchdog

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// Command is the hidden first argument that makes the binary a watchdog:
// `neuralisfs __watchdog PID`. The command line dispatches it to Main.
const Command = "__watchdog"

// deathSignal is the parent-death signal the watchdog asks for.
const deathSignal = syscall.SIGUSR1

// readyLine is what the watchdog writes on its standard output once it
// watches.
const readyLine = "watching\n"

// startTimeout bounds how long Start waits for the watchdog to say it
// watches.
const startTimeout = 10 * time.Second

// Start starts the watchdog of the calling process and returns once it
// watches. Call it before mounting anything: the watchdog takes the
// /dev/fuse descriptors the daemon holds when it starts for inherited
// ones, which it never aborts. log gets a line if the watchdog ever ends
// before the daemon.
func Start(log *slog.Logger) error {
	res := make(chan error, 1)
	go func() {
		// Never unlocked: this thread ends only with the daemon, and its
		// end is what sends the watchdog its parent-death signal (doc.go).
		// It waits in waitid(2) on the watchdog, which a kill interrupts.
		runtime.LockOSThread()
		cmd, err := start()
		res <- err
		if err != nil {
			return
		}
		err = cmd.Wait()
		log.Warn("the watchdog ended before the daemon: a SIGKILL that finds a thread waiting in the kernel on a mount can leave the daemon hung (README \"Limits\")", "err", err)
	}()
	return <-res
}

// start starts the watchdog on the calling thread and waits until it
// watches.
func start() (*exec.Cmd, error) {
	// /proc/self/exe: the running binary, even if it was replaced or
	// removed on disk since.
	cmd := exec.Command("/proc/self/exe", Command, strconv.Itoa(os.Getpid()))
	cmd.Args[0] = "neuralisfs"
	cmd.Dir = "/"
	// Nothing of the daemon's environment: not NOTIFY_SOCKET, say.
	cmd.Env = []string{"GOMAXPROCS=1"}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: deathSignal, Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	var why error
	select {
	case s := <-line:
		if s == readyLine {
			return cmd, nil
		}
		why = errors.New("it ended before it watched (its error is on stderr)")
	case <-time.After(startTimeout):
		why = fmt.Errorf("it did not say it watches within %v", startTimeout)
	}
	cmd.Process.Kill()
	cmd.Wait()
	return nil, fmt.Errorf("watchdog: %w", why)
}
