package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Finding is one problem Lint reports, at the file:line of the rule or
// source concerned.
type Finding struct {
	File string
	Line int
	Msg  string
}

// String renders "file:line: msg".
func (f Finding) String() string { return locate(f.File, f.Line, "policy") + ": " + f.Msg }

// Lint reports rules that cannot do what they seem to (`neuralisfs policy
// check`): a rule naming an unknown source (it can never match), a slug glob
// matching no source, a who or visible_to entry naming an unknown principal
// or a role nobody holds, a rule fully overridden by a later one (same uri,
// who covering it, every capability it mentions), and a deny undone by a
// later allow whose uri covers it for everyone the deny names. Unknown
// sources can only be found when the Config listed sources. It also
// reports a principal whose writes some rule holds for review but who
// may write, directly, where git reads commands from (lintGitRuns).
func (s *Set) Lint() []Finding {
	var out []Finding
	add := func(file string, line int, format string, args ...any) {
		out = append(out, Finding{File: file, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	for _, slug := range s.slugs() {
		src := s.sources[slug]
		for _, w := range src.VisibleTo {
			if msg := s.unknownWho(w); msg != "" {
				add(src.File, src.Line, "source %q visible_to: %s", slug, msg)
			}
		}
	}
	for i := range s.crules {
		c := &s.crules[i]
		r := c.r
		if s.strict {
			if !c.slugGlob {
				if _, ok := s.sources[c.slugPat]; !ok {
					add(r.File, r.Line, "rule %s names unknown source %q and can never match", r.URI, c.slugPat)
				}
			} else if !slices.ContainsFunc(s.slugs(), func(slug string) bool { ok, _ := doublestar.Match(c.slugPat, slug); return ok }) {
				add(r.File, r.Line, "rule %s: slug pattern %q matches no source, so the rule can never match", r.URI, c.slugPat)
			}
		}
		for _, w := range r.Who {
			if msg := s.unknownWho(w); msg != "" {
				add(r.File, r.Line, "rule %s who: %s", r.URI, msg)
			}
		}
		mentions := c.allow | c.deny | c.review
		shadowed := false
		for j := i + 1; j < len(s.crules) && !shadowed; j++ {
			l := &s.crules[j]
			if l.slugPat == c.slugPat && l.pat == c.pat && subset(c.who, l.who) && (l.allow|l.deny|l.review)&mentions == mentions {
				add(r.File, r.Line, "rule %s is fully overridden by the later rule at %s", r.URI, l.r.Where())
				shadowed = true
			}
		}
		if shadowed || c.deny == 0 {
			continue
		}
		for j := i + 1; j < len(s.crules); j++ {
			l := &s.crules[j]
			undone := c.deny & l.allow
			if undone == 0 || !subset(c.who, l.who) || !l.covers(c) {
				continue
			}
			add(r.File, r.Line, "deny %v by rule %s is undone by the broader allow at %s (%s)", undone, r.URI, l.r.Where(), l.r.URI)
			break
		}
	}
	return append(out, s.lintGitRuns()...)
}

// gitProbes are paths where git reads commands from (held.GitRuns), for
// a repository at a source's top and for one a folder down.
var gitProbes = []string{".git", ".git/config", ".git/config.worktree", ".git/commondir", ".git/hooks/pre-commit",
	".git/modules/m/config", ".git/modules/m/hooks/pre-commit", ".git/worktrees/w/commondir",
	"x/.git", "x/.git/config", "x/.git/commondir", "x/.git/hooks/pre-commit"}

// lintGitRuns reports, for each principal whose writes some rule holds
// for review, the sources where it may still write directly what git
// reads commands from: a repository's config, config.worktree and
// commondir (core.fsmonitor runs at a plain git status; commondir names
// the folder whose config git reads), its hooks, a new .git, and the
// same of its submodules and worktrees. Review was asked for that
// principal, and such a write would let it run commands as whoever next
// runs git there without any review.
func (s *Set) lintGitRuns() []Finding {
	var out []Finding
	for pi, p := range s.principals {
		if p.Name == Owner || !slices.ContainsFunc(s.crules, func(c crule) bool { return c.review != 0 && c.applies(pi) }) {
			continue
		}
		for _, slug := range s.slugs() {
			var direct []string
			for _, rel := range gitProbes {
				if d := s.Decide(p, slug, rel, Write); d.Allowed && !d.Held {
					direct = append(direct, slug+"://"+rel)
				}
			}
			if len(direct) > 0 {
				out = append(out, Finding{File: p.File, Line: p.Line, Msg: fmt.Sprintf(
					"principal %q has writes held for review, but may write %s directly, and git runs commands from a repository's config and hooks as whoever next runs git there: hold or deny its writes on *://**/.git/**/{config,config.worktree,commondir}, *://**/.git/**/hooks/** and *://**/.git",
					p.Name, strings.Join(direct, ", "))})
			}
		}
	}
	return out
}

// unknownWho explains why a who entry names nobody, or returns "".
func (s *Set) unknownWho(w string) string {
	switch {
	case w == "*":
		return ""
	case strings.HasPrefix(w, "role:"):
		role := w[len("role:"):]
		for _, p := range s.principals {
			if slices.Contains(p.Roles, role) {
				return ""
			}
		}
		return fmt.Sprintf("no principal has role %q", role)
	}
	if _, ok := s.byName[w]; ok {
		return ""
	}
	return fmt.Sprintf("unknown principal %q", w)
}

// subset reports whether every bit of a is set in b.
func subset(a, b []uint64) bool {
	for i := range a {
		if a[i]&^b[i] != 0 {
			return false
		}
	}
	return true
}

// covers reports whether rule l matches every uri rule c can match (statically:
// l is "<dir>/**" over the same slug with every alternative of c inside <dir>).
func (l *crule) covers(c *crule) bool {
	if len(l.alts) != 1 || l.alts[0].m.kind != mTree {
		return false
	}
	base := l.alts[0].m.base
	if l.slugPat != c.slugPat {
		if c.slugGlob || !l.slugGlob {
			return false
		}
		if ok, _ := doublestar.Match(l.slugPat, c.slugPat); !ok {
			return false
		}
	}
	for i := range c.alts {
		a := &c.alts[i]
		dir := a.litDir
		if a.literal {
			dir = a.pat
		}
		if !under(dir, base, true) {
			return false
		}
	}
	return true
}
