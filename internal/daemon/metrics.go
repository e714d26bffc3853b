package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/neuralis/neuralisfs/fs"
	"github.com/neuralis/neuralisfs/mounts"
)

// The metrics `[metrics] listen` serves, in the Prometheus text format.
// Everything is read when scraped: the FUSE counters from fs.Stats, the
// rest from the index, the journal and the sources. Labels carry opcodes,
// operations, principal names and source slugs, never file names.
var (
	mRequests = prometheus.NewDesc("neuralisfs_fuse_request_duration_seconds",
		"FUSE requests served, by opcode, and how long the daemon took to answer them.", []string{"op"}, nil)
	mErrors = prometheus.NewDesc("neuralisfs_fuse_request_errors_total",
		"FUSE requests answered with an error (ENOENT included), by opcode.", []string{"op"}, nil)
	mDenials = prometheus.NewDesc("neuralisfs_denials_total",
		"Operations the policy refused, by operation and principal.", []string{"op", "principal"}, nil)
	mDocs = prometheus.NewDesc("neuralisfs_index_documents",
		"Documents in the full-text index, by source.", []string{"source"}, nil)
	mDocBytes = prometheus.NewDesc("neuralisfs_index_bytes",
		"Bytes of the indexed documents, by source.", []string{"source"}, nil)
	mQueued = prometheus.NewDesc("neuralisfs_index_queued",
		"Changes waiting to be indexed, by source.", []string{"source"}, nil)
	mQueue = prometheus.NewDesc("neuralisfs_index_queue",
		"Changes waiting to be indexed, all sources.", nil, nil)
	mBatches = prometheus.NewDesc("neuralisfs_index_batches_total",
		"Index batches applied since the daemon started.", nil, nil)
	mFresh = prometheus.NewDesc("neuralisfs_index_freshness_seconds",
		"Time from a change to it being searchable over the last 100 updates (stat median or worst), by source.", []string{"source", "stat"}, nil)
	mLast = prometheus.NewDesc("neuralisfs_index_last_indexed_timestamp_seconds",
		"When a document of the source was last indexed (Unix time).", []string{"source"}, nil)
	mJournalBytes = prometheus.NewDesc("neuralisfs_journal_bytes",
		"Bytes of content the journal keeps.", nil, nil)
	mJournalRecords = prometheus.NewDesc("neuralisfs_journal_records",
		"Records the journal keeps.", nil, nil)
	mSource = prometheus.NewDesc("neuralisfs_source_status",
		"1 for each source's current status (state AVAILABLE, EMPTY, DEGRADED or UNAVAILABLE, with its code).", []string{"source", "kind", "state", "code"}, nil)
	mHeldEntries = prometheus.NewDesc("neuralisfs_held_entries",
		"Names a principal's held changes made, copied up (kind held) or deleted (kind gone) in a source.", []string{"principal", "source", "kind"}, nil)
	mHeldBytes = prometheus.NewDesc("neuralisfs_held_bytes",
		"Bytes of a principal's held files in a source.", []string{"principal", "source"}, nil)
	mReloads = prometheus.NewDesc("neuralisfs_reloads_total",
		"Config reloads, by result (applied or refused).", []string{"result"}, nil)
)

// collector reads the daemon's state at each scrape.
type collector struct{ d *Daemon }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mRequests, mErrors, mDenials, mDocs, mDocBytes, mQueued, mQueue, mBatches,
		mFresh, mLast, mJournalBytes, mJournalRecords, mSource, mReloads, mHeldEntries, mHeldBytes} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	bounds := fs.LatencyBounds()
	st := d.fsys.Stats()
	for _, o := range st.Ops() {
		buckets := map[float64]uint64{}
		var cum uint64
		for i, le := range bounds {
			cum += o.Buckets[i]
			buckets[le] = cum
		}
		ch <- prometheus.MustNewConstHistogram(mRequests, o.Count, o.Sum.Seconds(), buckets, o.Op)
		ch <- prometheus.MustNewConstMetric(mErrors, prometheus.CounterValue, float64(o.Errors), o.Op)
	}
	for _, dn := range st.Denials() {
		ch <- prometheus.MustNewConstMetric(mDenials, prometheus.CounterValue, float64(dn.Count), dn.Op, dn.Principal)
	}
	if x := d.ix(); x != nil {
		st := x.Stats()
		ch <- prometheus.MustNewConstMetric(mQueue, prometheus.GaugeValue, float64(st.Queued))
		ch <- prometheus.MustNewConstMetric(mBatches, prometheus.CounterValue, float64(st.Batches))
		for _, s := range st.Sources {
			ch <- prometheus.MustNewConstMetric(mDocs, prometheus.GaugeValue, float64(s.Documents), s.Slug)
			ch <- prometheus.MustNewConstMetric(mDocBytes, prometheus.GaugeValue, float64(s.Bytes), s.Slug)
			ch <- prometheus.MustNewConstMetric(mQueued, prometheus.GaugeValue, float64(s.Queued), s.Slug)
			ch <- prometheus.MustNewConstMetric(mFresh, prometheus.GaugeValue, s.FreshnessMedian.Seconds(), s.Slug, "median")
			ch <- prometheus.MustNewConstMetric(mFresh, prometheus.GaugeValue, s.FreshnessWorst.Seconds(), s.Slug, "worst")
			if !s.LastIndexed.IsZero() {
				ch <- prometheus.MustNewConstMetric(mLast, prometheus.GaugeValue, float64(s.LastIndexed.UnixNano())/1e9, s.Slug)
			}
		}
	}
	if j := d.jr(); j != nil {
		st := j.Stats()
		ch <- prometheus.MustNewConstMetric(mJournalBytes, prometheus.GaugeValue, float64(st.Bytes))
		ch <- prometheus.MustNewConstMetric(mJournalRecords, prometheus.GaugeValue, float64(st.Records))
	}
	if h := d.held; h != nil {
		for _, l := range h.Layers() {
			st := l.Stats()
			ch <- prometheus.MustNewConstMetric(mHeldEntries, prometheus.GaugeValue, float64(st.Entries), l.Principal, l.Slug, "held")
			ch <- prometheus.MustNewConstMetric(mHeldEntries, prometheus.GaugeValue, float64(st.Gone), l.Principal, l.Slug, "gone")
			ch <- prometheus.MustNewConstMetric(mHeldBytes, prometheus.GaugeValue, float64(st.Bytes), l.Principal, l.Slug)
		}
	}
	for _, s := range d.srcs() {
		st := s.Status()
		ch <- prometheus.MustNewConstMetric(mSource, prometheus.GaugeValue, 1, s.Slug(), s.Config.Kind, st.State, st.Code)
	}
	ch <- prometheus.MustNewConstMetric(mReloads, prometheus.CounterValue, float64(d.reloadsApplied.Load()), "applied")
	ch <- prometheus.MustNewConstMetric(mReloads, prometheus.CounterValue, float64(d.reloadsRefused.Load()), "refused")
}

// metricsServer serves the metrics endpoint.
type metricsServer struct {
	srv  *http.Server
	ln   net.Listener
	path string // a unix socket to remove at close
	done chan struct{}
}

// startMetrics serves the metrics at cfg's [metrics] listen, when set
// (nil when not), and has the mounts count requests for them.
func (d *Daemon) startMetrics(cfg *mounts.Config) (*metricsServer, error) {
	addr := cfg.Metrics.Listen
	if addr == "" {
		return nil, nil
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(collector{d}); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	// go_goroutines, go_memstats_* …: what a long run watches for leaks
	// (scripts/soak.sh).
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	m := &metricsServer{done: make(chan struct{})}
	var err error
	if filepath.IsAbs(addr) {
		if fi, serr := os.Lstat(addr); serr == nil && fi.Mode()&os.ModeSocket != 0 {
			if c, derr := net.DialTimeout("unix", addr, 200*time.Millisecond); derr == nil {
				c.Close()
				return nil, fmt.Errorf("%s: metrics.listen: %s is being served by another process", cfg.File, addr)
			}
			os.Remove(addr) // left by a daemon that died
		}
		m.ln, err = net.Listen("unix", addr)
		if err == nil {
			m.path = addr
			os.Chmod(addr, 0o660)
		}
	} else {
		m.ln, err = net.Listen("tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: metrics.listen: %w", cfg.File, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slogErrors{d}}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "neuralisfs: metrics at /metrics")
	})
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(m.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Warn("metrics endpoint stopped", "err", err)
		}
	}()
	if d.fsys.Stats() == nil {
		d.fsys.SetStats(fs.NewStats())
	}
	d.log.Info("serving metrics", "listen", m.ln.Addr().String())
	return m, nil
}

// swapMetrics makes m (nil: none) the endpoint that serves, once a
// reload's config is in force, and stops the one that served before.
// With none, the mounts stop counting requests; what was counted is
// kept while an endpoint serves (a scraper sees the counters go on
// across a move), and one started after none starts from zero.
func (d *Daemon) swapMetrics(m *metricsServer) {
	d.metricsMu.Lock()
	old := d.metrics
	d.metrics = m
	d.metricsMu.Unlock()
	if old != nil {
		old.close()
	}
	if m == nil {
		d.fsys.SetStats(nil)
	}
}

// close stops serving the metrics.
func (m *metricsServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m.srv.Shutdown(ctx)
	<-m.done
	if m.path != "" {
		os.Remove(m.path)
	}
}

// slogErrors logs the metrics handler's errors.
type slogErrors struct{ d *Daemon }

func (s slogErrors) Println(v ...any) { s.d.log.Warn("metrics", "err", fmt.Sprint(v...)) }
