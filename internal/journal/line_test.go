package journal

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

// The hand-built lines are exactly what encoding/json writes, for every
// kind of string a uri or principal may hold.
func TestLinesAsJSON(t *testing.T) {
	strs := []string{
		"", "data://a/b.txt", `quote " back \ slash`, "<script>&amp;", "tab\there\nnew\rline\b\f",
		"\x00\x01\x1f\x7f", "naïve/日本語/emoji 🙂", "\u2028\u2029", "bad \xff\xfe utf8 \xe2\x82", "sha256:" + hexOf([]byte("x")),
		Absent, Unknown, "@log",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() string { return strs[rng.IntN(len(strs))] }
	for i := range 2000 {
		r := &Record{
			ID: pick(), Time: time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).UTC(), Principal: pick(),
			UID: rng.Uint32(), PID: rng.Uint32(), Op: pick(), URI: pick(), From: pick(), Before: pick(),
			Mode: rng.Uint32N(0o10000), Size: rng.Int64N(1 << 40), Kept: rng.IntN(2) == 0,
		}
		if i%3 == 0 {
			r.Time = time.Unix(rng.Int64N(4e9), 0).In(time.FixedZone("x", 3600*rng.IntN(12)))
		}
		if i%2 == 0 {
			r.Owner = &Owner{UID: rng.Uint32(), GID: rng.Uint32()}
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendRecordLine(nil, r); string(got) != string(want)+"\n" {
			t.Fatalf("record line\n got %s\nwant %s", got, want)
		}
		r.staged, r.linked, r.logOff, r.logCRC = pick(), rng.IntN(2) == 0, rng.Int64N(3)*rng.Int64N(1<<40), uint32(rng.IntN(2))*rng.Uint32()
		want, err = json.Marshal(stagedLine{Staged: r.staged, Linked: r.linked, Offset: r.logOff, CRC: r.logCRC, Record: r})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendStagedLine(nil, r); string(got) != string(want)+"\n" {
			t.Fatalf("staged line\n got %s\nwant %s", got, want)
		}
	}
}

func BenchmarkRecordLine(b *testing.B) {
	r := &Record{ID: "12345-abcd", Time: time.Now().UTC(), Principal: "owner", UID: 1000, PID: 4242, Op: "open",
		URI: "data://some/folder/file.txt", Before: "sha256:" + hexOf([]byte("x")), Mode: 0o644, Size: 4096, Kept: true}
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			json.Marshal(r)
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			appendRecordLine(nil, r)
		}
	})
}
