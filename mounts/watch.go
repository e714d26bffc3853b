package mounts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/lowprio"
	"github.com/neuralis/neuralisfs/internal/pathidx"
)

// Change is one path that changed in a backing folder behind the mount's
// back. Rel "" with Rescan set means "anything may have changed" (the
// kernel's event queue overflowed).
type Change struct {
	Slug   string
	Rel    string
	Gone   bool // the path no longer exists (removed or renamed away)
	Rescan bool
}

// Watcher watches source folders recursively with inotify and reports
// changes in batches. inotify watches one folder per watch: the recursion,
// including folders moved in later, is ours (the reader is inotify.go).
type Watcher struct {
	log      *slog.Logger
	onChange func([]Change)
	w        *inotify

	mu   sync.Mutex
	dirs map[string]watched // host path → source and rel
	// below indexes dirs by parent host path: a folder's removal forgets
	// the folders below it without looking at every watch (an rm -rf of
	// D folders in a source of W watched ones compared D×W paths: a
	// seventh of the daemon's CPU removing a copy of Go's tree).
	below   pathidx.Kids
	roots   map[string]*Root  // slug → root being watched
	failed  map[string]string // slug → why a watch could not be placed
	pending map[Change]struct{}
	notify  func(slug, reason string)
	kick    chan struct{}
	done    chan struct{}
	flushed chan struct{} // closed when the flusher has returned
	// retryEvery is how often the folders of a source whose watches
	// could not all be placed are walked again to place the missing ones.
	retryEvery time.Duration
}

// unwatchedFreshness says what a source missing watches loses.
const unwatchedFreshness = "changes made outside the mount show after the cache timeouts (entry_timeout, attr_timeout), in .status after 2 s, and in the search index only at its next reconcile"

// RetryWatches is how often a watcher tries again to place the watches
// it could not (the inotify limit was reached, say): once they are all
// placed the source is whole again, without a remount.
const RetryWatches = 10 * time.Second

type watched struct {
	slug string
	rel  string
}

// NewWatcher starts a watcher that calls onChange with batches of changes,
// at most every delay. onChange is called from one goroutine, never while
// the watcher holds its lock.
func NewWatcher(log *slog.Logger, delay time.Duration, onChange func([]Change)) (*Watcher, error) {
	return newWatcher(log, delay, RetryWatches, onChange)
}

func newWatcher(log *slog.Logger, delay, retryEvery time.Duration, onChange func([]Change)) (*Watcher, error) {
	fw, err := newInotify()
	if err != nil {
		return nil, err
	}
	w := &Watcher{
		log: log, onChange: onChange, w: fw,
		dirs:    map[string]watched{},
		roots:   map[string]*Root{},
		failed:  map[string]string{},
		pending: map[Change]struct{}{},
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		flushed: make(chan struct{}),

		retryEvery: retryEvery,
	}
	go func() {
		defer close(w.done)
		w.w.run(w.log, eventPace, w.handle, w.overflowed)
	}()
	go w.flusher(delay)
	go w.retrier()
	return w, nil
}

// Notify sets f to be called whenever a source's watches start or stop
// being incomplete: with the reason (as Failed says it) or "" once every
// folder is watched again. f is never called while the watcher holds
// its lock.
func (w *Watcher) Notify(f func(slug, reason string)) {
	w.mu.Lock()
	w.notify = f
	w.mu.Unlock()
}

// retrier places, every retryEvery, the watches of sources that lack
// some. A source whose tree is whole again gets a Rescan change, since
// what changed in its unwatched folders meanwhile was not seen.
func (w *Watcher) retrier() {
	t := time.NewTicker(w.retryEvery)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		}
		if atWatchCap() {
			// No watch can be placed: a walk (up to the cap's folders,
			// every 10 s) would find nothing to do.
			continue
		}
		w.mu.Lock()
		todo := map[string]*Root{}
		for slug := range w.failed {
			if r := w.roots[slug]; r != nil {
				todo[slug] = r
			}
		}
		w.mu.Unlock()
		for slug, root := range todo {
			if _, complete := w.addTree(slug, root, "", false, true); !complete {
				continue
			}
			w.mu.Lock()
			if w.roots[slug] != root {
				w.mu.Unlock()
				continue
			}
			delete(w.failed, slug)
			w.pending[Change{Slug: slug, Rescan: true}] = struct{}{}
			notify := w.notify
			w.mu.Unlock()
			w.log.Info("watches placed again", "source", slug)
			if notify != nil {
				notify(slug, "")
			}
			w.poke()
		}
	}
}

// Close stops the watcher.
// It returns once no change is being handed to onChange any more, so the
// daemon can stop its mounts knowing no invalidation is on its way.
func (w *Watcher) Close() error {
	w.w.close()
	<-w.done
	<-w.flushed
	return nil
}

// Failed reports why watches could not be placed in slug ("" when all are).
func (w *Watcher) Failed(slug string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed[slug]
}

// Watching reports whether every change to slug://rel reaches the
// watcher: the source is watched, no watch failed, and rel is not in a
// folder skipWatch leaves out or one too deep to watch (tooDeep).
func (w *Watcher) Watching(slug, rel string) bool {
	if strings.Contains(rel, ".git/") && unwatchedGitPath("/"+rel+"/") {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	root, ok := w.roots[slug]
	return ok && w.failed[slug] == "" && !tooDeep(root.Path(), rel)
}

// tooDeep reports whether the folder rel below the host folder root has
// an absolute path of PATH_MAX bytes or more. inotify_add_watch takes a
// path, and the kernel accepts none that long, so such a folder (and
// everything below it) goes unwatched: its changes made outside the
// mount show after the cache timeouts, as Watching says. Being deep is
// no fault of the source, so it is not reported as a failed watch.
func tooDeep(root, rel string) bool {
	return rel != "" && len(root)+1+len(rel) >= unix.PathMax
}

// unwatchedGitPath reports whether /rel/ is in or below a folder skipWatch
// leaves out.
func unwatchedGitPath(rel string) bool {
	return strings.Contains(rel, "/.git/objects/") || strings.Contains(rel, "/.git/logs/") || strings.Contains(rel, "/.git/lfs/")
}

// Watch places watches on every folder of root (skipping the object store
// and logs of a .git folder, whose HEAD, index and refs are watched).
func (w *Watcher) Watch(slug string, root *Root) {
	w.mu.Lock()
	if old, ok := w.roots[slug]; ok && old == root {
		w.mu.Unlock()
		return
	}
	w.roots[slug] = root
	delete(w.failed, slug)
	w.mu.Unlock()
	w.addTree(slug, root, "", false, false)
}

// Unwatch forgets every watch of slug.
func (w *Watcher) Unwatch(slug string) {
	var drop []string
	w.mu.Lock()
	delete(w.roots, slug)
	for p, d := range w.dirs {
		if d.slug == slug {
			drop = append(drop, p)
			w.dropDir(p)
		}
	}
	w.mu.Unlock()
	for _, p := range drop {
		w.w.remove(p)
	}
}

// skipWatch reports folders that are not worth a watch: git's object store
// and logs change on every commit and are never shown as content.
func skipWatch(rel string) bool {
	return strings.HasSuffix(rel, ".git/objects") || strings.HasSuffix(rel, ".git/logs") ||
		strings.HasSuffix(rel, ".git/lfs") || strings.Contains(rel, ".git/objects/")
}

// addTree watches dir rel and every folder below it. With files set it
// returns the files found (for folders moved in, whose contents arrived
// without events); a start-up has no use for them (57,000 names on a
// 50,000-file tree were a quarter of its watcher time). It reports
// whether every watch was placed; a failure is recorded in w.failed
// unless retry is set (the retrier clears it once a pass is complete).
func (w *Watcher) addTree(slug string, root *Root, rel string, files, retry bool) ([]string, bool) {
	var found []string
	complete := true
	stack := []string{rel}
	for len(stack) > 0 {
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if skipWatch(dir) || tooDeep(root.Path(), dir) {
			continue
		}
		host := root.Path()
		if dir != "" {
			host += "/" + dir
		}
		w.mu.Lock()
		_, have := w.dirs[host]
		w.mu.Unlock()
		if have {
			// Already watched (a retry pass): only its folders may lack one.
		} else if err := w.w.add(host); errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
			// Gone (or no longer a folder) since it was seen: nothing to
			// watch, and no fault — its parent's watch reports the
			// removal. (stress-ng's inotify stressor, making and removing
			// folders, had the source DEGRADED for seconds at a time.)
			continue
		} else if err != nil {
			complete = false
			var notify func(slug, reason string)
			reason := "cannot watch " + host + ": " + err.Error()
			if errors.Is(err, errWatchCap) {
				reason = fmt.Sprintf("inotify watch cap reached (the daemon keeps to %d of the %d watches of its user, fs.inotify.max_user_watches, and leaves the rest to its other processes); %s; the missing watches are placed once folders with watches go", watchCap.Load(), watchLimit, unwatchedFreshness)
			} else if errors.Is(err, syscall.ENOSPC) {
				reason = "inotify watch limit reached (fs.inotify.max_user_watches); " + unwatchedFreshness + "; the missing watches are placed once the limit allows"
			}
			w.mu.Lock()
			if _, ok := w.failed[slug]; !ok && !retry && w.roots[slug] == root {
				w.failed[slug] = reason
				notify = w.notify
				if errors.Is(err, errWatchCap) {
					// Once for the source, not once a folder: past the
					// cap every folder made fails so.
					w.log.Warn("watch cap reached: folders past it go unwatched", "source", slug, "path", host, "cap", watchCap.Load(), "max_user_watches", watchLimit)
				} else {
					w.log.Warn("watch failed", "source", slug, "path", host, "err", err)
				}
			}
			w.mu.Unlock()
			if notify != nil {
				notify(slug, reason)
			}
			if errors.Is(err, syscall.ENOSPC) {
				return found, false
			}
			continue
		} else {
			w.mu.Lock()
			w.putDir(host, watched{slug: slug, rel: dir})
			w.mu.Unlock()
		}
		fd, err := root.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			continue
		}
		names, types := readDirTypes(fd)
		unix.Close(fd)
		for i, name := range names {
			child := name
			if dir != "" {
				child = dir + "/" + name
			}
			if types[i] == unix.DT_DIR {
				stack = append(stack, child)
			} else if files {
				found = append(found, child)
			}
		}
	}
	return found, complete
}

// readDirTypes lists an open folder's names and d_type values.
func readDirTypes(fd int) ([]string, []uint8) {
	var names []string
	var types []uint8
	buf := make([]byte, 32*1024)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil || n <= 0 {
			return names, types
		}
		b := buf[:n]
		for len(b) > 0 {
			reclen := int(b[16]) | int(b[17])<<8
			typ := b[18]
			nameb := b[19:reclen]
			if i := strings.IndexByte(string(nameb), 0); i >= 0 {
				nameb = nameb[:i]
			}
			name := string(nameb)
			b = b[reclen:]
			if name == "." || name == ".." {
				continue
			}
			names = append(names, name)
			types = append(types, typ)
		}
	}
}

// eventPace is how long the reader lets events gather in the kernel's
// queue after reading what it held (inotify.go): well inside the
// flusher's delay, so a burst costs a few reads instead of a wake-up per
// event.
const eventPace = 2 * time.Millisecond

// overflowed is told that the kernel's queue overflowed: events were
// lost, so every source is rescanned.
func (w *Watcher) overflowed() {
	w.mu.Lock()
	for slug := range w.roots {
		w.pending[Change{Slug: slug, Rescan: true}] = struct{}{}
	}
	w.mu.Unlock()
	w.log.Warn("watch: the kernel's event queue overflowed; rescanning every source")
	w.poke()
}

func (w *Watcher) handle(ev event) {
	dir := pathidx.Parent(ev.Name)
	name := ev.Name[strings.LastIndexByte(ev.Name, '/')+1:]
	w.mu.Lock()
	d, ok := w.dirs[dir]
	self, isSelf := w.dirs[ev.Name]
	root := w.roots[d.slug]
	w.mu.Unlock()
	if !ok {
		return
	}
	rel := name
	if d.rel != "" {
		rel = d.rel + "/" + name
	}
	var add []Change
	gone := ev.Has(opRemove) || ev.Has(opRename)
	add = append(add, Change{Slug: d.slug, Rel: rel, Gone: gone})
	if gone && isSelf {
		// A watched folder went away: forget it and everything below.
		w.mu.Lock()
		drop := w.dropTree(self.slug, ev.Name)
		w.mu.Unlock()
		for _, p := range drop {
			w.w.remove(p)
		}
	}
	if ev.Has(opCreate) && ev.Dir && root != nil {
		// A folder made or moved in (files, the most of a burst, are not
		// looked at). To be sure it still is one before it is watched: one
		// fstatat from the root (a swapped symlink on the way could
		// mislead it, but addTree opens every folder confined and watches
		// nothing it cannot open so).
		var st unix.Stat_t
		if err := unix.Fstatat(root.Fd(), rel, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			found, _ := w.addTree(d.slug, root, rel, true, false)
			for _, f := range found {
				add = append(add, Change{Slug: d.slug, Rel: f})
			}
		}
	}
	w.mu.Lock()
	for _, c := range add {
		// A later event for the same path wins over an earlier "gone".
		delete(w.pending, Change{Slug: c.Slug, Rel: c.Rel, Gone: !c.Gone})
		w.pending[c] = struct{}{}
	}
	w.mu.Unlock()
	w.poke()
}

// putDir records host as watched, for d; w.mu is held.
func (w *Watcher) putDir(host string, d watched) {
	w.dirs[host] = d
	w.below.Add(host)
}

// dropDir forgets host's watch; w.mu is held.
func (w *Watcher) dropDir(host string) {
	delete(w.dirs, host)
	w.below.Remove(host)
}

// dropTree forgets the watches of slug at host and below it, and returns
// their paths; w.mu is held.
func (w *Watcher) dropTree(slug, host string) []string {
	var drop []string
	for _, p := range append(w.below.Below(host), host) {
		if d, ok := w.dirs[p]; ok && d.slug == slug {
			w.dropDir(p)
			drop = append(drop, p)
		}
	}
	return drop
}

func (w *Watcher) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// flusher hands pending changes to onChange, coalescing bursts: after the
// first event of a burst it waits delay so a thousand writes cost one call.
func (w *Watcher) flusher(delay time.Duration) {
	lowprio.Lower()
	defer close(w.flushed)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-w.done; cancel() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		if delay > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
		w.mu.Lock()
		batch := make([]Change, 0, len(w.pending))
		for c := range w.pending {
			batch = append(batch, c)
		}
		clear(w.pending)
		w.mu.Unlock()
		if len(batch) > 0 {
			w.onChange(batch)
		}
	}
}
