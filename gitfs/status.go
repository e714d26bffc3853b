package gitfs

import (
	"bytes"
	"context"

	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// change is one tracked line of porcelain output.
type change struct {
	path string
	orig string // rename source, "" otherwise
	x, y byte
}

// result is one computed status, before filtering and quoting.
type result struct {
	header    string // "## ..." without newline or incomplete marker
	changes   []change
	untracked []string // sorted; directories end in "/"
	// witness maps each "dir/" of untracked to the path below it that
	// made it untracked (normal mode), for render to check the reader sees it.
	witness    map[string]string
	snap       *indexSnap // the index the result was computed from
	dir        string     // the folder asked for
	collapsed  bool       // untracked folders are "dir/" (status.showUntrackedFiles=normal)
	incomplete bool
	limit      time.Duration // the scan bound, shown when incomplete
	commit     plumbing.Hash

	rendered []byte // output for a nil filter, built once
}

// statusCache holds per-repository caches. mu guards every field.
type statusCache struct {
	mu          sync.Mutex
	gen         uint64                   // bumped by Invalidate
	results     map[string]*cachedResult // by dir
	flights     map[string]*flight       // computations in progress, by dir
	background  map[string]*flight       // unbounded scans after an incomplete one, by dir
	idx         *indexSnap
	heads       map[headKey]map[string]headFile
	aheadBehind map[[2]plumbing.Hash][2]int
}

type cachedResult struct {
	files []string // files whose stat data validates the result
	keys  []fileKey
	at    time.Time
	res   *result
}

// maxCachedResults bounds the per-directory result cache; each result
// holds the lines of its whole subtree.
const maxCachedResults = 512

// evictOldest drops the oldest cached result. Callers hold mu.
func (c *statusCache) evictOldest() {
	var oldest string
	var at time.Time
	first := true
	for dir, cr := range c.results {
		if first || cr.at.Before(at) {
			oldest, at, first = dir, cr.at, false
		}
	}
	delete(c.results, oldest)
}

func (c *statusCache) init() {
	c.results = map[string]*cachedResult{}
	c.flights = map[string]*flight{}
	c.background = map[string]*flight{}
	c.heads = map[headKey]map[string]headFile{}
	c.aheadBehind = map[[2]plumbing.Hash][2]int{}
}

// IncompleteMarker is the format of the suffix appended to the "##" header
// line when a walk ran past Options.ScanTimeout: the lines that follow are
// only those found in time. Example:
//
//	## main...origin/main [ahead 1] [incomplete: scan exceeded 2s]
const IncompleteMarker = " [incomplete: scan exceeded %s]"

// Status returns what `git -C <worktree>/<dir> status --porcelain=v1
// --branch -- .` prints, byte for byte: the "## branch...upstream
// [ahead N, behind M]" header, then tracked changes sorted by path, then
// untracked paths ("??"), with root-relative, git-quoted paths. dir is a
// slash path relative to the worktree root ("" for the root). With canRead
// (root-relative slash paths without a trailing slash; nil allows all),
// it is what git would print were the paths canRead rejects in neither
// HEAD, the index nor the worktree (readerChanges, readerUntracked).
//
// Results are cached per dir and revalidated by the stat data of the index,
// HEAD, the branch and upstream refs, packed-refs and config, by
// Options.MaxAge and by Invalidate; concurrent callers share one scan. A
// scan that runs past Options.ScanTimeout returns what it found, with
// IncompleteMarker appended to the header line, and a full scan goes on in
// the background; its result replaces the incomplete one when done. ctx
// bounds only this caller's wait. The returned slice is the caller's.
func (r *Repo) Status(ctx context.Context, dir string, canRead func(repoPath string) bool) ([]byte, error) {
	res, err := r.statusResult(ctx, dir)
	if err != nil {
		return nil, err
	}
	if canRead == nil {
		return bytes.Clone(res.rendered), nil
	}
	return r.render(ctx, res, canRead), nil
}

// Identity returns the HEAD commit id ("" when the branch has no commits
// yet) and the root-relative paths that git status reports for the whole
// worktree (tracked changes, both sides of a rename, untracked paths;
// untracked directories end in "/"), sorted. dirty is empty for a clean
// checkout.
func (r *Repo) Identity(ctx context.Context) (commit string, dirty []string, err error) {
	return r.IdentityIn(ctx, "")
}

// IdentityIn is Identity for the folder dir of the worktree only (a slash
// path relative to the root, "" for all): dirty lists what git status --
// dir reports, root-relative, and the walk never leaves dir.
func (r *Repo) IdentityIn(ctx context.Context, dir string) (commit string, dirty []string, err error) {
	return r.IdentityFor(ctx, dir, nil)
}

// IdentityFor is IdentityIn as a reader that sees what canRead accepts
// (root-relative slash paths; nil accepts all) finds it: the paths of
// the lines .status shows that reader (readerChanges, readerUntracked).
func (r *Repo) IdentityFor(ctx context.Context, dir string, canRead func(repoPath string) bool) (commit string, dirty []string, err error) {
	res, err := r.statusResult(ctx, dir)
	if err != nil {
		return "", nil, err
	}
	if res.incomplete {
		// Wait for the full scan that an incomplete result starts.
		r.status.mu.Lock()
		bg := r.status.background[dir]
		r.status.mu.Unlock()
		if bg != nil {
			select {
			case <-bg.done:
				if bg.err == nil {
					res = bg.res
				}
			case <-ctx.Done():
				return "", nil, ctx.Err()
			}
		}
	}
	if res.incomplete {
		return "", nil, fmt.Errorf("identity of %s: %w", r.worktree, context.DeadlineExceeded)
	}
	if !res.commit.IsZero() {
		commit = res.commit.String()
	}
	for _, c := range readerChanges(res.changes, canRead) {
		if c.orig != "" {
			dirty = append(dirty, c.orig)
		}
		dirty = append(dirty, c.path)
	}
	dirty = append(dirty, r.readerUntracked(ctx, res, canRead)...)
	sort.Strings(dirty)
	return commit, dirty, nil
}

// Invalidate drops cached status results that writes to paths (slash paths
// relative to the worktree root) may have changed: those of every ancestor
// directory of each path and of everything below it (below its folder, for
// a .gitignore). With no paths, or the root "", every cached result is
// dropped. Scans in progress for those directories are neither joined nor
// cached afterwards. The mount calls it after every write, create, remove
// or rename through it, and its watcher for changes made behind its back.
func (r *Repo) Invalidate(paths ...string) {
	r.invalidateSubmodules(paths)
	named := r.namedRuleFiles()
	r.status.mu.Lock()
	defer r.status.mu.Unlock()
	// Results computed from before this call must not be cached or joined.
	r.status.gen++
	if len(paths) == 0 {
		clear(r.status.results)
		clear(r.status.flights)
		for _, bg := range r.status.background {
			bg.cancel()
		}
		clear(r.status.background)
		return
	}
	for _, p := range paths {
		p = cleanRel(p)
		// below is the directory whose whole subtree may have changed: the
		// path itself (a file or directory written, renamed or removed), or
		// the folder of an ignore or attributes file, whose rules apply to
		// everything below it.
		below := p
		if path.Base(p) == ".gitattributes" || slices.Contains(named, p) {
			r.convGen.Add(1) // remembered clean files may convert differently
		}
		if b := path.Base(p); b == ".gitignore" || b == ".gitattributes" {
			below = path.Dir(p)
			if below == "." {
				below = ""
			}
		}
		if p == ".gitmodules" || slices.Contains(named, p) {
			// Their rules apply to every folder: a submodule's ignore
			// setting, core.excludesFile and core.attributesFile kept
			// in the checkout (before, only the folders above them were
			// read again; found by a differential pass).
			below = ""
		}
		hit := func(dir string) bool {
			return dir == "" || dir == p || strings.HasPrefix(p, dir+"/") ||
				below == "" || dir == below || strings.HasPrefix(dir, below+"/")
		}
		for dir := range r.status.results {
			if hit(dir) {
				delete(r.status.results, dir)
			}
		}
		for dir := range r.status.flights {
			if hit(dir) {
				delete(r.status.flights, dir)
			}
		}
		for dir, bg := range r.status.background {
			if hit(dir) {
				bg.cancel()
				delete(r.status.background, dir)
			}
		}
	}
}

// namedRuleFiles returns the files core.excludesFile and
// core.attributesFile name that lie in the worktree, as slash paths
// relative to it.
func (r *Repo) namedRuleFiles() []string {
	var out []string
	for _, k := range []string{"excludesfile", "attributesfile"} {
		v, ok := r.conf().get("core", "", k)
		if !ok || v == "" {
			continue
		}
		if rel, err := filepath.Rel(r.worktree, expandHome(v)); err == nil && filepath.IsAbs(expandHome(v)) && rel != ".." && !strings.HasPrefix(rel, "../") {
			out = append(out, cleanRel(rel))
		}
	}
	return out
}

// cleanRel normalises a slash path relative to the worktree root.
func cleanRel(p string) string {
	p = strings.Trim(path.Clean("/"+filepath.ToSlash(p)), "/")
	return p
}

func (r *Repo) scanTimeout() time.Duration {
	switch {
	case r.opts.ScanTimeout == 0:
		return DefaultScanTimeout
	case r.opts.ScanTimeout < 0:
		return 0
	}
	return r.opts.ScanTimeout
}

func (r *Repo) maxAge() time.Duration {
	if r.opts.Watched != nil && r.opts.Watched() {
		return 0
	}
	switch {
	case r.opts.MaxAge == 0:
		return DefaultMaxAge
	case r.opts.MaxAge < 0:
		return 0
	}
	return r.opts.MaxAge
}

// validityFiles lists the files whose stat data decides whether a cached
// result for this repository is still good.
func (r *Repo) validityFiles(hs headState) []string {
	// Replace refs, shallow and grafts are re-read at each computation
	// but not watched here: they change with refs (a fetch, git replace),
	// which invalidate through the branch and upstream refs or the mount's
	// watch on refs/, and otherwise within Options.MaxAge.
	files := []string{
		filepath.Join(r.gitDir, "index"),
		filepath.Join(r.gitDir, "HEAD"),
		filepath.Join(r.commonDir, "packed-refs"),
		filepath.Join(r.commonDir, "config"),
		filepath.Join(r.commonDir, "info", "exclude"),
		filepath.Join(r.commonDir, "info", "attributes"),
	}
	if r.conf().getBool("extensions", "", "worktreeconfig", false) {
		files = append(files, filepath.Join(r.gitDir, "config.worktree"))
	}
	// Files whose rules reach every folder, changed where the mount may
	// not see it (Invalidate covers changes made through it).
	files = append(files, filepath.Join(r.worktree, ".gitmodules"))
	for _, k := range []string{"excludesfile", "attributesfile"} {
		if v, ok := r.conf().get("core", "", k); ok && v != "" {
			files = append(files, expandHome(v))
		}
	}
	if hs.branch != "" {
		files = append(files, filepath.Join(r.commonDir, filepath.FromSlash(hs.branch)))
		if up := r.upstreamOf(hs.branch); up != "" {
			files = append(files, filepath.Join(r.commonDir, filepath.FromSlash(up)))
		}
	}
	return files
}

func (r *Repo) statusResult(ctx context.Context, dir string) (*result, error) {
	if r.worktree == "" {
		return nil, fmt.Errorf("status: %s is a bare repository", r.gitDir)
	}
	if strings.Contains("/"+filepath.ToSlash(dir)+"/", "/../") {
		return nil, fmt.Errorf("status %q: path escapes the worktree", dir)
	}
	dir = cleanRel(dir)

	r.status.mu.Lock()
	c := r.status.results[dir]
	bg := r.status.background[dir]
	r.status.mu.Unlock()
	if c != nil {
		ok := true
		// An incomplete result stands while the full scan behind it runs.
		if age := r.maxAge(); age > 0 && time.Since(c.at) > age && !(c.res.incomplete && bg != nil) {
			ok = false
		}
		for i := 0; ok && i < len(c.files); i++ {
			ok = statKey(c.files[i]) == c.keys[i]
		}
		if ok {
			return c.res, nil
		}
	}

	// Join the computation in flight for dir, or start one. It runs
	// detached from ctx so that one caller giving up does not fail the
	// others; each caller waits only as long as its own ctx allows.
	r.status.mu.Lock()
	f := r.status.flights[dir]
	if f == nil {
		f = &flight{done: make(chan struct{})}
		r.status.flights[dir] = f
		go r.runFlight(dir, f, r.scanTimeout())
	}
	r.status.mu.Unlock()
	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// flight is one status computation that concurrent callers share.
type flight struct {
	done   chan struct{} // closed when res and err are set
	res    *result
	err    error
	cancel context.CancelFunc // stops a background scan; nil otherwise
}

// runFlight computes dir's status within limit (0: no limit), caches it,
// and when the result is incomplete starts one background scan without the
// limit whose result replaces the incomplete one when it is done.
func (r *Repo) runFlight(dir string, f *flight, limit time.Duration) {
	defer close(f.done)
	defer func() {
		r.status.mu.Lock()
		if r.status.flights[dir] == f {
			delete(r.status.flights, dir)
		}
		r.status.mu.Unlock()
	}()
	f.res, f.err = r.computeAndStore(context.Background(), dir, limit)
	if f.err != nil || !f.res.incomplete {
		return
	}
	r.status.mu.Lock()
	defer r.status.mu.Unlock()
	if r.status.background[dir] != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), backgroundScanLimit)
	bg := &flight{done: make(chan struct{}), cancel: cancel}
	r.status.background[dir] = bg
	go func() {
		defer close(bg.done)
		defer cancel()
		bg.res, bg.err = r.computeAndStore(ctx, dir, 0)
		r.status.mu.Lock()
		if r.status.background[dir] == bg {
			delete(r.status.background, dir)
		}
		r.status.mu.Unlock()
	}()
}

// backgroundScanLimit bounds the full scan started after an incomplete one.
const backgroundScanLimit = 10 * time.Minute

// computeAndStore computes dir's status and caches it unless Invalidate ran
// meanwhile (the result may then be stale; the next caller recomputes).
func (r *Repo) computeAndStore(ctx context.Context, dir string, limit time.Duration) (*result, error) {
	r.status.mu.Lock()
	gen := r.status.gen
	r.status.mu.Unlock()
	r.reloadConfig()
	hs, err := r.readHead()
	if err != nil {
		return nil, fmt.Errorf("status %s: %w", r.worktree, err)
	}
	files := r.validityFiles(hs)
	keys := make([]fileKey, len(files))
	for i, f := range files {
		keys[i] = statKey(f)
	}
	started := time.Now()
	res, err := r.compute(ctx, dir, hs, limit)
	if err != nil {
		return nil, fmt.Errorf("status %s: %w", filepath.Join(r.worktree, dir), err)
	}
	res.rendered = r.render(ctx, res, nil)
	r.status.mu.Lock()
	defer r.status.mu.Unlock()
	if r.status.gen == gen {
		// A complete result never gives way to an incomplete one computed
		// at the same time.
		if old := r.status.results[dir]; !(res.incomplete && old != nil && !old.res.incomplete && old.at.After(started)) {
			if old == nil && len(r.status.results) >= maxCachedResults {
				r.status.evictOldest()
			}
			r.status.results[dir] = &cachedResult{files: files, keys: keys, at: started, res: res}
		}
	}
	return res, nil
}

// compute runs the status machinery for dir.
func (r *Repo) compute(ctx context.Context, dir string, hs headState, limit time.Duration) (*result, error) {
	res := &result{commit: hs.commit, limit: limit, dir: dir}
	r.objMu.Lock()
	r.refreshHistory()
	r.objMu.Unlock()
	snap, err := r.loadIndex()
	if err != nil {
		return nil, err
	}
	ents := snap.inDirAndSelf(dir)

	// The object store work (header's ahead/behind, the HEAD tree) runs
	// while the worktree is scanned: one is CPU and pack reads, the other
	// mostly stat and getdents syscalls.
	var (
		objWG     sync.WaitGroup
		head      map[string]headFile
		objErr    error
		headErr   error
		unchanged bool // the index's tree is HEAD's: nothing is staged
	)
	objWG.Add(1)
	go func() {
		defer objWG.Done()
		res.header, objErr = r.header(hs)
		if objErr != nil {
			return
		}
		if !snap.tree.IsZero() {
			if th, err := r.headTree(hs.commit); err == nil && th == snap.tree {
				unchanged = true
				return
			}
		}
		head, headErr = r.headFiles(hs.commit, dir)
	}()

	scanCtx := ctx
	if limit > 0 {
		var cancel context.CancelFunc
		scanCtx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}

	// Untracked files are looked for at the same time as tracked ones are
	// checked.
	var (
		walkWG    sync.WaitGroup
		untracked []string
		witness   map[string]string
		walkDone  = true
	)
	mode := r.untrackedMode()
	res.collapsed = mode == untrackedNormal
	walkWG.Add(1)
	go func() {
		defer walkWG.Done()
		untracked, witness, walkDone = r.untracked(scanCtx, snap, dir, mode, r.basePatterns())
		sort.Strings(untracked)
	}()

	wo := r.wtOptions(snap)
	ys, done := r.worktreeCheck(scanCtx, snap, ents, wo)
	if !done {
		res.incomplete = true
	}
	walkWG.Wait()
	if !walkDone {
		res.incomplete = true
	}
	res.untracked, res.witness, res.snap = untracked, witness, snap
	objWG.Wait()
	if objErr != nil {
		return nil, objErr
	}
	if headErr != nil {
		return nil, headErr
	}

	changes := map[string]*change{}
	get := func(p string) *change {
		c := changes[p]
		if c == nil {
			c = &change{path: p, x: ' ', y: ' '}
			changes[p] = c
		}
		return c
	}

	// Unmerged paths: one line with the stage mask's code.
	unmerged := map[string]int{}
	for _, e := range ents {
		if e.Stage != stage0 {
			unmerged[e.Name] |= 1 << (e.Stage - 1)
		}
	}
	for p, mask := range unmerged {
		c := get(p)
		code := unmergedCodes[mask]
		c.x, c.y = code[0], code[1]
	}

	// Index against HEAD (X), as diff-index --cached does with
	// intent-to-add entries invisible: the queue of changes, additions
	// and deletions, sorted by path, for rename detection.
	var xq []*rpair
	headQ := func(p string, h headFile) *rfile { return &rfile{path: p, hash: h.hash, mode: canonMode(h.mode)} }
	for _, e := range ents {
		if unchanged || e.Stage != stage0 || e.IntentToAdd {
			continue
		}
		two := &rfile{path: e.Name, hash: e.Hash, mode: e.Mode}
		h, ok := head[e.Name]
		switch {
		case !ok:
			xq = append(xq, &rpair{status: 'A', two: two})
		case h.hash != e.Hash || canonMode(h.mode) != canonMode(e.Mode):
			st := byte('M')
			if typeOf(h.mode) != typeOf(e.Mode) {
				st = 'T'
			}
			xq = append(xq, &rpair{status: st, one: headQ(e.Name, h), two: two})
		}
	}
	if len(head) > 0 {
		inIndex := make(map[string]bool, len(ents))
		for _, e := range ents {
			if e.Stage != stage0 || !e.IntentToAdd {
				inIndex[e.Name] = true
			}
		}
		for p, h := range head {
			if !inIndex[p] {
				xq = append(xq, &rpair{status: 'D', one: headQ(p, h)})
			}
		}
	}
	sort.Slice(xq, func(i, j int) bool { return xq[i].path() < xq[j].path() })

	// Worktree against index (Y), as diff-files does: intent-to-add
	// entries present in the worktree are additions.
	var yq []*rpair
	for i, e := range ents {
		if e.Stage != stage0 {
			continue
		}
		switch y := ys[i]; y {
		case ' ':
		case 'A':
			abs, ok := r.wtPath(e.Name)
			var st syscall.Stat_t
			if !ok || syscall.Lstat(abs, &st) != nil {
				continue
			}
			yq = append(yq, &rpair{status: 'A', two: &rfile{path: e.Name, abs: abs, typ: st.Mode & syscall.S_IFMT, mode: modeFromStat(e.Mode, st.Mode, wo)}})
		case 'D':
			yq = append(yq, &rpair{status: 'D', one: &rfile{path: e.Name, hash: e.Hash, mode: e.Mode}})
		default:
			yq = append(yq, &rpair{status: y, one: &rfile{path: e.Name, hash: e.Hash, mode: e.Mode}, two: &rfile{path: e.Name}})
		}
	}

	if ro, ok := r.renameOptions(); ok {
		rc := &renameCtx{r: r, conv: wo.conv}
		rc.diffcoreRename(xq, ro)
		rc.diffcoreRename(yq, ro)
	}
	// A deletion whose source was taken by a rename is gone from the
	// queue (diffcore_rename's write-back), before the statuses are
	// resolved.
	dropDeleted := func(q []*rpair) []*rpair {
		out := q[:0]
		for _, p := range q {
			if p.status == 'D' && p.one.renameUsed > 0 {
				continue
			}
			out = append(out, p)
		}
		return out
	}
	xq, yq = dropDeleted(xq), dropDeleted(yq)
	resolveRenames(xq)
	resolveRenames(yq)
	for _, p := range xq {
		c := get(p.path())
		c.x = p.status
		if p.from != nil {
			c.x, c.orig = p.renamed, p.from.one.path
		}
	}
	for _, p := range yq {
		c := get(p.path())
		c.y = p.status
		if p.from != nil {
			c.y, c.orig = p.renamed, p.from.one.path
		}
	}

	res.changes = make([]change, 0, len(changes))
	for _, c := range changes {
		res.changes = append(res.changes, *c)
	}
	sort.Slice(res.changes, func(i, j int) bool { return res.changes[i].path < res.changes[j].path })

	if res.incomplete && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return res, nil
}

// unmergedCodes maps the stage mask (bit 0: base, 1: ours, 2: theirs) to
// git's short status code (wt-status.c).
var unmergedCodes = map[int]string{
	1: "DD",
	2: "AU",
	3: "UD",
	4: "UA",
	5: "DU",
	6: "AA",
	7: "UU",
}

// canonMode is tree-walk.c canon_mode: a regular file is 100644 or
// 100755 by its owner exec bit, whatever else a tree recorded.
func canonMode(m filemode.FileMode) filemode.FileMode {
	switch m & 0o170000 {
	case 0o100000:
		if m&0o100 != 0 {
			return filemode.Executable
		}
		return filemode.Regular
	case 0o120000:
		return filemode.Symlink
	case 0o160000:
		return filemode.Submodule
	}
	return m
}

// modeFromStat is read-cache.h ce_mode_from_stat: the mode git gives a
// worktree file compared with the entry e.
func modeFromStat(e filemode.FileMode, mode uint32, o *wtOptions) filemode.FileMode {
	typ := mode & syscall.S_IFMT
	if !o.symlinks && typ == syscall.S_IFREG && e == filemode.Symlink {
		return e
	}
	if !o.fileMode && typ == syscall.S_IFREG {
		if isRegular(e) {
			return e
		}
		return filemode.Regular
	}
	switch typ {
	case syscall.S_IFLNK:
		return filemode.Symlink
	case syscall.S_IFDIR:
		return filemode.Submodule
	}
	if mode&0o100 != 0 {
		return filemode.Executable
	}
	return filemode.Regular
}

// typeOf is the object type class git compares for a type change.
func typeOf(m filemode.FileMode) int {
	switch m {
	case filemode.Symlink:
		return 1
	case filemode.Submodule:
		return 2
	}
	return 0
}

func (r *Repo) untrackedMode() untrackedMode {
	v, _ := r.conf().get("status", "", "showuntrackedfiles")
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "all":
		return untrackedAll
	case "no", "false", "off", "0":
		return untrackedNo
	}
	return untrackedNormal
}

// basePatterns returns the global excludes file and info/exclude patterns.
func (r *Repo) basePatterns() patterns {
	var ps patterns
	global, ok := r.conf().get("core", "", "excludesfile")
	if ok && global != "" {
		if p := expandHome(global); r.mayRead(p) {
			ps = append(ps, readIgnoreFileFollow(p)...)
		}
	} else if x := xdgConfigHome(); x != "" {
		// The daemon user's own default, not named by the repository.
		ps = append(ps, readIgnoreFileFollow(filepath.Join(x, "git", "ignore"))...)
	}
	if p := filepath.Join(r.commonDir, "info", "exclude"); r.mayRead(p) {
		ps = append(ps, readIgnoreFileFollow(p)...)
	}
	return ps
}

// untrackedVisible reports whether the untracked path u of res ("dir/" for
// a folder) is shown to a reader that sees what canRead accepts.
func (r *Repo) untrackedVisible(ctx context.Context, res *result, u string, canRead func(string) bool) bool {
	dir := strings.TrimSuffix(u, "/")
	if !canRead(dir) {
		return false
	}
	if w, ok := res.witness[u]; ok && !canRead(w) { // only folders have one
		return r.untrackedSeen(ctx, res.snap, dir, canRead)
	}
	return true
}

// readerChanges is changes as a reader that sees what canRead accepts
// finds them (nil: all of them): what git would print were the hidden paths
// in neither HEAD, the index nor the worktree. A line for a hidden path
// goes; a staged rename from a hidden name is the new file added, one to a
// hidden name its origin deleted (leaving it out would tell that the file
// went somewhere hidden), and a copy from a hidden name the new file added.
func readerChanges(changes []change, canRead func(string) bool) []change {
	if canRead == nil {
		return changes
	}
	out := make([]change, 0, len(changes))
	moved := false
	var paths map[string]bool
	for _, c := range changes {
		switch {
		case !canRead(c.path):
			if c.x != 'R' || !canRead(c.orig) {
				continue
			}
			if paths == nil {
				paths = map[string]bool{}
				for _, c := range changes {
					paths[c.path] = true
				}
			}
			if paths[c.orig] {
				continue // the index has the name again: its own line says how
			}
			c = change{path: c.orig, x: 'D', y: ' '}
			moved = true
		case c.orig != "" && !canRead(c.orig):
			c.orig, c.x = "", 'A'
		}
		out = append(out, c)
	}
	if moved {
		sort.SliceStable(out, func(i, j int) bool { return out[i].path < out[j].path })
	}
	return out
}

// readerUntracked is res.untracked as a reader that sees what canRead
// accepts finds it (nil: all of it), sorted: what git would print were
// the paths hidden from the reader in neither the worktree nor the index.
// Beside the lines of hidden paths and of folders with nothing untracked
// it sees (untrackedVisible), the untracked paths below a folder whose
// tracked files are all hidden from the reader become that folder's "??
// dir/" line, as git shows a folder with no tracked files: listing them
// one by one would tell the reader hidden files are tracked there.
func (r *Repo) readerUntracked(ctx context.Context, res *result, canRead func(string) bool) []string {
	if canRead == nil {
		return res.untracked
	}
	var out []string
	for _, u := range res.untracked {
		if r.untrackedVisible(ctx, res, u, canRead) {
			out = append(out, u)
		}
	}
	if !res.collapsed || res.snap == nil || len(out) == 0 {
		return out
	}
	// seesTracked: the reader sees an index path below folder d.
	memo := map[string]bool{}
	seesTracked := func(d string) bool {
		v, ok := memo[d]
		if !ok {
			for _, e := range res.snap.inDir(d) {
				if canRead(e.Name) {
					v = true
					break
				}
			}
			memo[d] = v
		}
		return v
	}
	var collapsed []string
	seen := map[string]bool{}
	for _, u := range out {
		p := strings.TrimSuffix(u, "/")
		// The folders above p, from the one asked for down (git shows
		// the worktree's root as the files and folders in it): p[:j]
		// for each slash p[j] from len(res.dir) on.
		for j := len(res.dir); j < len(p); j++ {
			if p[j] != '/' {
				continue
			}
			a := p[:j]
			// A folder the index has as a path (a gitlink, or a file
			// it replaced) is never "dir/" (index_name_is_other).
			if !res.snap.tracked(a) && canRead(a) && !seesTracked(a) {
				u = a + "/"
				break
			}
		}
		if !seen[u] {
			seen[u] = true
			collapsed = append(collapsed, u)
		}
	}
	sort.Strings(collapsed)
	return collapsed
}

// render builds the porcelain bytes, applying canRead when not nil. An
// untracked directory line ("?? dir/") needs, beside canRead(dir),
// something untracked below it that canRead accepts: git shows no line
// for an empty folder, so one for a folder whose untracked content is all
// hidden would tell the reader hidden files are there.
func (r *Repo) render(ctx context.Context, res *result, canRead func(string) bool) []byte {
	quoteHigh := r.conf().getBool("core", "", "quotepath", true)
	var b bytes.Buffer
	b.WriteString(res.header)
	if res.incomplete {
		fmt.Fprintf(&b, IncompleteMarker, res.limit)
	}
	b.WriteByte('\n')
	for _, c := range readerChanges(res.changes, canRead) {
		b.WriteByte(c.x)
		b.WriteByte(c.y)
		b.WriteByte(' ')
		if c.orig != "" {
			b.WriteString(quotePath(c.orig, quoteHigh))
			b.WriteString(" -> ")
		}
		b.WriteString(quotePath(c.path, quoteHigh))
		b.WriteByte('\n')
	}
	for _, u := range r.readerUntracked(ctx, res, canRead) {
		b.WriteString("?? ")
		b.WriteString(quotePath(u, quoteHigh))
		b.WriteByte('\n')
	}
	return b.Bytes()
}
