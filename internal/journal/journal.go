package journal

import (
	"crypto/cipher"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/rawname"
)

// Defaults for Options fields left zero.
const (
	DefaultMaxBytes     = 256 << 20 // total bytes of kept objects
	DefaultMaxFileBytes = 16 << 20  // bytes of one file; a larger one is not kept
	// DefaultMaxRecords is how many records the journal keeps (about
	// 0.3-0.5 KiB of memory each, see bound.go): beyond it the oldest are
	// dropped.
	DefaultMaxRecords = 100_000
)

// Names inside Options.Dir.
const (
	recordsName = "records.jsonl"
	// recordsWindow is the mapping records.jsonl is appended through
	// (see tailFile). The staging log is written with pwrite(2): its
	// copies fill a page or more each, and faulting fresh pages into a
	// mapping costs more than the write(2) it saves.
	recordsWindow = 1 << 20
	objectsName   = "objects"
	lockName      = "LOCK"
	tmpPrefix     = "tmp-"
)

// Before values that are not digests.
const (
	// Absent is Record.Before for a uri that did not exist before the change:
	// reverting it removes the file.
	Absent = "absent"
	// Unknown is Record.Before for a file larger than Options.MaxFileBytes:
	// it was neither copied nor hashed, so it cannot be restored.
	Unknown = ""
)

// Errors callers branch on.
var (
	// ErrCorrupt marks a journal entry whose bytes no longer match its digest.
	ErrCorrupt = errors.New("journal entry is corrupt")
	// ErrConflict marks different bytes found under an object's name.
	ErrConflict = errors.New("journal entry conflicts with different content under the same digest")
	// ErrNotKept marks a record whose content was evicted or never copied.
	ErrNotKept = errors.New("content not kept")
	// ErrNoRecord marks a uri or record id the journal has no record of.
	ErrNoRecord = errors.New("no journal record")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("journal is closed")
	// ErrLocked is returned by Open when another process has the journal open.
	ErrLocked = errors.New("journal is in use by another process")
)

// Options configure Open. Zero fields take the defaults.
type Options struct {
	Dir          string // <state_dir>/journal; created with mode 0700
	MaxBytes     int64  // total bytes of kept content; DefaultMaxBytes if 0
	MaxFileBytes int64  // bytes of one file; DefaultMaxFileBytes if 0
	// MaxRecords bounds the records kept, in memory and in records.jsonl;
	// DefaultMaxRecords if 0. Beyond it the oldest are dropped (see
	// bound.go).
	MaxRecords int
	Log        *slog.Logger
	Now        func() time.Time
	// Batched defers work off the caller's path: Keep stages the content
	// and a background publisher hashes, stores (fsynced) and records it;
	// Save fsyncs its copy but defers the fsyncs of objects/ and the
	// record to within 100 ms. A killed daemon loses nothing (Open
	// finishes what was staged); a power cut can lose the last moments'
	// changes. The default, false, fsyncs the copy, objects/ and the
	// record before Save or Keep returns.
	Batched bool
	// NoSpace, when set, is called (from any goroutine) with the error of
	// a write to the journal's folder that failed for want of space
	// (ENOSPC, EDQUOT): the change it was for is recorded as not kept
	// when the record itself can still be written.
	NoSpace func(error)
}

// Event is one change about to be made (Save) or just made (Created,
// Renamed) through the mount.
type Event struct {
	Principal string
	UID, PID  uint32
	Op        string // "open", "truncate", "unlink", "rename", "create", "revert", …
	URI       string // "<slug>://<path>": the file whose content changes
	From      string // for a rename: the uri that moved onto URI
}

// Record is one change as journaled. Field names in records.jsonl are a
// contract for `neuralisfs history --json`.
type Record struct {
	ID        string    `json:"id"`
	Time      time.Time `json:"time"`
	Principal string    `json:"principal"`
	UID       uint32    `json:"uid"`
	PID       uint32    `json:"pid"`
	Op        string    `json:"op"`
	URI       string    `json:"uri"`
	From      string    `json:"from,omitempty"`
	// Before is "sha256:<hex>" of the content before the change, Absent, or
	// Unknown for a file too large to keep.
	Before string `json:"before"`
	Mode   uint32 `json:"mode"` // permission bits before the change
	Size   int64  `json:"size"` // bytes before the change
	// Owner is who owned the file before the change; nil in records
	// older than session 45 (and from Save).
	Owner *Owner `json:"owner,omitempty"`
	// Kept reports whether the state before the change can be restored: the
	// content is in the journal, or Before is Absent. False means "not kept":
	// evicted by retention or larger than MaxFileBytes.
	Kept bool `json:"kept"`

	seq uint64 // order of the record; parsed from ID

	// Set while the record's content is staged and not yet published
	// (Keep): pend is closed, and set to nil, under mu once Before, Kept
	// and Size are final. Readers wait for it (waitFor).
	pend   chan struct{}
	staged string // name under staged/, or logStaged
	linked bool   // staged by hard link, not copied
	logOff int64  // logStaged: logical offset of the copy in staged.log
	logCRC uint32 // logStaged: CRC-32C of the copy
	stamp  string // File.Stamp of the kept file (memory only)
}

// Owner is a file's owner and group.
type Owner struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// ReadableBy reports whether the content r kept was readable, by its mode
// and owner then, by uid with the groups gid and groups: whoever could
// not read a version must not learn it now through a revert or its
// digest, whatever the file is now (an agent that may write a name
// could otherwise make it anew, empty, and revert it to root's 0600
// content; found by a red-team pass). POSIX ACLs are not recorded, so
// they grant nothing here; a record with no owner counts as readable by
// others' bits alone.
func (r Record) ReadableBy(uid, gid uint32, groups []uint32) bool {
	switch {
	case r.Owner == nil:
	case uid == r.Owner.UID:
		return r.Mode&0o400 != 0
	case gid == r.Owner.GID || slices.Contains(groups, r.Owner.GID):
		return r.Mode&0o040 != 0
	}
	return r.Mode&0o004 != 0
}

// A uri is bytes, not text: encoding/json writes each byte that is not
// UTF-8 as U+FFFD, so after a restart the record of z\xff was one of
// z\uFFFD, and a revert of it restored that other file, or none. JSON
// carries a record's uris as rawname.Enc keeps them: in records.jsonl,
// on the control socket and in `history --json`.

// MarshalJSON writes r with its uris as rawname.Enc keeps them.
func (r Record) MarshalJSON() ([]byte, error) {
	type plain Record
	r.URI, r.From = rawname.Enc(r.URI), rawname.Enc(r.From)
	return json.Marshal(plain(r))
}

// UnmarshalJSON reads r back, uris as they were.
func (r *Record) UnmarshalJSON(b []byte) error {
	type plain Record
	if err := json.Unmarshal(b, (*plain)(r)); err != nil {
		return err
	}
	r.URI, r.From = rawname.Dec(r.URI), rawname.Dec(r.From)
	return nil
}

// Journal is an open journal directory. It is safe for concurrent use.
type Journal struct {
	dir    string
	objDir string
	// The bounds (Options; SetLimits changes them while the journal runs).
	maxBytes atomic.Int64
	maxFile  atomic.Int64
	maxRecs  atomic.Int64
	batched  atomic.Bool // Options.Batched; SetBatched changes it
	log      *slog.Logger
	noSpace  func(error) // Options.NoSpace
	now      func() time.Time

	lock    *os.File  // flock held until Close
	objFD   *os.File  // objects/, for fsync
	records *tailFile // records.jsonl
	stageFD int       // staged/, for linkat and openat; -1 until opened
	// objDirFD is objFD's descriptor, for fstatat; -1 until opened. (A
	// call racing Close may find it closed or reused: it only stats
	// through it, and a match needs the object's device, inode and ctime.)
	objDirFD int
	packFD   *os.File // packs/, for fsync
	// packDirFD is packFD's descriptor, for fstatat and unlinkat; -1
	// until opened.
	packDirFD int

	// smu guards the staging log (staged.log, see stage.go): where it
	// ends, its base, and how many copies in it are not yet published.
	smu       sync.Mutex
	sl        *tailFile
	slBase    int64 // logical offset of the first byte after the header; -1: header unreadable
	slLive    int   // copies in the log whose record line is not yet written
	slSeen    int64 // highest logical end a replayed staged line used
	slTruncAt int64 // cut the log back once this much is published
	slMax     int64 // bytes the log may hold; a Keep beyond copies to staged/
	// slInflight is the memory held by copies handed to the publisher
	// (job.data), at most slInflightMax (inflightMax; a test may set 0).
	slInflight    int64
	slInflightMax int64

	// amu guards stopping and sending on jobs, and the files: Keep, Save,
	// Plan and Content hold it shared (using), Close exclusively to stop
	// the publisher before it closes them.
	amu      sync.RWMutex
	stopping bool
	jobs     chan *job     // staged copies for the publisher (batched mode)
	hurry    chan struct{} // a reader waits: publish what is gathered now
	waiters  atomic.Int32  // readers waiting for a record: do not gather
	packBuf  []byte        // the publisher's buffer for writing packs
	workDone chan struct{} // closed when the publisher has returned

	// trace, when set by a test, sees every step of publishing and appending.
	trace func(step string)
	// tempName, when set by a test, may replace the next temporary name.
	tempName func(name string) string

	// qmu guards queue: records waiting for the next group commit.
	qmu   sync.Mutex
	queue []*pending
	// wmu serializes writes to records.jsonl.
	wmu      sync.Mutex
	unsynced bool           // lazy records written but not yet fsynced
	dirDirty bool           // objects linked by lazy Saves, objects/ not yet fsynced
	syncing  sync.WaitGroup // flushes fsyncing outside wmu
	shut     bool           // files closed
	// lines counts the lines in records.jsonl, for compacting it (see
	// bound.go); compacting is set while a compaction runs, compactMin is
	// the fewest lines worth compacting.
	lines      int
	compacting bool
	compactMin int
	compactAt  int // after a failed compaction: lines before the next try
	compactWG  sync.WaitGroup
	// fileMu keeps a records.jsonl that a compaction replaced open while
	// a flush fsyncs it (held shared by the flush, exclusively to close).
	fileMu sync.RWMutex

	// mu guards the in-memory state below.
	mu     sync.Mutex
	closed bool
	seq    uint64
	recs   []*Record // in seq order; byID finds one by its id
	// ids enciphers the ids callers see (ids.go).
	ids cipher.Block
	// replayBefore indexes records by Before during replay only.
	replayBefore map[string][]*Record
	byURI        map[string][]*Record // each in seq order
	objects      map[string]*object   // by hex digest
	total        int64                // bytes of objects present
	// drop is what the record bound has dropped (see bound.go).
	drop Dropped
	// names interns principals and ops read back by replay.
	names map[string]string
}

// object is one file under objects/.
type object struct {
	size    int64
	lastSeq uint64 // newest record using it; eviction takes the smallest first
	pins    int    // Saves between publishing it and committing their record
	// proved says a re-hash found the object's bytes intact while its
	// file had key (see unchangedSince).
	proved bool
	key    fileKey
	// pack, when set, holds the object at off (see pack.go); otherwise it
	// is objects/<hex>.
	pack *pack
	off  int64
}

// Open opens (creating if needed) the journal in opts.Dir and recovers from
// a crash: leftover tmp- files are removed, never adopted; records.jsonl is
// re-read and a torn last line is cut off; objects no kept record uses are
// removed; records whose object is missing are reported not kept.
func Open(opts Options) (*Journal, error) {
	if opts.Dir == "" {
		return nil, errors.New("journal: Options.Dir is empty")
	}
	j := &Journal{
		dir:           opts.Dir,
		objDir:        filepath.Join(opts.Dir, objectsName),
		log:           opts.Log,
		noSpace:       opts.NoSpace,
		now:           opts.Now,
		byURI:         map[string][]*Record{},
		objects:       map[string]*object{},
		stageFD:       -1,
		objDirFD:      -1,
		packDirFD:     -1,
		slTruncAt:     logTruncateAt,
		slMax:         logMax,
		slInflightMax: inflightMax,
	}
	j.setLimits(opts.MaxBytes, opts.MaxFileBytes, opts.MaxRecords)
	j.batched.Store(opts.Batched)
	j.compactMin = compactMinLines
	if j.log == nil {
		j.log = slog.New(slog.DiscardHandler)
	}
	if j.now == nil {
		j.now = time.Now
	}
	if err := j.open(); err != nil {
		j.closeFiles()
		return nil, err
	}
	return j, nil
}

func (j *Journal) open() error {
	for _, d := range []string{j.dir, j.objDir, filepath.Join(j.dir, packsName), filepath.Join(j.dir, stagedName)} {
		if err := mkdirPrivate(d); err != nil {
			return err
		}
	}
	var err error
	j.lock, err = os.OpenFile(filepath.Join(j.dir, lockName), os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if err := syscall.Flock(int(j.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("journal %s: %w", j.dir, ErrLocked)
		}
		return fmt.Errorf("journal %s: lock: %w", j.dir, err)
	}
	if err := j.removeTemps(); err != nil {
		return err
	}
	if err := j.openIDKey(); err != nil {
		return err
	}
	if err := j.replay(); err != nil {
		return err
	}
	rf, err := os.OpenFile(filepath.Join(j.dir, recordsName), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	st, err := rf.Stat()
	if err != nil {
		rf.Close()
		return fmt.Errorf("journal: %w", err)
	}
	j.records = newTailFile(rf, st.Size(), recordsWindow)
	j.objFD, err = os.Open(j.objDir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	j.objDirFD = int(j.objFD.Fd())
	j.packFD, err = os.Open(filepath.Join(j.dir, packsName))
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	j.packDirFD = int(j.packFD.Fd())
	j.stageFD, err = unix.Open(filepath.Join(j.dir, stagedName), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if err := j.scanObjects(); err != nil {
		return err
	}
	if err := j.openLog(); err != nil {
		return err
	}
	if err := j.recoverStaged(); err != nil {
		return err
	}
	// MaxRecords and MaxBytes may have been lowered since the last run.
	j.wmu.Lock()
	err = j.dropOverBound()
	if err == nil {
		err = j.evict()
	}
	j.wmu.Unlock()
	if err != nil {
		return err
	}
	// The publisher runs in strict mode too (idle): SetBatched may turn
	// batching on while the journal runs.
	j.jobs = make(chan *job, maxQueued)
	j.hurry = make(chan struct{}, 1)
	j.workDone = make(chan struct{})
	go j.publisher()
	return nil
}

// mkdirPrivate makes d with mode 0700, or narrows an existing d to 0700.
func mkdirPrivate(d string) error {
	err := os.Mkdir(d, 0o700)
	if errors.Is(err, os.ErrNotExist) {
		err = os.MkdirAll(d, 0o700)
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("journal: %w", err)
	}
	fi, err := os.Lstat(d)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("journal: %s is not a directory", d)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
	}
	return nil
}

// removeTemps deletes copies an interrupted Save left behind. Their content
// was never published, so it is never adopted, even when it is complete.
func (j *Journal) removeTemps() error {
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		if err := os.Remove(filepath.Join(j.dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("journal: remove leftover %s: %w", e.Name(), err)
		}
		j.log.Info("journal: removed an interrupted copy", "name", e.Name())
	}
	return nil
}

// scanObjects matches objects/ against the records: kept records whose
// object is missing become not kept (in memory: the journal does not
// rewrite history), and objects no kept record uses are removed — they are
// copies published by a Save that crashed before its record was durable.
func (j *Journal) scanObjects() error {
	ents, err := os.ReadDir(j.objDir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	want := map[string]uint64{}
	for _, r := range j.recs {
		if hex, ok := digestHex(r.Before); ok && r.Kept {
			want[hex] = max(want[hex], r.seq)
		}
	}
	for _, e := range ents {
		name := e.Name()
		last, used := want[name]
		if !used {
			if !isHex(name) {
				j.log.Warn("journal: unexpected file in objects, left alone", "name", name)
				continue
			}
			if err := os.Remove(filepath.Join(j.objDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("journal: remove unused object %s: %w", name, err)
			}
			j.log.Info("journal: removed an object no record uses", "object", name)
			continue
		}
		info, err := e.Info()
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		j.objects[name] = &object{size: info.Size(), lastSeq: last}
		j.total += info.Size()
	}
	if err := j.scanPacks(want); err != nil {
		return err
	}
	for _, r := range j.recs {
		if hex, ok := digestHex(r.Before); ok && r.Kept && j.objects[hex] == nil {
			r.Kept = false
			j.log.Warn("journal: object missing, record reported not kept", "id", r.ID, "uri", r.URI, "before", r.Before)
		}
	}
	return nil
}

// SetBatched switches between batched and strict mode (Options.Batched)
// while the journal runs, as a reload of [journal] sync does. Changes
// from then on are journaled in the new mode. Turned off, it also fsyncs
// the records written lazily so far before it returns; copies already
// staged are published as ever (a kill loses none of them: Open finishes
// them).
func (j *Journal) SetBatched(on bool) error {
	j.batched.Store(on)
	if on {
		return nil
	}
	j.wmu.Lock()
	defer j.wmu.Unlock()
	if j.isClosed() {
		return ErrClosed
	}
	return j.syncLocked()
}

// setLimits sets the bounds; a zero or negative one takes its default.
func (j *Journal) setLimits(maxBytes, maxFile int64, maxRecs int) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if maxFile <= 0 {
		maxFile = DefaultMaxFileBytes
	}
	if maxRecs <= 0 {
		maxRecs = DefaultMaxRecords
	}
	j.maxBytes.Store(maxBytes)
	j.maxFile.Store(min(maxFile, maxBytes))
	j.maxRecs.Store(int64(maxRecs))
}

// SetLimits changes the bounds of Options (MaxBytes, MaxFileBytes,
// MaxRecords; zero takes the default) while the journal runs, as a
// reload of the config does. Lowered bounds are enforced at once, as
// Open enforces bounds lowered since the last run: the oldest records
// past MaxRecords are dropped and the oldest kept content past
// MaxBytes is evicted (its records then say not kept). A file already
// kept stays kept under a lower MaxFileBytes; the next change of a
// file larger than it is not kept.
func (j *Journal) SetLimits(maxBytes, maxFile int64, maxRecs int) error {
	j.wmu.Lock()
	defer j.wmu.Unlock()
	if j.isClosed() {
		return ErrClosed
	}
	j.setLimits(maxBytes, maxFile, maxRecs)
	if err := j.dropOverBound(); err != nil {
		return err
	}
	return j.evict()
}

// Close publishes what is still staged, then releases the journal. Calls
// after Close return ErrClosed.
func (j *Journal) Close() error {
	j.amu.Lock()
	stop := !j.stopping && j.jobs != nil
	j.stopping = true
	if stop {
		close(j.jobs)
	}
	j.amu.Unlock()
	if j.workDone != nil {
		<-j.workDone
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	j.wmu.Lock() // wait for a group commit in flight
	err := j.syncLocked()
	j.shut = true
	j.wmu.Unlock()
	j.compactWG.Wait() // a compaction sees shut and stops
	j.smu.Lock()
	if j.sl != nil && j.slLive == 0 && j.sl.end > logHeaderLen {
		if lerr := j.cutLogLocked(); lerr != nil {
			j.log.Warn("journal: could not cut the staging log back", "err", lerr)
		}
	}
	j.smu.Unlock()
	j.syncing.Wait() // a flush still fsyncing outside wmu
	return errors.Join(err, j.closeFiles())
}

func (j *Journal) closeFiles() error {
	var errs []error
	for _, t := range []*tailFile{j.records, j.sl} {
		if t != nil {
			errs = append(errs, t.close())
		}
	}
	for _, f := range []*os.File{j.objFD, j.packFD, j.lock} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	if j.stageFD >= 0 {
		errs = append(errs, unix.Close(j.stageFD))
		j.stageFD = -1
	}
	return errors.Join(errs...)
}

// using holds the journal's files open for a call that reads or writes
// them (amu, shared, until the caller's RUnlock): false, holding
// nothing, once Close has begun, which waits for the calls holding it. A
// reload may close the journal while changes through the mount are
// keeping content, and a descriptor closed under such a call could be
// reused by another open.
func (j *Journal) using() bool {
	j.amu.RLock()
	if j.stopping {
		j.amu.RUnlock()
		return false
	}
	return true
}

func (j *Journal) isClosed() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.closed
}

func (j *Journal) step(s string) {
	if j.trace != nil {
		j.trace(s)
	}
}

// isNoSpace reports whether err is a write that failed for want of space.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// full reports whether err is a write that failed for want of space, and
// tells Options.NoSpace when it is.
func (j *Journal) full(err error) bool {
	if !isNoSpace(err) {
		return false
	}
	if j.noSpace != nil {
		j.noSpace(err)
	}
	return true
}
