// Package lowprio runs the daemon's background work — the index's builds
// and re-indexing, the watcher — on OS threads
// that the kernel schedules after everything else, so that work does not
// slow the FUSE requests in front of it (issue 15).
//
// Linux schedules threads, not processes, and keeps a nice value per
// thread: Lower locks the calling goroutine to its OS thread and sets that
// thread's nice value to Nice. The goroutine must keep the thread locked
// until it returns; Go then ends the thread with it (runtime.LockOSThread),
// so the nice value never passes to other goroutines, and the runtime
// starts new threads from its own template thread rather than from a
// locked one, so none inherits it either. Goroutines the background work
// starts run at normal priority unless they call Lower too (bleve's own
// analysis and merge goroutines do not).
//
// The journal's publisher is not lowered: changes wait for it when its
// queue is full, so starving it would stall the requests themselves.
//
// Nice 19 rather than SCHED_IDLE: a background thread holding a lock that
// a request waits for (the index's queue, the journal's store) still gets
// a small share of the CPU on a machine kept busy by other work, where an
// idle-class thread would wait for a free core and hold the request up.
package lowprio

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Nice is the nice value of background threads: the lowest priority.
const Nice = 19

// Lower locks the calling goroutine to its OS thread and lowers that
// thread's priority to Nice. Call it first thing in a goroutine of
// background work, and never unlock the thread.
func Lower() {
	runtime.LockOSThread()
	// Raising one's own nice value needs no privilege; on failure the
	// work just runs at normal priority.
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), Nice)
}

// LowerIO is Lower, and also puts the thread's own disk I/O in the idle
// class (ioprio_set(2), IOPRIO_CLASS_IDLE): the disk serves it only while
// nothing of a higher class waits, so reading a tree to index it does not
// slow a caller reading a file through the mount (a passthrough read is
// the caller's own I/O, in its own class). It applies where the disk's
// scheduler orders by class — mq-deadline and BFQ do, "none" does not —
// and mq-deadline still serves idle I/O that has waited prio_aging_expire
// (10 s by default), so the work is slowed, never stopped. A thread the
// runtime starts later does not inherit the class, for the reason it does
// not inherit the nice value (see Lower).
//
// For work that reads files for itself (the index); not for the watcher,
// whose reads of new folders make it hear of their changes.
func LowerIO() {
	Lower()
	// Lowering one's own I/O class needs no privilege; on failure the
	// I/O keeps its class.
	_, _, _ = unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(unix.Gettid()), ioprioIdle)
}

// ioprio_set(2)'s arguments (linux/ioprio.h): a thread's id is a "process"
// to it, and the priority value is the class shifted by 13.
const (
	ioprioWhoProcess = 1
	ioprioClassShift = 13
	ioprioClassIdle  = 3
	ioprioIdle       = ioprioClassIdle << ioprioClassShift
)

// Go runs f in a new goroutine on a thread of its own at background
// priority; the thread ends with f.
func Go(f func()) {
	go func() {
		Lower()
		f()
	}()
}
