package held

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
)

// checkIndex compares the layer's index with one built afresh from upper
// and gone, and DirLinks and View.Changed with the walks over every held
// name they replaced.
func checkIndex(t *testing.T, l *Layer, lower *mounts.Root, step string) {
	t.Helper()
	l.mu.RLock()
	fresh := newNameIndex(l.idx.inUnion)
	for p := range l.upper.m {
		fresh.add(p)
	}
	for p := range l.gone.m {
		if _, up := l.upper.m[p]; !up {
			fresh.add(p)
		}
	}
	same := reflect.DeepEqual(fresh.kids, l.idx.kids) && reflect.DeepEqual(fresh.below, l.idx.below)
	var folders []string
	for p, t := range l.upper.m {
		if t == unix.S_IFDIR {
			folders = append(folders, p)
		}
	}
	all := map[string]bool{}
	for p := range l.upper.m {
		all[p] = true
	}
	for p := range l.gone.m {
		all[p] = true
	}
	for name, below := range map[string][2]map[string]int{
		"base":  {l.base.below, freshBelow(l.base.m)},
		"from":  {l.from.below, freshBelow(l.from.m)},
		"since": {l.since.below, freshBelow(l.since.m)},
		"sizes": {l.sizes.below, freshBelow(l.sizes.m)},
	} {
		if !reflect.DeepEqual(below[0], below[1]) {
			l.mu.RUnlock()
			t.Fatalf("%s: %s counts %v below its folders, want %v", step, name, below[0], below[1])
		}
	}
	l.mu.RUnlock()
	if !same {
		t.Fatalf("%s: the index is not the one upper and gone make:\nkids %v\nwant %v\nbelow %v\nwant %v",
			step, l.idx.kids, fresh.kids, l.idx.below, fresh.below)
	}
	v := &View{l: l, lower: lower}
	for _, rel := range append(folders, "", "d", "d/e", "x", "x/y", "nothere") {
		want := false
		for p := range all {
			if p == rel || strings.HasPrefix(p, rel+"/") || rel == "" {
				want = true
			}
		}
		if got := v.Changed(rel); got != want {
			t.Fatalf("%s: Changed(%q) = %v, want %v", step, rel, got, want)
		}
		n, ok := l.DirLinks(lower, rel)
		bn, bok := bruteDirLinks(l, lower, rel)
		if n != bn || ok != bok {
			t.Fatalf("%s: DirLinks(%q) = %d %v, a walk over every name gives %d %v", step, rel, n, ok, bn, bok)
		}
	}
}

// bruteDirLinks is DirLinks with rel's held names found as before the
// index: by walking every name of upper and gone.
func bruteDirLinks(l *Layer, lower *mounts.Root, rel string) (uint64, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	prefix := rel + "/"
	if rel == "" {
		prefix = ""
	}
	names := map[string]struct{}{}
	child := func(p string) {
		if strings.HasPrefix(p, prefix) && p != rel && !strings.Contains(p[len(prefix):], "/") {
			names[p] = struct{}{}
		}
	}
	for p := range l.upper.m {
		child(p)
	}
	for p := range l.gone.m {
		child(p)
	}
	return l.dirLinksLocked(lower, rel, names)
}

// The index of held names by folder follows every kind of change a layer
// makes — writes, creates, folders, removals, renames and exchanges of
// files and folders, links, approvals and rejections — and a replay of the
// layer's records builds the same one.
// freshBelow counts the keys of m strictly below each folder, as a
// pathMap keeps them.
func freshBelow[V any](m map[string]V) map[string]int {
	below := map[string]int{}
	for p := range m {
		for a := p; a != ""; {
			a = parentOf(a)
			below[a]++
		}
	}
	return below
}

// TestPathMapMovesLikeAWalk: a pathMap's move, swap and drop, which skip
// the walk when nothing lies below the names, leave the map as the walk
// over every key does, and its counts as counting afresh.
func TestPathMapMovesLikeAWalk(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	names := []string{"a", "b", "a/x", "a/y", "a/x/1", "b/x", "b/x/1", "c", "c/a", "ab", "ab/x"}
	pick := func() string { return names[rnd.Intn(len(names))] }
	pm := newPathMap[int]()
	walk := map[string]int{}
	set := func(k string, v int) { walk[k] = v }
	del := func(k string) { delete(walk, k) }
	for i := range 5000 {
		var step string
		switch a, b := pick(), pick(); rnd.Intn(6) {
		case 0, 1:
			step = "set " + a
			pm.set(a, i)
			walk[a] = i
		case 2:
			step = "del " + a
			pm.del(a)
			delete(walk, a)
		case 3, 4:
			if a == b || under(a, b) || under(b, a) {
				continue
			}
			if rnd.Intn(2) == 0 {
				step = "move " + a + " " + b
				pm.move(a, b)
				moveWith(walk, a, b, true, set, del)
			} else {
				step = "swap " + a + " " + b
				pm.swap(a, b)
				swapWith(walk, a, b, true, set, del)
			}
		case 5:
			step = "drop " + a
			want := []string{}
			for k := range walk {
				if under(k, a) {
					want = append(want, k)
				}
			}
			got := pm.keysUnder(a)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) && len(got)+len(want) > 0 {
				t.Fatalf("step %d: keysUnder(%s) = %v, want %v", i, a, got, want)
			}
			pm.drop(a)
			dropWith(walk, a, true, del)
		}
		if !reflect.DeepEqual(pm.m, walk) {
			t.Fatalf("step %d (%s): map %v, the walk gives %v", i, step, pm.m, walk)
		}
		if want := freshBelow(walk); !reflect.DeepEqual(pm.below, want) {
			t.Fatalf("step %d (%s): counts %v, want %v", i, step, pm.below, want)
		}
	}
}

func TestIndexFollowsEveryLayerChange(t *testing.T) {
	s, lower, back := setup(t)
	l, err := s.Ensure("agent", "d")
	if err != nil {
		t.Fatal(err)
	}
	checkIndex(t, l, lower, "empty")
	rnd := rand.New(rand.NewSource(1))
	names := []string{"a.txt", "gone.txt", "d", "d/b.txt", "d/e", "d/e/c.txt", "x", "x/y", "x/y/z.txt", "x/f.txt", "n.txt", "d/n2.txt"}
	pick := func() string { return names[rnd.Intn(len(names))] }
	for i := range 400 {
		var step string
		switch rnd.Intn(9) {
		case 0, 1:
			p := pick()
			step = "write " + p
			if l.Where(parentOf(p)) != Absent || parentOf(p) == "" {
				if st, _, err := l.Lstat(lower, p); err != nil || st.Mode&unix.S_IFMT == unix.S_IFREG {
					if err := l.CopyUp(lower, p); err != nil {
						makeFile(l, lower, p)
					}
				}
			}
		case 2:
			p := pick()
			step = "mkdir " + p
			l.Make(lower, p, func(up *mounts.Root) error { _, err := up.Mkdir(p, 0o755, -1, -1); return err })
		case 3:
			p := pick()
			st, _, err := l.Lstat(lower, p)
			step = "remove " + p
			if err == nil {
				l.Remove(lower, p, st.Mode&unix.S_IFMT == unix.S_IFDIR)
			}
		case 4, 5:
			a, b := pick(), pick()
			flags := uint(0)
			if rnd.Intn(3) == 0 {
				flags = unix.RENAME_EXCHANGE
			}
			step = fmt.Sprintf("rename %s %s %d", a, b, flags)
			if a != b && !strings.HasPrefix(b, a+"/") && !strings.HasPrefix(a, b+"/") {
				l.Rename(lower, a, b, flags)
			}
		case 6:
			a, b := pick(), pick()
			step = "link " + a + " " + b
			if st, _, err := l.Lstat(lower, a); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
				l.Link(lower, a, b)
			}
		case 7, 8:
			cs := l.Changes(lower)
			if len(cs) == 0 {
				continue
			}
			c := cs[rnd.Intn(len(cs))]
			if rnd.Intn(2) == 0 {
				step = "approve " + c.Op + " " + c.Path
				l.Apply(lower, c, Hooks{}, true)
			} else {
				step = "reject " + c.Op + " " + c.Path
				l.Discard(lower, c)
			}
		}
		checkIndex(t, l, lower, fmt.Sprintf("step %d (%s)", i, step))
	}
	l.mu.RLock()
	held := len(l.upper.m) + len(l.gone.m)
	l.mu.RUnlock()
	s.Close()
	s2, err := Open(filepath.Join(filepath.Dir(back), "held"), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	l2 := s2.Get("agent", "d")
	if l2 == nil {
		if held != 0 {
			t.Fatalf("the layer with %d held names is gone after reopening", held)
		}
		return
	}
	checkIndex(t, l2, lower, "after replay")
}

// BenchmarkDirLinks: the link count of a backing folder the principal
// also changed, for a principal with 10,000 held files in 100 folders of
// its own (as after an `npm install` into its layer), through the index
// and by the walk over every held name it replaced.
func BenchmarkDirLinks(b *testing.B) {
	s, lower, _ := setupTB(b)
	l, err := s.Ensure("agent", "d")
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10000 {
		dir := fmt.Sprintf("nm/p%02d", i%100)
		if i < 100 {
			if err := l.Make(lower, "nm", func(up *mounts.Root) error { _, err := up.Mkdir("nm", 0o755, -1, -1); return err }); err != nil && i == 0 {
				b.Fatal(err)
			}
			if err := l.Make(lower, dir, func(up *mounts.Root) error { _, err := up.Mkdir(dir, 0o755, -1, -1); return err }); err != nil {
				b.Fatal(err)
			}
		}
		if err := makeFile(l, lower, fmt.Sprintf("%s/f%05d", dir, i)); err != nil {
			b.Fatal(err)
		}
	}
	// d is a backing folder the agent also made a file in: its count is
	// the backing one, corrected by the layer's names in it.
	if err := makeFile(l, lower, "d/new.txt"); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		f    func(*Layer, *mounts.Root, string) (uint64, bool)
	}{{"index", (*Layer).DirLinks}, {"walk", bruteDirLinks}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, ok := bc.f(l, lower, "d"); !ok {
					b.Fatal("no count")
				}
			}
		})
	}
}

// BenchmarkRemoveAmongHeld: making one held file and removing it again,
// for a principal with n other held names in one folder (LTP's linkat02
// links one file 65,000 times and then removes the names one by one).
// Each removal used to walk every key of the layer's path maps.
func BenchmarkRemoveAmongHeld(b *testing.B) {
	for _, n := range []int{1000, 10000, 50000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			l, lower := boundLayer(b, 1<<30)
			if err := makeDir(l, lower, "many"); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if err := makeFile(l, lower, fmt.Sprintf("many/f%05d", i)); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				if err := makeFile(l, lower, "many/one"); err != nil {
					b.Fatal(err)
				}
				if err := l.Remove(lower, "many/one", false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkChangesManyUnits: listing a principal's held changes (review
// list) when it made n new top-level folders of 4 files each, every
// digest remembered: each name used to be checked against every folder
// unit, and stat'ed from the top of the tree three times.
func BenchmarkChangesManyUnits(b *testing.B) {
	for _, n := range []int{500, 2000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			l, lower := boundLayer(b, 1<<30)
			for i := range n {
				dir := fmt.Sprintf("top%05d", i)
				if err := makeDir(l, lower, dir); err != nil {
					b.Fatal(err)
				}
				for j := range 4 {
					if err := makeFile(l, lower, fmt.Sprintf("%s/f%d", dir, j)); err != nil {
						b.Fatal(err)
					}
				}
			}
			time.Sleep(memoQuiet + 100*time.Millisecond) // old enough to be remembered
			if cs := l.Changes(lower); len(cs) != n {
				b.Fatalf("%d units, want %d", len(cs), n)
			}
			for b.Loop() {
				l.Changes(lower)
			}
		})
	}
}

// carryPairwise is carryOriginDeletes as it was, checking every folder
// rename against every deletion: the reference for the one that finds a
// deletion's rename through its folders.
func carryPairwise(out []Change) []Change {
	carried := make([]bool, len(out))
	for i := range out {
		r := &out[i]
		if r.Op != "rename" || !r.root || r.Type != "dir" {
			continue
		}
		for j, c := range out {
			if (c.Op == "delete" || c.Op == "rmdir") && !carried[j] && strings.HasPrefix(c.Path, r.From+"/") {
				r.Inside = append(append(r.Inside, c.Path), c.Inside...)
				r.removed = append(append(r.removed, c.Path), c.Inside...)
				carried[j] = true
			}
		}
	}
	keep := out[:0]
	for i, c := range out {
		if !carried[i] {
			keep = append(keep, c)
		}
	}
	return keep
}

func TestCarryOriginDeletesAsPairwise(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	names := []string{"a", "b", "a/b", "a/b/c", "a/c", "b/a", "a-b", "a/b-c", "a/b/c/d"}
	for round := range 2000 {
		var out []Change
		for range 1 + rng.Intn(8) {
			c := Change{Path: names[rng.Intn(len(names))] + fmt.Sprint("/x", rng.Intn(3))}
			switch rng.Intn(4) {
			case 0:
				c.Op, c.root, c.Type, c.From = "rename", true, "dir", names[rng.Intn(len(names))]
			case 1:
				c.Op, c.root, c.Type, c.From = "rename", rng.Intn(2) == 0, "file", names[rng.Intn(len(names))]
			case 2:
				c.Op, c.Inside = "rmdir", []string{c.Path + "/in"}
			default:
				c.Op = "delete"
			}
			c.removed = []string{c.Path}
			out = append(out, c)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
		copyOf := func() []Change {
			cp := make([]Change, len(out))
			for i, c := range out {
				cp[i] = c
				cp[i].Inside = slices.Clone(c.Inside)
				cp[i].removed = slices.Clone(c.removed)
			}
			return cp
		}
		want, got := carryPairwise(copyOf()), carryOriginDeletes(copyOf())
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("round %d: %v\n got  %v\n want %v", round, out, got, want)
		}
	}
}

// TestNamesCountAgainstTheBound: each name a layer holds counts nameCost
// in the principal's bound, so empty files and deletions, which add no
// bytes, run into it too (the daemon's memory grows with them), and
// removing them gives the room back.
func TestNamesCountAgainstTheBound(t *testing.T) {
	s, lower, _ := setupTB(t) // a bound of 1 MiB
	l, err := s.Ensure("agent", "d")
	if err != nil {
		t.Fatal(err)
	}
	if err := makeDir(l, lower, "many"); err != nil {
		t.Fatal(err)
	}
	n := 0
	for ; n < 1<<20; n++ {
		err := makeFile(l, lower, fmt.Sprintf("many/f%06d", n))
		if errors.Is(err, ErrQuota) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Records alone (some 70 bytes a name) let more than 14,000 in.
	if n == 0 || n > (1<<20)/nameCost {
		t.Fatalf("%d empty files fit a bound of 1 MiB; want at most %d", n, (1<<20)/nameCost)
	}
	for i := range n / 2 {
		if err := l.Remove(lower, fmt.Sprintf("many/f%06d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := makeFile(l, lower, "many/again"); err != nil {
		t.Errorf("after removing half of them: %v", err)
	}
}

// BenchmarkNameMemory reports the daemon's heap per held name (a new
// empty file among 20,000 in 100 folders): what nameCost stands for.
func BenchmarkNameMemory(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		l, lower := boundLayer(b, 1<<40)
		for i := range 100 {
			if err := makeDir(l, lower, fmt.Sprintf("p%02d", i)); err != nil {
				b.Fatal(err)
			}
		}
		const n = 20000
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		for i := range n {
			if err := makeFile(l, lower, fmt.Sprintf("p%02d/file-%06d.js", i%100, i)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "heap-B/name")
		runtime.KeepAlive(l)
		l.store.Close()
		b.StartTimer()
	}
}

// boundLayer is setupTB's backing tree with agent's layer of source d in
// a store of its own, bounded at maxBytes.
func boundLayer(tb testing.TB, maxBytes int64) (*Layer, *mounts.Root) {
	tb.Helper()
	_, lower, _ := setupTB(tb)
	s, err := Open(filepath.Join(tb.TempDir(), "held"), maxBytes, nil)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := s.Ensure("agent", "d")
	if err != nil {
		tb.Fatal(err)
	}
	return l, lower
}

// Extended attributes the principal sets on its held names count in its
// bound, are given back when removed, and are counted again when the
// store is opened anew. Before, each held name could carry some 4 KiB of
// attributes (a block on ext4) against the 256 bytes it counted.
func TestXattrsCountAgainstTheBound(t *testing.T) {
	s, lower, _ := setupTB(t) // a bound of 1 MiB
	l, err := s.Ensure("agent", "d")
	if err != nil {
		t.Fatal(err)
	}
	if err := makeDir(l, lower, "x"); err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("v"), 3000)
	const name = "user.pad"
	n := 0
	for ; n < 2000; n++ {
		rel := fmt.Sprintf("x/f%04d", n)
		if err := makeFile(l, lower, rel); errors.Is(err, ErrQuota) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if err := l.SetXattr(rel, name, value, 0); errors.Is(err, ErrQuota) {
			break
		} else if errors.Is(err, syscall.EOPNOTSUPP) && n == 0 {
			t.Skipf("no user.* attributes on this file system: %v", err)
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if per := int64(nameCost + len(name) + len(value)); int64(n) > (1<<20)/per+1 {
		t.Errorf("%d files with 3,000 bytes of attributes each fit a bound of 1 MiB; want at most %d", n, (1<<20)/per+1)
	}
	used := s.used("agent")
	if err := l.RemoveXattr("x/f0000", name); err != nil {
		t.Fatal(err)
	}
	if got := s.used("agent"); got != used-int64(len(name)+len(value)) {
		t.Errorf("removing an attribute of %d bytes: used %d → %d", len(name)+len(value), used, got)
	}
	if err := l.SetXattr("x/f0001", name, value[:10], 0); err != nil {
		t.Errorf("replacing an attribute with a shorter one at the bound: %v", err)
	}
	used = s.used("agent")
	s.Close()
	s2, err := Open(s.dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.Ensure("agent", "d"); err != nil {
		t.Fatal(err)
	}
	if got := s2.used("agent"); got < used-int64(len(name)+len(value)) || got > used+4096 {
		t.Errorf("after opening the store again, used %d; before %d", got, used)
	}
}
