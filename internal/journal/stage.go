package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// stagedName is the folder (under Options.Dir) that holds content kept by
// Keep until the publisher has hashed and stored it.
const stagedName = "staged"

// maxQueued bounds the staged copies waiting for the publisher: a Keep
// beyond it waits, so staging never grows without bound.
const maxQueued = 1024

// File is an existing regular file about to change, as the caller opened
// it confined.
type File struct {
	// FD is an O_PATH or readable descriptor of the file. It stays owned
	// by the caller; Keep neither closes it nor keeps it past its return.
	FD    int
	Mode  uint32 // st_mode
	Size  int64  // st_size
	Links uint64 // st_nlink
	// Stamp identifies the file's state (device, inode, size, times):
	// a Keep of "open" or "truncate" right after one with the same Stamp,
	// from the same process, adds nothing and is skipped (an O_TRUNC open
	// reaches the daemon as an open and a truncate). "" never matches.
	Stamp string
}

// stagedLine is written by Keep before it returns: the record, without its
// digest yet, and the name of its staged copy. The record's own line
// (same id, with the digest) follows once the copy is published.
type stagedLine struct {
	Staged string  `json:"staged"`
	Linked bool    `json:"linked,omitempty"`
	Record *Record `json:"record"`
}

// job is one staged copy waiting for the publisher.
type job struct {
	rec *Record // in j.recs; rec.pend is open until it is published
}

// sameWindow is how long a repeated Keep of an unchanged file is skipped.
const sameWindow = time.Second

// Keep journals the content of f before ev changes it, like Save, but with
// as little as possible on the caller's path: in batched mode it stages the
// content (a hard link when leaving says the name is about to go away —
// unlink, rename over — and f has no other name; otherwise a copy,
// copy_file_range where the filesystem can), writes the record's staged
// line, and returns; a background publisher hashes the copy, stores it as
// Save would and writes the record with its digest. A killed process loses
// nothing: Open finishes what was staged. History, Plan and Content wait
// for records still being published. In strict mode (Batched false) Keep
// is Save.
func (j *Journal) Keep(ev Event, f File, leaving bool) error {
	if err := checkEvent(ev); err != nil {
		return err
	}
	if !leaving && j.sameAsLast(ev, f.Stamp) {
		return nil
	}
	if !j.batched || f.Size > j.maxFile {
		return j.save(ev, f.Mode, f.Size, f.Stamp, func() (io.ReadCloser, error) { return reopen(f.FD) })
	}
	j.amu.RLock()
	defer j.amu.RUnlock()
	if j.stopping {
		return ErrClosed
	}
	j.mu.Lock()
	rec := j.newRecordLocked(ev)
	j.mu.Unlock()
	rec.Mode, rec.Size, rec.stamp = f.Mode&0o7777, f.Size, f.Stamp
	linked, n, err := j.stage(f, rec.ID, leaving)
	if errors.Is(err, errTooLarge) {
		j.log.Info("journal: not kept, file grew past the per-file limit", "uri", ev.URI, "limit", j.maxFile)
		rec.Before, rec.Kept, rec.Size = Unknown, false, max(f.Size, n)
		return j.commit(&pending{rec: rec, lazy: true})
	}
	if err != nil {
		return fmt.Errorf("journal %s: %w", ev.URI, err)
	}
	rec.Size, rec.staged, rec.linked = n, rec.ID, linked
	rec.Before, rec.Kept = Unknown, false
	rec.pend = make(chan struct{})
	b, err := json.Marshal(stagedLine{Staged: rec.staged, Linked: linked, Record: rec})
	if err != nil {
		j.unstage(rec.staged)
		return err
	}
	if err := j.commit(&pending{rec: rec, line: append(b, '\n'), lazy: true}); err != nil {
		j.unstage(rec.staged)
		return err
	}
	j.jobs <- &job{rec: rec}
	return nil
}

// sameAsLast reports whether the newest record of ev.URI was an open or
// truncate by the same process, moments ago, of the file in the state
// stamp names: its saved content is what this change would save.
func (j *Journal) sameAsLast(ev Event, stamp string) bool {
	if stamp == "" || (ev.Op != "open" && ev.Op != "truncate") {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	last := j.lastLocked(ev.URI)
	return last != nil && last.stamp == stamp && last.PID == ev.PID && last.UID == ev.UID &&
		(last.Op == "open" || last.Op == "truncate") && j.now().Sub(last.Time) < sameWindow
}

// stage puts f's content under staged/name: a hard link when leaving and f
// has no other name (nobody can change it through a name any more), else a
// copy. It returns whether it linked and the bytes staged.
func (j *Journal) stage(f File, name string, leaving bool) (bool, int64, error) {
	if leaving && f.Links == 1 {
		j.step("link staged")
		err := unix.Linkat(unix.AT_FDCWD, procPath(f.FD), j.stageFD, name, unix.AT_SYMLINK_FOLLOW)
		if err == nil {
			return true, f.Size, nil
		}
		// EXDEV (state_dir on another filesystem), EPERM (protected
		// hardlinks), …: copy instead.
	}
	src, err := reopen(f.FD)
	if err != nil {
		return false, 0, fmt.Errorf("read the content to keep: %w", err)
	}
	defer src.Close()
	j.step("create staged O_EXCL")
	fd, err := unix.Openat(j.stageFD, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false, 0, fmt.Errorf("stage a copy: %w", err)
	}
	dst := os.NewFile(uintptr(fd), name)
	// (*os.File).ReadFrom uses copy_file_range (or splice) when it can.
	n, err := io.Copy(dst, io.LimitReader(src, j.maxFile+1))
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > j.maxFile {
		err = errTooLarge
	}
	if err != nil {
		j.unstage(name)
		if errors.Is(err, errTooLarge) {
			return false, n, err
		}
		return false, n, fmt.Errorf("stage a copy: %w", err)
	}
	return false, n, nil
}

func (j *Journal) unstage(name string) {
	j.step("remove staged")
	if err := unix.Unlinkat(j.stageFD, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		j.log.Warn("journal: could not remove a staged copy", "name", name, "err", err)
	}
}

// reopen opens the file behind fd (O_PATH or not) for reading, exactly
// that inode, through /proc.
func reopen(fd int) (*os.File, error) {
	return os.OpenFile(procPath(fd), os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
}

func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// publisher stores staged copies in batches until Close closes jobs.
func (j *Journal) publisher() {
	defer close(j.workDone)
	for jb := range j.jobs {
		batch := []*job{jb}
	more:
		for len(batch) < 256 {
			select {
			case x, ok := <-j.jobs:
				if !ok {
					break more
				}
				batch = append(batch, x)
			default:
				break more
			}
		}
		j.publish(batch)
	}
}

// publish stores each staged copy (O_EXCL temporary, fsync, non-replacing
// link, as Save does; an equal object is re-hashed and reused), writes the
// records with their digests in one append and fsync (after fsyncing
// objects/), and then removes the staged copies. A crash anywhere in
// between leaves the staged line without its record line, and Open
// publishes it again.
func (j *Journal) publish(batch []*job) {
	ps := make([]*pending, 0, len(batch))
	for _, jb := range batch {
		ps = append(ps, j.publishOne(jb.rec))
	}
	if err := j.commitAll(ps); err != nil {
		j.log.Error("journal: could not record published copies", "err", err)
	}
	for _, p := range ps {
		if p.err == nil {
			j.unstage(p.settle.staged)
		}
	}
}

// publishOne stores the staged copy of r and returns the pending record
// line that settles r.
func (j *Journal) publishOne(r *Record) *pending {
	// Lazy: the object is fsynced already (store); objects/ and the line
	// follow within flushDelay, and until then the staged line and copy
	// stand for them.
	p := &pending{settle: r, lazy: true}
	before, kept, size := Unknown, false, r.Size
	f, err := os.Open(filepath.Join(j.dir, stagedName, r.staged))
	if err == nil {
		var st os.FileInfo
		st, err = f.Stat()
		// A copy whose length changed was torn by a power cut (the
		// publisher never changes one); a linked inode is what it is.
		if err == nil && !r.linked && st.Size() != r.Size {
			err = fmt.Errorf("staged copy holds %d bytes, not %d", st.Size(), r.Size)
		}
		if err == nil {
			var hx string
			var n int64
			var linked bool
			hx, n, linked, err = j.store(f)
			switch {
			case errors.Is(err, errTooLarge):
				size = max(size, n)
			case err == nil:
				before, kept, size = "sha256:"+hx, true, n
				p.pin, p.dirSync = hx, linked
			}
		}
		f.Close()
	}
	if err != nil && !errors.Is(err, errTooLarge) {
		j.log.Warn("journal: a staged copy could not be stored, record reported not kept", "id", r.ID, "uri", r.URI, "err", err)
	}
	j.mu.Lock()
	fin := *r
	j.mu.Unlock()
	fin.Before, fin.Kept, fin.Size = before, kept, size
	p.final = fin
	b, merr := json.Marshal(&fin)
	if merr != nil {
		b = []byte("{}") // cannot happen: Record always marshals
	}
	p.line = append(b, '\n')
	return p
}

// recoverStaged finishes what a killed process staged: every record that
// has its staged line but not its record line is published now (or
// reported not kept when its copy is gone or torn), and then every file
// left in staged/ — copies whose record was written, or whose staged line
// never was — is removed.
func (j *Journal) recoverStaged() error {
	var todo []*job
	for _, r := range j.recs {
		if r.pend != nil {
			todo = append(todo, &job{rec: r})
		}
	}
	if len(todo) > 0 {
		j.log.Info("journal: publishing copies staged before a crash", "records", len(todo))
		ps := make([]*pending, 0, len(todo))
		for _, jb := range todo {
			ps = append(ps, j.publishOne(jb.rec))
		}
		if err := j.commitAll(ps); err != nil {
			return fmt.Errorf("journal: recover staged copies: %w", err)
		}
	}
	ents, err := os.ReadDir(filepath.Join(j.dir, stagedName))
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	for _, e := range ents {
		j.unstage(e.Name())
	}
	return nil
}

// waitFor waits until none of recs is being published. Call without mu.
func waitFor(chans []chan struct{}) {
	for _, c := range chans {
		<-c
	}
}
