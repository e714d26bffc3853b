package audit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for Options fields left zero.
const (
	DefaultMaxSize  = 16 << 20 // bytes in audit.log before it rotates
	DefaultRate     = 200      // lines per second
	DefaultQueueLen = 1024     // lines waiting for the writer
)

// Record is one denied operation.
type Record struct {
	Time      time.Time // when it was denied; zero means now
	Principal string
	UID       uint32
	GID       uint32
	PID       uint32
	Op        string // the operation: "lookup", "open", "rename", …
	URI       string // "<slug>://<path>"
	Rule      string // the deciding rule as "file:line", or "default"
	// Outcome is empty for a denied operation; "held" for a write held
	// for review, "quota" for one refused past [review] max_bytes, and
	// "approve", "reject" or "conflict" for a review decision.
	Outcome string
	// Detail says more about a record that is not a denial (a reload:
	// what changed, or why it was refused); empty for denials.
	Detail string
}

// line is a Record as written. Field names are a contract for scripts.
type line struct {
	Time      string `json:"time"`
	Principal string `json:"principal"`
	UID       uint32 `json:"uid"`
	GID       uint32 `json:"gid"`
	PID       uint32 `json:"pid"`
	Op        string `json:"op"`
	URI       string `json:"uri"`
	Rule      string `json:"rule"`
	Outcome   string `json:"outcome,omitempty"`
	Detail    string `json:"detail,omitempty"`
}

// summary reports lines that were not written.
type summary struct {
	Time    string `json:"time"`
	Dropped uint64 `json:"dropped"`
	// RateLimited and QueueFull split Dropped by cause.
	RateLimited uint64 `json:"rate_limited"`
	QueueFull   uint64 `json:"queue_full"`
}

// item is a queued record with the drops that happened before it was
// accepted, so the summary line lands where the lines went missing.
type item struct {
	Record
	rate, queue uint64
}

// Options tune a Log. Zero values take the defaults.
type Options struct {
	// MaxSize is the size in bytes at which audit.log is renamed to
	// audit.log.1 (replacing it) and a new file started. Disk use stays
	// under about twice MaxSize.
	MaxSize int64
	// Rate is the sustained number of lines per second; Burst how many may
	// come at once (default: Rate).
	Rate  float64
	Burst int
	// QueueLen bounds the lines waiting for the writer goroutine.
	QueueLen int
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
	// Log receives write errors; nil discards them.
	Log *slog.Logger
}

// Log is an open audit log. Its methods are safe for concurrent use.
type Log struct {
	path string
	opts Options
	ch   chan item
	done chan struct{} // closed when the writer has exited

	mu     sync.RWMutex // guards closed against sends on a closed channel
	closed bool

	bucketMu sync.Mutex
	tokens   float64
	last     time.Time

	rateDropped  atomic.Uint64
	queueDropped atomic.Uint64

	// Owned by the writer goroutine.
	f    *os.File
	w    *bufio.Writer
	size int64
	err  error // first write error, returned by Close
}

// Open opens (creating, mode 0600) the audit log at path and starts its
// writer. Close it to flush.
func Open(path string, opts Options) (*Log, error) {
	if opts.MaxSize <= 0 {
		opts.MaxSize = DefaultMaxSize
	}
	if opts.Rate <= 0 {
		opts.Rate = DefaultRate
	}
	if opts.Burst <= 0 {
		opts.Burst = max(1, int(opts.Rate))
	}
	if opts.QueueLen <= 0 {
		opts.QueueLen = DefaultQueueLen
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	l := &Log{path: path, opts: opts, ch: make(chan item, opts.QueueLen), done: make(chan struct{}),
		tokens: float64(opts.Burst), last: opts.Now()}
	if err := l.openFile(); err != nil {
		return nil, err
	}
	go l.run()
	return l, nil
}

// openFile opens path for appending with mode 0600 and learns its size.
func (l *Log) openFile() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	// A file left by an older version or made by hand may be wider: the log
	// names principals and paths, so keep it private.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("audit log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit log: %w", err)
	}
	l.f, l.size = f, st.Size()
	if l.w == nil {
		l.w = bufio.NewWriterSize(f, 64<<10)
	} else {
		l.w.Reset(f)
	}
	return nil
}

// Denied records one denied operation. It never blocks: over the rate limit
// or with the queue full the line is dropped and counted.
func (l *Log) Denied(r Record) {
	if r.Time.IsZero() {
		r.Time = l.opts.Now()
	}
	if !l.take(r.Time) {
		l.rateDropped.Add(1)
		return
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return
	}
	it := item{Record: r, rate: l.rateDropped.Swap(0), queue: l.queueDropped.Swap(0)}
	select {
	case l.ch <- it:
	default:
		l.rateDropped.Add(it.rate)
		l.queueDropped.Add(it.queue + 1)
	}
}

// Reload records one reload of the config: Op is "reload", URI the config
// file, Rule "applied" or "refused", Detail what changed or the errors.
// Unlike denials it is never rate limited (a reload is rare and must be
// on record); it is dropped only when the queue is full, and counted.
func (l *Log) Reload(r Record) {
	if r.Time.IsZero() {
		r.Time = l.opts.Now()
	}
	r.Op = "reload"
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return
	}
	it := item{Record: r, rate: l.rateDropped.Swap(0), queue: l.queueDropped.Swap(0)}
	select {
	case l.ch <- it:
	default:
		l.rateDropped.Add(it.rate)
		l.queueDropped.Add(it.queue + 1)
	}
}

// take takes one token from the bucket, refilled at Rate per second.
func (l *Log) take(now time.Time) bool {
	l.bucketMu.Lock()
	defer l.bucketMu.Unlock()
	if dt := now.Sub(l.last); dt > 0 {
		l.tokens = min(float64(l.opts.Burst), l.tokens+dt.Seconds()*l.opts.Rate)
		l.last = now
	}
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// Close stops accepting lines, writes what is queued (and a final dropped
// summary), flushes and closes the file. It returns the first write error.
func (l *Log) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.ch)
	}
	l.mu.Unlock()
	<-l.done
	return l.err
}

// run is the writer goroutine: it writes batches, flushing whenever the
// queue runs empty, and once a second reports drops that no later line
// brought out.
func (l *Log) run() {
	defer close(l.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case it, ok := <-l.ch:
			for ok {
				l.writeItem(it)
				select {
				case it, ok = <-l.ch:
				default:
					ok = false
				}
			}
			l.flush()
			if l.isClosed() && len(l.ch) == 0 {
				// Drain what is left (Close closed the channel) and finish.
				for it := range l.ch {
					l.writeItem(it)
				}
				l.writeSummary(l.rateDropped.Swap(0), l.queueDropped.Swap(0))
				l.flush()
				if l.f != nil {
					if err := l.f.Close(); err != nil {
						l.fail(err)
					}
				}
				return
			}
		case <-tick.C:
			if len(l.ch) == 0 {
				l.writeSummary(l.rateDropped.Swap(0), l.queueDropped.Swap(0))
				l.flush()
			}
		}
	}
}

func (l *Log) isClosed() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.closed
}

func (l *Log) writeItem(it item) {
	l.writeSummary(it.rate, it.queue)
	l.write(l.format(it.Record))
}

func (l *Log) format(r Record) []byte {
	b, _ := json.Marshal(line{Time: r.Time.UTC().Format(time.RFC3339Nano), Principal: r.Principal,
		UID: r.UID, GID: r.GID, PID: r.PID, Op: r.Op, URI: r.URI, Rule: r.Rule, Outcome: r.Outcome, Detail: r.Detail})
	return append(b, '\n')
}

// writeSummary writes one {"dropped": N} line when N > 0.
func (l *Log) writeSummary(rate, queue uint64) {
	if rate+queue == 0 {
		return
	}
	b, _ := json.Marshal(summary{Time: l.opts.Now().UTC().Format(time.RFC3339Nano),
		Dropped: rate + queue, RateLimited: rate, QueueFull: queue})
	l.write(append(b, '\n'))
}

// write appends one line, rotating first when it would pass MaxSize.
func (l *Log) write(b []byte) {
	if l.size > 0 && l.size+int64(len(b)) > l.opts.MaxSize {
		l.rotate()
	}
	if l.f == nil {
		// A rotation failed to reopen the file (reported); try again.
		if err := l.openFile(); err != nil {
			return
		}
	}
	n, err := l.w.Write(b)
	l.size += int64(n)
	if err != nil {
		l.fail(err)
	}
}

// rotate renames audit.log to audit.log.1 and starts a new audit.log.
func (l *Log) rotate() {
	l.flush()
	if err := l.f.Close(); err != nil {
		l.fail(err)
	}
	l.f = nil
	if err := os.Rename(l.path, l.path+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.fail(err)
	}
	if err := l.openFile(); err != nil {
		l.fail(err)
	}
}

func (l *Log) flush() {
	if l.f == nil {
		return
	}
	if err := l.w.Flush(); err != nil {
		l.fail(err)
	}
}

func (l *Log) fail(err error) {
	if l.err == nil {
		l.err = fmt.Errorf("audit log %s: %w", l.path, err)
		l.opts.Log.Error("audit log write failed", "path", l.path, "err", err)
	}
}
