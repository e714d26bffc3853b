package fs

import "testing"

func TestHandleSetKeepsEveryHandle(t *testing.T) {
	var s handleSet
	hs := []*fileHandle{{}, {}, {}, {}}
	for _, h := range hs {
		s.add(h)
	}
	// Remove in an order that moves the spare into the first slot.
	for i, h := range []*fileHandle{hs[0], hs[2], hs[3], hs[1]} {
		if !s.open() {
			t.Fatalf("closed after %d of 4 releases", i)
		}
		s.remove(h)
		s.remove(h) // a second release of the same handle changes nothing
	}
	if s.open() || len(s.more) != 0 {
		t.Fatalf("still open after every release: %v %v", s.one, s.more)
	}
}

func BenchmarkHandleSetOpenRelease(b *testing.B) {
	for b.Loop() {
		var s handleSet
		h := &fileHandle{}
		s.add(h)
		s.remove(h)
	}
}

// BenchmarkOpenFilesParallel: the mount-wide set of open files (reload.go)
// costs a locked map insert at every open and a delete at every release,
// from every request goroutine at once.
func BenchmarkOpenFilesParallel(b *testing.B) {
	var o openFiles
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h := &fileHandle{}
			o.add(h)
			o.remove(h)
		}
	})
}
