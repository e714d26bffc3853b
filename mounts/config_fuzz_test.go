package mounts

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/neuralis/neuralisfs/policy"
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

// FuzzParse feeds config text to Parse. It must never panic; every
// problem it reports is a *ConfigError of one line naming the file and a
// line or key; and what it accepts holds the promises the rest of the
// daemon relies on, and compiles into a policy or fails with errors that
// name file and line too. Seeds: testdata/fuzz/FuzzParse and the
// example config.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"../config.toml.example", "../example/config.toml.in"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	const file = "/etc/neuralisfs/config.toml"
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(file, data)
		if err != nil {
			if c != nil {
				t.Errorf("Parse returned a config with its error")
			}
			errs := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			}
			for _, e := range errs {
				var ce *ConfigError
				if !errors.As(e, &ce) {
					t.Fatalf("error %q is not a *ConfigError", e)
				}
				if ce.File != file {
					t.Errorf("error %q names file %q", e, ce.File)
				}
				if ce.Line <= 0 && ce.Key == "" {
					t.Errorf("error %q names neither a line nor a key", e)
				}
				if why := oneSentence(ce.Msg); why != "" {
					t.Errorf("error message %q %s", ce.Msg, why)
				}
				if ce.Line > strings.Count(string(data), "\n")+1 {
					t.Errorf("error %q names line %d of a %d-line file", e, ce.Line, strings.Count(string(data), "\n")+1)
				}
			}
			return
		}
		if c.File != file {
			t.Errorf("File = %q", c.File)
		}
		if c.StateDir != "" && !filepath.IsAbs(c.StateDir) {
			t.Errorf("accepted a relative state_dir %q", c.StateDir)
		}
		slugs := map[string]bool{}
		for _, s := range c.Sources {
			if !ValidSlug(s.Slug) || s.Slug == ".neuralis" || slugs[s.Slug] {
				t.Errorf("accepted source slug %q", s.Slug)
			}
			slugs[s.Slug] = true
			pathless := s.Kind == KindInline || s.Kind == KindHTTP // their files come from the config
			if !slices.Contains(kinds, s.Kind) || pathless != (s.Path == "") || !pathless && !filepath.IsAbs(s.Path) {
				t.Errorf("accepted source %q of kind %q at %q", s.Slug, s.Kind, s.Path)
			}
			if (s.Kind == KindGitPinned) != (s.Rev != "") {
				t.Errorf("accepted source %q of kind %q with rev %q", s.Slug, s.Kind, s.Rev)
			}
		}
		for _, r := range c.Rules {
			if !strings.Contains(r.URI, "://") || len(r.Who) == 0 || len(r.Allow)+len(r.Deny)+len(r.Review) == 0 {
				t.Errorf("accepted rule %+v", r)
			}
			for _, cp := range append(slices.Clone(r.Allow), r.Deny...) {
				if _, err := policy.ParseCap(cp); err != nil {
					t.Errorf("accepted capability %q: %v", cp, err)
				}
			}
		}
		for _, v := range c.Views {
			if v.Principal == "" || !filepath.IsAbs(v.Mountpoint) {
				t.Errorf("accepted view %+v", v)
			}
		}
		c.Timeouts()
		c.WatchedTimeout()
		// The daemon compiles the policy next; what it refuses must be
		// named by file and line as well.
		_, err = policy.New(c.PolicyConfig(1000))
		if err == nil {
			return
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			if !strings.HasPrefix(line, file+":") {
				t.Errorf("policy error %q does not name the file and line", line)
			}
			if !utf8.ValidString(line) {
				t.Errorf("policy error %q is not valid UTF-8", line)
			}
		}
	})
}
