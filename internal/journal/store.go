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
	"syscall"
)

// smallBytes is how much of a file Save reads into memory before it
// decides whether the content is already stored: a file that fits and is
// already in the journal costs a re-hash of the object and no write.
const smallBytes = 1 << 20

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
	return j.save(ev, mode, size, "", read)
}

func (j *Journal) save(ev Event, mode uint32, size int64, stamp string, read func() (io.ReadCloser, error)) error {
	if err := checkEvent(ev); err != nil {
		return err
	}
	if j.isClosed() {
		return ErrClosed
	}
	p := &pending{}
	before, kept := Unknown, false
	if size <= j.maxFile {
		rc, err := read()
		if err != nil {
			return fmt.Errorf("journal %s: read the content to save: %w", ev.URI, err)
		}
		hx, n, linked, err := j.store(rc)
		rc.Close()
		switch {
		case errors.Is(err, errTooLarge):
			j.log.Info("journal: not kept, file grew past the per-file limit", "uri", ev.URI, "limit", j.maxFile)
			size = max(size, n)
		case err != nil:
			return fmt.Errorf("journal %s: %w", ev.URI, err)
		default:
			before, kept, size = "sha256:"+hx, true, n
			p.pin, p.dirSync = hx, linked
			p.lazy = j.batched
		}
	}
	j.mu.Lock()
	p.rec = j.newRecordLocked(ev)
	j.mu.Unlock()
	p.rec.Before, p.rec.Kept = before, kept
	p.rec.Mode, p.rec.Size, p.rec.stamp = mode&0o7777, size, stamp
	return j.commit(p)
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
	lr := &io.LimitedReader{R: r, N: j.maxFile + 1}
	m, err := io.ReadFull(lr, buf)
	whole := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	if err != nil && !whole {
		return "", 0, false, fmt.Errorf("read the content to save: %w", err)
	}
	if whole {
		return j.storeWhole(buf[:m])
	}
	return j.storeStream(io.MultiReader(bytes.NewReader(buf[:m]), lr), "")
}

// storeWhole is store for content already in memory.
func (j *Journal) storeWhole(data []byte) (hx string, n int64, linked bool, err error) {
	if int64(len(data)) > j.maxFile {
		return "", int64(len(data)), false, errTooLarge
	}
	sum := sha256.Sum256(data)
	hx = hex.EncodeToString(sum[:])
	// Already stored: re-hash it and reuse it without writing anything.
	if ok, err := j.reuse(hx, int64(len(data))); ok || err != nil {
		return hx, int64(len(data)), false, err
	}
	return j.storeStream(bytes.NewReader(data), hx)
}

// storeStream writes r to a temporary copy and publishes it under hx,
// hashing it on the way when hx is "".
func (j *Journal) storeStream(r io.Reader, hx string) (_ string, n int64, linked bool, err error) {
	var h hash.Hash
	if hx == "" {
		h = sha256.New()
	}
	tmp, n, err := j.writeTemp(r, h)
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
	if n > j.maxFile {
		return "", n, false, errTooLarge
	}
	if h != nil {
		hx = hex.EncodeToString(h.Sum(nil))
	}
	obj := filepath.Join(j.objDir, hx)

	j.mu.Lock()
	if o := j.objects[hx]; o != nil {
		o.pins++
		j.mu.Unlock()
		return hx, n, false, j.verifyPinned(hx, n)
	}
	j.step("link")
	err = os.Link(tmp, obj)
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
	// A file the journal did not know of holds the name: adopt it only if
	// it holds exactly these bytes; never replace it.
	ok, err := j.reuseUnknown(hx, n)
	if err != nil {
		return "", n, false, err
	}
	if !ok {
		return "", n, false, fmt.Errorf("objects/%s: %w", hx, ErrConflict)
	}
	return hx, n, false, nil
}

// reuse pins and re-hashes a known object. It reports false if the journal
// has no object hx.
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

// verifyPinned re-hashes objects/hx and unpins it when it does not match.
func (j *Journal) verifyPinned(hx string, n int64) error {
	err := j.verify(hx, n)
	if err != nil {
		j.mu.Lock()
		j.objects[hx].pins--
		j.mu.Unlock()
	}
	return err
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
	f, err := os.Open(filepath.Join(j.objDir, hx))
	if err != nil {
		return fmt.Errorf("re-hash objects/%s: %w", hx, err)
	}
	defer f.Close()
	h := sha256.New()
	var buf []byte
	if n < 64<<10 {
		buf = make([]byte, n+1) // a pooled 1 MiB buffer may have to be made and cleared
	} else {
		bp := bufPool.Get().(*[]byte)
		defer bufPool.Put(bp)
		buf = *bp
	}
	// Hide (*os.File).WriteTo, which would allocate its own buffer.
	m, err := io.CopyBuffer(h, struct{ io.Reader }{f}, buf)
	if err != nil {
		return fmt.Errorf("re-hash objects/%s: %w", hx, err)
	}
	if m != n || hex.EncodeToString(h.Sum(nil)) != hx {
		return fmt.Errorf("objects/%s holds other bytes than its name says: %w", hx, ErrConflict)
	}
	return nil
}

// writeTemp copies r into a new tmp- file opened with O_EXCL, hashing it
// into h unless h is nil, and fsyncs it. It stops one byte past
// MaxFileBytes.
func (j *Journal) writeTemp(r io.Reader, h hash.Hash) (string, int64, error) {
	var f *os.File
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
		f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) {
			return "", 0, fmt.Errorf("create a copy: %w", err)
		}
		f = nil
	}
	if f == nil {
		return "", 0, errors.New("create a copy: every temporary name was taken")
	}
	var w io.Writer = f
	if h != nil {
		w = io.MultiWriter(f, h)
	}
	n, err := io.Copy(w, io.LimitReader(r, j.maxFile+1))
	if err == nil {
		j.step("fsync tmp")
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", n, fmt.Errorf("write a copy: %w", err)
	}
	return name, n, nil
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
