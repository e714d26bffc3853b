package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/fs"
	"github.com/neuralis/neuralisfs/gitfs"
	"github.com/neuralis/neuralisfs/index"
	"github.com/neuralis/neuralisfs/internal/held"
	"github.com/neuralis/neuralisfs/internal/pathidx"
	"github.com/neuralis/neuralisfs/mounts"
)

// gitState is the git layer the mount asks (fs.GitState): it opens each
// git, git-pinned and repos source through gitfs and maps mount paths to
// repositories.
type gitState struct {
	log *slog.Logger
	// mu guards srcs (a reload replaces sources).
	mu   sync.RWMutex
	srcs map[string]*gitSource
	// watched reports whether every change to a source reaches Changed
	// (its watcher has every folder); cached status then never goes stale
	// by age.
	watched func(slug string) bool
	// statusFor describes a source as one reader sees it (see
	// SourceStatusFor); set by the daemon.
	statusFor func(slug string, canRead func(rel string) bool, filesEach func(rels []string) []bool) (mounts.Status, string)
}

var _ fs.ReaderStatus = (*gitState)(nil)

// SourceStatusFor is the status and identity of slug for a reader who may
// read only what canRead and filesEach allow (fs.ReaderStatus):
// .neuralis/sources asks it for readers from whom something in the
// source may be hidden.
func (g *gitState) SourceStatusFor(slug string, canRead func(rel string) bool, filesEach func(rels []string) []bool) (mounts.Status, string) {
	if g.statusFor == nil {
		return mounts.Status{}, ""
	}
	return g.statusFor(slug, canRead, filesEach)
}

type gitSource struct {
	src  *mounts.Source
	opts gitfs.Options

	mu       sync.Mutex
	opened   bool
	repo     *gitfs.Repo            // git, git-pinned
	err      error                  // why repo could not be opened
	pinned   *gitfs.Tree            // git-pinned: the tree of rev, resolved at open
	children map[string]*gitfs.Repo // repos: checkout name → repo (nil: not a checkout)
	// nested are checkouts inside a git source's tree (an inner clone, a
	// submodule), by folder: .status there is theirs, as git -C would
	// show. nil: checked, not a checkout.
	nested nestedSet
	// inner is the options for checkouts found inside the source (repos'
	// children, nested): their git data must stay inside the source.
	inner gitfs.Options
	// top is the checkout a git source's folder belongs to: the folder
	// itself, or, for a sub-folder of a checkout, the checkout above it;
	// sub is then the folder's slash path inside it ("" otherwise). Both
	// are found when the source is opened (see checkoutOf).
	top, sub string
}

// checkoutOf is where the repository of a git source is: the source's
// folder when it has a .git, else the nearest folder above it that has
// one, with the source's path inside it. The README ("Git state")
// explains why the checkout above is trusted: nothing on the mount can
// write outside the source, so it is what the host put there.
func checkoutOf(cfg mounts.SourceConfig) (top, sub string) {
	if cfg.Kind != mounts.KindGit {
		return cfg.Path, ""
	}
	if _, err := os.Lstat(filepath.Join(cfg.Path, ".git")); err == nil {
		return cfg.Path, ""
	}
	dir := cfg.Path
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	t, ok := mounts.CheckoutAbove(dir)
	if !ok {
		return cfg.Path, ""
	}
	rel, err := filepath.Rel(t, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return cfg.Path, ""
	}
	return t, filepath.ToSlash(rel)
}

// toSource turns a repository path into a path of the source (a git
// source that is a sub-folder of its checkout sees only what is below
// it); ok is false for paths outside the source.
func (gs *gitSource) toSource(p string) (string, bool) {
	gs.mu.Lock()
	sub := gs.sub
	gs.mu.Unlock()
	if sub == "" {
		return p, true
	}
	if p == sub {
		return "", true
	}
	rest, ok := strings.CutPrefix(p, sub+"/")
	return rest, ok
}

var _ fs.GitState = (*gitState)(nil)

func newGitState(log *slog.Logger, sources []*mounts.Source) *gitState {
	g := &gitState{log: log, srcs: map[string]*gitSource{}}
	g.set(sources)
	return g
}

// get is the git source of slug, or nil.
func (g *gitState) get(slug string) *gitSource {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.srcs[slug]
}

// set makes sources the git layer's sources: those it already has (the
// same *mounts.Source) keep their opened repositories, new ones are added
// and the others are forgotten.
func (g *gitState) set(sources []*mounts.Source) {
	next := map[string]*gitSource{}
	g.mu.RLock()
	cur := g.srcs
	g.mu.RUnlock()
	for _, s := range sources {
		switch s.Config.Kind {
		case mounts.KindGit, mounts.KindGitPinned, mounts.KindRepos:
			slug := s.Slug()
			if gs := cur[slug]; gs != nil && gs.src == s {
				next[slug] = gs
				continue
			}
			watched := func() bool { return g.watched != nil && g.watched(slug) }
			gs := &gitSource{src: s, opts: gitfs.Options{Watched: watched}}
			gs.top, gs.sub = checkoutOf(s.Config)
			if gs.sub != "" {
				// The watcher sees only the sub-folder, not the checkout's
				// .git: cached status expires by age.
				gs.opts.Watched = nil
			}
			// Anyone who may write to the source may write .git files,
			// commondir and alternates: git data is read only from inside
			// the source, or from where the source's own .git pointed when
			// the daemon started (a linked worktree's), or the checkout a
			// sub-folder source belongs to and where its .git pointed then.
			gs.opts.Within = trustedGitDirs(gs.top)
			gs.inner = gitfs.Options{Watched: watched, Within: []string{s.Config.Path}}
			next[slug] = gs
		}
	}
	g.mu.Lock()
	g.srcs = next
	g.mu.Unlock()
}

// open opens the source's repository once (again after reset).
func (gs *gitSource) open() {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.opened {
		return
	}
	gs.opened = true
	cfg := gs.src.Config
	switch cfg.Kind {
	case mounts.KindGit:
		gs.repo, gs.err = gitfs.Open(gs.top, gs.opts)
	case mounts.KindGitPinned:
		gs.repo, gs.err = gitfs.OpenBare(cfg.Path)
		if gs.err != nil {
			if r, err := gitfs.Open(cfg.Path); err == nil {
				gs.repo, gs.err = r, nil
			}
		}
		if gs.err == nil {
			h, err := gs.repo.ResolveRev(cfg.Rev)
			if err == nil {
				gs.pinned, err = gs.repo.Tree(h)
			}
			if err != nil {
				gs.err = fmt.Errorf("rev %q: %w", cfg.Rev, err)
			}
		}
	case mounts.KindRepos:
		gs.children = map[string]*gitfs.Repo{}
	}
}

// reset forgets the opened repositories (the source folder changed). A
// source folder that appeared or was replaced may be a linked worktree
// whose .git points elsewhere: where it points now is trusted again.
func (gs *gitSource) reset() {
	top, sub := checkoutOf(gs.src.Config)
	within := trustedGitDirs(top)
	gs.mu.Lock()
	gs.opened, gs.repo, gs.err, gs.pinned, gs.children, gs.nested = false, nil, nil, nil, nil, nestedSet{}
	gs.opts.Within = within
	gs.top, gs.sub = top, sub
	if sub != "" {
		gs.opts.Watched = nil
	}
	gs.mu.Unlock()
}

// child returns the checkout name in a repos source (nil when name is not
// a checkout: missing, a symlink, or without .git).
func (gs *gitSource) child(name string) *gitfs.Repo {
	gs.open()
	gs.mu.Lock()
	if r, ok := gs.children[name]; ok {
		gs.mu.Unlock()
		return r
	}
	gs.mu.Unlock()
	var repo *gitfs.Repo
	if root, err := gs.src.Root(); err == nil {
		// A child symlinked from elsewhere is not a checkout of this source:
		// Lstat through the confined root sees the link, not its target.
		if st, err := root.Lstat(name); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if _, err := root.Lstat(name + "/.git"); err == nil {
				repo, _ = gitfs.Open(filepath.Join(gs.src.Config.Path, name), gs.inner)
			}
		}
	}
	gs.mu.Lock()
	gs.children[name] = repo
	gs.mu.Unlock()
	return repo
}

// nestedSet is gitSource.nested: the folders looked at, indexed by
// parent, so that a change (Changed, on the request path: every create
// and unlink through the mount) finds what was found at and below its
// path without looking at every folder ever asked about.
type nestedSet struct {
	m     map[string]*gitfs.Repo
	index pathidx.Kids
}

func (n *nestedSet) put(at string, r *gitfs.Repo) {
	if n.m == nil {
		n.m = map[string]*gitfs.Repo{}
	}
	n.m[at] = r
	n.index.Add(at)
}

func (n *nestedSet) del(at string) {
	delete(n.m, at)
	n.index.Remove(at)
}

// below lists the folders of n at rel and below it ("": every one).
func (n *nestedSet) below(rel string) []string {
	out := n.index.Below(rel)
	if _, ok := n.m[rel]; ok {
		out = append(out, rel)
	}
	return out
}

// nestedAt finds the innermost checkout inside the source that holds rel
// (a folder with its own .git, below the source's root), as git -C rel
// would. It returns nil when rel belongs to the source's own repository.
func (gs *gitSource) nestedAt(rel string) (*gitfs.Repo, string) {
	if rel == "" {
		return nil, ""
	}
	root, err := gs.src.Root()
	if err != nil {
		return nil, ""
	}
	for at := rel; at != "" && at != "."; at = path.Dir(at) {
		gs.mu.Lock()
		r, known := gs.nested.m[at]
		gs.mu.Unlock()
		if !known {
			// Lstat through the confined root: a symlinked folder is not
			// a checkout of this source.
			if st, err := root.Lstat(at); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if _, err := root.Lstat(at + "/.git"); err == nil {
					r, _ = gitfs.Open(filepath.Join(gs.src.Config.Path, at), gs.inner)
				}
			}
			gs.mu.Lock()
			gs.nested.put(at, r)
			gs.mu.Unlock()
		}
		if r != nil {
			return r, at
		}
	}
	return nil, ""
}

// trustedGitDirs is where the checkout at worktree keeps its git data now:
// the worktree itself, and the git and common directories its .git file
// points to (a linked worktree's).
func trustedGitDirs(worktree string) []string {
	dirs := []string{worktree}
	dotgit := filepath.Join(worktree, ".git")
	fi, err := os.Lstat(dotgit)
	if err != nil || !fi.Mode().IsRegular() {
		return dirs
	}
	b, err := readSmall(dotgit)
	if err != nil {
		return dirs
	}
	line, _, _ := strings.Cut(string(b), "\n")
	gd, ok := strings.CutPrefix(strings.TrimSpace(line), "gitdir: ")
	if !ok || gd == "" {
		return dirs
	}
	if !filepath.IsAbs(gd) {
		gd = filepath.Join(worktree, gd)
	}
	dirs = append(dirs, gd)
	if c, err := readSmall(filepath.Join(gd, "commondir")); err == nil {
		cd := strings.TrimSpace(string(c))
		if !filepath.IsAbs(cd) {
			cd = filepath.Join(gd, cd)
		}
		dirs = append(dirs, cd)
	}
	return dirs
}

// readSmall reads a small regular file without blocking on a FIFO.
func readSmall(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", p)
	}
	return io.ReadAll(io.LimitReader(f, 64<<10))
}

func insideGitDir(rel string) bool {
	return rel == ".git" || strings.HasPrefix(rel, ".git/") || strings.Contains(rel, "/.git/") || strings.HasSuffix(rel, "/.git")
}

// locate maps a folder of a source to its repository and the folder's path
// inside it, with the prefix that turns repository paths into source paths.
func (g *gitState) locate(slug, rel string) (repo *gitfs.Repo, dir, prefix string) {
	gs := g.get(slug)
	if gs == nil || insideGitDir(rel) {
		return nil, "", ""
	}
	switch gs.src.Config.Kind {
	case mounts.KindGit:
		gs.open()
		if r, at := gs.nestedAt(rel); r != nil {
			if rel == at {
				return r, "", at + "/"
			}
			return r, rel[len(at)+1:], at + "/"
		}
		gs.mu.Lock()
		defer gs.mu.Unlock()
		if gs.sub != "" {
			return gs.repo, path.Join(gs.sub, rel), ""
		}
		return gs.repo, rel, ""
	case mounts.KindRepos:
		if rel == "" {
			return nil, "", ""
		}
		name, rest, _ := strings.Cut(rel, "/")
		r := gs.child(name)
		if r == nil {
			return nil, "", ""
		}
		return r, rest, name + "/"
	}
	return nil, "", ""
}

func (g *gitState) Virtual(slug, rel string) []string {
	repo, _, _ := g.locate(slug, rel)
	if repo == nil {
		return nil
	}
	if rel == "" && g.get(slug).src.Config.Kind == mounts.KindGit {
		return []string{fs.StatusName, fs.RevsName}
	}
	return []string{fs.StatusName}
}

func (g *gitState) Status(ctx context.Context, slug, rel string, canRead func(string) bool, view *held.View) ([]byte, error) {
	b, err := g.statusOf(ctx, slug, rel, canRead, view)
	if errors.Is(err, gitfs.ErrObjectTooLarge) {
		// A commit or tree past gitfs' bound (README "Git state"):
		// cat says "File too large".
		err = fmt.Errorf("%w (%w)", err, unix.EFBIG)
	}
	return b, err
}

func (g *gitState) statusOf(ctx context.Context, slug, rel string, canRead func(string) bool, view *held.View) ([]byte, error) {
	repo, dir, prefix := g.locate(slug, rel)
	if repo == nil {
		return nil, fmt.Errorf("%s://%s is not in a checkout: %w", slug, rel, unix.ENOENT)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	gs := g.srcs[slug]
	gs.mu.Lock()
	main := repo == gs.repo
	sub := ""
	if main {
		sub = gs.sub
	}
	gs.mu.Unlock()
	filter := func(p string) bool {
		if main {
			// A sub-folder source: lines for paths outside it are not its
			// files (a rename from outside goes whole).
			sp, ok := gs.toSource(p)
			return ok && canRead(sp)
		}
		return canRead(prefix + p)
	}
	if view != nil {
		if r, at := heldNested(view, rel, strings.TrimSuffix(prefix, "/")); r != nil {
			d := ""
			if rel != at {
				d = rel[len(at)+1:]
			}
			hv := heldView{v: view, worktree: r.Worktree(), prefix: at + "/"}
			return r.StatusView(ctx, d, hv, func(p string) bool { return canRead(at + "/" + p) })
		}
		hv := heldView{v: view, worktree: repo.Worktree(), prefix: prefix, sub: sub}
		if hv.Changed("") {
			return repo.StatusView(ctx, dir, hv, filter)
		}
	}
	return repo.Status(ctx, dir, filter)
}

// heldNested finds the innermost checkout that a principal made in its
// held layer (its own git init or clone) holding the source folder rel,
// below the repository root top, as git -C rel would find it; nil when
// there is none. Its git data must lie in the layer.
func heldNested(view *held.View, rel, top string) (*gitfs.Repo, string) {
	for at := rel; at != "" && at != "." && at != top; at = path.Dir(at) {
		if top != "" && !strings.HasPrefix(at, top+"/") {
			break
		}
		if !view.Held(at + "/.git") {
			continue
		}
		dotgit, ok := view.Path(at + "/.git")
		if !ok {
			continue
		}
		wt := filepath.Dir(dotgit)
		if r, err := gitfs.Open(wt, gitfs.Options{Within: []string{wt}, ScanTimeout: gitfs.DefaultScanTimeout}); err == nil {
			return r, at
		}
	}
	return nil, ""
}

// heldView is a repository's worktree as a principal sees it through its
// held changes: repository paths become source paths by prefix (a
// checkout in a repos source, or nested in a git source) or by sub (a
// source that is a sub-folder of its checkout; paths outside it are the
// checkout's own).
type heldView struct {
	v        *held.View
	worktree string
	prefix   string // source path of the repository root, with "/"; or ""
	sub      string // repository path of the source root; or ""
}

var _ gitfs.View = heldView{}

// src maps a repository path to a source path; false outside the source.
func (h heldView) src(p string) (string, bool) {
	if h.sub != "" {
		if p == h.sub {
			return "", true
		}
		return strings.CutPrefix(p, h.sub+"/")
	}
	if p == "" {
		return strings.TrimSuffix(h.prefix, "/"), true
	}
	return h.prefix + p, true
}

func (h heldView) Path(p string) (string, bool) {
	s, ok := h.src(p)
	if !ok {
		return filepath.Join(h.worktree, filepath.FromSlash(p)), true
	}
	return h.v.Path(s)
}

func (h heldView) Open(p string) (*os.File, error) {
	s, ok := h.src(p)
	if !ok {
		// Above a sub-folder source: the checkout's own .gitignore and
		// .gitattributes, as without held changes.
		return os.OpenFile(filepath.Join(h.worktree, filepath.FromSlash(p)), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	}
	return h.v.Open(s)
}

func (h heldView) List(p string) ([]gitfs.ViewEntry, bool) {
	s, ok := h.src(p)
	if !ok {
		// Above a sub-folder source: nothing there is held.
		ents, err := os.ReadDir(filepath.Join(h.worktree, filepath.FromSlash(p)))
		if err != nil {
			return nil, false
		}
		out := make([]gitfs.ViewEntry, 0, len(ents))
		for _, e := range ents {
			var m uint32
			switch t := e.Type(); {
			case t.IsDir():
				m = unix.S_IFDIR
			case t&os.ModeSymlink != 0:
				m = unix.S_IFLNK
			case t.IsRegular():
				m = unix.S_IFREG
			}
			out = append(out, gitfs.ViewEntry{Name: e.Name(), Mode: m})
		}
		return out, true
	}
	ents, err := h.v.List(s)
	if err != nil {
		return nil, false
	}
	out := make([]gitfs.ViewEntry, 0, len(ents))
	for _, e := range ents {
		out = append(out, gitfs.ViewEntry{Name: e.Name, Mode: e.St.Mode})
	}
	return out, true
}

func (h heldView) Changed(p string) bool {
	s, ok := h.src(p)
	return ok && h.v.Changed(s)
}

func (g *gitState) Changed(slug, rel string) {
	gs := g.get(slug)
	if gs == nil {
		return
	}
	if strings.HasPrefix(rel, ".git/objects/") || strings.Contains(rel, "/.git/objects/") {
		return
	}
	switch gs.src.Config.Kind {
	case mounts.KindGit:
		gs.mu.Lock()
		r := gs.repo
		// The folder or one above it changed: look at what was found
		// there and below again.
		for _, at := range gs.nested.below(rel) {
			if nr := gs.nested.m[at]; nr != nil {
				nr.Invalidate()
			}
			gs.nested.del(at)
		}
		// A change inside a checkout found above it.
		for at := path.Dir(rel); rel != "" && at != "." && at != "/"; at = path.Dir(at) {
			nr, ok := gs.nested.m[at]
			if !ok {
				continue
			}
			rest := rel[len(at)+1:]
			if rest == ".git" {
				gs.nested.del(at)
			}
			if nr != nil {
				if insideGitDir(rest) {
					nr.Invalidate()
				} else {
					nr.Invalidate(rest)
				}
			}
		}
		if path.Base(rel) == ".git" {
			gs.nested.del(path.Dir(rel)) // a folder became a checkout
		}
		sub := gs.sub
		gs.mu.Unlock()
		if r == nil {
			return
		}
		if rel == "" || insideGitDir(rel) {
			r.Invalidate()
		} else {
			r.Invalidate(path.Join(sub, rel))
		}
	case mounts.KindRepos:
		if rel == "" {
			gs.mu.Lock()
			gs.children = map[string]*gitfs.Repo{}
			gs.mu.Unlock()
			return
		}
		name, rest, _ := strings.Cut(rel, "/")
		gs.mu.Lock()
		r, known := gs.children[name]
		if rest == "" || rest == ".git" {
			// The checkout itself appeared, went or was replaced.
			delete(gs.children, name)
		}
		gs.mu.Unlock()
		if known && r != nil {
			if rest == "" || insideGitDir(rest) {
				r.Invalidate()
			} else {
				r.Invalidate(rest)
			}
		}
	}
}

func (g *gitState) Revs(slug string) []string {
	gs := g.get(slug)
	if gs == nil {
		return nil
	}
	gs.open()
	gs.mu.Lock()
	r := gs.repo
	gs.mu.Unlock()
	if r == nil {
		return nil
	}
	refs, err := r.Refs()
	if err != nil {
		g.log.Warn("git refs", "source", slug, "err", err)
	}
	return refs
}

func (g *gitState) Tree(slug, rev string) (*gitfs.Tree, error) {
	gs := g.get(slug)
	if gs == nil {
		return nil, unix.ENOENT
	}
	gs.open()
	gs.mu.Lock()
	r, pinned, err := gs.repo, gs.pinned, gs.err
	gs.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", slug, mounts.ErrUnavailable, err)
	}
	if rev == "" {
		if pinned == nil {
			return nil, fmt.Errorf("%s: %w", slug, mounts.ErrUnavailable)
		}
		return pinned, nil
	}
	h, err := r.ResolveRev(rev)
	if err != nil {
		return nil, err
	}
	t, err := r.Tree(h)
	gs.mu.Lock()
	sub := gs.sub
	gs.mu.Unlock()
	if err != nil || sub == "" {
		return t, err
	}
	return t.Sub(sub) // that folder of the commit; absent where it did not exist
}

// reset forgets slug's repositories after its folder changed.
func (g *gitState) reset(slug string) {
	if gs := g.get(slug); gs != nil {
		gs.reset()
	}
}

// status returns the status and identity of a git kind of source, or
// ok=false for other kinds. canRead (nil: everything) filters the paths
// the identity lists as modified, and their count: a reader learns
// nothing of files hidden from them.
func (g *gitState) status(ctx context.Context, slug string, canRead func(rel string) bool) (st mounts.Status, identity string, ok bool) {
	gs := g.get(slug)
	if gs == nil {
		return st, "", false
	}
	st = gs.src.Status()
	if st.State == mounts.Unavailable && st.Code != mounts.CodeNotAGitRepository {
		return st, "", true
	}
	switch gs.src.Config.Kind {
	case mounts.KindRepos:
		return st, "", true
	case mounts.KindGit, mounts.KindGitPinned:
		gs.open()
		gs.mu.Lock()
		r, pinned, err := gs.repo, gs.pinned, gs.err
		gs.mu.Unlock()
		if err != nil {
			code := mounts.CodeNotAGitRepository
			if errors.Is(err, gitfs.ErrFormatUnsupported) {
				code = mounts.CodeGitFormatUnsupported
			}
			return mounts.Status{State: mounts.Unavailable, Code: code, Reason: err.Error()}, "", true
		}
		if pinned != nil {
			return mounts.Status{State: mounts.Available}, "git:" + pinned.Commit().String(), true
		}
		gs.mu.Lock()
		sub := gs.sub
		gs.mu.Unlock()
		var seen func(string) bool
		if canRead != nil {
			seen = func(repoPath string) bool {
				sp, ok := gs.toSource(repoPath)
				if sp == "" {
					sp = "." // the whole folder
				}
				return ok && canRead(sp)
			}
		}
		commit, dirty, err := r.IdentityFor(ctx, sub, seen)
		if sub != "" {
			// Only changes under the sub-folder, as paths of the source.
			var in []string
			for _, p := range dirty {
				if sp, ok := gs.toSource(strings.TrimSuffix(p, "/")); ok {
					switch {
					case sp == "":
						sp = "." // the whole folder is untracked
					case strings.HasSuffix(p, "/"):
						sp += "/"
					}
					in = append(in, sp)
				}
			}
			dirty = in
		}
		if err != nil {
			return mounts.Status{State: mounts.Degraded, Reason: "git status: " + err.Error()}, "", true
		}
		id := "git:" + commit
		if commit == "" {
			id = "git:(no commits)"
		}
		if len(dirty) > 0 {
			shown := dirty
			if len(shown) > 20 {
				shown = shown[:20]
			}
			quoted := make([]string, len(shown))
			for i, p := range shown {
				quoted[i] = index.QuoteURI(p)
			}
			id += fmt.Sprintf(" WORKTREE_MODIFIED (%d: %s", len(dirty), strings.Join(quoted, ", "))
			if len(dirty) > len(shown) {
				id += ", …"
			}
			id += ")"
		}
		if st.State == mounts.Unavailable {
			st = mounts.Status{State: mounts.Available}
		}
		return st, id, true
	}
	return st, "", false
}

// GitIdentity is the identity of a git or git-pinned source without a
// running daemon ("" for other kinds or when it cannot be read); for a
// file, inline or http source, the identity of what the daemon cached.
func GitIdentity(s *mounts.Source) string {
	if id, ok := s.Identity(nil); ok {
		return id
	}
	g := newGitState(slog.Default(), []*mounts.Source{s})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, id, ok := g.status(ctx, s.Slug(), nil)
	if !ok {
		return ""
	}
	if id == "" && st.Code != "" {
		return ""
	}
	return id
}
