package gitfs

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
)

// history holds what changes how git reads commits and objects: replace
// refs (refs/replace/<id>, unless core.useReplaceRefs is false or
// GIT_NO_REPLACE_OBJECTS is set), the commits a shallow clone cut off
// ("shallow": no parents) and info/grafts. Guarded by Repo.objMu.
type history struct {
	keys    [4]fileKey
	replace map[plumbing.Hash]plumbing.Hash
	grafts  map[plumbing.Hash][]plumbing.Hash // parents; empty for a shallow commit
}

// historyFiles are the files whose stat data decides whether history is
// current.
func (r *Repo) historyFiles() [4]string {
	return [4]string{
		filepath.Join(r.commonDir, "refs", "replace"),
		filepath.Join(r.commonDir, "packed-refs"),
		filepath.Join(r.commonDir, "shallow"),
		filepath.Join(r.commonDir, "info", "grafts"),
	}
}

// refreshHistory re-reads replace refs, shallow and grafts when their
// files changed. Callers hold objMu.
func (r *Repo) refreshHistory() {
	files := r.historyFiles()
	var keys [4]fileKey
	for i, f := range files {
		keys[i] = statKey(f)
	}
	if r.hist != nil && r.hist.keys == keys {
		return
	}
	h := &history{keys: keys}
	useReplace := os.Getenv("GIT_NO_REPLACE_OBJECTS") == "" && r.conf().getBool("core", "", "usereplacerefs", true)
	if useReplace {
		h.replace = r.replaceRefs()
	}
	h.grafts = map[plumbing.Hash][]plumbing.Hash{}
	if b, err := readRegular(files[3]); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || strings.HasPrefix(f[0], "#") || !plumbing.IsHash(f[0]) {
				continue
			}
			parents := []plumbing.Hash{}
			ok := true
			for _, p := range f[1:] {
				if !plumbing.IsHash(p) {
					ok = false
					break
				}
				parents = append(parents, plumbing.NewHash(p))
			}
			if ok {
				h.grafts[plumbing.NewHash(f[0])] = parents
			}
		}
	}
	if b, err := readRegular(files[2]); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if s := strings.TrimSpace(line); plumbing.IsHash(s) {
				h.grafts[plumbing.NewHash(s)] = []plumbing.Hash{}
			}
		}
	}
	if r.hist != nil {
		// Cached ahead/behind counts and trees may rest on what changed.
		r.status.mu.Lock()
		clear(r.status.aheadBehind)
		clear(r.status.heads)
		r.status.mu.Unlock()
		r.trees = newTreeCache(r.trees.max)
	}
	r.hist = h
}

// replaceRefs lists refs/replace/<id> → target, loose refs over packed.
func (r *Repo) replaceRefs() map[plumbing.Hash]plumbing.Hash {
	m := map[plumbing.Hash]plumbing.Hash{}
	if f, err := openRegular(filepath.Join(r.commonDir, "packed-refs"), false); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 4096), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if len(line) < 41 || line[0] == '#' || line[0] == '^' {
				continue
			}
			id, name, ok := bytes.Cut(line, []byte(" "))
			if n, found := strings.CutPrefix(string(name), "refs/replace/"); ok && found && plumbing.IsHash(n) && plumbing.IsHash(string(id)) {
				m[plumbing.NewHash(n)] = plumbing.NewHash(string(id))
			}
		}
		f.Close()
	}
	dir := filepath.Join(r.commonDir, "refs", "replace")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !plumbing.IsHash(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		b, err := readRegular(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if strings.HasPrefix(s, "ref:") {
			if t, ok, _ := r.resolveRefLocked(strings.TrimSpace(s[4:])); ok {
				m[plumbing.NewHash(e.Name())] = t
			}
			continue
		}
		if plumbing.IsHash(s) {
			m[plumbing.NewHash(e.Name())] = plumbing.NewHash(s)
		}
	}
	return m
}

// replaced returns the object git reads in place of h (following up to
// five replacements, as git does).
func (h *history) replaced(id plumbing.Hash) plumbing.Hash {
	if h == nil || len(h.replace) == 0 {
		return id
	}
	for range 5 {
		t, ok := h.replace[id]
		if !ok {
			break
		}
		id = t
	}
	return id
}

// parents returns the grafted parents of commit id, and whether it has a
// graft (or is a shallow boundary).
func (h *history) parents(id plumbing.Hash) ([]plumbing.Hash, bool) {
	if h == nil {
		return nil, false
	}
	p, ok := h.grafts[id]
	return p, ok
}
