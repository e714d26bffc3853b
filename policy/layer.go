package policy

import (
	"fmt"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// ReasonOutsideLayer decides a path a layer does not show: it is not part
// of the layer, so it is absent (read) and cannot be made there (write),
// for every principal, whatever the rules say.
const ReasonOutsideLayer = "outside layer"

// layer is the compiled include/exclude of a layer source ([[layer]]).
type layer struct {
	include [][]string // each pattern split into segments
	exclude []string
}

func newLayer(include, exclude []string) (*layer, error) {
	l := &layer{exclude: exclude}
	for _, p := range append(append([]string(nil), include...), exclude...) {
		if !doublestar.ValidatePattern(p) {
			return nil, fmt.Errorf("pattern %q is not a valid glob", p)
		}
	}
	for _, p := range include {
		l.include = append(l.include, strings.Split(p, "/"))
	}
	return l, nil
}

// member reports whether the layer shows path: a path matched by an
// include pattern, anything below such a path, and the folders on the way
// to what a pattern could match; minus whatever an exclude pattern matches
// (with everything below it).
func (l *layer) member(path string) bool {
	if path == "" {
		return true
	}
	in, way := l.shows(path)
	return in || way
}

// shows reports whether path is included (in: it or a folder above it
// matches an include pattern, and no exclude pattern matches it or a
// folder above it), or could be a folder on the way to what an include
// pattern matches (way).
func (l *layer) shows(path string) (in, way bool) {
	segs := strings.Split(path, "/")
	for i := 1; i <= len(segs); i++ {
		p := strings.Join(segs[:i], "/")
		for _, x := range l.exclude {
			if ok, _ := doublestar.Match(x, p); ok {
				return false, false
			}
		}
	}
	for i := 1; i <= len(segs); i++ {
		p := strings.Join(segs[:i], "/")
		for _, in := range l.include {
			if ok, _ := doublestar.Match(strings.Join(in, "/"), p); ok {
				return true, true
			}
		}
	}
	for _, in := range l.include {
		if leadsTo(in, segs) {
			return false, true
		}
	}
	return false, false
}

// leadsTo reports whether the folder segs could hold something pattern
// matches: each of its segments matches the pattern's segment at that
// depth, or a "**" segment comes first.
func leadsTo(pattern, segs []string) bool {
	for i, s := range segs {
		if i >= len(pattern)-1 {
			return false // the pattern's last segment names the entry itself
		}
		if pattern[i] == "**" {
			return true
		}
		if ok, _ := doublestar.Match(pattern[i], s); !ok {
			return false
		}
	}
	return true
}

// LayerMember reports whether slug, when it is a layer, shows path (true
// for every path of a source that is not a layer, and for unknown slugs).
func (s *Set) LayerMember(slug, path string) bool {
	src := s.source(slug)
	return src == nil || src.layer == nil || src.layer.member(path)
}

// LayerFile reports whether slug, when it is a layer, includes path as a
// file: Decide lets through the folders on the way to what a pattern
// could match ("src" for "**/*.md"), which only the caller, knowing the
// type, can tell from a file there that no pattern matches.
func (s *Set) LayerFile(slug, path string) bool {
	src := s.source(slug)
	if src == nil || src.layer == nil || path == "" {
		return true
	}
	in, _ := src.layer.shows(path)
	return in
}
