package index

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Ranges over size and mtime, as the query string writes them, listed by
// uri (few documents in range) or by visiting every document (many).
func TestSizeAndMtimeRanges(t *testing.T) {
	files := map[string]string{
		"a.txt": "word " + strings.Repeat("a", 5), // 10 bytes
		"b.txt": "word " + strings.Repeat("b", 1995),
		"c.txt": "word " + strings.Repeat("c", 49995),
		"d.md":  "other " + strings.Repeat("d", 1994), // 2000 bytes
	}
	dir := t.TempDir()
	writeTree(t, dir, files)
	for p, day := range map[string]string{"a.txt": "2020-01-01", "b.txt": "2022-06-01", "c.txt": "2025-01-01", "d.md": "2022-06-01"} {
		tm, _ := time.Parse("2006-01-02", day)
		if err := os.Chtimes(filepath.Join(dir, p), tm, tm); err != nil {
			t.Fatal(err)
		}
	}
	x := openTest(t, t.TempDir())
	if err := x.AddSource(Source{Slug: "data", FS: os.DirFS(dir)}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Reconcile(t.Context(), "data", nil); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		q    string
		want string
	}{
		{"size:>1000", "b.txt c.txt d.md"},
		{"size:>2000", "c.txt"},
		{"size:>=2000", "b.txt c.txt d.md"},
		{"size:<2000", "a.txt"},
		{"size:<=2000", "a.txt b.txt d.md"},
		{"size:2000", "b.txt d.md"},
		{"+word +size:>1000", "b.txt c.txt"},
		{"+word -size:>1000", "a.txt"},
		{"+size:>10 +size:<50000", "b.txt d.md"},
		{"size:>100000", ""},
		{`mtime:>"2021-01-01"`, "b.txt c.txt d.md"},
		{`mtime:<"2021-01-01"`, "a.txt"},
		{`+word +mtime:>="2022-06-01" +mtime:<"2023-01-01"`, "b.txt"},
		{`mtime:>"2030-01-01"`, ""},
	}
	for _, many := range []bool{false, true} {
		if many {
			old := rangeIDs
			rangeIDs = 0
			t.Cleanup(func() { rangeIDs = old })
		}
		for _, c := range cases {
			r := search(t, x, Query{Q: c.q, Limit: 100}, nil)
			var got []string
			for _, h := range r.Hits {
				got = append(got, h.Path)
			}
			if g := strings.Join(sortedCopy(got), " "); g != c.want || r.Total != len(got) {
				t.Errorf("many=%v %s: hits %q (total %d); want %q", many, c.q, g, r.Total, c.want)
			}
		}
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
