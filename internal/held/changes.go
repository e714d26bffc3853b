package held

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	udiff "github.com/aymanbagabas/go-udiff"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/rawname"
	"github.com/neuralis/neuralisfs/internal/reserved"
	"github.com/neuralis/neuralisfs/mounts"
)

// Change is one unit a reviewer approves or rejects: a file created,
// modified, replaced or deleted, a folder made or deleted with everything
// in it, or a rename (of a file, or of a folder with everything in it).
type Change struct {
	ID        string    `json:"id"`
	Principal string    `json:"principal"`
	Slug      string    `json:"source"`
	URI       string    `json:"uri"`
	Op        string    `json:"op"` // create, modify, chmod, replace, delete, mkdir, rmdir, rename, symlink, mknod
	Path      string    `json:"path"`
	From      string    `json:"from,omitempty"` // rename: the backing path it came from
	Type      string    `json:"type"`           // file, dir, symlink, special
	Size      int64     `json:"size"`
	Mode      uint32    `json:"mode"`
	Digest    string    `json:"digest,omitempty"` // held content (files)
	Base      Base      `json:"base"`
	Since     time.Time `json:"since"`
	// Inside lists what a folder unit carries (paths below Path).
	Inside []string `json:"inside,omitempty"`
	// Links lists the held names outside this unit that are hard links
	// of a regular file in it (one file of the layer with several
	// names): they belong to other units, or to none (a backing file
	// copied up unchanged for the link). Together groups the units
	// that must be approved or rejected at once, and Apply lands the
	// names as one file.
	Links []string `json:"links,omitempty"`
	// removed: backing paths the unit hides (rename origin, replaced
	// target, deleted path).
	removed []string
	// root: a folder unit, which carries every held name below Path.
	root bool
	// src: where a rename takes its backing file from when an approval
	// moved the file aside first (Stage); From otherwise.
	src string
	// checked: Stage checked the unit against the backing files with
	// the rest of its approval, before it moved anything.
	checked bool
	// fps: what the names the unit carries were (their part of its id)
	// when Stage checked it with units that overlap it: one of those,
	// landed first, can take a name both carry (a rename's origin, gone,
	// inside a folder renamed onto its parent: mv a c; mv b/a c/a; mv
	// c/a a; rmdir b; mv c b), and the id of the other changed, its
	// approval refused as changed since listed, its file left aside.
	fps map[string]string
	// seenAt and seenFrom: the backing Path and (a rename's) From as
	// Stage found them just before its check (nil when it did not
	// check): Apply, which checks a Stage'd unit no more, lands it only
	// where they have not moved since (writeFile, renameOver).
	seenAt, seenFrom *checkedFile
	// froms: the backing paths names inside a folder unit were renamed
	// from (a folder moved into a folder the principal made).
	froms []string
}

func typeName(t uint32) string {
	switch t {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "special"
}

// Changes lists the layer's held changes, ordered by path.
func (l *Layer) Changes(lower *mounts.Root) []Change {
	l.warmDigests()
	l.mu.RLock()
	defer l.mu.RUnlock()
	origins := map[string]bool{}
	for p, f := range l.from.m {
		if f != p { // renamed away and back: its own name, no origin
			origins[f] = true
		}
	}
	var out []Change
	// roots are the folder units, by path, with their place in out:
	// everything below one belongs to it. None is below another (a name
	// below one is not a unit), and paths come in order, a folder before
	// what is in it, so a name's unit is the one of its folders that is
	// a root. Before, each name was checked against every root, and each
	// name inside one against every unit: an agent's 2,000 new top-level
	// folders of 4 files took 0.5 s to list, 3 times what they take now
	// (BenchmarkChangesManyUnits), growing with the square of their number.
	roots := map[string]int{}
	rootOf := func(p string) (int, bool) {
		for a := parentOf(p); a != ""; a = parentOf(a) {
			if i, ok := roots[a]; ok {
				return i, true
			}
		}
		return 0, false
	}
	paths := make([]string, 0, len(l.upper.m)+len(l.gone.m))
	for p := range l.upper.m {
		paths = append(paths, p)
	}
	for p := range l.gone.m {
		if _, up := l.upper.m[p]; !up {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	// Names are read in path order through one cursor over tree/'s
	// folders (their stats, attributes and link counts): a folder's
	// names cost one openat2 for the folder.
	d := l.up.Dirs()
	defer d.Close()
	for _, p := range paths {
		// Only a folder unit carries what is below it: a chmod of a
		// folder above one (X, then mkdir X/d) carried X/d's names too,
		// and their other names as links, which Apply does not count for
		// a chmod, so approving it failed as changed since listed every
		// time, and stopped --all (found by a data-integrity pass).
		if i, ok := rootOf(p); ok {
			out[i].Inside = append(out[i].Inside, p)
			if f, ok := l.from.m[p]; ok && f != p {
				out[i].froms = append(out[i].froms, f)
				if !l.heldAgainLocked(f) {
					// Moved here from a backing name nothing took
					// since: the unit carries its removal (Apply
					// removes it, forgetting shows it again). A name
					// held again is the unit's that holds it.
					out[i].removed = append(out[i].removed, f)
				}
			}
			continue
		}
		c := Change{Principal: l.Principal, Slug: l.Slug, URI: l.Slug + "://" + p, Path: p, Since: l.since.m[p]}
		t, up := l.upper.m[p]
		if !up {
			if origins[p] {
				continue // shown with its rename
			}
			b := l.gone.m[p]
			c.Op, c.Base, c.Type, c.Size, c.Mode = "delete", b, typeName(b.Type), b.Size, b.Mode
			if b.Type == unix.S_IFDIR {
				c.Op, c.root = "rmdir", true
			}
			c.removed = []string{p}
		} else {
			st, err := d.Lstat(p)
			if err != nil {
				continue
			}
			c.Type, c.Size, c.Mode = typeName(t), st.Size, st.Mode&0o7777
			if t == unix.S_IFREG {
				c.Digest = l.upperDigest(p, &st)
			} else if t == unix.S_IFLNK {
				if tg, err := l.up.Readlink(p); err == nil {
					c.Digest = digestBytes(tg)
				}
			}
			gb, replaced := l.gone.m[p]
			switch from, renamed := l.from.m[p]; {
			case renamed && from != p: // renamed back to its own name: a change of that name
				c.Op, c.From, c.Base = "rename", from, l.gone.m[from]
				c.removed = []string{from}
				if replaced {
					c.removed = append(c.removed, p)
				}
				if t == unix.S_IFDIR || replaced && gb.Type == unix.S_IFDIR {
					// A folder moved, or one deleted (with what was
					// deleted in it) at p: approving the rename removes
					// the backing folder there.
					c.root = true
				}
			case replaced:
				c.Op, c.Base = "replace", gb
				c.removed = []string{p}
				if t == unix.S_IFDIR || gb.Type == unix.S_IFDIR {
					// A folder made, or one deleted (with what was
					// deleted in it), at p.
					c.root = true
				}
			default:
				b, copied := l.base.m[p]
				switch {
				case !copied || b.Absent:
					c.Op, c.Base = "create", Base{Absent: true}
					switch t {
					case unix.S_IFDIR:
						c.Op, c.root = "mkdir", true
					case unix.S_IFLNK:
						c.Op = "symlink"
					case unix.S_IFREG:
					default:
						c.Op = "mknod"
					}
				case b.Type != t:
					c.Op, c.Base = "replace", b
				case c.Digest != b.Digest:
					c.Op, c.Base = "modify", b
				case c.Mode != b.Mode || st.Uid != b.UID || st.Gid != b.GID || hasXattrs(t) && upperXattrsIn(d, p, st.Mode&unix.S_IFMT) != b.Xattrs:
					c.Op, c.Base = "chmod", b
				default:
					continue // copied up, not changed (yet)
				}
			}
		}
		if c.root {
			roots[p] = len(out)
		}
		out = append(out, c)
	}
	out = carryOriginDeletes(out)
	if len(l.aside) > 0 {
		// A rename whose file an approval moved aside and could not put
		// back (its old name taken since: half a swap, found in conflict
		// or cut short by a kill) goes on from there. Before, it took
		// whatever was at its old name: forced, it moved the other
		// half's file and removed it.
		for tmp, from := range l.aside {
			for i := range out {
				// Only the rename whose file it is: one of a later file
				// at that name, once the first was rejected, went on from
				// the stale one (a verification pass: false conflicts,
				// and forced, the later file stayed where it was). (The
				// half of a swap lost its base when the other half
				// landed: that one replaced its old name.)
				b := out[i].Base
				if out[i].Op == "rename" && out[i].From == from && (b.Type == 0 && !b.Absent || same(lower, tmp, b)) {
					out[i].src = tmp
				}
			}
		}
	}
	groups := l.linkGroupsLocked(d)
	for i := range out {
		out[i].Links = linksOf(groups, out[i].Path, out[i].Inside)
		out[i].ID = l.changeIDLocked(d, out[i], out[i].Inside)
	}
	l.memoMu.Lock()
	for p := range l.memo {
		if _, ok := l.upper.m[p]; !ok {
			delete(l.memo, p)
		}
	}
	l.memoMu.Unlock()
	return out
}

// movedOrigins lists the backing names a folder unit moved into it that
// its approval removes: each once, none below another, none below the
// unit's own path (a name it replaces is its own), and only those
// Changes gave it to remove: none the principal held again when it was
// listed (a folder it made at the old name replaces the backing one, and
// removing it here, after that unit landed, removed what it had landed).
func movedOrigins(c Change) []string {
	os := slices.Clone(c.froms)
	sort.Strings(os)
	var out []string
	for _, o := range os {
		if !slices.Contains(c.removed, o) || o == c.Path || strings.HasPrefix(o, c.Path+"/") {
			continue
		}
		if c.Op == "rename" && (o == c.From || strings.HasPrefix(o, c.From+"/")) {
			// A rename moves its origin, and what is in it, itself; a
			// name moved into the renamed folder from elsewhere is its
			// to remove (before, approving left it where it came from).
			continue
		}
		if n := len(out); n > 0 && (out[n-1] == o || strings.HasPrefix(o, out[n-1]+"/")) {
			continue
		}
		out = append(out, o)
	}
	return out
}

// heldAgainLocked reports whether the backing name o is one the principal
// holds again, or lies below a backing folder it replaced with one of
// its own: the backing name then means what that unit lands (l.mu held).
func (l *Layer) heldAgainLocked(o string) bool {
	if _, held := l.upper.m[o]; held {
		return true
	}
	for i := len(o) - 1; i > 0; i-- {
		if o[i] == '/' {
			_, held := l.upper.m[o[:i]]
			_, gone := l.gone.m[o[:i]]
			if held && gone {
				return true
			}
		}
	}
	return false
}

// carryOriginDeletes gives each rename of a folder the deletions the
// principal made in it before it renamed it (gone names below its
// origin): approving the rename moves the backing folder with them and
// removes them at the new name, after which a unit of their own would
// find nothing at the old name and fail as a conflict, the rename already
// made. out is in path order; the result too.
func carryOriginDeletes(out []Change) []Change {
	// A deletion goes with the first folder rename, in path order, that
	// came from one of its folders: found through the deletion's folders
	// rather than by checking every pair of units.
	renamed := map[string]int{} // origin → the first folder rename from it
	for i, r := range out {
		if r.Op == "rename" && r.root && r.Type == "dir" {
			if _, ok := renamed[r.From]; !ok {
				renamed[r.From] = i
			}
		}
		// A folder moved into a folder unit (mkdir a; mv c a/c): the
		// unit removes its backing origin, with what was deleted in it.
		// Before, such a deletion was a unit of its own, which found
		// nothing once the folder unit had landed: a conflict for ever.
		for _, f := range r.froms {
			if _, ok := renamed[f]; !ok && r.root {
				renamed[f] = i
			}
		}
	}
	if len(renamed) == 0 {
		return out
	}
	carried := make([]bool, len(out))
	for j, c := range out {
		if c.Op != "delete" && c.Op != "rmdir" {
			continue
		}
		i := -1
		for a := parentOf(c.Path); a != ""; a = parentOf(a) {
			if k, ok := renamed[a]; ok && (i < 0 || k < i) {
				i = k
			}
		}
		if i < 0 {
			continue
		}
		r := &out[i]
		r.Inside = append(append(r.Inside, c.Path), c.Inside...)
		r.removed = append(append(r.removed, c.Path), c.Inside...)
		carried[j] = true
	}
	keep := out[:0]
	for i, c := range out {
		if !carried[i] {
			keep = append(keep, c)
		}
	}
	return keep
}

// changeIDLocked names c and what it holds now (inside: the held names
// below a folder unit): the type, mode, owner, attributes and content of
// each. An id shown to a reviewer names what was shown: once the
// principal changes the unit, it has another id, and Apply refuses a
// change whose content moved since it was listed (l.mu held).
func (l *Layer) changeIDLocked(d *mounts.Dirs, c Change, inside []string) string {
	return l.idLocked(c, inside, func(h io.Writer, rel string) { l.fingerprint(d, h, rel) })
}

// idLocked is changeIDLocked with each name's part written by fp.
func (l *Layer) idLocked(c Change, inside []string, fp func(h io.Writer, rel string)) string {
	// Keyed: the id covers the held copy's content, which may hold what
	// the principal could not read (an append to a write-only file
	// copies the backing content up), and a plain hash let it test
	// guesses of that content against the id it is shown.
	var h hash.Hash
	if l.store != nil && l.store.idKey != nil {
		h = hmac.New(sha256.New, l.store.idKey)
	} else {
		h = sha256.New()
	}
	h.Write([]byte(c.Principal + "\x00" + c.Slug + "\x00" + c.Op + "\x00" + c.Path + "\x00" + c.From + "\x00"))
	fp(h, c.Path)
	if c.root {
		for _, p := range inside {
			fp(h, p)
		}
	}
	// Which other names it lands with: a link made or removed since
	// changes what approving it does.
	for _, p := range c.Links {
		fmt.Fprintf(h, "link\x00%s\x00", p)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// linkGroupsLocked maps each regular file of tree/ with more than one
// name (hard links made in the layer) to its names, sorted (l.mu held).
func (l *Layer) linkGroupsLocked(d *mounts.Dirs) map[uint64][]string {
	groups := map[uint64][]string{}
	var files []string
	for p, t := range l.upper.m {
		if linkable(t) {
			files = append(files, p)
		}
	}
	sort.Strings(files) // folder by folder, for d
	for _, p := range files {
		st, err := d.Lstat(p)
		if err != nil || st.Nlink < 2 {
			continue
		}
		groups[st.Ino] = append(groups[st.Ino], p)
	}
	for ino, names := range groups {
		if len(names) < 2 {
			delete(groups, ino)
			continue
		}
		sort.Strings(names)
	}
	return groups
}

// unitLinksLocked is linksOf(l.linkGroupsLocked(), path, inside) for
// one unit, its approval's check: the layer's other names are stat'ed
// only when a name of the unit has more than one link. Before, every
// approval stat'ed every held file under the lock (approving 2,000
// changed files one by one took 20 s, 9 of them there) (l.mu held).
func (l *Layer) unitLinksLocked(path string, inside []string) []string {
	for _, p := range append([]string{path}, inside...) {
		if t := l.upper.m[p]; !linkable(t) {
			continue
		}
		if st, err := l.up.Lstat(p); err == nil && st.Nlink >= 2 {
			d := l.up.Dirs()
			defer d.Close()
			return linksOf(l.linkGroupsLocked(d), path, inside)
		}
	}
	return nil
}

// linksOf lists the names in groups that share a file with path or one of
// inside (the names a unit holds) and are not among them, sorted.
func linksOf(groups map[uint64][]string, path string, inside []string) []string {
	if len(groups) == 0 {
		return nil
	}
	holds := map[string]bool{path: true}
	for _, p := range inside {
		holds[p] = true
	}
	var out []string
	for _, names := range groups {
		mine := false
		for _, n := range names {
			if holds[n] {
				mine = true
				break
			}
		}
		if !mine {
			continue
		}
		for _, n := range names {
			if !holds[n] {
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Together returns pick (indexes into all, the changes of one layer or
// of several, as Changes lists them) with every change that holds a name
// one of them links to, and so on: the names of one held file are
// approved or rejected together, so that they land as one file (or are
// withdrawn together). The result is in the order of all.
func Together(all []Change, pick []int) []int {
	in := make([]bool, len(all))
	for _, i := range pick {
		in[i] = true
	}
	holder := func(c Change, p string) bool {
		if p == c.Path {
			return true
		}
		for _, x := range c.Inside {
			if x == p {
				return true
			}
		}
		return false
	}
	for grew := true; grew; {
		grew = false
		for i, c := range all {
			if !in[i] {
				continue
			}
			for j, o := range all {
				if in[j] || o.Principal != c.Principal || o.Slug != c.Slug {
					continue
				}
				if movesFrom(c, o) || movesFrom(o, c) {
					in[j], grew = true, true
					continue
				}
				for _, p := range c.Links {
					if holder(o, p) {
						in[j], grew = true, true
						break
					}
				}
			}
		}
	}
	var out []int
	for i := range all {
		if in[i] {
			out = append(out, i)
		}
	}
	return out
}

// movesFrom reports whether r is a rename whose backing origin o replaces,
// removes or renames something over (o's path is the origin or a folder
// above it): approving o first would destroy the file r moves, and
// rejecting one of them alone would leave the other meaning something
// else, so the two go together (Together), and Stage moves r's file
// aside before either is made.
func movesFrom(r, o Change) bool {
	if r.Path == o.Path {
		return false
	}
	if r.Op == "rename" && (overlaps(r.From, o) || carries(o, r.From)) {
		return true
	}
	for _, x := range r.froms {
		// A backing name moved into a folder unit from a folder o moves:
		// o lands first, so that r's removal of it finds it gone and
		// neither finds the other's work as a change since the check.
		if overlaps(x, o) || carries(o, x) {
			return true
		}
	}
	return false
}

// carries reports whether o renames a backing folder above x (mv d d0
// before mv d0/b.txt x.txt), or removes one it moved into itself (mkdir
// a; mv c a/c before mv a/c/b b): landed first, o would take x along, or
// remove it, and its folder would no longer hold what left it.
func carries(o Change, x string) bool {
	if o.Op == "rename" && o.Type == "dir" && strings.HasPrefix(x, o.From+"/") {
		return true
	}
	for _, f := range o.froms {
		if strings.HasPrefix(x, f+"/") {
			return true
		}
	}
	return false
}

// overlaps reports whether o's path is the backing path x or a folder
// above it.
func overlaps(x string, o Change) bool {
	return o.Path == x || strings.HasPrefix(x, o.Path+"/")
}

// Stage prepares units of this layer approved together (cs, as Together
// groups them) whose backing paths overlap: a rename whose origin
// another of them replaces or removes — the principal renamed a to b and
// then wrote a new a, swapped a and b, or renamed a/x out of a and
// deleted a. Each unit is checked against the backing files first, all
// of them before anything moves (force skips the check, as for Apply);
// then the file each such rename moves is renamed aside, to a name of
// its own at the top of the source, so that the others can replace or
// remove its old name, and the rename takes it from there. It returns cs
// in the order to apply them (a folder unit before a rename out of it)
// and restore, which puts back what was moved aside and not yet applied
// (after a failure). Units that do not overlap are returned as they are,
// with a restore that does nothing.
func (l *Layer) Stage(lower *mounts.Root, cs []Change, force bool) ([]Change, func() error, error) {
	nothing := func() error { return nil }
	moved := map[string]bool{} // renames (by path) whose file goes aside
	first := map[string]bool{} // folder units a rename moves a file out of
	overlap := false
	// group: the units that overlap, by their first one's index in cs.
	group := make([]int, len(cs))
	for i := range group {
		group[i] = i
	}
	var root func(i int) int
	root = func(i int) int {
		for group[i] != i {
			i = group[i]
		}
		return i
	}
	for i, r := range cs {
		if r.Op == "rename" && strings.HasPrefix(r.From, r.Path+"/") {
			// Out of the folder it replaces (mv c/a c, once c was
			// emptied): removing the folder first took the file with
			// it, and the rename failed.
			overlap, moved[r.Path] = true, true
		}
		for j, o := range cs {
			if o.Principal != r.Principal || o.Slug != r.Slug || !movesFrom(r, o) {
				continue
			}
			if a, b := root(i), root(j); a != b {
				group[max(a, b)] = min(a, b)
			}
			overlap = true
			if r.Op == "rename" && (overlaps(r.From, o) || carries(o, r.From)) {
				moved[r.Path] = true
			}
			if o.root {
				first[o.Path] = true
			}
		}
	}
	if !overlap {
		return cs, nothing, nil
	}
	// A folder unit forgets what was gone below it, which is in the id
	// of a rename out of it: the folder goes first, so that the rename
	// keeps the id it was listed with. The renames whose files go aside
	// come next: one found in conflict as it lands is put back where it
	// was, which the units landing at its old name would have taken
	// (before, a new a.txt landed first, and the old one, once its
	// rename failed, stayed at its name aside, hidden).
	rank := func(c Change) int {
		switch {
		case first[c.Path]:
			return 0
		case c.Op == "rename" && moved[c.Path]:
			return 1
		}
		return 2
	}
	// Group by group, each whole before the next: a unit that fails
	// leaves the others as they were, or landed. Before, every group's
	// folder units landed first, then every group's renames, and one
	// group's failure left another's file aside, its old name taken by
	// its own folder unit (a data-integrity pass).
	idx := make([]int, len(cs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(i, j int) int {
		if gi, gj := root(i), root(j); gi != gj {
			return gi - gj
		}
		return rank(cs[i]) - rank(cs[j])
	})
	out := make([]Change, 0, len(cs))
	for k := 0; k < len(idx); {
		// Among a group's folder units, one that removes a backing
		// name another moved into it goes before that one (rmdir c
		// before a folder made with c/b moved in: the other way round
		// the folder forgot c/b, which rmdir c was listed with, and its
		// approval failed as changed).
		var folders []Change
		g := root(idx[k])
		for ; k < len(idx) && root(idx[k]) == g && rank(cs[idx[k]]) == 0; k++ {
			folders = append(folders, cs[idx[k]])
		}
		if len(folders) <= 64 { // a square of them, and more a pass: many are rare
			folders = orderFolders(folders)
		}
		out = append(out, folders...)
		for ; k < len(idx) && root(idx[k]) == g; k++ {
			out = append(out, cs[idx[k]])
		}
	}
	l.mu.RLock()
	d := l.up.Dirs()
	for i, c := range out {
		if !c.root {
			continue
		}
		out[i].fps = map[string]string{}
		for _, p := range c.Inside {
			var b strings.Builder
			l.fingerprint(d, &b, p)
			out[i].fps[p] = b.String()
		}
	}
	d.Close()
	l.mu.RUnlock()
	if !force {
		for i, c := range out {
			// Looked at before the check, so that what lands after it
			// can tell whether they moved since (a write of the owner's
			// to a rename's target in between was replaced with no
			// conflict said: 9 of 100 runs of a data-integrity pass).
			out[i].seenAt = look(lower, c.Path)
			if c.Op == "rename" {
				out[i].seenFrom = look(lower, cmp.Or(c.src, c.From))
			}
			if err := l.Conflict(lower, c); err != nil {
				return nil, nil, err
			}
		}
	}
	type aside struct{ from, tmp string }
	var done []aside
	restore := func() error {
		var errs []error
		for _, a := range done {
			if err := l.putBack(lower, a.tmp, a.from); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	var rnd [6]byte
	// The deepest origins go aside first: one below another's folder
	// would go with it otherwise.
	order := make([]int, len(out))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int {
		return strings.Count(out[j].From, "/") - strings.Count(out[i].From, "/")
	})
	for _, i := range order {
		out[i].checked = true
		if out[i].Op != "rename" || !moved[out[i].Path] || out[i].src != "" {
			continue // (already aside: an earlier approval's, Changes)
		}
		rand.Read(rnd[:])
		tmp := reserved.StagingPrefix + hex.EncodeToString(rnd[:])
		err := l.noteAside(tmp, out[i].From)
		if err == nil {
			err = lower.Rename(out[i].From, tmp, unix.RENAME_NOREPLACE)
		}
		if err != nil {
			if rerr := restore(); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return nil, nil, fmt.Errorf("moving %s://%s aside to approve %s: %w", l.Slug, out[i].From, out[i].URI, err)
		}
		done = append(done, aside{out[i].From, tmp})
		out[i].src = tmp
		if f := out[i].seenFrom; f != nil && !f.absent && f.st.Mode&unix.S_IFMT != unix.S_IFDIR {
			// What moved aside is what the check found (a file: a
			// folder's own time moves with what staging writes there).
			if st, err := lower.Lstat(tmp); err != nil || !f.unchanged(&st, false) {
				err := error(&ConflictError{URI: l.Slug + "://" + out[i].From})
				if rerr := restore(); rerr != nil {
					err = errors.Join(err, rerr)
				}
				return nil, nil, err
			}
		}
	}
	// Nothing is at the names moved aside now: a unit landing there
	// finds them free unless someone took them since.
	for i := range out {
		for _, a := range done {
			if s := out[i].seenAt; s != nil && (s.rel == a.from || strings.HasPrefix(s.rel, a.from+"/")) {
				out[i].seenAt = &checkedFile{rel: s.rel, absent: true}
			}
		}
	}
	return out, restore, nil
}

// orderFolders orders folder units so that o comes before r wherever
// r moved into it a backing name o removes (movesFrom), keeping their
// order otherwise (and where the units move from each other both ways).
func orderFolders(us []Change) []Change {
	out := make([]Change, 0, len(us))
	placed := make([]bool, len(us))
	for len(out) < len(us) {
		next := -1
		for i, r := range us {
			if placed[i] {
				continue
			}
			ready := true
			for j, o := range us {
				if !placed[j] && j != i && movesFrom(r, o) && !movesFrom(o, r) {
					ready = false
					break
				}
			}
			if ready {
				next = i
				break
			}
		}
		if next < 0 { // a cycle: as they came
			for i := range us {
				if !placed[i] {
					next = i
					break
				}
			}
		}
		placed[next] = true
		out = append(out, us[next])
	}
	return out
}

// noteAside records, durably and before the rename, that the backing
// from is about to be moved aside to tmp: a daemon killed before the
// approval lands or restores it finds the record at its next start
// (RecoverAside), since the name tmp is hidden from everyone and says
// nothing of where the file came from.
func (l *Layer) noteAside(tmp, from string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log(record{K: "aside", P: tmp, F: from})
	if l.meta == nil {
		return nil
	}
	return l.meta.Sync()
}

// putBack renames the backing tmp, moved aside by Stage, back to from,
// unless it is gone (landed) or from is taken, and forgets the record
// when tmp is no longer there.
func (l *Layer) putBack(lower *mounts.Root, tmp, from string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := lower.Lstat(tmp); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			l.log(record{K: "unaside", P: tmp})
			return nil
		}
		return err
	}
	err := lower.Rename(tmp, from, unix.RENAME_NOREPLACE)
	if errors.Is(err, syscall.ENOENT) {
		// Its folder was removed by a unit approved with it, which
		// landed before the rename was found in conflict (mv d/x y; rm
		// -r d; the owner wrote y meanwhile): the folder is made again,
		// like the one above it, so that the file is back at its name.
		// Before, it stayed aside, hidden, and its rename a conflict
		// for ever (a data-integrity pass: 10 of 150 runs).
		made, merr := mkdirsLike(lower, parentOf(from))
		if merr == nil {
			err = lower.Rename(tmp, from, unix.RENAME_NOREPLACE)
		}
		for _, d := range made {
			// The principal deleted it, and that had landed: deleted
			// again, it is a unit of its own once more, so that it
			// goes once the rename lands (before, an empty folder the
			// principal had removed was left).
			b := baseOf(lower, d)
			l.log(record{K: "gone", P: d, B: &b})
		}
	}
	if err != nil {
		return fmt.Errorf("%s://%s, moved aside by an approval, is still at %s (hidden on the mount) and could not go back: %w", l.Slug, from, path.Join(lower.Path(), tmp), err)
	}
	l.log(record{K: "unaside", P: tmp})
	return nil
}

// mkdirsLike makes the backing folder dir and those above it that are
// missing, each with the mode and owner of the folder above it, and
// returns those it made, the top one first.
func mkdirsLike(lower *mounts.Root, dir string) ([]string, error) {
	if dir == "" {
		return nil, nil
	}
	if _, err := lower.Lstat(dir); err == nil {
		return nil, nil
	}
	made, err := mkdirsLike(lower, parentOf(dir))
	if err != nil {
		return made, err
	}
	up, err := lower.Lstat(parentOf(dir))
	if err != nil {
		return made, err
	}
	_, err = lower.Mkdir(dir, up.Mode&0o7777, int(up.Uid), int(up.Gid))
	if err == nil {
		made = append(made, dir)
	} else if errors.Is(err, syscall.EEXIST) {
		err = nil
	}
	return made, err
}

// RecoverAside puts back the backing files an approval moved aside and
// neither landed nor put back: the daemon was killed in the middle of it.
// The principal's changes they belong to stay held, as before that
// approval. A file whose old name has been taken since stays where it
// is, and the error says where. The files it was landing under names of
// their own (tmpIn) go. The daemon calls it at start.
func (l *Layer) RecoverAside(lower *mounts.Root) error {
	l.mu.Lock()
	var todo [][2]string
	for tmp, from := range l.aside {
		todo = append(todo, [2]string{tmp, from})
	}
	var errs []error
	for tmp := range l.temps {
		if err := lower.Unlink(tmp); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("removing %s, left by an approval that did not finish: %w", path.Join(lower.Path(), tmp), err))
			continue
		}
		l.log(record{K: "untemp", P: tmp})
	}
	l.mu.Unlock()
	for _, a := range todo {
		if err := l.putBack(lower, a[0], a[1]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := l.finishApprovals(lower); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// finishApprovals settles the units an approval was landing when the
// daemon was killed (Apply's "approving" records). Apply lands a unit in
// the backing files and then forgets the principal's copy of it; killed
// in between, the unit was both landed and held, and as its backing
// files had moved from its base, the next approval refused it as a
// conflict. A unit whose backing files are now exactly what it holds
// (landedLocked) landed: the layer forgets it, as Apply would have. Any
// other stays held, to be approved (with --force where its backing files
// moved) or rejected; nothing is landed or removed here.
func (l *Layer) finishApprovals(lower *mounts.Root) error {
	l.mu.RLock()
	n := len(l.approving)
	l.mu.RUnlock()
	if n == 0 {
		return nil
	}
	units := map[string]Change{}
	for _, c := range l.Changes(lower) {
		units[c.Path] = c
	}
	defer l.emptyTrash() // after the lock is let go
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, p := range slices.Sorted(maps.Keys(l.approving)) {
		if c, ok := units[p]; ok && l.landedLocked(lower, c) {
			if err := l.discardLocked(lower, c); err != nil {
				errs = append(errs, fmt.Errorf("%s, landed by an approval that did not finish: %w", c.URI, err))
				continue
			}
			l.store.log.Info("held changes: an approval that did not finish had landed this change; it is no longer held", "principal", l.Principal, "uri", c.URI)
		}
		l.log(record{K: "approved", P: p})
	}
	return errors.Join(errs...)
}

// landedLocked reports whether the backing files are what c holds: each
// of its held names a file of the same kind, mode, owner and content
// (symlink target, device), each name it removed absent, and a renamed
// file's origin gone unless the principal holds another file there
// (l.mu held). Times and extended attributes are not compared: an
// approval sets them after the content, and a unit whose content and
// names landed is approved whatever they are.
func (l *Layer) landedLocked(lower *mounts.Root, c Change) bool {
	paths := []string{c.Path}
	if c.root {
		paths = append(paths, l.insideLocked(c.Path)...)
	}
	for _, p := range paths {
		if !l.landedPathLocked(lower, p) {
			return false
		}
	}
	if c.Op == "rename" && c.From != "" {
		if _, up := l.upper.m[c.From]; !up {
			if _, err := lower.Lstat(c.From); !errors.Is(err, syscall.ENOENT) {
				return false
			}
		}
	}
	return true
}

// landedPathLocked is landedLocked for one name.
func (l *Layer) landedPathLocked(lower *mounts.Root, rel string) bool {
	lst, lerr := lower.Lstat(rel)
	if _, up := l.upper.m[rel]; !up {
		_, g := l.gone.m[rel]
		return g && errors.Is(lerr, syscall.ENOENT)
	}
	ust, uerr := l.up.Lstat(rel)
	if lerr != nil || uerr != nil || lst.Mode != ust.Mode || lst.Uid != ust.Uid || lst.Gid != ust.Gid {
		return false
	}
	switch ust.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if lst.Size != ust.Size {
			return false
		}
		d, err := digestFile(lower, rel)
		return err == nil && d == l.upperDigest(rel, &ust)
	case unix.S_IFLNK:
		a, aerr := lower.Readlink(rel)
		b, berr := l.up.Readlink(rel)
		return aerr == nil && berr == nil && bytes.Equal(a, b)
	case unix.S_IFCHR, unix.S_IFBLK:
		return lst.Rdev == ust.Rdev
	}
	return true
}

// fingerprint writes what the principal holds at rel to h (l.mu held).
func (l *Layer) fingerprint(d *mounts.Dirs, h io.Writer, rel string) {
	l.fingerprintOf(h, rel, func(rel string, t uint32) (nameState, bool) {
		st, err := d.Lstat(rel)
		if err != nil {
			return nameState{}, false
		}
		s := nameState{mode: st.Mode, uid: st.Uid, gid: st.Gid, rdev: st.Rdev}
		switch t {
		case unix.S_IFREG:
			s.digest = l.upperDigest(rel, &st)
		case unix.S_IFLNK:
			s.target, _ = l.up.Readlink(rel)
		}
		if hasXattrs(t) {
			s.xattrs, s.hasXattrs = upperXattrsIn(d, rel, st.Mode&unix.S_IFMT), true
		}
		return s, true
	})
}

// nameState is what an id covers of a held name: its stat, and its
// content's digest (a file), its target (a symlink) or the digest of its
// attributes (a file or a folder), as read from tree/ (fingerprint) or
// as a diff showed them (StillShows).
type nameState struct {
	mode, uid, gid uint32
	rdev           uint64
	digest         string
	target         []byte
	xattrs         string
	hasXattrs      bool
}

// fingerprintOf writes to h what the principal holds at rel, its state
// told by state (false: unknown) (l.mu held).
func (l *Layer) fingerprintOf(h io.Writer, rel string, state func(rel string, t uint32) (nameState, bool)) {
	t, up := l.upper.m[rel]
	if !up {
		_, g := l.gone.m[rel]
		fmt.Fprintf(h, "%s\x00gone=%v\x00", rel, g)
		return
	}
	s, ok := state(rel, t)
	if !ok || t == unix.S_IFREG && s.digest == "" || hasXattrs(t) && !s.hasXattrs {
		fmt.Fprintf(h, "%s\x00?\x00", rel)
		return
	}
	fmt.Fprintf(h, "%s\x00%o %d %d %d\x00", rel, s.mode, s.uid, s.gid, s.rdev)
	switch t {
	case unix.S_IFREG:
		fmt.Fprintf(h, "%s\x00", s.digest)
	case unix.S_IFLNK:
		fmt.Fprintf(h, "%q\x00", s.target)
	}
	if hasXattrs(t) {
		fmt.Fprintf(h, "%s\x00", s.xattrs)
	}
}

// insideLocked lists the held names below the folder unit rel, in the
// order Changes finds them (l.mu held).
func (l *Layer) insideLocked(rel string) []string {
	var out []string
	for p := range l.upper.m {
		if strings.HasPrefix(p, rel+"/") {
			out = append(out, p)
		}
	}
	for p := range l.gone.m {
		if _, up := l.upper.m[p]; !up && strings.HasPrefix(p, rel+"/") {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// upperDigest is the digest of tree/'s regular file rel (st, its stat),
// remembered while its inode, size and times stay (a write changes the
// change time, which no caller can set).
func (l *Layer) upperDigest(rel string, st *unix.Stat_t) string {
	m := digestMemo{ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
	l.memoMu.Lock()
	old, ok := l.memo[rel]
	l.memoMu.Unlock()
	if ok && old.ino == m.ino && old.size == m.size && old.mtime == m.mtime && old.ctime == m.ctime {
		return old.digest
	}
	d, err := digestFile(l.up, rel)
	if err != nil {
		return ""
	}
	if now, err := l.up.Lstat(rel); err == nil {
		l.remember(rel, st, &now, d)
	}
	return d
}

// warmDigests reads the digests of the layer's files of precopyMin or
// more that it does not remember yet, without l.mu, for Changes to find
// them remembered under it: a list or a diff of the principal's changes
// then holds up its writes for the digests of its small files only
// (before, a review list of an 800 MB held file held them 0.6 s). A
// file changed in the last memoQuiet is not remembered, and is read
// again under the lock.
func (l *Layer) warmDigests() {
	l.mu.RLock()
	var files []string
	for p, t := range l.upper.m {
		if t == unix.S_IFREG {
			files = append(files, p)
		}
	}
	l.mu.RUnlock()
	for _, p := range files {
		if st, err := l.up.Lstat(p); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size >= precopyMin {
			l.upperDigest(p, &st)
		}
	}
}

// remember keeps d as the digest of the held file rel, read between the
// Lstats before and now, if it was unchanged while it was read, and for
// long enough that a later write gets another change time (timestamps
// are coarse: two writes within a tick can share one, as git's "racy"
// files).
func (l *Layer) remember(rel string, before, now *unix.Stat_t, d string) {
	if now.Ino != before.Ino || now.Size != before.Size || now.Mtim != before.Mtim || now.Ctim != before.Ctim ||
		time.Since(time.Unix(0, now.Ctim.Nano())) <= memoQuiet {
		return
	}
	l.memoMu.Lock()
	l.memo[rel] = digestMemo{ino: now.Ino, size: now.Size, mtime: now.Mtim.Nano(), ctime: now.Ctim.Nano(), digest: d}
	l.memoMu.Unlock()
}

// memoQuiet is how long a file must have been left alone before its
// digest is remembered.
const memoQuiet = 2 * time.Second

type digestMemo struct {
	ino          uint64
	size         int64
	mtime, ctime int64
	digest       string
}

// same reports whether the backing rel is still what b says.
func same(lower *mounts.Root, rel string, b Base) bool {
	now := baseOf(lower, rel)
	if now.Absent || b.Absent {
		return now.Absent == b.Absent
	}
	// The owner and group too: an owner's chown of the backing file was
	// no conflict, and approving the unit put back the old owner (a
	// verification pass, session 47).
	return now.Type == b.Type && now.Digest == b.Digest && now.Mode == b.Mode && now.Xattrs == b.Xattrs &&
		now.UID == b.UID && now.GID == b.GID
}

// upperXattrsIn is upperXattrs of rel in the tree d is a cursor over,
// whose type is t (its Lstat's): "" for one that carries none.
func upperXattrsIn(d *mounts.Dirs, rel string, t uint32) string {
	if !hasXattrs(t) {
		return ""
	}
	p, err := d.Name(rel)
	if err != nil {
		return ""
	}
	x, _ := readXattrsNoFollow(p)
	return xattrDigest(x)
}

// upperXattrs names the extended attributes of rel in r (xattrDigest).
func upperXattrs(r *mounts.Root, rel string) string {
	x, _ := xattrsAt(r, rel)
	return xattrDigest(x)
}

// ConflictError is the ErrConflict of one backing file: URI, which may be
// a name inside the unit (one hidden from whoever reads the error:
// ConflictShown tells only of names the reader may see).
type ConflictError struct{ URI string }

func (e *ConflictError) Error() string        { return e.URI + ": " + ErrConflict.Error() }
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Conflict reports why c cannot be applied as it is: the backing files
// moved from the base it was made on. It returns nil when they did not.
func (l *Layer) Conflict(lower *mounts.Root, c Change) error {
	return l.ConflictShown(lower, c, nil)
}

// ConflictShown is Conflict as told to someone for whom shown (nil: any)
// reports which uris it may see: the first conflict at a name it may
// see, or nil. A folder the agent renamed or removed carries a subtree
// it may not see; told that the unit was in conflict whenever something
// changed down there (as it was until session 42, as a conflict of the
// unit), the agent learned of activity among files the policy hides from
// it, though no visible folder's time moved (a red-team pass found it).
// Approving such a unit checks the backing files again (Apply, with
// Conflict) and refuses it with nothing changed.
func (l *Layer) ConflictShown(lower *mounts.Root, c Change, shown func(uri string) bool) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.conflictLocked(lower, c, shown)
}

// conflictLocked is ConflictShown with l.mu held.
func (l *Layer) conflictLocked(lower *mounts.Root, c Change, shown func(uri string) bool) error {
	report := func(rel string) error {
		u := l.Slug + "://" + rel
		if shown != nil && !shown(u) {
			return nil
		}
		return &ConflictError{URI: u}
	}
	check := func(rel string, b Base) error {
		if same(lower, rel, b) {
			return nil
		}
		return report(rel)
	}
	switch c.Op {
	case "rename":
		origin := c.From
		if c.src != "" {
			origin = c.src // aside, where the rename goes on from
		}
		if !same(lower, origin, c.Base) {
			if err := report(c.From); err != nil {
				return err
			}
		}
		for _, o := range movedOrigins(c) {
			if g, ok := l.gone.m[o]; ok {
				if err := check(o, g); err != nil {
					return err
				}
			}
		}
		if c.Base.Type == unix.S_IFDIR {
			// What the rename carries: the backing folder's content as it
			// was copied up.
			if err := l.movedTreeConflict(lower, origin, c.Path, c.Base, report); err != nil {
				return err
			}
		}
		if g, ok := l.gone.m[c.Path]; ok {
			if err := check(c.Path, g); err != nil {
				return err
			}
			return l.goneTreeConflict(lower, c.Path, g, report)
		}
		return check(c.Path, Base{Absent: true})
	}
	// What a folder unit moved into it from backing names: approving it
	// removes them, as they were, with what was deleted in them
	// (carryOriginDeletes).
	for _, o := range movedOrigins(c) {
		if g, ok := l.gone.m[o]; ok {
			if err := check(o, g); err != nil {
				return err
			}
		}
		for _, p := range c.Inside {
			if g, ok := l.gone.m[p]; ok && strings.HasPrefix(p, o+"/") {
				if err := check(p, g); err != nil {
					return err
				}
			}
		}
	}
	switch c.Op {
	case "create", "mkdir", "symlink", "mknod":
		return check(c.Path, Base{Absent: true})
	}
	if err := check(c.Path, c.Base); err != nil {
		return err
	}
	if g, ok := l.gone.m[c.Path]; ok {
		return l.goneTreeConflict(lower, c.Path, g, report)
	}
	return nil
}

// goneTreeConflict checks a backing folder rel that a change removes
// (b, its base, says whether it was one): everything in it must be
// something the principal deleted, still as it was, so that approving
// removes nothing the principal never saw (a file someone added since,
// one hidden from it) and no change made since. Names a rename took away
// belong to that rename. report makes the error of a conflict at a name,
// or nil to go on looking (l.mu held).
func (l *Layer) goneTreeConflict(lower *mounts.Root, rel string, b Base, report func(string) error) error {
	if b.Type != unix.S_IFDIR {
		return nil
	}
	origins := map[string]bool{}
	for p, f := range l.from.m {
		if f != p { // renamed away and back: its own name, no origin
			origins[f] = true
		}
	}
	if origins[rel] {
		// The folder itself was renamed away, with what is in it: that
		// rename's own check covers it (movedTreeConflict).
		return nil
	}
	var walk func(dir string) error
	walk = func(dir string) error {
		ents, err := listRoot(lower, dir)
		if err != nil {
			return nil // not a folder: the check of its own base says so
		}
		for _, e := range ents {
			p := join(dir, e.Name)
			if origins[p] {
				continue
			}
			g, ok := l.gone.m[p]
			if !ok && l.originLocked(p) == p {
				// The folder renamed away and back (mv d d0; mv d0 d):
				// its copy holds this name, copied from here. Before, it
				// was a conflict, and the unit could not be approved.
				g, ok = l.base.m[p]
			}
			if !ok || !same(lower, p, g) {
				if err := report(p); err != nil {
					return err
				}
			}
			if e.St.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := walk(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(rel)
}

// movedTreeConflict checks the backing folder from that a rename to rel
// carries (b, its base when it was copied up): each folder in it must
// have the entries it had then (its change time), each file the content
// it was copied with. report makes the error of a conflict at a name,
// or nil to go on looking (l.mu held).
func (l *Layer) movedTreeConflict(lower *mounts.Root, from, rel string, b Base, report func(string) error) error {
	var walk func(dir string, b Base) error
	walk = func(dir string, b Base) error {
		st, err := lower.Lstat(dir)
		if err != nil {
			return report(dir)
		}
		if b.Ctime != 0 && st.Ctim.Nano() != b.Ctime {
			if err := report(dir); err != nil {
				return err
			}
		}
		ents, err := listRoot(lower, dir)
		if err != nil {
			return report(dir)
		}
		for _, e := range ents {
			p := join(dir, e.Name)
			held := rel + p[len(from):]
			cb, ok := l.base.m[held]
			if ok && l.originLocked(held) != p {
				// A name the principal renamed there inside the folder
				// (mv c/b/c c/b/b): its base is that of where it came
				// from. Before, p was compared with it, a conflict.
				ok = false
			}
			if !ok {
				// Not in the layer: deleted by the principal, before the
				// rename (then recorded as gone) or after it.
				if g, ok := l.gone.m[p]; ok && !same(lower, p, g) {
					if err := report(p); err != nil {
						return err
					}
				}
				continue
			}
			if !same(lower, p, cb) {
				if err := report(p); err != nil {
					return err
				}
			}
			if cb.Type == unix.S_IFDIR {
				if err := walk(p, cb); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(from, b)
}

// Hooks let the daemon journal what an approval replaces or removes.
type Hooks struct {
	// Before runs before the backing rel is replaced ("rename") or
	// removed ("unlink").
	Before func(rel, op string)
	// Created runs after a new backing name was made.
	Created func(rel string)
	// Renamed runs after the backing from moved to rel.
	Renamed func(from, rel string)
}

// afterApplyStaged, when set (by tests), runs in Apply once the staging
// copies are made, before the layer is locked.
var afterApplyStaged atomic.Pointer[func()]

// Apply makes c on the backing files and then forgets it (Discard).
// Owners, modes and times come from the held files. Unless force is set,
// a backing file that moved from the change's base (Conflict) refuses it
// with ErrConflict and changes nothing.
func (l *Layer) Apply(lower *mounts.Root, c Change, h Hooks, force bool) error {
	if h.Before == nil {
		h.Before = func(string, string) {}
	}
	if h.Created == nil {
		h.Created = func(string) {}
	}
	if h.Renamed == nil {
		h.Renamed = func(string, string) {}
	}
	// A rename's target and origin, as they were before its last check:
	// it lands only where neither moved since (renameOver).
	at, from := c.seenAt, c.seenFrom
	// Forced by whoever approves (who forces Stage and Apply alike), not
	// only taken as checked by Stage below.
	forced := force
	if c.checked {
		force = true // Stage checked it, before it moved files aside
	} else if !force && c.Op == "rename" {
		at, from = look(lower, c.Path), look(lower, cmp.Or(c.src, c.From))
	}
	if err := l.Conflict(lower, c); err != nil && !force {
		return err
	}
	pre := l.stage(lower, c)
	if f := afterApplyStaged.Load(); f != nil {
		(*f)()
	}
	defer l.emptyTrash() // after the lock is let go
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.dropStaged(lower, pre)
	if err := l.busyLocked(c.Path); err != nil {
		return err
	}
	if c.ID != "" {
		now := c
		var inside []string
		if c.root {
			// Only a folder unit carries the names below it (Changes);
			// a chmod of a folder holding the name of a linked file did
			// not list that file's other names.
			inside = l.insideLocked(c.Path)
		}
		// The deletions it carries below its origin, or below a folder
		// moved into it, as listed (carryOriginDeletes); once: a folder
		// renamed onto its old parent's name (mv d d0; mv d0/e d) has
		// its origin's names below its own.
		var origins []string
		if c.Op == "rename" && c.From != "" {
			origins = append(origins, c.From)
		}
		if c.root {
			origins = append(origins, c.froms...)
		}
		if len(origins) > 0 {
			have := map[string]bool{}
			for _, p := range inside {
				have[p] = true
			}
			for _, p := range c.Inside {
				if have[p] {
					continue
				}
				for _, o := range origins {
					if strings.HasPrefix(p, o+"/") {
						inside = append(inside, p)
						have[p] = true
						break
					}
				}
			}
		}
		if c.fps != nil {
			// As listed, with the names a unit approved with it landed
			// since (fps), then any the principal added since.
			live := map[string]bool{}
			for _, p := range inside {
				live[p] = true
			}
			var again []string
			for _, p := range c.Inside {
				_, up := l.upper.m[p]
				_, g := l.gone.m[p]
				if _, was := c.fps[p]; live[p] || was && !up && !g {
					again = append(again, p)
					delete(live, p)
				}
			}
			for _, p := range inside {
				if live[p] {
					again = append(again, p)
				}
			}
			inside = again
		}
		now.Links = l.unitLinksLocked(c.Path, inside)
		for _, p := range c.Links {
			if _, held := l.upper.m[p]; !held && !slices.Contains(now.Links, p) {
				// Landed (or withdrawn) since it was listed: an earlier
				// unit of the same approval.
				now.Links = append(now.Links, p)
			}
		}
		sort.Strings(now.Links)
		d := l.up.Dirs()
		id := l.idLocked(now, inside, func(h io.Writer, rel string) {
			if f, ok := c.fps[rel]; ok {
				_, up := l.upper.m[rel]
				if _, g := l.gone.m[rel]; !up && !g {
					// Landed by a unit approved with it (Stage): as it
					// was then.
					io.WriteString(h, f)
					return
				}
			}
			l.fingerprint(d, h, rel)
		})
		d.Close()
		if id != c.ID {
			return fmt.Errorf("%s: %w", c.URI, ErrChanged)
		}
	}
	if c.checked && c.seenAt != nil && (c.Op == "delete" || c.Op == "rmdir") {
		// Stage checked it before it moved files aside, and it was not
		// checked again: a file the owner made in the folder since was
		// removed with it (a data-integrity pass: 4 of 5 runs). What it
		// removes is looked at again now, the layer locked; the names
		// moved aside are simply not there.
		if err := l.conflictLocked(lower, c, nil); err != nil {
			return err
		}
	}
	var seen *checkedFile
	if c.checked && c.Type == "file" && c.Op != "rename" && !c.root {
		seen = c.seenAt // as Stage found it before its check
	}
	if !force && c.Type == "file" && c.Op != "rename" && !c.root {
		// Again, now that the staging copies are made (milliseconds for
		// a large file) and nothing of the layer moves: an owner's write
		// to the backing file in between was replaced by the approved
		// content with no conflict said, in 4 of 15 timed runs (a
		// red-team pass; the journal kept it). A file's unit only:
		// staging puts names into the backing folders, whose entries a
		// folder unit's check counts. The backing file is looked at
		// first, so that the rename over it can tell whether it changed
		// after this check (writeFile).
		seen = look(lower, c.Path)
		if err := l.conflictLocked(lower, c, nil); err != nil {
			return err
		}
	}
	// A daemon killed from here until the layer forgets c leaves the
	// record, and the next start finds out whether c landed
	// (RecoverAside); a landing that fails while the daemon runs
	// answers its error and leaves c held, as before.
	l.log(record{K: "approving", P: c.Path})
	defer l.log(record{K: "approved", P: c.Path})
	a := applier{l: l, lower: lower, h: h, pre: pre, seen: seen}
	var err error
	switch c.Op {
	case "delete", "rmdir":
		if forced {
			err = a.removeTree(c.Path)
			break
		}
		if f := beforeLandFile.Load(); f != nil {
			(*f)()
		}
		err = a.removeGone(c.Path)
	case "rename":
		src := c.From
		if c.src != "" {
			src = c.src // moved aside by Stage
		}
		landed, rerr := a.renameOver(src, c.Path, at, from)
		if err = rerr; err != nil {
			break
		}
		if f := afterRename.Load(); f != nil {
			(*f)()
		}
		// What lands in the renamed file next (the principal's changes
		// to it since) replaces only what was renamed: an owner's write
		// to it right after the rename was replaced with no conflict
		// said (a data-integrity pass, 5 of 40 runs).
		if at != nil {
			a.seen = landed
		}
		if c.src != "" {
			l.log(record{K: "unaside", P: c.src})
		}
		h.Renamed(c.From, c.Path)
		if err = a.sync(c.Path, true); err != nil {
			if errors.Is(err, ErrConflict) && c.Type != "dir" {
				// The rename landed; what the principal changed in the
				// file since did not (the owner wrote it meanwhile). The
				// unit is that change now, made on the file as renamed,
				// a conflict to approve with --force or reject. Before,
				// it stayed a rename that had landed, and no approval
				// could land it again (a data-integrity pass).
				b := c.Base
				l.log(record{K: "ungone", P: c.From})
				l.log(record{K: "ungone", P: c.Path})
				l.log(record{K: "base", P: c.Path, B: &b})
				l.log(record{K: "from", P: c.Path, F: c.Path})
			}
			break
		}
		// What the principal moved into the renamed folder from
		// elsewhere leaves where it was, as in a folder unit below.
		for _, o := range movedOrigins(c) {
			if err = a.removeTree(o); err != nil {
				break
			}
		}
	case "chmod":
		err = a.sync(c.Path, false)
	default:
		if err = a.mkParents(c.Path); err != nil {
			break
		}
		if err = a.sync(c.Path, true); err != nil {
			break
		}
		// The backing names moved into it go: the principal moved them
		// (a copy landed above). Before, they stayed, and once the unit
		// was approved their deletions showed as units of their own;
		// rejecting it left those, and approving one deleted a file the
		// principal had only moved.
		for _, o := range movedOrigins(c) {
			if err = a.removeTree(o); err != nil {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	if err := a.durable(c); err != nil {
		return fmt.Errorf("%s: making the approved change durable: %w", c.URI, err)
	}
	return l.discardLocked(lower, c)
}

// fsyncDir is fsync(2) of a folder's descriptor (a test watches it).
var fsyncDir = unix.Fsync

// durable makes what c landed in the backing folders survive a crash
// before the layer forgets its own copy of it: the files' content is on
// disk already (writeFile syncs each), but their names, made by link,
// rename, mkdir, symlink or unlink, are in their folders, which are
// synced here — the folders c's names are in (its old name's too, or
// the top of the source for one moved aside), and, where c landed a
// folder, every folder below it. Without this a power loss after the
// approval could keep the layer's forgetting and lose the landing: the
// approved change would be gone from both sides.
func (a *applier) durable(c Change) error {
	dirs := []string{parentOf(c.Path)}
	for _, o := range movedOrigins(c) {
		if _, err := a.lower.Lstat(parentOf(o)); err == nil {
			dirs = append(dirs, parentOf(o))
		}
	}
	switch {
	case c.Op == "rename" && c.src != "":
		// Moved aside by Stage: it left its old folder then, and that
		// folder may be gone since (a unit before this one removed it).
		dirs = append(dirs, parentOf(c.src))
	case c.Op == "rename":
		// Its old folder, or the nearest one still there where the unit
		// removed that (moved into the renamed folder: movedOrigins).
		d := parentOf(c.From)
		for d != "" {
			if _, err := a.lower.Lstat(d); err == nil {
				break
			}
			d = parentOf(d)
		}
		dirs = append(dirs, d)
	}
	if st, err := a.lower.Lstat(c.Path); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && c.Op != "chmod" {
		var walk func(rel string) error
		walk = func(rel string) error {
			dirs = append(dirs, rel)
			ents, err := listRoot(a.lower, rel)
			if err != nil {
				return err
			}
			for _, e := range ents {
				if e.St.Mode&unix.S_IFMT == unix.S_IFDIR {
					if err := walk(join(rel, e.Name)); err != nil {
						return err
					}
				}
			}
			return nil
		}
		if err := walk(c.Path); err != nil {
			return err
		}
	}
	done := map[string]bool{}
	for _, d := range dirs {
		if done[d] {
			continue
		}
		done[d] = true
		if err := syncDir(a.lower, d); err != nil {
			return err
		}
	}
	return nil
}

// syncDir fsyncs r's folder rel.
func syncDir(r *mounts.Root, rel string) error {
	fd, err := r.Open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	err = fsyncDir(fd)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("fsync of %s: %w", rel, err)
	}
	return nil
}

// Discard forgets c: its held files go and what it hid shows again. It
// refuses (ErrBusy) while the principal has one of them open for writing.
func (l *Layer) Discard(lower *mounts.Root, c Change) error {
	defer l.emptyTrash() // after the lock is let go
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.busyLocked(c.Path); err != nil {
		return err
	}
	return l.discardLocked(lower, c)
}

// discardLocked forgets c, approved or not, and then the folder copies
// above it that no longer hold anything (l.mu held).
func (l *Layer) discardLocked(lower *mounts.Root, c Change) error {
	if err := l.forgetLocked(lower, c); err != nil {
		return err
	}
	l.pruneUpLocked(c.Path)
	return nil
}

// pruneLocked removes tree/'s folder rel when it is only a structural
// copy of a backing folder — copied up in place, its attributes still its
// base's, nothing of the layer in it — so that the principal sees the
// backing folder again, and no copy outlives it (a copy kept after its
// files were approved showed the principal a folder someone had deleted
// since). It reports whether rel is gone from tree/ (l.mu held).
func (l *Layer) pruneLocked(rel string) bool {
	t, up := l.upper.m[rel]
	if !up {
		return true
	}
	b, copied := l.base.m[rel]
	_, gone := l.gone.m[rel]
	_, moved := l.from.m[rel]
	if t != unix.S_IFDIR || !copied || b.Absent || b.Type != unix.S_IFDIR || gone || moved {
		return false
	}
	st, err := l.up.Lstat(rel)
	if err != nil || st.Mode&0o7777 != b.Mode || st.Uid != b.UID || st.Gid != b.GID || upperXattrs(l.up, rel) != b.Xattrs {
		return false
	}
	if l.up.Rmdir(rel) != nil {
		return false // not empty, or not removable: it stays
	}
	l.upper.del(rel)
	l.log(record{K: "drop", P: rel})
	return true
}

// forgetLocked is discardLocked for c alone (l.mu held).
func (l *Layer) forgetLocked(lower *mounts.Root, c Change) error {
	for _, p := range c.removed {
		if _, ok := l.gone.m[p]; ok {
			l.log(record{K: "ungone", P: p})
		}
	}
	if c.root {
		// A folder unit carries everything gone below it, but for the
		// origin of a rename still held out of it (mv d/x y; rm -r d,
		// the rename left held by a conflict or a kill): its base.
		// Before, it went, and the rename was a conflict for ever.
		held := map[string]bool{}
		for p, f := range l.from.m {
			// (A rename of its own: not one inside a folder the
			// principal made, replaced or renamed, whose unit it is.)
			if _, up := l.upper.m[p]; up && f != p && p != c.Path && !strings.HasPrefix(p, c.Path+"/") && !l.inFolderUnitLocked(p) {
				held[f] = true
			}
		}
		for g := range l.gone.m {
			if strings.HasPrefix(g, c.Path+"/") && !held[g] {
				l.log(record{K: "ungone", P: g})
			}
		}
	}
	if t, up := l.upper.m[c.Path]; up {
		if c.Op == "chmod" && t == unix.S_IFDIR {
			// The structural copy stays (the layer's names below are in
			// it): it takes the backing folder's attributes as they are
			// now (the held ones once approved, the backing ones after a
			// reject), which become its base.
			return l.rebaseDirLocked(lower, c)
		}
		if err := l.removeFileLocked(c.Path); err != nil {
			return err
		}
		for p := range l.upper.m {
			if p == c.Path || strings.HasPrefix(p, c.Path+"/") {
				l.bytes.Add(-l.sizes.m[p])
				l.sizes.del(p)
				l.upper.del(p)
			}
		}
		l.log(record{K: "drop", P: c.Path})
	}
	return nil
}

// inFolderUnitLocked reports whether a folder above rel is one the
// principal made, replaced or renamed: rel is in that folder's unit
// (l.mu held).
func (l *Layer) inFolderUnitLocked(rel string) bool {
	for a := parentOf(rel); a != ""; a = parentOf(a) {
		if _, up := l.upper.m[a]; !up {
			continue
		}
		_, g := l.gone.m[a]
		b, copied := l.base.m[a]
		_, f := l.from.m[a]
		if g || !copied || b.Absent || f {
			return true
		}
	}
	return false
}

// rebaseDirLocked gives tree/'s folder c.Path the mode, owner and
// attributes of the backing folder and records them as its base (l.mu
// held).
func (l *Layer) rebaseDirLocked(lower *mounts.Root, c Change) error {
	st, err := lower.Lstat(c.Path)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		// No backing folder left: put back what the copy was made from.
		st = unix.Stat_t{Mode: unix.S_IFDIR | c.Base.Mode, Uid: c.Base.UID, Gid: c.Base.GID}
	} else if err := syncXattrs(lower, c.Path, l.up, c.Path); err != nil {
		return err
	}
	fd, err := l.up.OpenPath(c.Path)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchownat(fd, "", int(st.Uid), int(st.Gid), unix.AT_EMPTY_PATH); err != nil {
		return err
	}
	if err := unix.Chmod(mounts.ProcPath(fd), st.Mode&0o7777); err != nil {
		return err
	}
	b := c.Base
	if st.Ino != 0 {
		b = Base{Type: unix.S_IFDIR, Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid, Dev: st.Dev, Ino: st.Ino,
			Ctime: st.Ctim.Nano(), Xattrs: upperXattrs(lower, c.Path)}
	}
	l.log(record{K: "base", P: c.Path, B: &b})
	return nil
}

// removeFileLocked removes rel, a file or a folder with everything in it,
// from tree/ (l.mu held). A large file with one name is moved to the
// layer's tmp/ instead, and emptyTrash removes it once the lock is let
// go: freeing an 800 MB file's blocks takes a
// quarter of a second, which the principal's other requests need not
// wait for. A kill before that leaves it in tmp/, which the layer
// empties when it opens.
func (l *Layer) removeFileLocked(rel string) error {
	st, err := l.up.Lstat(rel)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size < precopyMin || st.Nlink != 1 {
		return removeAll(l.up, rel)
	}
	dfd, name, err := l.parentFd(rel)
	if err != nil {
		return removeAll(l.up, rel)
	}
	defer unix.Close(dfd)
	trash := filepath.Join(l.dir, "tmp", strconv.FormatUint(l.seq.Add(1), 36)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36)+"-trash")
	if err := unix.Renameat2(dfd, name, unix.AT_FDCWD, trash, unix.RENAME_NOREPLACE); err != nil {
		return removeAll(l.up, rel)
	}
	l.trashMu.Lock()
	l.trash = append(l.trash, trash)
	l.trashMu.Unlock()
	return nil
}

// emptyTrash removes what removeFileLocked moved aside (without l.mu).
func (l *Layer) emptyTrash() {
	l.trashMu.Lock()
	trash := l.trash
	l.trash = nil
	l.trashMu.Unlock()
	for _, p := range trash {
		os.Remove(p)
	}
}

// removeAll removes rel and everything below it from r.
func removeAll(r *mounts.Root, rel string) error {
	st, err := r.Lstat(rel)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return r.Unlink(rel)
	}
	ents, err := listRoot(r, rel)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := removeAll(r, join(rel, e.Name)); err != nil {
			return err
		}
	}
	return r.Rmdir(rel)
}

type applier struct {
	l     *Layer
	lower *mounts.Root
	h     Hooks
	n     int
	pre   map[string]*staged // files written to temporary backing names before l.mu (stage)
	// seen is the backing file of a file's unit as Apply's last
	// conflict check found it; nil for a forced approval or another unit.
	seen *checkedFile
}

// checkedFile is a backing file as a conflict check found it: its stat,
// or absent.
type checkedFile struct {
	rel    string
	absent bool
	st     unix.Stat_t
	// moved: renamed since st was taken (by the approval), which moved
	// its change time and nothing else.
	moved bool
}

// unchanged reports whether st is still the file c found: the same inode
// with the same size, mode, owner, link count and modification time, and, with
// ctime, change time (a rename moves that). The kernel gives a change
// right after a stat a time of its own (multigrain timestamps, Linux
// 6.13), so a write after the check moves them.
func (c *checkedFile) unchanged(st *unix.Stat_t, ctime bool) bool {
	return !c.absent && st.Dev == c.st.Dev && st.Ino == c.st.Ino && st.Size == c.st.Size &&
		st.Mtim == c.st.Mtim && (!ctime || c.moved || st.Ctim == c.st.Ctim) && st.Mode == c.st.Mode && st.Nlink == c.st.Nlink &&
		st.Uid == c.st.Uid && st.Gid == c.st.Gid
}

// staged is a held file that stage wrote to a temporary backing name
// before the layer's lock was taken.
type staged struct {
	rel    string
	ust    unix.Stat_t // the held file as it was copied
	digest string      // of its content
	tmp    string      // the copy ("" once used or removed)
}

// stage writes c's held files to temporary backing names before Apply
// takes the layer's lock — content, owner, mode, extended attributes and
// times, fsynced — so that under the lock each is only renamed into place:
// the slow part of landing files, during which the principal's other
// requests go on. Before, an 800 MB approval held every one of them for
// 3.5 s, and a new folder of 3,000 files of 4 KiB held them 2–4 s (a
// copy, an fsync and six system calls a file). For a unit of one
// regular file of precopyMin or more, and for every regular file of a
// folder unit; a file with more than one name is left to Apply, which
// lands its names as links of one file. A copy is made beside the file's
// backing name, or, where that folder is not there yet (a new tree,
// whose folders Apply makes under the lock), in the nearest backing
// folder above it. Apply takes a copy if its held file is still the one
// copied (writeFile), and dropStaged removes the others. Their temporary
// names are recorded as writeFile's are, so a kill leaves nothing behind.
func (l *Layer) stage(lower *mounts.Root, c Change) map[string]*staged {
	switch c.Op {
	case "delete", "rmdir", "rename", "chmod", "symlink", "mknod":
		return nil
	}
	st, err := l.up.Lstat(c.Path)
	if err != nil {
		return nil
	}
	var files []*staged
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if len(c.Inside) > 0 || c.root || st.Size < precopyMin || st.Nlink != 1 {
			return nil
		}
		files = []*staged{{rel: c.Path, ust: st}}
	case unix.S_IFDIR:
		files = l.stageable(c.Path)
	}
	if len(files) == 0 {
		return nil
	}
	dirs := map[string]string{} // a file's folder → the backing folder its copy goes in
	for _, p := range files {
		dir := parentOf(p.rel)
		if _, ok := dirs[dir]; !ok {
			dirs[dir] = existingDir(lower, dir)
		}
	}
	a := applier{l: l, lower: lower}
	l.mu.Lock()
	if l.busyLocked(c.Path) != nil {
		l.mu.Unlock()
		return nil
	}
	for _, p := range files {
		p.tmp = a.tmpIn(dirs[parentOf(p.rel)])
	}
	l.mu.Unlock()
	out := make(map[string]*staged, len(files))
	var failed []*staged
	for _, p := range files {
		if l.stageOne(lower, p) {
			out[p.rel] = p
		} else {
			failed = append(failed, p)
		}
	}
	if len(failed) > 0 {
		l.mu.Lock()
		for _, p := range failed {
			l.dropOne(lower, p)
		}
		l.mu.Unlock()
	}
	return out
}

// stageable lists the regular files of one name in tree/ at or below the
// folder rel, for stage.
func (l *Layer) stageable(rel string) []*staged {
	var out []*staged
	var walk func(rel string)
	walk = func(rel string) {
		ents, err := listRoot(l.up, rel)
		if err != nil {
			return
		}
		for _, e := range ents {
			p := join(rel, e.Name)
			switch e.St.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				walk(p)
			case unix.S_IFREG:
				if e.St.Nlink == 1 {
					out = append(out, &staged{rel: p, ust: e.St})
				}
			}
		}
	}
	walk(rel)
	return out
}

// existingDir is the nearest backing folder at or above dir.
func existingDir(lower *mounts.Root, dir string) string {
	for dir != "" {
		if st, err := lower.Lstat(dir); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return dir
		}
		dir = parentOf(dir)
	}
	return ""
}

// stageOne writes p's held file to p.tmp and reports whether the copy is
// the held file as it still is.
func (l *Layer) stageOne(lower *mounts.Root, p *staged) bool {
	in, err := l.up.Open(p.rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	inf := os.NewFile(uintptr(in), p.rel)
	defer inf.Close()
	var st unix.Stat_t
	if unix.Fstat(in, &st) != nil || !sameStat(&st, &p.ust) {
		return false
	}
	fd, _, err := lower.Create(p.tmp, unix.O_WRONLY|unix.O_EXCL, 0o600, int(st.Uid), int(st.Gid))
	if err != nil {
		return false
	}
	h := sha256.New()
	err = fill(os.NewFile(uintptr(fd), p.tmp), inf, &st, h)
	p.digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	now, serr := l.up.Lstat(p.rel)
	if err != nil || serr != nil || !sameStat(&now, &p.ust) {
		return false
	}
	// For the approval's check of its id (changeIDLocked), which would
	// read the file again under the lock.
	l.remember(p.rel, &p.ust, &now, p.digest)
	return true
}

// fill writes the held file open as in (st, its stat) to the new backing
// file f — content, owner, mode, extended attributes and times — fsyncs
// it and closes f. h, when not nil, hashes the content.
func fill(f, in *os.File, st *unix.Stat_t, h hash.Hash) error {
	defer f.Close()
	fd := int(f.Fd())
	_, err := copySparse(f, in, h)
	if err == nil {
		err = unix.Fchown(fd, int(st.Uid), int(st.Gid))
	}
	if err == nil {
		err = unix.Fchmod(fd, st.Mode&0o7777)
	}
	if err == nil {
		// Not those a default ACL of the folder gave the new file.
		var x, have map[string][]byte
		if x, err = readXattrs(mounts.ProcPath(int(in.Fd()))); err == nil {
			if have, err = readXattrs(mounts.ProcPath(fd)); err == nil {
				err = writeXattrs(mounts.ProcPath(fd), x, have)
			}
		}
	}
	if err == nil {
		err = unix.UtimesNanoAt(unix.AT_FDCWD, mounts.ProcPath(fd), []unix.Timespec{st.Atim, st.Mtim}, 0)
	}
	if err == nil {
		err = f.Sync()
	}
	return err
}

// dropStaged removes the copies no one took (l.mu held).
func (l *Layer) dropStaged(lower *mounts.Root, pre map[string]*staged) {
	for _, p := range pre {
		l.dropOne(lower, p)
	}
}

// dropOne removes p's copy unless it was taken (l.mu held).
func (l *Layer) dropOne(lower *mounts.Root, p *staged) {
	if p.tmp == "" {
		return
	}
	lower.Unlink(p.tmp)
	l.log(record{K: "untemp", P: p.tmp})
	p.tmp = ""
}

// staged returns the copy stage made of rel when the held file is still
// the one it copied (ust: its Lstat now), nil otherwise.
func (a *applier) staged(rel string, ust *unix.Stat_t) *staged {
	if p := a.pre[rel]; p != nil && p.tmp != "" && sameStat(&p.ust, ust) {
		return p
	}
	return nil
}

// mkParents makes the backing folders above rel that are missing, as the
// held folders are.
func (a *applier) mkParents(rel string) error {
	dir := path.Dir(rel)
	if dir == "." {
		return nil
	}
	cur := ""
	for _, s := range strings.Split(dir, "/") {
		cur = join(cur, s)
		if _, err := a.lower.Lstat(cur); err == nil {
			continue
		}
		st, err := a.l.up.Lstat(cur)
		if err != nil {
			return err
		}
		if _, err := a.lower.Mkdir(cur, st.Mode&0o7777, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		a.h.Created(cur)
	}
	return nil
}

// look is the backing rel as a conflict check is about to find it: its
// stat, absent, or nil where it cannot tell (a parent that is not a
// folder, an error).
func look(lower *mounts.Root, rel string) *checkedFile {
	st, err := lower.Lstat(rel)
	switch {
	case err == nil:
		return &checkedFile{rel: rel, st: st}
	case errors.Is(err, syscall.ENOENT):
		return &checkedFile{rel: rel, absent: true}
	}
	return nil
}

// notDir reports whether c found something there that is not a folder.
func (c *checkedFile) notDir() bool {
	return c != nil && !c.absent && c.st.Mode&unix.S_IFMT != unix.S_IFDIR
}

// renameOver lands a rename: the backing src (its origin, or where Stage
// moved that aside) goes to rel, over what is there. at and from are rel
// and the origin as they were before the approval's last check, nil for
// a forced approval. A write of the owner's after that check was
// replaced with no conflict said (a data-integrity pass: 9 of 100 runs
// rewriting the target of an approved mv a b); now the origin is looked
// at just before the rename, a name that was free is taken only if it
// still is (RENAME_NOREPLACE), and a file that was there is looked at,
// exchanged with the renamed one (RENAME_EXCHANGE) and looked at again
// where it went: when one of them moved since the check, nothing is
// renamed, or the exchange is undone, and the approval is a conflict. A
// write to the name after the rename is the owner's to the landed file
// and stays (before, the origin was looked at after the rename too, and
// such a write was taken back with it to the old name). A folder at rel,
// whose own times move with what staging writes below it, is removed as
// before (its content was checked). It returns the landed file as it
// was just before the rename (nil where unknown), for what lands in it
// next.
func (a *applier) renameOver(src, rel string, at, from *checkedFile) (*checkedFile, error) {
	conflict := func(p string) error { return &ConflictError{URI: a.l.Slug + "://" + p} }
	// The file to move first: a forced approval of a rename whose origin
	// is gone removed its target, then failed.
	pre, err := a.lower.Lstat(src)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) && from != nil {
			return nil, conflict(from.rel)
		}
		return nil, fmt.Errorf("%s://%s: %w", a.l.Slug, rel, err)
	}
	if from.notDir() && !from.unchanged(&pre, src == from.rel) {
		// Written since the check (a file moved aside by Stage has a
		// change time of that move).
		return nil, conflict(from.rel)
	}
	now, nerr := a.lower.Lstat(rel)
	exists := nerr == nil
	var flags uint = unix.RENAME_NOREPLACE
	switch {
	case at == nil || !at.absent && !at.notDir():
		if exists {
			if err := a.removeTree(rel); err != nil {
				return nil, err
			}
		}
	case at.absent && exists, !at.absent && (!exists || !at.unchanged(&now, true)):
		return nil, conflict(rel)
	case !at.absent:
		a.h.Before(rel, "rename")
		flags = unix.RENAME_EXCHANGE
	}
	if err := a.mkParents(rel); err != nil {
		return nil, err
	}
	if at != nil {
		if f := beforeLandFile.Load(); f != nil {
			(*f)()
		}
	}
	err = a.lower.Rename(src, rel, flags)
	if flags == unix.RENAME_EXCHANGE && (errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS)) {
		// A backing file system with no exchange: what is there goes
		// first, as before.
		flags = unix.RENAME_NOREPLACE
		if err = a.lower.Unlink(rel); err == nil {
			err = a.lower.Rename(src, rel, flags)
		}
	}
	if err != nil {
		if at != nil && flags == unix.RENAME_NOREPLACE && errors.Is(err, syscall.EEXIST) {
			return nil, conflict(rel)
		}
		return nil, err
	}
	landed := &checkedFile{rel: rel, st: pre, moved: true}
	if flags == unix.RENAME_EXCHANGE {
		if st, err := a.lower.Lstat(src); err != nil || !at.unchanged(&st, false) {
			if err := a.lower.Rename(src, rel, unix.RENAME_EXCHANGE); err != nil {
				return nil, fmt.Errorf("%s://%s: changed while the approval landed, and could not be put back (it is %s): %w", a.l.Slug, rel, src, err)
			}
			return nil, conflict(rel)
		}
		// src is the old file at rel now, journaled above.
		return landed, a.lower.Unlink(src)
	}
	return landed, nil
}

// removeGone is removeTree of a folder the principal deleted, for an
// approval not forced: only names below it the principal deleted (the
// layer's gone records, which the conflict check compared) or moved
// away go. When the folder holds another, made since that check, nothing
// is removed and the approval is a conflict; one made while the names
// go stays, and the folder with it (rmdir(2) refuses a folder not
// empty), a conflict too. Before, such a name was removed with the rest
// (a data-integrity pass: 17 of 550 runs of mv d/x y; rm -r d with the
// owner making d/new as the approval began; the journal kept it).
func (a *applier) removeGone(rel string) error {
	origins := map[string]bool{}
	for p, f := range a.l.from.m {
		if f != p {
			origins[f] = true
		}
	}
	known := func(p string) bool {
		_, g := a.l.gone.m[p]
		return g || origins[p]
	}
	var look func(dir string) error
	look = func(dir string) error {
		ents, err := listRoot(a.lower, dir)
		if err != nil {
			return nil // not a folder (or gone): the removal finds out
		}
		for _, e := range ents {
			p := join(dir, e.Name)
			if !known(p) {
				return &ConflictError{URI: a.l.Slug + "://" + p}
			}
			if !origins[p] && e.St.Mode&unix.S_IFMT == unix.S_IFDIR {
				// (What was moved away goes whole: its new place holds
				// the principal's copy.)
				if err := look(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := look(rel); err != nil {
		return err
	}
	return a.removeSome(rel, func(p string) (goes, all bool) { return known(p), origins[p] })
}

// removeTree removes the backing rel and everything below it, journaling
// each file first.
func (a *applier) removeTree(rel string) error { return a.removeSome(rel, nil) }

// removeSome is removeTree of what take lets go below rel: for each name
// p in a folder, whether it goes, and whether all of it does (take is
// asked nothing more below it then). A folder that keeps a name stays: a
// conflict.
func (a *applier) removeSome(rel string, take func(p string) (goes, all bool)) error {
	st, err := a.lower.Lstat(rel)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		a.h.Before(rel, "unlink")
		return a.lower.Unlink(rel)
	}
	ents, err := listRoot(a.lower, rel)
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := join(rel, e.Name)
		below := take
		if take != nil {
			goes, all := take(p)
			if !goes {
				continue
			}
			if all {
				below = nil
			}
		}
		if err := a.removeSome(p, below); err != nil {
			return err
		}
	}
	err = a.lower.Rmdir(rel)
	if take != nil && (errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST)) {
		return &ConflictError{URI: a.l.Slug + "://" + rel}
	}
	return err
}

// sync makes the backing rel what the held rel is (and, with deep, every
// name below a folder).
func (a *applier) sync(rel string, deep bool) error {
	ust, err := a.l.up.Lstat(rel)
	if err != nil {
		return err
	}
	lst, lerr := a.lower.Lstat(rel)
	ut := ust.Mode & unix.S_IFMT
	if lerr == nil && lst.Mode&unix.S_IFMT != ut {
		if err := a.removeTree(rel); err != nil {
			return err
		}
		lerr = syscall.ENOENT
	}
	switch ut {
	case unix.S_IFDIR:
		if lerr != nil {
			if _, err := a.lower.Mkdir(rel, ust.Mode&0o7777, int(ust.Uid), int(ust.Gid)); err != nil {
				return err
			}
			a.h.Created(rel)
		}
		if err := a.attrs(rel, &ust); err != nil {
			return err
		}
		if !deep {
			return nil
		}
		ups, err := listRoot(a.l.up, rel)
		if err != nil {
			return err
		}
		have := map[string]bool{}
		for _, e := range ups {
			have[e.Name] = true
			if err := a.sync(join(rel, e.Name), true); err != nil {
				return err
			}
		}
		lows, err := listRoot(a.lower, rel)
		if err != nil {
			return err
		}
		for _, e := range lows {
			if !have[e.Name] {
				if err := a.removeTree(join(rel, e.Name)); err != nil {
					return err
				}
			}
		}
		return nil
	case unix.S_IFREG:
		pre := a.staged(rel, &ust)
		var ud string
		if pre != nil {
			ud = pre.digest
		} else if ud, err = digestFile(a.l.up, rel); err != nil {
			return err
		}
		if done, err := a.linkLanded(rel, &ust, ud, lerr == nil); done || err != nil {
			return err
		}
		// Same content: only the attributes change, in place, unless
		// the backing file has other names, which the principal's copy
		// never shared: in place, a mode or an attribute reached them too,
		// in a folder hidden from the principal as well (found by a
		// red-team pass). It lands as a file of its own then, as a
		// content change does.
		if lerr == nil && lst.Nlink < 2 {
			if ld, _ := digestFile(a.lower, rel); ld == ud {
				if err := a.attrs(rel, &ust); err != nil {
					return err
				}
				return a.land(rel, &ust)
			}
		}
		if err := a.writeFile(rel, &ust, lerr == nil, pre); err != nil {
			return err
		}
		return a.land(rel, &ust)
	case unix.S_IFLNK:
		t, err := a.l.up.Readlink(rel)
		if err != nil {
			return err
		}
		if e, ok := a.landedName(rel, ust.Ino); ok {
			// Another name of this held link landed in this approval:
			// this one is linked to it, so the names stay one link.
			if a.sameLink(e.rel, e.dev, e.ino, &ust, t) {
				return a.linkOver(e.rel, rel, lerr == nil)
			}
		}
		if lerr == nil {
			if lt, err := a.lower.Readlink(rel); err == nil && bytes.Equal(lt, t) && ust.Nlink < 2 {
				return nil
			}
			a.h.Before(rel, "unlink")
			if err := a.lower.Unlink(rel); err != nil {
				return err
			}
		}
		if _, err := a.lower.Symlink(string(t), rel, int(ust.Uid), int(ust.Gid)); err != nil {
			return err
		}
		a.h.Created(rel)
		return a.land(rel, &ust)
	default:
		if e, ok := a.landedName(rel, ust.Ino); ok {
			// Another name of this held FIFO, socket or device node
			// landed in this approval: this one is linked to it.
			if a.sameNode(e.rel, e.dev, e.ino, &ust) {
				return a.linkOver(e.rel, rel, lerr == nil)
			}
		}
		if lerr == nil {
			if err := a.attrs(rel, &ust); err != nil {
				return err
			}
			return a.land(rel, &ust)
		}
		if _, err := a.lower.Mknod(rel, ust.Mode, int(ust.Rdev), int(ust.Uid), int(ust.Gid)); err != nil {
			return err
		}
		a.h.Created(rel)
		if err := a.attrs(rel, &ust); err != nil {
			return err
		}
		return a.land(rel, &ust)
	}
}

// sameNode reports whether the backing rel is still the FIFO, socket or
// device node (dev, ino) an approval landed, of the held one's type,
// device number, mode and owner.
func (a *applier) sameNode(rel string, dev, ino uint64, ust *unix.Stat_t) bool {
	st, err := a.lower.Lstat(rel)
	return err == nil && st.Dev == dev && st.Ino == ino && st.Mode == ust.Mode && st.Rdev == ust.Rdev && st.Uid == ust.Uid && st.Gid == ust.Gid
}

// landing is where an approval landed a held file that has other names
// still held: the backing name, its file, and the held names not landed
// yet.
type landing struct {
	rel      string
	dev, ino uint64
	pending  map[string]bool
}

// land remembers that the held file rel (ust, its stat in tree/) landed
// at the backing rel, when it has other names in tree/: approving them
// then links them to it (linkLanded).
func (a *applier) land(rel string, ust *unix.Stat_t) error {
	if ust.Nlink < 2 {
		return nil
	}
	lst, err := a.lower.Lstat(rel)
	if err != nil {
		return err
	}
	pending := map[string]bool{}
	for _, p := range a.l.namesLocked(ust.Ino) {
		if p != rel {
			pending[p] = true
		}
	}
	if len(pending) > 0 {
		a.l.landed[ust.Ino] = &landing{rel: rel, dev: lst.Dev, ino: lst.Ino, pending: pending}
	}
	return nil
}

// landedName returns where another name of the held file of inode
// number ino landed in this approval when rel is one of its names still
// to be linked to it (land), and takes rel off that list.
func (a *applier) landedName(rel string, ino uint64) (*landing, bool) {
	e, ok := a.l.landed[ino]
	if !ok || !e.pending[rel] {
		return nil, false
	}
	delete(e.pending, rel)
	if len(e.pending) == 0 {
		delete(a.l.landed, ino)
	}
	return e, true
}

// linkable says whether a held entry of type t (S_IFMT bits) may have
// other names: anything but a folder. Before, only regular files and
// symbolic links counted, and approving hard links of a FIFO or a
// device node made one inode of each name (found by a data-integrity
// pass with fsstress).
func linkable(t uint32) bool { return t != 0 && t != unix.S_IFDIR }

// namesLocked lists tree/'s names of the file (not a folder) of inode
// number ino (l.mu held).
func (l *Layer) namesLocked(ino uint64) []string {
	var out []string
	for p, t := range l.upper.m {
		if !linkable(t) {
			continue
		}
		if st, err := l.up.Lstat(p); err == nil && st.Ino == ino {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// linkLanded lands the held regular file rel (ust; ud, its digest) as a
// hard link when another name of it is on the backing side already with
// exactly its content, mode and owner: a name an earlier unit of the
// same approval landed (land), or a backing file the principal copied up
// unchanged and linked in its layer (ln of a backing file). That copy is
// then dropped from the layer: it was the backing file, which now shows
// with all its names. It reports whether rel was landed.
func (a *applier) linkLanded(rel string, ust *unix.Stat_t, ud string, exists bool) (bool, error) {
	l := a.l
	if e, ok := a.landedName(rel, ust.Ino); ok {
		if a.sameFile(e.rel, e.dev, e.ino, ust, ud) {
			return true, a.linkOver(e.rel, rel, exists)
		}
	}
	if ust.Nlink < 2 {
		return false, nil
	}
	for _, o := range l.namesLocked(ust.Ino) {
		if o == rel || !l.unchangedCopyLocked(a.lower, o, ust, ud) {
			continue
		}
		lst, err := a.lower.Lstat(o)
		if err != nil {
			continue
		}
		if err := a.linkOver(o, rel, exists); err != nil {
			return true, err
		}
		// The copy goes: the principal sees the backing file (now with
		// rel's name too) again.
		if err := l.dropCopyLocked(o); err != nil {
			return true, err
		}
		l.pruneUpLocked(path.Dir(o))
		pending := map[string]bool{}
		for _, p := range l.namesLocked(ust.Ino) {
			if p != rel {
				pending[p] = true
			}
		}
		if len(pending) > 0 {
			l.landed[ust.Ino] = &landing{rel: o, dev: lst.Dev, ino: lst.Ino, pending: pending}
		}
		return true, nil
	}
	return false, nil
}

// unchangedCopyLocked reports whether tree/'s o is a backing file copied
// up and left as it was (no unit of its own), the backing file still its
// base, and its content, mode and owner those of the held file ust (ud,
// its digest) (l.mu held).
func (l *Layer) unchangedCopyLocked(lower *mounts.Root, o string, ust *unix.Stat_t, ud string) bool {
	b, ok := l.base.m[o]
	if !ok || b.Absent || b.Type != unix.S_IFREG || b.Digest != ud || b.Mode != ust.Mode&0o7777 || b.UID != ust.Uid || b.GID != ust.Gid {
		return false
	}
	if _, g := l.gone.m[o]; g {
		return false
	}
	if _, moved := l.from.m[o]; moved {
		return false
	}
	if upperXattrs(l.up, o) != b.Xattrs {
		return false
	}
	return same(lower, o, b)
}

// sameLink reports whether the backing rel is still the symbolic link
// (dev, ino) an approval landed, with the held link's target and owner.
func (a *applier) sameLink(rel string, dev, ino uint64, ust *unix.Stat_t, target []byte) bool {
	st, err := a.lower.Lstat(rel)
	if err != nil || st.Dev != dev || st.Ino != ino || st.Mode&unix.S_IFMT != unix.S_IFLNK || st.Uid != ust.Uid || st.Gid != ust.Gid {
		return false
	}
	t, err := a.lower.Readlink(rel)
	return err == nil && bytes.Equal(t, target)
}

// sameFile reports whether the backing rel is still the file (dev, ino)
// an approval landed, with the held file's content, mode and owner.
func (a *applier) sameFile(rel string, dev, ino uint64, ust *unix.Stat_t, ud string) bool {
	st, err := a.lower.Lstat(rel)
	if err != nil || st.Dev != dev || st.Ino != ino || st.Mode != ust.Mode || st.Uid != ust.Uid || st.Gid != ust.Gid {
		return false
	}
	d, err := digestFile(a.lower, rel)
	return err == nil && d == ud
}

// linkOver makes the backing rel another name of the backing src: linked
// next to rel and renamed over it, so rel is the old file or the new one,
// never missing.
func (a *applier) linkOver(src, rel string, exists bool) error {
	if exists {
		sst, err1 := a.lower.Lstat(src)
		rst, err2 := a.lower.Lstat(rel)
		if err1 == nil && err2 == nil && sst.Dev == rst.Dev && sst.Ino == rst.Ino {
			return nil // already one file (rename(2) would do nothing)
		}
	}
	tmp := a.tmpIn(parentOf(rel))
	if _, err := a.lower.Link(src, tmp); err != nil {
		a.untemp(tmp)
		return err
	}
	if exists {
		a.h.Before(rel, "rename")
	}
	err := a.lower.Rename(tmp, rel, 0)
	if err != nil {
		a.lower.Unlink(tmp)
	}
	a.untemp(tmp)
	if err != nil {
		return err
	}
	if !exists {
		a.h.Created(rel)
	}
	return nil
}

// tmpIn is a free name in the backing folder dir for a file being
// landed, recorded (l.temps) until untemp: a kill before the rename over
// its own name leaves it, and the next start removes it (RecoverAside).
// The record is not synced: a power loss that loses it loses the write
// of the file too, or most of it.
func (a *applier) tmpIn(dir string) string {
	a.n++
	tmp := join(dir, reserved.DaemonPrefix+"approve-"+strconv.FormatInt(time.Now().UnixNano(), 36)+strconv.Itoa(a.n))
	a.l.log(record{K: "temp", P: tmp})
	return tmp
}

// untemp records that the name tmpIn gave is gone: renamed over the
// file's own name, or removed.
func (a *applier) untemp(tmp string) { a.l.log(record{K: "untemp", P: tmp}) }

// attrs gives the backing rel the held file's mode and owner.
func (a *applier) attrs(rel string, st *unix.Stat_t) error {
	fd, err := a.lower.OpenPath(rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchownat(fd, "", int(st.Uid), int(st.Gid), unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if err := unix.Chmod(mounts.ProcPath(fd), st.Mode&0o7777); err != nil {
		return err
	}
	if !hasXattrs(st.Mode & unix.S_IFMT) {
		return nil
	}
	return syncXattrs(a.l.up, rel, a.lower, rel)
}

// writeFile writes the held file rel next to the backing one and renames
// it over, so a reader sees the old or the new file, never half of one.
// With pre (stage's copy of rel, as it is now) the content is there
// already, and the copy is taken.
func (a *applier) writeFile(rel string, st *unix.Stat_t, exists bool, pre *staged) error {
	var tmp string
	if pre != nil {
		tmp, pre.tmp = pre.tmp, "" // renamed or removed below
	} else {
		in, err := a.l.up.Open(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		inf := os.NewFile(uintptr(in), rel)
		defer inf.Close()
		tmp = a.tmpIn(parentOf(rel))
		fd, _, err := a.lower.Create(tmp, unix.O_WRONLY|unix.O_EXCL, 0o600, int(st.Uid), int(st.Gid))
		if err != nil {
			a.untemp(tmp)
			return err
		}
		if err := fill(os.NewFile(uintptr(fd), tmp), inf, st, nil); err != nil {
			a.lower.Unlink(tmp)
			a.untemp(tmp)
			return err
		}
	}
	if exists {
		a.h.Before(rel, "rename")
	}
	var flags uint
	if s := a.seen; s != nil && s.rel == rel {
		// Only the moment between the conflict check and this rename
		// was left, and a write of the owner's in it was replaced with
		// no conflict said. A name that was free at the check is taken
		// only if still free; a file that was there is looked at (its
		// change time too, which the exchange moves), exchanged with the
		// new one and looked at again: when it moved since the check it
		// is put back, and the approval fails as a conflict.
		// A name that held a folder, a symbolic link or another node at
		// the check was removed by sync (its type differs) and is free.
		now, nerr := a.lower.Lstat(rel)
		wasFile := !s.absent && s.st.Mode&unix.S_IFMT == unix.S_IFREG
		switch {
		case exists && (!wasFile || nerr != nil || !s.unchanged(&now, true)), !exists && wasFile:
			a.lower.Unlink(tmp)
			a.untemp(tmp)
			return &ConflictError{URI: a.l.Slug + "://" + rel}
		case !exists:
			flags = unix.RENAME_NOREPLACE
		default:
			flags = unix.RENAME_EXCHANGE
		}
		if f := beforeLandFile.Load(); f != nil {
			(*f)()
		}
	}
	err := a.lower.Rename(tmp, rel, flags)
	if flags == unix.RENAME_EXCHANGE && (errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS)) {
		// A backing file system with no exchange: renamed over, as
		// before.
		flags = 0
		err = a.lower.Rename(tmp, rel, 0)
	}
	if err == nil && flags == unix.RENAME_EXCHANGE {
		// tmp is the old file now.
		old, serr := a.lower.Lstat(tmp)
		if serr != nil || !a.seen.unchanged(&old, false) {
			if berr := a.lower.Rename(tmp, rel, unix.RENAME_EXCHANGE); berr != nil {
				// The owner's file stays at tmp: it is not removed, and
				// the approval is said to have failed.
				return fmt.Errorf("%s://%s: changed while the approval landed, and could not be put back (it is %s): %w", a.l.Slug, rel, tmp, berr)
			}
			a.lower.Unlink(tmp)
			a.untemp(tmp)
			return &ConflictError{URI: a.l.Slug + "://" + rel}
		}
		if a.lower.Unlink(tmp) != nil {
			return nil // left to the next start (RecoverAside), as recorded
		}
	} else if err != nil {
		a.lower.Unlink(tmp)
		if flags == unix.RENAME_NOREPLACE && errors.Is(err, syscall.EEXIST) {
			err = &ConflictError{URI: a.l.Slug + "://" + rel}
		}
	}
	a.untemp(tmp)
	if err != nil {
		return err
	}
	if !exists {
		a.h.Created(rel)
	}
	return nil
}

// beforeLandFile, when set (by tests), runs in writeFile just before the
// rename that lands a checked file, and in Apply just before a deletion.
var beforeLandFile atomic.Pointer[func()]

// afterRename, when set (by tests), runs in Apply just after a rename
// landed, before what the principal changed in it since.
var afterRename atomic.Pointer[func()]

// MaxDiffBytes bounds the content Diff reads of either side.
const MaxDiffBytes = 4 << 20

// Diff renders c for a reviewer: a unified diff for text, sizes and
// digests for anything else, a rename as a rename, a folder as one unit.
//
// Names and content come from the principal, and a reviewer reads the
// diff in a terminal: a name with a control character is quoted, and
// every control character but newline and tab, every Unicode
// bidirectional control and every byte that is not UTF-8 is shown
// escaped (\x1b, \u202e), so that no held file can move the cursor, hide
// a line or reorder what the reviewer sees.
// A conflict is told as Shown tells it.
//
// read, when not nil, says which files the reader's own file permissions
// let it read: the content and extended attributes of a file it may not
// read on either side are not shown (its sizes and modes are, as stat
// shows them).
func (l *Layer) Diff(lower *mounts.Root, c Change, shown func(uri string) bool, read *Readable) string {
	text, _ := l.DiffShown(lower, c, shown, read)
	return text
}

// Shown is what a diff showed of each held name of a unit (by path):
// its stat, the digest of the content printed, the target, the digest of
// the attributes shown (StillShows).
type Shown map[string]nameState

// DiffShown is Diff, with what it showed of the held names.
func (l *Layer) DiffShown(lower *mounts.Root, c Change, shown func(uri string) bool, read *Readable) (string, Shown) {
	rec := Shown{}
	var b strings.Builder
	head := fmt.Sprintf("%s %s %s", c.ID, c.Op, quoteName(c.URI))
	if c.Op == "rename" {
		head = fmt.Sprintf("%s rename %s -> %s", c.ID, quoteName(c.Slug+"://"+c.From), quoteName(c.URI))
	}
	fmt.Fprintf(&b, "# %s\n", head)
	if runs := c.GitRuns(l.HookDirs(lower)); len(runs) > 0 {
		for i, p := range runs {
			runs[i] = quoteName(c.Slug + "://" + p)
		}
		fmt.Fprintf(&b, "# git runs commands from %s: approving this lets %s run commands as whoever next runs git there; review approve --all leaves it held\n", strings.Join(runs, ", "), c.Principal)
	}
	if err := l.ConflictShown(lower, c, shown); err != nil {
		fmt.Fprintf(&b, "# conflict: %s\n", strings.NewReplacer("\n", `\n`, "\t", `\t`).Replace(err.Error()))
	}
	old := c.Path
	if c.Op == "rename" {
		old = c.From
	}
	switch c.Op {
	case "delete", "rmdir":
		l.fileDiff(&b, lower, old, "", read, rec)
	default:
		l.fileDiff(&b, lower, old, c.Path, read, rec)
		for _, p := range c.Inside {
			o := p
			if c.Op == "rename" {
				o = c.From + p[len(c.Path):]
			}
			l.fileDiff(&b, lower, o, p, read, rec)
		}
	}
	return visible(b.String()), rec
}

// StillShows reports whether the diff that showed sh of c showed what
// c's id names: the id computed from what the diff showed of each held
// name (stat, the digest of the content it printed, the target, the
// attributes) is the one listed. A unit the principal changed while its
// diff was read could have it show one content under the id of another,
// and approving that id landed the other (a red-team pass rewrote a file
// between two contents of one length in a loop: 16 of 300 diffs printed
// the harmless one under the id of the other). Nothing is read again: a
// check that read the files a second time could see them change back
// between its reads (the pass after it: 2 of 300). A name the diff did
// not show whole (content or attributes not shown) never matches: such a
// unit is one its reader may not approve anyway.
func (l *Layer) StillShows(c Change, sh Shown) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	id := l.idLocked(c, c.Inside, func(h io.Writer, rel string) {
		l.fingerprintOf(h, rel, func(rel string, t uint32) (nameState, bool) {
			s, ok := sh[rel]
			return s, ok
		})
	})
	return id == c.ID
}

// Readable says which files a diff's reader may read by its own file
// permissions: Backing the backing file at a path, Held the layer's own
// file at a path.
type Readable struct {
	Backing, Held func(rel string) bool
}

// hides reports whether the reader may not read one of the two sides
// that exist: old in the backing folder (ost), new in the layer (nst).
// A symbolic link is read without permission.
func (r *Readable) hides(old string, ost *unix.Stat_t, oldOK bool, new string, nst *unix.Stat_t, newOK bool) bool {
	if r == nil {
		return false
	}
	return oldOK && ost.Mode&unix.S_IFMT != unix.S_IFLNK && !r.Backing(old) ||
		newOK && nst.Mode&unix.S_IFMT != unix.S_IFLNK && !r.Held(new)
}

// shownEscaped reports whether r is shown escaped in a diff: a control
// character but newline and tab, a bidirectional control, or one that
// shows as nothing or as a space (rawname.Hidden).
func shownEscaped(r rune) bool { return r != '\n' && r != '\t' && rawname.Hidden(r) }

// visible escapes what shownEscaped names, and bytes that are not UTF-8.
func visible(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || shownEscaped(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case r < 0x80 && shownEscaped(r):
			fmt.Fprintf(&b, "\\x%02x", r)
		case shownEscaped(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// quoteName quotes a name that holds a newline, tab or anything visible
// escapes, so one name stays one line and one word.
func quoteName(s string) string {
	for _, r := range s {
		if r == '\n' || r == '\t' || r == utf8.RuneError || shownEscaped(r) {
			return rawname.Quote(s)
		}
	}
	return s
}

// fileDiff renders one path: old on the backing side, new on the held
// side ("" for none).
func (l *Layer) fileDiff(b *strings.Builder, lower *mounts.Root, old, new string, read *Readable, rec Shown) {
	ost, oerr := lower.Lstat(old)
	var nst unix.Stat_t
	nerr := error(syscall.ENOENT)
	if new != "" {
		nst, nerr = l.up.Lstat(new)
	}
	name := new
	if name == "" {
		name = old
	}
	qold, name := quoteName(old), quoteName(name)
	if oerr == nil && nerr == nil && ost.Mode&unix.S_IFMT != nst.Mode&unix.S_IFMT {
		// One kind of file replaced by another: say so, then show the
		// new one as new.
		fmt.Fprintf(b, "type %s: %s -> %s\n", name, typeName(ost.Mode&unix.S_IFMT), typeName(nst.Mode&unix.S_IFMT))
		oerr = syscall.ENOENT
	}
	hidden := read.hides(old, &ost, oerr == nil, new, &nst, nerr == nil)
	var was nameState
	if nerr == nil {
		// What is shown of the held name, for StillShows: its stat now,
		// its attributes and its content as read below.
		was = nameState{mode: nst.Mode, uid: nst.Uid, gid: nst.Gid, rdev: nst.Rdev}
		defer func() { rec[new] = was }()
	}
	if nerr == nil && !hidden {
		// Against nothing when the name is new: every attribute it has.
		was.xattrs, was.hasXattrs = xattrDiff(b, name, lower, old, l.up, new), true
	}
	if oerr == nil && ost.Mode&unix.S_IFMT == unix.S_IFDIR || nerr == nil && nst.Mode&unix.S_IFMT == unix.S_IFDIR {
		switch {
		case oerr != nil:
			fmt.Fprintf(b, "folder %s (mode %s, owner %s, new)\n", name, modeText(nst.Mode), ownerText(&nst))
		case nerr != nil:
			fmt.Fprintf(b, "folder %s (deleted with everything in it)\n", qold)
		default:
			if ost.Mode != nst.Mode {
				fmt.Fprintf(b, "folder %s mode %s -> %s\n", name, modeText(ost.Mode), modeText(nst.Mode))
			}
			ownerDiff(b, name, &ost, &nst)
		}
		return
	}
	if oerr != nil && nerr == nil && nst.Mode&unix.S_IFMT != unix.S_IFLNK {
		// A new file's mode and owner: whether it is executable,
		// set-user-ID or set-group-ID, and whose (a symbolic link's mode
		// is always 0777).
		fmt.Fprintf(b, "%s %s (mode %s, owner %s, new)\n", typeName(nst.Mode&unix.S_IFMT), name, modeText(nst.Mode), ownerText(&nst))
	}
	if oerr == nil && nerr == nil && ost.Mode&0o7777 != nst.Mode&0o7777 {
		fmt.Fprintf(b, "mode %s %s -> %s\n", name, modeText(ost.Mode), modeText(nst.Mode))
	}
	if oerr == nil && nerr == nil {
		ownerDiff(b, name, &ost, &nst)
	}
	if hidden {
		size := func(st *unix.Stat_t, ok bool) string {
			if !ok {
				return "absent"
			}
			return fmt.Sprintf("%d bytes", st.Size)
		}
		fmt.Fprintf(b, "content %s not shown: your file permissions do not let you read it (%s -> %s)\n", name, size(&ost, oerr == nil), size(&nst, nerr == nil))
		return
	}
	// A backing file past MaxDiffBytes is read whole only against a held
	// one (to tell a change from none): a deleted file may be of any
	// length, and every read of the principal's own diff would read it.
	// A held file's digest is remembered (upperDigest): the principal
	// may read its own diff again and again.
	o := readSide(lower, old, oerr == nil, &ost, nerr == nil, nil)
	n := readSide(l.up, new, nerr == nil, &nst, true, func() string { return l.upperDigest(new, &nst) })
	switch nst.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if n.digest != "" && (n.c != nil || n.large) {
			was.digest = n.digest
		}
	case unix.S_IFLNK:
		was.target = bytes.TrimPrefix(n.c, []byte("symlink -> "))
	}
	if o.ok == n.ok && o.digest == n.digest {
		return
	}
	if o.large || n.large {
		fmt.Fprintf(b, "content %s not shown: larger than %d MiB (%s -> %s)\n", name, MaxDiffBytes>>20, o.describe(), n.describe())
		return
	}
	if !o.text || !n.text {
		fmt.Fprintf(b, "binary %s: %s -> %s\n", name, o.describe(), n.describe())
		return
	}
	oc, nc := o.c, n.c
	from, to := quoteName("a/"+old), quoteName("b/"+new)
	if oerr != nil {
		from = "/dev/null"
	}
	if nerr != nil {
		to = "/dev/null"
	}
	b.WriteString(udiff.Unified(from, to, string(oc), string(nc)))
}

// modeText is a file's permission bits in octal, and the bits that
// change who a program runs as, or who may remove names, in words.
// ownerText is a file's owner and group, as numbers: what a chgrp of a
// set-group-ID program lands, which the diff did not show (a red-team
// pass approved a group the reviewer was never told of).
func ownerText(st *unix.Stat_t) string { return fmt.Sprintf("%d:%d", st.Uid, st.Gid) }

// ownerDiff writes a line when the owner or the group of name changes.
func ownerDiff(b *strings.Builder, name string, ost, nst *unix.Stat_t) {
	if ost.Uid != nst.Uid || ost.Gid != nst.Gid {
		fmt.Fprintf(b, "owner %s %s -> %s\n", name, ownerText(ost), ownerText(nst))
	}
}

func modeText(m uint32) string {
	t := fmt.Sprintf("%04o", m&0o7777)
	var special []string
	if m&unix.S_ISUID != 0 {
		special = append(special, "set-user-ID")
	}
	if m&unix.S_ISGID != 0 {
		special = append(special, "set-group-ID")
	}
	if m&unix.S_ISVTX != 0 {
		special = append(special, "sticky")
	}
	if len(special) > 0 {
		t += " " + strings.Join(special, ", ")
	}
	return t
}

// xattrDiff writes a line per extended attribute that differs between
// rel in lower and new in up, and returns the digest of new's (what it
// read of them).
func xattrDiff(b *strings.Builder, name string, lower *mounts.Root, rel string, up *mounts.Root, new string) (shown string) {
	ox, _ := xattrsAt(lower, rel)
	nx, _ := xattrsAt(up, new)
	defer func() { shown = xattrDigest(nx) }()
	show := func(k string, v []byte, ok bool) string {
		if !ok {
			return "absent"
		}
		if acl, isACL := aclText(k, v); isACL {
			return acl
		}
		if len(v) > 64 || !utf8.Valid(v) || strings.IndexFunc(string(v), shownEscaped) >= 0 || bytes.IndexByte(v, '\n') >= 0 {
			return fmt.Sprintf("%d bytes %s", len(v), digestBytes(v))
		}
		return strconv.Quote(string(v))
	}
	all := map[string][]byte{}
	for k, v := range ox {
		all[k] = v
	}
	for k, v := range nx {
		all[k] = v
	}
	for _, k := range sortedNames(all) {
		o, ook := ox[k]
		n, nok := nx[k]
		if ook == nok && bytes.Equal(o, n) {
			continue
		}
		fmt.Fprintf(b, "xattr %s %s: %s -> %s\n", name, k, show(k, o, ook), show(k, n, nok))
	}
	return
}

// aclText shows a POSIX ACL (system.posix_acl_access or _default) as
// getfacl's short form, "user::rwx,user:1001:rwx,group::r-x,mask::rwx,
// other::r-x": a reviewer reads what it grants (a default ACL on a
// folder makes every file later written there readable by whom it
// names, whatever the writer's umask), where a digest said nothing.
// isACL is false for any other attribute, or a value that is not one.
func aclText(name string, v []byte) (text string, isACL bool) {
	if name != "system.posix_acl_access" && name != "system.posix_acl_default" {
		return "", false
	}
	if len(v) < 4 || (len(v)-4)%8 != 0 || binary.LittleEndian.Uint32(v) != 2 {
		return "", false
	}
	tags := map[uint16]string{0x01: "user:", 0x02: "user:", 0x04: "group:", 0x08: "group:", 0x10: "mask:", 0x20: "other:"}
	var parts []string
	for e := v[4:]; len(e) >= 8; e = e[8:] {
		tag, perm, id := binary.LittleEndian.Uint16(e), binary.LittleEndian.Uint16(e[2:]), binary.LittleEndian.Uint32(e[4:])
		t, ok := tags[tag]
		if !ok {
			return "", false
		}
		who := ""
		if tag == 0x02 || tag == 0x08 {
			who = strconv.FormatUint(uint64(id), 10)
		}
		rwx := []byte("---")
		for i, c := range []byte("rwx") {
			if perm&(4>>i) != 0 {
				rwx[i] = c
			}
		}
		parts = append(parts, t+who+":"+string(rwx))
	}
	return strconv.Quote(strings.Join(parts, ",")), true
}

// side is one side of a file's diff, as readSide read it.
type side struct {
	ok     bool   // the file exists
	c      []byte // its content (a symlink's "symlink -> target"); nil when large
	text   bool   // c is all of it, and text
	large  bool   // a regular file longer than MaxDiffBytes
	size   int64  // its length in bytes
	digest string // the digest of all of it
	kind   string // what it is when not a regular file or symlink (fifo…)
}

func (s side) describe() string {
	switch {
	case !s.ok:
		return "absent"
	case s.kind != "":
		return s.kind
	case s.large && s.digest == "":
		return fmt.Sprintf("%d bytes", s.size)
	case s.digest == "":
		return fmt.Sprintf("%d bytes, unreadable", s.size)
	}
	return fmt.Sprintf("%d bytes %s", s.size, s.digest)
}

// readSide reads a file for Diff. A regular file longer than
// MaxDiffBytes is read to its end for its digest and length when whole
// is set, so that a change past the part shown is never taken for no
// change; otherwise its length is the one st gives.
//
// digest, when not nil, gives the digest of a file past MaxDiffBytes
// instead of reading it whole ("" when it cannot).
func readSide(r *mounts.Root, rel string, ok bool, st *unix.Stat_t, whole bool, digest func() string) side {
	if !ok {
		return side{text: true}
	}
	s := side{ok: true}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		t, _ := r.Readlink(rel)
		s.c = append([]byte("symlink -> "), t...)
		s.text, s.size, s.digest = true, int64(len(s.c)), digestBytes(s.c)
		return s
	case unix.S_IFREG:
	default:
		s.kind = specialText(st)
		s.digest = fmt.Sprintf("%s %d", s.kind, st.Rdev)
		return s
	}
	s.size = st.Size
	fd, err := r.OpenNoAtime(rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return s
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	c, err := io.ReadAll(io.LimitReader(f, MaxDiffBytes+1))
	if err != nil {
		return s
	}
	if len(c) <= MaxDiffBytes {
		s.c, s.size, s.digest = c, int64(len(c)), digestBytes(c)
		s.text = bytes.IndexByte(c, 0) < 0 && utf8Valid(c)
		return s
	}
	s.large = true
	if !whole {
		return s
	}
	if digest != nil {
		if d := digest(); d != "" {
			s.digest = d
			return s
		}
	}
	h := sha256.New()
	h.Write(c)
	n, err := io.Copy(h, f)
	if err != nil {
		s.large = false // "unreadable"
		return s
	}
	s.size, s.digest = int64(len(c))+n, "sha256:"+hex.EncodeToString(h.Sum(nil))
	return s
}

func utf8Valid(b []byte) bool { return utf8.Valid(b) }

// specialText names a file that is neither a regular file, a folder nor
// a symlink, for a diff: which kind lands, and a device's numbers (it
// said "special" for each; a red-team pass).
func specialText(st *unix.Stat_t) string {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return fmt.Sprintf("character device %d,%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	case unix.S_IFBLK:
		return fmt.Sprintf("block device %d,%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	return "special"
}
