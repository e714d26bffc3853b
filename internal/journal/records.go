package journal

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/neuralis/neuralisfs/internal/rawname"
)

// evictedLine records that an object was removed by retention. Every record
// written before it that uses the digest is not kept any more.
type evictedLine struct {
	Evicted string    `json:"evicted"` // "sha256:<hex>"
	At      time.Time `json:"at"`
}

// fromLine adds the old name to a rename record written by Save before the
// rename happened (see Renamed).
type fromLine struct {
	FromOf  string `json:"from_of"` // record id
	FromURI string `json:"from_uri"`
}

// probe tells the kinds of line apart.
type probe struct {
	Evicted string `json:"evicted"`
	FromOf  string `json:"from_of"`
	Staged  string `json:"staged"`
	Dropped uint64 `json:"dropped_through"`
}

// pending is one line waiting for the next group commit.
type pending struct {
	line    []byte
	rec     *Record // a new record, or nil
	from    *fromLine
	pin     string // object to unpin once committed
	dirSync bool   // a new object was linked: fsync objects/ first
	lazy    bool   // may return before the fsync (see flushDelay)
	// settle is a staged record this line completes with final's Before,
	// Kept and Size (see publish).
	settle *Record
	final  Record

	done bool // set under wmu by the commit that wrote it
	err  error
}

// replay reads records.jsonl into memory. A last line without its newline
// is a write torn by a crash: it is ignored and cut off so the next append
// starts on a clean line. Other unreadable lines are skipped with a warning.
func (j *Journal) replay() error {
	path := filepath.Join(j.dir, recordsName)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	// A daemon that stopped without closing the journal leaves the rest
	// of its last append window (see tailFile) as NUL bytes.
	content := bytes.TrimRight(data, "\x00")
	good := bytes.LastIndexByte(content, '\n') + 1
	if good < len(content) {
		j.log.Warn("journal: ignoring a torn last record line", "file", path, "bytes", len(content)-good)
	}
	if good < len(data) {
		if err := os.Truncate(path, int64(good)); err != nil {
			return fmt.Errorf("journal: cut torn line: %w", err)
		}
		data = data[:good]
	}
	// Records by content digest while replaying, so an "evicted" line
	// costs the records it touches, not a scan of every record (which
	// made start-up quadratic in the journal's history).
	j.replayBefore = map[string][]*Record{}
	defer func() { j.replayBefore, j.names = nil, nil }()
	for n, ln := range bytes.Split(data, []byte{'\n'}) {
		if len(ln) == 0 {
			continue
		}
		j.lines++
		if err := j.replayLine(ln); err != nil {
			j.log.Warn("journal: skipping an unreadable record line", "file", path, "line", n+1, "err", err)
		}
	}
	return nil
}

func (j *Journal) replayLine(ln []byte) error {
	var p probe
	if err := json.Unmarshal(ln, &p); err != nil {
		return err
	}
	switch {
	case p.Dropped != 0:
		var d droppedLine
		if err := json.Unmarshal(ln, &d); err != nil {
			return err
		}
		j.applyDropLocked(d)
	case p.Staged != "":
		var s stagedLine
		if err := json.Unmarshal(ln, &s); err != nil {
			return err
		}
		if s.Record == nil {
			return errors.New("staged line without a record")
		}
		r := s.Record
		seq, err := parseID(r.ID)
		if err != nil {
			return err
		}
		if j.byID(r.ID) != nil {
			return fmt.Errorf("duplicate record id %q", r.ID)
		}
		r.seq, r.staged, r.linked = seq, s.Staged, s.Linked
		r.Principal, r.Op = j.intern(r.Principal), j.intern(r.Op)
		if s.Staged == logStaged {
			r.logOff, r.logCRC = s.Offset, s.CRC
			j.slSeen = max(j.slSeen, s.Offset+r.Size)
		}
		r.Before, r.Kept = Unknown, false
		r.pend = make(chan struct{})
		j.seq = max(j.seq, seq)
		j.insert(r)
	case p.Evicted != "":
		if j.replayBefore == nil {
			for _, r := range j.recs {
				if r.Before == p.Evicted {
					r.Kept = false
				}
			}
			break
		}
		for _, r := range j.replayBefore[p.Evicted] {
			r.Kept = false
		}
	case p.FromOf != "":
		var f fromLine
		if err := json.Unmarshal(ln, &f); err != nil {
			return err
		}
		if r := j.byID(f.FromOf); r != nil {
			r.From = rawname.Dec(f.FromURI)
		}
	default:
		r := new(Record)
		if err := json.Unmarshal(ln, r); err != nil {
			return err
		}
		seq, err := parseID(r.ID)
		if err != nil {
			return err
		}
		if old := j.byID(r.ID); old != nil && old.pend != nil {
			// The record line of a staged record: it is published.
			old.Before, old.Kept, old.Size, old.Mode = r.Before, r.Kept, r.Size, r.Mode
			if r.Owner != nil {
				old.Owner = r.Owner
			}
			if j.replayBefore != nil && old.Before != "" {
				j.replayBefore[old.Before] = append(j.replayBefore[old.Before], old)
			}
			if r.From != "" {
				old.From = r.From
			}
			close(old.pend)
			old.pend = nil
			return nil
		}
		if j.byID(r.ID) != nil {
			return fmt.Errorf("duplicate record id %q", r.ID)
		}
		r.seq = seq
		r.Principal, r.Op = j.intern(r.Principal), j.intern(r.Op)
		j.seq = max(j.seq, seq)
		j.insert(r)
	}
	return nil
}

// newRecord fills in the id and time of a record from ev. Holds mu.
func (j *Journal) newRecordLocked(ev Event) *Record {
	j.seq++
	// The suffix only tells apart records of journals that were reset;
	// it needs no cryptographic randomness (and crypto/rand costs a
	// syscall on every change).
	r := rand.Uint32()
	b := [2]byte{byte(r), byte(r >> 8)}
	return &Record{
		ID:        strconv.FormatUint(j.seq, 10) + "-" + hex.EncodeToString(b[:]),
		Time:      j.now().UTC(),
		Principal: ev.Principal,
		UID:       ev.UID,
		PID:       ev.PID,
		Op:        ev.Op,
		URI:       ev.URI,
		From:      ev.From,
		seq:       j.seq,
	}
}

// intern returns s, or an equal string replay read before: the principals
// and ops of a journal are few, and each line would have its own copy.
func (j *Journal) intern(s string) string {
	if j.names == nil {
		j.names = map[string]string{}
	}
	if t, ok := j.names[s]; ok {
		return t
	}
	if len(j.names) < 1024 {
		j.names[s] = s
	}
	return s
}

// parseID returns the sequence number at the front of a record id.
func parseID(id string) (uint64, error) {
	s, _, ok := strings.Cut(id, "-")
	if !ok {
		return 0, fmt.Errorf("bad record id %q", id)
	}
	return strconv.ParseUint(s, 10, 64)
}

// insert adds r to recs in seq order. Holds mu (or runs before Open returns).
func (j *Journal) insert(r *Record) {
	i := len(j.recs)
	for i > 0 && j.recs[i-1].seq > r.seq {
		i--
	}
	j.recs = append(j.recs, nil)
	copy(j.recs[i+1:], j.recs[i:])
	j.recs[i] = r
	u := j.byURI[r.URI]
	if len(u) > 0 {
		r.URI = u[0].URI // one copy of the uri for all its records
	}
	i = len(u)
	for i > 0 && u[i-1].seq > r.seq {
		i--
	}
	if i == len(u) && i > 0 {
		// Only the newest record of a uri needs its stamp (sameAsLast).
		u[i-1].stamp = ""
	}
	j.byURI[r.URI] = slices.Insert(u, i, r)
	if j.replayBefore != nil && r.Before != "" {
		j.replayBefore[r.Before] = append(j.replayBefore[r.Before], r)
	}
}

// byID returns the record whose id is id, or nil. Holds mu (or runs
// before Open returns). The id starts with the record's seq, and recs is
// in seq order: a binary search, where a map by id cost every record
// about 50 bytes more.
func (j *Journal) byID(id string) *Record {
	seq, err := parseID(id)
	if err != nil {
		return nil
	}
	i, _ := slices.BinarySearchFunc(j.recs, seq, func(r *Record, seq uint64) int { return cmp.Compare(r.seq, seq) })
	for ; i < len(j.recs) && j.recs[i].seq == seq; i++ {
		if j.recs[i].ID == id {
			return j.recs[i]
		}
	}
	return nil
}

// lastLocked returns the newest record of uri, or nil. Holds mu.
func (j *Journal) lastLocked(uri string) *Record {
	if u := j.byURI[uri]; len(u) > 0 {
		return u[len(u)-1]
	}
	return nil
}

// commit appends p to records.jsonl and then makes it visible in memory.
// It returns once p is fsynced, or only written for a lazy p. Concurrent
// callers share one write and one fsync: whoever takes wmu writes
// everything queued (group commit).
func (j *Journal) commit(p *pending) error {
	return j.commitAll([]*pending{p})
}

// commitAll commits ps in one group commit and returns the first error.
func (j *Journal) commitAll(ps []*pending) error {
	for _, p := range ps {
		if err := p.marshal(); err != nil {
			return err
		}
	}
	j.qmu.Lock()
	j.queue = append(j.queue, ps...)
	j.qmu.Unlock()

	j.wmu.Lock()
	defer j.wmu.Unlock()
	if !ps[len(ps)-1].done {
		j.qmu.Lock()
		batch := j.queue
		j.queue = nil
		j.qmu.Unlock()
		j.writeAndApply(batch)
	}
	for _, p := range ps {
		if p.err != nil {
			j.full(p.err)
			return p.err
		}
	}
	return nil
}

// marshal fills in p.line unless it is set.
func (p *pending) marshal() error {
	if p.line != nil {
		return nil
	}
	if p.rec != nil {
		p.line = appendRecordLine(nil, p.rec)
	} else if p.from != nil {
		b, err := json.Marshal(fromLine{FromOf: p.from.FromOf, FromURI: rawname.Enc(p.from.FromURI)})
		if err != nil {
			return err
		}
		p.line = append(b, '\n')
	}
	return nil
}

// writeAndApply writes batch and applies it in memory. Holds wmu.
func (j *Journal) writeAndApply(batch []*pending) {
	drop, err := j.writeBatch(batch)
	// Records being published are released (pend closed) only once the
	// batch is applied and, when it took the kept bytes over MaxBytes,
	// evicted for: a reader that waited for one then sees the journal
	// within its bounds.
	var wake []*Record
	j.mu.Lock()
	for _, q := range batch {
		q.done, q.err = true, err
		if q.pin != "" {
			if o := j.objects[q.pin]; o != nil {
				o.pins--
				if err == nil && q.rec != nil {
					o.lastSeq = max(o.lastSeq, q.rec.seq)
				}
				if err == nil && q.settle != nil {
					o.lastSeq = max(o.lastSeq, q.settle.seq)
				}
			}
		}
		if r := q.settle; r != nil && r.pend != nil {
			r.Before, r.Kept, r.Size = q.final.Before, q.final.Kept, q.final.Size
			if err != nil {
				// Not durable: say not kept rather than claim it.
				r.Before, r.Kept = Unknown, false
			}
			wake = append(wake, r)
		}
		if err != nil {
			continue
		}
		if q.rec != nil {
			j.insert(q.rec)
		}
		if q.from != nil {
			if r := j.byID(q.from.FromOf); r != nil {
				r.From = q.from.FromURI
			}
		}
	}
	over := err == nil && j.total > j.maxBytes.Load()
	j.mu.Unlock()
	if over {
		// The batch's own objects were pinned while it was written, so
		// writeBatch could not evict them; with a whole burst in one
		// batch the kept bytes would stay over MaxBytes until the next
		// change. Evict now that they are unpinned.
		if err := j.evict(); err != nil {
			j.log.Warn("journal: could not evict past the size limit", "err", err)
		}
	}
	if len(wake) > 0 || drop != nil {
		j.mu.Lock()
		for _, r := range wake {
			close(r.pend)
			r.pend = nil
		}
		if drop != nil && err == nil {
			// The line is durable: the records go (those this batch
			// settled too: their lines precede it), and the objects
			// only they used.
			j.applyDropLocked(*drop)
			j.releaseLocked(drop.Through)
		}
		j.mu.Unlock()
	}
	if err == nil {
		j.maybeCompactLocked()
	}
}

// writeBatch appends the lines of batch and fsyncs, after fsyncing objects/
// when the batch links new objects. When the kept bytes are over MaxBytes,
// the same write carries the "evicted" lines, so retention costs no extra
// fsync, and the evicted objects are removed once it is durable. When the
// batch takes the records past MaxRecords, the same write carries a
// "dropped" line and is fsynced; writeAndApply applies it. Holds wmu.
func (j *Journal) writeBatch(batch []*pending) (*droppedLine, error) {
	if j.isClosed() {
		return nil, ErrClosed
	}
	var buf []byte
	if len(batch) == 1 {
		buf = batch[0].line // most commits are one change: no copy
	} else {
		n := 0
		for _, q := range batch {
			n += len(q.line)
		}
		buf = make([]byte, 0, n)
		for _, q := range batch {
			buf = append(buf, q.line...)
		}
	}
	dirSync, sync := false, false
	for _, q := range batch {
		dirSync = dirSync || q.dirSync
		sync = sync || !q.lazy
	}
	switch {
	case dirSync && !sync:
		// Lazy Saves only: objects/ is fsynced with the records.
		j.dirDirty, dirSync = true, false
	case sync && j.dirDirty:
		dirSync = true
	}
	j.mu.Lock()
	drop := j.dropPlanLocked(batch)
	if drop != nil {
		// Objects only dropped records use are removed once the line is
		// durable: fsync it, and objects/ first if lazy records wait.
		buf = append(buf[:len(buf):len(buf)], drop.line()...)
		sync, dirSync = true, dirSync || j.dirDirty
	}
	j.mu.Unlock()
	if drop != nil {
		j.step("append dropped")
	}
	if dirSync {
		j.step("fsync objects")
		if err := j.objFD.Sync(); err != nil {
			return nil, fmt.Errorf("journal: fsync objects: %w", err)
		}
		j.dirDirty = false
	}
	j.mu.Lock()
	if j.total <= j.maxBytes.Load() {
		j.mu.Unlock()
		if !sync {
			return drop, j.writeLazy(buf)
		}
		return drop, j.appendLines(buf)
	}
	// Evicting: hold mu until the objects are gone, so no Save can adopt
	// one of them meanwhile. The batch's own objects are pinned.
	defer j.mu.Unlock()
	victims := j.victimsLocked()
	if err := j.appendLines(append(buf[:len(buf):len(buf)], j.evictedLines(victims)...)); err != nil {
		return nil, err
	}
	j.dropLocked(victims)
	return drop, nil
}

// evict brings the kept bytes under MaxBytes on its own (at Open, after
// MaxBytes was lowered). Holds wmu.
func (j *Journal) evict() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	victims := j.victimsLocked()
	if len(victims) == 0 {
		return nil
	}
	if err := j.appendLines(j.evictedLines(victims)); err != nil {
		return err
	}
	j.dropLocked(victims)
	return nil
}

type victim struct {
	hex string
	o   *object
}

// victimsLocked picks the objects used least recently until the rest fit
// MaxBytes, skipping objects a Save in flight has pinned. The objects of a
// pack go together (removing the pack is what frees their bytes): as
// recent as the newest of them, and held back while any is pinned. Holds
// mu.
func (j *Journal) victimsLocked() []victim {
	if j.total <= j.maxBytes.Load() {
		return nil
	}
	type unit struct {
		last   uint64
		name   string // the digest, or the pack's name
		size   int64
		pinned bool
		vs     []victim
	}
	byKey := map[any]*unit{} // by digest, or by *pack
	for h, o := range j.objects {
		var k any = h
		name := h
		if o.pack != nil {
			k, name = o.pack, o.pack.name
		}
		u := byKey[k]
		if u == nil {
			u = &unit{name: name}
			byKey[k] = u
		}
		u.last = max(u.last, o.lastSeq)
		u.size += o.size
		u.pinned = u.pinned || o.pins > 0
		u.vs = append(u.vs, victim{h, o})
	}
	var all []*unit
	for _, u := range byKey {
		if !u.pinned {
			all = append(all, u)
		}
	}
	// The name breaks ties so runs repeat.
	slices.SortFunc(all, func(a, b *unit) int {
		if c := cmp.Compare(a.last, b.last); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	var out []victim
	total := j.total
	for _, u := range all {
		if total <= j.maxBytes.Load() {
			break
		}
		slices.SortFunc(u.vs, func(a, b victim) int { return strings.Compare(a.hex, b.hex) })
		out = append(out, u.vs...)
		total -= u.size
	}
	return out
}

func (j *Journal) evictedLines(victims []victim) []byte {
	var buf []byte
	at := j.now().UTC()
	for _, v := range victims {
		b, _ := json.Marshal(evictedLine{Evicted: "sha256:" + v.hex, At: at})
		buf = append(append(buf, b...), '\n')
	}
	return buf
}

// dropLocked forgets and removes victims, whose "evicted" lines are
// durable, and reports every record that used them as not kept. Holds mu.
func (j *Journal) dropLocked(victims []victim) {
	gone := map[string]bool{}
	for _, v := range victims {
		delete(j.objects, v.hex)
		j.total -= v.o.size
		gone["sha256:"+v.hex] = true
		if v.o.pack != nil {
			j.unpack(v.o)
			j.log.Debug("journal: evicted", "object", v.hex, "pack", v.o.pack.name, "bytes", v.o.size)
			continue
		}
		if err := os.Remove(filepath.Join(j.objDir, v.hex)); err != nil && !errors.Is(err, os.ErrNotExist) {
			// The records already say not kept; Open removes it next time.
			j.log.Warn("journal: could not remove an evicted object", "object", v.hex, "err", err)
		}
		j.log.Debug("journal: evicted", "object", v.hex, "bytes", v.o.size)
	}
	for _, r := range j.recs {
		if gone[r.Before] {
			r.Kept = false
		}
	}
}

// appendLines writes buf to records.jsonl and fsyncs it. A failed write or
// fsync is cut back off, so the file never keeps half a line. Holds wmu.
func (j *Journal) appendLines(buf []byte) error {
	j.step("append records")
	end := j.records.end
	err := j.records.write(buf)
	if err == nil {
		j.step("fsync records")
		if err = j.records.f.Sync(); err != nil {
			if terr := j.records.truncate(end); terr != nil {
				j.log.Error("journal: could not cut a failed append", "err", terr)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("journal: append %s: %w", recordsName, err)
	}
	j.lines += bytes.Count(buf, []byte{'\n'})
	j.unsynced = false
	return nil
}

// flushDelay bounds how long a lazy record (Created, Renamed) may wait for
// its fsync when no Save comes along to share one.
const flushDelay = 100 * time.Millisecond

// writeLazy appends buf without an fsync and makes sure one follows within
// flushDelay. Holds wmu.
func (j *Journal) writeLazy(buf []byte) error {
	j.step("append records")
	if err := j.records.write(buf); err != nil {
		return fmt.Errorf("journal: append %s: %w", recordsName, err)
	}
	j.lines += bytes.Count(buf, []byte{'\n'})
	if !j.unsynced {
		j.unsynced = true
		time.AfterFunc(flushDelay, j.flush)
	}
	return nil
}

// flush fsyncs lazy records still waiting for it. The fsyncs run without
// wmu, so appends (a Keep on a FUSE request) never wait for them.
func (j *Journal) flush() {
	j.wmu.Lock()
	if !j.unsynced || j.shut {
		j.wmu.Unlock()
		return
	}
	dir := j.dirDirty
	j.unsynced, j.dirDirty = false, false
	j.syncing.Add(1)
	// A compaction may replace records.jsonl meanwhile: fsync the file
	// these records were written to, which it keeps open until then.
	f := j.records.f
	j.fileMu.RLock()
	j.wmu.Unlock()
	defer j.syncing.Done()
	var err error
	if dir {
		j.step("fsync objects")
		err = j.objFD.Sync()
	}
	if err == nil {
		j.step("fsync records")
		err = f.Sync()
	}
	j.fileMu.RUnlock()
	if err != nil {
		j.log.Error("journal: fsync records", "err", err)
		j.wmu.Lock()
		j.dirDirty = j.dirDirty || dir
		if !j.unsynced && !j.shut {
			j.unsynced = true
			time.AfterFunc(flushDelay, j.flush)
		}
		j.wmu.Unlock()
	}
}

// syncLocked fsyncs records.jsonl if lazy records wait for it. Holds wmu.
func (j *Journal) syncLocked() error {
	if !j.unsynced || j.shut {
		return nil
	}
	if j.dirDirty {
		j.step("fsync objects")
		if err := j.objFD.Sync(); err != nil {
			return err
		}
		j.dirDirty = false
	}
	j.step("fsync records")
	if err := j.records.f.Sync(); err != nil {
		return err
	}
	j.unsynced = false
	return nil
}
