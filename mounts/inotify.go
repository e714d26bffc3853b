package mounts

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/lowprio"
	"github.com/neuralis/neuralisfs/internal/pathidx"
)

// inotify is the watcher's reader of one inotify instance: the watches it
// placed (by descriptor and by path) and a reader that hands each event to
// the watcher.
//
// It replaces fsnotify's reader (issue 15), for what it cost the daemon.
// fsnotify reads a non-blocking descriptor through Go's network poller,
// so every event queued by the kernel woke the one thread blocked in
// epoll_wait, then fsnotify's goroutine, then the goroutine that handled
// it: 3,000 files made through the mount cost the daemon 36-46 ticks of
// CPU over io_uring with the watches and 22-24 without any, with per
// create about ten futex calls and five epoll_wait more (README,
// "Benchmarks", has the A/B: 25-31 ticks with this reader). Pausing the handler only moved
// the work to later: the reader still woke per event. Here one locked
// thread, at the idle priority of the watcher's other work, waits in
// poll(2) (the descriptor is not the network poller's), reads every event
// queued, hands them over, and sleeps pace before it looks again, so a
// burst gathers in the kernel's queue and is read in a few reads. The
// first event after a quiet spell is read at once; later ones wait at
// most pace. The kernel's queue holds 16,384 events by default
// (fs.inotify.max_queued_events); one read takes up to 64 KiB of them,
// and an overflow is reported as before (a rescan of every source).
//
// Semantics kept from fsnotify, which the watcher was written against: a
// folder's watch reports its own removal (Remove) only when its parent is
// not watched too (the parent reports it), and its own move away as
// Rename of its path, dropping the watch; a watch the kernel dropped
// (IN_IGNORED, IN_UNMOUNT) is forgotten without an event.
type inotify struct {
	fd   int
	quit [2]int // a pipe: close writes to it to end the reader

	reads atomic.Int64 // reads that returned events (tests)

	mu     sync.Mutex
	byWd   map[int32]string
	byPath map[string]int32
	closed bool
}

// watchMask is what every watch reports: fsnotify's default set.
const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_DELETE_SELF |
	unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_MOVE_SELF | unix.IN_ATTRIB

// op is what happened to an event's path.
type op uint8

const (
	opCreate op = 1 << iota // made, or moved in
	opWrite                 // content changed
	opRemove                // removed
	opRename                // moved away
	opChmod                 // attributes changed
)

// event is one change the kernel reported: Name is the watched folder's
// path, joined with the name inside it when the change was to an entry.
type event struct {
	Name string
	Op   op
	Dir  bool // the path is a folder (IN_ISDIR)
}

func (e event) Has(o op) bool { return e.Op&o != 0 }

var errInotifyClosed = errors.New("inotify: closed")

// The kernel bounds inotify watches per user, not per process
// (fs.inotify.max_user_watches; in a user namespace also
// /proc/sys/user/max_inotify_watches), and the daemon runs as root: a
// watch per folder let an agent that can make folders through the mount
// take every watch of uid 0 (200,000 folders made in 46 s left 1,500 of
// 192,540), and systemd, journald and an admin's tail -f got ENOSPC. So
// the daemon's own watches, over every inotify instance it has, stop at
// watchCap: half the limit as read at start, the other half left to the
// user's other processes. (A fixed reserve, the limit less 8,192, would
// leave them less wherever the limit is above 16,384, and the daemon
// nothing at the old default of 8,192.) Past the cap, add fails with
// errWatchCap, which the watcher takes as it takes the kernel's ENOSPC.
var (
	watchLimit  = readWatchLimit() // the per-user limit at start; 0 if unknown
	watchCap    atomic.Int64       // watches the process may hold (tests lower it)
	watchesHeld atomic.Int64       // watches the process holds, over every instance
)

func init() { watchCap.Store(capOf(watchLimit)) }

// capOf is the cap for a per-user limit: half of it, or no cap of our
// own when the limit is unknown (the kernel's ENOSPC is then the bound).
func capOf(limit int64) int64 {
	if limit <= 0 {
		return math.MaxInt64
	}
	return limit / 2
}

// readWatchLimit reads the per-user watch limit: the smaller of the
// machine's and the user namespace's (the kernel checks both).
func readWatchLimit() int64 {
	var limit int64
	for _, f := range []string{"/proc/sys/fs/inotify/max_user_watches", "/proc/sys/user/max_inotify_watches"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 && (limit == 0 || v < limit) {
			limit = v
		}
	}
	return limit
}

// errWatchCap is add's answer once the process holds watchCap watches. It
// is an ENOSPC, as the kernel's own limit gives, so the watcher copes
// with it alike.
var errWatchCap = fmt.Errorf("the daemon's inotify watch cap is reached: %w", unix.ENOSPC)

// takeWatch counts a watch about to be placed, if the cap allows one.
func takeWatch() bool {
	for {
		n := watchesHeld.Load()
		if n >= watchCap.Load() {
			return false
		}
		if watchesHeld.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// atWatchCap reports whether no watch can be placed under the cap.
func atWatchCap() bool { return watchesHeld.Load() >= watchCap.Load() }

func newInotify() (*inotify, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	n := &inotify{fd: fd, byWd: map[int32]string{}, byPath: map[string]int32{}}
	if err := unix.Pipe2(n.quit[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return n, nil
}

// add watches the folder at p (again: the kernel gives a folder one
// watch, so a folder added under a second path is reported under that one
// from now on).
func (n *inotify) add(p string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errInotifyClosed
	}
	if !takeWatch() {
		return errWatchCap
	}
	w, err := unix.InotifyAddWatch(n.fd, p, watchMask)
	if err != nil {
		watchesHeld.Add(-1)
		return err
	}
	wd := int32(w)
	if old, ok := n.byWd[wd]; ok {
		watchesHeld.Add(-1) // the folder's watch already, counted once
		if old != p {
			delete(n.byPath, old)
		}
	}
	if old, ok := n.byPath[p]; ok && old != wd {
		// Another folder's watch, whose removal from p was not read yet:
		// dropped, not left in the kernel uncounted.
		n.forget(old, p)
		unix.InotifyRmWatch(n.fd, uint32(old))
	}
	n.byWd[wd] = p
	n.byPath[p] = wd
	return nil
}

// remove drops the watch of p, if it has one.
func (n *inotify) remove(p string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	wd, ok := n.byPath[p]
	if !ok {
		return
	}
	n.forget(wd, p)
	if !n.closed {
		unix.InotifyRmWatch(n.fd, uint32(wd))
	}
}

// close ends the reader; run closes the descriptors on its way out.
func (n *inotify) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.closed = true
	unix.Write(n.quit[1], []byte{0})
}

// run reads events until close, handing each to deliver and reporting a
// full kernel queue to overflow, then closes the descriptors. It locks its
// goroutine to a thread of low priority, as the rest of the watcher's work.
func (n *inotify) run(log *slog.Logger, pace time.Duration, deliver func(event), overflow func()) {
	lowprio.Lower()
	defer func() {
		n.mu.Lock()
		n.closed = true // no call may use the descriptor numbers after this
		unix.Close(n.fd)
		watchesHeld.Add(-int64(len(n.byWd))) // closing the descriptor dropped them
		clear(n.byWd)
		clear(n.byPath)
		unix.Close(n.quit[0])
		unix.Close(n.quit[1])
		n.mu.Unlock()
	}()
	// An error neither call should give (ENOMEM, say) is logged once and
	// waited out: the reader keeps going, as the watches do.
	logged := false
	failed := func(call string, err error) {
		if !logged {
			log.Error("watch: "+call+" of the inotify queue failed; retrying", "err", err)
			logged = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	buf := make([]byte, 64<<10)
	fds := []unix.PollFd{{Fd: int32(n.fd), Events: unix.POLLIN}, {Fd: int32(n.quit[0]), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if err != unix.EINTR {
				failed("poll", err)
			}
			continue
		}
		if fds[1].Revents != 0 {
			return
		}
		m, err := unix.Read(n.fd, buf)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			failed("read", err)
			continue
		}
		n.reads.Add(1)
		for off := 0; off+unix.SizeofInotifyEvent <= m; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			size := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := buf[off+unix.SizeofInotifyEvent : min(off+unix.SizeofInotifyEvent+size, m)]
			off += unix.SizeofInotifyEvent + size
			for len(name) > 0 && name[len(name)-1] == 0 {
				name = name[:len(name)-1]
			}
			if mask&unix.IN_Q_OVERFLOW != 0 {
				overflow()
				continue
			}
			if ev, ok := n.event(wd, mask, string(name)); ok {
				deliver(ev)
			}
		}
		// Let a burst gather in the kernel's queue before the next read.
		time.Sleep(pace)
	}
}

// event turns one kernel event into the watcher's, updating the watches
// it ended; ok is false for events nobody needs.
func (n *inotify) event(wd int32, mask uint32, name string) (event, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.byWd[wd]
	if !ok {
		return event{}, false // removed meanwhile
	}
	if mask&(unix.IN_IGNORED|unix.IN_UNMOUNT) != 0 {
		n.forget(wd, p)
		return event{}, false
	}
	if name != "" {
		p += "/" + name
	} else if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
		// The watched folder itself went: its watch with it.
		n.forget(wd, p)
		if mask&unix.IN_MOVE_SELF != 0 && !n.closed {
			unix.InotifyRmWatch(n.fd, uint32(wd))
		}
		if mask&unix.IN_DELETE_SELF != 0 {
			if _, parent := n.byPath[pathidx.Parent(p)]; parent {
				return event{}, false // the parent's watch reports it
			}
		}
	}
	var o op
	if mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
		o |= opCreate
	}
	if mask&(unix.IN_DELETE|unix.IN_DELETE_SELF) != 0 {
		o |= opRemove
	}
	if mask&unix.IN_MODIFY != 0 {
		o |= opWrite
	}
	if mask&(unix.IN_MOVED_FROM|unix.IN_MOVE_SELF) != 0 {
		o |= opRename
	}
	if mask&unix.IN_ATTRIB != 0 {
		o |= opChmod
	}
	if o == 0 {
		return event{}, false
	}
	return event{Name: p, Op: o, Dir: mask&unix.IN_ISDIR != 0}, true
}

// forget drops the watch wd of path p from the maps (n.mu held).
func (n *inotify) forget(wd int32, p string) {
	if _, ok := n.byWd[wd]; ok {
		delete(n.byWd, wd)
		watchesHeld.Add(-1)
	}
	if n.byPath[p] == wd {
		delete(n.byPath, p)
	}
}
