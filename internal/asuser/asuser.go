// Package asuser does file work as another user.
//
// The daemon runs as root. On the mount the kernel checks mode bits and
// ACLs against the real caller (default_permissions) before the policy is
// even asked; everywhere else the daemon answers a caller itself — search
// hits and snippets, .status lines, history, a revert over the control
// socket — and must show or change no more than the caller could on the
// mount. A Worker is an OS thread that has taken the caller's filesystem
// identity (fsuid, fsgid and supplementary groups; leaving fsuid 0 also
// drops the capabilities that override file permissions), so the kernel
// decides each access the worker makes exactly as it would the caller's:
// search permission on every folder on the way, read and write
// permission, the sticky bit, ACLs, and a write to someone else's file
// dropping its set-id bits.
//
// The thread is never given back to the Go scheduler: it ends with the
// worker, borrowed identity and all. x/sys/unix's Setgroups, Setfsuid and
// Setfsgid are the raw per-thread system calls (package syscall's versions
// change every thread of the process).
package asuser

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Cred is whose file permissions a Worker uses.
type Cred struct {
	UID, GID uint32
	Groups   []uint32 // supplementary groups; nil for none
}

// Exempt reports whether c needs no worker: root, or the daemon's own
// uid, whose accesses the daemon makes as itself anyway.
func (c Cred) Exempt() bool { return c.UID == 0 || c.UID == uint32(os.Geteuid()) }

// ErrNotRoot is returned by Start when the daemon cannot take another
// user's identity.
var ErrNotRoot = errors.New("only a daemon running as root can check file permissions as another user")

// Worker runs functions on a thread with a borrowed identity. A Worker is
// safe for concurrent use; its functions run one at a time.
type Worker struct {
	jobs chan func()
	done chan struct{}

	mu    sync.Mutex
	lists map[listKey]error // CanSee's answers, by folder
}

type listKey struct {
	r   Opener
	dir string
}

// Start starts a worker for c.
func Start(c Cred) (*Worker, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	w := &Worker{jobs: make(chan func()), done: make(chan struct{}), lists: map[listKey]error{}}
	errc := make(chan error, 1)
	go w.serve(c, errc, nil)
	if err := <-errc; err != nil {
		return nil, err
	}
	return w, nil
}

// serve takes an OS thread for the worker and runs its jobs. It closes
// moved, when not nil, once it holds its thread.
func (w *Worker) serve(c Cred, errc chan<- error, moved chan<- struct{}) {
	runtime.LockOSThread()
	if moved != nil {
		close(moved)
	}
	if unix.Gettid() == unix.Getpid() {
		// The process's main thread: /proc/<pid>/status (and anything
		// else reading the thread group leader's credentials) would show
		// the borrowed identity. Hand the work to another goroutine while
		// this one still holds the main thread, so the scheduler must give
		// that goroutine a different thread; let go of the main thread
		// only once it has.
		next := make(chan struct{})
		go w.serve(c, errc, next)
		<-next
		runtime.UnlockOSThread()
		return
	}
	// Never unlocked from here: the thread ends with this goroutine.
	defer close(w.done)
	if err := become(c); err != nil {
		errc <- err
		return
	}
	errc <- nil
	for job := range w.jobs {
		job()
	}
}

func become(c Cred) error {
	gs := make([]int, len(c.Groups))
	for i, g := range c.Groups {
		gs[i] = int(g)
	}
	if err := unix.Setgroups(gs); err != nil {
		return fmt.Errorf("taking the groups of uid %d: %w", c.UID, err)
	}
	unix.Setfsgid(int(c.GID))
	unix.Setfsuid(int(c.UID))
	// setfsuid and setfsgid report no failure; an invalid id (-1) leaves
	// the current one and returns it.
	u, _ := unix.SetfsuidRetUid(-1)
	g, _ := unix.SetfsgidRetGid(-1)
	if u != int(c.UID) || g != int(c.GID) {
		return fmt.Errorf("could not take the file permissions of uid %d gid %d (have %d, %d)", c.UID, c.GID, u, g)
	}
	return nil
}

// Do runs fn on the worker's thread and returns its error.
func (w *Worker) Do(fn func() error) error {
	var err error
	ran := make(chan struct{})
	w.jobs <- func() {
		defer close(ran)
		err = fn()
	}
	<-ran
	return err
}

// Close ends the worker and its thread.
func (w *Worker) Close() {
	close(w.jobs)
	<-w.done
}

// Run runs fn once as c.
func Run(c Cred, fn func() error) error {
	w, err := Start(c)
	if err != nil {
		return err
	}
	defer w.Close()
	return w.Do(fn)
}

// Opener opens a path below a confined source root (mounts.Root).
type Opener interface {
	Open(rel string, flags int, mode uint32) (int, error)
}

// CanRead reports whether the worker's user may open rel for reading (and
// so walk to it: search permission on every folder from r's top down).
func (w *Worker) CanRead(r Opener, rel string) bool {
	return w.Do(func() error { return tryOpen(r, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY) }) == nil
}

// CanReadEach is CanRead for each of rels, with one handoff to the
// worker's thread for them all: a check of every file of a source (an
// identity, a count) cost a thread wake-up each, most of its time.
func (w *Worker) CanReadEach(r Opener, rels []string) []bool {
	ok := make([]bool, len(rels))
	w.Do(func() error {
		for i, rel := range rels {
			ok[i] = tryOpen(r, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY) == nil
		}
		return nil
	})
	return ok
}

// CanList reports whether the worker's user may list the folder dir, and
// so learn the names in it.
func (w *Worker) CanList(r Opener, dir string) bool {
	return w.Do(func() error { return tryOpen(r, dir, unix.O_RDONLY|unix.O_DIRECTORY) }) == nil
}

// CanSee reports whether the worker's user may learn the name rel on the
// mount: list the folder that holds it or, when that folder is gone (the
// name is in a history), the nearest folder above it that is still there.
// Answers are remembered per folder for the worker's life, so use a
// worker for one answer (a .status, a search, a history).
func (w *Worker) CanSee(r Opener, rel string) bool {
	dir := path.Dir(rel)
	for {
		if dir == "." || dir == "/" {
			dir = ""
		}
		err := w.list(r, dir)
		switch {
		case err == nil:
			return true
		case dir == "" || !errors.Is(err, unix.ENOENT):
			return false
		}
		dir = path.Dir(dir)
	}
}

func (w *Worker) list(r Opener, dir string) error {
	k := listKey{r, dir}
	w.mu.Lock()
	err, ok := w.lists[k]
	w.mu.Unlock()
	if ok {
		return err
	}
	err = w.Do(func() error { return tryOpen(r, dir, unix.O_RDONLY|unix.O_DIRECTORY) })
	w.mu.Lock()
	w.lists[k] = err
	w.mu.Unlock()
	return err
}

func tryOpen(r Opener, rel string, flags int) error {
	fd, err := r.Open(rel, flags, 0)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// Groups returns the supplementary groups of process pid, read from
// /proc, or nil when they cannot be read (the process is gone). FUSE
// requests carry the caller's uid, gid and pid but not its groups.
func Groups(pid uint32) []uint32 {
	f, err := os.Open("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		var out []uint32
		for _, g := range strings.Fields(rest) {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				out = append(out, uint32(n))
			}
		}
		return out
	}
	return nil
}
