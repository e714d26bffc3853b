package watchdog

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Grace is how long the daemon's threads get to end by themselves once it
// is exiting. A process ends in a few milliseconds (its memory unmapped,
// its descriptors closed); aborting a dying daemon's connections is what
// the kernel would do anyway when its /dev/fuse descriptors closed, so
// the wait need not be long either.
const Grace = 500 * time.Millisecond

// afterAbort bounds the wait for the daemon to end once its connections
// are aborted.
const afterAbort = 10 * time.Second

// Main is the watchdog process: `neuralisfs __watchdog PID`, started by
// Start in the daemon whose pid is PID. It returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	pid := 0
	if len(args) == 1 {
		pid, _ = strconv.Atoi(args[0])
	}
	if pid <= 0 || pid != os.Getppid() {
		fmt.Fprintf(stderr, "neuralisfs %s: internal command, started by `neuralisfs mount` with its own pid\n", Command)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("watchdog", os.Getpid(), "daemon", pid)
	// A Ctrl-C or SIGTERM is for the daemon; this process outlives it by
	// a moment.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	died := make(chan os.Signal, 1)
	signal.Notify(died, deathSignal)
	// Start asked for the parent-death signal already; exec drops it for
	// a binary with file capabilities, so ask again.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(deathSignal), 0, 0, 0); err != nil {
		fmt.Fprintf(stderr, "neuralisfs %s: PR_SET_PDEATHSIG: %v\n", Command, err)
		return 1
	}
	group, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		fmt.Fprintf(stderr, "neuralisfs %s: pidfd_open %d: %v\n", Command, pid, err)
		return 1
	}
	if os.Getppid() != pid {
		// The daemon ended before the pidfd was open: the pid may name
		// another process by now, and there is nothing left to watch.
		return 0
	}
	// /dev/fuse descriptors the daemon holds now, before it mounts
	// anything, came from whoever started it (go-fuse opens them without
	// close-on-exec): not its connections to abort, and not ours to keep
	// alive.
	foreign := fuseFDs(pid)
	for fd := range fuseFDs(os.Getpid()) {
		unix.Close(fd)
	}
	io.WriteString(stdout, readyLine)
	if c, ok := stdout.(io.Closer); ok {
		c.Close()
	}
	w := &watch{pid: pid, group: group, foreign: foreign, log: log}
	for range died {
		if w.ended() {
			return 0
		}
	}
	return 0
}

// watch is the watchdog's view of one daemon.
type watch struct {
	pid   int
	group int // pidfd: readable once every thread of the daemon ended
	// foreign are the /dev/fuse descriptors the daemon inherited: fd →
	// connection.
	foreign map[int]uint64
	log     *slog.Logger
}

// ended handles the daemon's parent-death signal: it waits for the
// daemon's end, aborting its FUSE connections if threads linger. It
// reports false when the daemon turns out not to be exiting at all (a
// stray signal): then nothing was touched and the watch goes on.
func (w *watch) ended() bool {
	if w.exited(Grace) {
		return true
	}
	threads := readThreads(w.pid)
	if len(threads) == 0 {
		return true // gone between the poll and the read
	}
	for _, t := range threads {
		if !t.dying() {
			w.log.Warn("woken, but the daemon is not exiting; still watching", "thread", t.tid, "state", t.state)
			return false
		}
	}
	own, conns := 0, []uint64(nil)
	for fd, c := range fuseFDs(w.pid) {
		if f, ok := w.foreign[fd]; ok && f == c {
			continue
		}
		own++
		if c != 0 && !slices.Contains(conns, c) {
			conns = append(conns, c)
		}
	}
	slices.Sort(conns)
	lingering := describe(threads)
	switch {
	case own == 0:
		// Its mounts are closed (it was unmounting): nothing of the
		// daemon's keeps a request waiting, and its threads end by
		// themselves.
		return true
	case len(conns) == 0:
		w.log.Error("the daemon is exiting but threads linger, and the kernel does not say which FUSE connections it holds (fdinfo fuse_connection: Linux ≥ 6.16); if it hangs, abort them: echo 1 > /sys/fs/fuse/connections/N/abort", "threads", lingering)
	default:
		if err := abort(conns); err != nil {
			w.log.Error("the daemon is exiting but threads linger in the kernel; aborting its FUSE connections failed", "threads", lingering, "connections", conns, "err", err)
		} else {
			w.log.Warn("the daemon is exiting but threads linger in the kernel, waiting on its own mounts; aborted its FUSE connections so it can end (the mounts are left stale: neuralisfs mount or unmount clears them)", "threads", lingering, "connections", conns)
		}
	}
	if !w.exited(afterAbort) {
		w.log.Error("the daemon did not end", "after", afterAbort, "threads", describe(readThreads(w.pid)))
	}
	return true
}

// exited waits up to d for the last thread of the daemon to end.
func (w *watch) exited(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		fds := []unix.PollFd{{Fd: int32(w.group), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0
	}
}

// thread is what /proc says of one thread of the daemon.
type thread struct {
	tid     int
	state   byte   // R, S, D, Z…
	flags   uint64 // PF_*
	pending uint64 // signals pending for the thread or its process
	wchan   string // where it waits in the kernel
}

// pfExiting is PF_EXITING: the thread is in do_exit.
const pfExiting = 0x4

// dying reports whether t is on its way out: ended, ending, or with
// SIGKILL pending (a group exit or a fatal signal marks every thread so).
func (t thread) dying() bool {
	return t.state == 'Z' || t.state == 'X' || t.flags&pfExiting != 0 || t.pending&(1<<(uint(unix.SIGKILL)-1)) != 0
}

// readThreads reads what /proc says of the threads of pid.
func readThreads(pid int) []thread {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []thread
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err1 := os.ReadFile(fmt.Sprintf("%s/%d/stat", dir, tid))
		status, err2 := os.ReadFile(fmt.Sprintf("%s/%d/status", dir, tid))
		if err1 != nil || err2 != nil {
			continue // ended meanwhile
		}
		t, ok := parseThread(tid, string(stat), string(status))
		if !ok {
			continue
		}
		wchan, _ := os.ReadFile(fmt.Sprintf("%s/%d/wchan", dir, tid))
		t.wchan = string(wchan)
		out = append(out, t)
	}
	return out
}

// parseThread reads a thread's /proc stat and status files.
func parseThread(tid int, stat, status string) (thread, bool) {
	// The command name, in parentheses, may hold anything: the fields
	// start after the last ')'.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return thread{}, false
	}
	f := strings.Fields(stat[i+1:])
	// state ppid pgrp session tty_nr tpgid flags
	if len(f) < 7 || len(f[0]) != 1 {
		return thread{}, false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	if err != nil {
		return thread{}, false
	}
	t := thread{tid: tid, state: f[0][0], flags: flags}
	for line := range strings.SplitSeq(status, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return thread{}, false
		}
		t.pending |= mask
	}
	return t, true
}

// describe names threads for a log line: tid:state:wchan.
func describe(threads []thread) string {
	var b strings.Builder
	for i, t := range threads {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%c", t.tid, t.state)
		if t.wchan != "" && t.wchan != "0" {
			b.WriteString(":" + t.wchan)
		}
	}
	return b.String()
}

// fuseFDs maps the /dev/fuse descriptors pid holds to their FUSE
// connections. The threads share one descriptor table, which the main
// thread no longer shows once it ended: any thread still there does.
func fuseFDs(pid int) map[int]uint64 {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s", pid, task.Name())
		ents, err := os.ReadDir(dir + "/fd")
		if err != nil || len(ents) == 0 {
			continue
		}
		out := map[int]uint64{}
		for _, e := range ents {
			fd, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if link, _ := os.Readlink(dir + "/fd/" + e.Name()); link != "/dev/fuse" {
				continue
			}
			info, err := os.ReadFile(dir + "/fdinfo/" + e.Name())
			if err != nil {
				continue
			}
			// Without the fdinfo line (Linux < 6.16, or not mounted yet)
			// the descriptor is listed as connection 0, which is never
			// aborted.
			n, _ := parseConnection(string(info))
			out[fd] = n
		}
		return out
	}
	return nil
}

// parseConnection finds the "fuse_connection:" line of a /dev/fuse
// descriptor's fdinfo: the number of its directory under the FUSE control
// filesystem.
func parseConnection(fdinfo string) (uint64, bool) {
	for line := range strings.SplitSeq(fdinfo, "\n") {
		if v, ok := strings.CutPrefix(line, "fuse_connection:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			return n, err == nil
		}
	}
	return 0, false
}
