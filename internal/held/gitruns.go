package held

import (
	"os"
	"path"
	"slices"
	"strings"

	formatcfg "github.com/go-git/go-git/v5/plumbing/format/config"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
)

// GitRuns reports whether rel (a path in a source) is one git reads
// commands from, or one that makes a folder a repository whose own
// configuration git then reads:
//
//   - a file, folder or symlink named .git: a new repository, or a
//     "gitdir:" pointer to one anywhere;
//   - a repository's config and config.worktree (core.fsmonitor runs a
//     command at a plain git status; core.hooksPath, core.pager,
//     core.sshCommand, filter and diff drivers, aliases…), and its
//     commondir (which names the folder whose config git reads);
//   - its hooks folder and what is in it (but the .sample files, which
//     git never runs);
//   - the same below .git/modules/ and .git/worktrees/.
//
// A reviewer who approves such a change lets the principal that made it
// run commands as whoever next runs git there.
func GitRuns(rel string) bool {
	segs := strings.Split(rel, "/")
	i := slices.Index(segs, ".git")
	if i < 0 {
		return false
	}
	rest := segs[i+1:]
	if len(rest) == 0 {
		return true
	}
	nested := rest[0] == "modules" || rest[0] == "worktrees"
	last := rest[len(rest)-1]
	if (last == "config" || last == "config.worktree" || last == "commondir") && (len(rest) == 1 || nested) {
		return true
	}
	if h := slices.Index(rest, "hooks"); h == 0 || h > 0 && nested {
		return !strings.HasSuffix(last, ".sample")
	}
	return false
}

// asBefore reports whether c leaves a regular file with the content and
// mode it had: git rewrites its config whole (a lock file renamed over
// it) for commands that change nothing in it, such as deleting a branch
// that has no section there.
func (c Change) asBefore() bool {
	return c.Type == "file" && !c.Base.Absent && c.Base.Type == unix.S_IFREG && c.Digest != "" &&
		c.Digest == c.Base.Digest && c.Mode == c.Base.Mode
}

// GitRuns lists the paths c makes that GitRuns reports, those in a
// folder a repository runs its hooks from by core.hooksPath (hooks, when
// not nil, finds them), and any symlink it makes inside a .git folder
// (one could stand in for a folder of hooks or of a module). What it
// removes runs nothing: a delete or rmdir lists none.
func (c Change) GitRuns(hooks *HookDirs) []string {
	if c.Op == "delete" || c.Op == "rmdir" {
		return nil
	}
	var out []string
	for i, p := range slices.Concat([]string{c.Path}, c.Inside, c.Links) {
		if i == 0 && c.asBefore() {
			continue
		}
		if (GitRuns(p) || hooks.runs(p) || hooks.inGitDir(p)) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if c.Type == "symlink" && len(out) == 0 && slices.Contains(strings.Split(c.Path, "/"), ".git") {
		out = append(out, c.Path)
	}
	return out
}

// HookDirs finds, and remembers, what of the worktree the repositories
// of a source run commands from by their config: the folder
// core.hooksPath names (husky's .husky/_, a .githooks folder), where a
// change is an ordinary file change but git runs it at the next commit,
// merge or checkout, and the files [include] and [includeIf] take more
// config from. Only the repository's own .git/config is read (not the
// system's or a user's, nor what an included file includes in turn).
type HookDirs struct {
	lower *mounts.Root
	upper *mounts.Root        // a layer's own files, or nil
	layer *Layer              // the layer, or nil
	dirs  map[string]bool     // folder → a git directory (isGitDir)
	top   map[string]string   // folder → top of the worktree it is in
	hooks map[string][]string // worktree top → its hooks folders and included config files
}

// NewHookDirs finds hook folders in the backing folder lower.
func NewHookDirs(lower *mounts.Root) *HookDirs {
	return &HookDirs{lower: lower, top: map[string]string{}, hooks: map[string][]string{}}
}

// HookDirs finds hook folders in the backing folder lower and in the
// layer's own copies: a held config that names another folder names
// one too, though it is itself marked (GitRuns).
func (l *Layer) HookDirs(lower *mounts.Root) *HookDirs {
	h := NewHookDirs(lower)
	h.upper, h.layer = l.up, l
	return h
}

// gitDirNames are the names in a git directory that git reads commands
// from (config, config.worktree, commondir, hooks/) and, from the fifth
// on, those that make a folder one (HEAD, objects, refs).
var gitDirNames = []string{"config", "config.worktree", "commondir", "hooks", "HEAD", "objects", "refs"}

// inGitDir reports whether p is one of gitDirNames, or below hooks/ (but
// a .sample), in a folder that is a git directory in the tree the change
// lands in: a bare repository (`repo.git/config`), or a folder the
// change makes one. Git takes any folder holding HEAD, objects/ and
// refs/ for a repository when it searches upward from where it runs,
// and reads its config (with core.worktree, core.fsmonitor runs at a
// plain git status); GitRuns finds a .git folder's by name only, so an
// agent could make an existing folder of the owner's a repository with
// a config of its own, and approve --all landed it (found by a
// red-team pass).
func (h *HookDirs) inGitDir(p string) bool {
	if h == nil || h.lower == nil {
		return false
	}
	segs := strings.Split(p, "/")
	last := len(segs) - 1
	if dir := strings.Join(segs[:last], "/"); slices.Contains(gitDirNames, segs[last]) && h.isGitDir(dir, true) {
		// HEAD, objects and refs run nothing in a repository that is one
		// already (a commit moves HEAD): only where they make one.
		return !slices.Contains(gitDirNames[4:], segs[last]) || !h.isGitDir(dir, false)
	}
	if strings.HasSuffix(segs[last], ".sample") {
		return false
	}
	for i := last - 1; i >= 0; i-- {
		if segs[i] == "hooks" && h.isGitDir(strings.Join(segs[:i], "/"), true) {
			return true
		}
	}
	return false
}

// isGitDir reports whether dir holds HEAD, objects/ and refs/ (git's
// is_git_directory): as the principal sees it (held), or in the backing
// folder.
func (h *HookDirs) isGitDir(dir string, held bool) bool {
	key := dir
	if held {
		key += "\x00held"
	}
	if v, ok := h.dirs[key]; ok {
		return v
	}
	stat := func(rel string) (unix.Stat_t, error) {
		if held && h.layer != nil {
			st, _, err := h.layer.Lstat(h.lower, rel)
			return st, err
		}
		return h.lower.Lstat(rel)
	}
	v := false
	if st, err := stat(join(dir, "HEAD")); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		o, oerr := stat(join(dir, "objects"))
		r, rerr := stat(join(dir, "refs"))
		v = oerr == nil && rerr == nil && o.Mode&unix.S_IFMT == unix.S_IFDIR && r.Mode&unix.S_IFMT == unix.S_IFDIR
	}
	if h.dirs == nil {
		h.dirs = map[string]bool{}
	}
	h.dirs[key] = v
	return v
}

// runs reports whether p is a hooks folder of its repository or in
// one, or a file its config includes.
func (h *HookDirs) runs(p string) bool {
	if h == nil || h.lower == nil {
		return false
	}
	top, ok := h.topOf(path.Dir(p))
	if !ok {
		return false
	}
	names, ok := h.hooks[top]
	if !ok {
		for _, r := range []*mounts.Root{h.lower, h.upper} {
			names = append(names, configRuns(r, h.lower.Path(), top)...)
		}
		h.hooks[top] = names
	}
	return slices.ContainsFunc(names, func(n string) bool { return p == n || strings.HasPrefix(p, n+"/") })
}

// topOf finds the nearest folder at or above dir holding a .git folder.
func (h *HookDirs) topOf(dir string) (string, bool) {
	const none = "\x00"
	t, ok := h.top[dir]
	if !ok {
		t = none
		if st, err := h.lower.Lstat(path.Join(dir, ".git")); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			t = dir
		} else if dir != "." {
			if up, found := h.topOf(path.Dir(dir)); found {
				t = up
			}
		}
		h.top[dir] = t
	}
	return t, t != none
}

// configRuns reads the config of the repository at top in r and
// returns what of the source it names that git runs commands from: the
// folder core.hooksPath names, and the files its [include] and
// [includeIf] sections take more config from (each could set
// core.fsmonitor, say), relative to the source. A path outside the
// source is left out; an absolute one counts when it is inside base,
// the backing folder.
func configRuns(r *mounts.Root, base, top string) []string {
	if r == nil {
		return nil
	}
	fd, err := r.Open(path.Join(top, ".git", "config"), unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), "config")
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() > 1<<20 {
		return nil
	}
	cfg := formatcfg.New()
	if formatcfg.NewDecoder(f).Decode(cfg) != nil {
		return nil
	}
	var hooks string // the last one git reads, in any [core] section
	var includes []string
	for _, sec := range cfg.Sections {
		switch {
		case sec.IsName("core"):
			if v := sec.Options.Get("hooksPath"); v != "" {
				hooks = v
			}
		case sec.IsName("include"):
			includes = append(includes, sec.Options.GetAll("path")...)
		case sec.IsName("includeIf"):
			for _, ss := range sec.Subsections {
				includes = append(includes, ss.Options.GetAll("path")...)
			}
		}
	}
	var out []string
	in := func(p, rel string) {
		switch {
		case p == "" || strings.HasPrefix(p, "~"):
			return
		case path.IsAbs(p):
			if p != base && !strings.HasPrefix(p, base+"/") {
				return
			}
			p = strings.TrimPrefix(strings.TrimPrefix(p, base), "/")
		default:
			p = path.Join(rel, p)
		}
		if p = path.Clean(p); p != "." && p != ".." && !strings.HasPrefix(p, "../") {
			out = append(out, p)
		}
	}
	in(hooks, top) // relative to the worktree
	for _, p := range includes {
		in(p, path.Join(top, ".git")) // relative to the config file
	}
	return out
}
