package journal

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// stagedName is the folder (under Options.Dir) that holds content kept by
// Keep until the publisher has hashed and stored it.
const stagedName = "staged"

// stagedLogName is the staging log (under Options.Dir): the copies Keep
// makes of files up to smallBytes, appended one after another, so staging
// one is a write(2) into a file already open. Creating a file per copy
// costs far more than it should on ext4, whose inode allocator walks past
// every recently freed inode (recently_deleted) and so slows down with
// each staged file removed.
//
// The log starts with a header that holds its base: the logical offset of
// the first byte after the header. A staged line names a copy by logical
// offset (which never repeats), its length (Record.Size) and its CRC-32C.
// Once every copy in the log is published the log is cut back to its
// header, and the base moves past everything it held, so no staged line
// can ever point at another change's bytes.
const stagedLogName = "staged.log"

// logStaged is stagedLine.Staged (and Record.staged) for a copy in the
// staging log.
const logStaged = "@log"

const (
	logHeaderFmt  = "neuralisfs staged log v1 base %020d\n"
	logTruncateAt = 4 << 20  // cut the log back once this much is published
	logMax        = 64 << 20 // beyond this (unpublished), copy to staged/
)

var (
	logHeaderLen = int64(len(fmt.Sprintf(logHeaderFmt, 0)))
	castagnoli   = crc32.MakeTable(crc32.Castagnoli)
)

// maxQueued bounds the staged copies waiting for the publisher: a Keep
// beyond it waits, so staging never grows without bound.
const maxQueued = 1024

// File is an existing regular file about to change, as the caller opened
// it confined.
type File struct {
	// FD is an O_PATH or readable descriptor of the file. It stays owned
	// by the caller; Keep neither closes it nor keeps it past its return.
	FD int
	// Readable says FD was opened for reading (not O_PATH): Keep then
	// reads a small file with pread(2) on it instead of opening the file
	// again through /proc (an open and a close fewer).
	Readable bool
	Mode     uint32 // st_mode
	UID, GID uint32 // st_uid, st_gid
	Size     int64  // st_size
	Links    uint64 // st_nlink
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
	Staged string `json:"staged"` // name under staged/, or logStaged
	Linked bool   `json:"linked,omitempty"`
	// Offset and CRC place a copy in the staging log: its logical offset
	// and the CRC-32C of its Record.Size bytes.
	Offset int64   `json:"offset,omitempty"`
	CRC    uint32  `json:"crc,omitempty"`
	Record *Record `json:"record"`
}

// job is one staged copy waiting for the publisher.
type job struct {
	rec *Record // in j.recs; rec.pend is open until it is published
	// hx is the digest of the content, when Keep hashed it (a copy of up
	// to hashBytes), and stored says the journal holds it already: Keep
	// then recorded the change itself and nothing is staged.
	hx     string
	stored bool
	// data is the copy Keep appended to the staging log, still in memory
	// (a copy of up to hashBytes, while inflightMax allows): the publisher
	// stores these bytes, whose digest is hx, instead of reading them back.
	// buf is the pooled buffer behind it.
	data []byte
	buf  *[]byte
}

// inflightMax bounds the memory held by copies handed to the publisher
// (job.data); beyond it the publisher reads them back from the log.
const inflightMax = 16 << 20

// sameWindow is how long a repeated Keep of an unchanged file is skipped.
const sameWindow = time.Second

// Keep journals the content of f before ev changes it, like Save, but with
// as little as possible on the caller's path. In batched mode, a file of
// up to hashBytes is read and hashed at once: when the journal holds that
// content already (an object re-hashed, or proved unchanged since, see
// unchangedSince) Keep writes the record with its digest, as a batched
// Save does, and returns — the common case of a file overwritten again and
// again costs a read, a hash, a stat and one write. Otherwise Keep stages
// the content (a hard link of a larger file when leaving says the name is
// about to go away — unlink, rename over — and f has no other name; a
// small copy appended to the staging log, handed to the publisher in
// memory with its digest; a larger copy under staged/, copy_file_range
// where the filesystem can), writes the record's staged line, and
// returns; a background publisher hashes the copy (unless Keep did),
// stores it as Save would and writes the record with its digest. A killed
// process loses nothing: Open finishes what was staged. History, Plan and
// Content wait for records still being published. In strict mode (Batched
// false) Keep is Save.
func (j *Journal) Keep(ev Event, f File, leaving bool) error {
	if err := checkEvent(ev); err != nil {
		return err
	}
	if !leaving && j.sameAsLast(ev, f.Stamp) {
		return nil
	}
	if !j.batched.Load() || f.Size > j.maxFile.Load() {
		return j.save(ev, f.Mode, &Owner{f.UID, f.GID}, f.Size, f.Stamp, func() (io.ReadCloser, error) { return reopen(f.FD) })
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
	rec.Owner = &Owner{f.UID, f.GID}
	jb := &job{rec: rec}
	n, err := j.stage(f, jb, leaving)
	if errors.Is(err, errTooLarge) {
		j.log.Info("journal: not kept, file grew past the per-file limit", "uri", ev.URI, "limit", j.maxFile.Load())
		rec.Before, rec.Kept, rec.Size = Unknown, false, max(f.Size, n)
		return j.commit(&pending{rec: rec, lazy: true})
	}
	if err != nil && j.full(err) {
		// No room to stage the copy: the change still happens, and its
		// record says the content was not kept (never a record that
		// claims a copy it has not got).
		j.log.Warn("journal: not kept, no space left in the journal's folder", "uri", ev.URI, "err", err)
		rec.Before, rec.Kept, rec.Size = Unknown, false, f.Size
		if cerr := j.commit(&pending{rec: rec, lazy: true}); cerr != nil {
			return fmt.Errorf("journal %s: %w (and the record could not be written: %v)", ev.URI, err, cerr)
		}
		return fmt.Errorf("journal %s: recorded as not kept: %w", ev.URI, err)
	}
	if err != nil {
		return fmt.Errorf("journal %s: %w", ev.URI, err)
	}
	if jb.stored {
		// The content is in the journal already (re-hashed, or proved
		// unchanged since, and pinned): the record needs nothing staged,
		// and is written as Save writes it in batched mode.
		rec.Before, rec.Kept, rec.Size = "sha256:"+jb.hx, true, n
		return j.commit(&pending{rec: rec, pin: jb.hx, lazy: true})
	}
	rec.Size = n
	rec.Before, rec.Kept = Unknown, false
	rec.pend = make(chan struct{})
	line := appendStagedLine(nil, rec)
	if err := j.commit(&pending{rec: rec, line: line, lazy: true}); err != nil {
		j.unstageJob(jb)
		return err
	}
	j.jobs <- jb
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

// stage keeps f's content for jb.rec and sets rec.staged (and rec.linked,
// rec.logOff, rec.logCRC): a hard link under staged/ when leaving, f
// holds more than hashBytes and has no other name (nobody can change it
// through a name any more); else a copy appended to the staging log when
// it fits in smallBytes and the log has room; else a copy under staged/.
// A content of up to hashBytes is hashed first, and when the journal
// holds it already nothing is staged (jb.stored). It returns the bytes
// kept.
func (j *Journal) stage(f File, jb *job, leaving bool) (int64, error) {
	rec := jb.rec
	linkable := leaving && f.Links == 1
	if linkable && f.Size > hashBytes {
		if j.linkStaged(f, rec) {
			return f.Size, nil
		}
		linkable = false
	}
	if f.Size <= smallBytes {
		n, ok, err := j.stageInLog(f, jb, linkable)
		if err != nil && linkable && !errors.Is(err, errTooLarge) && j.linkStaged(f, rec) {
			// Unreadable to a daemon that is not root, say: the link
			// keeps the inode, and the publisher stores it or reports
			// it not kept.
			return f.Size, nil
		}
		if ok || err != nil {
			return n, err
		}
		// It grew past smallBytes, or the log is full: copy it to a file.
	}
	src, err := reopen(f.FD)
	if err != nil {
		return 0, fmt.Errorf("read the content to keep: %w", err)
	}
	defer src.Close()
	name := rec.ID
	j.step("create staged O_EXCL")
	fd, err := unix.Openat(j.stageFD, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, fmt.Errorf("stage a copy: %w", err)
	}
	dst := os.NewFile(uintptr(fd), name)
	// (*os.File).ReadFrom uses copy_file_range (or splice) when it can.
	n, err := io.Copy(dst, io.LimitReader(src, j.maxFile.Load()+1))
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > j.maxFile.Load() {
		err = errTooLarge
	}
	if err != nil {
		j.unstage(name)
		if errors.Is(err, errTooLarge) {
			return n, err
		}
		return n, fmt.Errorf("stage a copy: %w", err)
	}
	rec.staged = name
	return n, nil
}

// linkStaged hard-links f's inode as staged/<id> and reports whether it
// could: EXDEV (state_dir on another filesystem), EPERM (protected
// hardlinks), … leave copying.
func (j *Journal) linkStaged(f File, rec *Record) bool {
	j.step("link staged")
	if unix.Linkat(unix.AT_FDCWD, procPath(f.FD), j.stageFD, rec.ID, unix.AT_SYMLINK_FOLLOW) != nil {
		return false
	}
	rec.staged, rec.linked = rec.ID, true
	return true
}

// stageInLog reads f's content whole into memory. A content of up to
// hashBytes is hashed, and when the journal holds it already (reuse: an
// unchanged object is not read again) it is not staged at all: jb.stored.
// Otherwise the copy is appended to the staging log. It reports false,
// having staged nothing, when f holds more than smallBytes or the log has
// no room.
//
// When link is set (the name is about to go and f has no other name) and
// the content is new, the inode is hard-linked under staged/ instead of
// copied into the log: the change then frees nothing (the publisher's
// removal of the staged name does), and the copy Keep read goes to the
// publisher in memory as from the log.
func (j *Journal) stageInLog(f File, jb *job, link bool) (int64, bool, error) {
	rec := jb.rec
	bp, m, err := j.readSmall(f)
	if err != nil {
		return 0, false, fmt.Errorf("read the content to keep: %w", err)
	}
	keep := false // bp goes to the publisher
	defer func() {
		if !keep {
			putBuf(bp)
		}
	}()
	if int64(m) > j.maxFile.Load() {
		return int64(m), false, errTooLarge
	}
	if m > smallBytes {
		return 0, false, nil
	}
	data := (*bp)[:m]
	if m <= hashBytes {
		sum := sha256.Sum256(data)
		jb.hx = hex.EncodeToString(sum[:])
		if ok, err := j.reuse(jb.hx, int64(m)); ok && err == nil {
			jb.stored = true
			return int64(m), true, nil
		}
		// Not stored yet, or the stored entry is not intact: the
		// publisher sees to it (and reports it not kept if need be).
	}
	if link && jb.hx != "" && j.linkStaged(f, rec) {
		rec.Size = int64(m)
		j.smu.Lock()
		if j.slInflight+int64(cap(*bp)) <= j.slInflightMax {
			jb.data, jb.buf, keep = data, bp, true
			j.slInflight += int64(cap(*bp))
		}
		j.smu.Unlock()
		return int64(m), true, nil
	}
	crc := crc32.Checksum(data, castagnoli)
	j.smu.Lock()
	defer j.smu.Unlock()
	if j.sl == nil || j.slBase < 0 || j.sl.end-logHeaderLen+int64(m) > j.slMax {
		jb.hx = "" // a copy to staged/ reads the file again
		return 0, false, nil
	}
	j.step("write staged log")
	off := j.slBase + j.sl.end - logHeaderLen
	if err := j.sl.write(data); err != nil {
		return 0, false, fmt.Errorf("stage a copy: %w", err)
	}
	rec.staged, rec.logOff, rec.logCRC = logStaged, off, crc
	j.slLive++
	if jb.hx != "" && j.slInflight+int64(cap(*bp)) <= j.slInflightMax {
		jb.data, jb.buf, keep = data, bp, true
		j.slInflight += int64(cap(*bp))
	}
	return int64(m), true, nil
}

// readSmall reads the file behind f.FD (through /proc, as f.FD may be
// O_PATH) into a pooled buffer: up to min(MaxFileBytes, smallBytes)+1
// bytes, so a file past that limit is seen to be. It returns the buffer
// (give it back with putBuf) and how many bytes it holds.
func (j *Journal) readSmall(f File) (*[]byte, int, error) {
	fd := f.FD
	if !f.Readable {
		// A raw descriptor: os.OpenFile would try (and fail) to add a
		// regular file to the poller on every call.
		var err error
		fd, err = openRead(procPath(f.FD))
		if err != nil {
			return nil, 0, err
		}
		defer unix.Close(fd)
	}
	limit := int(min(j.maxFile.Load(), smallBytes) + 1)
	bp := getBuf(int(min(max(f.Size, 0)+1, int64(limit))))
	buf := (*bp)[:min(cap(*bp), limit)]
	m := 0
	for {
		if m == len(buf) {
			if m >= limit {
				break
			}
			// It grew while it was read.
			nb := getBuf(limit)
			copy(*nb, buf)
			putBuf(bp)
			bp, buf = nb, (*nb)[:limit]
		}
		k, err := unix.Pread(fd, buf[m:], int64(m))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			putBuf(bp)
			return nil, 0, err
		}
		if k == 0 {
			break
		}
		m += k
		if int64(m) == f.Size && m < len(buf) {
			// A short read that ends where fstat said the file ends: the
			// end (a regular file reads short only there), without one
			// more pread to see it.
			break
		}
	}
	return bp, m, nil
}

// unstageJob drops what stage kept for jb, whose staged line was not
// written.
func (j *Journal) unstageJob(jb *job) {
	j.releaseData(jb)
	j.unstageRec(jb.rec)
}

// releaseData gives back the in-memory copy jb carried, if any.
func (j *Journal) releaseData(jb *job) {
	if jb.buf == nil {
		return
	}
	j.smu.Lock()
	j.slInflight -= int64(cap(*jb.buf))
	j.smu.Unlock()
	putBuf(jb.buf)
	jb.data, jb.buf = nil, nil
}

// unstageRec drops what stage kept for rec, whose staged line was not
// written.
func (j *Journal) unstageRec(rec *Record) {
	if rec.staged == logStaged {
		j.loggedDone(1)
		return
	}
	j.unstage(rec.staged)
}

// loggedDone notes that n copies in the staging log are published (or were
// never recorded), and cuts the log back once none is left and enough has
// gone through it.
func (j *Journal) loggedDone(n int) {
	j.smu.Lock()
	defer j.smu.Unlock()
	j.slLive -= n
	if j.slLive == 0 && j.sl.end-logHeaderLen >= j.slTruncAt {
		if err := j.rewindLogLocked(); err != nil {
			j.log.Warn("journal: could not cut the staging log back", "err", err)
		}
	}
}

// rewindLogLocked empties the staging log as cutLogLocked does, but keeps
// the file's length when the log went no further than twice slTruncAt:
// the next copies overwrite pages the page cache and the disk already
// hold, instead of allocating new ones (on ext4 that allocation was half
// of what appending a copy cost). The old bytes past the new end are
// never read: no staged line still waiting for the publisher points at
// them (none is left), and Open cuts the log back once it has recovered.
func (j *Journal) rewindLogLocked() error {
	if j.sl.end > 2*j.slTruncAt+logHeaderLen {
		return j.cutLogLocked()
	}
	j.step("rewind staged log")
	if err := j.newLogBaseLocked(); err != nil {
		return err
	}
	j.sl.rewind(logHeaderLen)
	return nil
}

// cutLogLocked empties the staging log: it writes a header whose base is
// past every logical offset used so far, then truncates the log to it. A
// crash between the two leaves stale bytes no staged line can reach. Holds
// smu; nothing in the log may be unpublished.
func (j *Journal) cutLogLocked() error {
	j.step("truncate staged log")
	if err := j.newLogBaseLocked(); err != nil {
		return err
	}
	if err := j.sl.truncate(logHeaderLen); err != nil {
		// Logical offsets stay unique: appends continue after the old bytes.
		return fmt.Errorf("staging log: %w", err)
	}
	return nil
}

// newLogBaseLocked writes the staging log a header whose base is past every
// logical offset used so far. Holds smu.
func (j *Journal) newLogBaseLocked() error {
	base := max(j.slSeen, j.slBase+j.sl.end-logHeaderLen)
	if _, err := j.sl.f.WriteAt(fmt.Appendf(nil, logHeaderFmt, base), 0); err != nil {
		return fmt.Errorf("staging log: %w", err)
	}
	j.slBase = base
	return nil
}

// openLog opens (creating) the staging log and reads its base. A log
// without a readable header (a crash while it was created, a power cut)
// gets slBase -1: no copy in it is trusted, and recoverStaged reports them
// not kept before it writes a new header.
func (j *Journal) openLog() error {
	f, err := os.OpenFile(filepath.Join(j.dir, stagedLogName), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("journal: %w", err)
	}
	j.sl, j.slBase = newTailFile(f, st.Size(), 0), -1
	hdr := make([]byte, logHeaderLen)
	if n, _ := f.ReadAt(hdr, 0); int64(n) == logHeaderLen {
		prefix, _, _ := strings.Cut(logHeaderFmt, "%")
		if num, ok := bytes.CutPrefix(hdr[:n-1], []byte(prefix)); ok && hdr[n-1] == '\n' {
			if b, err := strconv.ParseInt(string(num), 10, 64); err == nil && b >= 0 {
				j.slBase = b
			}
		}
	}
	if j.slBase < 0 && j.sl.end > 0 {
		j.log.Warn("journal: the staging log has no readable header; copies in it are not trusted", "bytes", j.sl.end)
	}
	return nil
}

// readLogged reads r's copy back from the staging log and checks it
// against the CRC its staged line gave.
func (j *Journal) readLogged(r *Record) ([]byte, error) {
	j.step("read staged log")
	j.smu.Lock()
	base, end := j.slBase, j.sl.end
	j.smu.Unlock()
	if r.Size < 0 || r.Size > smallBytes {
		return nil, fmt.Errorf("staged copy of %d bytes cannot be in the staging log", r.Size)
	}
	off := r.logOff - base + logHeaderLen
	if base < 0 || r.logOff < base || off+r.Size > end {
		return nil, errors.New("staged copy is no longer in the staging log")
	}
	b := make([]byte, r.Size)
	if _, err := j.sl.f.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("read the staging log: %w", err)
	}
	if crc32.Checksum(b, castagnoli) != r.logCRC {
		return nil, errors.New("staged copy in the staging log does not match its checksum")
	}
	return b, nil
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
	rfd, err := openRead(procPath(fd))
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: procPath(fd), Err: err}
	}
	return os.NewFile(uintptr(rfd), procPath(fd)), nil
}

// openRead opens path for reading without stamping its access time
// (O_NOATIME: keeping a file is not a read of it on the backing folder),
// or with it where the daemon may not (not the owner, no CAP_FOWNER).
func openRead(path string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err := unix.Open(path, flags|unix.O_NOATIME, 0)
	if err == unix.EPERM {
		fd, err = unix.Open(path, flags, 0)
	}
	return fd, err
}

func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// The publisher gathers staged copies into one batch while they keep
// coming — more within each gatherIdle, for at most gatherMax — so a
// burst becomes a few packs (a file and an fsync each) instead of a file
// and an fsync per copy. It sleeps between looks rather than waiting on
// the queue: a Keep that finds it waiting wakes a thread for it, which
// cost a fifth of Keep's CPU when every copy did. A reader waiting for a
// record (History, Plan, Content) cuts the gathering short (hurry), so a
// revert right after a change does not wait for it.
//
// gatherMax is 200 ms: against 50 ms, a burst of overwrites (1000 files of
// 4 KiB, one after another, about 1.4 ms each) is gathered into batches
// of about 140 copies instead of 35, the publisher took 40% fewer perf
// samples, and the burst ran 4-9% faster on this 2-core VM (median of 14
// paired rounds, in both orders). It is a variable only so that a crash
// test can publish more often.
const (
	gatherIdle = 3 * time.Millisecond
	batchMax   = 256
)

var gatherMax = 200 * time.Millisecond

// publisher stores staged copies in batches until Close closes jobs.
func (j *Journal) publisher() {
	// Not at background priority (package lowprio): a change waits for
	// the publisher once its queue is full, so a publisher starved by a
	// busy machine would stall every write through the mount, and it is
	// what makes copies durable.
	defer close(j.workDone)
	idle := time.NewTimer(gatherIdle)
	idle.Stop()
	for jb := range j.jobs {
		batch := []*job{jb}
		j.step("gather")
		deadline := time.Now().Add(gatherMax)
		// A hurry from before this batch began is stale; a reader
		// still waiting is not.
		select {
		case <-j.hurry:
		default:
		}
		for len(batch) < batchMax {
			// A reader waiting: take what is queued, without waiting.
			hurried := j.waiters.Load() > 0
			if !hurried {
				idle.Reset(min(gatherIdle, time.Until(deadline)))
				select {
				case <-idle.C:
				case <-j.hurry:
					hurried = true
				}
				idle.Stop()
			}
			had, closed := len(batch), false
		take:
			for len(batch) < batchMax {
				select {
				case x, ok := <-j.jobs:
					if !ok {
						closed = true
						break take
					}
					batch = append(batch, x)
				default:
					break take
				}
			}
			if hurried || closed || len(batch) == had || !time.Now().Before(deadline) {
				break
			}
		}
		j.publish(batch)
	}
}

// hurryPublisher asks the publisher to publish what it has gathered now:
// someone waits for it.
func (j *Journal) hurryPublisher() {
	select {
	case j.hurry <- struct{}{}:
	default:
	}
}

// publish stores each staged copy (O_EXCL temporary, fsync, non-replacing
// link, as Save does; an equal object is reused once a re-hash proved
// it), writes the records with their digests in one append and fsync
// (after fsyncing objects/), and then removes the staged copies (a copy
// in the staging log is released; the log is cut back once none in it is
// left). A crash anywhere in between leaves the staged line without its
// record line, and Open publishes it again. A copy whose record line
// could not be written stays staged for the next Open.
func (j *Journal) publish(batch []*job) {
	ps := make([]*pending, len(batch))
	j.packBatch(batch, ps)
	for i, jb := range batch {
		if ps[i] == nil {
			ps[i] = j.publishOne(jb)
		}
		j.releaseData(jb)
	}
	if err := j.commitAll(ps); err != nil {
		j.log.Error("journal: could not record published copies", "err", err)
	}
	logged := 0
	for _, p := range ps {
		switch {
		case p.err != nil:
		case p.settle.staged == logStaged:
			logged++
		default:
			j.unstage(p.settle.staged)
		}
	}
	if logged > 0 {
		j.loggedDone(logged)
	}
}

// openStaged opens r's copy under staged/.
func (j *Journal) openStaged(r *Record) (*os.File, error) {
	f, err := os.Open(filepath.Join(j.dir, stagedName, r.staged))
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	// A copy whose length changed was torn by a power cut (the
	// publisher never changes one); a linked inode is what it is.
	if err == nil && !r.linked && st.Size() != r.Size {
		err = fmt.Errorf("staged copy holds %d bytes, not %d", st.Size(), r.Size)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// publishOne stores the staged copy of r and returns the pending record
// line that settles r.
func (j *Journal) publishOne(jb *job) *pending {
	r := jb.rec
	var hx string
	var n int64
	var linked bool
	var err error
	switch {
	case jb.data != nil:
		// The bytes Keep staged (appended to the log, or read before
		// linking the inode) and hashed, still in memory.
		j.step("store staged copy")
		hx, n, linked, err = j.storeHashed(jb.data, jb.hx)
	case r.staged == logStaged:
		var b []byte
		if b, err = j.readLogged(r); err == nil {
			hx, n, linked, err = j.storeWhole(b)
		}
	case r.linked:
		// The old inode itself: a process holding it open outside the
		// mount could still write to it, so its bytes are copied.
		var f *os.File
		if f, err = j.openStaged(r); err == nil {
			hx, n, linked, err = j.store(f)
			f.Close()
		}
	default:
		var f *os.File
		if f, err = j.openStaged(r); err == nil {
			hx, n, linked, err = j.storeStaged(f, r.staged)
			f.Close()
		}
	}
	return j.settle(r, hx, n, linked, err)
}

// settle returns the pending record line that settles r, whose staged
// copy was stored as hx (n bytes; linked: a new file under objects/) or
// failed with err.
func (j *Journal) settle(r *Record, hx string, n int64, linked bool, err error) *pending {
	// Lazy: the object is fsynced already (store); objects/ and the line
	// follow within flushDelay, and until then the staged line and copy
	// stand for them.
	p := &pending{settle: r, lazy: true}
	before, kept, size := Unknown, false, r.Size
	switch {
	case errors.Is(err, errTooLarge):
		size = max(size, n)
	case err == nil:
		before, kept, size = "sha256:"+hx, true, n
		p.pin, p.dirSync = hx, linked
	}
	if err != nil && !errors.Is(err, errTooLarge) {
		j.full(err)
		j.log.Warn("journal: a staged copy could not be stored, record reported not kept", "id", r.ID, "uri", r.URI, "err", err)
	}
	j.mu.Lock()
	fin := *r
	j.mu.Unlock()
	fin.Before, fin.Kept, fin.Size = before, kept, size
	p.final = fin
	p.line = appendRecordLine(nil, &fin)
	return p
}

// recoverStaged finishes what a killed process staged: every record that
// has its staged line but not its record line is published now (or
// reported not kept when its copy is gone or torn), and then every file
// left in staged/ — copies whose record was written, or whose staged line
// never was — is removed and the staging log is cut back to its header.
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
		for len(todo) > 0 {
			chunk := todo[:min(len(todo), batchMax)]
			todo = todo[len(chunk):]
			// Small copies in the staging log are read and hashed here,
			// as Keep hands them to the publisher, so that packBatch
			// stores them as packs: a pack file and an fsync for many
			// copies. Before, each was an object of its own with an
			// fsync, and the mount was not served until all were: a
			// daemon killed under load took 4.7–19.6 s to start again
			// for 293–1,001 records (found by a data-integrity pass).
			for _, jb := range chunk {
				if r := jb.rec; r.staged == logStaged && r.Size <= hashBytes {
					if b, err := j.readLogged(r); err == nil {
						sum := sha256.Sum256(b)
						jb.data, jb.hx = b, hex.EncodeToString(sum[:])
					}
				}
			}
			cps := make([]*pending, len(chunk))
			j.packBatch(chunk, cps)
			for i, jb := range chunk {
				if cps[i] == nil {
					cps[i] = j.publishOne(jb)
				}
				jb.data = nil
			}
			ps = append(ps, cps...)
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
	j.smu.Lock()
	defer j.smu.Unlock()
	if j.slBase < 0 || j.sl.end > logHeaderLen {
		if err := j.cutLogLocked(); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
	}
	return nil
}

// waitFor waits until none of recs is being published. Call without mu.
// While it waits the publisher does not gather (waiters).
func (j *Journal) waitFor(chans []chan struct{}) {
	j.waiters.Add(1)
	defer j.waiters.Add(-1)
	j.hurryPublisher()
	for _, c := range chans {
		<-c
	}
}

// storeStaged stores a copy Keep made under staged/ (created O_EXCL in the
// private journal and never written again) by publishing that very file:
// it hashes it, fsyncs it and links it to objects/<hex> (link never
// replaces), instead of writing a second copy to a tmp- file. The staged
// name stays until the record is written (publish removes it), so a crash
// before that leaves the staged line and its copy for Open to publish
// again, and an object linked meanwhile without its record is removed at
// Open as one no record uses. An equal object already stored is reused as
// store reuses one (re-hashed, or proved unchanged since).
func (j *Journal) storeStaged(f *os.File, name string) (hx string, n int64, linked bool, err error) {
	j.step("hash staged copy")
	h := sha256.New()
	bp := bufPool.Get().(*[]byte)
	n, err = io.CopyBuffer(h, struct{ io.Reader }{io.LimitReader(f, j.maxFile.Load()+1)}, *bp)
	bufPool.Put(bp)
	if err != nil {
		return "", n, false, fmt.Errorf("read the staged copy: %w", err)
	}
	if n > j.maxFile.Load() {
		return "", n, false, errTooLarge
	}
	hx = hex.EncodeToString(h.Sum(nil))
	if ok, err := j.reuse(hx, n); ok || err != nil {
		return hx, n, false, err
	}
	j.step("fsync staged")
	if err := ignoringEINTR(func() error { return unix.Fsync(int(f.Fd())) }); err != nil {
		return "", n, false, fmt.Errorf("fsync the staged copy: %w", err)
	}
	return j.publishAs(hx, n, "link staged object", func() error {
		return unix.Linkat(j.stageFD, name, j.objDirFD, hx, 0)
	})
}
