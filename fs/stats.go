package fs

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/neuralis/neuralisfs/internal/lowprio"
)

// Stats counts the FUSE requests every mount of an FS serves, by opcode,
// with a latency histogram each, and the denied operations by operation
// and principal. It is what the daemon's metrics endpoint reports; the
// counting costs two clock reads and three atomic adds per request
// (BenchmarkStatsOverhead). Pass one in Options.Stats, or to
// FS.SetStats, to turn it on.
type Stats struct {
	ops [numOps]opStats

	denMu   sync.Mutex
	denials map[denialKey]*atomic.Uint64
}

// NewStats makes an empty Stats.
func NewStats() *Stats { return &Stats{denials: map[denialKey]*atomic.Uint64{}} }

type denialKey struct{ op, principal string }

// latencyBounds are the upper bounds of the latency buckets; a last,
// unbounded bucket holds the rest.
var latencyBounds = [...]time.Duration{
	5 * time.Microsecond, 10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// LatencyBounds returns the upper bounds of the latency buckets in
// seconds (the Prometheus histogram's "le" labels, without +Inf).
func LatencyBounds() []float64 {
	out := make([]float64, len(latencyBounds))
	for i, b := range latencyBounds {
		out[i] = b.Seconds()
	}
	return out
}

// opStats is one opcode's counters.
type opStats struct {
	count   atomic.Uint64
	errors  atomic.Uint64
	sumNs   atomic.Uint64
	buckets [len(latencyBounds) + 1]atomic.Uint64
}

// begin starts timing a request, and marks it for background work to
// give way to (lowprio.Foreground). With no Stats (no metrics configured)
// it only marks.
func (s *Stats) begin() time.Time {
	lowprio.Foreground()
	if s == nil {
		return time.Time{}
	}
	return time.Now()
}

// end counts a request of op that began at t and answered st; with no
// Stats it does nothing.
func (s *Stats) end(op opcode, t time.Time, st fuse.Status) {
	if s == nil {
		return
	}
	d := time.Since(t)
	o := &s.ops[op]
	o.count.Add(1)
	o.sumNs.Add(uint64(d))
	if st != fuse.OK {
		o.errors.Add(1)
	}
	i := sort.Search(len(latencyBounds), func(i int) bool { return d <= latencyBounds[i] })
	o.buckets[i].Add(1)
}

// denied counts one refusal of op to principal.
func (s *Stats) denied(op, principal string) {
	k := denialKey{op, principal}
	s.denMu.Lock()
	c := s.denials[k]
	if c == nil {
		c = &atomic.Uint64{}
		s.denials[k] = c
	}
	s.denMu.Unlock()
	c.Add(1)
}

// OpCount is what Stats knows of one opcode.
type OpCount struct {
	Op     string // "LOOKUP", "GETATTR", …
	Count  uint64
	Errors uint64 // answered with an error status
	Sum    time.Duration
	// Buckets counts the requests whose latency was at most the matching
	// LatencyBounds entry (not cumulative); the last one counts the rest.
	Buckets []uint64
}

// Ops returns the counters of every opcode seen at least once. The
// fields of one opcode are read one after the other, not atomically
// together: a scrape racing requests may see Count one ahead of the
// buckets.
func (s *Stats) Ops() []OpCount {
	if s == nil {
		return nil
	}
	var out []OpCount
	for i := range s.ops {
		o := &s.ops[i]
		n := o.count.Load()
		if n == 0 {
			continue
		}
		oc := OpCount{Op: opNames[i], Count: n, Errors: o.errors.Load(), Sum: time.Duration(o.sumNs.Load())}
		for j := range o.buckets {
			oc.Buckets = append(oc.Buckets, o.buckets[j].Load())
		}
		out = append(out, oc)
	}
	return out
}

// DenialCount is how often one operation was refused to one principal.
type DenialCount struct {
	Op, Principal string
	Count         uint64
}

// Denials returns the denial counters, by operation and principal.
func (s *Stats) Denials() []DenialCount {
	if s == nil {
		return nil
	}
	s.denMu.Lock()
	defer s.denMu.Unlock()
	out := make([]DenialCount, 0, len(s.denials))
	for k, c := range s.denials {
		out = append(out, DenialCount{Op: k.op, Principal: k.principal, Count: c.Load()})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Op != out[j].Op {
			return out[i].Op < out[j].Op
		}
		return out[i].Principal < out[j].Principal
	})
	return out
}

// statsFS counts every request it passes to the filesystem below it in
// stats. It is the outermost layer of a mount's server, so the counted
// latency includes everything the daemon does for a request (not the
// kernel's queueing, nor writing the reply).
type statsFS struct {
	fuse.RawFileSystem
	stats *atomic.Pointer[Stats] // FS.stats: nil counts nothing
}

// opcode is a counted FUSE request kind.
type opcode int

const (
	opLookup opcode = iota
	opGetAttr
	opSetAttr
	opMknod
	opMkdir
	opUnlink
	opRmdir
	opRename
	opLink
	opSymlink
	opReadlink
	opAccess
	opGetXAttr
	opListXAttr
	opSetXAttr
	opRemoveXAttr
	opCreate
	opTmpfile
	opOpen
	opRead
	opLseek
	opGetLk
	opSetLk
	opSetLkw
	opWrite
	opCopyFileRange
	opIoctl
	opFlush
	opFsync
	opFallocate
	opOpenDir
	opReadDir
	opReadDirPlus
	opFsyncDir
	opStatFs
	opStatx
	opForget
	opRelease
	opReleaseDir
	numOps
)

// opNames are the opcodes as the FUSE protocol names them.
var opNames = [numOps]string{
	opLookup:        "LOOKUP",
	opGetAttr:       "GETATTR",
	opSetAttr:       "SETATTR",
	opMknod:         "MKNOD",
	opMkdir:         "MKDIR",
	opUnlink:        "UNLINK",
	opRmdir:         "RMDIR",
	opRename:        "RENAME",
	opLink:          "LINK",
	opSymlink:       "SYMLINK",
	opReadlink:      "READLINK",
	opAccess:        "ACCESS",
	opGetXAttr:      "GETXATTR",
	opListXAttr:     "LISTXATTR",
	opSetXAttr:      "SETXATTR",
	opRemoveXAttr:   "REMOVEXATTR",
	opCreate:        "CREATE",
	opTmpfile:       "TMPFILE",
	opOpen:          "OPEN",
	opRead:          "READ",
	opLseek:         "LSEEK",
	opGetLk:         "GETLK",
	opSetLk:         "SETLK",
	opSetLkw:        "SETLKW",
	opWrite:         "WRITE",
	opCopyFileRange: "COPY_FILE_RANGE",
	opIoctl:         "IOCTL",
	opFlush:         "FLUSH",
	opFsync:         "FSYNC",
	opFallocate:     "FALLOCATE",
	opOpenDir:       "OPENDIR",
	opReadDir:       "READDIR",
	opReadDirPlus:   "READDIRPLUS",
	opFsyncDir:      "FSYNCDIR",
	opStatFs:        "STATFS",
	opStatx:         "STATX",
	opForget:        "FORGET",
	opRelease:       "RELEASE",
	opReleaseDir:    "RELEASEDIR",
}

func (s *statsFS) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Lookup(cancel, header, name, out)
	ss.end(opLookup, t, st)
	return st
}

func (s *statsFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.GetAttr(cancel, in, out)
	ss.end(opGetAttr, t, st)
	return st
}

func (s *statsFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.SetAttr(cancel, in, out)
	ss.end(opSetAttr, t, st)
	return st
}

func (s *statsFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Mknod(cancel, in, name, out)
	ss.end(opMknod, t, st)
	return st
}

func (s *statsFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Mkdir(cancel, in, name, out)
	ss.end(opMkdir, t, st)
	return st
}

func (s *statsFS) Unlink(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Unlink(cancel, header, name)
	ss.end(opUnlink, t, st)
	return st
}

func (s *statsFS) Rmdir(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Rmdir(cancel, header, name)
	ss.end(opRmdir, t, st)
	return st
}

func (s *statsFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Rename(cancel, in, oldName, newName)
	ss.end(opRename, t, st)
	return st
}

func (s *statsFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Link(cancel, in, name, out)
	ss.end(opLink, t, st)
	return st
}

func (s *statsFS) Symlink(cancel <-chan struct{}, header *fuse.InHeader, pointedTo, linkName string, out *fuse.EntryOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Symlink(cancel, header, pointedTo, linkName, out)
	ss.end(opSymlink, t, st)
	return st
}

func (s *statsFS) Readlink(cancel <-chan struct{}, header *fuse.InHeader) ([]byte, fuse.Status) {
	ss := s.stats.Load()
	t := ss.begin()
	r, st := s.RawFileSystem.Readlink(cancel, header)
	ss.end(opReadlink, t, st)
	return r, st
}

func (s *statsFS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Access(cancel, in)
	ss.end(opAccess, t, st)
	return st
}

func (s *statsFS) GetXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	ss := s.stats.Load()
	t := ss.begin()
	r, st := s.RawFileSystem.GetXAttr(cancel, header, attr, dest)
	ss.end(opGetXAttr, t, st)
	return r, st
}

func (s *statsFS) ListXAttr(cancel <-chan struct{}, header *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	ss := s.stats.Load()
	t := ss.begin()
	r, st := s.RawFileSystem.ListXAttr(cancel, header, dest)
	ss.end(opListXAttr, t, st)
	return r, st
}

func (s *statsFS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.SetXAttr(cancel, in, attr, data)
	ss.end(opSetXAttr, t, st)
	return st
}

func (s *statsFS) RemoveXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.RemoveXAttr(cancel, header, attr)
	ss.end(opRemoveXAttr, t, st)
	return st
}

func (s *statsFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Create(cancel, in, name, out)
	ss.end(opCreate, t, st)
	return st
}

func (s *statsFS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Tmpfile(cancel, in, out)
	ss.end(opTmpfile, t, st)
	return st
}

func (s *statsFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Open(cancel, in, out)
	ss.end(opOpen, t, st)
	return st
}

func (s *statsFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	ss := s.stats.Load()
	t := ss.begin()
	r, st := s.RawFileSystem.Read(cancel, in, buf)
	ss.end(opRead, t, st)
	return r, st
}

func (s *statsFS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Lseek(cancel, in, out)
	ss.end(opLseek, t, st)
	return st
}

func (s *statsFS) GetLk(cancel <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.GetLk(cancel, in, out)
	ss.end(opGetLk, t, st)
	return st
}

func (s *statsFS) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.SetLk(cancel, in)
	ss.end(opSetLk, t, st)
	return st
}

func (s *statsFS) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.SetLkw(cancel, in)
	ss.end(opSetLkw, t, st)
	return st
}

func (s *statsFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	ss := s.stats.Load()
	t := ss.begin()
	r, st := s.RawFileSystem.Write(cancel, in, data)
	ss.end(opWrite, t, st)
	return r, st
}

func (s *statsFS) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	ss := s.stats.Load()
	t := ss.begin()
	r, st := s.RawFileSystem.CopyFileRange(cancel, in)
	ss.end(opCopyFileRange, t, st)
	return r, st
}

func (s *statsFS) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Ioctl(cancel, in, inbuf, out, outbuf)
	ss.end(opIoctl, t, st)
	return st
}

func (s *statsFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Flush(cancel, in)
	ss.end(opFlush, t, st)
	return st
}

func (s *statsFS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Fsync(cancel, in)
	ss.end(opFsync, t, st)
	return st
}

func (s *statsFS) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Fallocate(cancel, in)
	ss.end(opFallocate, t, st)
	return st
}

func (s *statsFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.OpenDir(cancel, in, out)
	ss.end(opOpenDir, t, st)
	return st
}

func (s *statsFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.ReadDir(cancel, in, out)
	ss.end(opReadDir, t, st)
	return st
}

func (s *statsFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.ReadDirPlus(cancel, in, out)
	ss.end(opReadDirPlus, t, st)
	return st
}

func (s *statsFS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.FsyncDir(cancel, in)
	ss.end(opFsyncDir, t, st)
	return st
}

func (s *statsFS) StatFs(cancel <-chan struct{}, header *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.StatFs(cancel, header, out)
	ss.end(opStatFs, t, st)
	return st
}

func (s *statsFS) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	ss := s.stats.Load()
	t := ss.begin()
	st := s.RawFileSystem.Statx(cancel, in, out)
	ss.end(opStatx, t, st)
	return st
}

// Writev is WRITE too; on ENOSYS go-fuse calls Write, which counts it.
func (s *statsFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	ss := s.stats.Load()
	t := ss.begin()
	r, st := s.RawFileSystem.Writev(cancel, in, data)
	if st != fuse.ENOSYS {
		ss.end(opWrite, t, st)
	}
	return r, st
}

// Forget, Release and ReleaseDir have no reply; they are counted without
// a status.
func (s *statsFS) Forget(nodeid, nlookup uint64) {
	ss := s.stats.Load()
	t := ss.begin()
	s.RawFileSystem.Forget(nodeid, nlookup)
	ss.end(opForget, t, fuse.OK)
}

func (s *statsFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	ss := s.stats.Load()
	t := ss.begin()
	s.RawFileSystem.Release(cancel, in)
	ss.end(opRelease, t, fuse.OK)
}

func (s *statsFS) ReleaseDir(in *fuse.ReleaseIn) {
	ss := s.stats.Load()
	t := ss.begin()
	s.RawFileSystem.ReleaseDir(in)
	ss.end(opReleaseDir, t, fuse.OK)
}

// SetStats starts counting every mount's requests in st from the next
// request on (nil: stops counting); Stats returns what counts them now.
func (f *FS) SetStats(st *Stats) { f.stats.Store(st) }

// Stats is the Stats requests are counted in, or nil.
func (f *FS) Stats() *Stats { return f.stats.Load() }
