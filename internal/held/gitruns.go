package held

import (
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// GitRuns reports whether rel (a path in a source) is one git reads
// commands from, or one that makes a folder a repository whose own
// configuration git then reads:
//
//   - a file, folder or symlink named .git: a new repository, or a
//     "gitdir:" pointer to one anywhere;
//   - a repository's config and config.worktree (core.fsmonitor runs a
//     command at a plain git status; core.hooksPath, core.pager,
//     core.sshCommand, filter and diff drivers, aliases…);
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
	if (last == "config" || last == "config.worktree") && (len(rest) == 1 || nested) {
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

// GitRuns lists the paths c makes that GitRuns reports, and any symlink
// it makes inside a .git folder (one could stand in for a folder of
// hooks or of a module). What it removes runs nothing: a delete or
// rmdir lists none.
func (c Change) GitRuns() []string {
	if c.Op == "delete" || c.Op == "rmdir" {
		return nil
	}
	var out []string
	for i, p := range slices.Concat([]string{c.Path}, c.Inside, c.Links) {
		if i == 0 && c.asBefore() {
			continue
		}
		if GitRuns(p) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if c.Type == "symlink" && len(out) == 0 && slices.Contains(strings.Split(c.Path, "/"), ".git") {
		out = append(out, c.Path)
	}
	return out
}
