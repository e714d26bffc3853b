package audit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Defaults for Options fields left zero.
const (
	DefaultMaxSize  = 16 << 20 // bytes in audit.log before it rotates
	DefaultRate     = 200      // lines per second of each principal
	DefaultQueueLen = 1024     // lines waiting for the writer
)

// Bounds on each string of a line as written (JSON-escaped): longer ones
// are cut and end "…(+N bytes)", N the bytes cut, so a denial of a
// deeply nested name cannot write kilobytes.
const (
	MaxField  = 1024     // principal, op, uri, rule, outcome
	MaxDetail = 16 << 10 // detail (a reload names what it changed)
)

// Record is one line: a denied operation, or what a principal did.
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

// summary reports one principal's lines that were not written.
type summary struct {
	Time      string `json:"time"`
	Principal string `json:"principal"`
	Dropped   uint64 `json:"dropped"`
	// RateLimited and QueueFull split Dropped by cause.
	RateLimited uint64 `json:"rate_limited"`
	QueueFull   uint64 `json:"queue_full"`
}

// item is a queued record with its principal's drops that happened
// before it was accepted, so the summary line lands where the lines went
// missing.
type item struct {
	Record
	decision    bool // also written to the decisions file
	rate, queue uint64
}

// bucket is one principal's token bucket and its drops not yet reported.
type bucket struct {
	tokens      float64
	last        time.Time
	rate, queue uint64 // lines dropped over the rate, and with the queue full
}

// file is one file of the log: audit.log or the decisions file.
type file struct {
	path string
	f    *os.File
	w    *bufio.Writer
	size int64
}

// Options tune a Log. Zero values take the defaults.
type Options struct {
	// MaxSize is the size in bytes at which audit.log is renamed to
	// audit.log.1 (replacing it) and a new file started; the decisions
	// file rotates the same way. Disk use stays under about four times
	// MaxSize.
	MaxSize int64
	// Rate is the sustained number of lines per second of each principal;
	// Burst how many may come at once (default: Rate). Decisions are not
	// limited.
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
	buckets  map[string]*bucket // by principal

	// Owned by the writer goroutine.
	all file  // audit.log: every line
	dec file  // the decisions file: decision lines again, opened at the first one
	err error // first write error, returned by Close
}

// DecisionsPath is where the log at path keeps its decision lines:
// audit.log's are in audit.decisions.log.
func DecisionsPath(path string) string {
	return strings.TrimSuffix(path, ".log") + ".decisions.log"
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
		buckets: map[string]*bucket{}, all: file{path: path}, dec: file{path: DecisionsPath(path)}}
	if err := l.openFile(&l.all); err != nil {
		return nil, err
	}
	go l.run()
	return l, nil
}

// openFile opens lf for appending with mode 0600 and learns its size.
func (l *Log) openFile(lf *file) error {
	f, err := os.OpenFile(lf.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
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
	lf.f, lf.size = f, st.Size()
	if lf.w == nil {
		lf.w = bufio.NewWriterSize(f, 64<<10)
	} else {
		lf.w.Reset(f)
	}
	return nil
}

// Denied records one denied operation (or another line of what a
// principal does: a held write, an mcp read). It never blocks: over the
// principal's rate limit or with the queue full the line is dropped and
// counted against the principal, so one principal's flood drops its own
// lines only.
func (l *Log) Denied(r Record) { l.send(r, false) }

// Decision records what a person decided (a review approval or
// rejection, a reload): it is never rate limited, and it is written to
// the decisions file too (DecisionsPath), which no volume of other lines
// rotates. Like any line it is dropped, and counted, when the queue is
// full.
func (l *Log) Decision(r Record) { l.send(r, true) }

// Reload records one reload of the config, a Decision: Op is "reload",
// URI the config file, Rule "applied" or "refused", Detail what changed
// or the errors.
func (l *Log) Reload(r Record) {
	r.Op = "reload"
	l.Decision(r)
}

func (l *Log) send(r Record, decision bool) {
	if r.Time.IsZero() {
		r.Time = l.opts.Now()
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return
	}
	it := item{Record: r, decision: decision}
	if !l.take(&it) {
		return
	}
	select {
	case l.ch <- it:
	default:
		l.bucketMu.Lock()
		b := l.bucket(r.Principal, r.Time)
		b.rate += it.rate
		b.queue += it.queue + 1
		l.bucketMu.Unlock()
	}
}

// take takes one token from the bucket of it.Principal, refilled at
// Rate per second (a decision needs none), and moves the principal's
// drops to it. Over the rate it counts the drop and returns false.
func (l *Log) take(it *item) bool {
	l.bucketMu.Lock()
	defer l.bucketMu.Unlock()
	b := l.bucket(it.Principal, it.Time)
	if !it.decision {
		if b.tokens < 1 {
			b.rate++
			return false
		}
		b.tokens--
	}
	it.rate, it.queue, b.rate, b.queue = b.rate, b.queue, 0, 0
	return true
}

// bucket returns principal's bucket refilled up to now, making a full
// one for a principal not seen since its bucket was last full.
// bucketMu is held.
func (l *Log) bucket(principal string, now time.Time) *bucket {
	b := l.buckets[principal]
	if b == nil {
		b = &bucket{tokens: float64(l.opts.Burst), last: now}
		l.buckets[principal] = b
	}
	if dt := now.Sub(b.last); dt > 0 {
		b.tokens = min(float64(l.opts.Burst), b.tokens+dt.Seconds()*l.opts.Rate)
		b.last = now
	}
	return b
}

// drops takes every principal's unreported drops, sorted by principal,
// and forgets the buckets that are full again and have none.
func (l *Log) drops() []summary {
	l.bucketMu.Lock()
	defer l.bucketMu.Unlock()
	var out []summary
	now := l.opts.Now()
	for p, b := range l.buckets {
		if b.rate+b.queue > 0 {
			out = append(out, summary{Principal: p, RateLimited: b.rate, QueueFull: b.queue})
			b.rate, b.queue = 0, 0
		} else if l.bucket(p, now).tokens >= float64(l.opts.Burst) {
			delete(l.buckets, p)
		}
	}
	slices.SortFunc(out, func(a, b summary) int { return strings.Compare(a.Principal, b.Principal) })
	return out
}

// Close stops accepting lines, writes what is queued (and the last dropped
// summaries), flushes and closes the files. It returns the first write
// error.
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
			l.flush(&l.all)
			l.flush(&l.dec)
			if l.isClosed() && len(l.ch) == 0 {
				// Drain what is left (Close closed the channel) and finish.
				for it := range l.ch {
					l.writeItem(it)
				}
				l.writeDrops()
				for _, lf := range []*file{&l.all, &l.dec} {
					l.flush(lf)
					if lf.f != nil {
						if err := lf.f.Close(); err != nil {
							l.fail(err)
						}
					}
				}
				return
			}
		case <-tick.C:
			if len(l.ch) == 0 {
				l.writeDrops()
				l.flush(&l.all)
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
	l.writeSummary(summary{Principal: it.Principal, RateLimited: it.rate, QueueFull: it.queue})
	b := l.format(it.Record)
	l.write(&l.all, b)
	if it.decision {
		l.write(&l.dec, b)
	}
}

func (l *Log) format(r Record) []byte {
	b, _ := json.Marshal(line{Time: r.Time.UTC().Format(time.RFC3339Nano), Principal: clip(r.Principal, MaxField),
		UID: r.UID, GID: r.GID, PID: r.PID, Op: clip(r.Op, MaxField), URI: clip(r.URI, MaxField),
		Rule: clip(r.Rule, MaxField), Outcome: clip(r.Outcome, MaxField), Detail: clip(r.Detail, MaxDetail)})
	return append(b, '\n')
}

// clip cuts s where, JSON-escaped, it would pass n bytes, at the start of
// a character, and marks the cut with how many bytes it left out.
func clip(s string, n int) string {
	if len(s) <= n/6 { // even with every byte escaped it fits
		return s
	}
	w := 0
	for i, r := range s {
		// What json.Marshal writes for r, or more.
		c := utf8.RuneLen(r)
		switch {
		case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
			c = 2
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029' || r == utf8.RuneError:
			c = 6 // \u003c; an invalid byte is \ufffd
		}
		if w+c > n {
			return fmt.Sprintf("%s…(+%d bytes)", s[:i], len(s)-i)
		}
		w += c
	}
	return s
}

// writeDrops writes a {"dropped": N} line for each principal with drops
// not yet reported.
func (l *Log) writeDrops() {
	for _, d := range l.drops() {
		l.writeSummary(d)
	}
}

// writeSummary writes one {"dropped": N} line when N > 0.
func (l *Log) writeSummary(d summary) {
	if d.RateLimited+d.QueueFull == 0 {
		return
	}
	d.Time, d.Dropped = l.opts.Now().UTC().Format(time.RFC3339Nano), d.RateLimited+d.QueueFull
	d.Principal = clip(d.Principal, MaxField)
	b, _ := json.Marshal(d)
	l.write(&l.all, append(b, '\n'))
}

// write appends one line to lf, rotating first when it would pass MaxSize.
func (l *Log) write(lf *file, b []byte) {
	if lf.size > 0 && lf.size+int64(len(b)) > l.opts.MaxSize {
		l.rotate(lf)
	}
	if lf.f == nil {
		// Not opened yet, or a rotation failed to reopen it (reported):
		// try again.
		if err := l.openFile(lf); err != nil {
			l.fail(err)
			return
		}
	}
	n, err := lf.w.Write(b)
	lf.size += int64(n)
	if err != nil {
		l.fail(err)
	}
}

// rotate renames lf (audit.log) to lf.1 (audit.log.1) and starts it anew.
func (l *Log) rotate(lf *file) {
	l.flush(lf)
	if err := lf.f.Close(); err != nil {
		l.fail(err)
	}
	lf.f = nil
	if err := os.Rename(lf.path, lf.path+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.fail(err)
	}
	if err := l.openFile(lf); err != nil {
		l.fail(err)
	}
}

func (l *Log) flush(lf *file) {
	if lf.f == nil {
		return
	}
	if err := lf.w.Flush(); err != nil {
		l.fail(err)
	}
}

func (l *Log) fail(err error) {
	if l.err == nil {
		l.err = fmt.Errorf("audit log %s: %w", l.path, err)
		l.opts.Log.Error("audit log write failed", "path", l.path, "err", err)
	}
}
