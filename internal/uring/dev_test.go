package uring

import (
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeHandler answers INTERRUPT like go-fuse's ProtocolServer: it cancels
// a request it is running (no reply) and replies EAGAIN for any other.
type fakeHandler struct {
	mu        sync.Mutex
	running   map[uint64]bool
	cancelled map[uint64]int
	eagain    int
}

func newFakeHandler() *fakeHandler {
	return &fakeHandler{running: map[uint64]bool{}, cancelled: map[uint64]int{}}
}

func (f *fakeHandler) handle(in, out [][]byte) (int, syscall.Errno) {
	req := in[0]
	if get32(req, 4) != opInterrupt || get64(req, 8) != get64(req, inHeaderSize)|intReqBit {
		return 0, syscall.ENOSYS
	}
	u := get64(req, inHeaderSize)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running[u] {
		delete(f.running, u) // cancelled once, as go-fuse does
		f.cancelled[u]++
		return 0, 0
	}
	f.eagain++
	return errorReply(out[0], get64(req, 8), syscall.EAGAIN), 0
}

func (f *fakeHandler) start(u uint64) {
	f.mu.Lock()
	f.running[u] = true
	f.mu.Unlock()
}

func (f *fakeHandler) cancels(u uint64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cancelled[u]
}

// fakeRings are Rings with n entries and no kernel behind them.
func fakeRings(h Handler, n int) *Rings {
	r := &Rings{name: "fake", h: h, early: map[uint64]struct{}{}, earlyTTL: 50 * time.Millisecond}
	for range n {
		r.ents = append(r.ents, &entry{r: r, hdr: make([]byte, reqHeaderSize)})
	}
	return r
}

// take has e take up request u, as loop does before answering it.
func (e *entry) take(u uint64) {
	put64(e.hdr, 8, u)
	e.begin()
}

// waitFor polls cond for up to a second.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("after 1s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// An INTERRUPT for a request an entry is answering is delivered once and
// takes no reply on /dev/fuse.
func TestInterruptRingRequest(t *testing.T) {
	f := newFakeHandler()
	r := fakeRings(f.handle, 4)
	r.ents[2].take(10)
	f.start(10)
	if !r.interrupt(10) {
		t.Fatal("interrupt(10) = false for a request an entry holds; the reader would answer it on /dev/fuse")
	}
	waitFor(t, "request 10 cancelled", func() bool { return f.cancels(10) == 1 })
	waitFor(t, "interrupt counted", func() bool { return r.Interrupts() == 1 })
}

// The kernel may send the INTERRUPT before the entry's thread has taken
// the request up: it is kept, and delivered when the entry does.
func TestInterruptBeforeEntryTakesRequest(t *testing.T) {
	f := newFakeHandler()
	r := fakeRings(f.handle, 4)
	if r.interrupt(20) {
		t.Fatal("interrupt(20) = true while no entry holds request 20; the Handler must see it (a /dev/fuse request)")
	}
	f.start(20)
	r.ents[1].take(20)
	waitFor(t, "request 20 cancelled once its entry took it", func() bool { return f.cancels(20) == 1 })
	if r.nEarly.Load() != 0 {
		t.Errorf("%d early INTERRUPTs left", r.nEarly.Load())
	}
	// Another request on the same entry is not cancelled by it.
	r.ents[1].cur.Store(0)
	f.start(22)
	r.ents[1].take(22)
	time.Sleep(20 * time.Millisecond)
	if n := f.cancels(22); n != 0 {
		t.Errorf("request 22 cancelled %d times by request 20's INTERRUPT", n)
	}
}

// The entry holds the request but the Handler has not registered it yet
// (EAGAIN): delivery is retried until it has.
func TestInterruptBeforeHandlerKnowsRequest(t *testing.T) {
	f := newFakeHandler()
	r := fakeRings(f.handle, 2)
	r.ents[0].take(30)
	if !r.interrupt(30) {
		t.Fatal("interrupt(30) = false for a request an entry holds")
	}
	time.Sleep(5 * time.Millisecond)
	f.start(30)
	waitFor(t, "request 30 cancelled once the Handler ran it", func() bool { return f.cancels(30) == 1 })
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.eagain == 0 {
		t.Errorf("the Handler never answered EAGAIN: the test did not cover the retry")
	}
}

// When the connection ends, every request the entries hold is cancelled.
func TestCancelAll(t *testing.T) {
	f := newFakeHandler()
	r := fakeRings(f.handle, 3)
	for i, u := range []uint64{40, 42} {
		f.start(u)
		r.ents[i].take(u)
	}
	r.cancelAll()
	r.cancelAll()
	waitFor(t, "requests 40 and 42 cancelled", func() bool { return f.cancels(40) == 1 && f.cancels(42) == 1 })
}

// An INTERRUPT that matched no request (it had ended) is dropped after
// earlyTTL, so that ring requests stop looking for it.
func TestInterruptForEndedRequestExpires(t *testing.T) {
	f := newFakeHandler()
	r := fakeRings(f.handle, 2)
	if r.interrupt(50) {
		t.Fatal("interrupt(50) = true while no entry holds request 50")
	}
	if n := r.nEarly.Load(); n != 1 {
		t.Fatalf("%d early INTERRUPTs kept, want 1", n)
	}
	waitFor(t, "the early INTERRUPT for 50 expired", func() bool { return r.nEarly.Load() == 0 })
}
