package mounts

import (
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// addLayers checks the [[layer]] entries and appends each valid one to
// c.Sources as a source of its own (see Config.Layers). seen maps the
// sources' slugs to their index and gets the layers' slugs too, so rules
// may name them.
//
// A layer shows the files of its source at their own paths: with
// include = ["docs/**"], support://docs/a.md is also docs://docs/a.md and
// <mount>/docs/docs/a.md. One backing file, one path, two uris.
func (c *Config) addLayers(seen map[string]int, add func(table string, i int, key, format string, args ...any)) {
	bases := map[string]SourceConfig{}
	for _, s := range c.Sources {
		bases[s.Slug] = s
	}
	layerAt := map[string]int{}
	for i, l := range c.Layers {
		ok := true
		switch {
		case l.Slug == "":
			add("layer", i, "slug", "missing; every layer needs a slug")
			ok = false
		case !ValidSlug(l.Slug):
			add("layer", i, "slug", "%q is not a valid slug (lower-case letters, digits, '.', '_' and '-', starting with a letter or digit)", l.Slug)
			ok = false
		case l.Slug == ".neuralis":
			add("layer", i, "slug", "%q is reserved", l.Slug)
			ok = false
		default:
			if j, dup := layerAt[l.Slug]; dup {
				add("layer", i, "slug", "%q is already used by the layer at line %d", l.Slug, c.Layers[j].Line)
				ok = false
			} else if j, dup := seen[l.Slug]; dup {
				add("layer", i, "slug", "%q is already used by the source at line %d", l.Slug, c.Sources[j].Line)
				ok = false
			}
		}
		base, known := bases[l.Source]
		switch {
		case l.Source == "":
			add("layer", i, "source", "missing; a layer shows part of the source it names")
			ok = false
		case !known:
			if j := layerIndex(c.Layers, l.Source); j >= 0 {
				add("layer", i, "source", "%q is a layer (line %d); a layer shows part of a source, not of another layer", l.Source, c.Layers[j].Line)
			} else {
				add("layer", i, "source", "%q names no configured source", l.Source)
			}
			ok = false
		case base.Kind != KindLocal && base.Kind != KindGit:
			add("layer", i, "source", "%q is a %s source; a layer shows part of a local or git source", l.Source, base.Kind)
			ok = false
		}
		if len(l.Include) == 0 {
			add("layer", i, "include", "missing; a layer needs include = [\"<glob>\", ...]")
			ok = false
		}
		for _, key := range []struct {
			name string
			pats []string
		}{{"include", l.Include}, {"exclude", l.Exclude}} {
			for _, p := range key.pats {
				if p == "" || strings.HasPrefix(p, "/") || !doublestar.ValidatePattern(p) {
					add("layer", i, key.name, "%q is not a valid glob relative to the source (doublestar syntax: \"docs/**\", \"**/*.md\")", p)
					ok = false
				}
			}
		}
		switch l.Default {
		case "", "allow", "deny":
		default:
			add("layer", i, "default", "%q is neither \"allow\" nor \"deny\"", l.Default)
			ok = false
		}
		if l.MaxFileBytes < 0 {
			add("layer", i, "max_file_bytes", "must not be negative")
			ok = false
		}
		if !ok {
			continue
		}
		layerAt[l.Slug] = i
		seen[l.Slug] = len(c.Sources)
		c.Sources = append(c.Sources, SourceConfig{
			Slug:         l.Slug,
			Kind:         KindLocal, // git state is shown under the source's own slug only
			Path:         base.Path,
			ReadOnly:     base.ReadOnly || l.ReadOnly,
			VisibleTo:    l.VisibleTo,
			Default:      l.Default,
			Include:      layerPatterns(l.Include),
			Exclude:      l.Exclude,
			MaxFileBytes: l.MaxFileBytes,
			Layer:        l.Source,
			Line:         l.Line,
		})
	}
}

func layerIndex(ls []LayerConfig, slug string) int {
	for i, l := range ls {
		if l.Slug == slug {
			return i
		}
	}
	return -1
}

// layerPatterns adds "<p>/**" to every include pattern p, so that what
// lies below a path the layer includes is included too (for the index's
// admission, which matches each path on its own).
func layerPatterns(in []string) []string {
	var out []string
	for _, p := range in {
		out = append(out, p)
		if !strings.HasSuffix(p, "/**") && p != "**" {
			out = append(out, p+"/**")
		}
	}
	return out
}
