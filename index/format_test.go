package index

import (
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
	} {
		if got := string(FormatText(tt.r)); got != tt.want {
			t.Errorf("FormatText = %q; want %q", got, tt.want)
		}
	}
}
