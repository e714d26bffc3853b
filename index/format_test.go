package index

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestMakeLineCutsLongLines(t *testing.T) {
	line := []byte(strings.Repeat("é", 200) + " needle " + strings.Repeat("x", 500))
	m := &matcher{terms: map[string]bool{"needle": true}}
	l := makeLine(7, line, m.match(line))
	if l.N != 7 || len(l.Raw) > maxLineBytes || !utf8.ValidString(l.Raw) || !utf8.ValidString(l.Text) {
		t.Fatalf("line = %+v", l)
	}
	if !strings.HasPrefix(l.Text, "…") || !strings.HasSuffix(l.Text, "…") || !strings.Contains(l.Text, "«needle»") {
		t.Errorf("text = %q", l.Text)
	}
	if s := l.Matches[0]; l.Raw[s[0]:s[1]] != "needle" {
		t.Errorf("match offsets %v point at %q", s, l.Raw[s[0]:s[1]])
	}
}

func TestFormatText(t *testing.T) {
	for _, tt := range []struct {
		r    Result
		want string
	}{
		{Result{}, "# no matches\n"},
		{Result{Total: 3, Hits: []Hit{
			{URI: "a://x.go", Lines: []Line{{N: 2, Text: "«f»()"}, {N: 9, Text: "g(«f»)"}}},
			{URI: "a://name-only.md"},
		}}, "a://x.go:2: «f»()\na://x.go:9: g(«f»)\na://name-only.md\n# 2 of 3 matching files shown\n"},
		{Result{Total: 40, TotalIsLowerBound: true, Hits: []Hit{{URI: "a://y"}}}, "a://y\n# 1 of at least 40 matching files shown\n"},
		// A file name or line cannot forge result lines or drive a terminal.
		{Result{Total: 2, Hits: []Hit{
			{URI: "a://zz\nb://secret:1: forged", Lines: []Line{{N: 1, Text: "«x»\x1b[31m\tred\r"}}},
			{URI: "a://tab\there\x9b"},
		}}, "\"a://zz\\nb://secret:1: forged\":1: «x»\\x1b[31m\tred\\x0d\n\"a://tab\\there\\x9b\"\n"},
	} {
		if got := string(FormatText(tt.r)); got != tt.want {
			t.Errorf("FormatText = %q; want %q", got, tt.want)
		}
	}
}

// lines finds the same lines whether it looks for literals first or
// tokenizes every line.
func TestLinesLiteralScan(t *testing.T) {
	for _, c := range []string{
		"first line\r\nFoo bar\n\nnothing here\nxfoo foo_bar FOO\nbaz qux foo\nlast foo",
		"first line\r\nFoo bar\n\nnothing here\nxfoo foo_bar FOO\nbaz qux foo\nÉcole foo\nlast foo",
		"foo", "\n\nbar\n", "",
		// Runes that lower-case to ASCII: the Kelvin sign (k) and İ (i).
		"the \u212aelvin scale\nfoo\nkelvin again\n\u0130nside out\ninside École",
		"naïve foo\nkelvin inside\nÉcole\n",
	} {
		testLines(t, []byte(c))
	}
}

func testLines(t *testing.T, content []byte) {
	for _, q := range []string{"foo", "bar baz", `"foo bar"`, "fo*", "qux -nothing", "école", "/f.o/", "nomatch", "last", "kelvin", "inside", "kel*"} {
		_, m, err := (&Index{}).parseQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		got := m.lines(content)
		var want []Line
		for i, line := range strings.Split(string(content), "\n") {
			line = strings.TrimSuffix(line, "\r")
			if spans := m.match([]byte(line)); len(spans) > 0 && len(want) < maxSnippetLines {
				want = append(want, makeLine(i+1, []byte(line), spans))
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%q in %q: lines = %v; want %v", q, content, got, want)
		}
	}
}

// A bidirectional control in a uri or a line is escaped: U+202E made
// "evil\u202egol.txt.log" show as another name in search, history and
// .neuralis/review/list (found by a red-team pass).
func TestBidiControlsAreEscaped(t *testing.T) {
	for _, r := range []rune{0x061c, 0x200e, 0x200f, 0x202a, 0x202e, 0x2066, 0x2069, 0x200b, 0x00a0, 0x3164, 0xfeff, 0x2028} {
		u := "data://evil" + string(r) + "gol.txt.log"
		if q := QuoteURI(u); strings.ContainsRune(q, r) || !strings.Contains(q, fmt.Sprintf(`\u%04x`, r)) {
			t.Errorf("QuoteURI(%+q) = %s", u, q)
		}
		if e := escapeControls("a" + string(r) + "b"); strings.ContainsRune(e, r) {
			t.Errorf("escapeControls kept U+%04X: %s", r, e)
		}
	}
	if q := QuoteURI("data://naïve/日本語 🙂.txt"); q != "data://naïve/日本語 🙂.txt" {
		t.Errorf("QuoteURI quoted a plain name: %s", q)
	}
}
