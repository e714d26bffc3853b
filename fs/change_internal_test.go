package fs

import (
	"fmt"
	"testing"
	"time"
)

// The marks of the mount's own changes are bounded: once there are
// ownPruneAt of them, those past the window go. A burst whose marks are
// all within the window keeps them, and is not looked through again until
// it has doubled.
func TestOwnMarksDropThoseOutsideTheWindow(t *testing.T) {
	var o ownChanges
	o.m = map[string]ownMark{}
	old := time.Now().Add(-2 * ownWindow)
	for i := range ownPruneAt {
		o.m[ownKey("s", fmt.Sprint("old", i))] = ownMark{when: old}
	}
	o.mark("s", "new", nil, nil)
	if len(o.m) != 1 || !o.recent("s", "new") {
		t.Fatalf("after a mark with %d marks past the window: %d kept; want only the new one", ownPruneAt, len(o.m))
	}
	for i := range 3 * ownPruneAt {
		o.mark("s", fmt.Sprint("burst", i), nil, nil)
	}
	if len(o.m) != 3*ownPruneAt+1 {
		t.Errorf("a burst within the window kept %d marks; want all %d", len(o.m), 3*ownPruneAt+1)
	}
	if o.prune <= ownPruneAt*2 {
		t.Errorf("the next look through the marks is at %d; want past twice the burst seen at the last one", o.prune)
	}
}

// BenchmarkOwnMarkBurst is the cost of a mark in a burst of 200,000
// changes within the window (an untar or rm -rf faster than 25,000
// requests a second): every mark looked through every other one before.
func BenchmarkOwnMarkBurst(b *testing.B) {
	keys := make([]string, 200000)
	for i := range keys {
		keys[i] = fmt.Sprint("f", i)
	}
	for b.Loop() {
		var o ownChanges
		for _, k := range keys {
			o.mark("s", k, nil, nil)
		}
	}
}
