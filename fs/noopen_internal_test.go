package fs

import "testing"

// The commit files' content a view without OPEN keeps is bounded: the
// content kept least recently goes first, the newest stays whatever its
// size, and a forgotten node gives its bytes back.
func TestRevCacheBoundsWhatItKeeps(t *testing.T) {
	var c revCache
	blob := func(mib int) *bytesHandle { return &bytesHandle{data: make([]byte, mib<<20)} }
	a, b, d, big := &revNode{}, &revNode{}, &revNode{}, &revNode{}
	c.keep(a, blob(30))
	c.keep(b, blob(30))
	if c.bytes != 60<<20 || a.data.Load() == nil || b.data.Load() == nil {
		t.Fatalf("two 30 MiB files: %d bytes kept, a kept %v, b kept %v", c.bytes, a.data.Load() != nil, b.data.Load() != nil)
	}
	c.keep(d, blob(30))
	if c.bytes != 60<<20 || a.data.Load() != nil || b.data.Load() == nil || d.data.Load() == nil {
		t.Errorf("a third: %d bytes kept (want 60 MiB), a kept %v (want false)", c.bytes, a.data.Load() != nil)
	}
	c.keep(b, blob(30)) // kept again: now the newest
	c.forget(d)
	if c.bytes != 30<<20 || d.data.Load() != nil || c.lru.Len() != 1 {
		t.Errorf("after forgetting d: %d bytes in %d entries, d kept %v", c.bytes, c.lru.Len(), d.data.Load() != nil)
	}
	c.keep(big, blob(100))
	if c.bytes != 100<<20 || big.data.Load() == nil || b.data.Load() != nil {
		t.Errorf("a file larger than the bound: %d bytes kept, it kept %v, b kept %v", c.bytes, big.data.Load() != nil, b.data.Load() != nil)
	}
	c.forget(a) // never kept now: nothing changes
	if c.bytes != 100<<20 || c.lru.Len() != 1 {
		t.Errorf("forgetting a node that keeps nothing changed the count: %d bytes in %d entries", c.bytes, c.lru.Len())
	}
}
