package uring

import (
	"log/slog"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// serveDev answers what arrives on the /dev/fuse descriptor fd until the
// connection ends: every request while no rings serve, and FORGET,
// INTERRUPT and the like once they do. With r set, an INTERRUPT for a
// request a ring entry holds (or is about to take up) goes to r; when the
// connection ends, r's requests in flight are cancelled, as go-fuse
// cancels its own when /dev/fuse reports the unmount. Requests are
// answered inline: with rings, nothing but quick bookkeeping arrives here.
func serveDev(fd int, name string, h Handler, payload int, r *Rings, count *atomic.Uint64) {
	buf := make([]byte, payload+4096)
	out := make([]byte, payload+4096)
	for {
		n, err := unix.Read(fd, buf)
		switch err {
		case nil:
		case unix.EINTR, unix.EAGAIN, unix.ENOENT: // ENOENT: the request was interrupted before we read it
			continue
		case unix.ENODEV, unix.ECONNABORTED: // unmounted, or aborted through /sys/fs/fuse/connections
			if r != nil {
				r.cancelAll()
			}
			return
		default:
			slog.Error("read /dev/fuse", "mount", name, "err", err)
			if r != nil {
				r.cancelAll()
			}
			return
		}
		count.Add(1)
		op := get32(buf, 4)
		if r != nil && n >= inHeaderSize+8 && op == opInterrupt && r.interrupt(get64(buf, inHeaderSize)) {
			continue // a ring request's: no reply (the kernel could not match one)
		}
		m, errno := h([][]byte{buf[:n]}, [][]byte{out})
		if errno != 0 {
			m = errorReply(out, get64(buf, 8), errno)
		}
		if m == 0 {
			if r != nil {
				switch op {
				case opInterrupt:
					r.interrupts.Add(1) // a /dev/fuse request's
				case opForget, opBatchForget:
					// Let the next FORGETs gather (see ForgetLinger).
					time.Sleep(ForgetLinger)
				}
			}
			continue
		}
		// An EAGAIN reply to an INTERRUPT has the kernel send it again
		// when the request came through /dev/fuse; ENOENT: the request
		// ended meanwhile.
		if _, err := unix.Write(fd, out[:m]); err != nil && err != unix.ENOENT {
			slog.Debug("write /dev/fuse", "mount", name, "err", err)
		}
	}
}

// ForgetLinger is how long a reader of /dev/fuse waits, once the rings
// serve the requests, after a FORGET before it reads again. The kernel
// sends the FORGETs it has queued when a reader comes as one
// BATCH_FORGET, so a reader that waits a little wakes once for many: an
// rm -rf sends one FORGET per file, and a reader woken for each cost a
// context switch apiece on the CPUs the requests run on. FORGETs answer
// no caller, so nobody waits for them. What else comes on /dev/fuse once
// the rings are ready (an INTERRUPT) may wait as long, while both readers
// wait at once.
const ForgetLinger = time.Millisecond

// How long an INTERRUPT that matched no request is kept for a ring entry
// that has not taken its request up yet (the kernel sends INTERRUPT only
// for a request it has put into an entry, so the wait is one wake-up of
// the entry's thread; while one is kept, every ring request takes earlyMu),
// and how long delivering one is retried while the Handler does not know
// the request yet (it is between the entry and the Handler's own table).
const (
	earlyTTL      = 2 * time.Second
	deliverWindow = 200 * time.Millisecond
)

// interrupt routes an INTERRUPT for unique, read from /dev/fuse. It
// reports whether the request belongs to a ring entry, now or as soon as
// the entry takes it up; the INTERRUPT is then delivered from here and
// takes no reply. Otherwise the caller hands it to the Handler, which
// knows the requests that came through /dev/fuse.
//
// The kernel sends INTERRUPT on /dev/fuse for ring requests too (Linux
// 6.18 fs/fuse/dev_uring.c: fuse_io_uring_ops.send_interrupt is
// fuse_dev_queue_interrupt), once the request is in an entry (FR_SENT).
// An EAGAIN reply does not help a ring request: the kernel looks the
// unique up among the /dev/fuse requests only, fails, and drops the
// INTERRUPT. So the transport has to get it right the first time.
func (r *Rings) interrupt(unique uint64) bool {
	if r.busy(unique) {
		go r.deliver(unique)
		return true
	}
	// The entry may have been handed the request and not yet say so: leave
	// the INTERRUPT where it will look (begin), then look again. Either
	// the entry sees nEarly > 0 or this sees the entry's cur (both are
	// sequentially consistent atomics), and whoever takes early[unique]
	// delivers it.
	r.earlyMu.Lock()
	r.early[unique] = struct{}{}
	r.nEarly.Store(int32(len(r.early)))
	r.earlyMu.Unlock()
	time.AfterFunc(r.earlyTTL, func() { r.takeEarly(unique) }) // a request that had ended
	if r.busy(unique) {
		if r.takeEarly(unique) {
			go r.deliver(unique)
		}
		return true
	}
	return false
}

// begin marks the request in e as the one e answers, and delivers an
// INTERRUPT that arrived for it before it did.
func (e *entry) begin() {
	u := get64(e.hdr, 8)
	e.cur.Store(u)
	if e.r.nEarly.Load() > 0 && e.r.takeEarly(u) {
		go e.r.deliver(u)
	}
}

// busy reports whether a ring entry is answering the request unique.
func (r *Rings) busy(unique uint64) bool {
	for _, e := range r.entries() {
		if e.cur.Load() == unique {
			return true
		}
	}
	return false
}

// takeEarly removes an early INTERRUPT for unique and reports whether
// there was one.
func (r *Rings) takeEarly(unique uint64) bool {
	r.earlyMu.Lock()
	defer r.earlyMu.Unlock()
	if _, ok := r.early[unique]; !ok {
		return false
	}
	delete(r.early, unique)
	r.nEarly.Store(int32(len(r.early)))
	return true
}

// deliver hands an INTERRUPT for unique to the Handler until it cancels
// the request, the request ends, or deliverWindow has passed.
func (r *Rings) deliver(unique uint64) {
	in := make([]byte, inHeaderSize+8) // fuse_in_header, fuse_interrupt_in
	put32(in, 0, uint32(len(in)))
	put32(in, 4, opInterrupt)
	put64(in, 8, unique|intReqBit)
	put64(in, inHeaderSize, unique)
	out := make([]byte, outHeaderSize+64)
	deadline := time.Now().Add(deliverWindow)
	for wait := 20 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		n, errno := r.h([][]byte{in}, [][]byte{out})
		if errno == 0 && n == 0 {
			r.interrupts.Add(1)
			slog.Debug("FUSE request interrupted", "mount", r.name, "unique", unique)
			return
		}
		if errno == 0 && n >= outHeaderSize && -int32(get32(out, 4)) != int32(syscall.EAGAIN) {
			return // the Handler does not take interrupts
		}
		if !r.busy(unique) || time.Now().After(deadline) {
			return
		}
		time.Sleep(wait)
	}
}

// cancelAll cancels every request the ring entries are answering: the
// connection has ended, so nobody waits for their answers.
func (r *Rings) cancelAll() {
	r.cancelOnce.Do(func() {
		for _, e := range r.entries() {
			if u := e.cur.Load(); u != 0 {
				go r.deliver(u)
			}
		}
	})
}
