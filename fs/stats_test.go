package fs

import (
	"sync/atomic"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// BenchmarkStatsOverhead is the cost the metrics counting (statsFS) and
// the reload gate (in negCache) add to one request, measured around a
// filesystem that answers at once: "bare" is the call alone, "gate"
// through negCache, "stats" through statsFS, "both" as a mount with
// metrics on serves it. The parallel variants show the contention of
// several FUSE readers counting the same opcode.
func BenchmarkStatsOverhead(b *testing.B) {
	bare := fuse.NewDefaultRawFileSystem()
	f := &FS{}
	gated := &negCache{RawFileSystem: bare, fs: f}
	for _, c := range []struct {
		name string
		fs   fuse.RawFileSystem
	}{
		{"bare", bare},
		{"gate", gated},
		{"stats", &statsFS{RawFileSystem: bare, stats: statsOf(NewStats())}},
		{"both", &statsFS{RawFileSystem: gated, stats: statsOf(NewStats())}},
	} {
		in := &fuse.GetAttrIn{}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var out fuse.AttrOut
			for b.Loop() {
				c.fs.GetAttr(nil, in, &out)
			}
		})
		b.Run(c.name+"-parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var out fuse.AttrOut
				for pb.Next() {
					c.fs.GetAttr(nil, in, &out)
				}
			})
		})
	}
}

// TestStatsCounts checks the counters statsFS keeps.
func TestStatsCounts(t *testing.T) {
	st := NewStats()
	s := &statsFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), stats: statsOf(st)}
	var out fuse.AttrOut
	for range 3 {
		s.GetAttr(nil, &fuse.GetAttrIn{}, &out) // ENOSYS: an error
	}
	s.Forget(1, 1)
	got := map[string]OpCount{}
	for _, o := range st.Ops() {
		got[o.Op] = o
	}
	if len(got) != 2 || got["GETATTR"].Count != 3 || got["GETATTR"].Errors != 3 || got["FORGET"].Count != 1 || got["FORGET"].Errors != 0 {
		t.Errorf("Ops() = %+v", st.Ops())
	}
	var n uint64
	for _, c := range got["GETATTR"].Buckets {
		n += c
	}
	if n != 3 || len(got["GETATTR"].Buckets) != len(LatencyBounds())+1 {
		t.Errorf("GETATTR buckets %v", got["GETATTR"].Buckets)
	}
	st.denied("open", "agent")
	st.denied("open", "agent")
	st.denied("lookup", "other")
	if d := st.Denials(); len(d) != 2 || d[0] != (DenialCount{"lookup", "other", 1}) || d[1] != (DenialCount{"open", "agent", 2}) {
		t.Errorf("Denials() = %+v", d)
	}
}

// statsOf is a pointer holding st, as FS.stats does.
func statsOf(st *Stats) *atomic.Pointer[Stats] {
	var p atomic.Pointer[Stats]
	p.Store(st)
	return &p
}
