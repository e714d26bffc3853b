package fs

import "testing"

func TestWalkersTellWalkersFromReaders(t *testing.T) {
	var w walkers
	// A process listing folder after folder and touching no file walks.
	for i, want := range []bool{false, false, true, true} {
		if got := w.brief(100); got != want {
			t.Errorf("listing %d of a walker: brief = %v; want %v", i+1, got, want)
		}
	}
	// One that touched a file keeps full listings, before or after.
	w.touch(200)
	for i := range 4 {
		if w.brief(200) {
			t.Errorf("listing %d of a pid that touched a file first: brief", i+1)
		}
	}
	w.touch(100)
	if w.brief(100) {
		t.Error("a walker that then touched a file: still brief")
	}
	// A file looked up in a folder a walker listed briefly: the folder
	// and the walker go back to full listings.
	for range 3 {
		w.brief(300)
	}
	dir := &node{}
	dir.briefFor.Store(300)
	w.wanted(dir)
	if !dir.wanted.Load() || dir.briefFor.Load() != 0 {
		t.Errorf("after a lookup in a brief folder: wanted %v, briefFor %d; want true, 0", dir.wanted.Load(), dir.briefFor.Load())
	}
	if w.brief(300) {
		t.Error("the walker whose brief listing was looked up in: still brief")
	}
	// A folder no listing left anything out of is not marked.
	other := &node{}
	w.wanted(other)
	if other.wanted.Load() {
		t.Error("a lookup in a folder listed in full marks it wanted")
	}
}

func TestWalkersAreBounded(t *testing.T) {
	var w walkers
	for pid := range uint32(3 * maxReaders) {
		w.brief(pid + 1)
	}
	if len(w.m) > maxReaders {
		t.Errorf("%d pids remembered; want at most %d", len(w.m), maxReaders)
	}
	// The latest is remembered.
	if r := w.m[3*maxReaders]; r == nil || r.lists != 1 {
		t.Errorf("the latest pid's record: %+v", r)
	}
}
