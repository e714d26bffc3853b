package gitfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ioWorkers is how many goroutines stat index entries and how many walk
// directories. Both are bound by the latency of each syscall more than by
// CPU: with a cold inode and dentry cache every lstat and getdents waits
// for the disk, and a virtio disk answers many requests at once about as
// fast as one. git's core.preloadIndex stats with up to 20 threads for the
// same reason (preload-index.c, MAX_PARALLEL). With a warm cache the extra
// goroutines cost little: each takes work in chunks.
func ioWorkers() int {
	return max(16, runtime.GOMAXPROCS(0)*2)
}

// untrackedMode is status.showUntrackedFiles.
type untrackedMode int

const (
	untrackedNormal untrackedMode = iota // "?? dir/" for a directory with no tracked files
	untrackedAll                         // every untracked file
	untrackedNo                          // none
)

// walker finds untracked, not-ignored paths below one directory, as git's
// fill_directory does for git status. It never follows symlinks, never
// descends into an ignored directory, a nested repository or a directory
// named .git, and reads each directory once.
type walker struct {
	ctx  context.Context
	r    *Repo
	snap *indexSnap
	mode untrackedMode
	// sees, when not nil, limits which files and nested repositories
	// count for "?? dir/" (see untrackedSeen).
	sees func(repoPath string) bool

	sem        chan struct{} // bounds extra goroutines
	wg         sync.WaitGroup
	mu         sync.Mutex
	out        []string
	witness    map[string]string // "dir/" → what made it untracked
	incomplete atomic.Bool
}

// patterns is an immutable, growing list of exclude patterns, lowest
// priority first (global excludes, info/exclude, then .gitignore files root
// first), searched from the end as dir.c last_matching_pattern_from_lists
// does.
type patterns []*ignorePattern

// excluded reports whether the slash path rel is ignored by the last
// pattern that matches it; it does not look at rel's parents (the walk
// does not enter an ignored directory).
func (ps patterns) excluded(rel string, isDir bool) bool {
	for i := len(ps) - 1; i >= 0; i-- {
		if ps[i].matches(rel, isDir) {
			return ps[i].flags&patNegative == 0
		}
	}
	return false
}

// with returns ps plus the patterns of the .gitignore in directory rel. A
// .gitignore that is missing or not a regular file (git opens it without
// following symlinks) is read from the index when its entry is
// skip-worktree, as git does for sparse checkouts.
func (ps patterns) with(r *Repo, snap *indexSnap, rel string) patterns {
	name := ".gitignore"
	if rel != "" {
		name = rel + "/.gitignore"
	}
	var more []*ignorePattern
	f, err := r.openWorktree(name)
	if err == nil {
		b, err := io.ReadAll(io.LimitReader(f, 64<<20))
		f.Close()
		if err == nil {
			more = parseIgnore(b, rel)
		}
	} else if e := snap.entry(name); e != nil && e.SkipWorktree {
		if b, err := r.readBlob(e.Hash); err == nil {
			more = parseIgnore(b, rel)
		}
	}
	if len(more) == 0 {
		return ps
	}
	out := make(patterns, 0, len(ps)+len(more))
	out = append(out, ps...)
	return append(out, more...)
}

func (w *walker) emit(p string) {
	w.mu.Lock()
	w.out = append(w.out, p)
	w.mu.Unlock()
}

// emitDir emits the untracked directory line dir ("dir/"), with witness,
// the path below it that made it one.
func (w *walker) emitDir(dir, witness string) {
	w.mu.Lock()
	w.out = append(w.out, dir)
	if w.witness == nil {
		w.witness = map[string]string{}
	}
	w.witness[dir] = witness
	w.mu.Unlock()
}

func (w *walker) stop() bool {
	if w.ctx.Err() != nil {
		w.incomplete.Store(true)
		return true
	}
	return false
}

// dirent is one name of a directory listing with its file type (one of
// the unix.DT_* values, never DT_UNKNOWN).
type dirent struct {
	name string
	typ  uint8
}

// direntBufs recycles getdents buffers across directories and walks.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// readDir lists a directory without sorting it and without following
// symlinks, for the directory itself or its entries. It calls getdents
// directly: os.File.ReadDir costs a poller registration per directory and
// an allocation per entry, which at thousands of directories is a good
// part of the walk's CPU time. Types the file system leaves unknown are
// found with an lstat, as os.ReadDir does. A directory that cannot be read
// lists nothing.
func readDir(abs string) []dirent {
	fd, err := unix.Open(abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	bp := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(bp)
	buf := *bp
	var out []dirent
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return out
		}
		for b := buf[:n]; len(b) >= 19; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return out
			}
			typ := b[18]
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			if len(name) == 0 || (name[0] == '.' && (len(name) == 1 || (len(name) == 2 && name[1] == '.'))) {
				continue
			}
			d := dirent{name: string(name), typ: typ}
			if typ == unix.DT_UNKNOWN {
				var st unix.Stat_t
				if unix.Fstatat(fd, d.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
					continue
				}
				d.typ = direntType(st.Mode)
			}
			out = append(out, d)
		}
	}
}

// direntType maps a stat mode to its DT_* value.
func direntType(mode uint32) uint8 {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return unix.DT_DIR
	case unix.S_IFREG:
		return unix.DT_REG
	case unix.S_IFLNK:
		return unix.DT_LNK
	}
	return unix.DT_UNKNOWN // something git does not list: fifo, socket, device
}

// withListed is ps.with for a directory whose listing is ents: it reads the
// .gitignore only when the listing has one or the index has a skip-worktree
// one there (git opens it in every directory; most have none, and a failed
// open still costs a path lookup).
func (ps patterns) withListed(r *Repo, snap *indexSnap, rel string, ents []dirent) patterns {
	for _, d := range ents {
		if d.name == ".gitignore" {
			return ps.with(r, snap, rel)
		}
	}
	if snap.hasSkipWorktree {
		name := ".gitignore"
		if rel != "" {
			name = rel + "/.gitignore"
		}
		if e := snap.entry(name); e != nil && e.SkipWorktree {
			return ps.with(r, snap, rel)
		}
	}
	return ps
}

// isNestedRepo reports whether the directory abs holds a .git (a nested
// repository or an unregistered submodule), which git shows as "?? dir/".
func isNestedRepo(abs string) bool {
	return isNestedRepoAt(filepath.Join(abs, ".git"), filepath.Join(abs, ".git", "HEAD"))
}

// isNestedRepoAt is isNestedRepo given the host paths of the directory's
// .git and of .git/HEAD ("" when there is none).
func isNestedRepoAt(dotgit, head string) bool {
	fi, err := os.Lstat(dotgit)
	if err != nil {
		return false
	}
	if fi.IsDir() {
		if head == "" {
			return false
		}
		// HEAD is a file or a symlink (git's own check reads either);
		// it is not followed: a symlink there must not make the daemon
		// tell whether its target exists.
		fi, err := os.Lstat(head)
		return err == nil && (fi.Mode().IsRegular() || fi.Mode()&os.ModeSymlink != 0)
	}
	if fi.Mode().IsRegular() {
		_, err := readGitdirFile(dotgit)
		return err == nil
	}
	return false
}

// spawn runs f in a new goroutine when one is free, inline otherwise.
func (w *walker) spawn(f func()) {
	select {
	case w.sem <- struct{}{}:
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer func() { <-w.sem }()
			f()
		}()
	default:
		f()
	}
}

// walkDir visits a directory that holds tracked files (or, in "all" mode,
// any non-ignored directory). excluded says an ancestor (or the directory)
// is ignored, so nothing untracked below it is shown.
func (w *walker) walkDir(rel string, ps patterns, excluded bool) {
	if w.stop() {
		return
	}
	ents := w.r.listDir(rel)
	if !excluded {
		ps = ps.withListed(w.r, w.snap, rel, ents)
	}
	for _, d := range ents {
		name := d.name
		if name == ".git" {
			continue
		}
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		switch d.typ {
		case unix.DT_DIR:
			w.dir(p, ps, excluded)
		case unix.DT_REG, unix.DT_LNK:
			if w.snap.tracked(p) || excluded || ps.excluded(p, false) {
				continue
			}
			w.emit(p)
		}
	}
}

// dir handles the directory p found in a listing, as dir.c treat_path and
// treat_directory do: a submodule (gitlink) is left alone, a directory
// holding tracked files is walked (its untracked content hidden when it is
// ignored), an ignored one is skipped. A directory in place of a tracked
// file or symlink is untracked, but git drops a "dir/" line for a path the
// index has (wt-status.c index_name_is_other), so only "all" mode shows
// what is inside it.
func (w *walker) dir(p string, ps patterns, excluded bool) {
	if w.snap.isGitlink(p) {
		return
	}
	if w.snap.hasTrackedUnder(p) {
		ex := excluded || ps.excluded(p, true)
		w.spawn(func() { w.walkDir(p, ps, ex) })
		return
	}
	if excluded || ps.excluded(p, true) {
		return
	}
	if w.snap.tracked(p) {
		if w.mode == untrackedAll && !w.r.nestedRepo(p) {
			w.spawn(func() { w.walkDir(p, ps, false) })
		}
		return
	}
	w.spawn(func() { w.untrackedDir(p, ps) })
}

// untrackedDir handles a non-ignored directory that holds no tracked file.
func (w *walker) untrackedDir(rel string, ps patterns) {
	if w.r.nestedRepo(rel) {
		w.emitDir(rel+"/", rel)
		return
	}
	switch w.mode {
	case untrackedAll:
		w.walkDir(rel, ps, false)
	default:
		if p := w.firstUntracked(rel, ps); p != "" {
			w.emitDir(rel+"/", p)
		}
	}
}

// firstUntracked returns a file, symlink or nested repository below the
// untracked directory rel that is not ignored, "" when there is none (git
// hides empty and all-ignored directories). With w.sees set, only those it
// accepts count.
func (w *walker) firstUntracked(rel string, ps patterns) string {
	if w.stop() {
		return ""
	}
	ents := w.r.listDir(rel)
	ps = ps.withListed(w.r, w.snap, rel, ents)
	var dirs []string
	for _, d := range ents {
		name := d.name
		if name == ".git" {
			continue
		}
		p := rel + "/" + name
		switch d.typ {
		case unix.DT_DIR:
			if !ps.excluded(p, true) {
				dirs = append(dirs, p)
			}
		case unix.DT_REG, unix.DT_LNK:
			if !ps.excluded(p, false) && w.counts(p) {
				return p
			}
		}
	}
	for _, p := range dirs {
		if w.r.nestedRepo(p) {
			if w.counts(p) {
				return p
			}
			continue
		}
		if q := w.firstUntracked(p, ps); q != "" {
			return q
		}
	}
	return ""
}

func (w *walker) counts(p string) bool { return w.sees == nil || w.sees(p) }

// untrackedSeen reports whether a reader that sees only what canRead
// accepts finds anything untracked below the untracked directory dir
// (normal mode's "?? dir/"): a line for a folder whose untracked content
// is all hidden from the reader would tell it that hidden files are there.
// The walk is bounded as a scan is (Options.ScanTimeout); past that, the
// answer is no.
func (r *Repo) untrackedSeen(ctx context.Context, snap *indexSnap, dir string, canRead func(string) bool) bool {
	if r.nestedRepo(dir) {
		return true // canRead(dir) passed: the reader sees the repository
	}
	if limit := r.scanTimeout(); limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	ps, excluded := r.patternsAbove(snap, r.basePatterns(), dir)
	if excluded {
		return false
	}
	w := &walker{ctx: ctx, r: r, snap: snap, mode: untrackedNormal, sees: canRead}
	return w.firstUntracked(dir, ps) != ""
}

// untracked lists untracked paths below dir ("" for the whole worktree),
// directories with a trailing slash, and for each directory the path below
// it that made it untracked. base holds the global and info/exclude
// patterns.
func (r *Repo) untracked(ctx context.Context, snap *indexSnap, dir string, mode untrackedMode, base patterns) (paths []string, witness map[string]string, complete bool) {
	if mode == untrackedNo {
		return nil, nil, true
	}
	w := &walker{
		ctx:  ctx,
		r:    r,
		snap: snap,
		mode: mode,
		sem:  make(chan struct{}, ioWorkers()),
	}
	ps, excluded := r.patternsAbove(snap, base, dir)
	var st unix.Stat_t
	if dir == "" {
		w.walkDir(dir, ps, excluded)
	} else if r.lstat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		// Asking from inside a directory: it is treated as when it is
		// found in its parent's listing; inside an untracked one, git
		// shows the directory itself ("?? dir/") in normal mode.
		w.dir(dir, ps, excluded)
	}
	w.wg.Wait()
	return w.out, w.witness, !w.incomplete.Load()
}

// patternsAbove loads base and the .gitignore files above dir (not dir's
// own) and finds whether dir itself is ignored.
func (r *Repo) patternsAbove(snap *indexSnap, base patterns, dir string) (ps patterns, excluded bool) {
	ps = base
	cur := ""
	if dir != "" {
		for _, c := range strings.Split(dir, "/") {
			if !excluded {
				ps = ps.with(r, snap, cur)
			}
			if cur == "" {
				cur = c
			} else {
				cur += "/" + c
			}
			excluded = excluded || ps.excluded(cur, true)
		}
	}
	return ps, excluded
}

// readIgnoreFileFollow reads a root-level exclude file (global excludes,
// info/exclude), following symlinks as git does for these.
func readIgnoreFileFollow(path string) []*ignorePattern {
	b, err := readRegular(path)
	if err != nil {
		return nil
	}
	return parseIgnore(b, "")
}
