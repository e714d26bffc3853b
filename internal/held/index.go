package held

import "strings"

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
// writing when they change it.
type nameIndex struct {
	refs  map[string]int                 // name → in how many of upper and gone (1 or 2)
	kids  map[string]map[string]struct{} // folder → its names in the union
	below map[string]int                 // rel → names in the union at or below it ("" counts all)
}

func newNameIndex() *nameIndex {
	return &nameIndex{refs: map[string]int{}, kids: map[string]map[string]struct{}{}, below: map[string]int{}}
}

// parentOf is the folder of p ("" for a top-level name).
func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

func (x *nameIndex) ref(p string) {
	x.refs[p]++
	if x.refs[p] > 1 {
		return
	}
	if p != "" {
		dir := parentOf(p)
		k := x.kids[dir]
		if k == nil {
			k = map[string]struct{}{}
			x.kids[dir] = k
		}
		k[p] = struct{}{}
	}
	for a := p; ; a = parentOf(a) {
		x.below[a]++
		if a == "" {
			break
		}
	}
}

func (x *nameIndex) unref(p string) {
	if x.refs[p]--; x.refs[p] > 0 {
		return
	}
	delete(x.refs, p)
	if p != "" {
		dir := parentOf(p)
		if k := x.kids[dir]; k != nil {
			delete(k, p)
			if len(k) == 0 {
				delete(x.kids, dir)
			}
		}
	}
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
	if _, ok := n.m[p]; !ok {
		n.idx.ref(p)
	}
	n.m[p] = v
}

func (n nameMap[V]) del(p string) {
	if _, ok := n.m[p]; ok {
		delete(n.m, p)
		n.idx.unref(p)
	}
}

// move renames from and everything below it to to.
func (n nameMap[V]) move(from, to string) {
	moved := map[string]V{}
	for k, v := range n.m {
		if k == from || strings.HasPrefix(k, from+"/") {
			moved[to+k[len(from):]] = v
			n.del(k)
		}
	}
	for k, v := range moved {
		n.set(k, v)
	}
}

// swap exchanges a and b with everything below them.
func (n nameMap[V]) swap(a, b string) {
	ma, mb := map[string]V{}, map[string]V{}
	for k, v := range n.m {
		switch {
		case k == a || strings.HasPrefix(k, a+"/"):
			ma[b+k[len(a):]] = v
			n.del(k)
		case k == b || strings.HasPrefix(k, b+"/"):
			mb[a+k[len(b):]] = v
			n.del(k)
		}
	}
	for k, v := range ma {
		n.set(k, v)
	}
	for k, v := range mb {
		n.set(k, v)
	}
}

// drop deletes p and everything below it.
func (n nameMap[V]) drop(p string) {
	for k := range n.m {
		if k == p || strings.HasPrefix(k, p+"/") {
			n.del(k)
		}
	}
}
