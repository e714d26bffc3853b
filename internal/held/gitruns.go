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
		// What a folder carries inside it is marked by name alone; the
		// unit's own file when it can be run (or is a symlink).
		hook := hookNamed(p) && (i != 0 || c.Type == "symlink" || c.Type == "file" && c.Mode&0o111 != 0)
		if (GitRuns(p) || hook || hooks.runs(p) || hooks.inGitDir(p)) && !slices.Contains(out, p) {
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
	dirs  map[string]bool     // path of a name in a folder → there (has)
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
	if dir := strings.Join(segs[:last], "/"); slices.Contains(gitDirNames[4:], segs[last]) {
		// HEAD, objects and refs run nothing in a repository that is one
		// already (a commit moves HEAD): only where they make one.
		return h.isGitDir(dir, true) && !h.isGitDir(dir, false)
	} else if slices.Contains(gitDirNames, segs[last]) {
		return h.gitish(dir, true)
	}
	if strings.HasSuffix(segs[last], ".sample") {
		return false
	}
	for i := last - 1; i >= 0; i-- {
		if segs[i] == "hooks" && h.gitish(strings.Join(segs[:i], "/"), true) {
			return true
		}
	}
	return false
}

// isGitDir reports whether dir is a git directory as git's
// is_git_directory decides, as the principal sees it (held) or in the
// backing folder: it holds HEAD, and objects and refs, each of any kind
// (git asks access(X_OK) of them, which a symlink or an executable file
// passes as well as a folder), or a commondir naming a folder that has
// those. Before, only folders counted for objects and refs, so an agent
// made a folder of root's a repository with `ln -s . objects; ln -s .
// refs` (or two empty executable files), a HEAD and a config, none of
// them marked, and root's next git status there ran its core.fsmonitor
// (found by a red-team pass).
func (h *HookDirs) isGitDir(dir string, held bool) bool {
	return h.has(dir, "HEAD", held) && (h.has(dir, "objects", held) && h.has(dir, "refs", held) || h.has(dir, "commondir", held))
}

// gitish reports whether dir may be a git directory, or the common
// directory one names by its commondir (which needs no HEAD): it holds
// HEAD, or objects and refs. Its config and hooks are then marked.
func (h *HookDirs) gitish(dir string, held bool) bool {
	return h.has(dir, "HEAD", held) || h.has(dir, "objects", held) && h.has(dir, "refs", held)
}

// has reports whether dir holds name, of any kind but a folder for HEAD,
// as the principal sees it (held) or in the backing folder.
func (h *HookDirs) has(dir, name string, held bool) bool {
	key := join(dir, name)
	if held {
		key += "\x00held"
	}
	if v, ok := h.dirs[key]; ok {
		return v
	}
	var st unix.Stat_t
	var err error
	if held && h.layer != nil {
		st, _, err = h.layer.Lstat(h.lower, join(dir, name))
	} else {
		st, err = h.lower.Lstat(join(dir, name))
	}
	v := err == nil && (name != "HEAD" || st.Mode&unix.S_IFMT != unix.S_IFDIR)
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
// folders core.hooksPath names, and the files its [include] and
// [includeIf] sections take more config from (each could set
// core.fsmonitor, say), relative to the source. The included files are
// read too, for their own core.hooksPath and includes (up to
// maxConfigs files in all): before, a hooksPath set in a file the
// config includes (include.path = ../.gitconfig) was not followed, and
// an agent's held hook there landed unmarked and ran at root's next
// checkout (found by a red-team pass). Every hooksPath found counts,
// not only the one git would use last. A path outside the source is
// left out (a hook-named file is marked wherever it is: hookNamed); an
// absolute one counts when it is inside base, the backing folder.
func configRuns(r *mounts.Root, base, top string) []string {
	if r == nil {
		return nil
	}
	const maxConfigs = 16
	var out []string
	in := func(p, rel string) string {
		switch {
		case p == "" || strings.HasPrefix(p, "~"):
			return ""
		case path.IsAbs(p):
			if p != base && !strings.HasPrefix(p, base+"/") {
				return ""
			}
			p = strings.TrimPrefix(strings.TrimPrefix(p, base), "/")
		default:
			p = path.Join(rel, p)
		}
		if p = path.Clean(p); p != "." && p != ".." && !strings.HasPrefix(p, "../") {
			return p
		}
		return ""
	}
	queue := []string{path.Join(top, ".git", "config")}
	seen := map[string]bool{}
	for len(queue) > 0 && len(seen) < maxConfigs {
		file := queue[0]
		queue = queue[1:]
		if seen[file] {
			continue
		}
		seen[file] = true
		hooks, includes := readConfig(r, file)
		for _, h := range hooks {
			if p := in(h, top); p != "" { // relative to the worktree
				out = append(out, p)
			}
		}
		for _, inc := range includes {
			if p := in(inc, path.Dir(file)); p != "" { // relative to the config file
				out = append(out, p)
				queue = append(queue, p)
			}
		}
	}
	return out
}

// readConfig reads the git config file at rel in r: the core.hooksPath
// values of its [core] sections, and the paths its [include] and
// [includeIf] sections name.
func readConfig(r *mounts.Root, rel string) (hooks, includes []string) {
	fd, err := r.Open(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil
	}
	f := os.NewFile(uintptr(fd), "config")
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() > 1<<20 {
		return nil, nil
	}
	cfg := formatcfg.New()
	if formatcfg.NewDecoder(f).Decode(cfg) != nil {
		return nil, nil
	}
	for _, sec := range cfg.Sections {
		switch {
		case sec.IsName("core"):
			hooks = append(hooks, sec.Options.GetAll("hooksPath")...)
		case sec.IsName("include"):
			includes = append(includes, sec.Options.GetAll("path")...)
		case sec.IsName("includeIf"):
			for _, ss := range sec.Subsections {
				includes = append(includes, ss.Options.GetAll("path")...)
			}
		}
	}
	return hooks, includes
}

// hookNames are the hooks git runs (githooks(5)), by name.
var hookNames = []string{
	"applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
	"prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout", "post-merge",
	"pre-push", "pre-receive", "update", "proc-receive", "post-receive", "post-update",
	"reference-transaction", "push-to-checkout", "pre-auto-gc", "post-rewrite", "sendemail-validate",
	"fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist", "p4-post-changelist",
	"p4-pre-submit", "post-index-change",
}

// hookNamed reports whether the file at p is named as a git hook. A
// repository may take its hooks from any folder, of this source or
// another (core.hooksPath set in a config the layer cannot see, or to
// an absolute path in another source's backing folder), so a held
// executable file or a symlink named as a hook is marked wherever it is:
// approving it by name costs a reviewer one step, and landing it with
// --all could make root's next commit or checkout run it.
func hookNamed(p string) bool {
	return slices.Contains(hookNames, path.Base(p))
}
