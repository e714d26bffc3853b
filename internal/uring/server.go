package uring

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Handler answers one raw FUSE request. in holds the request as /dev/fuse
// would deliver it (fuse_in_header, the op struct, the payload), split over
// any number of slices; the Handler writes the raw reply (fuse_out_header
// first) into out, treated as one byte stream, and returns how many bytes it
// wrote, 0 for a request that takes no reply (FORGET). A non-zero errno means
// it could not make a reply; the transport then answers with that error.
// Handlers are called concurrently.
//
// INTERRUPT is answered as a /dev/fuse server answers it: the Handler
// cancels the request of that unique if it is running it and writes no
// reply (returns 0), or replies EAGAIN when it is not (not yet, or no
// more). The transport hands every INTERRUPT to the Handler that runs the
// request, whichever transport brought the request (see "Interrupts" in
// the package doc).
type Handler func(in, out [][]byte) (int, syscall.Errno)

// Options are the mount's choices.
type Options struct {
	FsName     string   // the mount's source, as mount(8) shows it
	Subtype    string   // the type is fuse.<Subtype>
	AllowOther bool     // allow_other
	Extra      []string // further options for mount(2), such as default_permissions
	// Ring asks for io_uring when the kernel offers it. The Handler's INIT
	// reply must set FUSE_OVER_IO_URING too (go-fuse: ExtraCapabilities).
	Ring bool
	// Depth is the number of ring entries each queue starts with: how
	// many requests of one CPU's callers are served at once (default 8,
	// fewer where there are more than 4 CPUs, at least 2). A queue whose
	// entries are nearly all answering requests registers more, up to 64
	// (see spareEntries).
	Depth int
}

// Server is one mounted FUSE connection.
type Server struct {
	dir     string
	fd      int
	h       Handler
	payload int // ring entry payload size, and /dev/fuse buffer size less headroom
	rings   *Rings

	devReqs atomic.Uint64  // INIT, and /dev/fuse while no rings serve
	wg      sync.WaitGroup // the /dev/fuse readers while no rings serve
}

// Rings are the io_uring queues of one FUSE connection, one per possible
// CPU, and, once they serve, the readers of the connection's /dev/fuse
// (for what the kernel still sends there).
type Rings struct {
	fd      int // a dup of the connection's /dev/fuse fd, closed when the queues and readers end
	name    string
	h       Handler
	payload int
	ents    []*entry // the entries startRings registered; not changed after it
	// queues count each queue's entries and those answering a request:
	// a queue whose entries are nearly all busy registers another (took).
	queues []queue
	// grown are the entries registered since startRings, copied on write
	// under grownMu.
	grownMu sync.Mutex
	grown   atomic.Pointer[[]*entry]
	total   atomic.Int32 // entries registered, over every queue

	reqs       atomic.Uint64 // requests through the rings
	devReqs    atomic.Uint64 // requests through /dev/fuse since the rings serve
	interrupts atomic.Uint64 // INTERRUPTs that cancelled a request

	// early holds, for earlyTTL, the INTERRUPTs for uniques that no entry
	// held when they arrived: a ring request whose entry has not taken it
	// up yet finds its INTERRUPT here (see Rings.interrupt).
	earlyMu  sync.Mutex
	early    map[uint64]struct{}
	nEarly   atomic.Int32 // len(early), read by every request without the lock
	earlyTTL time.Duration

	cancelOnce sync.Once
	entsWG     sync.WaitGroup // the entries' goroutines
	devWG      sync.WaitGroup // the /dev/fuse readers
	done       chan struct{}  // closed once both ended and fd is closed
}

// Constants from include/uapi/linux/fuse.h.
const (
	opWrite         = 16
	opInit          = 26
	opForget        = 2
	opInterrupt     = 36
	opBatchForget   = 42
	initOverIOURing = 1 << 9 // FUSE_OVER_IO_URING in flags2 (bit 41 of the 64-bit flags)
	intReqBit       = 1      // FUSE_INT_REQ_BIT: the unique of an INTERRUPT is its request's, plus this

	cmdRegister       = 1
	cmdCommitAndFetch = 2

	inHeaderSize  = 40
	outHeaderSize = 16
	minReadBuffer = 8192

	// struct fuse_uring_req_header
	hdrOpIn       = 128
	hdrRingEnt    = 256
	hdrPayloadSz  = hdrRingEnt + 16
	hdrCommitID   = hdrRingEnt + 8
	reqHeaderSize = 288
)

// Mount opens /dev/fuse, mounts it on dir, answers INIT through h and, when
// o.Ring is set and both sides negotiated FUSE_OVER_IO_URING, registers a
// ring queue for every possible CPU. Serving starts at once; Unmount ends it.
func Mount(dir string, h Handler, o Options) (*Server, error) {
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/fuse: %w", err)
	}
	if err := mount(fd, dir, o); err != nil {
		unix.Close(fd)
		return nil, err
	}
	s := &Server{dir: dir, fd: fd, h: h}
	negotiated, err := s.init()
	if err != nil {
		s.abort()
		return nil, err
	}
	if o.Ring && negotiated {
		r, err := startRings(s.fd, dir, h, s.payload, o.Depth)
		if err != nil {
			slog.Warn("FUSE over io_uring not available, serving over /dev/fuse", "mount", dir, "err", err)
		} else {
			s.rings = r
			return s, nil
		}
	}
	for range 2 {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			serveDev(s.fd, dir, h, s.payload, nil, &s.devReqs)
		}()
	}
	return s, nil
}

// Attach registers io_uring queues on the connection behind fd, whose INIT
// another server has answered, and from then on reads the connection's
// /dev/fuse too: that server must stop reading it (go-fuse's: do not Serve
// until Wait returns). initReq is the INIT request as the kernel sent it;
// Attach passes it to h first so that h knows the negotiated protocol, and
// sizes the ring entries from h's reply (which must equal the reply the
// kernel got). It fails with ErrNotNegotiated or ErrRefused when the
// connection stays on /dev/fuse, and with any other error when the
// connection is left without a ready ring (see ErrRefused). fd stays the
// caller's.
func Attach(fd int, name string, h Handler, initReq []byte, depth int) (*Rings, error) {
	out := make([]byte, 4096)
	m, errno := h([][]byte{initReq}, [][]byte{out})
	if errno != 0 || m < outHeaderSize+36 || int32(get32(out, 4)) != 0 {
		return nil, fmt.Errorf("INIT replay: the filesystem did not accept the kernel's protocol (errno %d)", errno)
	}
	payload, negotiated := initReply(initReq, out)
	if !negotiated {
		return nil, ErrNotNegotiated
	}
	return startRings(fd, name, h, payload, depth)
}

// initReply reads the ring payload size and whether FUSE_OVER_IO_URING was
// negotiated from an INIT request and its reply.
func initReply(in, out []byte) (payload int, negotiated bool) {
	maxWrite := int(get32(out, outHeaderSize+20))
	maxPages := int(get16(out, outHeaderSize+28))
	payload = max(minReadBuffer, maxWrite, maxPages*os.Getpagesize())
	kernelFlags2 := get32(in, inHeaderSize+16)
	ourFlags2 := get32(out, outHeaderSize+32)
	return payload, kernelFlags2&ourFlags2&initOverIOURing != 0
}

func mount(fd int, dir string, o Options) error {
	opts := []string{"fd=" + strconv.Itoa(fd), "rootmode=40000",
		"user_id=" + strconv.Itoa(os.Getuid()), "group_id=" + strconv.Itoa(os.Getgid())}
	if o.AllowOther {
		opts = append(opts, "allow_other")
	}
	opts = append(opts, o.Extra...)
	fstype := "fuse"
	if o.Subtype != "" {
		fstype += "." + o.Subtype
	}
	if err := unix.Mount(o.FsName, dir, fstype, unix.MS_NOSUID|unix.MS_NODEV, strings.Join(opts, ",")); err != nil {
		return fmt.Errorf("mount %s: %w", dir, err)
	}
	return nil
}

// init answers the kernel's INIT and reports whether FUSE_OVER_IO_URING was
// negotiated. It sizes the ring payload from the reply.
func (s *Server) init() (bool, error) {
	buf := make([]byte, 64<<10)
	var n int
	for {
		var err error
		n, err = unix.Read(s.fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("read INIT from /dev/fuse: %w", err)
		}
		break
	}
	if n < inHeaderSize+24 || get32(buf, 4) != opInit {
		return false, fmt.Errorf("first request on /dev/fuse is not INIT (%d bytes, opcode %d)", n, get32(buf, 4))
	}
	s.devReqs.Add(1)
	out := make([]byte, 4096)
	m, errno := s.h([][]byte{buf[:n]}, [][]byte{out})
	if errno != 0 || m < outHeaderSize+36 || int32(get32(out, 4)) != 0 {
		return false, fmt.Errorf("INIT: the filesystem did not accept the kernel's protocol (errno %d)", errno)
	}
	if _, err := unix.Write(s.fd, out[:m]); err != nil {
		return false, fmt.Errorf("write INIT reply: %w", err)
	}
	payload, negotiated := initReply(buf[:n], out)
	s.payload = payload
	return negotiated, nil
}

func errorReply(out []byte, unique uint64, errno syscall.Errno) int {
	put32(out, 0, outHeaderSize)
	put32(out, 4, uint32(-int32(errno)))
	put64(out, 8, unique)
	return outHeaderSize
}

// Transport says which transport serves the mount's requests.
func (s *Server) Transport() string {
	if s.rings != nil {
		return "io_uring"
	}
	return "/dev/fuse"
}

// Counts reports how many requests arrived through the rings and through
// /dev/fuse so far.
func (s *Server) Counts() (ring, dev uint64) {
	dev = s.devReqs.Load()
	if s.rings != nil {
		ring = s.rings.Requests()
		dev += s.rings.devReqs.Load()
	}
	return ring, dev
}

// Requests reports how many requests arrived through the rings so far.
func (r *Rings) Requests() uint64 { return r.reqs.Load() }

// Interrupts reports how many INTERRUPTs cancelled a request that came
// through the rings or, while they serve, through /dev/fuse.
func (r *Rings) Interrupts() uint64 { return r.interrupts.Load() }

// Wait waits until the connection has ended: every queue and /dev/fuse
// reader stopped and the descriptors the rings hold are closed.
func (r *Rings) Wait() { <-r.done }

// Unmount unmounts the mount and waits until every queue and reader has
// stopped.
func (s *Server) Unmount() error {
	err := unix.Unmount(s.dir, 0)
	if err != nil {
		return fmt.Errorf("unmount %s: %w", s.dir, err)
	}
	s.wg.Wait()
	if s.rings != nil {
		s.rings.Wait()
	}
	unix.Close(s.fd)
	return nil
}

// abort is Mount's way out after mount(2) succeeded.
func (s *Server) abort() {
	unix.Unmount(s.dir, unix.MNT_DETACH)
	unix.Close(s.fd)
}

// possibleCPUs is num_possible_cpus(): the kernel's number of queues.
func possibleCPUs() (int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("/sys/devices/system/cpu/possible: %q", b)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil {
				return 0, fmt.Errorf("/sys/devices/system/cpu/possible: %q", b)
			}
		}
		n += z - a + 1
	}
	return n, nil
}

// Available reports whether the running kernel offers FUSE over io_uring
// now, and says why not when it does not.
func Available() (bool, string) {
	b, err := os.ReadFile(ParamPath)
	if errors.Is(err, os.ErrNotExist) {
		return false, "the kernel has no FUSE over io_uring (no " + ParamPath + ")"
	}
	if err != nil {
		return false, err.Error()
	}
	if strings.TrimSpace(string(b)) != "Y" {
		return false, "the kernel's switch is off (as root: echo Y > " + ParamPath + ")"
	}
	// io_uring itself may be off (sysctl kernel.io_uring_disabled) or
	// lack 128-byte SQEs; find out before INIT negotiates it.
	r, err := newRing(2)
	if err != nil {
		return false, err.Error() + " (see sysctl kernel.io_uring_disabled)"
	}
	r.close()
	return true, ""
}

// ErrRefused marks a FUSE_IO_URING_CMD_REGISTER the kernel refused. The
// kernel then turns io_uring off for the connection and serves it over
// /dev/fuse. Any other error from Attach but ErrNotNegotiated leaves a
// connection that negotiated FUSE_OVER_IO_URING without a ready ring, and
// the kernel holds every request of such a connection (fuse_block_alloc)
// until the ring is ready: the caller must give the mount up.
var ErrRefused = errors.New("the kernel refused FUSE_IO_URING_CMD_REGISTER")

// ErrNotNegotiated says INIT did not negotiate FUSE_OVER_IO_URING (the
// kernel did not offer it, or the filesystem did not take it): the
// connection is an ordinary /dev/fuse one.
var ErrNotNegotiated = errors.New("FUSE_OVER_IO_URING was not negotiated (is " + ParamPath + " Y?)")

// ParamPath is the kernel's switch for FUSE over io_uring.
const ParamPath = "/sys/module/fuse/parameters/enable_uring"

// queue is what grow needs to know of one ring queue.
type queue struct {
	n, busy atomic.Int32 // entries registered, and those answering a request
	growing atomic.Bool  // an entry is being registered
	full    atomic.Bool  // a registration failed: the queue grows no more
}

// Entries a queue keeps free: once an entry takes a request that leaves
// fewer free, the queue registers another, up to maxQueueDepth entries
// a queue and maxEntries in all.
//
// The kernel hands a request to a free entry of the caller's CPU's queue
// and, with none free, keeps it until an entry of that queue commits a
// reply: requests that take long to answer (a .status of a large
// checkout, an agent's operation waiting while an approval holds its
// layer, a read from a slow disk) held every entry of a queue, and every
// other caller on that CPU, the owner's shell too, waited behind them
// (seconds; found by a red-team pass). Over /dev/fuse go-fuse starts
// another reader whenever none is waiting. A new entry serves requests
// that arrive after it registers (one that came while none was free waits
// for a commit), hence the spare. Entries are never unregistered: the
// kernel has no command for it, so a queue keeps what it grew to until
// the connection ends (a thread and a payload buffer each, the buffer's
// pages taken only as a request fills them).
const (
	spareEntries  = 2
	maxQueueDepth = 64
	maxEntries    = 1024
)

// entries lists every ring entry.
func (r *Rings) entries() []*entry {
	g := r.grown.Load()
	if g == nil {
		return r.ents
	}
	return append(slices.Clip(r.ents), *g...)
}

// took counts a request e has taken up, and has e's queue register more
// entries when that leaves it fewer than spareEntries free.
func (r *Rings) took(e *entry) {
	if len(r.queues) == 0 {
		return
	}
	q := &r.queues[e.qid]
	if q.n.Load()-q.busy.Add(1) >= spareEntries || !r.mayGrow(q) || !q.growing.CompareAndSwap(false, true) {
		return
	}
	r.entsWG.Add(1) // from a running entry's goroutine: the group is not empty
	go func() {
		defer r.entsWG.Done()
		defer q.growing.Store(false)
		// One at a time, until the queue has its spare again: requests
		// that arrived while none was free wait for a commit, and the
		// entries they then take count as busy here.
		for q.n.Load()-q.busy.Load() < spareEntries && r.mayGrow(q) {
			if err := r.addEntry(e.qid); err != nil {
				// The connection is ending, or the kernel takes no more.
				q.full.Store(true)
				slog.Debug("io_uring ring entry not added", "mount", r.name, "qid", e.qid, "err", err)
				return
			}
			q.n.Add(1)
			r.total.Add(1)
		}
	}()
}

func (r *Rings) mayGrow(q *queue) bool {
	return q.n.Load() < maxQueueDepth && r.total.Load() < maxEntries && !q.full.Load()
}

// addEntry registers one more entry on queue qid and starts serving it.
func (r *Rings) addEntry(qid uint16) error {
	ne := &entry{r: r, qid: qid}
	r.grownMu.Lock()
	var g []*entry
	if old := r.grown.Load(); old != nil {
		g = slices.Clone(*old)
	}
	g = append(g, ne)
	r.grown.Store(&g)
	r.grownMu.Unlock()
	r.entsWG.Add(1) // the grower holds the group too
	started := make(chan error, 1)
	go ne.run(started)
	return <-started
}

// answered counts a request e has answered (before its commit).
func (r *Rings) answered(e *entry) {
	if len(r.queues) > 0 {
		r.queues[e.qid].busy.Add(-1)
	}
}

// startRings registers depth entries on every queue, on a dup of fd, and
// returns once each is registered, or with the first error. Once all are,
// it starts two readers of /dev/fuse on the dup.
func startRings(fd int, name string, h Handler, payload, depth int) (*Rings, error) {
	n, err := possibleCPUs()
	if err != nil {
		return nil, err
	}
	if depth <= 0 {
		// Every entry is a thread and a payload buffer: 8 per CPU on
		// small machines, fewer (at least 2) where there are many CPUs.
		depth = min(max(32/n, 2), 8)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup /dev/fuse fd: %w", err)
	}
	r := &Rings{fd: dup, name: name, h: h, payload: payload, early: map[uint64]struct{}{}, earlyTTL: earlyTTL, done: make(chan struct{})}
	r.queues = make([]queue, n)
	for qid := range n {
		r.queues[qid].n.Store(int32(depth))
		for range depth {
			r.ents = append(r.ents, &entry{r: r, qid: uint16(qid)})
		}
	}
	r.total.Store(int32(len(r.ents)))
	errs := make(chan error, len(r.ents))
	for _, e := range r.ents {
		r.entsWG.Add(1)
		go e.run(errs)
	}
	var first error
	for range r.ents {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first == nil {
		for range 2 {
			r.devWG.Add(1)
			go func() {
				defer r.devWG.Done()
				serveDev(r.fd, name, h, payload, r, &r.devReqs)
			}()
		}
	}
	go func() {
		r.entsWG.Wait()
		r.devWG.Wait()
		unix.Close(dup)
		close(r.done)
	}()
	if first != nil {
		// The entries that did register stay until the connection ends;
		// the kernel serves /dev/fuse alone (a failed REGISTER turns the
		// ring off for the connection), and the caller's server reads it.
		return nil, first
	}
	return r, nil
}

// entry is one ring entry of queue qid, served by its own goroutine locked
// to its own thread (bound to CPU qid: pinToCPU) with its own small
// io_uring: the thread waits for a request, answers it in place and commits
// it, fetching the next, in one io_uring_enter, so a request costs one
// wake-up (libfuse instead serves all entries of a queue from one thread
// and one ring). The kernel hands a request to the free entry of the
// caller's CPU's queue that was freed last. The
// header block and payload buffer are mapped memory the garbage collector
// neither moves nor frees; scratch is a copy of the request payload for ops
// whose reply may overwrite it while the filesystem still reads it.
type entry struct {
	r   *Rings
	qid uint16
	// cur is the unique of the request the entry is answering, 0 between
	// requests: what an INTERRUPT is matched against.
	cur     atomic.Uint64
	ring    *ring
	mem     []byte
	hdr     []byte
	payload []byte
	scratch []byte
	// inv and outv back the iovecs handed to the Handler, so that a
	// request allocates none.
	inv  [3][]byte
	outv [2][]byte
}

func (e *entry) run(started chan<- error) {
	defer e.r.entsWG.Done()
	runtime.LockOSThread() // never unlocked: the thread ends with the entry (see "Task work")
	pinToCPU(int(e.qid))
	if err := e.setup(); err != nil {
		e.teardown()
		started <- fmt.Errorf("queue %d: %w", e.qid, err)
		return
	}
	started <- nil
	e.loop()
	e.teardown()
}

// pinToCPU binds the calling thread to cpu, leaving it unbound where that
// CPU is not ours to use (offline, or outside the process's cpuset). Queue
// qid carries the requests of callers running on CPU qid, so an entry
// thread bound there is woken on the caller's CPU: the caller sleeps, the
// scheduler switches to the entry's thread on the same CPU, and the reply
// wakes the caller there again, with no cross-CPU wake-up (an IPI, and in
// a VM an exit) on either side. Unbound, the scheduler tends to wake the
// thread on the other, idle CPU. libfuse binds its queue threads the same
// way. The binding stays with the thread: the caller has locked it, and
// Go creates the threads a locked thread asks for from its template thread
// (runtime.newm), so none inherits it.
func pinToCPU(cpu int) {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		slog.Debug("io_uring queue thread left unbound", "cpu", cpu, "err", err)
	}
}

func (e *entry) setup() error {
	var err error
	if e.ring, err = newRing(2); err != nil {
		return err
	}
	page := os.Getpagesize()
	if e.mem, err = unix.Mmap(-1, 0, page+e.r.payload, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return fmt.Errorf("ring entry buffer: %w", err)
	}
	e.hdr, e.payload, e.scratch = e.mem[:reqHeaderSize], e.mem[page:], make([]byte, 4096)
	// The iovec array lives in the entry's first page, after the header.
	iov := unsafeIovecs(e.mem[512:], 2)
	iov[0].Base = &e.hdr[0]
	iov[0].SetLen(reqHeaderSize)
	iov[1].Base = &e.payload[0]
	iov[1].SetLen(len(e.payload))
	sqe := e.ring.getSQE()
	e.cmdSQE(sqe, cmdRegister, 0)
	put64(sqe, sqeAddr, uint64(uintptrOf(&iov[0])))
	put32(sqe, sqeLen, 2)
	if err := e.ring.enter(0); err != nil {
		return err
	}
	// A REGISTER the kernel refuses completes at once; one it keeps does
	// not complete until a request arrives, so an empty completion queue
	// here means the entry is registered. A request that arrived already
	// stays in the queue for loop.
	var failed error
	e.ring.peek(func(c cqe) {
		if c.res < 0 {
			failed = fmt.Errorf("%w: %w", ErrRefused, syscall.Errno(-c.res))
		}
	})
	return failed
}

func (e *entry) cmdSQE(sqe []byte, op uint32, commitID uint64) {
	put8(sqe, sqeOpcode, opURingCmd)
	put32(sqe, sqeFd, uint32(e.r.fd))
	put32(sqe, sqeOff, op)
	put64(sqe, sqeCmd+8, commitID)
	put16(sqe, sqeCmd+16, e.qid)
}

// loop answers the requests the kernel puts into the entry until the
// kernel gives the entry back (unmount: -ENOTCONN).
func (e *entry) loop() {
	for {
		if err := e.ring.enter(1); err != nil {
			slog.Error("io_uring ring entry stopped", "mount", e.r.name, "qid", e.qid, "err", err)
			return
		}
		var res int32 = 1 // no completion yet (a wait cut short by a signal)
		e.ring.reap(func(c cqe) { res = c.res })
		switch {
		case res == 1:
			continue
		case res < 0:
			if res != -int32(unix.ENOTCONN) {
				slog.Warn("io_uring ring entry lost", "mount", e.r.name, "qid", e.qid, "err", syscall.Errno(-res))
			}
			return
		}
		e.r.reqs.Add(1)
		e.r.took(e)
		e.begin()
		e.answer()
		e.cur.Store(0)
		e.r.answered(e)
		e.cmdSQE(e.ring.getSQE(), cmdCommitAndFetch, get64(e.hdr, hdrCommitID))
	}
}

// answer hands the request in e to the Handler and leaves the reply in e,
// ready to commit.
func (e *entry) answer() {
	h := e.hdr
	length := int(get32(h, 0))
	opcode := get32(h, 4)
	unique := get64(h, 8)
	psz := min(int(get32(h, hdrPayloadSz)), len(e.payload))
	opLen := min(max(length-inHeaderSize-psz, 0), 128)
	e.inv[0], e.inv[1] = h[:inHeaderSize], h[hdrOpIn:hdrOpIn+opLen]
	in := e.inv[:2]
	if psz > 0 {
		if opcode == opWrite {
			e.inv[2] = e.payload[:psz]
		} else {
			if psz > len(e.scratch) {
				e.scratch = make([]byte, psz)
			}
			copy(e.scratch, e.payload[:psz])
			e.inv[2] = e.scratch[:psz]
		}
		in = e.inv[:3]
	}
	e.outv[0], e.outv[1] = h[:outHeaderSize], e.payload
	n, errno := e.r.h(in, e.outv[:])
	if errno == 0 && n < outHeaderSize {
		errno = syscall.EIO // the kernel needs an answer for every ring request
	}
	if errno != 0 {
		n = errorReply(h, unique, errno)
	}
	put32(h, hdrPayloadSz, uint32(n-outHeaderSize))
}

func (e *entry) teardown() {
	if e.ring != nil {
		e.ring.close()
	}
	if e.mem != nil {
		unix.Munmap(e.mem)
	}
}

func unsafeIovecs(b []byte, n int) []unix.Iovec {
	return unsafe.Slice((*unix.Iovec)(unsafe.Pointer(&b[0])), n)
}

func uintptrOf[T any](p *T) uintptr { return uintptr(unsafe.Pointer(p)) }
