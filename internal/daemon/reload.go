package daemon

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/neuralis/neuralisfs/fs"
	"github.com/neuralis/neuralisfs/index"
	"github.com/neuralis/neuralisfs/internal/audit"
	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// reloadJob is one reload asked for: by SIGHUP, or over the control
// socket by peer (with the file to read, "" for the running one).
type reloadJob struct {
	signal bool
	peer   control.Peer
	file   string
	reply  chan reloadResult
}

type reloadResult struct {
	rep ReloadReply
	err error
}

// ReloadReply is the answer to a reload request.
type ReloadReply struct {
	// File is the config file that was read.
	File string `json:"file"`
	// Changes lists what the reload changed, one line each ("rules",
	// "source data added", "view /mnt/agent removed", …); empty when the
	// file decides what was already running.
	Changes []string `json:"changes"`
	// Restart lists the settings that changed but are read only at start
	// (state_dir, and keys of [mount], [index], [journal], [metrics] such
	// as "[mount] passthrough"); they take effect when the daemon is
	// restarted. What a reload applies of those sections is in Changes.
	Restart []string `json:"restart"`
	// Invalidated counts the kernel cache entries invalidated.
	Invalidated int `json:"invalidated"`
	// StillOpen names, one line each, the files opened through a mount
	// before the reload that keep an access the new config no longer
	// grants their opener (a write it would hold or refuse, a read it
	// would refuse) until they are closed: an open file cannot be
	// revoked (fs.StillOpen).
	StillOpen []string `json:"still_open,omitempty"`
}

// maxStillOpen bounds the open files a reload names one by one (in its
// reply, the log and the audit line); past it, it says how many more.
const maxStillOpen = 100

// ErrReloadRefused wraps every reason a config was not applied.
var ErrReloadRefused = errors.New("the running config stays")

// askReload runs a reload for a control-socket peer on the serve loop.
func (d *Daemon) askReload(peer control.Peer, file string) (ReloadReply, error) {
	if peer.UID != 0 && peer.UID != uint32(os.Geteuid()) {
		err := fmt.Errorf("only root or the daemon's own uid (%d) may reload the config", os.Geteuid())
		// Rate limited as the principal's other lines: it decides nothing,
		// and the uri is the caller's.
		d.audit.Denied(audit.Record{Principal: d.policy().Resolve(peer.UID, peer.GID).Name, UID: peer.UID, GID: peer.GID,
			PID: uint32(peer.PID), Op: "reload", URI: file, Rule: "refused", Detail: err.Error()})
		return ReloadReply{}, err
	}
	job := reloadJob{peer: peer, file: file, reply: make(chan reloadResult, 1)}
	select {
	case d.reloads <- job:
	case <-d.ctx.Done():
		return ReloadReply{}, errors.New("the daemon is shutting down")
	}
	select {
	case r := <-job.reply:
		return r.rep, r.err
	case <-d.ctx.Done():
		return ReloadReply{}, errors.New("the daemon is shutting down")
	}
}

// reload reads the config again and applies it without unmounting: the
// policy (rules, principals, defaults, visible_to), sources added,
// removed or changed, and views added or removed. A config with any
// error is refused whole and the running one stays. Every reload is one
// audit line and one log line. It runs on the serve loop only.
func (d *Daemon) reload(job reloadJob) reloadResult {
	cur := d.live.Load()
	file := job.file
	if file == "" {
		file = cur.cfg.File
	}
	rec := audit.Record{URI: file}
	if job.signal {
		rec.Principal, rec.Detail = "", "SIGHUP"
	} else {
		rec.Principal = d.policy().Resolve(job.peer.UID, job.peer.GID).Name
		rec.UID, rec.GID, rec.PID = job.peer.UID, job.peer.GID, uint32(job.peer.PID)
	}
	start := time.Now()
	// systemd (Type=notify): RELOADING=1 now, READY=1 once the config
	// that serves (the new one, or the old one kept) is in place.
	NotifyReloading()
	defer NotifyReady(readyStatus(d.mountpoints()))
	rep, err := d.apply(file)
	if err != nil {
		var lines []string
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				lines = append(lines, e.Error())
			}
		} else {
			lines = []string{err.Error()}
		}
		for _, l := range lines {
			d.log.Error("reload refused", "file", file, "err", l)
		}
		d.reloadsRefused.Add(1)
		rec.Rule = "refused"
		rec.Detail = strings.TrimPrefix(rec.Detail+"; ", "; ") + strings.Join(lines, "; ")
		d.audit.Reload(rec)
		return reloadResult{err: fmt.Errorf("%s: %w\n%s", file, ErrReloadRefused, strings.Join(lines, "\n"))}
	}
	d.reloadsApplied.Add(1)
	rec.Rule = "applied"
	what := "no change"
	if len(rep.Changes) > 0 {
		what = strings.Join(rep.Changes, ", ")
	}
	rec.Detail = strings.TrimPrefix(rec.Detail+"; ", "; ") + what
	if n := len(rep.StillOpen); n > 0 {
		rec.Detail += fmt.Sprintf("; %d opened before keep their access: %s", n, strings.Join(rep.StillOpen, "; "))
	}
	d.audit.Reload(rec)
	d.log.Info("reloaded", "file", file, "changes", what, "invalidated", rep.Invalidated, "took", time.Since(start).Round(time.Microsecond))
	for _, l := range rep.StillOpen {
		d.log.Warn("reload: a file opened before keeps its access", "open", l)
	}
	for _, k := range rep.Restart {
		d.log.Warn("reload: this setting changed but takes effect only at restart", "file", file, "key", k)
	}
	return reloadResult{rep: rep}
}

// apply loads file, checks it whole and makes it the running config.
func (d *Daemon) apply(file string) (ReloadReply, error) {
	rep := ReloadReply{File: file, Changes: []string{}, Restart: []string{}}
	cfg, err := mounts.Load(file)
	if err != nil {
		return rep, err
	}
	rep.File = cfg.File
	pol, err := policy.New(cfg.PolicyConfig(uint32(os.Geteuid())))
	if err != nil {
		return rep, err
	}
	if err := checkViews(cfg, pol); err != nil {
		return rep, err
	}
	mps := []string{d.mp}
	for _, v := range cfg.Views {
		mps = append(mps, v.Mountpoint)
	}
	if err := checkNesting(cfg, mps); err != nil {
		return rep, err
	}
	cur := d.live.Load()
	rep.Restart = restartOnly(d.cfg, cfg)
	var settings []string
	for _, k := range changedKeys(cur.cfg, cfg) {
		if liveKeys[k.key] {
			settings = append(settings, k.String())
		}
	}

	// Sources: one whose config is unchanged but for its policy keys
	// (visible_to, default, read_only: only the policy reads them) stays
	// as it is, open, watched and indexed; any other change replaces it.
	had := map[string]*mounts.Source{}
	for _, s := range cur.sources {
		had[s.Slug()] = s
	}
	var next, added, gone []*mounts.Source
	keep := map[*mounts.Source]bool{}
	for _, sc := range cfg.Sources {
		if s := had[sc.Slug]; s != nil && sameBacking(s.Config, sc) {
			next = append(next, s)
			keep[s] = true
			continue
		}
		s := d.newSource(sc)
		next = append(next, s)
		added = append(added, s)
	}
	for _, s := range cur.sources {
		if !keep[s] {
			gone = append(gone, s)
		}
	}
	for _, s := range added {
		if had[s.Slug()] != nil {
			rep.Changes = append(rep.Changes, "source "+s.Slug()+" changed")
		} else {
			rep.Changes = append(rep.Changes, "source "+s.Slug()+" added")
		}
	}
	for _, s := range gone {
		if !slices.ContainsFunc(added, func(a *mounts.Source) bool { return a.Slug() == s.Slug() }) {
			rep.Changes = append(rep.Changes, "source "+s.Slug()+" removed")
		}
	}
	if !policyOnlyMoved(cur.cfg, cfg) {
		rep.Changes = append(rep.Changes, "policy")
	}

	// A new metrics endpoint must listen before anything is published:
	// an address it cannot have refuses the reload, as any bad key does.
	moveMetrics := cur.cfg.Metrics.Listen != cfg.Metrics.Listen
	var metrics *metricsServer
	if moveMetrics {
		if metrics, err = d.startMetrics(cfg); err != nil {
			return rep, err
		}
	}

	// Publish: the daemon's view first (control requests, the journal's
	// sources), then git state, then the mounts, which invalidate what the
	// kernel caches before returning.
	d.live.Store(&live{cfg: cfg, pol: pol, sources: next})
	d.git.set(next)
	d.applySettings(cfg)
	if moveMetrics {
		d.swapMetrics(metrics)
	}
	entry, attr := cfg.Timeouts()
	fr := d.fsys.Reload(pol, next, fs.Timeouts{Entry: entry, Attr: attr, Watched: cfg.WatchedTimeout()})
	rep.Changes = append(rep.Changes, settings...)
	rep.Invalidated = fr.Invalidated
	for i, so := range fr.StillOpen {
		if i == maxStillOpen {
			rep.StillOpen = append(rep.StillOpen, fmt.Sprintf("and %d more", len(fr.StillOpen)-i))
			break
		}
		rep.StillOpen = append(rep.StillOpen, so.String())
	}
	if fr.Running > 0 {
		d.log.Warn("reload: requests decided by the old config were still running when the kernel's caches were invalidated", "requests", fr.Running)
	}
	for _, s := range gone {
		d.stopFeed(s)
		d.watcher.Unwatch(s.Slug())
		s.Close()
	}
	for _, s := range added {
		d.reloadFeed(s)
		d.watch(s)
		if is, ok := IndexSource(s, cfg); ok {
			d.reindex(s, is)
		}
	}
	// A source kept as it was whose admission changed with [index]
	// max_file_bytes is admitted anew: its files are walked again, and
	// those the new bound lets in or keeps out are indexed or dropped.
	for _, s := range next {
		is, ok := IndexSource(s, cfg)
		was, _ := IndexSource(s, cur.cfg)
		if keep[s] && ok && is.MaxFileBytes != was.MaxFileBytes {
			d.reindex(s, is)
		}
	}
	if err := d.setJournal(cfg); err != nil {
		d.log.Error("reload: the journal could not be turned on", "err", err)
		rep.Changes = append(rep.Changes, "[journal] enabled: the journal could not be opened, it stays off: "+err.Error())
	}
	if err := d.setIndex(cfg); err != nil {
		// Too late to refuse the reload: the rest of it is in place.
		// The next reload that asks for the index tries again.
		d.log.Error("reload: the index could not be turned on", "err", err)
		rep.Changes = append(rep.Changes, "[index] enabled: the index could not be opened, it stays off: "+err.Error())
	}
	rep.Changes = append(rep.Changes, d.applyViews(cfg)...)
	return rep, nil
}

// applyViews mounts the views cfg adds and unmounts those it drops (a
// view whose principal or read_only changed is mounted again: a mount's
// read-only flag is its superblock's, fixed at mount).
func (d *Daemon) applyViews(cfg *mounts.Config) []string {
	same := func(a, b mounts.ViewConfig) bool { return a.Principal == b.Principal && a.ReadOnly == b.ReadOnly }
	want := map[string]mounts.ViewConfig{}
	for _, v := range cfg.Views {
		want[v.Mountpoint] = v
	}
	d.mu.Lock()
	have := map[string]mounts.ViewConfig{}
	for mp, v := range d.views {
		have[mp] = v
	}
	d.mu.Unlock()
	var changes []string
	for mp, v := range have {
		if w, ok := want[mp]; ok && same(w, v) {
			continue
		}
		d.mu.Lock()
		delete(d.views, mp)
		delete(d.servers, mp)
		d.dropping[mp] = true
		d.mu.Unlock()
		d.fsys.Detach(mp) // before the view mounted there again exists
		if err := Unmount(mp); err != nil && !errors.Is(err, ErrBusyDetached) {
			d.log.Warn("reload: unmount view", "mountpoint", mp, "err", err)
		}
		changes = append(changes, "view "+mp+" removed")
	}
	for _, v := range cfg.Views {
		if h, ok := have[v.Mountpoint]; ok && same(h, v) {
			continue
		}
		if err := d.mount(v.Mountpoint, v); err != nil {
			d.log.Error("reload: mount view", "mountpoint", v.Mountpoint, "err", err)
			changes = append(changes, "view "+v.Mountpoint+" failed to mount: "+err.Error())
			continue
		}
		changes = append(changes, "view "+v.Mountpoint+" added")
	}
	return changes
}

// sameBacking reports whether two configs of a source serve the same
// files the same way: they differ at most in the keys only the policy
// reads, and in where they are written in the file.
func sameBacking(a, b mounts.SourceConfig) bool {
	a.VisibleTo, b.VisibleTo = nil, nil
	a.Default, b.Default = "", ""
	a.ReadOnly, b.ReadOnly = false, false
	a.Line, b.Line = 0, 0
	return reflect.DeepEqual(a, b)
}

// policyOnlyMoved reports whether the policy inputs of a and b differ only
// in the lines they are written at.
func policyOnlyMoved(a, b *mounts.Config) bool {
	pa, pb := a.PolicyConfig(0), b.PolicyConfig(0)
	for _, pc := range []*policy.Config{&pa, &pb} {
		for i := range pc.Principals {
			pc.Principals[i].File, pc.Principals[i].Line = "", 0
		}
		for i := range pc.Rules {
			pc.Rules[i].File, pc.Rules[i].Line = "", 0
		}
		for i := range pc.Sources {
			pc.Sources[i].File, pc.Sources[i].Line = "", 0
		}
	}
	return reflect.DeepEqual(pa, pb)
}

// liveKeys are the settings of [mount], [index], [journal], [review]
// and [metrics] a reload applies to the running daemon; the others of
// those sections are read at start only (restartOnly).
var liveKeys = map[string]bool{
	"[mount] entry_timeout":    true,
	"[mount] attr_timeout":     true,
	"[mount] watched_timeout":  true,
	"[index] enabled":          true,
	"[index] batch_delay":      true,
	"[index] max_file_bytes":   true,
	"[review] max_bytes":       true,
	"[journal] enabled":        true,
	"[journal] max_bytes":      true,
	"[journal] max_file_bytes": true,
	"[journal] max_records":    true,
	"[journal] sync":           true,
	"[metrics] listen":         true,
}

// reindex gives the index source s with the admission is (a source
// added, or one whose bound changed) and walks it, when it is there.
func (d *Daemon) reindex(s *mounts.Source, is index.Source) {
	x := d.ix()
	if x == nil {
		return
	}
	if err := x.AddSource(is); err != nil {
		d.log.Warn("reload: index source", "source", s.Slug(), "err", err)
	} else if _, err := s.Root(); err == nil {
		d.reconcile(s.Slug())
	}
}

// applySettings makes the live settings of cfg those of the running
// daemon (the mounts' timeouts go with the policy, fs.Reload).
func (d *Daemon) applySettings(cfg *mounts.Config) {
	if d.held != nil {
		d.held.SetMaxBytes(cfg.ReviewMaxBytes())
	}
	if x := d.ix(); x != nil {
		var delay time.Duration
		if cfg.Index.BatchDelay != nil {
			delay = cfg.Index.BatchDelay.Duration
		}
		x.SetBatchDelay(delay)
	}
	if j := d.jr(); j != nil {
		if err := j.SetLimits(cfg.Journal.MaxBytes, cfg.Journal.MaxFileBytes, cfg.Journal.MaxRecords); err != nil {
			d.log.Warn("reload: journal limits", "err", err)
		}
		if err := j.SetBatched(cfg.Journal.Sync != "each"); err != nil {
			d.log.Warn("reload: journal sync", "err", err)
		}
	}
}

// setting is one key of [mount], [index], [journal], [review] or
// [metrics] whose value differs between two configs.
type setting struct {
	key  string // "[journal] max_bytes"
	a, b any
}

// String is the key with its values: "[journal] max_bytes unset → 1048576".
func (s setting) String() string {
	return fmt.Sprintf("%s %s → %s", s.key, showSetting(s.a), showSetting(s.b))
}

// changedKeys lists the keys of those sections whose values differ
// between a and b, in the order the config types declare them.
func changedKeys(a, b *mounts.Config) []setting {
	var out []setting
	for _, sec := range []struct {
		name string
		a, b any
	}{
		{"mount", a.Mount, b.Mount},
		{"index", a.Index, b.Index},
		{"journal", a.Journal, b.Journal},
		{"review", a.Review, b.Review},
		{"metrics", a.Metrics, b.Metrics},
	} {
		va, vb := reflect.ValueOf(sec.a), reflect.ValueOf(sec.b)
		for i := range va.NumField() {
			tag := strings.Split(va.Type().Field(i).Tag.Get("toml"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			if fa, fb := va.Field(i).Interface(), vb.Field(i).Interface(); !reflect.DeepEqual(fa, fb) {
				out = append(out, setting{"[" + sec.name + "] " + tag, fa, fb})
			}
		}
	}
	return out
}

// showSetting prints a config value: a pointer's target, and "unset"
// for a nil pointer or a zero value (which take the default; a key
// whose unset and zero values differ is a pointer).
func showSetting(v any) string {
	rv := reflect.ValueOf(v)
	switch {
	case rv.Kind() == reflect.Pointer && rv.IsNil(), rv.Kind() != reflect.Pointer && rv.IsZero():
		return "unset"
	case rv.Kind() == reflect.Pointer:
		rv = rv.Elem() // set, to whatever value
	}
	if s, ok := rv.Interface().(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprint(rv.Interface())
}

// restartOnly names the settings that differ between the config the
// daemon started with and cfg but are read only at start.
func restartOnly(started, cfg *mounts.Config) []string {
	out := []string{}
	if started.StateDirPath() != cfg.StateDirPath() {
		out = append(out, "state_dir")
	}
	for _, k := range changedKeys(started, cfg) {
		if !liveKeys[k.key] {
			out = append(out, k.key)
		}
	}
	return out
}
