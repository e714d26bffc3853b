// Package pathidx indexes a set of slash-separated paths by parent, so
// that the paths below one are found without looking at every path: the
// watcher's watched folders (host paths) and git's record of nested
// checkouts (a source's relative paths) are both asked, at each folder
// removed or changed, for what lies below it.
package pathidx

// Kids is the index. Its zero value is empty. Every indexed path is
// linked to its parent, and that to its own, up to the top (""), so a
// path is found below every folder above it even where those folders are
// not indexed themselves (git's record holds a checkout's folder without
// the folders above it).
type Kids struct {
	links map[string]map[string]struct{} // parent → children on the way to an indexed path
	in    map[string]struct{}            // the indexed paths
}

// Parent is the path p was joined from with "/": "" for a top-level
// relative name and for "/" itself, "/" for "/a". It is always shorter
// than p, so Below's descent ends. (path.Dir would clean "//a/b", the
// name a folder of a root at "/" is joined to, into "/a".)
func Parent(p string) string {
	i := len(p) - 1
	for i >= 0 && p[i] != '/' {
		i--
	}
	switch {
	case p == "/" || i < 0:
		return ""
	case i == 0:
		return "/"
	}
	return p[:i]
}

// Add indexes p.
func (k *Kids) Add(p string) {
	if k.in == nil {
		k.in, k.links = map[string]struct{}{}, map[string]map[string]struct{}{}
	}
	k.in[p] = struct{}{}
	for c := p; c != ""; c = Parent(c) {
		up := Parent(c)
		set := k.links[up]
		if set == nil {
			set = map[string]struct{}{}
			k.links[up] = set
		}
		if _, ok := set[c]; ok {
			return // linked before, and so is everything above it
		}
		set[c] = struct{}{}
	}
}

// Remove drops p from the index (not what is indexed below it), and the
// links that led only to it.
func (k *Kids) Remove(p string) {
	delete(k.in, p)
	for c := p; c != ""; c = Parent(c) {
		if _, ok := k.in[c]; ok || len(k.links[c]) > 0 {
			return
		}
		up := Parent(c)
		delete(k.links[up], c)
		if len(k.links[up]) == 0 {
			delete(k.links, up)
		}
	}
}

// Below returns the indexed paths below p, at any depth (not p itself),
// in no particular order.
func (k *Kids) Below(p string) []string {
	var out []string
	stack := []string{p}
	for len(stack) > 0 {
		q := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for c := range k.links[q] {
			if _, ok := k.in[c]; ok {
				out = append(out, c)
			}
			stack = append(stack, c)
		}
	}
	return out
}

// Has reports whether p is indexed.
func (k *Kids) Has(p string) bool {
	_, ok := k.in[p]
	return ok
}

// Len is how many paths are indexed.
func (k *Kids) Len() int { return len(k.in) }

// links counts the parent-child links kept (tests).
func (k *Kids) linkCount() int {
	n := 0
	for _, set := range k.links {
		n += len(set)
	}
	return n
}
