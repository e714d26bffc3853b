package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/neuralis/neuralisfs/mounts"
)

// feedStartWait bounds how long the daemon waits, before mounting, for
// the first round of the file, inline, http and mcp sources: long enough that a
// feed which answers at once is served from the first request, short
// enough that a dead URL does not hold the mount back (it is then
// UNAVAILABLE NOT_FETCHED_YET until its first fetch ends).
const feedStartWait = 2 * time.Second

// startFeeds runs one loop per file, inline, http or mcp source that keeps its
// cache folder under state_dir up to date (mounts.Source.RunFeed), waits
// for their first rounds (at most feedStartWait) and refreshes the
// sources so they open their cache folders. The loops stop at shutdown,
// or when a reload drops their source (stopFeed).
func (d *Daemon) startFeeds() {
	var first sync.WaitGroup
	for _, s := range d.srcs() {
		if !mounts.IsFeedKind(s.Config.Kind) {
			continue
		}
		first.Add(1)
		d.startFeed(s, first.Done)
	}
	all := make(chan struct{})
	go func() { first.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(feedStartWait):
	}
	for _, s := range d.srcs() {
		if mounts.IsFeedKind(s.Config.Kind) {
			s.Refresh()
			if st := s.Status(); st.State == mounts.Unavailable {
				d.log.Warn("source unavailable", "source", s.Slug(), "status", st.String())
			}
		}
	}
}

// startFeed runs s's feed loop until shutdown or stopFeed; firstRound is
// called once its first round ended.
func (d *Daemon) startFeed(s *mounts.Source, firstRound func()) {
	ctx, cancel := context.WithCancel(d.ctx)
	d.feedsMu.Lock()
	if d.feeds == nil {
		d.feeds = map[*mounts.Source]context.CancelFunc{}
	}
	d.feeds[s] = cancel
	d.feedsMu.Unlock()
	var once sync.Once
	done := func() { once.Do(firstRound) }
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer done()
		s.RunFeed(ctx, d.log, done)
	}()
}

// stopFeed stops s's feed loop, if it has one (a reload dropped s).
func (d *Daemon) stopFeed(s *mounts.Source) {
	d.feedsMu.Lock()
	cancel := d.feeds[s]
	delete(d.feeds, s)
	d.feedsMu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// reloadFeed starts the feed of a source a reload added; once its first
// round ended the source opens its cache folder and the mounts drop what
// they knew of it.
func (d *Daemon) reloadFeed(s *mounts.Source) {
	if !mounts.IsFeedKind(s.Config.Kind) {
		return
	}
	d.startFeed(s, func() {
		if s.Refresh() {
			d.fsys.SourceChanged(s.Slug())
		}
	})
}

// feedStatus is the status and identity of a file, inline, http or mcp source
// (ok=false for other kinds); canRead (nil: all) filters the files the
// identity covers.
func (d *Daemon) feedStatus(slug string, canRead func(rel string) bool) (st mounts.Status, identity string, ok bool) {
	s := d.source(slug)
	if s == nil {
		return st, "", false
	}
	id, ok := s.Identity(canRead)
	if !ok {
		return st, "", false
	}
	st = s.Status()
	if st.State == mounts.Unavailable {
		id = "" // nothing is served
	}
	return st, id, true
}
