package gitfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	formatcfg "github.com/go-git/go-git/v5/plumbing/format/config"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
)

// Options tune a Repo. The zero value gives the defaults.
type Options struct {
	// ScanTimeout bounds one status walk. When a walk runs past it, Status
	// returns the lines found so far and marks the header line incomplete
	// (see Status). Zero means DefaultScanTimeout; negative means no bound.
	ScanTimeout time.Duration

	// MaxAge bounds how long a cached status result is served without
	// being recomputed when nothing under .git changed and Invalidate was not
	// called: worktree edits made behind the mount's back are seen after at
	// most MaxAge. Zero means DefaultMaxAge; negative means results never
	// expire by age (the caller invalidates on every worktree change).
	MaxAge time.Duration

	// Within, when set, lists the only folders a repository's git data may
	// live in: the git directory, its common directory and object store
	// (symlinks resolved) and every alternate object store must be inside
	// one of them, or Open fails with ErrNotGitRepository. A checkout that
	// someone else can write to could otherwise point its .git file, its
	// commondir or its alternates at any repository on the host and have
	// its names and branches shown.
	Within []string

	// Watched, when set and reporting true, says the caller sees every
	// worktree change and calls Invalidate for it: results then do not
	// expire by age (as with a negative MaxAge) until it reports false.
	Watched func() bool
}

const (
	// DefaultScanTimeout is the walk bound used when Options.ScanTimeout is zero.
	DefaultScanTimeout = 2 * time.Second
	// DefaultMaxAge is the cache age bound used when Options.MaxAge is zero.
	DefaultMaxAge = 2 * time.Second
)

// Repo is one opened repository: a checkout (with a worktree) or a bare
// repository. It is safe for concurrent use.
type Repo struct {
	worktree  string // absolute worktree root; "" for a bare repository
	gitDir    string // per-worktree git dir (HEAD, index)
	commonDir string // shared git dir (objects, refs, config)
	opts      Options

	// view, when set, is the worktree as one reader sees it (StatusView):
	// this Repo is then a short-lived copy that shares *repoState with
	// the one Open returned and reads the worktree through view.
	view *viewState

	*repoState
}

// repoState is what every copy of one Repo shares: configuration, object
// storage and caches.
type repoState struct {
	cfgMu  sync.Mutex
	cfgNow *gitConfig // see conf

	// objMu serialises access to go-git's object storage and the
	// Repository built on it, which are not safe for concurrent use.
	objMu   sync.Mutex
	storage *filesystem.Storage
	objDir  *dotgit.DotGit // the git dir storage reads, for objectStore.bounded
	packs   *packWatch
	hist    *history // see refreshHistory
	repo    *gogit.Repository
	trees   *treeCache

	status  statusCache
	clean   cleanMemo     // see cleanMemo
	hashed  atomic.Int64  // worktree files hashed to compare with the index, for tests
	convGen atomic.Uint64 // bumped when attributes or config may have changed

	subMu sync.Mutex
	subs  map[string]*Repo // opened submodules by path; nil when not a repository
}

// Open opens the checkout whose worktree root is worktree. worktree/.git may
// be a directory or a "gitdir:" file (a linked worktree or a submodule).
// Open does not search parent directories. Errors wrap ErrNotGitRepository or
// ErrFormatUnsupported.
func Open(worktree string, opts ...Options) (*Repo, error) {
	abs, err := filepath.Abs(worktree)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", worktree, err)
	}
	// The walk opens directories with O_NOFOLLOW, so resolve a symlinked
	// root once here.
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	dotgitPath := filepath.Join(abs, ".git")
	fi, err := os.Lstat(dotgitPath)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w: %v", worktree, ErrNotGitRepository, err)
	}
	var gitDir string
	switch {
	case fi.IsDir():
		gitDir = dotgitPath
	case fi.Mode().IsRegular():
		gitDir, err = readGitdirFile(dotgitPath)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w: %v", worktree, ErrNotGitRepository, err)
		}
		if !filepath.IsAbs(gitDir) {
			gitDir = filepath.Join(abs, gitDir)
		}
	default:
		return nil, fmt.Errorf("open %s: %w: .git is neither a directory nor a file", worktree, ErrNotGitRepository)
	}
	r, err := openGitDir(gitDir, abs, firstOptions(opts))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", worktree, err)
	}
	return r, nil
}

// OpenBare opens a bare repository (or a git directory) at path, for reading
// commit trees; Status and Identity need a worktree and fail on it.
func OpenBare(path string, opts ...Options) (*Repo, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	r, err := openGitDir(abs, "", firstOptions(opts))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return r, nil
}

func firstOptions(opts []Options) Options {
	if len(opts) > 0 {
		return opts[0]
	}
	return Options{}
}

// readGitdirFile parses a ".git" file: "gitdir: <path>".
func readGitdirFile(p string) (string, error) {
	b, err := readRegular(p)
	if err != nil {
		return "", err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	s, ok := strings.CutPrefix(strings.TrimRight(string(line), "\r"), "gitdir: ")
	if !ok || s == "" {
		return "", fmt.Errorf("%s: no gitdir: line", p)
	}
	return s, nil
}

func openGitDir(gitDir, worktree string, opts Options) (*Repo, error) {
	if st, err := os.Stat(filepath.Join(gitDir, "HEAD")); err != nil || st.IsDir() {
		return nil, fmt.Errorf("%w: %s has no HEAD", ErrNotGitRepository, gitDir)
	}
	commonDir := gitDir
	if b, err := readRegular(filepath.Join(gitDir, "commondir")); err == nil {
		c := strings.TrimSpace(string(b))
		if !filepath.IsAbs(c) {
			c = filepath.Join(gitDir, c)
		}
		commonDir = filepath.Clean(c)
	}
	if st, err := os.Stat(filepath.Join(commonDir, "objects")); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: %s has no objects directory", ErrNotGitRepository, commonDir)
	}

	if err := checkWithin(opts.Within, gitDir, commonDir); err != nil {
		return nil, err
	}

	cfg, err := loadRepoConfig(gitDir, commonDir)
	if err != nil {
		return nil, err
	}

	var fs billy.Filesystem = nonblockFS{osfs.New(gitDir)}
	if commonDir != gitDir {
		fs = dotgit.NewRepositoryFilesystem(fs, nonblockFS{osfs.New(commonDir)})
	}
	var sopts filesystem.Options
	if len(opts.Within) > 0 {
		// Alternates added later are looked up below the first allowed
		// folder only (checkWithin vetted those present at Open).
		sopts.AlternatesFS = nonblockFS{osfs.New(opts.Within[0])}
	}
	st := filesystem.NewStorageWithOptions(fs, cache.NewObjectLRUDefault(), sopts)
	// go-git v5.19.3's verifyExtensions lower-cases extension names and then
	// looks them up in camel-cased tables ("worktreeConfig"), and knows no
	// worktreeConfig support at all, so git.Open refuses any repository with
	// extensions.worktreeConfig = true. We checked the extensions ourselves
	// above; hand go-git a view of the config without the extensions section.
	packDir := filepath.Join(commonDir, "objects", "pack")
	packs := &packWatch{dir: packDir, bound: packBound{dir: packDir}}
	// The same folders storage reads, for objectStore.bounded.
	dir := dotgit.NewWithOptions(fs, dotgit.Options{AlternatesFS: sopts.AlternatesFS})
	gr, err := gogit.Open(sanitizedStorage{objectStore{Storage: st, packs: packs, dir: dir}}, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotGitRepository, err)
	}
	r := &Repo{
		worktree:  worktree,
		gitDir:    gitDir,
		commonDir: commonDir,
		opts:      opts,
		repoState: &repoState{
			cfgNow:  cfg,
			storage: st,
			objDir:  dir,
			packs:   packs,
			repo:    gr,
			trees:   newTreeCache(256),
		},
	}
	r.status.init()
	return r, nil
}

// loadRepoConfig reads the configuration git would use for the
// repository, and the stat data of the files it came from.
func loadRepoConfig(gitDir, commonDir string) (*gitConfig, error) {
	cfg := &gitConfig{}
	for _, p := range userConfigPaths() {
		p = expandHome(p)
		cfg.files = append(cfg.files, p)
		if c, err := loadConfigFile(p); err == nil && c != nil {
			cfg.layers = append(cfg.layers, c)
		}
	}
	repoPath := filepath.Join(commonDir, "config")
	cfg.files = append(cfg.files, repoPath)
	repoCfg, err := loadConfigFile(repoPath)
	if err != nil {
		return nil, fmt.Errorf("%w: config: %v", ErrNotGitRepository, err)
	}
	cfg.layers = append(cfg.layers, repoCfg)
	if err := checkFormat(cfg, repoCfg); err != nil {
		return nil, err
	}
	wtPath := filepath.Join(gitDir, "config.worktree")
	cfg.files = append(cfg.files, wtPath)
	if cfg.getBool("extensions", "", "worktreeconfig", false) {
		wc, err := loadConfigFile(wtPath)
		if err != nil {
			return nil, fmt.Errorf("%w: config.worktree: %v", ErrNotGitRepository, err)
		}
		cfg.layers = append(cfg.layers, wc)
	}
	for _, f := range cfg.files {
		cfg.keys = append(cfg.keys, statKey(f))
	}
	return cfg, nil
}

// conf returns the configuration as of the last reloadConfig.
func (r *Repo) conf() *gitConfig {
	r.cfgMu.Lock()
	defer r.cfgMu.Unlock()
	return r.cfgNow
}

// reloadConfig reads the configuration again when one of its files
// changed since it was read (git config, git branch -u and git remote
// write the repository's). A configuration that no longer parses, or that
// asks for what this package cannot read, keeps the previous one.
func (r *Repo) reloadConfig() {
	cur := r.conf()
	same := true
	for i, f := range cur.files {
		if statKey(f) != cur.keys[i] {
			same = false
			break
		}
	}
	if same {
		return
	}
	cfg, err := loadRepoConfig(r.gitDir, r.commonDir)
	if err != nil {
		return
	}
	r.cfgMu.Lock()
	r.cfgNow = cfg
	r.cfgMu.Unlock()
	r.convGen.Add(1)
}

// checkFormat refuses what go-git cannot read: repository format versions
// above 1, SHA-256 object format, reftable refs, and unknown extensions in a
// version 1 repository (git refuses those too).
func checkFormat(cfg *gitConfig, repoCfg *formatcfg.Config) error {
	version, _ := cfg.get("core", "", "repositoryformatversion")
	version = strings.TrimSpace(version)
	switch version {
	case "", "0", "1":
	default:
		return fmt.Errorf("%w: core.repositoryformatversion = %s", ErrFormatUnsupported, version)
	}
	if repoCfg == nil {
		return nil
	}
	for _, s := range repoCfg.Sections {
		if !s.IsName("extensions") {
			continue
		}
		for _, o := range s.Options {
			name := strings.ToLower(o.Key)
			val := strings.ToLower(strings.TrimSpace(o.Value))
			switch name {
			case "objectformat":
				if val != "sha1" {
					return fmt.Errorf("%w: extensions.objectFormat = %s (only sha1 object names are supported)", ErrFormatUnsupported, o.Value)
				}
			case "refstorage":
				if val != "files" {
					return fmt.Errorf("%w: extensions.refStorage = %s (only the files ref backend is supported)", ErrFormatUnsupported, o.Value)
				}
			case "worktreeconfig", "noop", "noop-v1", "preciousobjects", "partialclone":
			default:
				if version == "1" {
					return fmt.Errorf("%w: unknown extension extensions.%s", ErrFormatUnsupported, o.Key)
				}
			}
		}
	}
	return nil
}

// sanitizedStorage is go-git's filesystem storage with the [extensions]
// section hidden from Config, to get past go-git's extension check (see
// openGitDir), and objects read through objectStore. Nothing in this
// package writes config through it.
type sanitizedStorage struct {
	objectStore
}

// objectStore reads objects from go-git's filesystem storage and copes
// with packs that changed under it. go-git lists the packs once, at the
// first lookup that misses the loose objects, and never again; git gc and
// git repack (auto gc runs after commits) write a new pack, delete the
// loose objects it holds and drop old packs, so an open Repo would then
// fail to find HEAD's commit for the rest of its life. On a missing object
// or a vanished pack, when objects/pack changed since the packs were last
// listed, objectStore has go-git list them again and tries once more.
// Callers hold Repo.objMu, as for every storage access.
type objectStore struct {
	*filesystem.Storage
	packs *packWatch
	hist  *history // replace refs; nil for none
	// loose, when set, reads loose objects the storage does not have
	// (a reader's held git add or commit, see View).
	loose func(plumbing.Hash, plumbing.ObjectType) (plumbing.EncodedObject, error)
	// dir is the git dir the storage reads, where bounded reads loose
	// objects itself; nil: go-git reads them.
	dir *dotgit.DotGit
}

// packWatch remembers the stat data of objects/pack when go-git was last
// told to list the packs. Guarded by Repo.objMu.
type packWatch struct {
	dir string
	key fileKey
	// bound walks the delta chains of the packs in dir, alts those of
	// the alternates' packs, by folder (packbound.go).
	bound packBound
	alts  map[string]*packBound
}

// relist has go-git list the packs again and reports true, unless
// objects/pack is unchanged since it last did.
func (s objectStore) relist() bool {
	k := statKey(s.packs.dir)
	if k == s.packs.key {
		return false
	}
	s.packs.key = k
	s.Storage.Reindex()
	return true
}

// EncodedObject returns the object h, re-listing the packs once when it is
// not found.
func (s objectStore) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	h = s.hist.replaced(h)
	if o, done, err := s.bounded(t, h); done {
		return o, err
	}
	o, err := s.Storage.EncodedObject(t, h)
	if err != nil && packsChanged(err) && s.relist() {
		o, err = s.Storage.EncodedObject(t, h)
	}
	if err != nil && s.loose != nil && packsChanged(err) {
		lo, lerr := s.loose(h, t)
		if lerr == nil {
			return lo, nil
		}
		if !errors.Is(lerr, plumbing.ErrObjectNotFound) {
			return nil, lerr
		}
	}
	return o, err
}

// EncodedObjectSize returns the size of object h, re-listing the packs once
// when it is not found.
func (s objectStore) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	h = s.hist.replaced(h)
	n, err := s.Storage.EncodedObjectSize(h)
	if err != nil && packsChanged(err) && s.relist() {
		n, err = s.Storage.EncodedObjectSize(h)
	}
	if err != nil && s.loose != nil && packsChanged(err) {
		if lo, lerr := s.loose(h, headerOnly); lerr == nil {
			return lo.Size(), nil
		}
	}
	return n, err
}

// packsChanged reports whether err may come from a stale list of packs.
func packsChanged(err error) bool {
	return errors.Is(err, plumbing.ErrObjectNotFound) || errors.Is(err, os.ErrNotExist)
}

// Config returns the repository config without its extensions.
//
// go-git also validates what git itself accepts, such as a branch.<b>.merge
// that does not start with refs/heads/, and would refuse to open such a
// repository; this package reads settings from its own parse of the config
// files (gitConfig), so go-git then gets an empty configuration.
func (s sanitizedStorage) Config() (*config.Config, error) {
	c, err := s.Storage.Config()
	if err != nil {
		return config.NewConfig(), nil
	}
	if c.Raw != nil && c.Raw.HasSection("extensions") {
		c.Raw.RemoveSection("extensions")
	}
	return c, nil
}

// objects is the object storage to read objects through (see objectStore).
// Callers hold objMu.
func (r *Repo) objects() objectStore {
	s := objectStore{Storage: r.storage, packs: r.packs, hist: r.hist, dir: r.objDir}
	if r.view != nil && r.view.git {
		s.loose = r.looseObject
	}
	return s
}

// Worktree returns the absolute worktree root, or "" for a bare repository.
func (r *Repo) Worktree() string { return r.worktree }

// GitDir returns the per-worktree git directory, where HEAD and index live;
// the mount watches it to call Invalidate.
func (r *Repo) GitDir() string { return r.gitDir }

// CommonDir returns the shared git directory, where refs/, packed-refs,
// objects and config live. It equals GitDir except in linked worktrees.
func (r *Repo) CommonDir() string { return r.commonDir }

// checkWithin refuses git data outside the folders of within (see
// Options.Within).
func checkWithin(within []string, gitDir, commonDir string) error {
	if len(within) == 0 {
		return nil
	}
	inside := func(p string) bool { return insideAny(within, p) }
	paths := []string{gitDir, commonDir, filepath.Join(commonDir, "objects")}
	if b, err := readRegular(filepath.Join(commonDir, "objects", "info", "alternates")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if !filepath.IsAbs(line) {
				line = filepath.Join(commonDir, "objects", line)
			}
			paths = append(paths, line)
		}
	}
	for _, p := range paths {
		if !inside(p) {
			return fmt.Errorf("%w: its git data (%s) is outside the folders it may use", ErrNotGitRepository, p)
		}
	}
	return nil
}

// insideAny reports whether p, its symlinks resolved, lies in one of the
// folders of within.
func insideAny(within []string, p string) bool {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return false
	}
	for _, w := range within {
		if wr, err := filepath.EvalSymlinks(w); err == nil {
			if rel, err := filepath.Rel(wr, real); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				return true
			}
		}
	}
	return false
}

// mayRead reports whether a file the repository's own data names (an
// excludes or attributes file from its config, info/exclude,
// info/attributes, each followed through symlinks as git does) may be
// read: with Options.Within set, only inside those folders. Otherwise an
// agent that can write .git/config or .git/info could point it at any
// file on the host and learn, from which untracked names .status then
// hides, what the daemon read there as root.
func (r *Repo) mayRead(p string) bool {
	return len(r.opts.Within) == 0 || insideAny(r.opts.Within, p)
}
