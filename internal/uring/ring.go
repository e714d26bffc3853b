package uring

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Constants from include/uapi/linux/io_uring.h.
const (
	setupSQE128 = 1 << 10
	setupCQE32  = 1 << 11

	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	enterGetEvents = 1 << 0

	opURingCmd = 46

	sqeSize = 128 // IORING_SETUP_SQE128
	cqeSize = 32  // IORING_SETUP_CQE32
)

// params is struct io_uring_params.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sq                                                                     sqOffsets
	cq                                                                     cqOffsets
}

type sqOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// ring is one io_uring instance with 128-byte SQEs and 32-byte CQEs. It is
// used by one goroutine, locked to its OS thread, at a time.
type ring struct {
	fd        int
	sqMem     []byte
	cqMem     []byte
	sqes      []byte
	sqHead    *uint32
	sqTail    *uint32
	sqMask    uint32
	cqHead    *uint32
	cqTail    *uint32
	cqMask    uint32
	cqesOff   uint32
	pending   uint32 // SQEs written but not yet submitted
	sqEntries uint32
}

// cqe is the part of struct io_uring_cqe this package reads.
type cqe struct {
	userData uint64
	res      int32
}

func newRing(entries uint32) (*ring, error) {
	var p params
	p.flags = setupSQE128 | setupCQE32
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &ring{fd: int(fd), sqMask: 0, sqEntries: p.sqEntries}
	fail := func(what string, err error) (*ring, error) {
		r.close()
		return nil, fmt.Errorf("io_uring mmap %s: %w", what, err)
	}
	var err error
	r.sqMem, err = unix.Mmap(r.fd, offSQRing, int(p.sq.array+p.sqEntries*4), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail("sq ring", err)
	}
	r.cqMem, err = unix.Mmap(r.fd, offCQRing, int(p.cq.cqes+p.cqEntries*cqeSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail("cq ring", err)
	}
	r.sqes, err = unix.Mmap(r.fd, offSQEs, int(p.sqEntries*sqeSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail("sqes", err)
	}
	r.sqHead = (*uint32)(unsafe.Pointer(&r.sqMem[p.sq.head]))
	r.sqTail = (*uint32)(unsafe.Pointer(&r.sqMem[p.sq.tail]))
	r.sqMask = *(*uint32)(unsafe.Pointer(&r.sqMem[p.sq.ringMask]))
	r.cqHead = (*uint32)(unsafe.Pointer(&r.cqMem[p.cq.head]))
	r.cqTail = (*uint32)(unsafe.Pointer(&r.cqMem[p.cq.tail]))
	r.cqMask = *(*uint32)(unsafe.Pointer(&r.cqMem[p.cq.ringMask]))
	r.cqesOff = p.cq.cqes
	// The SQ index array maps ring slot i to SQE i, once and for all.
	for i := uint32(0); i < p.sqEntries; i++ {
		*(*uint32)(unsafe.Pointer(&r.sqMem[p.sq.array+4*i])) = i
	}
	return r, nil
}

// getSQE returns the next free SQE, zeroed, or nil when the queue is full
// (the caller then submits and retries).
func (r *ring) getSQE() []byte {
	head := atomic.LoadUint32(r.sqHead)
	tail := *r.sqTail + r.pending
	if tail-head >= r.sqEntries {
		return nil
	}
	i := tail & r.sqMask
	sqe := r.sqes[i*sqeSize : (i+1)*sqeSize]
	clear(sqe)
	r.pending++
	return sqe
}

// enter publishes the pending SQEs, submits every SQE the kernel has not
// consumed yet and, when minComplete > 0, waits for that many completions.
// A wait cut short by a signal returns nil; the caller reaps what there is.
func (r *ring) enter(minComplete uint32) error {
	if r.pending > 0 {
		atomic.StoreUint32(r.sqTail, *r.sqTail+r.pending)
		r.pending = 0
	}
	var flags uintptr
	if minComplete > 0 {
		flags = enterGetEvents
	}
	for {
		n := *r.sqTail - atomic.LoadUint32(r.sqHead)
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), uintptr(minComplete), flags, 0, 0)
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
			if n == 0 {
				return nil
			}
			continue
		default:
			return fmt.Errorf("io_uring_enter: %w", errno)
		}
	}
}

// reap calls f for every completion there is and marks them consumed.
func (r *ring) reap(f func(cqe)) {
	head := *r.cqHead
	tail := atomic.LoadUint32(r.cqTail)
	for ; head != tail; head++ {
		off := r.cqesOff + (head&r.cqMask)*cqeSize
		c := cqe{
			userData: *(*uint64)(unsafe.Pointer(&r.cqMem[off])),
			res:      *(*int32)(unsafe.Pointer(&r.cqMem[off+8])),
		}
		f(c)
	}
	atomic.StoreUint32(r.cqHead, head)
}

// peek calls f for every completion there is and leaves them unconsumed.
func (r *ring) peek(f func(cqe)) {
	tail := atomic.LoadUint32(r.cqTail)
	for head := *r.cqHead; head != tail; head++ {
		off := r.cqesOff + (head&r.cqMask)*cqeSize
		f(cqe{
			userData: *(*uint64)(unsafe.Pointer(&r.cqMem[off])),
			res:      *(*int32)(unsafe.Pointer(&r.cqMem[off+8])),
		})
	}
}

func (r *ring) close() {
	for _, m := range [][]byte{r.sqes, r.cqMem, r.sqMem} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	unix.Close(r.fd)
}

// SQE field offsets (struct io_uring_sqe).
const (
	sqeOpcode   = 0
	sqeFd       = 4
	sqeOff      = 8 // cmd_op for URING_CMD
	sqeAddr     = 16
	sqeLen      = 24
	sqeUserData = 32
	sqeCmd      = 48 // command area of a 128-byte SQE
)

func put8(b []byte, off int, v uint8)   { b[off] = v }
func put16(b []byte, off int, v uint16) { *(*uint16)(unsafe.Pointer(&b[off])) = v }
func put32(b []byte, off int, v uint32) { *(*uint32)(unsafe.Pointer(&b[off])) = v }
func put64(b []byte, off int, v uint64) { *(*uint64)(unsafe.Pointer(&b[off])) = v }
func get16(b []byte, off int) uint16    { return *(*uint16)(unsafe.Pointer(&b[off])) }
func get32(b []byte, off int) uint32    { return *(*uint32)(unsafe.Pointer(&b[off])) }
func get64(b []byte, off int) uint64    { return *(*uint64)(unsafe.Pointer(&b[off])) }
