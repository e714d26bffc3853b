package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// The names of the two implicit principals (DESIGN.md §1).
const (
	// Owner is the principal of the daemon's own uid and of root, unless a
	// [[principal]] lists that uid.
	Owner = "owner"
	// Other is the principal of every uid and gid no [[principal]] lists.
	Other = "other"
)

// Principal is a named caller with roles, as configured by a [[principal]]
// entry. The *Principal values a Set hands out (Resolve, PrincipalByName) are
// shared and must not be modified.
type Principal struct {
	Name  string
	UIDs  []uint32
	GIDs  []uint32
	Roles []string
	File  string // where it was configured, for messages; may be empty
	Line  int

	set *Set // the Set that made it, so Decide finds idx without a lookup
	idx int
}

// Rule is one [[rule]]: for the principals in Who, on the uris URI matches,
// allow and/or deny capabilities. File and Line say where it was written and
// appear in Explain, Lint, Decision and audit output.
type Rule struct {
	URI   string   // a doublestar glob over uris, "<slug>://<path glob>"
	Who   []string // principal names, "role:<r>", or "*"
	Allow []Cap
	Deny  []Cap
	// Review lists capabilities that are allowed but held for review:
	// only Write may be held (a held write is kept as the principal's
	// pending change instead of reaching the backing file; see doc.go).
	Review []Cap
	File   string
	Line   int
}

// Where returns "file:line", "line N" when File is empty, or "default" for a
// nil rule (no rule decided), so callers can print d.Rule.Where() directly.
func (r *Rule) Where() string {
	if r == nil {
		return "default"
	}
	if r.File == "" {
		return fmt.Sprintf("line %d", r.Line)
	}
	return fmt.Sprintf("%s:%d", r.File, r.Line)
}

// Source is the policy-relevant part of a [[source]].
type Source struct {
	Slug      string
	ReadOnly  bool
	VisibleTo []string // principals, "role:<r>" or "*"; empty means ["*"]
	Default   string   // "", "allow" or "deny": the source's default for every capability
	// Layer, when set, makes the source a layer ([[layer]]) showing only
	// what Include matches (a path, what lies below it, and the folders
	// leading to it) minus what Exclude matches: anything else is denied
	// to everyone before any rule is read (ReasonOutsideLayer).
	Layer   bool
	Include []string
	Exclude []string
	File    string
	Line    int
}

// Config is everything New compiles.
type Config struct {
	Principals []Principal
	Rules      []Rule
	// Sources lists the configured sources. When it is empty every slug is
	// accepted (with no per-source settings); otherwise a slug not listed is
	// denied everything.
	Sources []Source
	// Default is the global default, "allow" (also when empty) or "deny".
	Default string
	// OwnerUID is the uid the daemon runs as; it and uid 0 resolve to Owner
	// unless a [[principal]] lists them.
	OwnerUID uint32
}

// Set is a compiled policy. It is immutable and safe for concurrent use.
type Set struct {
	principals []*Principal // named ones in file order, then owner/other if implicit
	byName     map[string]int
	byUID      map[uint32]int
	byGID      map[uint32]int
	owner      int
	other      int
	words      int // len of every principal bitset

	rules  []Rule
	crules []crule

	sources  map[string]*source
	strict   bool    // len(Config.Sources) > 0
	fallback *source // used for unlisted slugs when !strict

	defAllow Cap  // caps the global default allows
	uniform  bool // no rule names anyone but "*", no source restricts visible_to
	trivial  bool
	review   bool // some rule holds writes for review
	ownerUID uint32
}

// source is a compiled Source with its rule index.
type source struct {
	Source
	visible   []uint64 // principal bitset
	visAll    bool
	defAllow  Cap
	defSource bool // the source set its own default
	ix        index
	// readAll[pi]: no rule this principal is subject to denies read here and
	// the default allows read, so read is allowed everywhere in the source.
	readAll []bool
	// mixedReadAll: readAll differs between principals, so .git paths
	// are decided differently for them (see Decide).
	mixedReadAll bool
	// hidesNothing: see HidesNothing.
	hidesNothing bool
	uniform      bool
	// layer is set for a layer source (Source.Layer).
	layer *layer
	// holds[pi]: some rule that holds writes for review applies to this
	// principal here, so what it sees in the source may differ from the
	// backing files (its own held changes).
	holds    []bool
	anyHolds bool
}

// crule is a compiled Rule.
type crule struct {
	r        *Rule
	idx      int
	slugPat  string
	slugGlob bool
	pat      string // path glob, normalised ("x/" became "x/**")
	alts     []alt  // pat with braces expanded
	allow    Cap
	deny     Cap
	review   Cap // allowed, but held for review (only Write)
	who      []uint64
	whoAll   bool
	// namesGit: the path pattern has a literal ".git" segment, so the rule
	// decides git data deliberately (see Decide).
	namesGit bool
}

func (c *crule) applies(pi int) bool {
	return c.who[pi>>6]&(1<<(pi&63)) != 0
}

func bit(set []uint64, i int) bool { return set[i>>6]&(1<<(i&63)) != 0 }

// New compiles cfg. Every problem found is reported, joined with errors.Join,
// each naming the rule's file:line.
func New(cfg Config) (*Set, error) {
	s := &Set{
		byName:   map[string]int{},
		byUID:    map[uint32]int{},
		byGID:    map[uint32]int{},
		sources:  map[string]*source{},
		strict:   len(cfg.Sources) > 0,
		ownerUID: cfg.OwnerUID,
	}
	var errs []error
	bad := func(where, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if where != "" {
			msg = where + ": " + msg
		}
		errs = append(errs, errors.New(msg))
	}

	// Principals: merge entries that share a name, keep file order.
	for i := range cfg.Principals {
		in := &cfg.Principals[i]
		where := locate(in.File, in.Line, fmt.Sprintf("principal #%d", i+1))
		if in.Name == "" || strings.HasPrefix(in.Name, "role:") || in.Name == "*" {
			bad(where, "principal name %q is not allowed", in.Name)
			continue
		}
		if j, ok := s.byName[in.Name]; ok {
			p := s.principals[j]
			p.UIDs = append(p.UIDs, in.UIDs...)
			p.GIDs = append(p.GIDs, in.GIDs...)
			p.Roles = append(p.Roles, in.Roles...)
			continue
		}
		p := &Principal{Name: in.Name, UIDs: slices.Clone(in.UIDs), GIDs: slices.Clone(in.GIDs),
			Roles: slices.Clone(in.Roles), File: in.File, Line: in.Line}
		s.byName[p.Name] = len(s.principals)
		s.principals = append(s.principals, p)
	}
	for _, name := range []string{Owner, Other} {
		if _, ok := s.byName[name]; !ok {
			s.byName[name] = len(s.principals)
			s.principals = append(s.principals, &Principal{Name: name})
		}
	}
	s.owner, s.other = s.byName[Owner], s.byName[Other]
	for i, p := range s.principals {
		p.set, p.idx = s, i
		for _, u := range p.UIDs {
			if _, ok := s.byUID[u]; !ok { // the first principal in file order wins
				s.byUID[u] = i
			}
		}
		for _, g := range p.GIDs {
			if _, ok := s.byGID[g]; !ok {
				s.byGID[g] = i
			}
		}
	}
	s.words = (len(s.principals) + 63) / 64

	// Global default.
	switch cfg.Default {
	case "", "allow":
		s.defAllow = Read | Write | Exec
	case "deny":
	default:
		bad("", "policy default %q: want \"allow\" or \"deny\"", cfg.Default)
	}

	// Rules.
	s.rules = slices.Clone(cfg.Rules)
	s.crules = make([]crule, len(s.rules))
	s.uniform = true
	for i := range s.rules {
		r := &s.rules[i]
		c := &s.crules[i]
		c.r, c.idx = r, i
		where := locate(r.File, r.Line, fmt.Sprintf("rule #%d", i+1))
		if err := c.compilePattern(r.URI); err != nil {
			bad(where, "%v", err)
		}
		for _, cp := range r.Allow {
			if capIndex(cp) < 0 {
				bad(where, "unknown capability %v in allow", cp)
			}
			c.allow |= cp
		}
		for _, cp := range r.Deny {
			if capIndex(cp) < 0 {
				bad(where, "unknown capability %v in deny", cp)
			}
			c.deny |= cp
		}
		for _, cp := range r.Review {
			if cp != Write {
				bad(where, "review takes only write (a held change is a write kept for review), not %v", cp)
			}
			c.review |= cp
		}
		if c.allow&c.deny != 0 {
			bad(where, "%v is both allowed and denied", c.allow&c.deny)
		}
		if (c.allow|c.deny)&c.review != 0 {
			bad(where, "%v is both held for review and allowed or denied", (c.allow|c.deny)&c.review)
		}
		if c.allow|c.deny|c.review == 0 {
			bad(where, "rule allows and denies nothing")
		}
		if c.review != 0 {
			s.review, s.uniform = true, false
		}
		if len(r.Who) == 0 {
			bad(where, "rule has no who (use \"*\" for everyone)")
		}
		c.who, c.whoAll = s.whoSet(r.Who)
		if !c.whoAll {
			s.uniform = false
		}
	}

	// Sources.
	for i := range cfg.Sources {
		in := cfg.Sources[i]
		where := locate(in.File, in.Line, fmt.Sprintf("source #%d", i+1))
		if !validSlug(in.Slug) {
			bad(where, "source slug %q must match [a-z0-9][a-z0-9._-]*", in.Slug)
			continue
		}
		if _, dup := s.sources[in.Slug]; dup {
			bad(where, "source slug %q is configured twice", in.Slug)
			continue
		}
		src, err := s.newSource(in)
		if err != nil {
			bad(where, "%v", err)
			continue
		}
		s.sources[in.Slug] = src
	}
	if !s.strict {
		// No sources configured: every slug a rule names gets its own index,
		// and any other slug uses the fallback built from slug-glob rules.
		for i := range s.crules {
			c := &s.crules[i]
			if !c.slugGlob && c.slugPat != "" {
				if _, ok := s.sources[c.slugPat]; !ok {
					src, _ := s.newSource(Source{Slug: c.slugPat})
					s.sources[c.slugPat] = src
				}
			}
		}
		s.fallback, _ = s.newSource(Source{})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.trivial = len(s.rules) == 0 && s.defAllow == Read|Write|Exec
	for _, src := range s.sources {
		if !src.visAll {
			s.uniform = false
		}
		if !src.visAll || src.ReadOnly || src.defAllow != Read|Write|Exec || src.layer != nil {
			s.trivial = false
		}
	}
	return s, nil
}

// locate formats file:line, or fallback when the file is unknown.
func locate(file string, line int, fallback string) string {
	if file == "" {
		if line > 0 {
			return fmt.Sprintf("line %d", line)
		}
		return fallback
	}
	return fmt.Sprintf("%s:%d", file, line)
}

// whoSet turns a who list into a principal bitset.
func (s *Set) whoSet(who []string) (set []uint64, all bool) {
	set = make([]uint64, s.words)
	for _, w := range who {
		switch {
		case w == "*":
			all = true
		case strings.HasPrefix(w, "role:"):
			role := w[len("role:"):]
			for i, p := range s.principals {
				if slices.Contains(p.Roles, role) {
					set[i>>6] |= 1 << (i & 63)
				}
			}
		default:
			if i, ok := s.byName[w]; ok {
				set[i>>6] |= 1 << (i & 63)
			}
		}
	}
	if all {
		for i := range s.principals {
			set[i>>6] |= 1 << (i & 63)
		}
	}
	return set, all
}

// newSource compiles one source and indexes the rules that can apply to it.
// An empty Slug builds the fallback for unlisted slugs (only slug-glob rules,
// checked against the slug at decision time).
func (s *Set) newSource(in Source) (*source, error) {
	src := &source{Source: in}
	if len(in.VisibleTo) == 0 {
		src.visible, src.visAll = s.whoSet([]string{"*"})
	} else {
		src.visible, src.visAll = s.whoSet(in.VisibleTo)
	}
	switch in.Default {
	case "":
		src.defAllow = s.defAllow
	case "allow":
		src.defAllow, src.defSource = Read|Write|Exec, true
	case "deny":
		src.defSource = true
	default:
		return nil, fmt.Errorf("source %q default %q: want \"allow\" or \"deny\"", in.Slug, in.Default)
	}
	if in.Layer {
		l, err := newLayer(in.Include, in.Exclude)
		if err != nil {
			return nil, fmt.Errorf("layer %q: %w", in.Slug, err)
		}
		src.layer = l
	}
	src.ix.slugCheck = in.Slug == ""
	src.ix.root = &node{}
	for i := range s.crules {
		c := &s.crules[i]
		if c.slugPat == "" { // failed to compile
			continue
		}
		if in.Slug == "" {
			if !c.slugGlob {
				continue
			}
		} else if c.slugGlob {
			if ok, _ := doublestar.Match(c.slugPat, in.Slug); !ok {
				continue
			}
		} else if c.slugPat != in.Slug {
			continue
		}
		src.ix.add(c)
	}
	src.readAll = make([]bool, len(s.principals))
	src.holds = make([]bool, len(s.principals))
	src.uniform = src.visAll
	for _, ri := range src.ix.all {
		c := &s.crules[ri]
		if !c.whoAll {
			src.uniform = false
		}
		if c.review != 0 {
			// A principal's held changes are seen by it alone: nothing in
			// the source is the same for everyone any more.
			src.uniform, src.anyHolds = false, true
			for pi := range s.principals {
				if c.applies(pi) {
					src.holds[pi] = true
				}
			}
		}
	}
	for pi := range s.principals {
		ok := src.defAllow&Read != 0
		for _, ri := range src.ix.all {
			c := &s.crules[ri]
			if c.deny&Read != 0 && c.applies(pi) {
				ok = false
				break
			}
		}
		src.readAll[pi] = ok
		if ok != src.readAll[0] {
			src.mixedReadAll = true
		}
	}
	src.hidesNothing = !src.anyHolds && src.layer == nil
	for pi := range s.principals {
		if bit(src.visible, pi) && !src.readAll[pi] {
			src.hidesNothing = false
		}
	}
	return src, nil
}

// Resolve returns the principal for a caller's uid and gid (DESIGN.md §1):
// the first [[principal]] listing the uid, else the first listing the gid,
// else Owner for the daemon's uid and root, else Other. It never returns nil.
func (s *Set) Resolve(uid, gid uint32) *Principal {
	if i, ok := s.byUID[uid]; ok {
		return s.principals[i]
	}
	if i, ok := s.byGID[gid]; ok {
		return s.principals[i]
	}
	if uid == 0 || uid == s.ownerUID {
		return s.principals[s.owner]
	}
	return s.principals[s.other]
}

// PrincipalByName returns the principal called name, including the implicit
// Owner and Other.
func (s *Set) PrincipalByName(name string) (*Principal, bool) {
	i, ok := s.byName[name]
	if !ok {
		return nil, false
	}
	return s.principals[i], true
}

// Principals returns every principal, named ones in file order, then the
// implicit Owner and Other when the file does not name them.
func (s *Set) Principals() []*Principal { return slices.Clone(s.principals) }

// Rules returns the compiled rules in file order.
func (s *Set) Rules() []Rule { return slices.Clone(s.rules) }

// pindex finds p's index in s. Principals made by another Set (or by hand)
// are looked up by name.
func (s *Set) pindex(p *Principal) (int, bool) {
	if p == nil {
		return 0, false
	}
	if p.set == s {
		return p.idx, true
	}
	i, ok := s.byName[p.Name]
	return i, ok
}
