package fs

import (
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The daemon holds a descriptor of its own for every file and folder
// open through its mounts, all under one RLIMIT_NOFILE: one agent that
// opened 20,000 files (21 processes of a thousand) took every one, and
// every source went UNAVAILABLE and every open, by anyone, failed until
// it closed them (found by a red-team pass). So a caller other than root
// and the daemon's own uid may hold at most a quarter of the daemon's
// limit open at once (openQuota), counted by principal, or by uid for a
// caller no principal names: past it, an open answers ENFILE ("too many
// open files in system"), as a plain folder does when the system's
// table is full. A view the kernel serves without OPEN holds no
// descriptor, and counts none.

// openQuota counts the open files and folders of each caller.
type openQuota struct {
	max int
	mu  sync.Mutex
	m   map[opener]int
}

// opener is whose opens count together: a principal by name, or a uid
// no principal names; the zero opener (root, the daemon's own uid) is
// not bounded. A struct, so that naming one costs an open nothing.
type opener struct {
	principal string
	uid       uint32
}

// selfUID is the daemon's own uid, asked once: quotaKey runs at every
// open.
var selfUID = uint32(os.Getuid())

// newOpenQuota sets the bound from the daemon's own limit (which Go
// raises to the hard limit at start).
func newOpenQuota() *openQuota {
	q := &openQuota{max: 1024, m: map[opener]int{}}
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur != unix.RLIM_INFINITY {
		q.max = max(256, int(rl.Cur/4))
	}
	return q
}

// quotaKey names whose opens w's count: the zero opener for root and the
// daemon's own uid, which are not bounded.
func quotaKey(w who) opener {
	switch {
	case w.uid == 0 || w.uid == selfUID:
		return opener{}
	case w.p != nil:
		return opener{principal: w.p.Name}
	}
	return opener{uid: w.uid}
}

// room answers ENFILE when key holds its bound already.
func (q *openQuota) room(key opener) syscall.Errno {
	if key == (opener{}) {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m[key] >= q.max {
		return syscall.ENFILE
	}
	return 0
}

// take counts an open of key's; give, its release.
func (q *openQuota) take(key opener) {
	if key == (opener{}) {
		return
	}
	q.mu.Lock()
	q.m[key]++
	q.mu.Unlock()
}

func (q *openQuota) give(key opener) {
	if key == (opener{}) {
		return
	}
	q.mu.Lock()
	if q.m[key]--; q.m[key] <= 0 {
		delete(q.m, key)
	}
	q.mu.Unlock()
}
