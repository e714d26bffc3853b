package policy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Errors callers branch on. Every error Check and CanRename return wraps
// ErrDenied; a write to a read-only source also wraps ErrReadOnly (EROFS),
// and a directory rename refused because it would carry contents across a
// rule boundary also wraps ErrCrossesBoundary (callers may answer EXDEV so
// that mv falls back to copy and delete, which is checked file by file).
var (
	ErrDenied          = errors.New("denied by policy")
	ErrReadOnly        = errors.New("read-only source")
	ErrCrossesBoundary = errors.New("would move contents across a policy boundary")
)

// Reasons a Decision gives. They are constants so deciding allocates nothing.
const (
	ReasonRule             = "rule"                 // Rule decided
	ReasonSourceDefault    = "source default"       // no rule matched; the source's default decided
	ReasonDefault          = "global default"       // no rule matched; the global default decided
	ReasonReadOnly         = "read-only source"     // write on a read_only source
	ReasonNotVisible       = "source not visible"   // the source's visible_to excludes the principal
	ReasonHidden           = "inside hidden folder" // an ancestor (Via) is read-denied; Rule hid it (nil: a default)
	ReasonTraversal        = "leads to allowed uri" // read-denied itself, but a later rule (Rule) allows read below it
	ReasonGitData          = "git data"             // a .git path, and the principal may not read everything in the source
	ReasonBadPath          = "invalid path"         // "."/".." segments, leading or trailing slash, empty segment, NUL
	ReasonUnknownSource    = "unknown source"
	ReasonUnknownPrincipal = "unknown principal"
	ReasonUnknownCap       = "unknown capability"
)

// Decision is the outcome of Decide for one capability.
type Decision struct {
	Allowed bool
	// Held says an allowed write is held for review: the rule that
	// decided names the principal in review, so the change is kept as
	// its pending change instead of reaching the backing file.
	Held     bool
	ReadOnly bool   // denied because the source is read-only (EROFS rather than EACCES)
	Rule     *Rule  // the deciding rule; nil when a default or a source setting decided
	Reason   string // one of the Reason constants
	Via      string // for ReasonHidden: the hidden ancestor's path ("" = the source root)
}

// Decide returns the decision for principal p exercising c on slug://path.
//
// For each capability the last rule (file order) that matches the uri,
// applies to p and mentions the capability decides; else the source's
// default; else the global default. Before the rules: an unknown source, an
// invalid path or a source p cannot see (visible_to) is denied everything,
// and write on a read-only source is denied with ReadOnly set.
//
// Read is also denied when an ancestor folder is read-denied, because a
// hidden folder's contents are absent too (DESIGN.md §4, "denied read means
// absent"); callers that do not walk the tree, such as search, get the same
// answer as a walk through the mount. One exception keeps allow-lists
// usable: a read-denied folder stays visible (ReasonTraversal) when a rule
// later in the file than the one that denied it allows read on a uri whose
// literal folder prefix lies inside it, so `deny data://**` followed by
// `allow data://docs/**` shows data:// and docs/ (and nothing else).
func (s *Set) Decide(p *Principal, slug, path string, c Cap) Decision {
	pi, ok := s.pindex(p)
	if !ok {
		return Decision{Reason: ReasonUnknownPrincipal}
	}
	ci := capIndex(c)
	if ci < 0 {
		return Decision{Reason: ReasonUnknownCap}
	}
	src := s.source(slug)
	if src == nil {
		return Decision{Reason: ReasonUnknownSource}
	}
	var arr [maxTrieDepth + 1]*node
	chain, n, valid := src.ix.walk(&arr, path)
	if !valid {
		return Decision{Reason: ReasonBadPath}
	}
	if !bit(src.visible, pi) {
		return Decision{Reason: ReasonNotVisible}
	}
	if src.layer != nil && !src.layer.member(path) {
		return Decision{Reason: ReasonOutsideLayer}
	}
	if c == Write && src.ReadOnly {
		return Decision{ReadOnly: true, Reason: ReasonReadOnly}
	}
	if c == Read && src.readAll[pi] {
		return Decision{Allowed: true, Reason: src.defaultReason()}
	}
	ri := s.own(src, chain, n, path, slug, pi, ci)
	d := s.decision(src, ri, c)
	if d.Allowed && !src.readAll[pi] && inGitDir(path) && (ri < 0 || !s.crules[ri].namesGit) {
		// Git data holds every committed file's name and content: a
		// principal who may not read everything in the source does not
		// get it, unless a rule naming .git decided (see doc.go).
		return Decision{Reason: ReasonGitData}
	}
	if c != Read {
		return d
	}
	if !d.Allowed {
		t := s.traversable(src, path, ri, slug, pi)
		if t < 0 {
			return d
		}
		if !src.readAll[pi] && inGitDir(path) && !s.crules[t].namesGit {
			return Decision{Reason: ReasonGitData}
		}
		d = Decision{Allowed: true, Rule: &s.rules[t], Reason: ReasonTraversal}
	}
	// Read needs every ancestor visible: root first, then each folder down.
	// An ancestor no read-deny entry on its trie nodes applies to is visible
	// when the default allows read, so it is not evaluated.
	if path != "" {
		skip := src.defAllow&Read != 0
		var acc uint64
		any := false
		j := 0
		for i := 0; i <= len(path); i++ {
			if i < len(path) && path[i] != '/' && i > 0 {
				continue
			}
			if i == len(path) {
				break
			}
			dir := path[:i] // "" first (i == 0), then each folder
			if j < len(chain) {
				acc |= chain[j].denyRead
				any = any || chain[j].denyAny
			}
			reach := any
			if pi < 64 {
				reach = acc&(1<<pi) != 0
			}
			if !skip || reach {
				if h, hidden := s.ancestor(src, chain, j, dir, slug, pi); hidden {
					return h
				}
			}
			j++
		}
	}
	return d
}

// inGitDir reports whether path is a .git folder or file, or lies inside
// one, at any depth (a checkout's own, a nested clone's, a submodule's).
func inGitDir(path string) bool {
	for {
		i := strings.Index(path, ".git")
		if i < 0 {
			return false
		}
		end := i + len(".git")
		if (i == 0 || path[i-1] == '/') && (end == len(path) || path[end] == '/') {
			return true
		}
		path = path[end:]
	}
}

// ReadsAll reports whether p may read every path of the source slug: it
// can see the source, the default allows read and no rule p is subject to
// denies read there. Callers show what describes a whole source (a
// digest over every file, a count of documents, the list of modified
// files) only to such principals, or else compute it over what p may read.
func (s *Set) ReadsAll(p *Principal, slug string) bool {
	pi, ok := s.pindex(p)
	if !ok {
		return false
	}
	src := s.source(slug)
	return src != nil && bit(src.visible, pi) && src.readAll[pi]
}

// HidesNothing reports whether no caller is refused any name in the source
// slug: every principal that can see it (Owner and Other included) may
// read all of it, and no one's writes are held there (a held principal's
// own folders differ from everyone else's). Then what describes a folder
// as a whole, its link count and size, tells no caller of anything hidden
// from it, even from a cache every caller shares. It is worked out once,
// when the rules are compiled: the mount asks at every folder it
// describes.
func (s *Set) HidesNothing(slug string) bool {
	src := s.source(slug)
	return src != nil && src.hidesNothing
}

// matchSlug checks a slug-glob rule against slug (fallback index only).
func matchSlug(c *crule, slug string) bool {
	ok, _ := doublestar.Match(c.slugPat, slug)
	return ok
}

// source finds the compiled source for slug, or nil when it is unknown.
func (s *Set) source(slug string) *source {
	if src := s.sources[slug]; src != nil {
		return src
	}
	if s.strict || !validSlug(slug) {
		return nil
	}
	return s.fallback
}

func (src *source) defaultReason() string {
	if src.defSource {
		return ReasonSourceDefault
	}
	return ReasonDefault
}

// decision turns the deciding rule index (-1: none) into a Decision for c.
func (s *Set) decision(src *source, ri int, c Cap) Decision {
	if ri < 0 {
		return Decision{Allowed: src.defAllow&c != 0, Reason: src.defaultReason()}
	}
	cr := &s.crules[ri]
	return Decision{Allowed: (cr.allow|cr.review)&c != 0, Held: cr.review&c != 0, Rule: &s.rules[ri], Reason: ReasonRule}
}

// ancestor checks read on the strict ancestor dir (nseg segments) of a path.
func (s *Set) ancestor(src *source, chain []*node, nseg int, dir, slug string, pi int) (Decision, bool) {
	ri := s.own(src, chain, nseg, dir, slug, pi, 0)
	if ri < 0 && src.defAllow&Read != 0 || ri >= 0 && s.crules[ri].allow&Read != 0 {
		return Decision{}, false
	}
	if s.traversable(src, dir, ri, slug, pi) >= 0 {
		return Decision{}, false
	}
	d := Decision{Reason: ReasonHidden, Via: dir}
	if ri >= 0 {
		d.Rule = &s.rules[ri]
	}
	return d, true
}

// own returns the index of the last rule that applies to principal pi,
// mentions cap ci and matches path (nseg segments), or -1. Only rules hung on
// the trie nodes of path's leading segments can match, and each node's list
// is scanned from the end, stopping at the first hit or at a rule older than
// the best hit so far.
func (s *Set) own(src *source, chain []*node, nseg int, path, slug string, pi, ci int) int {
	best := -1
	lim := min(nseg, len(chain)-1)
	lo := pi < 64
	var mask uint64 = 1 << (pi & 63)
	for d := 0; d <= lim; d++ {
		list := chain[d].byCap[ci]
		for k := len(list) - 1; k >= 0; k-- {
			e := &list[k]
			ri := int(e.rule)
			if ri <= best {
				break
			}
			if lo {
				if e.who&mask == 0 {
					continue
				}
			} else if !s.crules[ri].applies(pi) {
				continue
			}
			if src.ix.slugCheck && !matchSlug(&s.crules[ri], slug) {
				continue
			}
			if !e.a.match(path) {
				continue
			}
			best = ri
			break
		}
	}
	return best
}

// traversable returns the first rule after index after (file order) that
// applies to pi, allows read, and whose literal folder prefix lies at or
// below dir; or -1. Such a rule makes a read-denied dir visible (see Decide).
func (s *Set) traversable(src *source, dir string, after int, slug string, pi int) int {
	all := src.ix.all
	for k := len(all) - 1; k >= 0 && int(all[k]) > after; k-- {
		c := &s.crules[all[k]]
		if c.allow&Read == 0 || !c.applies(pi) || !c.leadsInto(dir) {
			continue
		}
		if src.ix.slugCheck && !matchSlug(c, slug) {
			continue
		}
		return int(all[k])
	}
	return -1
}

// leadsInto reports whether some alternative's literal folder lies at or below dir.
func (c *crule) leadsInto(dir string) bool {
	for i := range c.alts {
		if under(c.alts[i].litDir, dir, true) {
			return true
		}
	}
	return false
}

// walk validates path (see validPath), counts its segments and returns the
// trie chain (see chain), in one pass over the bytes.
func (ix *index) walk(arr *[maxTrieDepth + 1]*node, path string) (chain []*node, nseg int, ok bool) {
	arr[0] = ix.root
	if path == "" {
		return arr[:1], 0, true
	}
	n, d := ix.root, 1
	start := 0
	for i := 0; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			if path[i] == 0 {
				return nil, 0, false
			}
			continue
		}
		seg := path[start:i]
		if seg == "" || seg == "." || seg == ".." {
			return nil, 0, false
		}
		nseg++
		start = i + 1
		if n != nil && d <= maxTrieDepth {
			if n = n.child(seg); n != nil {
				arr[d] = n
				d++
			}
		}
	}
	return arr[:d], nseg, true
}

// chain returns the trie nodes along path's leading segments: chain[d] is the
// node for the first d segments; it stops where the trie does.
func (ix *index) chain(arr *[maxTrieDepth + 1]*node, path string) []*node {
	arr[0] = ix.root
	n, d := ix.root, 1
	start := 0
	for i := 0; i <= len(path) && path != "" && d <= maxTrieDepth; i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		next := n.child(path[start:i])
		if next == nil {
			break
		}
		arr[d] = next
		n, d, start = next, d+1, i+1
	}
	return arr[:d]
}

// Check is Decide as an error: nil when allowed, else a *DeniedError wrapping
// ErrDenied (and ErrReadOnly for a write to a read-only source).
func (s *Set) Check(p *Principal, slug, path string, c Cap) error {
	d := s.Decide(p, slug, path, c)
	if d.Allowed {
		return nil
	}
	return &DeniedError{Principal: principalName(p), URI: slug + "://" + path, Cap: c, Decision: d}
}

func principalName(p *Principal) string {
	if p == nil {
		return "<nil>"
	}
	return p.Name
}

// DeniedError is the error Check and CanRename return.
type DeniedError struct {
	Principal string
	URI       string
	Cap       Cap
	Decision  Decision
	Detail    string // extra explanation (CanRename)
	boundary  bool
}

// Error reads like "agent may not read data://secrets/k (rule policy.toml:12)".
func (e *DeniedError) Error() string {
	why := e.Decision.Reason
	switch {
	case e.Detail != "":
		why = e.Detail
	case e.Decision.Reason == ReasonHidden:
		why = fmt.Sprintf("inside %s://%s, hidden by %s", e.URI[:strings.Index(e.URI, "://")], e.Decision.Via, e.Decision.Rule.Where())
	case e.Decision.Rule != nil:
		why = "rule " + e.Decision.Rule.Where()
	}
	return fmt.Sprintf("%s may not %v %s (%s)", e.Principal, e.Cap, e.URI, why)
}

// RuleWhere names the deciding rule as "file:line", or "default".
func (e *DeniedError) RuleWhere() string { return e.Decision.Rule.Where() }

// Is makes errors.Is see ErrDenied, and ErrReadOnly / ErrCrossesBoundary when they apply.
func (e *DeniedError) Is(target error) bool {
	switch target {
	case ErrDenied:
		return true
	case ErrReadOnly:
		return e.Decision.ReadOnly
	case ErrCrossesBoundary:
		return e.boundary
	}
	return false
}

// SourceVisible reports whether p may see the source at all (visible_to).
// An unknown slug is not visible.
func (s *Set) SourceVisible(p *Principal, slug string) bool {
	pi, ok := s.pindex(p)
	if !ok {
		return false
	}
	src := s.source(slug)
	return src != nil && bit(src.visible, pi)
}

// Holds reports whether some rule holds p's writes for review somewhere
// in the source slug: what p sees there may then differ from the backing
// files (its own held changes), and nothing there is the same for every
// caller.
func (s *Set) Holds(p *Principal, slug string) bool {
	if !s.review {
		return false
	}
	pi, ok := s.pindex(p)
	if !ok {
		return false
	}
	src := s.source(slug)
	return src != nil && src.holds[pi]
}

// Reviews reports whether any rule holds writes for review.
func (s *Set) Reviews() bool { return s.review }

// Trivial reports whether the policy can never deny anything: no rules, every
// default allows, every source is visible to everyone and writable. The mount
// may then skip policy checks entirely.
func (s *Set) Trivial() bool { return s.trivial }

// Uniform reports whether every possible caller — each named principal,
// Owner, Other (which any unknown uid resolves to) — gets the same read
// decision for slug://path. The FUSE layer gives cache timeouts (entry, attr,
// negative) only to such names (DESIGN.md §4, §11): a kernel cache is shared
// by all callers. It is O(1) when no rule names anyone but "*" and no source
// restricts visible_to; otherwise it decides once per principal.
func (s *Set) Uniform(slug, path string) bool {
	if s.uniform {
		return true
	}
	src := s.source(slug)
	if src == nil || !validPath(path) {
		return true // denied to everyone
	}
	if src.layer != nil && !src.layer.member(path) {
		return true // not part of the layer, for anyone
	}
	if src.uniform {
		return true
	}
	if src.anyHolds {
		return false
	}
	if src.visAll && !src.ix.personalAllow && !(src.mixedReadAll && inGitDir(path)) {
		// Only rules on the trie nodes along path can decide path or its
		// ancestors; if none of them is for some principals only, everyone
		// gets the same answer.
		var arr [maxTrieDepth + 1]*node
		chain := src.ix.chain(&arr, path)
		n := 0
		if path != "" {
			n = 1 + strings.Count(path, "/")
		}
		personal := false
		for d := 0; d <= min(n, len(chain)-1); d++ {
			personal = personal || chain[d].personal
		}
		if !personal {
			return true
		}
	}
	first := s.Decide(s.principals[0], slug, path, Read).Allowed
	for _, p := range s.principals[1:] {
		if s.Decide(p, slug, path, Read).Allowed != first {
			return false
		}
	}
	return true
}
