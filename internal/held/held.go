package held

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/rawname"
	"github.com/neuralis/neuralisfs/internal/secretkey"
	"github.com/neuralis/neuralisfs/mounts"
)

// Errors callers branch on.
var (
	// ErrQuota: the principal holds [review] max_bytes already (EDQUOT).
	ErrQuota = errors.New("held changes exceed the principal's review bound")
	// ErrConflict: the backing file is no longer what the held change was
	// made on.
	ErrConflict = errors.New("the backing file changed since the held change was made")
	// ErrNoChange: no held change has that id or uri.
	ErrNoChange = errors.New("no such held change")
	// ErrChanged: the principal changed the held change since it was
	// listed (its id names other content now).
	ErrChanged = errors.New("the principal changed the held change since it was listed")
	// ErrBusy: the principal still has a held file of the change open for
	// writing; what it writes next would be lost if the file went now.
	ErrBusy = errors.New("the principal still has the held file open for writing")
)

// Base is the backing state of a path when a layer first changed it.
type Base struct {
	Absent bool   `json:"absent,omitempty"`
	Type   uint32 `json:"type,omitempty"` // S_IFMT bits
	Mode   uint32 `json:"mode,omitempty"` // permission bits
	Size   int64  `json:"size,omitempty"`
	UID    uint32 `json:"uid,omitempty"`
	GID    uint32 `json:"gid,omitempty"`
	// Digest is "sha256:<hex>" of a regular file's content or a symlink's
	// target.
	Digest string `json:"digest,omitempty"`
	// Dev and Ino identify a backing folder copied up in place (see
	// Layer.KeepIno).
	Dev uint64 `json:"dev,omitempty"`
	Ino uint64 `json:"ino,omitempty"`
	// Ctime is a backing folder's change time (ns) when it was copied up:
	// a folder whose entries changed since has another.
	Ctime int64 `json:"ctime,omitempty"`
	// Xattrs names a regular file's or folder's extended attributes
	// (xattrDigest; "" for none).
	Xattrs string `json:"xattrs,omitempty"`
}

// Store holds every layer under one folder.
type Store struct {
	dir      string
	maxBytes atomic.Int64 // [review] max_bytes; 0: no bound
	log      *slog.Logger
	// idKey keys the ids of held changes (changeIDLocked): kept in
	// idKeyName, made at the first Open.
	idKey []byte

	mu     sync.Mutex
	layers map[string]*Layer // principal + "\x00" + slug
	// reserved is, by principal, what the copies being made without a
	// layer's lock (prepare) will add: counted by used until each is
	// installed or dropped (mu).
	reserved map[string]int64
}

// idKeyName is the file in a store's folder holding its idKey.
const idKeyName = "idkey"

// Open opens (creating) the store at dir and reads back every layer in it.
func Open(dir string, maxBytes int64, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("held changes: %w", err)
	}
	key, err := secretkey.Load(filepath.Join(dir, idKeyName), 32)
	if err != nil {
		return nil, fmt.Errorf("held changes: %w", err)
	}
	s := &Store{dir: dir, log: log, layers: map[string]*Layer{}, idKey: key, reserved: map[string]int64{}}
	s.maxBytes.Store(maxBytes)
	ps, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("held changes: %w", err)
	}
	for _, p := range ps {
		if !p.IsDir() {
			continue
		}
		slugs, err := os.ReadDir(filepath.Join(dir, p.Name()))
		if err != nil {
			return nil, fmt.Errorf("held changes: %w", err)
		}
		for _, sl := range slugs {
			if !sl.IsDir() {
				continue
			}
			l, err := s.open(p.Name(), sl.Name())
			if err != nil {
				return nil, err
			}
			s.layers[p.Name()+"\x00"+sl.Name()] = l
		}
	}
	return s, nil
}

// Close closes every layer.
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.layers {
		l.close()
	}
}

// Get returns principal's layer in slug, or nil when it holds nothing there.
func (s *Store) Get(principal, slug string) *Layer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.layers[principal+"\x00"+slug]
}

// Ensure returns principal's layer in slug, making it when needed.
func (s *Store) Ensure(principal, slug string) (*Layer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := principal + "\x00" + slug
	if l := s.layers[k]; l != nil {
		return l, nil
	}
	if !validName(principal) || !validName(slug) {
		return nil, fmt.Errorf("held changes: %q/%q cannot name a folder", principal, slug)
	}
	l, err := s.open(principal, slug)
	if err != nil {
		return nil, err
	}
	s.layers[k] = l
	return l, nil
}

// Layers returns every layer, ordered by principal then slug.
func (s *Store) Layers() []*Layer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Layer, 0, len(s.layers))
	for _, l := range s.layers {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Principal != out[j].Principal {
			return out[i].Principal < out[j].Principal
		}
		return out[i].Slug < out[j].Slug
	})
	return out
}

// used is what principal holds in all its layers, in bytes: its held
// files' lengths, its records, and nameCost for each name it holds.
func (s *Store) used(principal string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usedLocked(principal)
}

// reserve counts n bytes for principal, about to be copied without a
// layer's lock, when they fit its bound; it reports whether they did.
// Before, each copy was checked alone and made before any was counted:
// 20 opens of one 60 MB file at once each copied it, 880 MB in
// state_dir under a 100 MB bound until they were refused (found by a
// red-team pass).
func (s *Store) reserve(principal string, n int64) bool {
	m := s.maxBytes.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.usedLocked(principal); m > 0 && (u >= m || u+n > m) {
		return false
	}
	s.reserved[principal] += n
	return true
}

// unreserve gives back what reserve counted.
func (s *Store) unreserve(principal string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reserved[principal] -= n; s.reserved[principal] <= 0 {
		delete(s.reserved, principal)
	}
}

func (s *Store) usedLocked(principal string) int64 {
	n := s.reserved[principal]
	for _, l := range s.layers {
		if l.Principal == principal {
			n += l.bytes.Load() + l.logBytes.Load() + nameCost*l.idx.n.Load()
			if l.idx.n.Load() == 0 {
				l.xbytes.Store(0)
			}
			n += l.xbytes.Load()
		}
	}
	return n
}

// nameCost is what the bound counts for each name a layer holds (made,
// copied up, renamed or deleted), beside its length and its records:
// about what the daemon keeps in memory for it (222 bytes a new empty
// file, BenchmarkNameMemory). Before, a name counted only its record,
// some 57 bytes, and the default bound of 1 GiB let an agent make 18
// million empty files, some 4 GB of the daemon's memory; now 3.4 million
// (TestNamesCountAgainstTheBound).
const nameCost = 256

// CheckQuota returns ErrQuota when principal already holds the bound.
func (s *Store) CheckQuota(principal string) error {
	if m := s.maxBytes.Load(); m > 0 && s.used(principal) >= m {
		return ErrQuota
	}
	return nil
}

// checkAdd returns ErrQuota when principal holds the bound already, or
// would hold more than it with n bytes more.
func (s *Store) checkAdd(principal string, n int64) error {
	m := s.maxBytes.Load()
	if m <= 0 {
		return nil
	}
	if u := s.used(principal); u >= m || u+n > m {
		return ErrQuota
	}
	return nil
}

// CheckSize returns ErrQuota when making rel, now cur bytes long, size
// bytes long would take the layer's principal past max_bytes: a write,
// truncate, fallocate or copy that grows a held file is checked by what
// it adds, as an open is by what is held already. Keeping or shrinking a
// file is always allowed. A growth it allows is counted at once (Wrote
// sets the file's real size when its writer is done), so files growing
// side by side through open descriptors are bounded together. rel is ""
// for a file with no name left (removed while open, or made with
// O_TMPFILE), ino its inode number: it is counted while a descriptor
// is open for writing on it (Closed of the last drops it), so that
// files with no name are bounded too (before, each could grow to the
// whole bound, and an agent holding many put that times their number
// into state_dir; found by a red-team pass).
func (l *Layer) CheckSize(rel string, ino uint64, cur, size int64) error {
	m := l.store.maxBytes.Load()
	if m <= 0 || size <= cur {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	was := cur
	named := rel != "" && l.upper.m[rel] == unix.S_IFREG
	switch {
	case named:
		was = l.sizes.m[rel] // none yet for a file made since the last Wrote
	case rel == "" && l.writers[ino] > 0:
		was = l.nameless[ino]
	}
	if l.store.used(l.Principal)-was+size > m {
		return ErrQuota
	}
	switch {
	case named && size > was:
		l.bytes.Add(size - was)
		l.sizes.set(rel, size)
	case rel == "" && l.writers[ino] > 0 && size > was:
		if l.nameless == nil {
			l.nameless = map[uint64]int64{}
		}
		l.bytes.Add(size - was)
		l.nameless[ino] = size
	}
	return nil
}

// SetMaxBytes changes the bound (a reload of [review] max_bytes): the
// next held open, create or copy-up is checked against it. Nothing
// already held is dropped when it is lowered below what a principal
// holds; that principal's next held write fails with ErrQuota.
func (s *Store) SetMaxBytes(n int64) { s.maxBytes.Store(n) }

func validName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

// Where a path is for the layer's principal.
type Where int

const (
	Lower  Where = iota // the backing file (or nothing there)
	Upper               // the layer's own entry
	Absent              // hidden: deleted by the principal
)

// Layer is one principal's held state in one source. Its methods are safe
// for concurrent use.
type Layer struct {
	Principal, Slug string
	dir             string
	store           *Store
	up              *mounts.Root

	mu    sync.RWMutex
	upper nameMap[uint32] // rel → S_IFMT of tree/'s entry
	base  pathMap[Base]   // copied-up rel → backing state it was copied from
	gone  nameMap[Base]   // hidden backing rel → what it was
	idx   *nameIndex      // upper ∪ gone by folder (index.go)
	from  pathMap[string] // held rel → backing rel a rename brought it from
	// aside maps the backing names an approval moved files aside to
	// (reserved.StagingPrefix) to where they came from, until they land or
	// go back (Stage, RecoverAside).
	aside map[string]string
	// temps are the backing names an approval is writing or linking a
	// file under before it renames it over its own name (applier), until
	// that rename or its removal: what a kill left of them goes at the
	// next start (RecoverAside).
	temps map[string]bool
	// approving are the units (by path) an approval is landing, from
	// before it touches a backing file until the layer has forgotten
	// them: what a kill left recorded is finished or left held at the
	// next start (RecoverAside).
	approving map[string]bool
	since     pathMap[time.Time]
	sizes     pathMap[int64]
	// writers counts the principal's descriptors open for writing on
	// tree/'s regular files, by inode number (OpenFile, MakeFile, Closed).
	writers map[uint64]int
	// readers counts those open for reading only (Reading, ClosedReader).
	readers map[uint64]int
	// nameless is what the bound counts, by inode number, of files with
	// no name the principal holds open (dropped when the last descriptor,
	// for writing or reading, is closed): what CheckSize counted of its
	// growth, and what it held when its last name went.
	nameless map[uint64]int64
	// landed remembers, by tree/ inode number, where an approval landed
	// a held file whose other names are still held, so that approving
	// them links them to it (Apply; mu).
	landed map[uint64]*landing
	// memo remembers digests of tree/'s files (upperDigest).
	memoMu sync.Mutex
	memo   map[string]digestMemo
	// trash lists files of tmp/ that removeFileLocked moved out of tree/,
	// for emptyTrash to remove (trashMu).
	trashMu sync.Mutex
	trash   []string
	meta    *os.File
	seq     atomic.Uint64
	bytes   atomic.Int64
	// logBytes is the size of records.jsonl, counted in the principal's
	// bound; compactAt, the size that has it compacted (mu).
	logBytes atomic.Int64
	// xbytes counts the extended attributes in tree/ (names and values),
	// in the principal's bound: those of the held files as the layer was
	// opened, then what the principal sets (SetXattr) or removes
	// (RemoveXattr). What a file discarded or approved takes with it is
	// given back once the layer holds no name, or at the next start.
	xbytes    atomic.Int64
	compactAt int64
	// snapshot is the size of records.jsonl when last compacted, and
	// snapEntries the records it held then (mu).
	snapshot    int64
	snapEntries int64
}

type record struct {
	K  string `json:"k"`           // base, gone, ungone, from, mv, drop, made, aside, unaside, temp, untemp, approving, approved
	P  string `json:"p,omitempty"` // path
	F  string `json:"f,omitempty"` // from (from, mv)
	B  *Base  `json:"b,omitempty"`
	At int64  `json:"at,omitempty"`
}

// A name is bytes, not text: a record of a name that is not UTF-8 read
// back another name after a restart (a held delete of z\xff came back as
// one of z\uFFFD, and approving it removed that file, which the principal
// never touched). Records keep names as rawname.Enc writes them.

// MarshalJSON writes r with its names as rawname.Enc keeps them.
func (r record) MarshalJSON() ([]byte, error) {
	type plain record
	r.P, r.F = rawname.Enc(r.P), rawname.Enc(r.F)
	return json.Marshal(plain(r))
}

// UnmarshalJSON reads r back, names as they were.
func (r *record) UnmarshalJSON(b []byte) error {
	type plain record
	if err := json.Unmarshal(b, (*plain)(r)); err != nil {
		return err
	}
	r.P, r.F = rawname.Dec(r.P), rawname.Dec(r.F)
	return nil
}

func (s *Store) open(principal, slug string) (*Layer, error) {
	dir := filepath.Join(s.dir, principal, slug)
	for _, d := range []string{filepath.Join(dir, "tree"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("held changes of %s in %s: %w", principal, slug, err)
		}
	}
	// tree/ itself is searchable by everyone so that a held file keeps its
	// own mode bits as the only check (the kernel checks the caller against
	// the attributes the mount reports); the store's folder above stays
	// private.
	os.Chmod(filepath.Join(dir, "tree"), 0o755)
	os.RemoveAll(filepath.Join(dir, "tmp"))
	os.MkdirAll(filepath.Join(dir, "tmp"), 0o700)
	up, err := mounts.OpenRoot(filepath.Join(dir, "tree"))
	if err != nil {
		return nil, fmt.Errorf("held changes of %s in %s: %w", principal, slug, err)
	}
	l := &Layer{Principal: principal, Slug: slug, dir: dir, store: s, up: up,
		base: newPathMap[Base](),
		from: newPathMap[string](), aside: map[string]string{}, temps: map[string]bool{}, approving: map[string]bool{}, since: newPathMap[time.Time](), sizes: newPathMap[int64](),
		writers: map[uint64]int{}, readers: map[uint64]int{}, memo: map[string]digestMemo{}, landed: map[uint64]*landing{}}
	l.idx = newNameIndex(func(p string) bool {
		_, up := l.upper.m[p]
		_, g := l.gone.m[p]
		return up || g
	})
	l.upper, l.gone = newNameMap[uint32](l.idx), newNameMap[Base](l.idx)
	if err := l.walk("", map[uint64]bool{}); err != nil {
		return nil, fmt.Errorf("held changes of %s in %s: %w", principal, slug, err)
	}
	if err := l.replay(); err != nil {
		return nil, fmt.Errorf("held changes of %s in %s: %w", principal, slug, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "records.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("held changes of %s in %s: %w", principal, slug, err)
	}
	l.meta = f
	if st, err := f.Stat(); err == nil {
		l.logBytes.Store(st.Size())
	}
	l.compactAt = l.threshold(0)
	if l.logBytes.Load() > l.compactAt {
		// A log grown long by a past session: start from its state.
		if err := l.compactLocked(); err != nil {
			l.close()
			return nil, fmt.Errorf("held changes of %s in %s: %w", principal, slug, err)
		}
	}
	return l, nil
}

// minCompact is the size of records.jsonl below which it is never
// rewritten.
const minCompact = 1 << 20

// compactLocked rewrites records.jsonl as the records of the layer's
// state alone, so that the log grows with what the principal holds, not
// with everything it ever did (a loop of create and unlink held nothing
// but wrote records without end). It replaces the file whole: a kill
// midway leaves the old one (l.mu held).
func (l *Layer) compactLocked() error {
	var buf bytes.Buffer
	put := func(r record) {
		b, _ := json.Marshal(r)
		buf.Write(b)
		buf.WriteByte('\n')
	}
	for p, b := range l.base.m {
		put(record{K: "base", P: p, B: &b})
	}
	for p, b := range l.gone.m {
		put(record{K: "gone", P: p, B: &b})
	}
	for p, f := range l.from.m {
		put(record{K: "from", P: p, F: f})
	}
	for tmp, from := range l.aside {
		put(record{K: "aside", P: tmp, F: from})
	}
	for tmp := range l.temps {
		put(record{K: "temp", P: tmp})
	}
	for p := range l.approving {
		put(record{K: "approving", P: p})
	}
	for p, t := range l.since.m {
		// Last: sets each path's time (the records above set none).
		put(record{K: "made", P: p, At: t.UnixNano()})
	}
	name := filepath.Join(l.dir, "records.jsonl")
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(buf.Bytes())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(l.dir); err == nil {
		d.Sync()
		d.Close()
	}
	nf, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if l.meta != nil {
		l.meta.Close()
	}
	l.meta = nf
	l.logBytes.Store(int64(buf.Len()))
	l.snapshot = int64(buf.Len())
	l.snapEntries = l.stateEntriesLocked()
	l.compactAt = l.threshold(l.snapshot)
	return nil
}

// stateEntriesLocked is how many records compactLocked writes for the
// layer's state now (l.mu held).
func (l *Layer) stateEntriesLocked() int64 {
	return int64(len(l.base.m) + len(l.gone.m) + len(l.from.m) + len(l.aside) + len(l.temps) + len(l.approving) + len(l.since.m))
}

// stateBytesLocked estimates the size of records.jsonl compacted now:
// its records at the size they had at the last compaction (128 bytes
// each before any; l.mu held).
func (l *Layer) stateBytesLocked() int64 {
	avg := int64(128)
	if l.snapEntries > 0 {
		avg = max(l.snapshot/l.snapEntries, 1)
	}
	return l.stateEntriesLocked() * avg
}

// threshold is the size of records.jsonl that has it compacted, for a
// state that takes size bytes: four times that, and at least a quarter
// of the principal's bound (capped at minCompact), since the log counts
// in it.
func (l *Layer) threshold(size int64) int64 {
	least := int64(minCompact)
	if m := l.store.maxBytes.Load(); m > 0 && m/4 < least {
		least = m / 4
	}
	return max(least, 4*size)
}

func (l *Layer) close() {
	if l.meta != nil {
		l.meta.Close()
	}
	l.up.Close()
}

// walk fills upper from tree/ (at open), and counts the extended
// attributes of each file once however many names it has (seen: the
// inode numbers counted).
func (l *Layer) walk(rel string, seen map[uint64]bool) error {
	fd, err := l.up.Open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), rel)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		crel := join(rel, name)
		st, err := l.up.Lstat(crel)
		if err != nil {
			continue
		}
		l.upper.set(crel, st.Mode&unix.S_IFMT)
		if t := st.Mode & unix.S_IFMT; hasXattrs(t) && (t == unix.S_IFDIR || st.Nlink == 1 || !seen[st.Ino]) {
			seen[st.Ino] = true
			l.xbytes.Add(xattrBytes(l.up, crel))
		}
		if t := st.Mode & unix.S_IFMT; t == unix.S_IFREG || t == unix.S_IFLNK {
			// A symlink counts its target's length (Make).
			l.sizes.set(crel, st.Size)
			l.bytes.Add(st.Size)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := l.walk(crel, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

// replay reads records.jsonl back; a torn last line is skipped.
func (l *Layer) replay() error {
	f, err := os.Open(filepath.Join(l.dir, "records.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r record
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue
		}
		l.applyRecord(r)
	}
	// Records for paths tree/ does not have (a copy-up killed before its
	// rename) say nothing.
	for p := range l.base.m {
		if _, ok := l.upper.m[p]; !ok {
			l.base.del(p)
		}
	}
	for p := range l.from.m {
		if _, ok := l.upper.m[p]; !ok {
			l.from.del(p)
		}
	}
	return sc.Err()
}

func (l *Layer) applyRecord(r record) {
	at := time.Unix(0, r.At)
	switch r.K {
	case "base":
		if r.B != nil {
			l.base.set(r.P, *r.B)
		}
		l.since.set(r.P, at)
	case "made":
		l.since.set(r.P, at)
	case "gone":
		if r.B != nil {
			l.gone.set(r.P, *r.B)
		}
		l.since.set(r.P, at)
	case "ungone":
		l.gone.del(r.P)
	case "from":
		l.from.set(r.P, r.F)
		l.since.set(r.P, at)
	case "mv":
		l.base.move(r.F, r.P)
		l.from.move(r.F, r.P)
		l.since.move(r.F, r.P)
	case "swap":
		l.base.swap(r.F, r.P)
		l.from.swap(r.F, r.P)
		l.since.swap(r.F, r.P)
	case "aside":
		l.aside[r.P] = r.F
	case "unaside":
		delete(l.aside, r.P)
	case "temp":
		l.temps[r.P] = true
	case "untemp":
		delete(l.temps, r.P)
	case "approving":
		l.approving[r.P] = true
	case "approved":
		delete(l.approving, r.P)
	case "drop":
		l.base.drop(r.P)
		l.from.drop(r.P)
		for _, k := range l.since.keysUnder(r.P) {
			if _, g := l.gone.m[k]; !g {
				l.since.del(k) // what was deleted below keeps its time
			}
		}
	}
}

// log appends r (with the time) and applies it (l.mu held). A log grown
// to four times what the state needs is compacted.
func (l *Layer) log(r record) {
	r.At = time.Now().UnixNano()
	l.applyRecord(r)
	b, _ := json.Marshal(r)
	if err := l.write(append(b, '\n')); err != nil {
		l.store.log.Error("held changes: writing a record failed", "principal", l.Principal, "slug", l.Slug, "err", err)
		return
	}
	l.maybeCompactLocked()
}

// logFirst writes rs and only then applies them: when they cannot be
// written (state_dir full) it returns the error and nothing changes. A
// change that has done nothing else yet uses it, so that it fails as a
// whole: a held rm of a backing file answered success with state_dir
// full, and a restart brought the file back (found by a data-integrity
// pass). Other changes have made their copy already, and log them with
// log (l.mu held).
func (l *Layer) logFirst(rs ...record) error {
	var b []byte
	now := time.Now().UnixNano()
	for i := range rs {
		rs[i].At = now
		line, _ := json.Marshal(rs[i])
		b = append(append(b, line...), '\n')
	}
	if err := l.write(b); err != nil {
		return err
	}
	for _, r := range rs {
		l.applyRecord(r)
	}
	l.maybeCompactLocked()
	return nil
}

// write appends b, the lines of records, to records.jsonl and counts
// them. A write that fails is cut off, back to logBytes (the file's
// length: set at open and at compaction, and counted here): a torn line
// would swallow the record after it at the next start (l.mu held).
func (l *Layer) write(b []byte) error {
	if _, err := l.meta.Write(b); err != nil {
		unix.Ftruncate(int(l.meta.Fd()), l.logBytes.Load())
		return err
	}
	l.logBytes.Add(int64(len(b)))
	return nil
}

// maybeCompactLocked compacts records.jsonl once it has grown enough, with
// what it holds applied (l.mu held).
func (l *Layer) maybeCompactLocked() {
	n := l.logBytes.Load()
	if n > l.compactAt || n > l.snapshot+l.snapshot/4+4096 && l.store.CheckQuota(l.Principal) != nil {
		// Past its bound the principal makes room by removing; its log
		// is compacted as soon as that would give some back.
		if err := l.compactLocked(); err != nil {
			l.store.log.Error("held changes: compacting the records failed", "principal", l.Principal, "slug", l.Slug, "err", err)
			l.compactAt = max(l.compactAt, 2*l.logBytes.Load())
		}
	}
}

// moveWith renames from and everything below it to to in m; swapWith
// exchanges a and b with everything below them; dropWith deletes p and
// everything below it. They write through set and del (the maps keep
// an index), and walk m only when deep says it may have keys below the
// names (pathMap, nameMap).
func moveWith[V any](m map[string]V, from, to string, deep bool, set func(string, V), del func(string)) {
	if !deep {
		if v, ok := m[from]; ok {
			del(from)
			set(to, v)
		}
		return
	}
	moved := map[string]V{}
	for k, v := range m {
		if under(k, from) {
			moved[to+k[len(from):]] = v
			del(k)
		}
	}
	for k, v := range moved {
		set(k, v)
	}
}

func swapWith[V any](m map[string]V, a, b string, deep bool, set func(string, V), del func(string)) {
	if !deep {
		va, oka := m[a]
		vb, okb := m[b]
		if oka {
			del(a)
		}
		if okb {
			del(b)
		}
		if oka {
			set(b, va)
		}
		if okb {
			set(a, vb)
		}
		return
	}
	ma, mb := map[string]V{}, map[string]V{}
	for k, v := range m {
		switch {
		case under(k, a):
			ma[b+k[len(a):]] = v
			del(k)
		case under(k, b):
			mb[a+k[len(b):]] = v
			del(k)
		}
	}
	for k, v := range ma {
		set(k, v)
	}
	for k, v := range mb {
		set(k, v)
	}
}

func dropWith[V any](m map[string]V, p string, deep bool, del func(string)) {
	if _, ok := m[p]; ok {
		del(p)
	}
	if !deep {
		return
	}
	for k := range m {
		if under(k, p) {
			del(k)
		}
	}
}

// under reports whether k is p or below it.
func under(k, p string) bool { return k == p || strings.HasPrefix(k, p+"/") }

// Upper is the root of the layer's own files (tree/).
func (l *Layer) Upper() *mounts.Root { return l.up }

// UpperFiles lists the regular files of the layer's own tree, which the
// principal sees in place of whatever the backing files hold there; in no
// order.
func (l *Layer) UpperFiles() []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []string
	for rel, t := range l.upper.m {
		if t == unix.S_IFREG {
			out = append(out, rel)
		}
	}
	return out
}

// Where says where the principal sees rel.
func (l *Layer) Where(rel string) Where {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.whereLocked(rel)
}

func (l *Layer) whereLocked(rel string) Where {
	if _, ok := l.upper.m[rel]; ok {
		return Upper
	}
	if len(l.gone.m) == 0 {
		return Lower
	}
	if _, ok := l.gone.m[rel]; ok {
		return Absent
	}
	for i := len(rel) - 1; i > 0; i-- {
		if rel[i] == '/' {
			if _, ok := l.gone.m[rel[:i]]; ok {
				// Below a deleted backing folder (remade or not): nothing
				// of it shows.
				return Absent
			}
		}
	}
	return Lower
}

// goneAtOrAboveLocked reports whether the backing rel or a folder above
// it is gone: a folder of the layer there shows none of the backing
// folder's names. Before, one made inside a folder remade over a deleted
// one (mv b x; mkdir b b/b) listed the old b/b's names, and rmdir b/b
// said ENOTEMPTY (l.mu held).
func (l *Layer) goneAtOrAboveLocked(rel string) bool {
	if len(l.gone.m) == 0 {
		return false
	}
	for p := rel; ; p = parentOf(p) {
		if _, ok := l.gone.m[p]; ok {
			return true
		}
		if p == "" {
			return false
		}
	}
}

// Lstat stats rel as the principal sees it, and says which root holds it.
func (l *Layer) Lstat(lower *mounts.Root, rel string) (unix.Stat_t, *mounts.Root, error) {
	switch l.Where(rel) {
	case Upper:
		st, err := l.up.Lstat(rel)
		if err == nil {
			l.KeepIno(lower, rel, &st)
		}
		return st, l.up, err
	case Absent:
		return unix.Stat_t{}, nil, syscall.ENOENT
	}
	st, err := lower.Lstat(rel)
	return st, lower, err
}

// KeepIno gives st, the stat of rel in tree/, the device and inode number
// of the backing folder rel when tree/'s entry is that folder's structural
// copy, made in place and the backing folder still there: a folder keeps
// its inode number when the principal first writes in it (as on overlayfs),
// so the kernel keeps its node, and a process working inside it keeps its
// working folder (getcwd, "..") instead of finding it deleted. Files copied
// up get inode numbers of their own (see the README), as do renamed
// folders. Such a folder's mode and owner are the backing folder's, as
// they are now, unless the principal changed them: a copy keeps what
// the folder had when it was made, and the owner's later `chmod 700` of
// the backing folder must shut the principal out of it as it shuts out
// everyone else (the kernel checks permissions against what st says).
func (l *Layer) KeepIno(lower *mounts.Root, rel string, st *unix.Stat_t) {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || rel == "" {
		return
	}
	b, ok := l.copiedDir(rel)
	if !ok {
		return
	}
	lst, ok := stillDir(lower, rel, b)
	if !ok {
		return
	}
	st.Dev, st.Ino = lst.Dev, lst.Ino
	if st.Mode&0o7777 == b.Mode && st.Uid == b.UID && st.Gid == b.GID {
		st.Mode = st.Mode&unix.S_IFMT | lst.Mode&0o7777
		st.Uid, st.Gid = lst.Uid, lst.Gid
	}
}

// MovedIno gives st, the stat of tree/'s folder rel, the device and inode
// number of the backing folder the principal moved it from (a rename of
// it, or of a folder above it), while that folder is still there under
// its old name: the kernel keeps the node the folder had, as a rename on
// a plain folder does, so a process inside it keeps its working folder.
// Only for a mount that is the principal's alone (a view): elsewhere the
// backing folder still shows under its old name, with that number.
func (l *Layer) MovedIno(lower *mounts.Root, rel string, st *unix.Stat_t) {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || rel == "" {
		return
	}
	l.mu.RLock()
	b, ok := l.base.m[rel]
	_, up := l.upper.m[rel]
	origin := ""
	if ok && up && b.Ino != 0 && b.Type == unix.S_IFDIR {
		origin = l.originLocked(rel)
	}
	l.mu.RUnlock()
	if origin == "" {
		return
	}
	if lst, ok := stillDir(lower, origin, b); ok {
		st.Dev, st.Ino = lst.Dev, lst.Ino
	}
}

// copiedDir returns the base of rel when it is a backing folder the
// layer copied up (l.mu not held).
func (l *Layer) copiedDir(rel string) (Base, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	b, ok := l.base.m[rel]
	_, up := l.upper.m[rel]
	return b, ok && up && b.Ino != 0 && b.Type == unix.S_IFDIR
}

// stillDir returns the stat of the backing p when it is still b's
// folder (its device and inode number).
func stillDir(lower *mounts.Root, p string, b Base) (unix.Stat_t, bool) {
	lst, err := lower.Lstat(p)
	return lst, err == nil && lst.Dev == b.Dev && lst.Ino == b.Ino && lst.Mode&unix.S_IFMT == unix.S_IFDIR
}

// Direct reports whether a write the policy lets the principal make
// directly reaches, at the backing rel, what the principal sees there:
// rel is not the layer's own, and every folder above it is the backing
// folder of that name (Lower, or copied up in place and still it), not
// one the layer made, moved there or deleted. A direct-write name inside
// a folder the principal renamed or made under review has no backing
// place (before, `mv logs logs2` held, then a write to logs2/a.log,
// which a direct rule let through, answered ESTALE, and a create in a
// held-made folder ENOENT); such a write is held instead.
func (l *Layer) Direct(lower *mounts.Root, rel string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if len(l.upper.m) == 0 && len(l.gone.m) == 0 {
		return true
	}
	for p := rel; p != ""; p = parentOf(p) {
		switch l.whereLocked(p) {
		case Absent:
			return false
		case Upper:
			b, ok := l.base.m[p]
			if !ok || b.Absent || b.Ino == 0 || b.Type != unix.S_IFDIR {
				return false
			}
			if f, moved := l.from.m[p]; moved && f != p {
				return false
			}
			if _, ok := stillDir(lower, p, b); !ok {
				return false
			}
		}
	}
	return true // the top of the source is the backing one
}

// xattrBytes is the length of the names and values of rel's extended
// attributes in r (0 when it has none or they cannot be read).
func xattrBytes(r *mounts.Root, rel string) int64 {
	x, err := xattrsAt(r, rel)
	if err != nil {
		return 0
	}
	var n int64
	for k, v := range x {
		n += int64(len(k) + len(v))
	}
	return n
}

// xattrLen is the length of the value of rel's extended attribute name
// in r, or -1 when rel has none of that name.
func xattrLen(r *mounts.Root, rel, name string) int {
	n, err := r.Getxattr(rel, name, nil)
	if err != nil {
		return -1
	}
	return n
}

// SetXattr sets the extended attribute name of tree/'s rel to value
// (flags as setxattr(2)), counting what it adds in the principal's
// bound: ErrQuota, with nothing set, when that would pass it. Before,
// attributes were not counted, and an agent could keep about 4 KiB in
// attributes on each held name (a block on ext4) against the 256 bytes
// a name counts, some 16 times the bound in state_dir.
func (l *Layer) SetXattr(rel, name string, value []byte, flags int) error {
	grow := int64(len(name) + len(value))
	if old := xattrLen(l.up, rel, name); old >= 0 {
		grow -= int64(len(name) + old)
	}
	if m := l.store.maxBytes.Load(); m > 0 && grow > 0 && l.store.used(l.Principal)+grow > m {
		return ErrQuota
	}
	if err := l.up.Setxattr(rel, name, value, flags); err != nil {
		return err
	}
	l.xbytes.Add(grow)
	return nil
}

// RemoveXattr removes the extended attribute name of tree/'s rel and
// gives back what it counted.
func (l *Layer) RemoveXattr(rel, name string) error {
	old := xattrLen(l.up, rel, name)
	if err := l.up.Removexattr(rel, name); err != nil {
		return err
	}
	if old >= 0 && l.xbytes.Add(-int64(len(name)+old)) < 0 {
		// An attribute the copy-up brought from the backing file, which
		// was never counted: no credit for removing it.
		l.xbytes.Store(0)
	}
	return nil
}

// Root returns the root that holds rel for the principal, or ENOENT.
func (l *Layer) Root(lower *mounts.Root, rel string) (*mounts.Root, error) {
	switch l.Where(rel) {
	case Upper:
		return l.up, nil
	case Absent:
		return nil, syscall.ENOENT
	}
	return lower, nil
}

// XattrRoots is Root for the extended attributes of rel as caller (a
// uid) reads them: names answers every name but the POSIX ACLs', acls
// those. A folder copied up in place answers from the backing folder,
// as KeepIno shows that folder's mode and owner: its ACLs whenever the
// caller does not own it, since then it cannot have changed them (only
// a folder's owner may), and every name when the copy's attributes are
// still as they were copied. The kernel checks access against the ACL
// the daemon answers, so before, an ACL entry the owner added to shut
// the agent out of such a folder (setfacl -m u:1001:---) did not, in
// its view or in the main mount; and an agent that set a user.*
// attribute on the folder first would have kept the copy's ACLs, had
// every name followed the copy once any changed.
func (l *Layer) XattrRoots(lower *mounts.Root, rel string, caller uint32) (names, acls *mounts.Root, err error) {
	r, err := l.Root(lower, rel)
	if err != nil || r != l.up || rel == "" {
		return r, r, err
	}
	b, ok := l.copiedDir(rel)
	if !ok {
		return r, r, nil
	}
	lst, ok := stillDir(lower, rel, b)
	if !ok {
		return r, r, nil
	}
	if upperXattrs(l.up, rel) == b.Xattrs {
		return lower, lower, nil
	}
	if caller != 0 && caller != lst.Uid {
		return r, lower, nil
	}
	return r, r, nil // the principal's own: it changed them
}

// Tree opens paths as the principal sees them, in the layer's tree where
// it holds them and in the backing folder otherwise, so that a check of
// file permissions (package asuser) meets the folders the principal
// meets on the mount.
type Tree struct {
	l     *Layer
	lower *mounts.Root
}

// Tree returns the principal's tree over lower.
func (l *Layer) Tree(lower *mounts.Root) Tree { return Tree{l, lower} }

// Open opens rel as the principal sees it.
func (t Tree) Open(rel string, flags int, mode uint32) (int, error) {
	r, err := t.l.Root(t.lower, rel)
	if err != nil {
		return -1, err
	}
	return r.Open(rel, flags, mode)
}

// Entry is one name of a merged folder.
type Entry struct {
	Name string
	St   unix.Stat_t
	Root *mounts.Root
}

// List lists the folder rel as the principal sees it: tree/'s entries,
// then the backing folder's that are neither gone nor shadowed.
func (l *Layer) List(lower *mounts.Root, rel string) ([]Entry, error) {
	l.mu.RLock()
	w := l.whereLocked(rel)
	opaque := l.goneAtOrAboveLocked(rel)
	l.mu.RUnlock()
	if rel == "" {
		w = Upper // the source's top: tree/ itself, over the backing root
	}
	var out []Entry
	seen := map[string]bool{}
	switch w {
	case Absent:
		return nil, syscall.ENOENT
	case Upper:
		ents, err := listRoot(l.up, rel)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			seen[e.Name] = true
			l.KeepIno(lower, join(rel, e.Name), &e.St)
			out = append(out, e)
		}
		if opaque {
			return out, nil
		}
		if _, err := lower.Lstat(rel); err != nil {
			return out, nil
		}
	}
	ents, err := listRoot(lower, rel)
	if err != nil {
		if w == Upper {
			return out, nil
		}
		return nil, err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, e := range ents {
		crel := join(rel, e.Name)
		if seen[e.Name] {
			continue
		}
		if _, g := l.gone.m[crel]; g {
			continue
		}
		if _, u := l.upper.m[crel]; u {
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

func listRoot(r *mounts.Root, rel string) ([]Entry, error) {
	fd, err := r.Open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]Entry, 0, len(names))
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		out = append(out, Entry{Name: n, St: st, Root: r})
	}
	return out, nil
}

// exists reports whether the principal sees something at rel (l.mu held).
func (l *Layer) existsLocked(lower *mounts.Root, rel string) (unix.Stat_t, bool) {
	switch l.whereLocked(rel) {
	case Upper:
		st, err := l.up.Lstat(rel)
		return st, err == nil
	case Absent:
		return unix.Stat_t{}, false
	}
	st, err := lower.Lstat(rel)
	return st, err == nil
}

// baseOf describes the backing rel as it is now.
func baseOf(lower *mounts.Root, rel string) Base {
	st, err := lower.Lstat(rel)
	if err != nil {
		return Base{Absent: true}
	}
	b := Base{Type: st.Mode & unix.S_IFMT, Mode: st.Mode & 0o7777, Size: st.Size, UID: st.Uid, GID: st.Gid}
	if hasXattrs(b.Type) {
		x, _ := xattrsAt(lower, rel)
		b.Xattrs = xattrDigest(x)
	}
	switch b.Type {
	case unix.S_IFREG:
		b.Digest, _ = digestFile(lower, rel)
	case unix.S_IFLNK:
		if t, err := lower.Readlink(rel); err == nil {
			b.Digest = digestBytes(t)
		}
	}
	return b
}

func digestBytes(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

func digestFile(r *mounts.Root, rel string) (string, error) {
	fd, err := r.OpenNoAtime(rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// ensureDirs copies up every folder above rel (l.mu held), so tree/ can
// hold rel.
func (l *Layer) ensureDirs(lower *mounts.Root, rel string) error {
	dir := path.Dir(rel)
	if dir == "." {
		return nil
	}
	return l.ensureDir(lower, dir)
}

// ensureDir makes sure tree/ holds the folder dir and the folders above
// it, copying them structurally (l.mu held).
func (l *Layer) ensureDir(lower *mounts.Root, dir string) error {
	if dir == "" {
		return nil
	}
	segs := strings.Split(dir, "/")
	cur := ""
	for _, s := range segs {
		cur = join(cur, s)
		if t, ok := l.upper.m[cur]; ok {
			if t != unix.S_IFDIR {
				return syscall.ENOTDIR
			}
			continue
		}
		if l.whereLocked(cur) == Absent {
			return syscall.ENOENT
		}
		st, err := lower.Lstat(cur)
		if err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return syscall.ENOTDIR
		}
		if err := l.copyDir(lower, cur, &st); err != nil {
			return err
		}
	}
	return nil
}

// copyDir makes the structural copy of the backing folder rel (st): its
// mode, owner and extended attributes.
func (l *Layer) copyDir(lower *mounts.Root, rel string, st *unix.Stat_t) error {
	if _, err := l.up.Mkdir(rel, st.Mode&0o7777, int(st.Uid), int(st.Gid)); err != nil && !errors.Is(err, syscall.EEXIST) {
		return err
	}
	l.chmodExact(rel, st.Mode)
	x, err := xattrsAt(lower, rel)
	if err == nil {
		err = syncXattrs(lower, rel, l.up, rel)
	}
	if err != nil {
		l.up.Rmdir(rel)
		return err
	}
	l.upper.set(rel, unix.S_IFDIR)
	b := Base{Type: unix.S_IFDIR, Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid, Dev: st.Dev, Ino: st.Ino, Ctime: st.Ctim.Nano(), Xattrs: xattrDigest(x)}
	l.log(record{K: "base", P: rel, B: &b})
	return nil
}

// chmodExact sets the exact mode (a setgid parent or the umask could have
// changed it).
func (l *Layer) chmodExact(rel string, mode uint32) {
	if fd, err := l.up.OpenPath(rel); err == nil {
		unix.Chmod(mounts.ProcPath(fd), mode&0o7777)
		unix.Close(fd)
	}
}

// CopyUp makes sure tree/ holds rel (and its folders), copying the backing
// file when it is not there yet. A backing folder is copied as a folder
// alone (its entries stay where they are).
func (l *Layer) CopyUp(lower *mounts.Root, rel string) error {
	pre := l.prepare(lower, rel)
	defer pre.discard()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.copyUpPrepared(lower, rel, pre)
}

func (l *Layer) copyUpLocked(lower *mounts.Root, rel string) error {
	return l.copyUpPrepared(lower, rel, nil)
}

// copyUpPrepared is copyUpLocked with a copy of rel's content that
// prepare made (nil for none): it is taken when the backing file is
// still the one it copied, and the content is copied now otherwise.
func (l *Layer) copyUpPrepared(lower *mounts.Root, rel string, pre *precopy) error {
	switch l.whereLocked(rel) {
	case Upper:
		return nil
	case Absent:
		return syscall.ENOENT
	}
	if rel == "" {
		st, err := lower.Lstat("")
		if err != nil {
			return err
		}
		l.upper.set("", unix.S_IFDIR)
		b := Base{Type: unix.S_IFDIR, Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid}
		l.log(record{K: "base", P: "", B: &b})
		return nil
	}
	if err := l.ensureDirs(lower, rel); err != nil {
		return err
	}
	st, err := lower.Lstat(rel)
	if err != nil {
		return err
	}
	b := Base{Type: st.Mode & unix.S_IFMT, Mode: st.Mode & 0o7777, Size: st.Size, UID: st.Uid, GID: st.Gid}
	switch b.Type {
	case unix.S_IFDIR:
		return l.copyDir(lower, rel, &st)
	case unix.S_IFREG:
		// By what the copy adds: a copy that would take the principal
		// past its bound is not made, rather than made and then refused.
		// What a prepared copy reserved is given back first: it is
		// counted as held once installed.
		pre.release()
		if pre.fits(rel, &st) {
			if err := l.store.checkAdd(l.Principal, pre.c.held); err != nil {
				return err
			}
			err := l.installCopy(rel, pre.tmp, b, pre.c)
			pre.tmp = "" // moved into tree/, or removed
			return err
		}
		if err := l.store.checkAdd(l.Principal, st.Size); err != nil {
			return err
		}
		return l.copyFile(lower, rel, &st, b)
	case unix.S_IFLNK:
		t, err := lower.Readlink(rel)
		if err != nil {
			return err
		}
		b.Digest = digestBytes(t)
		if _, err := l.up.Symlink(string(t), rel, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	default:
		if _, err := l.up.Mknod(rel, st.Mode, int(st.Rdev), int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	l.upper.set(rel, b.Type)
	l.log(record{K: "base", P: rel, B: &b})
	l.setTimes(rel, &st)
	return nil
}

// copyFile copies the backing regular file rel into tree/ through a
// temporary file, hashing it on the way: its base.
func (l *Layer) copyFile(lower *mounts.Root, rel string, st *unix.Stat_t, b Base) error {
	tmp, c, err := l.copyContent(lower, rel, st, false)
	if err != nil {
		return err
	}
	return l.installCopy(rel, tmp, b, c)
}

// copied is what copyContent learnt of the content it copied.
type copied struct {
	digest, xattrs string
	size           int64 // the backing file's length
	held           int64 // the copy's length: size, or 0 for an empty one
}

// copyContent copies the backing regular file rel (st: its Lstat) to a
// new temporary file of the layer, with its owner, mode, extended
// attributes and times, and hashes it on the way. It touches no state
// of the layer: it runs with or without l.mu.
//
// With empty set the copy is left empty (an open that truncates is about
// to empty it): the content is only read for its digest, and the copy
// takes no room.
func (l *Layer) copyContent(lower *mounts.Root, rel string, st *unix.Stat_t, empty bool) (string, copied, error) {
	in, err := lower.OpenNoAtime(rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return "", copied{}, err
	}
	inf := os.NewFile(uintptr(in), rel)
	defer inf.Close()
	tmp := filepath.Join(l.dir, "tmp", strconv.FormatUint(l.seq.Add(1), 36)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", copied{}, err
	}
	h := sha256.New()
	var n int64
	if empty {
		n, err = io.Copy(h, inf)
	} else {
		n, err = copySparse(out, inf, h)
	}
	if err == nil {
		err = out.Chown(int(st.Uid), int(st.Gid))
	}
	if err == nil {
		err = unix.Fchmod(int(out.Fd()), st.Mode&0o7777)
	}
	var x map[string][]byte
	if err == nil {
		// After the owner and mode: a chown drops security.capability,
		// and an ACL sets the group bits of the mode.
		var have map[string][]byte
		if x, err = readXattrs(mounts.ProcPath(in)); err == nil {
			if have, err = readXattrs(mounts.ProcPath(int(out.Fd()))); err == nil {
				err = writeXattrs(mounts.ProcPath(int(out.Fd())), x, have)
			}
		}
	}
	if err == nil {
		ts := []unix.Timespec{st.Atim, st.Mtim}
		err = unix.UtimesNanoAt(unix.AT_FDCWD, mounts.ProcPath(int(out.Fd())), ts, 0)
	}
	out.Close()
	if err != nil {
		os.Remove(tmp)
		return "", copied{}, err
	}
	c := copied{digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), xattrs: xattrDigest(x), size: n, held: n}
	if empty {
		c.held = 0
	}
	return tmp, c, nil
}

// installCopy records the base of rel (b, with what c says of the
// content) and moves the temporary copy tmp to rel in tree/ (l.mu
// held). tmp is gone afterwards, moved or removed.
func (l *Layer) installCopy(rel, tmp string, b Base, c copied) error {
	b.Digest, b.Size, b.Xattrs = c.digest, c.size, c.xattrs
	l.log(record{K: "base", P: rel, B: &b})
	dfd, name, err := l.parentFd(rel)
	if err != nil {
		os.Remove(tmp)
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, dfd, name, unix.RENAME_NOREPLACE); err != nil {
		os.Remove(tmp)
		return err
	}
	l.upper.set(rel, unix.S_IFREG)
	l.sizes.set(rel, c.held)
	l.bytes.Add(c.held)
	return nil
}

// precopyMin is the length from which a copy-up copies a file's content
// before it takes the layer's lock (prepare): below it, the copy is as
// quick as the look that would let it go without the lock.
const precopyMin = 1 << 20

// precopy is a copy of a backing regular file's content made by prepare.
type precopy struct {
	rel string
	st  unix.Stat_t // the backing file as the copy found it
	tmp string      // the copy ("" once taken)
	c   copied
	// l and reserved: what the copy counts in its principal's bound
	// until it is installed or dropped (release).
	l        *Layer
	reserved int64
}

// prepare copies the backing regular file rel into a temporary file of
// the layer without l.mu, when it is precopyMin long or more and the
// principal sees it and has not copied it yet: the slow part of a
// copy-up, during which the principal's other requests on this source
// go on (before, an 800 MB copy-up held every other one for 2.3 s).
// copyUpPrepared takes the copy if the backing file is still the one it
// copied (same inode, length, modification and change times: a chmod,
// a chown or a write since changes the change time), and copies again
// under the lock otherwise. nil when there is nothing to prepare.
func (l *Layer) prepare(lower *mounts.Root, rel string) *precopy {
	return l.prepareCopy(lower, rel, false)
}

// prepareEmpty is prepare for an open that truncates the file: the copy
// has the file's owner, mode, attributes and times but no content (the
// content is read for the base's digest only), so an agent may empty a
// backing file however large, as `> file` does, without copying it or
// counting it in its bound.
func (l *Layer) prepareEmpty(lower *mounts.Root, rel string) *precopy {
	return l.prepareCopy(lower, rel, true)
}

func (l *Layer) prepareCopy(lower *mounts.Root, rel string, empty bool) *precopy {
	if rel == "" {
		return nil
	}
	// Most write-opens are of files held already: a map lookup tells,
	// before any system call.
	l.mu.Lock()
	where := l.whereLocked(rel)
	l.mu.Unlock()
	if where != Lower {
		return nil
	}
	st, err := lower.Lstat(rel)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size < precopyMin && !empty {
		return nil
	}
	add := st.Size
	if empty {
		add = 0
	}
	if !l.store.reserve(l.Principal, add) {
		return nil
	}
	tmp, c, err := l.copyContent(lower, rel, &st, empty)
	if err != nil {
		l.store.unreserve(l.Principal, add)
		return nil
	}
	p := &precopy{rel: rel, st: st, tmp: tmp, c: c, l: l, reserved: add}
	if now, err := lower.Lstat(rel); err != nil || !sameStat(&now, &st) {
		p.discard() // written while it was copied
		return nil
	}
	return p
}

// release gives back what p counted in the bound: the copy is about to
// be counted as installed, or is dropped.
func (p *precopy) release() {
	if p != nil && p.reserved != 0 {
		p.l.store.unreserve(p.l.Principal, p.reserved)
		p.reserved = 0
	}
}

// fits reports whether p is a copy of rel as st finds it now.
func (p *precopy) fits(rel string, st *unix.Stat_t) bool {
	return p != nil && p.tmp != "" && p.rel == rel && sameStat(&p.st, st)
}

// discard removes p's copy if it was not taken.
func (p *precopy) discard() {
	p.release()
	if p != nil && p.tmp != "" {
		os.Remove(p.tmp)
		p.tmp = ""
	}
}

// sameStat reports whether a and b are the same file, unchanged.
func sameStat(a, b *unix.Stat_t) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Size == b.Size && a.Mode == b.Mode &&
		a.Uid == b.Uid && a.Gid == b.Gid && a.Mtim == b.Mtim && a.Ctim == b.Ctim
}

func (l *Layer) parentFd(rel string) (int, string, error) {
	dir, name := path.Split(rel)
	fd, err := l.up.Open(strings.TrimSuffix(dir, "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
	return fd, name, err
}

func (l *Layer) setTimes(rel string, st *unix.Stat_t) {
	fd, err := l.up.OpenPath(rel)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	unix.UtimesNanoAt(fd, "", []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH)
}

// OpenFile opens rel for the principal with oflags and says whether the
// descriptor is tree/'s: a write (write set) copies the backing file up
// first and opens tree/'s copy; a read opens whichever file the principal
// sees. A regular file of tree/ opened for writing is counted until
// Closed: Apply and Discard refuse a change with such a file (ErrBusy),
// so nothing the principal writes through the descriptor afterwards is
// lost with it.
func (l *Layer) OpenFile(lower *mounts.Root, rel string, oflags int, write bool) (int, bool, error) {
	if !write {
		root, err := l.Root(lower, rel)
		if err != nil {
			return -1, false, err
		}
		fd, err := root.Open(rel, oflags, 0)
		return fd, root == l.up, err
	}
	var pre *precopy
	if oflags&unix.O_TRUNC != 0 && oflags&unix.O_ACCMODE != unix.O_RDONLY {
		pre = l.prepareEmpty(lower, rel)
	} else {
		pre = l.prepare(lower, rel)
	}
	defer pre.discard()
	l.mu.Lock()
	if err := l.copyUpPrepared(lower, rel, pre); err != nil {
		l.mu.Unlock()
		return -1, false, err
	}
	if l.upper.m[rel] != unix.S_IFREG {
		// A fifo's open may block until the other end comes: never under
		// the lock. It holds no content to lose.
		l.mu.Unlock()
		fd, err := l.up.Open(rel, oflags, 0)
		return fd, true, err
	}
	defer l.mu.Unlock()
	fd, err := l.up.Open(rel, oflags, 0)
	if err != nil {
		return -1, true, err
	}
	l.countLocked(fd)
	return fd, true, nil
}

// countLocked counts fd, open for writing on a regular file of tree/, as
// OpenFile does (l.mu held).
func (l *Layer) countLocked(fd int) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		l.writers[st.Ino]++
	}
}

// Closed tells the layer that a descriptor OpenFile or MakeFile returned
// for writing, on the file of inode number ino, was closed.
func (l *Layer) Closed(ino uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closedLocked(ino)
}

// closedLocked is Closed (l.mu held); it reports whether that was the
// last descriptor open for writing.
func (l *Layer) closedLocked(ino uint64) bool {
	if l.writers[ino] > 1 {
		l.writers[ino]--
		return false
	}
	delete(l.writers, ino)
	l.forgetNamelessLocked(ino)
	return true
}

// heldOpenLocked returns the inode number of tree/'s regular file rel
// when rel is its last name and the principal holds it open, else 0
// (l.mu held).
func (l *Layer) heldOpenLocked(rel string) uint64 {
	if len(l.writers) == 0 && len(l.readers) == 0 {
		return 0 // nothing open: no lstat per removal
	}
	st, err := l.up.Lstat(rel)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || l.writers[st.Ino]+l.readers[st.Ino] == 0 {
		return 0
	}
	return st.Ino
}

// unnamedLocked stops counting rel's size under its name, which went
// (l.mu held). When it was the last name of a file the principal holds
// open (ino, from heldOpenLocked before), the file stays while it does,
// and so does what it counts, as a file with no name: one removed (or
// renamed over) while open only for reading was counted by no one, and
// 30 of them held 240 MiB under a 10 MiB bound (a red-team pass).
func (l *Layer) unnamedLocked(rel string, ino uint64) {
	size := l.sizes.m[rel]
	l.sizes.del(rel)
	if ino == 0 {
		l.bytes.Add(-size)
		return
	}
	if l.nameless == nil {
		l.nameless = map[uint64]int64{}
	}
	was := l.nameless[ino]
	now := max(was, size)
	l.nameless[ino] = now
	l.bytes.Add(now - was - size)
}

// Reading counts a descriptor open for reading only on tree/'s regular
// file of inode number ino (one OpenFile returned from tree/):
// ClosedReader is told when it is closed.
func (l *Layer) Reading(ino uint64) {
	l.mu.Lock()
	l.readers[ino]++
	l.mu.Unlock()
}

// ClosedReader tells the layer that a descriptor OpenFile returned for
// reading a file of tree/, of inode number ino, was closed.
func (l *Layer) ClosedReader(ino uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.readers[ino] > 1 {
		l.readers[ino]--
		return
	}
	delete(l.readers, ino)
	l.forgetNamelessLocked(ino)
}

// forgetNamelessLocked stops counting the file ino had with no name once
// no descriptor of the principal holds it (l.mu held): its blocks are
// free then.
func (l *Layer) forgetNamelessLocked(ino uint64) {
	if l.writers[ino] > 0 || l.readers[ino] > 0 {
		return
	}
	if n, ok := l.nameless[ino]; ok {
		l.bytes.Add(-n)
		delete(l.nameless, ino)
	}
}

// Opened counts fd, a descriptor open for writing on a file of tree/
// that the caller opened itself (a file with no name, opened again
// through /proc/self/fd/N), as OpenFile counts its own: Closed is told
// when it is closed.
func (l *Layer) Opened(fd int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.countLocked(fd)
}

// Released is Closed for the principal's own file handle, at its release.
// When it was the last one open for writing and the file is a copy of a
// backing file the principal left as it was copied (an open for writing
// that wrote nothing), the copy goes: kept, it would show the principal
// that file's content as it was at the open for good, whatever changed
// on the backing side since, and no unit would list it for a reviewer
// to reject. Released returns the name of a copy it dropped. (Not at
// Closed: a descriptor the daemon closes on the way, as when an open
// answers ESTALE so that the kernel looks the copy up, must leave the
// copy for the open that follows.)
func (l *Layer) Released(rel string, ino uint64) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closedLocked(ino) {
		return nil
	}
	// rel, as the handle's node names it, is the file only while it is
	// still this inode: a single name (untouchedLocked wants one link),
	// so no other name needs looking for.
	st, ok := l.untouchedLocked(rel)
	if !ok || st.Ino != ino || l.dropCopyLocked(rel) != nil {
		return nil
	}
	l.pruneUpLocked(path.Dir(rel))
	return []string{rel}
}

// PruneUntouched drops every copy of a backing file (regular or symbolic
// link) the principal left exactly as it was copied and holds open for
// writing nowhere — copied up for a change that changed nothing (a chmod
// to the mode it had, a file copied with the folder it was in) — and the
// folder copies that hold nothing of the layer and keep their base's
// attributes (pruneLocked). No unit lists such a copy, so no
// reject would clear it, and kept it would show the principal the file
// as it was when copied, whatever changed on the backing side since. It
// returns the names it dropped.
func (l *Layer) PruneUntouched() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for p := range l.upper.m {
		st, ok := l.untouchedLocked(p)
		if !ok || l.writers[st.Ino] > 0 || l.dropCopyLocked(p) != nil {
			continue
		}
		out = append(out, p)
	}
	// Then every folder copy that holds nothing of the layer, deepest
	// first (a folder copied up for a change since undone, or for names
	// made and deleted in it).
	var dirs []string
	for p, t := range l.upper.m {
		if t == unix.S_IFDIR {
			dirs = append(dirs, p)
		}
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	for _, p := range dirs {
		if l.pruneLocked(p) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	// An approval or a rejection gives room back: a principal at its
	// bound through records (many names) made none while every write
	// it tried was refused before a record was logged, so its log was
	// compacted only at a restart and every held write answered EDQUOT
	// until then (found by a red-team pass).
	// And a log mostly of what is gone (a rejection of 150,000 names
	// left 8.4 MB of records with nothing held, below the bound: the
	// principal got EDQUOT on a 3 MB copy-up until a restart; a red-team
	// pass) is compacted once it is past twice what its state would
	// take: by halves, as approve --all empties a layer unit by unit.
	if n := l.logBytes.Load(); n > l.snapshot && (l.store.CheckQuota(l.Principal) != nil || n > 2*l.stateBytesLocked()+4096) {
		if err := l.compactLocked(); err != nil {
			l.store.log.Error("held changes: compacting the records failed", "principal", l.Principal, "slug", l.Slug, "err", err)
		}
	}
	return out
}

// maxUntouched bounds the copies untouchedLocked compares with their
// base: a larger one is kept (its unit, if any, says whether it changed).
const maxUntouched = 64 << 20

// untouchedLocked reports whether tree/'s rel is a regular file or a
// symbolic link copied up from the backing one at rel and still exactly
// as it was copied — content or target, mode, owner, extended
// attributes, one name — and returns its stat in tree/ (l.mu held).
func (l *Layer) untouchedLocked(rel string) (unix.Stat_t, bool) {
	b, ok := l.base.m[rel]
	if !ok || b.Absent || b.Type != l.upper.m[rel] || b.Size > maxUntouched {
		return unix.Stat_t{}, false
	}
	if b.Type != unix.S_IFREG && b.Type != unix.S_IFLNK {
		return unix.Stat_t{}, false
	}
	if _, g := l.gone.m[rel]; g || l.originLocked(rel) != "" {
		return unix.Stat_t{}, false
	}
	st, err := l.up.Lstat(rel)
	if err != nil || st.Nlink != 1 || st.Uid != b.UID || st.Gid != b.GID {
		return st, false
	}
	if b.Type == unix.S_IFLNK {
		t, err := l.up.Readlink(rel)
		return st, err == nil && digestBytes(t) == b.Digest
	}
	if st.Size != b.Size || st.Mode&0o7777 != b.Mode || upperXattrs(l.up, rel) != b.Xattrs {
		return st, false
	}
	d, err := digestFile(l.up, rel)
	return st, err == nil && d == b.Digest
}

// dropCopyLocked removes tree/'s file or link rel from the layer: the
// principal sees what the backing side has there again (l.mu held).
func (l *Layer) dropCopyLocked(rel string) error {
	if err := l.up.Unlink(rel); err != nil {
		return err
	}
	l.upper.del(rel)
	l.bytes.Add(-l.sizes.m[rel])
	l.sizes.del(rel)
	l.log(record{K: "drop", P: rel})
	return nil
}

// pruneUpLocked prunes the folder copy dir and those above it, up to the
// first that stays (l.mu held).
func (l *Layer) pruneUpLocked(dir string) {
	for ; dir != "." && dir != ""; dir = path.Dir(dir) {
		if !l.pruneLocked(dir) {
			return
		}
	}
}

// busyLocked returns ErrBusy when a regular file of tree/ at rel or below
// it is open for writing by the principal (l.mu held).
func (l *Layer) busyLocked(rel string) error {
	if len(l.writers) == 0 {
		return nil
	}
	for p, t := range l.upper.m {
		if t != unix.S_IFREG || p != rel && !strings.HasPrefix(p, rel+"/") && rel != "" {
			continue
		}
		if st, err := l.up.Lstat(p); err == nil && l.writers[st.Ino] > 0 {
			return fmt.Errorf("%s://%s: %w", l.Slug, p, ErrBusy)
		}
	}
	return nil
}

// Busy returns ErrBusy when the principal has a held file of c open for
// writing: approving or rejecting c must wait until it is closed.
func (l *Layer) Busy(c Change) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.busyLocked(c.Path)
}

// MakeFile is Make for a regular file made open for writing: mk returns
// its descriptor, which is counted as OpenFile counts one.
func (l *Layer) MakeFile(lower *mounts.Root, rel string, mk func(up *mounts.Root) (int, error)) (int, error) {
	fd := -1
	err := l.Make(lower, rel, func(up *mounts.Root) (err error) {
		if fd, err = mk(up); err == nil {
			l.countLocked(fd)
		}
		return err
	})
	if err != nil && fd >= 0 {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			l.Closed(st.Ino)
		}
		unix.Close(fd)
		fd = -1
	}
	return fd, err
}

// MakeNameless opens a file with no name (O_TMPFILE) in the folder dir
// of tree/ with mk, copying the folder up first (structurally, as Make
// does for the folders of a new name); the descriptor is counted as
// MakeFile counts one. The file enters the layer only when Make links it
// to a name; one never linked leaves nothing but the folders.
func (l *Layer) MakeNameless(lower *mounts.Root, dir string, mk func(up *mounts.Root) (int, error)) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.whereLocked(dir) == Absent {
		return -1, syscall.ENOENT
	}
	if err := l.store.CheckQuota(l.Principal); err != nil {
		return -1, err
	}
	if err := l.ensureDir(lower, dir); err != nil {
		return -1, err
	}
	fd, err := mk(l.up)
	if err != nil {
		return -1, err
	}
	l.countLocked(fd)
	return fd, nil
}

// Make creates a new name rel in tree/ with mk (create, mkdir, mknod,
// symlink): EEXIST when the principal already sees something there.
func (l *Layer) Make(lower *mounts.Root, rel string, mk func(up *mounts.Root) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.existsLocked(lower, rel); ok {
		return syscall.EEXIST
	}
	if err := l.store.CheckQuota(l.Principal); err != nil {
		return err
	}
	if err := l.ensureDirs(lower, rel); err != nil {
		return err
	}
	if err := mk(l.up); err != nil {
		return err
	}
	st, err := l.up.Lstat(rel)
	if err != nil {
		return err
	}
	l.upper.set(rel, st.Mode&unix.S_IFMT)
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		// Its target is content the layer keeps: 183,888 symlinks of
		// 4,000-byte targets put 733 MB into state_dir under a 10 MiB
		// bound, counted by their records alone (a red-team pass).
		l.sizes.set(rel, st.Size)
		l.bytes.Add(st.Size)
	}
	l.log(record{K: "made", P: rel})
	return nil
}

// Sync makes what the layer holds at rel survive a crash, for an fsync by
// the principal: its records (what it deleted, renamed and copied from),
// and the folders of its own tree from rel (when rel is a folder it
// holds) up to the top, which hold the names of its files — a new file
// and the folders made for it. The file's own content is the caller's to
// sync (it holds the descriptor).
func (l *Layer) Sync(rel string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.meta != nil {
		if err := l.meta.Sync(); err != nil {
			return err
		}
	}
	dir := rel
	if t, up := l.upper.m[rel]; !up || t != unix.S_IFDIR {
		dir = parentOf(rel)
	}
	for {
		if _, up := l.upper.m[dir]; up || dir == "" {
			if err := syncDir(l.up, dir); err != nil {
				return err
			}
		}
		if dir == "" {
			return nil
		}
		dir = parentOf(dir)
	}
}

// Wrote updates what the layer knows of rel's size after the principal
// wrote it.
func (l *Layer) Wrote(rel string) {
	st, err := l.up.Lstat(rel)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.upper.m[rel]; !ok || err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	l.bytes.Add(st.Size - l.sizes.m[rel])
	l.sizes.set(rel, st.Size)
}

// Remove removes rel as the principal sees it (unlink, or rmdir when dir):
// tree/'s entry goes, and a backing entry becomes gone. A folder must look
// empty to the principal (ENOTEMPTY otherwise).
func (l *Layer) Remove(lower *mounts.Root, rel string, dir bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.existsLocked(lower, rel)
	if !ok {
		return syscall.ENOENT
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if dir && !isDir {
		return syscall.ENOTDIR
	}
	if !dir && isDir {
		return syscall.EISDIR
	}
	if isDir {
		l.mu.Unlock()
		ents, err := l.List(lower, rel)
		l.mu.Lock()
		if err != nil {
			return err
		}
		if len(ents) > 0 {
			return syscall.ENOTEMPTY
		}
	}
	return l.removeLocked(lower, rel, isDir)
}

func (l *Layer) removeLocked(lower *mounts.Root, rel string, isDir bool) error {
	if _, up := l.upper.m[rel]; !up {
		// A backing name only: the records are all the removal is, so
		// it is made once they are written, or not at all.
		recs := []record{{K: "drop", P: rel}}
		if _, wasGone := l.gone.m[rel]; !wasGone && l.whereLocked(rel) == Lower {
			if b := baseOf(lower, rel); !b.Absent {
				if ob, ok := l.base.m[rel]; ok {
					b = ob
				}
				recs = append(recs, record{K: "gone", P: rel, B: &b})
			}
		}
		return l.logFirst(recs...)
	}
	l.originGoneLocked(rel)
	if _, up := l.upper.m[rel]; up {
		held := l.heldOpenLocked(rel)
		var err error
		if isDir {
			err = l.up.Rmdir(rel)
		} else {
			err = l.up.Unlink(rel)
		}
		if err != nil {
			return err
		}
		l.upper.del(rel)
		l.unnamedLocked(rel, held)
	}
	var gone *Base
	if _, wasGone := l.gone.m[rel]; !wasGone && l.whereLocked(rel) == Lower {
		if b := baseOf(lower, rel); !b.Absent {
			// The base of a copied-up file is what it was copied from.
			if ob, ok := l.base.m[rel]; ok {
				b = ob
			}
			gone = &b
		}
	}
	l.log(record{K: "drop", P: rel})
	if gone != nil {
		l.log(record{K: "gone", P: rel, B: gone})
	}
	return nil
}

// originLocked is the backing path the held rel was brought from by a
// rename of it or of a folder above it, or "" (l.mu held).
func (l *Layer) originLocked(rel string) string {
	for p := rel; p != "" && p != "."; p = path.Dir(p) {
		if f, ok := l.from.m[p]; ok {
			return f + rel[len(p):]
		}
	}
	return ""
}

// originGoneLocked records, before the held rel is deleted, that the
// backing file it was copied from inside a renamed folder is gone, with
// the base it was copied with. The rename recorded only the folder as
// gone; once its copy is deleted, no unit carries what was in it, and an
// unrelated unit at the folder's old name took the backing files still
// there for files someone added since (l.mu held).
func (l *Layer) originGoneLocked(rel string) {
	o := l.originLocked(rel)
	if o == "" {
		// Not copied from a renamed folder. (Below one renamed away and
		// back, o is rel: until session 48 that was left out too, and
		// nothing said that the backing name was deleted, as the
		// folder, replaced, shows no backing name: its unit was a
		// conflict.)
		return
	}
	if _, g := l.gone.m[o]; g {
		return
	}
	if b, ok := l.base.m[rel]; ok && !b.Absent {
		l.log(record{K: "gone", P: o, B: &b})
	}
}

// Rename renames old to new as the principal sees them (flags as for
// renameat2: RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT). A folder is copied up
// with everything the principal sees in it first.
func (l *Layer) Rename(lower *mounts.Root, old, new string, flags uint) error {
	pre := l.prepare(lower, old) // a file's copy-up, before the lock
	defer pre.discard()
	l.mu.Lock()
	defer l.mu.Unlock()
	ost, ok := l.existsLocked(lower, old)
	if !ok {
		return syscall.ENOENT
	}
	nst, nexists := l.existsLocked(lower, new)
	if flags&unix.RENAME_NOREPLACE != 0 && nexists {
		return syscall.EEXIST
	}
	exchange := flags&unix.RENAME_EXCHANGE != 0
	if exchange && !nexists {
		return syscall.ENOENT
	}
	if old == new {
		return nil // (a folder onto itself is no folder not empty)
	}
	oDir := ost.Mode&unix.S_IFMT == unix.S_IFDIR
	if nexists && !exchange {
		nDir := nst.Mode&unix.S_IFMT == unix.S_IFDIR
		switch {
		case oDir && !nDir:
			return syscall.ENOTDIR
		case !oDir && nDir:
			return syscall.EISDIR
		case nDir:
			l.mu.Unlock()
			ents, err := l.List(lower, new)
			l.mu.Lock()
			if err != nil {
				return err
			}
			if len(ents) > 0 {
				return syscall.ENOTEMPTY
			}
		}
	}
	if nexists && !exchange && nst.Dev == ost.Dev && nst.Ino == ost.Ino {
		// Two names of one file: rename(2) does nothing (before, the
		// old name went).
		return nil
	}
	if err := l.copyUpPrepared(lower, old, pre); err != nil {
		return err
	}
	if err := l.deepCopyUp(lower, old); err != nil {
		return err
	}
	if exchange {
		if err := l.deepCopyUp(lower, new); err != nil {
			return err
		}
	}
	if err := l.ensureDirs(lower, new); err != nil {
		return err
	}
	// What the principal replaces at new: tree/'s entry goes with the
	// rename; a backing one becomes gone.
	if nexists && !exchange {
		if _, up := l.upper.m[new]; !up {
			if _, g := l.gone.m[new]; !g {
				b := baseOf(lower, new)
				l.log(record{K: "gone", P: new, B: &b})
			}
		} else {
			l.originGoneLocked(new)
			if _, g := l.gone.m[new]; !g && l.originLocked(new) == "" {
				// A copy of the backing file at new (copied up for an
				// earlier change): that backing file is what goes.
				if b, ok := l.base.m[new]; ok && !b.Absent {
					l.log(record{K: "gone", P: new, B: &b})
				}
			}
			l.unnamedLocked(new, l.heldOpenLocked(new))
		}
	}
	if err := l.up.Rename(old, new, flags&(unix.RENAME_EXCHANGE|unix.RENAME_WHITEOUT)); err != nil {
		return err
	}
	if exchange {
		l.upper.swap(old, new)
		l.sizes.swap(old, new)
		l.log(record{K: "swap", F: old, P: new})
		return nil
	}
	// Where the moved entry came from: a backing path it was copied from
	// stays its origin.
	origin := old
	if f, ok := l.from.m[old]; ok {
		origin = f
	} else if b, ok := l.base.m[old]; !ok || b.Absent {
		origin = ""
	} else if o := l.originLocked(old); o != "" {
		// Copied up inside a folder renamed before: the backing path
		// is below the folder's old name, which now leaves without it.
		// Before, the rename took the name in the principal's tree for
		// its origin, and its approval was a conflict for ever.
		origin = o
		l.originGoneLocked(old)
	}
	l.upper.drop(new)
	l.sizes.drop(new)
	l.upper.move(old, new)
	l.sizes.move(old, new)
	l.log(record{K: "drop", P: new})
	l.log(record{K: "mv", F: old, P: new})
	if _, g := l.gone.m[old]; !g && l.whereLocked(old) == Lower {
		if b := baseOf(lower, old); !b.Absent {
			if ob, ok := l.base.m[new]; ok {
				b = ob
			}
			l.log(record{K: "gone", P: old, B: &b})
		}
	}
	if origin != "" {
		l.log(record{K: "from", P: new, F: origin})
	}
	if flags&unix.RENAME_WHITEOUT != 0 {
		// The upper folder's file system left a whiteout (a character
		// device 0:0) at old, as the backing one would have: a name the
		// principal made.
		l.upper.set(old, unix.S_IFCHR)
		l.log(record{K: "made", P: old})
	}
	return nil
}

// deepCopyUp copies up rel and, for a folder, everything the principal
// sees in it (l.mu held).
func (l *Layer) deepCopyUp(lower *mounts.Root, rel string) error {
	if err := l.copyUpLocked(lower, rel); err != nil {
		return err
	}
	if l.upper.m[rel] != unix.S_IFDIR {
		return nil
	}
	if l.goneAtOrAboveLocked(rel) {
		return nil // opaque: nothing of the backing folder shows
	}
	st, err := lower.Lstat(rel)
	if err != nil {
		return nil
	}
	if b, ok := l.base.m[rel]; ok && b.Type == unix.S_IFDIR && b.Ino == st.Ino && b.Ctime != st.Ctim.Nano() {
		// Every entry of the backing folder is accounted for from now on
		// (copied below, or already the layer's): a rename's conflict
		// check compares the folder with this.
		b.Ctime = st.Ctim.Nano()
		l.log(record{K: "base", P: rel, B: &b})
	}
	ents, err := listRoot(lower, rel)
	if err != nil {
		return err
	}
	for _, e := range ents {
		crel := join(rel, e.Name)
		if l.whereLocked(crel) != Lower {
			if l.upper.m[crel] == unix.S_IFDIR {
				if err := l.deepCopyUp(lower, crel); err != nil {
					return err
				}
			}
			continue
		}
		if err := l.deepCopyUp(lower, crel); err != nil {
			return err
		}
	}
	return nil
}

// Link makes new another name of old in tree/ (old is copied up first).
func (l *Layer) Link(lower *mounts.Root, old, new string) (unix.Stat_t, error) {
	pre := l.prepare(lower, old) // the copy-up, before the lock
	defer pre.discard()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.existsLocked(lower, new); ok {
		return unix.Stat_t{}, syscall.EEXIST
	}
	if err := l.copyUpPrepared(lower, old, pre); err != nil {
		return unix.Stat_t{}, err
	}
	if err := l.ensureDirs(lower, new); err != nil {
		return unix.Stat_t{}, err
	}
	st, err := l.up.Link(old, new)
	if err != nil {
		return st, err
	}
	l.upper.set(new, st.Mode&unix.S_IFMT)
	l.log(record{K: "made", P: new})
	return st, nil
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// Stats is what a layer holds, counted cheaply (for metrics): the names
// it has made or copied up, the backing names it hides, and the bytes of
// its own files.
type Stats struct {
	Entries, Gone int
	Bytes         int64
}

// Stats counts what the layer holds.
func (l *Layer) Stats() Stats {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return Stats{Entries: len(l.upper.m), Gone: len(l.gone.m), Bytes: l.bytes.Load()}
}
