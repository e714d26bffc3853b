package index

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

// oneSentence reports what is wrong with msg as an error message shown to
// a person: it must be one non-empty line.
func oneSentence(msg string) string {
	switch {
	case strings.TrimSpace(msg) == "":
		return "is empty"
	case strings.ContainsAny(msg, "\n\r"):
		return "spans several lines"
	case msg != strings.TrimSpace(msg):
		return "has leading or trailing space"
	}
	return ""
}

// fuzzDocs is the tree FuzzSearch searches: words, phrases, numbers, a
// long line that snippets cut, non-ASCII text, and a file whose name and
// content hold control characters.
var fuzzDocs = map[string]string{
	"go/main.go":        "package main\n\nfunc main() {\n\tfmt.Println(\"hello world\")\n}\n",
	"docs/readme.md":    "Hello there, World.\nSay hello world twice: hello world.\n",
	"deep/a/b/c.md":     "needle in a haystack 42 3.14\n",
	"upper/CASE.TXT":    "MixedCase Token naïve café Ünïcode 日本語\n",
	"long.txt":          strings.Repeat("filler ", 60) + "needle " + strings.Repeat("tail ", 60) + "\n",
	"odd\nname\x1b.txt": "escape \x1b[31mred\x1b[0m and\rreturn needle\n",
	"empty.txt":         "",
}

// FuzzSearch runs fuzzed queries, path globs and extensions on a small
// real index. Search never panics; what it refuses wraps ErrBadQuery in
// one sentence; what it answers names only indexed files, at most Limit
// of them, with snippet lines whose Text is exactly Raw with the marked
// Matches (in order, inside Raw) and "…" where cut; and FormatText of the
// result writes no control character but tabs and the newlines between
// its lines.
func FuzzSearch(f *testing.F) {
	dir := f.TempDir()
	writeTree(f, dir, fuzzDocs)
	x := openTest(f, f.TempDir())
	if err := x.AddSource(Source{Slug: "data", FS: os.DirFS(dir)}); err != nil {
		f.Fatal(err)
	}
	if _, err := x.Reconcile(context.Background(), "data", nil); err != nil {
		f.Fatal(err)
	}
	known := map[string]bool{}
	for p := range fuzzDocs {
		known[URI("data", p)] = true
	}
	f.Fuzz(func(t *testing.T, q, glob, ext string, limit int) {
		r, err := x.Search(context.Background(), Query{Q: q, PathGlob: glob, Ext: ext, Limit: limit}, nil)
		if err != nil {
			if !errors.Is(err, ErrBadQuery) {
				t.Fatalf("Search(%q, glob %q, ext %q) = %v; not ErrBadQuery", q, glob, ext, err)
			}
			if why := oneSentence(err.Error()); why != "" {
				t.Errorf("Search(%q) error %q %s", q, err, why)
			}
			return
		}
		want := limit
		if want <= 0 {
			want = defaultLimit
		}
		if len(r.Hits) > min(want, maxLimit) || r.Total < len(r.Hits) {
			t.Errorf("Search(%q, limit %d): %d hits of total %d", q, limit, len(r.Hits), r.Total)
		}
		for _, h := range r.Hits {
			if !known[h.URI] || h.URI != URI(h.Source, h.Path) {
				t.Errorf("Search(%q) hit %q (source %q path %q) is not an indexed file", q, h.URI, h.Source, h.Path)
			}
			for _, l := range h.Lines {
				checkLine(t, q, l)
			}
		}
		out := FormatText(r)
		if i := bytes.IndexFunc(out, func(c rune) bool { return c < 0x20 && c != '\n' && c != '\t' || c == 0x7f }); i >= 0 {
			t.Errorf("FormatText of Search(%q) writes control byte %#x: %q", q, out[i], out)
		}
	})
}

// checkLine checks that a snippet line's Text renders its Raw and Matches.
func checkLine(t *testing.T, q string, l Line) {
	t.Helper()
	var b strings.Builder
	pos := 0
	for _, m := range l.Matches {
		if m[0] < pos || m[1] <= m[0] || m[1] > len(l.Raw) {
			t.Errorf("Search(%q) line %d: match %v out of order or outside %d bytes of %q", q, l.N, m, len(l.Raw), l.Raw)
			return
		}
		b.WriteString(l.Raw[pos:m[0]] + HighlightStart + l.Raw[m[0]:m[1]] + HighlightEnd)
		pos = m[1]
	}
	b.WriteString(l.Raw[pos:])
	r := b.String()
	if !slices.Contains([]string{r, "…" + r, r + "…", "…" + r + "…"}, l.Text) {
		t.Errorf("Search(%q) line %d: Text %q is not Raw %q with matches %v", q, l.N, l.Text, l.Raw, l.Matches)
	}
	if l.N < 1 {
		t.Errorf("Search(%q): line number %d", q, l.N)
	}
}
