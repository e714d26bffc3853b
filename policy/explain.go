package policy

import (
	"fmt"
	"sort"
	"strings"
)

// Explanation is what `neuralisfs policy explain <uri> --as <principal>` prints.
type Explanation struct {
	URI       string
	Principal string
	Roles     []string
	Caps      []CapDecision // read, write, exec in that order
}

// CapDecision is the decision for one capability.
type CapDecision struct {
	Cap Cap
	Decision
}

// Explain decides every capability of uri for the named principal. It
// returns a one-sentence error for a bad uri, an unknown source or an unknown
// principal.
func (s *Set) Explain(uri, principal string) (Explanation, error) {
	slug, path, err := ParseURI(uri)
	if err != nil {
		return Explanation{}, err
	}
	if s.source(slug) == nil {
		return Explanation{}, fmt.Errorf("unknown source %q in %q (known: %s)", slug, uri, strings.Join(s.slugs(), ", "))
	}
	p, ok := s.PrincipalByName(principal)
	if !ok {
		names := make([]string, len(s.principals))
		for i, p := range s.principals {
			names[i] = p.Name
		}
		return Explanation{}, fmt.Errorf("unknown principal %q (known: %s)", principal, strings.Join(names, ", "))
	}
	e := Explanation{URI: uri, Principal: p.Name, Roles: append([]string(nil), p.Roles...)}
	for _, c := range allCaps {
		e.Caps = append(e.Caps, CapDecision{Cap: c, Decision: s.Decide(p, slug, path, c)})
	}
	return e, nil
}

func (s *Set) slugs() []string {
	var out []string
	for slug := range s.sources {
		out = append(out, slug)
	}
	sort.Strings(out)
	return out
}

// String renders the explanation, one line per capability, e.g.
//
//	data://secrets/k as agent (roles: agent)
//	  read   deny   rule policy.toml:12 (data://secrets/**)
//	  write  deny   read-only source
//	  exec   allow  global default
func (e Explanation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s as %s", e.URI, e.Principal)
	if len(e.Roles) > 0 {
		fmt.Fprintf(&b, " (roles: %s)", strings.Join(e.Roles, ", "))
	}
	b.WriteByte('\n')
	for _, c := range e.Caps {
		verdict := "deny"
		switch {
		case c.Decision.Held:
			verdict = "hold"
		case c.Allowed:
			verdict = "allow"
		}
		fmt.Fprintf(&b, "  %-6s %-6s %s\n", c.Cap, verdict, c.Decision.Describe())
	}
	return b.String()
}

// Describe says in a few words why the decision was made, naming the rule's
// file:line when a rule made it.
func (d Decision) Describe() string {
	switch d.Reason {
	case ReasonRule:
		return fmt.Sprintf("rule %s (%s)", d.Rule.Where(), d.Rule.URI)
	case ReasonHidden:
		via := d.Via
		if via == "" {
			via = "the source root"
		}
		by := "a default"
		if d.Rule != nil {
			by = fmt.Sprintf("rule %s (%s)", d.Rule.Where(), d.Rule.URI)
		}
		return fmt.Sprintf("inside %s, which is hidden by %s", via, by)
	case ReasonGitData:
		return "git data: the principal may not read everything in the source, and a .git folder holds every committed file (a rule naming .git can allow it)"
	case ReasonTraversal:
		return fmt.Sprintf("denied itself, but visible because rule %s (%s) allows read below it", d.Rule.Where(), d.Rule.URI)
	}
	return d.Reason
}

// RuleRef is how audit lines name the deciding rule: "file:line", or "default".
func (d Decision) RuleRef() string {
	if d.Rule == nil {
		return "default"
	}
	return d.Rule.Where()
}
