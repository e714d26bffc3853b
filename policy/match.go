package policy

import (
	"fmt"
	"strings"

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

// compilePattern parses a rule uri into slug pattern, path pattern and matcher.
func (c *crule) compilePattern(uri string) error {
	i := strings.Index(uri, "://")
	if i < 0 {
		return fmt.Errorf("uri %q: want <slug>://<path glob>", uri)
	}
	slug, pat := uri[:i], uri[i+3:]
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
	segs := strings.Split(pat, "/")
	if pat == "" {
		segs = nil
	}
	for _, seg := range segs {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("uri %q: path must not contain empty, \".\" or \"..\" segments", uri)
		}
	}
	if !doublestar.ValidatePattern(pat) {
		return fmt.Errorf("uri %q: bad glob %q", uri, pat)
	}
	c.slugPat, c.pat = slug, pat
	c.literal = !hasMeta(pat)
	for _, seg := range segs {
		if hasMeta(seg) {
			break
		}
		c.lit = append(c.lit, seg)
	}
	c.m = compileMatcher(pat, segs, len(c.lit))
	dir := c.lit
	if c.literal && len(dir) > 0 {
		dir = dir[:len(dir)-1]
	}
	c.litDir = strings.Join(dir, "/")
	return nil
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

// match reports whether the rule's path pattern matches path (already valid).
// The source root "" is matched only by the empty pattern and by "**".
func (c *crule) match(path string) bool {
	if path == "" {
		return c.pat == "" || (c.m.kind == mTree && c.m.base == "")
	}
	switch c.m.kind {
	case mLiteral:
		return path == c.m.base
	case mTree:
		return under(path, c.m.base, true)
	case mTreeName:
		if !under(path, c.m.base, false) {
			return false
		}
		last := path[strings.LastIndexByte(path, '/')+1:]
		switch c.m.sk {
		case sAny:
			return true
		case sExact:
			return last == c.m.lit
		case sSuffix:
			return strings.HasSuffix(last, c.m.lit)
		case sPrefix:
			return strings.HasPrefix(last, c.m.lit)
		}
		ok, _ := doublestar.Match(c.m.seg, last)
		return ok
	}
	ok, _ := doublestar.Match(c.pat, path)
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

// node is one level of the literal-prefix trie. A rule hangs on the node of
// its literal leading segments: it can only match paths that start with them.
type node struct {
	children map[string]*node
	byCap    [3][]int32 // rule indices mentioning each cap, ascending
}

// index holds a source's rules.
type index struct {
	root      *node
	all       []int32 // every rule that may apply, ascending
	slugCheck bool    // fallback index: check each rule's slug glob at decision time
}

func (ix *index) add(c *crule) {
	n := ix.root
	for d, seg := range c.lit {
		if d == maxTrieDepth {
			break
		}
		if n.children == nil {
			n.children = map[string]*node{}
		}
		next := n.children[seg]
		if next == nil {
			next = &node{}
			n.children[seg] = next
		}
		n = next
	}
	for ci, cp := range allCaps {
		if (c.allow|c.deny)&cp != 0 {
			n.byCap[ci] = append(n.byCap[ci], int32(c.idx))
		}
	}
	ix.all = append(ix.all, int32(c.idx))
}
