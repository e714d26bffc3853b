package gitfs

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"golang.org/x/sys/unix"
)

// wtOptions are the settings that decide how an index entry is compared
// with the worktree (read-cache.c ie_match_stat, diff-lib.c run_diff_files).
type wtOptions struct {
	fileMode   bool   // core.fileMode: the owner exec bit counts
	symlinks   bool   // core.symlinks: a regular file in place of a symlink is a type change
	trustCtime bool   // core.trustCtime
	checkStat  bool   // core.checkStat is "default", not "minimal": ctime, inode and owner count
	sparse     bool   // core.sparseCheckout without sparse.expectFilesOutsideOfPatterns
	indexSec   uint32 // the index file's mtime, in seconds: entries at or after it are racily clean
	conv       *converter
	convGen    uint64 // changes when what the conversion depends on may have changed
}

func (r *Repo) wtOptions(snap *indexSnap) *wtOptions {
	c := r.conf()
	cs, _ := c.get("core", "", "checkstat")
	o := &wtOptions{
		fileMode:   c.getBool("core", "", "filemode", true),
		symlinks:   c.getBool("core", "", "symlinks", true),
		trustCtime: c.getBool("core", "", "trustctime", true),
		checkStat:  !strings.EqualFold(strings.TrimSpace(cs), "minimal"),
		sparse: c.getBool("core", "", "sparsecheckout", false) &&
			!c.getBool("sparse", "", "expectfilesoutsideofpatterns", false),
		indexSec: uint32(snap.key.mtime / 1e9),
		conv:     r.converter(snap),
		convGen:  r.convGen.Load(),
	}
	return o
}

// worktreeCheck compares index entries with the files on disk and returns
// the worktree column (' ', 'M', 'D', 'T', 'A') per entry, as git's
// refresh + diff-files do: stat data first (mtime and ctime seconds, inode,
// owner, size, exec bit, file type; git as built by default ignores
// sub-second times), content (after the clean conversion) only when the
// stat data differs or the entry is racily clean. Assume-unchanged entries
// and skip-worktree entries are not looked at; with a sparse checkout, a
// skip-worktree entry whose path exists is checked as any other, as git
// does. Entries left unchecked when ctx ends are ' ' and done is false.
func (r *Repo) worktreeCheck(ctx context.Context, snap *indexSnap, ents []*entry, o *wtOptions) (ys []byte, done bool) {
	ys = make([]byte, len(ents))
	for i := range ys {
		ys[i] = ' '
	}
	var dirs dirCache
	var next atomic.Int64
	var stopped atomic.Bool
	const chunk = 64
	// Enough workers to keep the disk busy when the inode cache is cold
	// (see ioWorkers), but no more than there are chunks.
	workers := min(ioWorkers(), (len(ents)+chunk-1)/chunk)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cur dirFD
			defer cur.close()
			for {
				if ctx.Err() != nil {
					stopped.Store(true)
					return
				}
				lo := int(next.Add(chunk)) - chunk
				if lo >= len(ents) {
					return
				}
				hi := min(lo+chunk, len(ents))
				for i := lo; i < hi; i++ {
					e := ents[i]
					if e.Stage != stage0 || e.AssumeValid {
						continue
					}
					if e.SkipWorktree && !(o.sparse && r.present(e.Name, &dirs, &cur)) {
						continue
					}
					ys[i] = r.checkEntry(ctx, e, o, &dirs, &cur)
				}
			}
		}()
	}
	wg.Wait()
	return ys, !stopped.Load()
}

// present reports whether a skip-worktree path exists in the worktree
// (sparse-index.c clear_skip_worktree_from_present_files: lstat, not
// looking past a symlinked or missing parent).
func (r *Repo) present(name string, dirs *dirCache, cur *dirFD) bool {
	var st unix.Stat_t
	return r.statEntry(name, dirs, cur, &st)
}

// statEntry lstats the worktree path name into st, false when it is
// missing or below a symlink or a missing folder. Without a view it stats
// relative to cur, the worker's open folder; with one, a folder's names
// may live in different host folders, so each is statted by its path.
func (r *Repo) statEntry(name string, dirs *dirCache, cur *dirFD, st *unix.Stat_t) bool {
	if !safeRel(name) {
		return false
	}
	parent, base := "", name
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		parent, base = name[:i], name[i+1:]
	}
	if r.view != nil {
		return dirs.realDir(r, parent) && r.lstat(name, st) == nil
	}
	if !cur.open(r, parent, dirs) {
		return false
	}
	return unix.Fstatat(cur.fd, base, st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// dirCache remembers whether a worktree directory is a real directory
// reached without symlinks (git's has_symlink_leading_path).
type dirCache struct {
	m sync.Map // rel dir → bool
}

func (d *dirCache) realDir(r *Repo, rel string) bool {
	if rel == "" {
		return true
	}
	if v, ok := d.m.Load(rel); ok {
		return v.(bool)
	}
	ok := false
	parent := ""
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		parent = rel[:i]
	}
	if d.realDir(r, parent) {
		var st unix.Stat_t
		if r.lstat(rel, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			ok = true
		}
	}
	d.m.Store(rel, ok)
	return ok
}

// dirFD is one worker's open directory: entries come sorted by path, so
// neighbours share it, and fstatat on a name in it skips resolving the
// whole path again (about 20% of each stat on a VM where syscalls are slow).
type dirFD struct {
	dir string
	fd  int
	ok  bool
}

func (d *dirFD) close() {
	if d.ok {
		unix.Close(d.fd)
	}
	d.ok = false
}

// open makes d the directory rel (relative to root); false when it is not
// a directory reached without symlinks.
func (d *dirFD) open(r *Repo, rel string, dirs *dirCache) bool {
	if d.ok && d.dir == rel {
		return true
	}
	d.close()
	d.dir = rel
	if !dirs.realDir(r, rel) {
		return false
	}
	fd, err := unix.Open(filepath.Join(r.worktree, rel), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	d.fd, d.ok = fd, true
	return true
}

// checkEntry returns the worktree column of one stage-0 entry.
func (r *Repo) checkEntry(ctx context.Context, e *entry, o *wtOptions, dirs *dirCache, cur *dirFD) byte {
	// diff-lib.c check_removed: gone, below a symlink, or replaced by a
	// directory that is not a repository.
	var st unix.Stat_t
	if !r.statEntry(e.Name, dirs, cur, &st) {
		return 'D'
	}
	abs := func() string { p, _ := r.wtPath(e.Name); return p }
	typ := st.Mode & unix.S_IFMT
	if typ == unix.S_IFDIR && e.Mode != filemode.Submodule {
		if _, ok := submoduleHead(abs()); !ok {
			return 'D'
		}
	}
	if e.IntentToAdd {
		return 'A'
	}
	switch e.Mode {
	case filemode.Submodule:
		if typ != unix.S_IFDIR {
			// A type change, unless the submodule is ignored
			// (diff-lib.c match_stat_with_submodule).
			if r.submoduleIgnore(e.Name) == "all" {
				return ' '
			}
			return 'T'
		}
		return r.checkSubmodule(ctx, e, abs())
	case filemode.Symlink:
		if typ != unix.S_IFLNK && (o.symlinks || typ != unix.S_IFREG) {
			return 'T'
		}
	default: // regular files
		if typ != unix.S_IFREG {
			return 'T' // a symlink, or a directory holding a repository (a gitlink)
		}
		if o.fileMode && (e.Mode == filemode.Executable) != (st.Mode&0o100 != 0) {
			return 'M'
		}
	}
	// match_stat_data, as git builds it by default (no USE_NSEC, no
	// USE_STDEV): whole seconds only.
	sizeChanged := e.Size != uint32(st.Size)
	changed := sizeChanged || e.MtimeSec != uint32(st.Mtim.Sec)
	if o.checkStat {
		changed = changed || (o.trustCtime && e.CtimeSec != uint32(st.Ctim.Sec)) ||
			e.Inode != uint32(st.Ino) || e.UID != st.Uid || e.GID != st.Gid
	}
	// A racily smudged entry (size 0 recorded for a non-empty blob).
	if e.Size == 0 && e.Hash != emptyBlob {
		changed = true
	}
	if !changed {
		racy := o.indexSec != 0 && o.indexSec <= e.MtimeSec
		if !racy {
			return ' '
		}
	} else if sizeChanged && e.Size != 0 {
		return 'M'
	}
	// git hashes this file; so do we, unless it was hashed before with
	// this very stat data (see cleanMemo).
	// A reader's view (StatusView) neither uses nor feeds the memo: its
	// own .gitattributes may convert differently.
	key := cleanKey{blob: e.Hash, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(), size: st.Size, ino: st.Ino, mode: st.Mode, gen: o.convGen}
	if r.view == nil && r.clean.known(e.Name, key) {
		return ' '
	}
	started := time.Now()
	if r.contentDiffers(e, abs(), typ, st.Size, o) {
		return 'M'
	}
	if r.view == nil {
		r.clean.note(e.Name, key, started)
	}
	return ' '
}

// cleanMemo remembers files whose content was hashed and found equal to
// their index entry although their stat data did not prove it: racily
// clean entries (changed in the second the index was written; after a
// fresh clone or checkout, most of them) and files whose stat data changed
// but not their content. git refreshes such entries in the index it
// writes back; this package never writes the index, so without the memo
// every status would hash them again until git next writes the index. A
// file is remembered only when its mtime and ctime were well before the
// hashing started, so that a later change must show in its
// (nanosecond) timestamps.
type cleanMemo struct {
	mu sync.Mutex
	m  map[string]cleanKey
}

// cleanKey is what must be unchanged for a remembered file: the blob it
// matched, its full stat data, and the conversion settings it was hashed
// with.
type cleanKey struct {
	blob         plumbing.Hash
	mtime, ctime int64
	size         int64
	ino          uint64
	mode         uint32
	gen          uint64
}

const (
	cleanMemoMax   = 1 << 20
	cleanMemoSlack = 2 * time.Second // timestamps this close to the hashing are not trusted (FAT has 2s mtimes)
)

func (c *cleanMemo) known(name string, k cleanKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[name]
	return ok && v == k
}

func (c *cleanMemo) note(name string, k cleanKey, started time.Time) {
	limit := started.Add(-cleanMemoSlack).UnixNano()
	if k.mtime >= limit || k.ctime >= limit {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= cleanMemoMax {
		c.m = map[string]cleanKey{}
	}
	c.m[name] = k
}

// emptyBlob is the id of the empty blob.
var emptyBlob = plumbing.ComputeHash(plumbing.BlobObject, nil)

// contentDiffers compares the worktree file (or symlink) at abs with the
// entry's blob, as read-cache.c ce_modified_check_fs does: a regular file
// is hashed after the clean conversion its attributes ask for, a symlink's
// target is hashed as is.
func (r *Repo) contentDiffers(e *entry, abs string, typ uint32, size int64, o *wtOptions) bool {
	r.hashed.Add(1)
	h, err := o.conv.hashWorktree(e.Name, abs, typ, size)
	if err == nil && h == e.Hash {
		return false
	}
	return typ != unix.S_IFREG || !o.conv.lfsMatches(e.Name, abs, e.Hash, size)
}

// submoduleHead reads the commit checked out in the submodule at abs; ok is
// false when it is not checked out (no .git) or cannot be read.
func submoduleHead(abs string) (plumbing.Hash, bool) {
	gitDir := filepath.Join(abs, ".git")
	fi, err := os.Lstat(gitDir)
	if err != nil {
		return plumbing.ZeroHash, false
	}
	if fi.Mode().IsRegular() {
		d, err := readGitdirFile(gitDir)
		if err != nil {
			return plumbing.ZeroHash, false
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(abs, d)
		}
		gitDir = d
	}
	commonDir := gitDir
	if b, err := readRegular(filepath.Join(gitDir, "commondir")); err == nil {
		c := strings.TrimSpace(string(b))
		if !filepath.IsAbs(c) {
			c = filepath.Join(gitDir, c)
		}
		commonDir = c
	}
	b, err := readRegular(filepath.Join(gitDir, "HEAD"))
	if err != nil {
		return plumbing.ZeroHash, false
	}
	s := strings.TrimSpace(string(b))
	for range 8 {
		ref, ok := strings.CutPrefix(s, "ref:")
		if !ok {
			break
		}
		ref = strings.TrimSpace(ref)
		if b, err := readRegular(filepath.Join(commonDir, filepath.FromSlash(ref))); err == nil {
			s = strings.TrimSpace(string(b))
			continue
		}
		s = packedRef(filepath.Join(commonDir, "packed-refs"), ref)
	}
	if !plumbing.IsHash(s) {
		return plumbing.ZeroHash, false
	}
	return plumbing.NewHash(s), true
}

func packedRef(file, ref string) string {
	f, err := openRegular(file, false)
	if err != nil {
		return ""
	}
	defer f.Close()
	return packedRefIn(f, ref)
}

// packedRefIn finds ref in the packed-refs file f; "" when it is not there.
func packedRefIn(f io.Reader, ref string) string {
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if h, name, ok := strings.Cut(line, " "); ok && name == ref {
			return h
		}
	}
	return ""
}
