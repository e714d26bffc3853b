package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/bmatcuk/doublestar/v4"
)

// refMatch is the reference for crule.match: doublestar, except at the root.
func refMatch(pat, path string) bool {
	if path == "" {
		return pat == "" || pat == "**"
	}
	ok, _ := doublestar.Match(pat, path)
	return ok
}

// refDecide is Decide written the slow, obvious way: a linear scan over every
// rule with doublestar, no index, no shortcuts.
func refDecide(s *Set, p *Principal, slug, path string, c Cap) bool {
	src := s.source(slug)
	if src == nil || !validPath(path) || !bit(src.visible, p.idx) {
		return false
	}
	if c == Write && src.ReadOnly {
		return false
	}
	own := func(path string) (bool, int) {
		for i := len(s.crules) - 1; i >= 0; i-- {
			cr := &s.crules[i]
			if (cr.allow|cr.deny)&c == 0 || !refApplies(s, cr.r.Who, p) {
				continue
			}
			if ok, _ := doublestar.Match(cr.slugPat, slug); !ok {
				continue
			}
			if refMatch(cr.pat, path) {
				return cr.allow&c != 0, i
			}
		}
		return src.defAllow&c != 0, -1
	}
	visible := func(dir string) bool {
		ok, ri := own(dir)
		if ok {
			return true
		}
		for i := len(s.crules) - 1; i > ri; i-- {
			cr := &s.crules[i]
			if m, _ := doublestar.Match(cr.slugPat, slug); m && cr.allow&Read != 0 && refApplies(s, cr.r.Who, p) && cr.leadsInto(dir) {
				return true
			}
		}
		return false
	}
	// Git data: denied unless p reads everything in the source or a rule
	// naming .git decided.
	readsAll := func() bool {
		if src.defAllow&Read == 0 {
			return false
		}
		for i := range s.crules {
			cr := &s.crules[i]
			if m, _ := doublestar.Match(cr.slugPat, slug); m && cr.deny&Read != 0 && refApplies(s, cr.r.Who, p) {
				return false
			}
		}
		return true
	}
	namesGit := func(ri int) bool {
		return ri >= 0 && slices.Contains(strings.Split(s.crules[ri].pat, "/"), ".git")
	}
	gitData := strings.HasPrefix("/"+path+"/", "/.git/") || strings.Contains("/"+path+"/", "/.git/")
	if c != Read {
		ok, ri := own(path)
		return ok && !(gitData && !readsAll() && !namesGit(ri))
	}
	if c == Read && gitData && !(src.defAllow&Read != 0 && readsAll()) {
		ok, ri := own(path)
		if !ok {
			ri = -1
			for i := len(s.crules) - 1; i >= 0; i-- {
				cr := &s.crules[i]
				if m, _ := doublestar.Match(cr.slugPat, slug); m && cr.allow&Read != 0 && refApplies(s, cr.r.Who, p) && cr.leadsInto(path) {
					if i > ri {
						ri = i
					}
					break
				}
			}
		}
		if !namesGit(ri) {
			return false
		}
	}
	if !visible(path) {
		return false
	}
	if path == "" {
		return true
	}
	if !visible("") {
		return false
	}
	for i := range path {
		if path[i] == '/' && !visible(path[:i]) {
			return false
		}
	}
	return true
}

func refApplies(s *Set, who []string, p *Principal) bool {
	for _, w := range who {
		if w == "*" || w == p.Name {
			return true
		}
		if role, ok := strings.CutPrefix(w, "role:"); ok && slices.Contains(p.Roles, role) {
			return true
		}
	}
	return false
}

// TestDecideMatchesReference compares Decide with refDecide on random
// policies and paths.
func TestDecideMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	segs := []string{"a", "b", "secrets", ".env", "x.pem", "naïve", "ab", ".git", ".gitx"}
	pats := []string{"**", "a/**", "a/", "a/b", "**/*.pem", "**/.env", "a/*", "*/b/**", "{a,b}/**", "secrets/**",
		"a/**/b", "", "*", "b/a*", "a/[ab]/**", "ab/**/x.pem", ".git/**", "**/.git/**", "a/.git/"}
	whos := [][]string{{"*"}, {"agent"}, {"role:r"}, {"other"}, {"owner", "agent"}}
	for iter := 0; iter < 300; iter++ {
		cfg := Config{
			Principals: []Principal{{Name: "agent", UIDs: []uint32{1}, Roles: []string{"r"}}, {Name: "bot", UIDs: []uint32{2}, Roles: []string{"r"}}},
			Sources:    []Source{{Slug: "s"}, {Slug: "t", Default: "deny"}, {Slug: "u", ReadOnly: true, VisibleTo: []string{"role:r"}}},
		}
		if r.IntN(4) == 0 {
			cfg.Default = "deny"
		}
		for n := r.IntN(12); n > 0; n-- {
			slug := []string{"s", "t", "u", "*"}[r.IntN(4)]
			rule := Rule{URI: slug + "://" + pats[r.IntN(len(pats))], Who: whos[r.IntN(len(whos))], Line: n}
			for _, c := range allCaps {
				switch r.IntN(3) {
				case 1:
					rule.Allow = append(rule.Allow, c)
				case 2:
					rule.Deny = append(rule.Deny, c)
				}
			}
			if len(rule.Allow)+len(rule.Deny) == 0 {
				rule.Allow = []Cap{Read}
			}
			cfg.Rules = append(cfg.Rules, rule)
		}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for q := 0; q < 200; q++ {
			var parts []string
			for d := r.IntN(5); d > 0; d-- {
				parts = append(parts, segs[r.IntN(len(segs))])
			}
			path := strings.Join(parts, "/")
			slug := []string{"s", "t", "u"}[r.IntN(3)]
			p := s.principals[r.IntN(len(s.principals))]
			c := allCaps[r.IntN(3)]
			if got, want := s.Decide(p, slug, path, c).Allowed, refDecide(s, p, slug, path, c); got != want {
				var rules []string
				for _, r := range cfg.Rules {
					rules = append(rules, fmt.Sprintf("%s who=%v allow=%v deny=%v", r.URI, r.Who, r.Allow, r.Deny))
				}
				t.Fatalf("Decide(%s, %s://%s, %v) = %v; reference says %v\ndefault %q rules:\n%s",
					p.Name, slug, path, c, got, want, cfg.Default, strings.Join(rules, "\n"))
			}
		}
	}
}

// TestUniformMatchesReference checks Uniform against deciding for every
// principal, on random policies.
func TestUniformMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	segs := []string{"a", "b", "x.pem", ".env", ".git"}
	pats := []string{"**", "a/**", "a/b", "**/*.pem", "a/*", "*/b/**", "{a,b}/**", "", "*", "b/**/.env", "**/.git/**"}
	whos := [][]string{{"*"}, {"agent"}, {"role:r"}, {"other"}}
	for iter := 0; iter < 300; iter++ {
		cfg := Config{
			Principals: []Principal{{Name: "agent", UIDs: []uint32{1}, Roles: []string{"r"}}, {Name: "bot", UIDs: []uint32{2}}},
			Sources:    []Source{{Slug: "s"}, {Slug: "t", Default: "deny"}},
		}
		for n := r.IntN(6); n > 0; n-- {
			rule := Rule{URI: []string{"s", "t"}[r.IntN(2)] + "://" + pats[r.IntN(len(pats))], Who: whos[r.IntN(len(whos))]}
			if r.IntN(2) == 0 {
				rule.Allow = []Cap{Read}
			} else {
				rule.Deny = []Cap{Read}
			}
			cfg.Rules = append(cfg.Rules, rule)
		}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for q := 0; q < 50; q++ {
			var parts []string
			for d := r.IntN(4); d > 0; d-- {
				parts = append(parts, segs[r.IntN(len(segs))])
			}
			path, slug := strings.Join(parts, "/"), []string{"s", "t"}[r.IntN(2)]
			want := true
			first := s.Decide(s.principals[0], slug, path, Read).Allowed
			for _, p := range s.principals {
				want = want && s.Decide(p, slug, path, Read).Allowed == first
			}
			if got := s.Uniform(slug, path); got != want {
				t.Fatalf("Uniform(%s://%s) = %v; want %v; rules %+v", slug, path, got, want, cfg.Rules)
			}
		}
	}
}
