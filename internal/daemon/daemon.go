// Package daemon wires the parts of neuralisfs into one running daemon:
// sources, policy, index, git state, the FUSE mounts (main and views), the
// watcher and the control socket. cmd/neuralisfs parses flags and calls Run.
//
// Reload (reload.go): SIGHUP, or a "reload" request on the control socket
// from root or the daemon's uid, makes the serve loop read the config
// again. It is compiled whole (mounts.Load, policy.New, the views'
// principals, nesting) or refused whole, leaving the running config. An
// accepted one is published as a new live value (config, policy,
// sources) for the control requests and the journal, handed to git state,
// and to fs.FS.Reload, which swaps what every mount decides at once and
// invalidates the kernel's caches the change makes wrong before it
// returns; then sources that went are unwatched and closed, new ones
// watched and indexed, the index and journal turned on or off, and views
// mounted or unmounted. Settings read only at start (state_dir and the
// mount's own options in [mount]) are reported as needing a restart.
// Every reload is an audit line and a log line.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/fs"
	"github.com/neuralis/neuralisfs/index"
	"github.com/neuralis/neuralisfs/internal/audit"
	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/internal/held"
	"github.com/neuralis/neuralisfs/internal/journal"
	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// Options configure Run.
type Options struct {
	Config     *mounts.Config
	Mountpoint string
	Debug      bool
	Log        *slog.Logger
	// Ready is called once every mount is serving.
	Ready func(mountpoints []string)
	// Stopping, when set, is called as the daemon begins to stop, while
	// everything it holds is still live (mount -memprofile writes the
	// heap profile then: after Run returns, the journal, index and node
	// tree are garbage and the profile would not show them).
	Stopping func()
}

// Daemon is a running neuralisfs.
type Daemon struct {
	o   Options
	log *slog.Logger
	// landing records the names reverts write files under (landing.go).
	landing *landing
	// cfg is the config the daemon started with: what a reload cannot
	// change (state_dir, the mount's own options) is read from it.
	cfg *mounts.Config
	// live is the running config, policy and sources; a reload replaces
	// it whole (see reload.go).
	live atomic.Pointer[live]
	// mp is the main mountpoint.
	mp      string
	fsys    *fs.FS
	watcher *mounts.Watcher
	audit   *audit.Log
	git     *gitState
	// idx is the running index, nil while [index] enabled is false (a
	// reload turns it on and off: setIndex).
	idx atomic.Pointer[indexRun]
	// jrnl is the running journal, nil while [journal] enabled is false
	// (a reload turns it on and off: setJournal).
	jrnl atomic.Pointer[journal.Journal]
	held *held.Store
	// overlays keeps each principal's search overlay of its held files
	// (index.OverlayCache); made with held.
	overlays *index.OverlayCache

	feedsMu sync.Mutex
	feeds   map[*mounts.Source]context.CancelFunc // feed loops, by source
	ctl     *control.Server
	// full is set while state_dir has no room (full.go).
	full stateFull
	// metrics serves [metrics] listen (nil: off); a reload may start,
	// move or stop it (metricsMu). The mounts count requests and denials
	// (fs.FS.SetStats) while it serves.
	metricsMu sync.Mutex
	metrics   *metricsServer
	// reloadsApplied and reloadsRefused count reloads, for the metrics.
	reloadsApplied, reloadsRefused atomic.Uint64

	ctx    context.Context // cancelled at shutdown; background work stops
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	servers map[string]*fuse.Server      // mountpoint → server
	views   map[string]mounts.ViewConfig // mountpoint → the view served there
	// dropping are mountpoints a reload is unmounting: their end is not
	// the end of the daemon.
	dropping map[string]bool
	// exited receives the mountpoint of every server that stopped.
	exited chan string
	// reloads carries reload requests to the serve loop, which runs them
	// one at a time between its other work.
	reloads chan reloadJob
}

// live is one config in force: the config, its compiled policy and its
// sources. It is never changed once published.
type live struct {
	cfg     *mounts.Config
	pol     *policy.Set
	sources []*mounts.Source
}

// policy is the running policy.
func (d *Daemon) policy() *policy.Set { return d.live.Load().pol }

// srcs are the running sources.
func (d *Daemon) srcs() []*mounts.Source { return d.live.Load().sources }

// Run mounts everything and serves until ctx is cancelled or a mount is
// unmounted from outside; then it unmounts the rest and returns.
func Run(ctx context.Context, o Options) error {
	spareProcs()
	d, err := start(o)
	if err != nil {
		return err
	}
	return d.serve(ctx)
}

// minProcs is the fewest Ps the daemon runs with (see spareProcs).
const minProcs = 8

// spareProcs raises GOMAXPROCS to minProcs unless the environment sets it.
// Each FUSE reader waits in read(2) on /dev/fuse holding a P; with no P to
// spare, the runtime's sysmon wakes every 20 µs to take them back and hand
// them off, a context switch or two per request on top of FUSE's own. With
// spare Ps it stays asleep. On the 2-CPU development VM a getxattr round
// trip went from 55–63 µs to 47–53 µs and the daemon's CPU per request
// fell by a fifth (README "Benchmarks"). go-fuse would keep as many readers
// waiting as there are Ps, which would hold them all again; the mounts keep
// a quarter of that (fs/readers.go).
func spareProcs() {
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) < minProcs {
		runtime.GOMAXPROCS(minProcs)
	}
}

func start(o Options) (*Daemon, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	cfg := o.Config
	d := &Daemon{o: o, log: o.Log, cfg: cfg, servers: map[string]*fuse.Server{}, views: map[string]mounts.ViewConfig{},
		dropping: map[string]bool{}, exited: make(chan string, 64), reloads: make(chan reloadJob)}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	mp := o.Mountpoint
	if mp == "" {
		mp = cfg.Mount.Mountpoint
	}
	if mp == "" {
		return nil, errors.New("no mountpoint: name one on the command line or set [mount] mountpoint")
	}
	d.mp = mp
	mps := []string{mp}
	for _, v := range cfg.Views {
		mps = append(mps, v.Mountpoint)
	}
	if err := checkNesting(cfg, mps); err != nil {
		return nil, err
	}
	uid := uint32(os.Geteuid())
	pol, err := policy.New(cfg.PolicyConfig(uid))
	if err != nil {
		return nil, err
	}
	// 0711: other uids reach the control socket (their requests are decided
	// for them) but cannot list or read anything else in it.
	if err := os.MkdirAll(cfg.StateDirPath(), 0o711); err != nil {
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	os.Chmod(cfg.StateDirPath(), 0o711)
	al, err := audit.Open(AuditPath(cfg), audit.Options{Log: d.log})
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	d.audit = al
	var sources []*mounts.Source
	for _, sc := range cfg.Sources {
		sources = append(sources, d.newSource(sc))
	}
	d.live.Store(&live{cfg: cfg, pol: pol, sources: sources})
	d.startFeeds() // file, inline and http sources: feeds.go
	d.git = newGitState(d.log, sources)
	d.git.statusFor = d.fsStatusFor
	if err := d.startIndex(); err != nil {
		d.shutdown()
		return nil, err
	}
	if err := d.startJournal(); err != nil {
		d.shutdown()
		return nil, err
	}
	if err := d.startHeld(); err != nil {
		d.shutdown()
		return nil, err
	}
	var jr fs.Journal
	if d.jr() != nil {
		jr = journaler{d}
	}
	var ix fs.Indexer
	var search fs.Searcher
	if x := d.ix(); x != nil {
		ix, search = x, searcher{d}
	}
	entry, attr := cfg.Timeouts()
	var stats *fs.Stats
	if cfg.Metrics.Listen != "" {
		stats = fs.NewStats()
	}
	d.fsys = fs.New(fs.Options{
		Stats:          stats,
		Index:          ix,
		Search:         search,
		Git:            d.git,
		Journal:        jr,
		Held:           d.held,
		Review:         reviewer{d},
		Collection:     collectionPort{d},
		SourceStatus:   d.fsStatus,
		Sources:        sources,
		Policy:         pol,
		Log:            d.log,
		EntryTimeout:   entry,
		AttrTimeout:    attr,
		WatchedTimeout: cfg.WatchedTimeout(),
		Watched: func(slug, rel string) bool {
			return d.watcher != nil && d.watcher.Watching(slug, rel)
		},
		Passthrough: cfg.Passthrough(),
		DaemonUID:   uid,
		Audit:       auditor{al},
	})
	w, err := mounts.NewWatcher(d.log, 10*time.Millisecond, func(cs []mounts.Change) {
		d.fsys.Changed(cs)
		// "Anything may have changed" (the kernel's event queue
		// overflowed, or a source's folders are all watched again after
		// its watches ran out): the index missed what the watcher did,
		// and is brought up to date as at start. Before, it kept missing
		// those files until the daemon restarted.
		for _, c := range cs {
			if c.Rescan && c.Rel == "" {
				d.reconcile(c.Slug)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("watcher: %w", err)
	}
	d.watcher = w
	// A source is DEGRADED while some of its folders have no watch (the
	// inotify limit), and whole again once the watcher placed them.
	w.Notify(func(slug, reason string) {
		for _, s := range d.srcs() {
			if s.Slug() == slug {
				s.SetDegraded(reason)
			}
		}
	})
	d.git.watched = func(slug string) bool { return w.Watching(slug, "") }
	for _, s := range sources {
		d.watch(s)
	}
	if err := checkViews(cfg, pol); err != nil {
		d.shutdown()
		return nil, err
	}
	if err := d.mount(mp, mounts.ViewConfig{}); err != nil {
		d.shutdown()
		return nil, err
	}
	for _, v := range cfg.Views {
		if err := d.mount(v.Mountpoint, v); err != nil {
			d.shutdown()
			return nil, err
		}
	}
	ctl, err := control.Listen(filepath.Join(cfg.StateDirPath(), control.SocketName), d.handle)
	if err != nil {
		d.shutdown()
		return nil, err
	}
	d.ctl = ctl
	if d.metrics, err = d.startMetrics(cfg); err != nil {
		d.shutdown()
		return nil, err
	}
	d.reconcileAll()
	return d, nil
}

// newSource opens the source sc describes.
func (d *Daemon) newSource(sc mounts.SourceConfig) *mounts.Source {
	s := mounts.NewSource(sc)
	s.Refresh()
	if st := s.Status(); st.State == mounts.Unavailable {
		d.log.Warn("source unavailable", "source", sc.Slug, "status", st.String())
	}
	return s
}

// watch starts watching s's folder, when it is there.
func (d *Daemon) watch(s *mounts.Source) {
	if s.Config.Layer != "" {
		return // a layer's folder is its source's: fs.FS.Changed hands it the source's changes
	}
	if r, err := s.Root(); err == nil {
		d.watcher.Watch(s.Slug(), r)
		if reason := d.watcher.Failed(s.Slug()); reason != "" {
			s.SetDegraded(reason)
		}
	}
}

// checkViews refuses a view whose principal is not defined.
func checkViews(cfg *mounts.Config, pol *policy.Set) error {
	for _, v := range cfg.Views {
		if _, ok := pol.PrincipalByName(v.Principal); !ok {
			return fmt.Errorf("%s:%d: view principal %q is not defined", cfg.File, v.Line, v.Principal)
		}
	}
	return nil
}

// mount serves the main mount (v zero) or the view v at mp.
func (d *Daemon) mount(mp string, v mounts.ViewConfig) error {
	view := v.Principal
	if cleared, err := ClearStale(mp); err != nil {
		return err
	} else if cleared {
		d.log.Warn("cleared a stale mount left by a daemon that died", "mountpoint", mp)
	}
	if fi, err := os.Stat(mp); err != nil {
		return fmt.Errorf("mountpoint %s: %w", mp, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("mountpoint %s is not a directory", mp)
	}
	if isMounted(mp) {
		return fmt.Errorf("mountpoint %s is already mounted; unmount it first (neuralisfs unmount %s)", mp, mp)
	}
	name := "neuralisfs"
	if view != "" {
		name = "neuralisfs:" + view
	}
	srv, err := d.fsys.Mount(mp, fs.MountOptions{AllowOther: d.cfg.AllowOther(), Debug: d.o.Debug, View: view, ReadOnly: v.ReadOnly, FsName: name, IOURing: d.cfg.IOURing()})
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.servers[mp] = srv
	if view != "" {
		d.views[mp] = v
	}
	d.mu.Unlock()
	go func() { srv.Wait(); d.exited <- mp }()
	d.log.Info("mounted", "mountpoint", mp, "view", view != "", "read_only", v.ReadOnly)
	return nil
}

// mountpoints lists the mounts being served (the main one and the views).
func (d *Daemon) mountpoints() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var mps []string
	for mp := range d.servers {
		mps = append(mps, mp)
	}
	sort.Strings(mps)
	return mps
}

func (d *Daemon) serve(ctx context.Context) error {
	mps := d.mountpoints()
	// SIGHUP reloads the config (reload.go); caught before anyone is told
	// the mounts are ready, so an early one cannot kill the daemon.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if d.o.Ready != nil {
		d.o.Ready(mps)
	}
	if err := NotifyReady(readyStatus(mps)); err != nil {
		d.log.Warn("telling the service manager the mounts are ready", "err", err)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			d.shutdown()
			return nil
		case mp := <-d.exited:
			d.mu.Lock()
			dropped := d.dropping[mp]
			delete(d.dropping, mp)
			_, view := d.views[mp]
			if !dropped {
				delete(d.servers, mp)
				delete(d.views, mp)
			}
			d.mu.Unlock()
			if dropped {
				continue // a reload unmounted it
			}
			if view {
				// One agent's view, unmounted by hand (say to cut the
				// agent off): the main mount and the other views serve
				// on, and a reload mounts it again (applyViews).
				d.log.Warn("a view was unmounted from outside; the main mount and the other views serve on, and neuralisfs reload mounts it again", "mountpoint", mp)
				continue
			}
			d.log.Info("unmounted from outside", "mountpoint", mp)
			d.shutdown()
			return nil
		case <-hup:
			d.reload(reloadJob{signal: true})
		case job := <-d.reloads:
			job.reply <- d.reload(job)
		case <-tick.C:
			d.refresh()
			d.probeStateDir()
		}
	}
}

// refresh picks up sources that appeared, disappeared or were replaced.
func (d *Daemon) refresh() {
	for _, s := range d.srcs() {
		if !s.Refresh() {
			continue
		}
		d.log.Info("source changed", "source", s.Slug(), "status", s.Status().String())
		d.git.reset(s.Slug())
		d.watcher.Unwatch(s.Slug())
		if r, err := s.Root(); err == nil {
			d.watcher.Watch(s.Slug(), r)
			if reason := d.watcher.Failed(s.Slug()); reason != "" {
				s.SetDegraded(reason)
			} else {
				s.SetDegraded("")
			}
		}
		d.fsys.SourceChanged(s.Slug())
		if _, err := s.Root(); err == nil {
			d.reconcile(s.Slug())
		}
	}
}

// shutdown unmounts every mount (lazily when busy) and stops the watcher.
func (d *Daemon) shutdown() {
	NotifyStopping()
	if d.o.Stopping != nil {
		d.o.Stopping()
	}
	if d.cancel != nil {
		d.cancel()
	}
	if d.ctl != nil {
		d.ctl.Close()
		d.ctl = nil
	}
	d.metricsMu.Lock()
	if d.metrics != nil {
		d.metrics.close()
		d.metrics = nil
	}
	d.metricsMu.Unlock()
	// The watcher stops first, while the mounts still serve: a kernel
	// entry invalidation it is delivering waits for the folder's lock,
	// which a request may hold until the daemon answers it; once the
	// servers stopped reading, that thread would wait for good, and the
	// daemon could not exit (not even on SIGKILL).
	if d.watcher != nil {
		d.watcher.Close()
	}
	if d.fsys != nil {
		d.fsys.Stop()
	}
	d.mu.Lock()
	servers := d.servers
	d.servers = map[string]*fuse.Server{}
	d.mu.Unlock()
	for mp, srv := range servers {
		if err := Unmount(mp); err != nil {
			d.log.Warn("unmount", "mountpoint", mp, "err", err)
		}
		done := make(chan struct{})
		go func() { srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			d.log.Warn("server did not stop", "mountpoint", mp)
		}
	}
	d.wg.Wait()
	if d.held != nil {
		d.held.Close()
		d.held = nil
	}
	if d.overlays != nil {
		d.overlays.Close()
	}
	if j := d.jrnl.Swap(nil); j != nil {
		if err := j.Close(); err != nil {
			d.log.Warn("closing the journal", "err", err)
		}
	}
	if r := d.idx.Swap(nil); r != nil {
		if err := r.stop(); err != nil {
			d.log.Warn("closing the index", "err", err)
		}
	}
	if l := d.live.Load(); l != nil {
		for _, s := range l.sources {
			s.Close()
		}
	}
	if d.audit != nil {
		d.audit.Close()
	}
}

// AuditPath is where the audit log of cfg lives.
func AuditPath(cfg *mounts.Config) string {
	return filepath.Join(cfg.StateDirPath(), "audit.log")
}

// auditor adapts the audit log to what fs reports.
type auditor struct{ l *audit.Log }

func (a auditor) Denied(d fs.Denial) {
	a.l.Denied(audit.Record{Principal: d.Principal, UID: d.UID, GID: d.GID, PID: d.PID, Op: d.Op, URI: d.URI, Rule: d.Rule})
}

// Held records a write held for review (op "quota": refused past the
// bound).
func (a auditor) Held(d fs.Denial) {
	out := "held"
	if d.Op == "quota" {
		out = "quota"
	}
	a.l.Denied(audit.Record{Principal: d.Principal, UID: d.UID, GID: d.GID, PID: d.PID, Op: d.Op, URI: d.URI, Rule: d.Rule, Outcome: out})
}

// isMounted reports whether dir is a mountpoint right now.
func isMounted(dir string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMount(f[4]) == dir {
			return true
		}
	}
	return false
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// ClearStale unmounts dir when it is a mount left by a crashed daemon
// ("transport endpoint is not connected").
func ClearStale(dir string) (bool, error) {
	// stat may be answered from the kernel's attribute cache even after
	// the daemon died; statfs always asks the filesystem.
	var st unix.Statfs_t
	err := unix.Statfs(dir, &st)
	if err != unix.ENOTCONN && err != unix.ECONNABORTED {
		return false, nil
	}
	if err := detach(dir); err != nil {
		return false, fmt.Errorf("mountpoint %s is a stale mount and could not be cleared: %w", dir, err)
	}
	return true, nil
}

func detach(dir string) error {
	if os.Geteuid() == 0 {
		return unix.Unmount(dir, unix.MNT_DETACH)
	}
	out, err := exec.Command("fusermount3", "-uz", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("fusermount3 -uz: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ErrBusyDetached is returned by Unmount when the mount was busy and was
// detached lazily: it disappears once the last user lets go.
var ErrBusyDetached = errors.New("mount was busy and was detached lazily; it goes away when the last process using it lets go")

// Unmount unmounts dir, lazily when it is busy (returning ErrBusyDetached).
func Unmount(dir string) error {
	if os.Geteuid() == 0 {
		err := unix.Unmount(dir, 0)
		if err == unix.EBUSY {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				return err
			}
			return ErrBusyDetached
		}
		if err == unix.EINVAL {
			return fmt.Errorf("%s is not mounted", dir)
		}
		return err
	}
	out, err := exec.Command("fusermount3", "-u", dir).CombinedOutput()
	if err == nil {
		return nil
	}
	if strings.Contains(string(out), "busy") {
		if err := detach(dir); err != nil {
			return err
		}
		return ErrBusyDetached
	}
	return fmt.Errorf("fusermount3 -u %s: %s", dir, strings.TrimSpace(string(out)))
}
