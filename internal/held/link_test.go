package held

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
)

// applyAll approves every change of l (in the order given by order, a
// permutation of the paths Changes lists; nil for theirs), each grouped
// with what it links to, as the daemon does, and fails on an error.
func applyAll(t *testing.T, l *Layer, lower *mounts.Root, h Hooks, order ...string) {
	t.Helper()
	cs := l.Changes(lower)
	if order != nil {
		byPath := map[string]Change{}
		for _, c := range cs {
			byPath[c.Path] = c
		}
		cs = cs[:0]
		for _, p := range order {
			c, ok := byPath[p]
			if !ok {
				t.Fatalf("no change at %s (have %v)", p, byPath)
			}
			cs = append(cs, c)
		}
	}
	for _, c := range cs {
		if err := l.Apply(lower, c, h, false); err != nil {
			t.Fatalf("apply %s %s: %v", c.Op, c.Path, err)
		}
	}
	if left := l.Changes(lower); len(left) != 0 {
		t.Errorf("changes left after approving all: %+v", left)
	}
}

func lstat(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// sameInode fails unless the backing names are one file with exactly
// them as its names (and content want).
func sameInode(t *testing.T, back, want string, rels ...string) {
	t.Helper()
	first := lstat(t, filepath.Join(back, rels[0]))
	for _, r := range rels {
		st := lstat(t, filepath.Join(back, r))
		if st.Ino != first.Ino {
			t.Errorf("backing %s is inode %d, %s is %d: want one file", r, st.Ino, rels[0], first.Ino)
		}
		if int(st.Nlink) != len(rels) {
			t.Errorf("backing %s has %d links, want %d", r, st.Nlink, len(rels))
		}
		if b, _ := os.ReadFile(filepath.Join(back, r)); string(b) != want {
			t.Errorf("backing %s = %q, want %q", r, b, want)
		}
	}
}

// Names of one held file list the other names as links, are grouped by
// Together, and land as one backing file whichever unit is applied
// first; a link to a backing file lands as a link to it, and its
// unchanged copy leaves the layer.
func TestLinksLandAsLinks(t *testing.T) {
	s, lower, back := setup(t)
	l, err := s.Ensure("agent", "d")
	if err != nil {
		t.Fatal(err)
	}
	mustLink := func(old, new string) {
		t.Helper()
		if _, err := l.Link(lower, old, new); err != nil {
			t.Fatalf("link %s %s: %v", old, new, err)
		}
	}
	// A new file with two names.
	write(t, l, lower, "n.txt", "n\n")
	idBefore := l.Changes(lower)[0].ID
	mustLink("n.txt", "n2.txt")
	// A backing file linked, not changed.
	aIno := lstat(t, filepath.Join(back, "a.txt")).Ino
	mustLink("a.txt", "a2.txt")
	// A backing file linked, then written through the new name.
	mustLink("d/b.txt", "d/b2.txt")
	write(t, l, lower, "d/b2.txt", "B\n")
	// A file in a new folder linked outside it.
	if err := l.Make(lower, "nd", func(up *mounts.Root) error {
		_, err := up.Mkdir("nd", 0o755, -1, -1)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	write(t, l, lower, "nd/x", "x\n")
	mustLink("nd/x", "y")

	cs := l.Changes(lower)
	links := map[string][]string{}
	idx := map[string]int{}
	for i, c := range cs {
		links[c.Path] = c.Links
		idx[c.Path] = i
	}
	for p, want := range map[string][]string{
		"n.txt": {"n2.txt"}, "n2.txt": {"n.txt"},
		"a2.txt":  {"a.txt"},
		"d/b.txt": {"d/b2.txt"}, "d/b2.txt": {"d/b.txt"},
		"nd": {"y"}, "y": {"nd/x"},
	} {
		if !equal(links[p], want) {
			t.Errorf("links of %s = %v, want %v", p, links[p], want)
		}
	}
	if _, ok := idx["a.txt"]; ok {
		t.Errorf("a.txt, copied up unchanged for a link, is a change: %v", ops(cs))
	}
	if cs[idx["n.txt"]].ID == idBefore {
		t.Errorf("n.txt kept its id when a link to it was made")
	}
	for pick, want := range map[string][]string{
		"y":      {"nd", "y"},
		"n2.txt": {"n.txt", "n2.txt"},
		"a2.txt": {"a2.txt"},
	} {
		var got []string
		for _, i := range Together(cs, []int{idx[pick]}) {
			got = append(got, cs[i].Path)
		}
		if !equal(got, want) {
			t.Errorf("Together(%s) = %v, want %v", pick, got, want)
		}
	}

	var created []string
	h := Hooks{Created: func(rel string) { created = append(created, rel) }}
	// y before the folder holding its other name, n2.txt before n.txt.
	applyAll(t, l, lower, h, "y", "nd", "n2.txt", "n.txt", "a2.txt", "d/b.txt", "d/b2.txt")
	sameInode(t, back, "n\n", "n.txt", "n2.txt")
	sameInode(t, back, "x\n", "nd/x", "y")
	sameInode(t, back, "a\n", "a.txt", "a2.txt")
	if ino := lstat(t, filepath.Join(back, "a.txt")).Ino; ino != aIno {
		t.Errorf("a.txt was replaced (inode %d, was %d): a link to it must keep it", ino, aIno)
	}
	sameInode(t, back, "B\n", "d/b.txt", "d/b2.txt")
	for _, want := range []string{"n2.txt", "n.txt", "y", "a2.txt", "d/b2.txt"} {
		found := false
		for _, c := range created {
			found = found || c == want
		}
		if !found {
			t.Errorf("no Created hook for %s (journal): %v", want, created)
		}
	}
	if w := l.Where("a.txt"); w != Lower {
		t.Errorf("the unchanged copy of a.txt stays in the layer (%v)", w)
	}
	ents, _ := os.ReadDir(filepath.Join(back))
	for _, e := range ents {
		if len(e.Name()) > 9 && e.Name()[:9] == ".neuralis" {
			t.Errorf("a temporary name is left in the backing folder: %s", e.Name())
		}
	}
}

// A name landed on its own (the other name rejected, or changed since)
// is a file of its own, never a link to content the reviewer did not
// see.
func TestLinkLandsAloneWhenContentMoved(t *testing.T) {
	s, lower, back := setup(t)
	l, err := s.Ensure("agent", "d")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Link(lower, "a.txt", "a2.txt"); err != nil {
		t.Fatal(err)
	}
	// The backing a.txt changes behind the layer: a2.txt must land
	// with the content the principal had, as a file of its own.
	if err := os.WriteFile(filepath.Join(back, "a.txt"), []byte("moved on\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var c Change
	for _, x := range l.Changes(lower) {
		if x.Path == "a2.txt" {
			c = x
		}
	}
	if err := l.Apply(lower, c, Hooks{}, false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(back, "a2.txt")); string(b) != "a\n" {
		t.Errorf("a2.txt = %q, want the principal's content", b)
	}
	if st := lstat(t, filepath.Join(back, "a2.txt")); st.Nlink != 1 {
		t.Errorf("a2.txt has %d links, want a file of its own", st.Nlink)
	}
	if b, _ := os.ReadFile(filepath.Join(back, "a.txt")); string(b) != "moved on\n" {
		t.Errorf("a.txt = %q, want the backing content left alone", b)
	}
}

// DirLinks counts a folder's subfolders as the principal sees them.
func TestDirLinks(t *testing.T) {
	s, lower, _ := setup(t)
	l, err := s.Ensure("agent", "d")
	if err != nil {
		t.Fatal(err)
	}
	want := func(rel string, n uint64) {
		t.Helper()
		if got, ok := l.DirLinks(lower, rel); !ok || got != n {
			t.Errorf("DirLinks(%q) = %d, %v; want %d", rel, got, ok, n)
		}
	}
	want("", 3)  // d
	want("d", 3) // d/e
	mkdir := func(rel string) {
		t.Helper()
		if err := l.Make(lower, rel, func(up *mounts.Root) error {
			_, err := up.Mkdir(rel, 0o755, -1, -1)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	mkdir("d/n")
	want("d", 4)
	for _, p := range []string{"d/e/c.txt", "d/e"} {
		if err := l.Remove(lower, p, p == "d/e"); err != nil {
			t.Fatal(err)
		}
	}
	want("d", 3)
	if err := l.Rename(lower, "d/n", "x", 0); err != nil {
		t.Fatal(err)
	}
	want("d", 2)
	want("", 4)
	want("x", 2)
	if _, ok := l.DirLinks(lower, "a.txt"); ok {
		t.Errorf("DirLinks of a file says ok")
	}
}

// DirLinks of a folder where the layer has many names reads the backing
// folder's subfolders in one pass (or none where its count says it has
// none) instead of a stat a name, and counts as before: held files over
// backing files, a backing folder replaced by a file, one removed, a new
// folder, a backing file replaced by a folder.
func TestDirLinksWithManyNames(t *testing.T) {
	s, lower, back := setup(t)
	l, err := s.Ensure("agent", "d")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		for _, dir := range []string{"m", "leaf"} {
			p := filepath.Join(back, dir, fmt.Sprintf("f%d", i))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 5 {
		if err := os.Mkdir(filepath.Join(back, "m", fmt.Sprintf("s%d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	want := func(rel string, n uint64) {
		t.Helper()
		if got, ok := l.DirLinks(lower, rel); !ok || got != n {
			t.Errorf("DirLinks(%q) = %d, %v; want %d", rel, got, ok, n)
		}
	}
	for i := range 20 {
		write(t, l, lower, fmt.Sprintf("m/f%d", i), "held\n")
		write(t, l, lower, fmt.Sprintf("leaf/f%d", i), "held\n")
	}
	want("m", 7)
	want("leaf", 2)
	if err := l.Remove(lower, "m/s0", true); err != nil {
		t.Fatal(err)
	}
	if err := makeFile(l, lower, "m/s0"); err != nil {
		t.Fatal(err)
	}
	if err := l.Remove(lower, "m/s1", true); err != nil {
		t.Fatal(err)
	}
	want("m", 5)
	if err := makeDir(l, lower, "m/new"); err != nil {
		t.Fatal(err)
	}
	if err := l.Remove(lower, "m/f3", false); err != nil {
		t.Fatal(err)
	}
	if err := makeDir(l, lower, "m/f3"); err != nil {
		t.Fatal(err)
	}
	want("m", 7)
	if err := makeDir(l, lower, "leaf/sub"); err != nil {
		t.Fatal(err)
	}
	want("leaf", 3)
	// A subfolder made behind the layer's back counts too.
	if err := os.Mkdir(filepath.Join(back, "leaf", "owners"), 0o755); err != nil {
		t.Fatal(err)
	}
	want("leaf", 4)
}

// An attribute-only change (mode, extended attributes) to a backing file
// that has other names lands as a content change does, as a file of its
// own under its name: in place it reached the other names too, one of
// them in a folder hidden from the principal (a red-team pass set an
// attribute on a name the owner had linked into secrets/). The other
// names keep the file as it was.
func TestAttributeChangeOfALinkedFileLeavesTheOtherNames(t *testing.T) {
	s, lower, back := setupTB(t)
	l, err := s.Ensure("agent", "d")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(back, "a.txt"), filepath.Join(back, "d", "e", "other")); err != nil {
		t.Fatal(err)
	}
	before := lstat(t, filepath.Join(back, "a.txt"))
	if err := l.CopyUp(lower, "a.txt"); err != nil {
		t.Fatal(err)
	}
	held := filepath.Join(l.dir, "tree", "a.txt")
	if err := os.Chmod(held, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(held, "user.note", []byte("planted"), 0); err != nil {
		t.Skipf("user xattrs: %v", err)
	}
	cs := l.Changes(lower)
	if len(cs) != 1 || cs[0].Op != "chmod" {
		t.Fatalf("changes: %+v", cs)
	}
	applyAll(t, l, lower, Hooks{})
	a, o := lstat(t, filepath.Join(back, "a.txt")), lstat(t, filepath.Join(back, "d", "e", "other"))
	if a.Mode&0o7777 != 0o600 {
		t.Errorf("a.txt mode %o, want 600", a.Mode&0o7777)
	}
	if o.Ino != before.Ino || o.Mode != before.Mode || o.Nlink != 1 {
		t.Errorf("the other name: inode %d mode %o links %d; want %d %o 1", o.Ino, o.Mode, o.Nlink, before.Ino, before.Mode)
	}
	if n, err := unix.Getxattr(filepath.Join(back, "d", "e", "other"), "user.note", make([]byte, 64)); err == nil {
		t.Errorf("the other name got the attribute (%d bytes)", n)
	}
	if b, err := os.ReadFile(filepath.Join(back, "a.txt")); err != nil || string(b) != "a\n" {
		t.Errorf("a.txt: %q, %v", b, err)
	}
}
