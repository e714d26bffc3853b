package gitfs

import (
	"path"
	"sort"
)

// detectRenames turns pairs of a path deleted from and a path added to the
// index (against HEAD) into staged renames ("R  old -> new"), as git status
// does with its default rename detection. Only exact renames (same blob) are
// detected; a destination prefers a source with the same base name, then the
// first source in path order.
func (r *Repo) detectRenames(changes map[string]*change, added, deleted []string, snap *indexSnap, head map[string]headFile) {
	if len(added) == 0 || len(deleted) == 0 {
		return
	}
	sort.Strings(added)
	sort.Strings(deleted)
	// Blob ids of the added paths, from the index.
	addedHash := make(map[string]headFile, len(added))
	for _, e := range snap.entries {
		if e.Stage == 0 {
			if c, ok := changes[e.Name]; ok && c.x == 'A' {
				addedHash[e.Name] = headFile{e.Hash, e.Mode}
			}
		}
	}
	bySrc := map[string][]string{} // blob id → deleted paths
	for _, d := range deleted {
		h := head[d]
		if typeOf(h.mode) != 0 {
			continue // git renames regular files and symlinks only when types match; keep it simple
		}
		bySrc[h.hash.String()] = append(bySrc[h.hash.String()], d)
	}
	used := map[string]bool{}
	for _, a := range added {
		ah, ok := addedHash[a]
		if !ok || typeOf(ah.mode) != 0 {
			continue
		}
		cands := bySrc[ah.hash.String()]
		pick := ""
		for _, s := range cands {
			if !used[s] && path.Base(s) == path.Base(a) {
				pick = s
				break
			}
		}
		if pick == "" {
			for _, s := range cands {
				if !used[s] {
					pick = s
					break
				}
			}
		}
		if pick == "" {
			continue
		}
		used[pick] = true
		delete(changes, pick)
		c := changes[a]
		c.x = 'R'
		c.orig = pick
	}
}
