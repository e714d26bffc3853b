package policy

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// oneSentence reports what is wrong with msg as an error message shown to
// a person: it must be one non-empty line.
func oneSentence(msg string) string {
	switch {
	case strings.TrimSpace(msg) == "":
		return "is empty"
	case strings.ContainsAny(msg, "\n\r"):
		return "spans several lines"
	case msg != strings.TrimSpace(msg):
		return "has leading or trailing space"
	}
	return ""
}

// FuzzParseURI: ParseURI never panics; what it accepts renders back to
// the same uri (nothing is normalised) and parses again to the same
// parts; what it refuses wraps ErrBadURI in one line.
func FuzzParseURI(f *testing.F) {
	f.Fuzz(func(t *testing.T, uri string) {
		slug, path, err := ParseURI(uri)
		if err != nil {
			if !errors.Is(err, ErrBadURI) {
				t.Errorf("ParseURI(%q) = %v; not ErrBadURI", uri, err)
			}
			if why := oneSentence(err.Error()); why != "" {
				t.Errorf("ParseURI(%q) error %q %s", uri, err, why)
			}
			return
		}
		if got := slug + "://" + path; got != uri {
			t.Errorf("ParseURI(%q) = %q, %q, which renders as %q", uri, slug, path, got)
		}
		if !validSlug(slug) || !validPath(path) {
			t.Errorf("ParseURI(%q) accepted slug %q path %q", uri, slug, path)
		}
		s2, p2, err := ParseURI(slug + "://" + path)
		if err != nil || s2 != slug || p2 != path {
			t.Errorf("ParseURI of its own rendering %q = %q, %q, %v", uri, s2, p2, err)
		}
	})
}

// FuzzRule compiles two rules with fuzzed uris. New never panics; what it
// refuses is one line per problem, each naming the rule's file:line; what
// it compiles matches paths as doublestar does (every fast matcher and
// brace expansion agrees with refMatch), and Decide, CanRename and
// Explain agree with the slow reference decision for every principal and
// capability on a fuzzed path.
func FuzzRule(f *testing.F) {
	f.Fuzz(func(t *testing.T, uri1, uri2, path string, deny1 bool) {
		r1 := Rule{URI: uri1, Who: []string{"agent"}, File: "c.toml", Line: 3}
		r2 := Rule{URI: uri2, Who: []string{"*"}, File: "c.toml", Line: 9}
		if deny1 {
			r1.Deny, r2.Allow = []Cap{Read, Write}, []Cap{Read}
		} else {
			r1.Allow, r2.Deny = []Cap{Read, Exec}, []Cap{Read}
		}
		cfg := Config{
			Principals: []Principal{{Name: "agent", UIDs: []uint32{1001}, Roles: []string{"r"}}},
			Rules:      []Rule{r1, r2},
			Sources:    []Source{{Slug: "s"}, {Slug: "t", Default: "deny"}},
		}
		s, err := New(cfg)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				rest, ok := strings.CutPrefix(line, "c.toml:3: ")
				if !ok {
					rest, ok = strings.CutPrefix(line, "c.toml:9: ")
				}
				if !ok {
					t.Errorf("error %q does not name the rule's file:line", line)
				}
				if why := oneSentence(rest); why != "" {
					t.Errorf("error %q %s", line, why)
				}
			}
			return
		}
		for i := range s.crules {
			cr := &s.crules[i]
			// doublestar takes an invalid byte in a path for U+FFFD: a
			// pattern naming U+FFFD is the one place it differs from bytes.
			quirk := strings.ContainsRune(cr.pat, utf8.RuneError) && !utf8.ValidString(path)
			if validPath(path) && !quirk && cr.match(path) != refMatch(cr.pat, path) {
				t.Errorf("rule %q (pattern %q) matches %q: %v; doublestar says %v", cr.r.URI, cr.pat, path, cr.match(path), refMatch(cr.pat, path))
			}
		}
		for _, slug := range []string{"s", "t"} {
			for _, p := range s.principals {
				for _, c := range allCaps {
					if got, want := s.Decide(p, slug, path, c).Allowed, refDecide(s, p, slug, path, c); got != want {
						t.Errorf("Decide(%s, %s://%s, %v) = %v; reference says %v (rules %q, %q)", p.Name, slug, path, c, got, want, uri1, uri2)
					}
				}
				if path != "" {
					s.CanRename(p, slug, path, "x/"+path, false)
				}
			}
			if _, err := s.Explain(slug+"://"+path, "agent"); err != nil && validPath(path) {
				t.Errorf("Explain(%s://%s) = %v", slug, path, err)
			}
		}
		s.Lint()
	})
}
