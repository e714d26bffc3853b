package journal

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// The record bound (issue 16, "long runs"): without it every change ever
// made stayed in memory (about 0.5 KiB a record: the Record, its id, uri,
// digest and map entries) and in records.jsonl, and a daemon under a
// steady load grew by megabytes a minute.
//
// The journal keeps at most Options.MaxRecords records. A batch that
// would take it past the bound also writes a "dropped" line, in the same
// append and with an fsync, that drops the oldest records: every record
// with a seq up to dropped_through whose line came before it and that is
// not still being published (a staged record waits until its copy is
// stored). A drop takes a chunk (a 64th of the bound) beyond what the
// batch needs, so drops cost an fsync per chunk, not per record. Once the
// line is durable the records leave memory and every object no kept
// record uses any more (its newest user, lastSeq, is at or before
// dropped_through, and no Save in flight has it pinned) is removed, as
// retention removes one. Replay applies the line exactly so: to the
// records read before it. A record whose line comes later (one whose
// commit was in flight when the drop was decided) is not dropped by it,
// at run time or at replay, so the two never disagree.
//
// records.jsonl is compacted once at least half of its lines are dead
// (dropped records, "evicted" and "from" lines, staged lines already
// published) and it has compactMinLines lines: a background goroutine
// writes every record the journal keeps, one line each in its current
// state (a record still being published as its staged line), behind a
// "dropped" line that carries the count, to a tmp- file; then, holding
// the append lock, it copies what was appended meanwhile, fsyncs it
// (after objects/, when lazy records wait for that), renames it over
// records.jsonl and fsyncs the folder. A crash before the rename leaves
// the old file whole (and a tmp- file, which Open removes); after it,
// the new one, which holds the same state. Dropped records are in
// neither but as dropped, so none comes back.

// compactMinLines is the fewest lines in records.jsonl worth compacting.
const compactMinLines = 4096

// dropChunkDiv: a drop takes MaxRecords/dropChunkDiv records beyond what
// the bound needs.
const dropChunkDiv = 64

// Dropped is what the record bound has dropped over the journal's life.
type Dropped struct {
	Records int64     `json:"records"`     // how many records; -1: some (Untold)
	Until   time.Time `json:"until"`       // time of the newest of them
	Max     int       `json:"max_records"` // the bound, Options.MaxRecords

	through uint64 // seq of the newest record dropped
}

// Untold is d for a reader the policy or its file permissions keep from
// some files: that records were dropped (Records -1), not how many or
// up to when. The count moved with changes to files hidden from the
// reader, even in folders whose times did not move (a red-team pass: 64
// appends of root's to a hidden file showed as 64 more dropped records).
func (d Dropped) Untold() Dropped {
	if d.Records == 0 {
		return d
	}
	return Dropped{Records: -1, Max: d.Max}
}

// droppedLine records a drop. Records and Until are cumulative over the
// journal's life, so the newest line (or a compacted file's first) says
// it all.
type droppedLine struct {
	Through uint64    `json:"dropped_through"`
	Records int64     `json:"dropped"`
	Until   time.Time `json:"until"`
}

func (d *droppedLine) line() []byte {
	b, _ := json.Marshal(d)
	return append(b, '\n')
}

// Dropped says how many of the oldest records the record bound has
// dropped, and until when: History has no record of anything before
// Until, whatever the uri.
func (j *Journal) Dropped() Dropped {
	j.mu.Lock()
	defer j.mu.Unlock()
	d := j.drop
	d.Max = int(j.maxRecs.Load())
	return d
}

// Note is one line saying what was dropped, for a history shown to a
// person, or "" when nothing was: a history is then complete only from
// Until on, whatever uri it is of.
func (d Dropped) Note() string {
	if d.Records == 0 {
		return ""
	}
	if d.Records < 0 {
		return fmt.Sprintf("# older records were dropped: the journal keeps its newest %d (max_records)", d.Max)
	}
	return fmt.Sprintf("# older records were dropped: the journal keeps its newest %d (max_records); %d records up to %s are gone", d.Max, d.Records, d.Until.UTC().Format(time.RFC3339))
}

// dropPlanLocked decides whether writing batch takes the records past
// MaxRecords and, if so, returns the line that drops the oldest: enough
// of them, and a chunk more, passing over records still being published
// (those the batch settles count as published: their lines precede the
// drop line). Holds mu (and wmu).
func (j *Journal) dropPlanLocked(batch []*pending) *droppedLine {
	adding := 0
	var settling map[*Record]bool
	for _, q := range batch {
		if q.rec != nil {
			adding++
		}
		if q.settle != nil {
			if settling == nil {
				settling = map[*Record]bool{}
			}
			settling[q.settle] = true
		}
	}
	over := len(j.recs) + adding - int(j.maxRecs.Load())
	if over <= 0 {
		return nil
	}
	need := over + int(j.maxRecs.Load())/dropChunkDiv
	d := &droppedLine{Through: j.drop.through, Records: j.drop.Records, Until: j.drop.Until}
	n := 0
	for _, r := range j.recs {
		if n >= need {
			break
		}
		if r.pend != nil && !settling[r] {
			continue
		}
		d.Through = max(d.Through, r.seq)
		if r.Time.After(d.Until) {
			d.Until = r.Time
		}
		n++
	}
	if n == 0 {
		return nil
	}
	// The batch's own records precede the line in the file: replay drops
	// those at or before Through too, and so does applyDropLocked.
	for _, q := range batch {
		if r := q.rec; r != nil && r.pend == nil && r.seq <= d.Through {
			n++
			if r.Time.After(d.Until) {
				d.Until = r.Time
			}
		}
	}
	d.Records += int64(n)
	return d
}

// applyDropLocked drops, from memory, every record at or before
// d.Through that is not being published. Holds mu (or runs in replay).
func (j *Journal) applyDropLocked(d droppedLine) {
	if d.Through > j.drop.through {
		j.drop.through = d.Through
	}
	j.drop.Records = max(j.drop.Records, d.Records)
	if d.Until.After(j.drop.Until) {
		j.drop.Until = d.Until
	}
	j.seq = max(j.seq, d.Through)
	gone := func(r *Record) bool { return r.seq <= d.Through && r.pend == nil }
	// recs is in seq order: only its front can go.
	end := 0
	for end < len(j.recs) && j.recs[end].seq <= d.Through {
		end++
	}
	if end == 0 {
		return
	}
	touched := map[string]bool{}
	k := 0
	for _, r := range j.recs[:end] {
		if gone(r) {
			touched[r.URI] = true
			continue
		}
		j.recs[k] = r
		k++
	}
	k += copy(j.recs[k:], j.recs[end:])
	clear(j.recs[k:]) // let the dropped records go
	j.recs = j.recs[:k]
	for u := range touched {
		// In seq order too: only the front can go.
		rs := j.byURI[u]
		end := 0
		for end < len(rs) && rs[end].seq <= d.Through {
			end++
		}
		k := len(slices.DeleteFunc(rs[:end:end], gone))
		k += copy(rs[k:], rs[end:])
		clear(rs[k:])
		rs = rs[:k]
		switch {
		case len(rs) == 0:
			delete(j.byURI, u)
		case cap(rs) > 2*len(rs)+8:
			j.byURI[u] = slices.Clip(slices.Clone(rs))
		default:
			j.byURI[u] = rs
		}
	}
}

// releaseLocked forgets and removes the objects no kept record uses once
// the records at or before through are dropped: their newest user is at
// or before through and no Save or Keep in flight has pinned them. Holds
// mu, so no Save can adopt one while it goes (as dropLocked).
func (j *Journal) releaseLocked(through uint64) {
	for hx, o := range j.objects {
		if o.pins > 0 || o.lastSeq > through {
			continue
		}
		delete(j.objects, hx)
		j.total -= o.size
		if o.pack != nil {
			j.unpack(o)
			continue
		}
		j.step("release object")
		if err := unix.Unlinkat(j.objDirFD, hx, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			// No record uses it; Open removes it next time.
			j.log.Warn("journal: could not remove an object no kept record uses", "object", hx, "err", err)
		}
	}
}

// dropOverBound brings the records under MaxRecords on its own (at Open,
// after MaxRecords was lowered). Holds wmu.
func (j *Journal) dropOverBound() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	d := j.dropPlanLocked(nil)
	if d == nil {
		return nil
	}
	if err := j.appendLines(d.line()); err != nil {
		return err
	}
	j.applyDropLocked(*d)
	j.releaseLocked(d.Through)
	return nil
}

// maybeCompactLocked starts a compaction of records.jsonl when at least
// half of its lines are dead. Holds wmu.
func (j *Journal) maybeCompactLocked() {
	if j.compacting || j.shut || j.lines < j.compactMin || j.lines < j.compactAt {
		return
	}
	j.mu.Lock()
	live := len(j.recs)
	j.mu.Unlock()
	if j.lines <= 2*live {
		return
	}
	j.compacting = true
	j.compactWG.Add(1)
	go j.compact()
}

func (j *Journal) compact() {
	defer j.compactWG.Done()
	err := j.rewriteRecords()
	j.wmu.Lock()
	j.compacting = false
	if err != nil {
		// Try again once the file has grown by half.
		j.compactAt = j.lines + j.lines/2
	}
	j.wmu.Unlock()
	if err != nil {
		j.full(err)
		j.log.Warn("journal: could not compact "+recordsName+"; it stays as it is", "err", err)
	}
}

// rewriteRecords writes the records the journal keeps to a new
// records.jsonl and puts it in place of the old one (see the top of this
// file).
func (j *Journal) rewriteRecords() (err error) {
	// The state as of the end of the file: every line written is applied
	// in memory under wmu. Records being published are written as their
	// staged lines, taken now (their Size changes when they are settled).
	j.wmu.Lock()
	if j.shut {
		j.wmu.Unlock()
		return nil
	}
	from := j.records.end
	j.mu.Lock()
	snap := slices.Clone(j.recs)
	staged := map[*Record][]byte{}
	for _, r := range snap {
		if r.pend != nil {
			staged[r] = appendStagedLine(nil, r)
		}
	}
	head := droppedLine{Through: j.drop.through, Records: j.drop.Records, Until: j.drop.Until}
	j.mu.Unlock()
	j.wmu.Unlock()

	var b [8]byte
	_, _ = rand.Read(b[:])
	tmp := filepath.Join(j.dir, tmpPrefix+"records-"+hex.EncodeToString(b[:]))
	if j.tempName != nil {
		tmp = j.tempName(tmp)
	}
	j.step("compact create")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("journal: compact: %w", err)
	}
	placed := false
	defer func() {
		if !placed {
			f.Close()
			os.Remove(tmp)
		}
	}()
	var buf []byte
	var size int64
	lines := 0
	write := func() error {
		if len(buf) == 0 {
			return nil
		}
		if _, err := f.Write(buf); err != nil {
			return fmt.Errorf("journal: compact: %w", err)
		}
		size += int64(len(buf))
		buf = buf[:0]
		return nil
	}
	if head.Through > 0 {
		buf = head.line()
		lines++
	}
	// Records change only under wmu and mu (a settle, an eviction, a
	// rename's from), and every such change after from is in the tail
	// copied below, so a record may be read here in either state.
	j.step("compact write")
	for i := 0; i < len(snap); {
		j.mu.Lock()
		if j.closed {
			j.mu.Unlock()
			return nil
		}
		for stop := min(i+512, len(snap)); i < stop; i++ {
			if line, ok := staged[snap[i]]; ok {
				buf = append(buf, line...)
			} else {
				buf = appendRecordLine(buf, snap[i])
			}
			lines++
		}
		j.mu.Unlock()
		if len(buf) >= 1<<20 || i == len(snap) {
			if err := write(); err != nil {
				return err
			}
		}
	}
	if err := write(); err != nil {
		return err
	}
	j.step("compact fsync")
	if err := f.Sync(); err != nil {
		return fmt.Errorf("journal: compact: %w", err)
	}

	j.wmu.Lock()
	unlocked := false
	defer func() {
		if !unlocked {
			j.wmu.Unlock()
		}
	}()
	if j.shut {
		return nil
	}
	// What was appended since the snapshot, as it is.
	j.step("compact tail")
	tail := make([]byte, j.records.end-from)
	if _, err := j.records.f.ReadAt(tail, from); err != nil {
		return fmt.Errorf("journal: compact: read %s: %w", recordsName, err)
	}
	if _, err := f.Write(tail); err != nil {
		return fmt.Errorf("journal: compact: %w", err)
	}
	if j.dirDirty {
		// Lazy records in the tail name objects linked since objects/
		// was last fsynced: the new file is fsynced below.
		j.step("fsync objects")
		if err := j.objFD.Sync(); err != nil {
			return fmt.Errorf("journal: fsync objects: %w", err)
		}
		j.dirDirty = false
	}
	j.step("compact fsync tail")
	if err := f.Sync(); err != nil {
		return fmt.Errorf("journal: compact: %w", err)
	}
	j.step("compact rename")
	if err := os.Rename(tmp, filepath.Join(j.dir, recordsName)); err != nil {
		return fmt.Errorf("journal: compact: %w", err)
	}
	// From here on the new file is records.jsonl, whatever fails.
	placed = true
	old := j.records
	j.records = newTailFile(f, size+int64(len(tail)), recordsWindow)
	j.lines = lines + bytes.Count(tail, []byte{'\n'})
	lines = j.lines
	j.unsynced = false
	j.compactAt = 0
	j.step("compact fsync dir")
	derr := syncDir(j.dir)
	j.wmu.Unlock()
	unlocked = true
	// A flush may still be fsyncing the old file.
	j.fileMu.Lock()
	old.unmap()
	cerr := old.f.Close()
	j.fileMu.Unlock()
	j.log.Info("journal: compacted "+recordsName, "records", len(snap), "lines", lines)
	if derr != nil {
		return fmt.Errorf("journal: compact: fsync %s: %w", j.dir, derr)
	}
	return cerr
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
