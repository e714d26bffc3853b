package journal

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// smallBytes is how much of a file Save reads into memory before it
// decides whether the content is already stored: a file that fits and is
// already in the journal costs no write (and a re-hash of the object, or
// only its stat once a re-hash proved it: see unchangedSince).
const smallBytes = 1 << 20

// hashBytes is how large a content Keep hashes before it returns (so a
// content already stored costs only its record; see Keep), and the size
// below which a re-hash reads a file whole.
const hashBytes = 64 << 10

// The buffer holds one byte more, so a file of exactly smallBytes is seen
// to end.
var bufPool = sync.Pool{New: func() any { b := make([]byte, smallBytes+1); return &b }}

// errTooLarge is internal: the file grew past MaxFileBytes while it was read.
var errTooLarge = errors.New("larger than the per-file limit")

// Save journals the content an existing regular file has before ev changes
// it. read opens that content (the caller opens it confined); Save calls it
// at most once, and not at all for a file larger than MaxFileBytes, which
// is recorded as not kept. mode is the file's permission bits, size its
// length from stat. Identical content is stored once. Save returns after
// the copy and its record are durable; an error means nothing was recorded.
func (j *Journal) Save(ev Event, mode uint32, size int64, read func() (io.ReadCloser, error)) error {
	return j.save(ev, mode, nil, size, "", read)
}

func (j *Journal) save(ev Event, mode uint32, owner *Owner, size int64, stamp string, read func() (io.ReadCloser, error)) error {
	if err := checkEvent(ev); err != nil {
		return err
	}
	if !j.using() {
		return ErrClosed
	}
	defer j.amu.RUnlock()
	p := &pending{}
	before, kept := Unknown, false
	var full error
	if size <= j.maxFile.Load() {
		rc, err := read()
		if err != nil {
			return fmt.Errorf("journal %s: read the content to save: %w", ev.URI, err)
		}
		hx, n, linked, err := j.store(rc)
		rc.Close()
		switch {
		case errors.Is(err, errTooLarge):
			j.log.Info("journal: not kept, file grew past the per-file limit", "uri", ev.URI, "limit", j.maxFile.Load())
			size = max(size, n)
		case err != nil && j.full(err):
			// Recorded as not kept, as Keep does.
			j.log.Warn("journal: not kept, no space left in the journal's folder", "uri", ev.URI, "err", err)
			full = err
		case err != nil:
			return fmt.Errorf("journal %s: %w", ev.URI, err)
		default:
			before, kept, size = "sha256:"+hx, true, n
			p.pin, p.dirSync = hx, linked
			p.lazy = j.batched.Load()
		}
	}
	j.mu.Lock()
	p.rec = j.newRecordLocked(ev)
	j.mu.Unlock()
	p.rec.Before, p.rec.Kept = before, kept
	p.rec.Mode, p.rec.Size, p.rec.stamp = mode&0o7777, size, stamp
	p.rec.Owner = owner
	if err := j.commit(p); err != nil || full == nil {
		return err
	}
	return fmt.Errorf("journal %s: recorded as not kept: %w", ev.URI, full)
}

// Created journals that ev.URI did not exist before ev (a create, or a
// revert that recreated a deleted file): reverting it removes the file.
//
// Created returns once the record is written, before its fsync, which
// follows within 100 ms or with the next Save or Close: an
// untar through the mount must not pay an fsync per file. A power cut in
// that window can lose the record (the file is then not removed by a
// revert); no content is ever at stake. A killed daemon loses nothing.
func (j *Journal) Created(ev Event) error {
	if err := checkEvent(ev); err != nil {
		return err
	}
	if ev.Op == "" {
		ev.Op = "create"
	}
	if j.isClosed() {
		return ErrClosed
	}
	j.mu.Lock()
	r := j.newRecordLocked(ev)
	j.mu.Unlock()
	r.Before, r.Kept = Absent, true
	return j.commit(&pending{rec: r, lazy: true})
}

// Renamed journals that fromURI was renamed onto ev.URI. When the target
// existed, the caller has already called Save for it (op "rename") from the
// same process; Renamed then adds fromURI to that record instead of writing
// a second one. Otherwise the target did not exist before and Renamed
// records it as created (Before is Absent), so reverting removes it.
// Like Created, it returns before its fsync.
func (j *Journal) Renamed(ev Event, fromURI string) error {
	if err := checkEvent(ev); err != nil {
		return err
	}
	if ev.Op == "" {
		ev.Op = "rename"
	}
	ev.From = fromURI
	if j.isClosed() {
		return ErrClosed
	}
	j.mu.Lock()
	last := j.lastLocked(ev.URI)
	if last != nil && last.Op == ev.Op && last.PID == ev.PID && last.UID == ev.UID && last.Before != Absent &&
		(last.From == "" || last.From == fromURI) {
		j.mu.Unlock()
		if last.From == fromURI {
			return nil
		}
		return j.commit(&pending{from: &fromLine{FromOf: last.ID, FromURI: fromURI}, lazy: true})
	}
	r := j.newRecordLocked(ev)
	j.mu.Unlock()
	r.Before, r.Kept = Absent, true
	return j.commit(&pending{rec: r, lazy: true})
}

func checkEvent(ev Event) error {
	if !isURI(ev.URI) {
		return fmt.Errorf("journal: %q is not a uri (<slug>://<path>)", ev.URI)
	}
	if ev.From != "" && !isURI(ev.From) {
		return fmt.Errorf("journal: %q is not a uri (<slug>://<path>)", ev.From)
	}
	return nil
}

func isURI(s string) bool {
	slug, _, ok := strings.Cut(s, "://")
	return ok && slug != ""
}

// store copies r into objects/ and returns its hex digest, its length, and
// whether a new object was linked (objects/ then needs an fsync). The
// object is pinned against eviction until the caller commits its record.
func (j *Journal) store(r io.Reader) (hx string, n int64, linked bool, err error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	lr := &io.LimitedReader{R: r, N: j.maxFile.Load() + 1}
	m, err := io.ReadFull(lr, buf)
	whole := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	if err != nil && !whole {
		return "", 0, false, fmt.Errorf("read the content to save: %w", err)
	}
	if whole {
		return j.storeWhole(buf[:m])
	}
	return j.storeStream(io.MultiReader(bytes.NewReader(buf[:m]), lr), nil, "")
}

// storeWhole is store for content already in memory.
func (j *Journal) storeWhole(data []byte) (hx string, n int64, linked bool, err error) {
	if int64(len(data)) > j.maxFile.Load() {
		return "", int64(len(data)), false, errTooLarge
	}
	sum := sha256.Sum256(data)
	return j.storeHashed(data, hex.EncodeToString(sum[:]))
}

// storeHashed is storeWhole for data whose digest is hx.
func (j *Journal) storeHashed(data []byte, hx string) (_ string, n int64, linked bool, err error) {
	// Already stored: reuse it (re-hashed, or proved unchanged since)
	// without writing anything.
	if ok, err := j.reuse(hx, int64(len(data))); ok || err != nil {
		return hx, int64(len(data)), false, err
	}
	return j.storeStream(nil, data, hx)
}

// storeStream writes r (or data, when r is nil) to a temporary copy and
// publishes it under hx, hashing it on the way when hx is "".
func (j *Journal) storeStream(r io.Reader, data []byte, hx string) (_ string, n int64, linked bool, err error) {
	var h hash.Hash
	if hx == "" {
		h = sha256.New()
	}
	tmp, n, err := j.writeTemp(r, data, h, j.maxFile.Load()+1)
	if err != nil {
		return "", n, false, err
	}
	defer func() {
		if tmp != "" {
			j.step("remove tmp")
			if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				j.log.Warn("journal: could not remove a copy", "name", tmp, "err", rerr)
			}
		}
	}()
	if n > j.maxFile.Load() {
		return "", n, false, errTooLarge
	}
	if h != nil {
		hx = hex.EncodeToString(h.Sum(nil))
	}
	obj := filepath.Join(j.objDir, hx)
	return j.publishAs(hx, n, "link", func() error { return os.Link(tmp, obj) })
}

// publishAs publishes n bytes under objects/hx with link, which must fail
// with EEXIST rather than replace anything: an object the journal knows
// is pinned and checked instead (verifyPinned), a file it does not know
// holding the name is adopted only if it holds exactly these bytes
// (reuseUnknown). linked reports that link made the object.
func (j *Journal) publishAs(hx string, n int64, step string, link func() error) (_ string, _ int64, linked bool, err error) {
	j.mu.Lock()
	if o := j.objects[hx]; o != nil {
		// Published by another record meanwhile.
		o.pins++
		j.mu.Unlock()
		return hx, n, false, j.verifyPinned(hx, n)
	}
	j.step(step)
	err = link()
	if err == nil {
		j.objects[hx] = &object{size: n, pins: 1}
		j.total += n
		j.mu.Unlock()
		return hx, n, true, nil
	}
	j.mu.Unlock()
	if !errors.Is(err, os.ErrExist) {
		return "", n, false, fmt.Errorf("publish %s: %w", hx, err)
	}
	ok, err := j.reuseUnknown(hx, n)
	if err != nil {
		return "", n, false, err
	}
	if !ok {
		return "", n, false, fmt.Errorf("objects/%s: %w", hx, ErrConflict)
	}
	return hx, n, false, nil
}

// reuse pins a known object and makes sure it still holds its bytes
// (verifyPinned). It reports false if the journal has no object hx.
func (j *Journal) reuse(hx string, n int64) (bool, error) {
	j.mu.Lock()
	o := j.objects[hx]
	if o == nil {
		j.mu.Unlock()
		return false, nil
	}
	o.pins++
	j.mu.Unlock()
	return true, j.verifyPinned(hx, n)
}

// verifyPinned makes sure objects/hx holds the n bytes its name says, and
// unpins it when it does not. It re-hashes the object unless a re-hash
// already proved it and the file has not changed since (unchangedSince).
func (j *Journal) verifyPinned(hx string, n int64) error {
	if j.unchangedSince(hx, n) {
		return nil
	}
	key, settled, err := j.rehash(hx, n)
	j.mu.Lock()
	o := j.objects[hx] // pinned: not evicted
	if err != nil {
		o.pins--
		o.proved = false
	} else if settled {
		o.key, o.proved = key, true
	}
	j.mu.Unlock()
	return err
}

// fileKey is the state of an object file as stat(2) shows it. The journal
// directory is private (0700) and write-once, so only root can change an
// object; and any change to its bytes (a write, a truncate, a copy over
// it) or to the file itself (replaced by another: another inode, or the
// same inode number reused, which takes a new ctime) sets its ctime to the
// time of the change, which no caller can choose. An object whose key is
// the one a re-hash proved therefore holds the bytes that re-hash read.
type fileKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func keyOf(st *unix.Stat_t) fileKey {
	return fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// settleTime is how old an object's ctime must be when a re-hash reads it
// for the verdict to be remembered: at least the coarsest timestamp grain
// of a Linux filesystem that can hold the journal (one second: ext4 with
// 128-byte inodes; ext4 otherwise, xfs, btrfs and tmpfs stamp with the
// kernel's coarse clock, a few milliseconds). A change after the re-hash
// then cannot get the ctime the re-hash saw: that ctime lies a whole grain
// before it.
var settleTime = time.Second

// unchangedSince reports whether objects/hx is, by its stat(2), the very
// file a re-hash proved to hold hx (see fileKey): then it is reused
// without reading it again. Reading it for a revert (Plan, Content)
// always re-hashes. One fstatat(2), against a read and a hash.
func (j *Journal) unchangedSince(hx string, n int64) bool {
	var st unix.Stat_t
	at := j.locate(hx)
	if err := unix.Fstatat(at.dirFD, at.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	o := j.objects[hx]
	return o != nil && o.proved && (o.pack != nil || st.Size == n) && o.key == keyOf(&st)
}

// location is where an object's bytes are: name in the folder dirFD, from
// off.
type location struct {
	hx     string
	dirFD  int
	name   string
	off    int64
	packed bool
}

// what names the location in messages (built only for one: locate is on
// the path of every Keep of stored content).
func (l location) what() string {
	if l.packed {
		return "object " + l.hx + " in packs/" + l.name
	}
	return "objects/" + l.hx
}

// locate says where the bytes of object hx are: in its pack, when the
// journal knows it in one, or else objects/<hx>.
func (j *Journal) locate(hx string) location {
	j.mu.Lock()
	defer j.mu.Unlock()
	if o := j.objects[hx]; o != nil && o.pack != nil {
		return location{hx, j.packDirFD, o.pack.name, o.off, true}
	}
	return location{hx, j.objDirFD, hx, 0, false}
}

// reuseUnknown handles an objects/hx the journal has no entry for: when its
// bytes hash to hx it becomes a known, pinned object.
func (j *Journal) reuseUnknown(hx string, n int64) (bool, error) {
	if err := j.verify(hx, n); err != nil {
		if errors.Is(err, ErrConflict) {
			return false, nil
		}
		return false, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if o := j.objects[hx]; o != nil {
		o.pins++
		return true, nil
	}
	j.objects[hx] = &object{size: n, pins: 1}
	j.total += n
	return true, nil
}

// verify re-hashes objects/hx. Different bytes are ErrConflict.
func (j *Journal) verify(hx string, n int64) error {
	_, _, err := j.rehash(hx, n)
	return err
}

// rehash reads objects/hx and checks that it holds n bytes whose SHA-256
// is hx; different bytes are ErrConflict. It also returns the file's key
// and whether the verdict may be remembered under it: the file did not
// change while it was read and its ctime was older than settleTime
// already when the read began.
func (j *Journal) rehash(hx string, n int64) (fileKey, bool, error) {
	j.step("re-hash")
	began := time.Now()
	at := j.locate(hx)
	// A raw descriptor: os.Open would try (and fail) to add a regular file
	// to the poller.
	fd, err := unix.Openat(at.dirFD, at.name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fileKey{}, false, fmt.Errorf("re-hash %s: %w", at.what(), &os.PathError{Op: "open", Path: at.what(), Err: err})
	}
	defer unix.Close(fd)
	var pre, post unix.Stat_t
	if err := unix.Fstat(fd, &pre); err != nil {
		return fileKey{}, false, fmt.Errorf("re-hash %s: %w", at.what(), err)
	}
	// An object file is read to its end (and must end after n bytes); an
	// object in a pack is its n bytes at its offset.
	limit := n + 1
	if at.packed {
		limit = n
	}
	var m int64
	var sum []byte
	if limit <= hashBytes {
		// Small: read it whole, hash once.
		bp := getBuf(int(limit))
		defer putBuf(bp)
		buf := *bp
		k, err := readFull(fd, buf[:limit], at.off)
		if err != nil {
			return fileKey{}, false, fmt.Errorf("re-hash %s: %w", at.what(), err)
		}
		s := sha256.Sum256(buf[:k])
		m, sum = int64(k), s[:]
	} else {
		h := sha256.New()
		bp := bufPool.Get().(*[]byte)
		defer bufPool.Put(bp)
		buf := *bp
		for m < limit {
			k, err := unix.Pread(fd, buf[:min(int64(len(buf)), limit-m)], at.off+m)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return fileKey{}, false, fmt.Errorf("re-hash %s: %w", at.what(), err)
			}
			if k == 0 {
				break
			}
			h.Write(buf[:k])
			m += int64(k)
		}
		sum = h.Sum(nil)
	}
	if m != n || hex.EncodeToString(sum) != hx {
		return fileKey{}, false, fmt.Errorf("%s holds other bytes than its name says: %w", at.what(), ErrConflict)
	}
	if err := unix.Fstat(fd, &post); err != nil {
		return fileKey{}, false, nil
	}
	key := keyOf(&pre)
	settled := key == keyOf(&post) && pre.Mode&unix.S_IFMT == unix.S_IFREG &&
		time.Unix(pre.Ctim.Unix()).Add(settleTime).Before(began)
	return key, settled, nil
}

// readFull preads into buf from off until buf is full or the file ends,
// and returns how many bytes it read.
func readFull(fd int, buf []byte, off int64) (int, error) {
	m := 0
	for m < len(buf) {
		k, err := unix.Pread(fd, buf[m:], off+int64(m))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return m, err
		}
		if k == 0 {
			break
		}
		m += k
	}
	return m, nil
}

// Buffers for reading small files whole, by size; larger ones use bufPool.
var (
	pool8k  = sync.Pool{New: func() any { b := make([]byte, 8<<10); return &b }}
	pool64k = sync.Pool{New: func() any { b := make([]byte, hashBytes); return &b }}
)

// kept8k holds 8 KiB buffers given back, in front of pool8k: a sync.Pool
// is emptied by every other garbage collection, and during a burst of
// small overwrites about one buffer in six was then allocated afresh —
// zeroed and faulted in, on the change's own path. Up to keep8kMax
// buffers (2 MiB, about a published batch's worth) stay here for good.
const keep8kMax = 256

var kept8k = make(chan *[]byte, keep8kMax)

// getBuf returns a pooled buffer of at least n bytes, n at most
// smallBytes+1. Give it back with putBuf.
func getBuf(n int) *[]byte {
	switch {
	case n <= 8<<10:
		select {
		case bp := <-kept8k:
			return bp
		default:
		}
		return pool8k.Get().(*[]byte)
	case n <= hashBytes:
		return pool64k.Get().(*[]byte)
	default:
		return bufPool.Get().(*[]byte)
	}
}

func putBuf(bp *[]byte) {
	*bp = (*bp)[:cap(*bp)]
	switch cap(*bp) {
	case 8 << 10:
		select {
		case kept8k <- bp:
		default:
			pool8k.Put(bp)
		}
	case hashBytes:
		pool64k.Put(bp)
	case smallBytes + 1:
		bufPool.Put(bp)
	}
}

// writeTemp copies r (or data, when r is nil) into a new tmp- file
// opened with O_EXCL, hashing it into h unless h is nil, and fsyncs it. It
// stops after limit bytes (one past MaxFileBytes for an object). Raw descriptors: os.OpenFile would try
// (and fail) to add the file to the poller, and io.Copy to it would
// allocate a buffer.
func (j *Journal) writeTemp(r io.Reader, data []byte, h hash.Hash, limit int64) (string, int64, error) {
	fd := -1
	var name string
	for range 10 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		name = filepath.Join(j.dir, tmpPrefix+hex.EncodeToString(b[:]))
		if j.tempName != nil {
			name = j.tempName(name)
		}
		var err error
		j.step("create tmp O_EXCL")
		fd, err = unix.Open(name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
		if err == nil {
			break
		}
		fd = -1
		if !errors.Is(err, unix.EEXIST) {
			return "", 0, fmt.Errorf("create a copy: %w", &os.PathError{Op: "open", Path: name, Err: err})
		}
	}
	if fd < 0 {
		return "", 0, errors.New("create a copy: every temporary name was taken")
	}
	var w io.Writer = fdWriter(fd)
	if h != nil {
		w = io.MultiWriter(w, h)
	}
	var n int64
	var err error
	if r == nil {
		var k int
		k, err = w.Write(data[:min(int64(len(data)), limit)])
		n = int64(k)
	} else {
		bp := bufPool.Get().(*[]byte)
		// Hide io.LimitedReader from io.Copy's WriterTo and ReaderFrom
		// paths: the pooled buffer does the copying.
		n, err = io.CopyBuffer(w, struct{ io.Reader }{io.LimitReader(r, limit)}, *bp)
		bufPool.Put(bp)
	}
	if err == nil {
		j.step("fsync tmp")
		err = ignoringEINTR(func() error { return unix.Fsync(fd) })
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlink(name)
		return "", n, fmt.Errorf("write a copy: %w", err)
	}
	return name, n, nil
}

// fdWriter writes to a raw descriptor.
type fdWriter int

func (w fdWriter) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := unix.Write(int(w), b[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// digestHex returns the hex of a "sha256:<hex>" Before value.
func digestHex(before string) (string, bool) {
	h, ok := strings.CutPrefix(before, "sha256:")
	return h, ok && isHex(h)
}

func isHex(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
