package index

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"
)

// randomWords is n bytes of random 8-letter words, one per line: every
// word new, the worst case for an index.
func randomWords(r *rand.Rand, n int) []byte {
	b := make([]byte, 0, n+9)
	for len(b)+9 <= n {
		for range 8 {
			b = append(b, byte('a'+r.Intn(26)))
		}
		b = append(b, '\n')
	}
	return b
}

func BenchmarkSearchOverlayRandomWords(b *testing.B) {
	x, _ := newTestIndex(b, map[string]string{"a.txt": "alpha\n"})
	r := rand.New(rand.NewSource(1))
	docs := map[string]OverlayDoc{}
	for i := range 4 {
		docs[fmt.Sprintf("data://w%d.txt", i)] = OverlayDoc{Content: randomWords(r, 1<<20-16), ModTime: time.Now()}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := searchOverlay(context.Background(), x, Query{Q: "abcdefgh"}, docs, nil); err != nil {
			b.Fatal(err)
		}
	}
}
