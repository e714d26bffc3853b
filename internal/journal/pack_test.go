package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// checkPacks checks that every pack in journal dir is named by its digest
// and that every object its index lists holds its digest.
func checkPacks(t *testing.T, dir string) {
	t.Helper()
	for _, name := range names(t, filepath.Join(dir, packsName)) {
		b, err := os.ReadFile(filepath.Join(dir, packsName, name))
		if err != nil {
			t.Fatal(err)
		}
		if hexOf(b) != name {
			t.Errorf("pack %s does not hold its digest", name)
		}
		for _, pe := range packIndex(t, filepath.Join(dir, packsName, name)) {
			if hexOf(b[pe.off:pe.off+pe.len]) != pe.hx {
				t.Errorf("pack %s: object %s does not hold its digest", name, pe.hx)
			}
		}
	}
}

func packIndex(t *testing.T, path string) []packEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	ents, err := readPackIndex(f, st.Size())
	if err != nil {
		t.Fatalf("pack %s: %v", path, err)
	}
	return ents
}

// gate holds the publisher at "gather" while a burst is being staged. It
// is the journal's trace for the whole test (set once, before any Keep),
// so nothing writes j.trace while the publisher reads it.
type gate struct {
	mu   sync.Mutex
	wait chan struct{}
}

func (g *gate) trace(s string) {
	if s != "gather" {
		return
	}
	g.mu.Lock()
	c := g.wait
	g.mu.Unlock()
	if c != nil {
		<-c
	}
}

// openGated opens a batched journal whose publisher a burst can hold.
func openGated(t *testing.T, o Options) (*Journal, *gate) {
	o.Batched = true
	j := openJournal(t, o)
	g := &gate{}
	j.trace = g.trace
	return j, g
}

// burst keeps n different small files at once, the publisher held until
// all are staged so that they are gathered into one batch, and returns
// their records (in order) and contents.
func burst(t *testing.T, j *Journal, g *gate, tag string, n, size int) ([]Record, [][]byte) {
	t.Helper()
	release := make(chan struct{})
	g.mu.Lock()
	g.wait = release
	g.mu.Unlock()
	src := t.TempDir()
	var datas [][]byte
	for i := range n {
		data := pattern(size+i, byte(i))
		datas = append(datas, data)
		op, leaving := "open", i%2 == 0
		if leaving {
			op = "unlink"
		}
		if err := keepFile(t, j, ev(op, fmt.Sprintf("data://%s/f%d", tag, i)), filepath.Join(src, fmt.Sprint(i)), data, leaving); err != nil {
			t.Fatal(err)
		}
	}
	g.mu.Lock()
	g.wait = nil
	g.mu.Unlock()
	close(release)
	recs := make([]Record, n)
	for i := range n {
		recs[i] = newest(t, j, fmt.Sprintf("data://%s/f%d", tag, i))
	}
	return recs, datas
}

// A burst of new small content is published as packs, not a file per
// copy; every record restores exactly its bytes, before and after the
// journal is opened again, and the packs are named by their digests.
func TestBurstIsPacked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j, g := openGated(t, Options{Dir: dir})
	recs, datas := burst(t, j, g, "b", 40, 3000)
	if packs := names(t, filepath.Join(dir, packsName)); len(packs) == 0 {
		t.Fatalf("no pack after a burst of 40 new copies; objects/ holds %d files", len(names(t, filepath.Join(dir, objectsName))))
	}
	if objs := names(t, filepath.Join(dir, objectsName)); len(objs) != 0 {
		t.Errorf("objects/ holds %d files after a packed burst; want none", len(objs))
	}
	check := func(j *Journal) {
		t.Helper()
		for i, r := range recs {
			if !r.Kept || r.Before != digest(datas[i]) {
				t.Fatalf("record %s: before %q kept %v; want %s", r.ID, r.Before, r.Kept, digest(datas[i]))
			}
			if b, err := content(j, r); err != nil || digest(b) != r.Before {
				t.Errorf("record %s: content %s, %v; want %s", r.ID, digest(b), err, r.Before)
			}
			if p, err := j.Plan(r.URI, r.ID); err != nil || p.Digest != r.Before {
				t.Errorf("Plan(%s): %+v, %v", r.URI, p, err)
			}
		}
	}
	check(j)
	checkPacks(t, dir)
	// The same content again is reused from the pack: nothing new is written.
	before := names(t, filepath.Join(dir, packsName))
	again, _ := burst(t, j, g, "again", 40, 3000)
	if after := names(t, filepath.Join(dir, packsName)); len(after) != len(before) {
		t.Errorf("packs %d → %d after the same content again; want it reused", len(before), len(after))
	}
	for i, r := range again {
		if r.Before != recs[i].Before || !r.Kept {
			t.Errorf("repeat %d: %q kept %v; want %s", i, r.Before, r.Kept, recs[i].Before)
		}
	}
	j.Close()
	j2 := openJournal(t, Options{Dir: dir, Batched: true})
	check(j2)
	if after := names(t, filepath.Join(dir, packsName)); len(after) != len(before) {
		t.Errorf("Open changed the packs: %d → %d", len(before), len(after))
	}
}

// A byte flipped inside a pack makes that one object corrupt: its revert
// is refused with ErrCorrupt (and reading it ends in ErrCorrupt), the
// other objects of the pack still restore, and Open repairs nothing.
func TestCorruptPackedObjectRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j, g := openGated(t, Options{Dir: dir})
	recs, _ := burst(t, j, g, "c", 10, 2000)
	packs := names(t, filepath.Join(dir, packsName))
	if len(packs) != 1 {
		t.Fatalf("packs: %v; want one", packs)
	}
	path := filepath.Join(dir, packsName, packs[0])
	ents := packIndex(t, path)
	victim := ents[3]
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[victim.off+victim.len/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(j *Journal) {
		t.Helper()
		bad := 0
		for _, r := range recs {
			_, perr := j.Plan(r.URI, r.ID)
			got, cerr := content(j, r)
			if "sha256:"+victim.hx == r.Before {
				bad++
				if !errors.Is(perr, ErrCorrupt) || !errors.Is(cerr, ErrCorrupt) {
					t.Errorf("corrupt %s: Plan %v, Content %v; want ErrCorrupt from both", r.URI, perr, cerr)
				}
				continue
			}
			if perr != nil || cerr != nil || digest(got) != r.Before {
				t.Errorf("intact %s beside a corrupt object: Plan %v, Content %v", r.URI, perr, cerr)
			}
		}
		if bad != 1 {
			t.Errorf("%d records use the damaged object; want 1", bad)
		}
	}
	check(j)
	j.Close()
	j2 := openJournal(t, Options{Dir: dir, Batched: true})
	check(j2)
	if after, _ := os.ReadFile(path); string(after) != string(b) {
		t.Error("Open changed a damaged pack; the journal never repairs an entry")
	}
}

// Retention evicts a pack as a whole, least recently used first: the
// records of its objects say not kept (and History never claims
// otherwise, after Open too), its file is gone, the packs that are left
// keep every object, and the newer burst is kept.
func TestPackEvictedWhole(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j, g := openGated(t, Options{Dir: dir, MaxBytes: 150 << 10})
	old, _ := burst(t, j, g, "old", 20, 4000) // ~80 KiB
	packOf := map[string]string{}             // digest → pack
	for _, p := range names(t, filepath.Join(dir, packsName)) {
		for _, pe := range packIndex(t, filepath.Join(dir, packsName, p)) {
			packOf["sha256:"+pe.hx] = p
		}
	}
	recent, _ := burst(t, j, g, "new", 20, 4100) // ~82 KiB: over 150 KiB in all
	check := func(j *Journal) {
		t.Helper()
		evicted := 0
		for _, r := range old {
			p := packOf[r.Before]
			if p == "" {
				t.Fatalf("%s: %s is in no pack", r.URI, r.Before)
			}
			_, err := os.Stat(filepath.Join(dir, packsName, p))
			gone := errors.Is(err, os.ErrNotExist)
			cur := newest(t, j, r.URI)
			_, cerr := content(j, cur)
			switch {
			case gone && (cur.Kept || !errors.Is(cerr, ErrNotKept)):
				t.Errorf("%s: its pack is gone, yet kept %v, content %v", r.URI, cur.Kept, cerr)
			case !gone && (!cur.Kept || cerr != nil):
				t.Errorf("%s: its pack is there (%v), yet kept %v, content %v", r.URI, err, cur.Kept, cerr)
			}
			if gone {
				evicted++
			}
		}
		if evicted == 0 {
			t.Error("nothing of the old burst was evicted past MaxBytes")
		}
		for _, r := range recent {
			if b, err := content(j, newest(t, j, r.URI)); err != nil || digest(b) != r.Before {
				t.Errorf("recent %s: %v", r.URI, err)
			}
		}
	}
	check(j)
	j.mu.Lock()
	total := j.total
	j.mu.Unlock()
	if total > 150<<10 {
		t.Errorf("kept %d bytes; MaxBytes is %d", total, 150<<10)
	}
	j.Close()
	check(openJournal(t, Options{Dir: dir, Batched: true, MaxBytes: 150 << 10}))
	checkPacks(t, dir)
}

// A pack published by a process that died before its records were
// written is not adopted: Open publishes the staged copies again (in a
// pack of the same bytes, which it cannot link, then one by one) and
// removes the pack no record uses; no copy is kept twice.
func TestPackWithoutRecordsRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j := openJournal(t, Options{Dir: dir, Batched: true})
	held := make(chan string, 1)
	release := make(chan struct{})
	staged := make(chan struct{})
	j.trace = func(s string) {
		switch s {
		case "gather":
			<-staged
		case "remove pack tmp":
			held <- s
			<-release
		}
	}
	src := t.TempDir()
	want := map[string]string{}
	for i := range 6 {
		data := pattern(1500+i, byte(i+7))
		uri := fmt.Sprintf("data://p/f%d", i)
		if err := keepFile(t, j, ev("open", uri), filepath.Join(src, fmt.Sprint(i)), data, false); err != nil {
			t.Fatal(err)
		}
		want[uri] = digest(data)
	}
	close(staged)
	<-held // the pack is linked; no record line has its digest yet
	snap := snapshot(t, dir)
	close(release)
	if len(names(t, filepath.Join(snap, packsName))) == 0 {
		t.Fatal("the snapshot holds no pack")
	}
	j2 := openJournal(t, Options{Dir: snap, Batched: true})
	if left, objs := names(t, filepath.Join(snap, packsName)), names(t, filepath.Join(snap, objectsName)); !(len(left) == 1 && len(objs) == 0 || len(left) == 0 && len(objs) == len(want)) {
		t.Errorf("after Open: packs %v and objects %v for %d copies; want one pack or an object each", left, objs, len(want))
	}
	for uri, d := range want {
		r := newest(t, j2, uri)
		if b, err := content(j2, r); !r.Kept || err != nil || digest(b) != d {
			t.Errorf("%s after Open: kept %v, %v, %s; want %s", uri, r.Kept, err, digest(b), d)
		}
	}
	checkPacks(t, snap)
}

// A small file unlinked while a process outside holds it open: its inode
// is linked into staged/ rather than copied, and what the holder writes
// afterwards does not become the kept content — the record restores the
// bytes the file held when it was unlinked.
func TestUnlinkedSmallFileKeepsItsBytes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j, g := openGated(t, Options{Dir: dir})
	release := make(chan struct{})
	g.mu.Lock()
	g.wait = release
	g.mu.Unlock()
	path := filepath.Join(t.TempDir(), "f")
	data := pattern(3000, 9)
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
	holder, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	logBefore, _ := os.Stat(filepath.Join(dir, stagedLogName))
	if err := keepFile(t, j, ev("unlink", "data://f"), path, nil, true); err != nil {
		t.Fatal(err)
	}
	if left := names(t, filepath.Join(dir, stagedName)); len(left) != 1 {
		t.Errorf("staged/ holds %v; want the unlinked inode linked there", left)
	}
	if logAfter, _ := os.Stat(filepath.Join(dir, stagedLogName)); logAfter.Size() != logBefore.Size() {
		t.Errorf("staging log grew %d → %d bytes; want no copy", logBefore.Size(), logAfter.Size())
	}
	if _, err := holder.WriteAt([]byte("scribbled over after the unlink"), 0); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	g.wait = nil
	g.mu.Unlock()
	close(release)
	r := newest(t, j, "data://f")
	if b, err := content(j, r); err != nil || !r.Kept || digest(b) != digest(data) {
		t.Errorf("kept %v, content %s, %v; want the bytes from before the unlink %s", r.Kept, digest(b), err, digest(data))
	}
	// The publisher removes the staged name right after the record line.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		left := names(t, filepath.Join(dir, stagedName))
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("staged/ still holds %v once published", left)
		}
	}
}

// A burst larger than MaxBytes, published in one batch: the kept bytes end
// within MaxBytes once it is recorded (its objects were pinned while its
// records were written), and retention takes the oldest copies, not the
// whole burst — a pack is at most a sixteenth of MaxBytes.
func TestBurstOverMaxBytes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j, g := openGated(t, Options{Dir: dir, MaxBytes: 64 << 10})
	recs, _ := burst(t, j, g, "big", 30, 4000) // ~118 KiB
	j.mu.Lock()
	total := j.total
	j.mu.Unlock()
	if total > 64<<10 {
		t.Errorf("kept %d bytes after the burst; MaxBytes is %d", total, 64<<10)
	}
	kept := 0
	for _, r := range recs {
		if newest(t, j, r.URI).Kept {
			kept++
		}
	}
	if kept < 10 || !newest(t, j, recs[len(recs)-1].URI).Kept {
		t.Errorf("%d of 30 copies kept, the newest kept %v; want the newer half or so kept", kept, newest(t, j, recs[len(recs)-1].URI).Kept)
	}
	checkPacks(t, dir)
}
