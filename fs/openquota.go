package fs

import (
	"os"
	"strconv"
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
	m   map[string]int
}

// newOpenQuota sets the bound from the daemon's own limit (which Go
// raises to the hard limit at start).
func newOpenQuota() *openQuota {
	q := &openQuota{max: 1024, m: map[string]int{}}
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur != unix.RLIM_INFINITY {
		q.max = max(256, int(rl.Cur/4))
	}
	return q
}

// quotaKey names whose opens w's count: "" for root and the daemon's own
// uid, which are not bounded.
func quotaKey(w who) string {
	if w.uid == 0 || w.uid == uint32(os.Getuid()) {
		return ""
	}
	if w.p != nil {
		return "p:" + w.p.Name
	}
	return "u:" + strconv.FormatUint(uint64(w.uid), 10)
}

// room answers ENFILE when key holds its bound already.
func (q *openQuota) room(key string) syscall.Errno {
	if key == "" {
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
func (q *openQuota) take(key string) {
	if key == "" {
		return
	}
	q.mu.Lock()
	q.m[key]++
	q.mu.Unlock()
}

func (q *openQuota) give(key string) {
	if key == "" {
		return
	}
	q.mu.Lock()
	if q.m[key]--; q.m[key] <= 0 {
		delete(q.m, key)
	}
	q.mu.Unlock()
}
