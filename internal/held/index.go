package held

import (
	"strings"
	"sync/atomic"
)

// The layer's names — its own entries (upper) and the backing names it
// hides (gone) — are indexed by folder, so that a folder's link count
// (DirLinks) and "holds anything below" (View.Changed) cost the folder's
// own held names, not a walk over every held name of the source: after an
// agent's `npm install` into its layer, every folder stat of the
// principal's used to walk tens of thousands of names.
//
// upper and gone are nameMaps: reads go straight to the map (m), every
// write goes through set, del, move, swap or drop, which keep the shared
// index. Nothing else may write m.

// nameIndex indexes the union of upper and gone. Callers hold l.mu for
// writing when they change it. Whether a name is in the union is read
// from the two maps themselves (inUnion), so a name in both is indexed
// once and leaves the index only when it leaves both.
type nameIndex struct {
	inUnion func(p string) bool
	kids    map[string]map[string]struct{} // folder → its names in the union
	below   map[string]int                 // rel → names in the union at or below it ("" counts all)
	// n is below[""], for the bound (Store.used), which reads it without
	// the layer's lock.
	n atomic.Int64
}

func newNameIndex(inUnion func(string) bool) *nameIndex {
	return &nameIndex{inUnion: inUnion, kids: map[string]map[string]struct{}{}, below: map[string]int{}}
}

// parentOf is the folder of p ("" for a top-level name).
func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// add indexes p, which has just entered the union.
func (x *nameIndex) add(p string) {
	if p != "" {
		dir := parentOf(p)
		k := x.kids[dir]
		if k == nil {
			k = map[string]struct{}{}
			x.kids[dir] = k
		}
		k[p] = struct{}{}
	}
	x.n.Add(1)
	for a := p; ; a = parentOf(a) {
		x.below[a]++
		if a == "" {
			break
		}
	}
}

// remove unindexes p, which has just left the union.
func (x *nameIndex) remove(p string) {
	if p != "" {
		dir := parentOf(p)
		if k := x.kids[dir]; k != nil {
			delete(k, p)
			if len(k) == 0 {
				delete(x.kids, dir)
			}
		}
	}
	x.n.Add(-1)
	for a := p; ; a = parentOf(a) {
		if x.below[a]--; x.below[a] <= 0 {
			delete(x.below, a)
		}
		if a == "" {
			break
		}
	}
}

// children returns the union's names directly in folder rel (read only).
func (x *nameIndex) children(rel string) map[string]struct{} { return x.kids[rel] }

// holdsBelow reports whether the union has rel or a name below it.
func (x *nameIndex) holdsBelow(rel string) bool { return x.below[rel] > 0 }

// nameMap is upper or gone: a map whose writes keep the layer's index.
type nameMap[V any] struct {
	m   map[string]V // read freely; write only through the methods
	idx *nameIndex
}

func newNameMap[V any](idx *nameIndex) nameMap[V] {
	return nameMap[V]{m: map[string]V{}, idx: idx}
}

func (n nameMap[V]) set(p string, v V) {
	if !n.idx.inUnion(p) {
		n.idx.add(p)
	}
	n.m[p] = v
}

func (n nameMap[V]) del(p string) {
	if _, ok := n.m[p]; ok {
		delete(n.m, p)
		if !n.idx.inUnion(p) {
			n.idx.remove(p)
		}
	}
}

func (n nameMap[V]) move(from, to string) { moveWith(n.m, from, to, n.deep(from), n.set, n.del) }
func (n nameMap[V]) swap(a, b string)     { swapWith(n.m, a, b, n.deep(a) || n.deep(b), n.set, n.del) }
func (n nameMap[V]) drop(p string)        { dropWith(n.m, p, n.deep(p), n.del) }

// deep reports whether the union, and so n, may have names below p.
func (n nameMap[V]) deep(p string) bool {
	self := 0
	if n.idx.inUnion(p) {
		self = 1
	}
	return n.idx.below[p] > self
}

// pathMap is a map by path whose writes count, for each folder, the keys
// below it, so that dropping, moving or swapping a name with nothing
// below it costs that name, not a walk over every key: the layer's
// base, from, since and sizes. With each removal walking them all, LTP's
// linkat02 — 65,000 hard links to one file in a held folder, then
// removed one by one — took more than ten minutes to remove them (1 ms
// a name at 50,000 held names, BenchmarkRemoveAmongHeld).
type pathMap[V any] struct {
	m     map[string]V   // read freely; write only through the methods
	below map[string]int // folder → keys strictly below it
}

func newPathMap[V any]() pathMap[V] {
	return pathMap[V]{m: map[string]V{}, below: map[string]int{}}
}

func (n pathMap[V]) set(p string, v V) {
	if _, ok := n.m[p]; !ok {
		for a := p; a != ""; {
			a = parentOf(a)
			n.below[a]++
		}
	}
	n.m[p] = v
}

func (n pathMap[V]) del(p string) {
	if _, ok := n.m[p]; !ok {
		return
	}
	delete(n.m, p)
	for a := p; a != ""; {
		a = parentOf(a)
		if n.below[a]--; n.below[a] <= 0 {
			delete(n.below, a)
		}
	}
}

func (n pathMap[V]) deep(p string) bool   { return n.below[p] > 0 }
func (n pathMap[V]) move(from, to string) { moveWith(n.m, from, to, n.deep(from), n.set, n.del) }
func (n pathMap[V]) swap(a, b string)     { swapWith(n.m, a, b, n.deep(a) || n.deep(b), n.set, n.del) }
func (n pathMap[V]) drop(p string)        { dropWith(n.m, p, n.deep(p), n.del) }

// keysUnder lists p, when it is a key, and the keys below it.
func (n pathMap[V]) keysUnder(p string) []string {
	var out []string
	if _, ok := n.m[p]; ok {
		out = append(out, p)
	}
	if n.deep(p) {
		for k := range n.m {
			if k != p && under(k, p) {
				out = append(out, k)
			}
		}
	}
	return out
}
