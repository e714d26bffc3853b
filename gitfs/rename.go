package gitfs

import (
	"io"
	"path"
	"sort"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// detectRenames turns pairs of a path deleted from and a path added to the
// index (against HEAD) into staged renames ("R  old -> new"), as git status
// does with its default rename detection (diffcore-rename.c, -M50%):
//
//  1. exact renames (same blob), a destination preferring a source with the
//     same base name;
//  2. regular files whose base name is unique among the remaining sources
//     and destinations, paired when at least 75% similar;
//  3. the remaining pairs by descending similarity of at least 50%, ties
//     going to a same base name.
//
// Inexact detection is skipped when sources × destinations exceed
// diff.renameLimit's default squared (1000 × 1000), as git does.
func (r *Repo) detectRenames(changes map[string]*change, added, deleted []string, snap *indexSnap, head map[string]headFile) {
	if len(added) == 0 || len(deleted) == 0 {
		return
	}
	sort.Strings(added)
	sort.Strings(deleted)
	addedFile := make(map[string]headFile, len(added))
	for _, a := range added {
		e := snap.entry(a)
		if e != nil {
			addedFile[a] = headFile{e.Hash, e.Mode}
		}
	}
	used := map[string]bool{}
	pair := func(src, dst string) {
		used[src] = true
		delete(changes, src)
		c := changes[dst]
		c.x = 'R'
		c.orig = src
	}

	// 1. Exact renames.
	bySrc := map[plumbing.Hash][]string{}
	for _, d := range deleted {
		if h := head[d]; typeOf(h.mode) != 2 {
			bySrc[h.hash] = append(bySrc[h.hash], d)
		}
	}
	var dsts []string
	for _, a := range added {
		af, ok := addedFile[a]
		if !ok || typeOf(af.mode) == 2 {
			continue
		}
		pick := ""
		for _, s := range bySrc[af.hash] {
			if used[s] || typeOf(head[s].mode) != typeOf(af.mode) {
				continue
			}
			if path.Base(s) == path.Base(a) {
				pick = s
				break
			}
			if pick == "" {
				pick = s
			}
		}
		if pick != "" {
			pair(pick, a)
			continue
		}
		if typeOf(af.mode) == 0 {
			dsts = append(dsts, a)
		}
	}
	var srcs []string
	for _, d := range deleted {
		if !used[d] && typeOf(head[d].mode) == 0 {
			srcs = append(srcs, d)
		}
	}
	if len(srcs) == 0 || len(dsts) == 0 || len(srcs)*len(dsts) > maxRenameMatrix {
		return
	}

	// Contents and span histograms, loaded lazily.
	type blob struct {
		data  []byte
		spans []span
		err   bool
	}
	blobs := map[plumbing.Hash]*blob{}
	load := func(h plumbing.Hash) *blob {
		if b, ok := blobs[h]; ok {
			return b
		}
		b := &blob{}
		data, err := r.readBlob(h)
		if err != nil {
			b.err = true
		} else {
			b.data, b.spans = data, spanHashes(data)
		}
		blobs[h] = b
		return b
	}
	score := func(src, dst string, min int) int {
		sb, db := load(head[src].hash), load(addedFile[dst].hash)
		if sb.err || db.err {
			return 0
		}
		return similarity(sb.data, db.data, sb.spans, db.spans, min)
	}

	// 2. Unique base names.
	srcBase, dstBase := map[string]int{}, map[string]int{}
	for _, s := range srcs {
		srcBase[path.Base(s)]++
	}
	for _, d := range dsts {
		dstBase[path.Base(d)]++
	}
	srcByBase := map[string]string{}
	for _, s := range srcs {
		srcByBase[path.Base(s)] = s
	}
	done := map[string]bool{}
	for _, d := range dsts {
		b := path.Base(d)
		if srcBase[b] != 1 || dstBase[b] != 1 {
			continue
		}
		s := srcByBase[b]
		if score(s, d, minRenameScore) >= minBasenameScore {
			pair(s, d)
			done[d] = true
		}
	}

	// 3. Best remaining matches.
	type cand struct {
		score, name, di, si int
	}
	var cands []cand
	for di, d := range dsts {
		if done[d] {
			continue
		}
		for si, s := range srcs {
			if used[s] {
				continue
			}
			if sc := score(s, d, minRenameScore); sc >= minRenameScore {
				name := 0
				if path.Base(s) == path.Base(d) {
					name = 1
				}
				cands = append(cands, cand{sc, name, di, si})
			}
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.score != b.score {
			return a.score > b.score
		}
		if a.name != b.name {
			return a.name > b.name
		}
		if a.di != b.di {
			return a.di < b.di
		}
		return a.si < b.si
	})
	for _, c := range cands {
		s, d := srcs[c.si], dsts[c.di]
		if used[s] || done[d] {
			continue
		}
		pair(s, d)
		done[d] = true
	}
}

// readBlob returns a blob's content.
func (r *Repo) readBlob(h plumbing.Hash) ([]byte, error) {
	r.objMu.Lock()
	defer r.objMu.Unlock()
	b, err := object.GetBlob(r.objects(), h)
	if err != nil {
		return nil, err
	}
	rc, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}
