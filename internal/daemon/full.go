package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/neuralis/neuralisfs/mounts"
)

// stateFull is the daemon's record of a full state_dir: set when a write
// of the journal (or the index, or the held store) fails for want of
// space, cleared when a probe write under state_dir succeeds again (see
// probeStateDir, run every second by the serve loop while it is set).
// While it is set every reachable source is DEGRADED with the reason: the
// mount serves writes, but their old content may not be kept.
type stateFull struct {
	mu     sync.Mutex
	reason string // "" while state_dir takes writes
}

// noSpace records err when it is a write that failed for want of space
// (ENOSPC, EDQUOT) under state_dir; what names the part that failed.
func (d *Daemon) noSpace(what string, err error) {
	if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
		return
	}
	reason := fmt.Sprintf("state_dir %s: %s: %v (changes are recorded as not kept until space returns)", d.cfg.StateDirPath(), what, unwrapErrno(err))
	d.full.mu.Lock()
	was := d.full.reason
	d.full.reason = reason
	d.full.mu.Unlock()
	if was == "" {
		d.log.Warn("state_dir is full: sources are DEGRADED until space returns", "reason", reason)
	}
}

// unwrapErrno is err's errno when it has one (the reason stays short).
func unwrapErrno(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// stateFullReason is the reason state_dir is full, or "".
func (d *Daemon) stateFullReason() string {
	d.full.mu.Lock()
	defer d.full.mu.Unlock()
	return d.full.reason
}

// degradeIfFull marks a reachable source's status DEGRADED while
// state_dir is full.
func (d *Daemon) degradeIfFull(st mounts.Status) mounts.Status {
	r := d.stateFullReason()
	switch {
	case r == "" || st.State == mounts.Unavailable:
	case st.State == mounts.Degraded:
		st.Reason += "; " + r
	default:
		st = mounts.Status{State: mounts.Degraded, Reason: r}
	}
	return st
}

// probeBytes is what a probe writes under state_dir: room for a few
// records and small copies, so a disk with a few bytes free is still full.
const probeBytes = 256 << 10

// probeStateDir clears the full state when state_dir takes a write of
// probeBytes again (written, fsynced and removed), then lets the index
// catch up on whatever a failed batch dropped.
func (d *Daemon) probeStateDir() {
	if d.stateFullReason() == "" {
		return
	}
	f, err := os.CreateTemp(d.cfg.StateDirPath(), ".space-probe-")
	if err != nil {
		return
	}
	_, err = f.Write(make([]byte, probeBytes))
	if err == nil {
		err = f.Sync()
	}
	f.Close()
	os.Remove(f.Name())
	if err != nil {
		return
	}
	d.full.mu.Lock()
	d.full.reason = ""
	d.full.mu.Unlock()
	d.log.Info("state_dir takes writes again: sources no longer DEGRADED", "state_dir", filepath.Clean(d.cfg.StateDirPath()))
	if d.ix() != nil {
		for _, s := range d.srcs() {
			if _, err := s.Root(); err == nil {
				d.reconcile(s.Slug())
			}
		}
	}
}
