package gitfs

import (
	"context"
	"path/filepath"
	"strings"

	formatcfg "github.com/go-git/go-git/v5/plumbing/format/config"
)

// checkSubmodule returns the worktree column for a gitlink entry whose
// directory exists, as git status does by default: 'M' when the submodule's
// HEAD differs from the recorded commit or, unless its ignore setting says
// otherwise, when it has modified or untracked content (porcelain v1 does
// not distinguish these). A submodule that is not checked out is unchanged.
func (r *Repo) checkSubmodule(ctx context.Context, e *entry, abs string) byte {
	h, ok := submoduleHead(abs)
	if !ok {
		return ' '
	}
	ignore := r.submoduleIgnore(e.Name)
	if ignore == "all" {
		return ' '
	}
	if h != e.Hash {
		return 'M'
	}
	if ignore == "dirty" {
		return ' '
	}
	sub := r.submodule(e.Name)
	if sub == nil {
		return ' '
	}
	res, err := sub.statusResult(ctx, "")
	if err != nil {
		return ' '
	}
	if len(res.changes) > 0 || (ignore != "untracked" && len(res.untracked) > 0) {
		return 'M'
	}
	return ' '
}

// submodule returns the opened submodule at rel, opening it once.
func (r *Repo) submodule(rel string) *Repo {
	r.subMu.Lock()
	defer r.subMu.Unlock()
	if sub, ok := r.subs[rel]; ok {
		return sub
	}
	sub, err := Open(filepath.Join(r.worktree, filepath.FromSlash(rel)), r.opts)
	if err != nil {
		sub = nil
	}
	if r.subs == nil {
		r.subs = map[string]*Repo{}
	}
	r.subs[rel] = sub
	return sub
}

// invalidateSubmodules forwards Invalidate to opened submodules.
func (r *Repo) invalidateSubmodules(paths []string) {
	r.subMu.Lock()
	defer r.subMu.Unlock()
	for rel, sub := range r.subs {
		if sub == nil {
			continue
		}
		if len(paths) == 0 {
			sub.Invalidate()
			continue
		}
		for _, p := range paths {
			p = cleanRel(p)
			if p == rel {
				sub.Invalidate()
			} else if rest, ok := strings.CutPrefix(p, rel+"/"); ok {
				sub.Invalidate(rest)
			}
		}
	}
}

// submoduleIgnore returns the effective submodule.<name>.ignore for the
// submodule at path rel: .git/config over .gitmodules over
// diff.ignoreSubmodules; "" means none.
func (r *Repo) submoduleIgnore(rel string) string {
	name, ignore := rel, ""
	if gm, err := r.loadGitmodules(); err == nil && gm != nil {
		for _, s := range gm.Sections {
			if !s.IsName("submodule") {
				continue
			}
			for _, ss := range s.Subsections {
				if ss.Options.Get("path") == rel {
					name = ss.Name
					if v := ss.Options.Get("ignore"); v != "" {
						ignore = v
					}
				}
			}
		}
	}
	if v, ok := r.conf().get("submodule", name, "ignore"); ok {
		ignore = v
	}
	if ignore == "" {
		ignore, _ = r.conf().get("diff", "", "ignoresubmodules")
	}
	return strings.ToLower(strings.TrimSpace(ignore))
}

// loadGitmodules reads .gitmodules from the worktree as the reader sees
// it (nil when there is none), not following a symlink there, as git
// refuses a symlinked .gitmodules.
func (r *Repo) loadGitmodules() (*formatcfg.Config, error) {
	return decodeConfig(r.openWorktree(".gitmodules"))
}
