package mounts

import (
	"github.com/neuralis/neuralisfs/policy"
)

// PolicyConfig turns the config's principals, rules and sources into the
// policy package's input. Capability names were validated by Parse.
func (c *Config) PolicyConfig(ownerUID uint32) policy.Config {
	pc := policy.Config{Default: c.Policy.Default, OwnerUID: ownerUID}
	for _, p := range c.Principals {
		pc.Principals = append(pc.Principals, policy.Principal{
			Name: p.Name, UIDs: p.UIDs, GIDs: p.GIDs, Roles: p.Roles, File: c.File, Line: p.Line,
		})
	}
	caps := func(names []string) []policy.Cap {
		var out []policy.Cap
		for _, n := range names {
			if cp, err := policy.ParseCap(n); err == nil {
				out = append(out, cp)
			}
		}
		return out
	}
	for _, r := range c.Rules {
		pc.Rules = append(pc.Rules, policy.Rule{
			URI: r.URI, Who: r.Who, Allow: caps(r.Allow), Deny: caps(r.Deny), Review: caps(r.Review), File: c.File, Line: r.Line,
		})
	}
	for _, s := range c.Sources {
		ro := s.ReadOnly || s.Kind == KindGitPinned || IsFeedKind(s.Kind)
		ps := policy.Source{
			Slug: s.Slug, ReadOnly: ro, VisibleTo: s.VisibleTo, Default: s.Default, File: c.File, Line: s.Line,
		}
		if s.Layer != "" {
			ps.Layer, ps.Include, ps.Exclude = true, s.Include, s.Exclude
		}
		pc.Sources = append(pc.Sources, ps)
	}
	return pc
}
