package policy

import "fmt"

// CanRename checks a rename of slug://oldPath to slug://newPath by p
// (DESIGN.md §4): p needs write on both uris. A directory rename is also
// refused — with an error wrapping ErrDenied and ErrCrossesBoundary — unless
// no rule can tell the directory's contents at the old place from the same
// contents at the new place, for any principal and capability. The analysis
// is static and conservative: a rule is harmless when its literal prefix
// keeps it away from both places, or when it is "<dir>/**" or
// "<dir>/**/<name>" with <dir> containing both places; any other rule that
// could reach inside either place refuses the move. Refusing is safe: mv
// falls back to copy and delete, which is checked file by file.
//
// Renames between sources are not policy's business (they are EXDEV).
func (s *Set) CanRename(p *Principal, slug, oldPath, newPath string, isDir bool) error {
	if err := s.Check(p, slug, oldPath, Write); err != nil {
		return err
	}
	if err := s.Check(p, slug, newPath, Write); err != nil {
		return err
	}
	if !isDir || oldPath == newPath {
		return nil
	}
	src := s.source(slug)
	for _, ri := range src.ix.all {
		c := &s.crules[ri]
		if src.ix.slugCheck && !matchSlug(c, slug) {
			continue
		}
		if c.neutral(oldPath, newPath) {
			continue
		}
		return &DeniedError{
			Principal: principalName(p),
			URI:       slug + "://" + oldPath,
			Cap:       Write,
			Decision:  Decision{Rule: c.r, Reason: ReasonRule},
			Detail: fmt.Sprintf("moving the folder to %s://%s could change what rule %s (%s) decides for its contents",
				slug, newPath, c.r.Where(), c.r.URI),
			boundary: true,
		}
	}
	return nil
}

// neutral reports whether the rule decides the same for every old/X as for
// new/X (X non-empty).
func (c *crule) neutral(oldDir, newDir string) bool {
	for i := range c.alts {
		if !c.alts[i].neutral(oldDir, newDir) {
			return false
		}
	}
	return true
}

func (a *alt) neutral(oldDir, newDir string) bool {
	if !a.touchesBelow(oldDir) && !a.touchesBelow(newDir) {
		return true
	}
	switch a.m.kind {
	case mTree, mTreeName:
		return under(oldDir, a.m.base, true) && under(newDir, a.m.base, true)
	}
	return false
}

// touchesBelow reports whether the pattern might match some path strictly below dir.
func (a *alt) touchesBelow(dir string) bool {
	switch {
	case a.pat == "":
		return false
	case a.literal:
		return under(a.pat, dir, false)
	}
	return under(a.litDir, dir, true) || under(dir, a.litDir, false)
}
