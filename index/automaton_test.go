package index

import (
	"context"
	"errors"
	"testing"
)

// Regular expressions and wildcards whose automaton bleve would spend
// seconds building (uninterruptibly) are refused; everyday ones are not.
func TestAutomatonBudget(t *testing.T) {
	for _, tt := range []struct {
		expr   string
		tooBig bool
	}{
		{".*x.{0,12}", true},      // 8,192 states: vellum gives up after 2 s
		{".{0,20}x.{0,20}", true}, // likewise
		{`\pL{0,20}x`, true},      // finishes, after 13 s
		{"(?i)[a-z]{0,30}x[a-z]{0,30}", true},
		{"ne+dle", false},
		{"foo.*bar", false},
		{"(?i)hello.*world", false},
		{"[A-Z][a-z]+Error", false},
		{"[0-9a-f]{40}", false},
		{`v[0-9]+\.[0-9]+\.[0-9]+`, false},
		{`\w+@\w+\.com`, false},
		{`\pL+`, false},
		{".*x.{0,6}", false},
		{"x{1000}", false},
		{"日本.*", false},
		{"[", false}, // bleve reports the syntax error
	} {
		if got := automatonTooBig(tt.expr); got != tt.tooBig {
			t.Errorf("automatonTooBig(%q) = %v; want %v", tt.expr, got, tt.tooBig)
		}
	}
	x, _ := newTestIndex(t, map[string]string{"a.txt": "needle\n"})
	for _, q := range []string{"/.*x.{0,12}/", "path:/.{0,20}x.{0,20}/", "*x?????????????"} {
		_, err := x.Search(context.Background(), Query{Q: q}, nil)
		if !errors.Is(err, ErrBadQuery) {
			t.Errorf("Search(%q) = %v; want ErrBadQuery", q, err)
		} else if why := oneSentence(err.Error()); why != "" {
			t.Errorf("Search(%q) error %q %s", q, err, why)
		}
	}
	if r := search(t, x, Query{Q: "/ne+dle/"}, nil); len(r.Hits) != 1 {
		t.Errorf("an everyday regexp found %d hits", len(r.Hits))
	}
}
