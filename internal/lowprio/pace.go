package lowprio

import (
	"context"
	"sync/atomic"
	"time"
)

// A nice value only orders threads the kernel has to choose between, and a
// Go process runs at most GOMAXPROCS threads of Go code at once: the
// runtime's scheduler, which knows no priorities, shares them evenly
// between the goroutines of requests and those of background work. On two
// cores a first index build thus took half the CPU from an untar through
// the mount (issue 15). So background work also paces itself: the FUSE
// server marks every request (Foreground), and background work calls Pace
// between its units. While requests come in, Pace holds the next unit back
// until the daemon has been idle for Quiet, but never longer than the
// units before it took times Yield, summed over every background worker:
// under a steady stream of requests background work gets about
// 1/(Yield+1) of the time and is never starved; on an idle daemon it runs
// at once.

// Quiet is how long the daemon must have served no burst of requests
// to count as idle.
const Quiet = 20 * time.Millisecond

// A burst is busyCount requests or more within one slot of slotLen: 1,600
// a second. An untar or an rm -rf through the mount sends several times
// that; a shell, an editor or a script polling a file every few
// milliseconds sends far less, and must not hold the index back (the
// index waits out bursts, see package index, and a poll that never ends
// would otherwise defer it for good).
const (
	slotLen   = 10 * time.Millisecond
	busyCount = 16
)

// Yield is how many times the time a unit of background work took the
// next one waits while requests come in.
const Yield = 9

// epoch anchors the monotonic clock the atomics below hold.
var epoch = time.Now()

func now() int64 { return int64(time.Since(epoch)) }

var (
	slotStart atomic.Int64 // now() when the current slot began
	slotCount atomic.Int64 // requests marked in the current slot
	lastBurst atomic.Int64 // now() when a slot last reached busyCount; 0 never
	nextUnit  atomic.Int64 // now() before which background work waits while requests come in
)

// Foreground marks that a request is being served. It is cheap enough for
// every request: a clock read and an atomic add.
func Foreground() {
	t := now()
	if s := slotStart.Load(); t-s >= int64(slotLen) && slotStart.CompareAndSwap(s, t) {
		slotCount.Store(0)
	}
	if slotCount.Add(1) == busyCount {
		lastBurst.Store(t)
	}
}

// Busy reports whether a burst of requests came within the last Quiet.
func Busy() bool {
	b := lastBurst.Load()
	return b != 0 && now()-b < int64(Quiet)
}

// Pacer paces one worker of background work; its zero value is ready.
// A Pacer is not safe for concurrent use: give each worker its own.
type Pacer struct {
	start int64 // now() when the worker's current unit began; 0 before the first
}

// Pace is called by a worker before each unit of its work. It charges the
// unit just ended to the background's budget and waits while requests come
// in and that budget is spent (see above), or until ctx is done.
func (p *Pacer) Pace(ctx context.Context) {
	t := now()
	if p.start != 0 && Busy() {
		cost := (t - p.start) * Yield
		for {
			n := nextUnit.Load()
			if nextUnit.CompareAndSwap(n, max(n, t)+cost) {
				break
			}
		}
	}
	for Busy() {
		wait := nextUnit.Load() - now()
		if wait <= 0 || !nap(ctx, time.Duration(wait)) {
			break
		}
	}
	p.start = now()
}

// nap sleeps for d, but at most Quiet/4 so that a caller notices the
// requests stopped soon; false if ctx ended first.
func nap(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(min(d, Quiet/4))
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// Idle waits until the daemon has been idle for Quiet, or until limit has
// passed, or ctx is done. It reports whether it found the daemon idle.
func Idle(ctx context.Context, limit time.Duration) bool {
	end := now() + int64(limit)
	for Busy() {
		left := end - now()
		if left <= 0 || !nap(ctx, time.Duration(left)) {
			return false
		}
	}
	return true
}
