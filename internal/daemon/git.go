package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/fs"
	"github.com/neuralis/neuralisfs/gitfs"
	"github.com/neuralis/neuralisfs/mounts"
)

// gitState is the git layer the mount asks (fs.GitState): it opens each
// git, git-pinned and repos source through gitfs and maps mount paths to
// repositories.
type gitState struct {
	log  *slog.Logger
	srcs map[string]*gitSource
	// watched reports whether every change to a source reaches Changed
	// (its watcher has every folder); cached status then never goes stale
	// by age.
	watched func(slug string) bool
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
}

var _ fs.GitState = (*gitState)(nil)

func newGitState(log *slog.Logger, sources []*mounts.Source) *gitState {
	g := &gitState{log: log, srcs: map[string]*gitSource{}}
	for _, s := range sources {
		switch s.Config.Kind {
		case mounts.KindGit, mounts.KindGitPinned, mounts.KindRepos:
			slug := s.Slug()
			g.srcs[slug] = &gitSource{src: s, opts: gitfs.Options{Watched: func() bool {
				return g.watched != nil && g.watched(slug)
			}}}
		}
	}
	return g
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
		gs.repo, gs.err = gitfs.Open(cfg.Path, gs.opts)
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

// reset forgets the opened repositories (the source folder changed).
func (gs *gitSource) reset() {
	gs.mu.Lock()
	gs.opened, gs.repo, gs.err, gs.pinned, gs.children = false, nil, nil, nil, nil
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
				repo, _ = gitfs.Open(filepath.Join(gs.src.Config.Path, name), gs.opts)
			}
		}
	}
	gs.mu.Lock()
	gs.children[name] = repo
	gs.mu.Unlock()
	return repo
}

func insideGitDir(rel string) bool {
	return rel == ".git" || strings.HasPrefix(rel, ".git/") || strings.Contains(rel, "/.git/") || strings.HasSuffix(rel, "/.git")
}

// locate maps a folder of a source to its repository and the folder's path
// inside it, with the prefix that turns repository paths into source paths.
func (g *gitState) locate(slug, rel string) (repo *gitfs.Repo, dir, prefix string) {
	gs := g.srcs[slug]
	if gs == nil || insideGitDir(rel) {
		return nil, "", ""
	}
	switch gs.src.Config.Kind {
	case mounts.KindGit:
		gs.open()
		gs.mu.Lock()
		defer gs.mu.Unlock()
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
	if rel == "" && g.srcs[slug].src.Config.Kind == mounts.KindGit {
		return []string{fs.StatusName, fs.RevsName}
	}
	return []string{fs.StatusName}
}

func (g *gitState) Status(ctx context.Context, slug, rel string, canRead func(string) bool) ([]byte, error) {
	repo, dir, prefix := g.locate(slug, rel)
	if repo == nil {
		return nil, fmt.Errorf("%s://%s is not in a checkout: %w", slug, rel, unix.ENOENT)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return repo.Status(ctx, dir, func(p string) bool { return canRead(prefix + p) })
}

func (g *gitState) Changed(slug, rel string) {
	gs := g.srcs[slug]
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
		gs.mu.Unlock()
		if r == nil {
			return
		}
		if rel == "" || insideGitDir(rel) {
			r.Invalidate()
		} else {
			r.Invalidate(rel)
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
	gs := g.srcs[slug]
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
	gs := g.srcs[slug]
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
	return r.Tree(h)
}

// reset forgets slug's repositories after its folder changed.
func (g *gitState) reset(slug string) {
	if gs := g.srcs[slug]; gs != nil {
		gs.reset()
	}
}

// status returns the status and identity of a git kind of source, or
// ok=false for other kinds.
func (g *gitState) status(ctx context.Context, slug string) (st mounts.Status, identity string, ok bool) {
	gs := g.srcs[slug]
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
		commit, dirty, err := r.Identity(ctx)
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
			id += fmt.Sprintf(" WORKTREE_MODIFIED (%d: %s", len(dirty), strings.Join(shown, ", "))
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
// running daemon ("" for other kinds or when it cannot be read).
func GitIdentity(s *mounts.Source) string {
	g := newGitState(slog.Default(), []*mounts.Source{s})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, id, ok := g.status(ctx, s.Slug())
	if !ok {
		return ""
	}
	if id == "" && st.Code != "" {
		return ""
	}
	return id
}
