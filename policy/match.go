package policy

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
)

// maxTrieDepth bounds the literal-prefix index; deeper literal segments are
// left to the matcher.
const maxTrieDepth = 32

// matchKind selects a matcher. Most rules are one of the simple shapes, which
// are matched without doublestar (≈100 ns a call) on the decision path.
type matchKind uint8

const (
	mGlob     matchKind = iota // anything else: doublestar.Match
	mLiteral                   // "a/b": that path only
	mTree                      // "a/b/**" or "**": the folder and everything below
	mTreeName                  // "a/**/<seg>" or "**/<seg>": a name anywhere below a
)

// segKind is how mTreeName matches the last segment.
type segKind uint8

const (
	sGlob   segKind = iota // doublestar.Match(seg, last)
	sExact                 // "name"
	sSuffix                // "*.ext"
	sPrefix                // "name*"
	sAny                   // "*"
)

type matcher struct {
	kind matchKind
	base string // mLiteral: the path; mTree/mTreeName: the folder ("" = source root)
	seg  string // mTreeName: the segment pattern
	sk   segKind
	lit  string // sExact/sSuffix/sPrefix literal
}

// maxAlts bounds brace expansion; a pattern with more alternatives is
// matched by doublestar as a whole.
const maxAlts = 64

// alt is one brace-expanded alternative of a rule's path pattern. Expanding
// "{src,docs}/**" into "src/**" and "docs/**" lets both hang on the literal
// prefix index and use the fast matchers (doublestar allocates on braces).
type alt struct {
	pat     string
	m       matcher
	lit     []string // literal leading segments (all of them when the pattern has no meta)
	literal bool     // the pattern has no meta at all
	litDir  string   // the folder every match lies in or below (literal segments, minus the name for a literal pattern)
	// root: the alternative matches the source root, which only a rule
	// whose whole pattern is "" or "**" does. An empty alternative of a
	// brace ("{,docs}", "{,{,}}") does not: FuzzRule found Decide taking
	// it for the root where the reference does not.
	root bool
}

// compilePattern parses a rule uri into slug pattern, path pattern and matchers.
func (c *crule) compilePattern(uri string) error {
	i := strings.Index(uri, "://")
	if i < 0 {
		return fmt.Errorf("uri %q: want <slug>://<path glob>", uri)
	}
	slug, pat := uri[:i], uri[i+3:]
	if !utf8.ValidString(uri) {
		// doublestar takes every invalid byte for U+FFFD, so "\xaf" would
		// match "\x80" when matched as a glob and not as a literal (found
		// by FuzzRule). A config file cannot write such a uri anyway.
		return fmt.Errorf("uri %q is not valid UTF-8", uri)
	}
	switch {
	case hasMeta(slug):
		if !doublestar.ValidatePattern(slug) || strings.Contains(slug, "/") {
			return fmt.Errorf("uri %q: bad slug pattern %q", uri, slug)
		}
		c.slugGlob = true
	case !validSlug(slug):
		return fmt.Errorf("uri %q: source slug %q must match [a-z0-9][a-z0-9._-]*", uri, slug)
	}
	if strings.HasPrefix(pat, "/") {
		return fmt.Errorf("uri %q: path must not start with a slash", uri)
	}
	if strings.HasSuffix(pat, "/") {
		pat += "**" // "x/" means the folder x and everything below it
	}
	if !doublestar.ValidatePattern(pat) {
		return fmt.Errorf("uri %q: bad glob %q", uri, pat)
	}
	if !validPatternSegs(pat) {
		return fmt.Errorf("uri %q: path must not contain empty, \".\" or \"..\" segments", uri)
	}
	for _, a := range expandBraces(pat) {
		if !validPatternSegs(a) {
			continue // e.g. "{a,}/x" gives "/x", which no valid path matches
		}
		ca := compileAlt(a)
		ca.root = pat == "" || pat == "**"
		c.alts = append(c.alts, ca)
	}
	if len(c.alts) == 0 {
		return fmt.Errorf("uri %q: no alternative of %q can match a valid path", uri, pat)
	}
	c.slugPat, c.pat = slug, pat
	for _, seg := range strings.Split(pat, "/") {
		c.namesGit = c.namesGit || seg == ".git"
	}
	return nil
}

// validPatternSegs rejects empty, "." and ".." segments (the empty pattern,
// the source root, is fine).
func validPatternSegs(pat string) bool {
	if pat == "" {
		return true
	}
	for _, seg := range strings.Split(pat, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// expandBraces expands "{a,b}" alternatives (nested too). It gives up, and
// returns the pattern unchanged, on escapes or past maxAlts results.
func expandBraces(pat string) []string {
	if strings.Contains(pat, `\`) {
		return []string{pat}
	}
	out := []string{pat}
	for done := false; !done; {
		done = true
		var next []string
		for _, p := range out {
			open := strings.IndexByte(p, '{')
			if open < 0 {
				next = append(next, p)
				continue
			}
			done = false
			depth, start, close := 0, open+1, -1
			var opts []string
			for i := open; i < len(p) && close < 0; i++ {
				switch p[i] {
				case '{':
					depth++
				case '}':
					depth--
					if depth == 0 {
						opts = append(opts, p[start:i])
						close = i
					}
				case ',':
					if depth == 1 {
						opts = append(opts, p[start:i])
						start = i + 1
					}
				}
			}
			if close < 0 {
				return []string{pat}
			}
			for _, o := range opts {
				next = append(next, p[:open]+o+p[close+1:])
			}
		}
		if len(next) > maxAlts {
			return []string{pat}
		}
		out = next
	}
	return out
}

func compileAlt(pat string) alt {
	a := alt{pat: pat, literal: !hasMeta(pat)}
	var segs []string
	if pat != "" {
		segs = strings.Split(pat, "/")
	}
	for _, seg := range segs {
		if hasMeta(seg) {
			break
		}
		a.lit = append(a.lit, seg)
	}
	a.m = compileMatcher(pat, segs, len(a.lit))
	dir := a.lit
	if a.literal && len(dir) > 0 {
		dir = dir[:len(dir)-1]
	}
	a.litDir = strings.Join(dir, "/")
	return a
}

func compileMatcher(pat string, segs []string, nlit int) matcher {
	base := strings.Join(segs[:nlit], "/")
	rest := segs[nlit:]
	switch {
	case len(rest) == 0:
		return matcher{kind: mLiteral, base: pat}
	case len(rest) == 1 && rest[0] == "**":
		return matcher{kind: mTree, base: base}
	case len(rest) == 2 && rest[0] == "**" && rest[1] != "**" && !strings.ContainsAny(rest[1], "{\\"):
		m := matcher{kind: mTreeName, base: base, seg: rest[1]}
		s := rest[1]
		switch {
		case s == "*":
			m.sk = sAny
		case !hasMeta(s):
			m.sk, m.lit = sExact, s
		case s[0] == '*' && !hasMeta(s[1:]):
			m.sk, m.lit = sSuffix, s[1:]
		case s[len(s)-1] == '*' && !hasMeta(s[:len(s)-1]):
			m.sk, m.lit = sPrefix, s[:len(s)-1]
		}
		return m
	}
	return matcher{kind: mGlob}
}

// match reports whether any alternative of the rule matches path (tests).
func (c *crule) match(path string) bool {
	for i := range c.alts {
		if c.alts[i].match(path) {
			return true
		}
	}
	return false
}

// match reports whether the pattern matches path (already valid).
// The source root "" is matched only by the empty pattern and by "**"
// (see root).
func (a *alt) match(path string) bool {
	if path == "" {
		return a.root
	}
	switch a.m.kind {
	case mLiteral:
		return path == a.m.base
	case mTree:
		return under(path, a.m.base, true)
	case mTreeName:
		if !under(path, a.m.base, false) {
			return false
		}
		last := path[strings.LastIndexByte(path, '/')+1:]
		switch a.m.sk {
		case sAny:
			return true
		case sExact:
			return last == a.m.lit
		case sSuffix:
			return strings.HasSuffix(last, a.m.lit)
		case sPrefix:
			return strings.HasPrefix(last, a.m.lit)
		}
		ok, _ := doublestar.Match(a.m.seg, last)
		return ok
	}
	ok, _ := doublestar.Match(a.pat, path)
	return ok
}

// under reports whether path lies below dir ("" is the source root), or is
// dir itself when self is set.
func under(path, dir string, self bool) bool {
	if dir == "" {
		return self || path != ""
	}
	if len(path) == len(dir) {
		return self && path == dir
	}
	return len(path) > len(dir) && path[len(dir)] == '/' && path[:len(dir)] == dir
}

// node is one level of the literal-prefix trie. A rule alternative hangs on
// the node of its literal leading segments: it can only match paths that
// start with them.
type node struct {
	kids     []kid            // children while there are few: a scan beats hashing
	children map[string]*node // all children, once there are more than maxKids
	byCap    [3][]entry       // alternatives of rules mentioning each cap, ascending by rule
	// denyRead has the bit of every principal (of the first 64) that a
	// read-denying entry here applies to; denyAny is set when there is any
	// such entry. Decide skips ancestors no deny can reach.
	denyRead uint64
	denyAny  bool
	// personal is set when a read-mentioning entry here is for some
	// principals only (not "*"): Uniform must then decide per principal.
	personal bool
}

const maxKids = 8

type kid struct {
	name string
	n    *node
}

// child returns the child for one path segment, or nil.
func (n *node) child(seg string) *node {
	if n.children != nil {
		return n.children[seg]
	}
	for i := range n.kids {
		if n.kids[i].name == seg {
			return n.kids[i].n
		}
	}
	return nil
}

func (n *node) addChild(seg string) *node {
	if c := n.child(seg); c != nil {
		return c
	}
	c := &node{}
	n.kids = append(n.kids, kid{seg, c})
	if len(n.kids) > maxKids {
		if n.children == nil {
			n.children = map[string]*node{}
			for _, k := range n.kids {
				n.children[k.name] = k.n
			}
		}
		n.children[seg] = c
	}
	return c
}

// entry names one alternative of one rule. who repeats the rule's principal
// bitset for the first 64 principals so the scan needn't touch the rule.
type entry struct {
	who  uint64
	a    *alt
	rule int32
}

// index holds a source's rules.
type index struct {
	root      *node
	all       []int32 // every rule that may apply, ascending
	slugCheck bool    // fallback index: check each rule's slug glob at decision time
	// personalAllow: some rule allows read for some principals only, so
	// traversal (see Decide) may differ between principals anywhere.
	personalAllow bool
}

func (ix *index) add(c *crule) {
	for ai := range c.alts {
		n := ix.root
		for d, seg := range c.alts[ai].lit {
			if d == maxTrieDepth {
				break
			}
			n = n.addChild(seg)
		}
		for ci, cp := range allCaps {
			if (c.allow|c.deny|c.review)&cp != 0 {
				n.byCap[ci] = append(n.byCap[ci], entry{who: c.who[0], a: &c.alts[ai], rule: int32(c.idx)})
			}
			if (c.allow|c.deny)&Read != 0 && !c.whoAll {
				n.personal = true
			}
			if c.deny&Read != 0 {
				n.denyRead |= c.who[0]
				n.denyAny = true
			}
		}
	}
	ix.all = append(ix.all, int32(c.idx))
	if c.allow&Read != 0 && !c.whoAll {
		ix.personalAllow = true
	}
}
