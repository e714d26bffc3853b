package journal

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	iofs "io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Plan is what reverting a uri restores: the state before Record.
type Plan struct {
	URI string
	// Absent means the uri did not exist before Record: remove it.
	Absent bool
	// Digest is the "sha256:<hex>" content to write (read it with
	// Content(Record)), with permission bits Mode and length Size.
	Digest string
	Mode   uint32
	Size   int64
	Record Record
}

// History returns the records of uriOrPrefix, newest first: of one uri, or
// of every uri under a folder when it ends in "/" ("data://dir/", or
// "data://" for a whole source). A rename record counts for both of its
// uris. Records are shown only when canRead allows their uri; the old name
// of a rename the caller may not read is blanked. A nil canRead allows all.
func (j *Journal) History(uriOrPrefix string, canRead func(uri string) bool) ([]Record, error) {
	if !isURI(uriOrPrefix) {
		return nil, fmt.Errorf("journal: %q is not a uri (<slug>://<path>)", uriOrPrefix)
	}
	if canRead == nil {
		canRead = func(string) bool { return true }
	}
	match := func(u string) bool { return u == uriOrPrefix }
	if strings.HasSuffix(uriOrPrefix, "/") {
		match = func(u string) bool { return strings.HasPrefix(u, uriOrPrefix) }
	}
	var out []Record
	for {
		var wait []chan struct{}
		out = out[:0]
		j.mu.Lock()
		for i := len(j.recs) - 1; i >= 0; i-- {
			r := j.recs[i]
			if !match(r.URI) && (r.From == "" || !match(r.From)) {
				continue
			}
			if r.pend != nil {
				wait = append(wait, r.pend)
			}
			out = append(out, *r)
		}
		j.mu.Unlock()
		if len(wait) == 0 {
			break
		}
		j.waitFor(wait) // records still being published (Keep)
	}
	// canRead may consult policy: call it without holding mu.
	kept := out[:0]
	for _, r := range out {
		if !canRead(r.URI) {
			continue
		}
		if r.From != "" && !canRead(r.From) {
			r.From = ""
		}
		kept = append(kept, j.shown(r))
	}
	return kept, nil
}

// Content opens the content saved by rec. It re-hashes while reading: when
// the bytes do not match the digest, the read that reaches the end returns
// an error wrapping ErrCorrupt instead of io.EOF, so a caller must not use
// the bytes until it has read to io.EOF. The entry is never repaired.
func (j *Journal) Content(rec Record) (io.ReadCloser, error) {
	if !j.using() {
		return nil, ErrClosed
	}
	defer j.amu.RUnlock()
	r, cur := j.settled(func() *Record { return j.byID(storedID(j.ids, rec.ID)) })
	if r == nil {
		return nil, fmt.Errorf("journal: record %q: %w", rec.ID, ErrNoRecord)
	}
	cur = j.shown(cur)
	if cur.Before == Absent {
		return nil, fmt.Errorf("journal: %s did not exist before record %s, so it has no saved content: %w", cur.URI, cur.ID, iofs.ErrNotExist)
	}
	hx, ok := digestHex(cur.Before)
	if !ok || !cur.Kept {
		return nil, j.notKept(cur)
	}
	at := j.locate(hx)
	fd, err := unix.Openat(at.dirFD, at.name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("journal: the saved copy of %s from before record %s cannot be opened: %w", cur.URI, cur.ID, &os.PathError{Op: "open", Path: at.what(), Err: err})
	}
	f := os.NewFile(uintptr(fd), at.what())
	var src io.Reader = f
	if at.packed {
		src = io.NewSectionReader(f, at.off, cur.Size)
	}
	return &verifyReader{r: src, f: f, h: sha256.New(), rec: cur, hex: hx}, nil
}

// Plan says how to revert uri to its state before record id, or before the
// newest record of uri when id is "". The caller applies it through the
// confined root and journals that change itself (Save or Created), so the
// revert can be reverted. A plan to restore content has re-hashed it: a
// corrupt entry is refused here with ErrCorrupt, before anything changes.
func (j *Journal) Plan(uri, id string) (Plan, error) {
	if !isURI(uri) {
		return Plan{}, fmt.Errorf("journal: %q is not a uri (<slug>://<path>)", uri)
	}
	if !j.using() {
		return Plan{}, ErrClosed
	}
	defer j.amu.RUnlock()
	r, rec := j.settled(func() *Record {
		if id == "" {
			return j.lastLocked(uri)
		}
		return j.byID(storedID(j.ids, id))
	})
	rec = j.shown(rec)
	switch {
	case r == nil && id == "":
		return Plan{}, fmt.Errorf("journal: %s has no history: %w", uri, ErrNoRecord)
	case r == nil:
		return Plan{}, fmt.Errorf("journal: no record %q: %w", id, ErrNoRecord)
	case rec.URI != uri && rec.From == uri:
		return Plan{}, fmt.Errorf("journal: record %s renamed %s to %s; revert %s instead: %w", rec.ID, uri, rec.URI, rec.URI, ErrNoRecord)
	case rec.URI != uri:
		return Plan{}, fmt.Errorf("journal: record %s is about %s, not %s: %w", rec.ID, rec.URI, uri, ErrNoRecord)
	}
	if rec.Before == Absent {
		return Plan{URI: uri, Absent: true, Record: rec}, nil
	}
	hx, ok := digestHex(rec.Before)
	if !ok || !rec.Kept {
		return Plan{}, j.notKept(rec)
	}
	if err := j.verify(hx, rec.Size); errors.Is(err, ErrConflict) {
		return Plan{}, corruptErr(rec)
	} else if err != nil {
		return Plan{}, fmt.Errorf("journal: the saved copy of %s from before record %s cannot be read: %w", uri, rec.ID, err)
	}
	return Plan{URI: uri, Digest: rec.Before, Mode: rec.Mode, Size: rec.Size, Record: rec}, nil
}

// settled returns the record find picks (under mu) and a copy of it, once
// it is no longer being published.
func (j *Journal) settled(find func() *Record) (*Record, Record) {
	for {
		j.mu.Lock()
		r := find()
		if r == nil {
			j.mu.Unlock()
			return nil, Record{}
		}
		c, cur := r.pend, *r
		j.mu.Unlock()
		if c == nil {
			return r, cur
		}
		j.waitFor([]chan struct{}{c})
	}
}

func (j *Journal) notKept(r Record) error {
	why := "evicted by the journal's size limit"
	switch {
	case r.Before == Unknown && r.Size > j.maxFile.Load():
		why = "larger than the per-file limit"
	case r.Before == Unknown:
		// Keep could not stage or store it: no room under state_dir, or
		// the file could not be read; the daemon logged which.
		why = "the journal could not store it: no space under state_dir, or the file was unreadable, as the daemon's log says"
	}
	return &sentence{fmt.Sprintf("journal: the content of %s from before record %s was not kept (%s)", r.URI, r.ID, why), ErrNotKept}
}

func corruptErr(r Record) error {
	return &sentence{fmt.Sprintf("journal: the saved copy of %s from before record %s is corrupt (its bytes no longer match %s) and was left as it is", r.URI, r.ID, r.Before), ErrCorrupt}
}

// sentence is an error that reads as one sentence and wraps a sentinel
// without repeating its text.
type sentence struct {
	msg  string
	kind error
}

func (e *sentence) Error() string { return e.msg }
func (e *sentence) Unwrap() error { return e.kind }

// verifyReader hashes what it reads and turns io.EOF into ErrCorrupt when
// the bytes do not match.
type verifyReader struct {
	r   io.Reader // f, or its section that holds the object
	f   *os.File
	h   hash.Hash
	rec Record
	hex string
	n   int64
}

func (v *verifyReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if err == io.EOF && hex.EncodeToString(v.h.Sum(nil)) != v.hex {
		return n, v.corrupt()
	}
	if err == nil && v.n > v.rec.Size {
		return n, v.corrupt()
	}
	return n, err
}

func (v *verifyReader) corrupt() error { return corruptErr(v.rec) }

func (v *verifyReader) Close() error { return v.f.Close() }
