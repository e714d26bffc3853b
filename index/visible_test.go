package index

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/blevesearch/bleve/v2/search/searcher"
)

// A clause's expansion is bounded in words of files the caller may read:
// the bound no longer tells whether a hidden file holds a word. The
// attack it stops: a caller fills a file it may read with exactly the
// bound's number of words and adds an alternative to a regexp over them;
// the query was refused when a hidden file held the alternative and ran
// when none did, whatever the caller could read (a red-team pass rebuilt
// a hidden word letter by letter that way). The bound is lowered to 20
// here (process-wide, restored after).
func TestExpansionBoundCountsReadableWordsOnly(t *testing.T) {
	var fill []string
	for i := range 20 {
		fill = append(fill, fmt.Sprintf("fill%02d", i))
	}
	x := indexedTree(t, map[string]string{
		"pub/fill.txt":     strings.Join(fill, " ") + "\n",
		"pub/other.txt":    "hunterx giraffes\n",
		"secret/s.txt":     "hunter2 fillzz xylophonium\n",
		"secret/deep/t.md": "hunter3\n",
	})
	defer x.Close()
	old := searcher.DisjunctionMaxClauseCount
	searcher.DisjunctionMaxClauseCount = 20
	defer func() { searcher.DisjunctionMaxClauseCount = old }()
	agent := func(uri string) bool { return !strings.HasPrefix(uri, "s://secret/") }

	// Each pair differs only by a word a hidden file holds (first) or
	// none does (second): the caller must get the same answer to both.
	for _, pair := range [][2]string{
		{`/fill[0-9]{2}|hunter2/`, `/fill[0-9]{2}|giraffe/`},
		{`/fill[0-9]{2}|hunter[0-9]/`, `/fill[0-9]{2}|hunterq[0-9]/`},
		{`fill*`, `fil*`},
		{`/fill.*|xylophoni.*/`, `/fill.*|xylophona.*/`},
		{`/fill[0-9z]{2}/`, `/fill[0-9y]{2}/`},
	} {
		var got [2]string
		for k, q := range pair {
			r, err := x.Search(context.Background(), Query{Q: q, Limit: 100}, agent)
			if err != nil {
				got[k] = "refused: " + err.Error()
				got[k] = got[k][:strings.Index(got[k], ":")+1] // the query is in the text
				continue
			}
			got[k] = fmt.Sprint(len(r.Hits), uris(r))
		}
		if got[0] != got[1] {
			t.Errorf("the agent's %s and %s answer differently, which tells of a word in a hidden file:\n%s\n%s", pair[0], pair[1], got[0], got[1])
		}
		if strings.HasPrefix(got[0], "refused") {
			t.Errorf("%s was refused for 20 readable words: %s", pair[0], got[0])
		}
	}
	// The readable files are still found, and nothing hidden.
	r := search(t, x, Query{Q: `/fill[0-9]{2}|hunter[0-9]/`, Limit: 100}, agent)
	if !uris(r)["s://pub/fill.txt"] || len(r.Hits) != 1 {
		t.Errorf("the agent's regexp found %v", uris(r))
	}
	if r := search(t, x, Query{Q: `hunter*`, Limit: 100}, agent); len(r.Hits) != 1 || !uris(r)["s://pub/other.txt"] {
		t.Errorf("the agent's hunter* found %v", uris(r))
	}
	if r := search(t, x, Query{Q: `hunter1~1`, Limit: 100}, agent); len(r.Hits) != 1 || !uris(r)["s://pub/other.txt"] {
		t.Errorf("the agent's fuzzy hunter1~1 found %v", uris(r))
	}
	// More readable words than the bound are refused as before.
	if _, err := x.Search(context.Background(), Query{Q: `/fill[0-9]{2}|hunterx|giraffes/`}, agent); !errors.Is(err, ErrBadQuery) || !strings.Contains(err.Error(), "different words") {
		t.Errorf("22 readable words past a bound of 20: %v", err)
	}
	// A caller who reads everything expands over every file, as before.
	if _, err := x.Search(context.Background(), Query{Q: `/fill[0-9]{2}|hunter2/`}, nil); err == nil {
		t.Errorf("root's 21 words past a bound of 20 were not refused")
	}
	if r := search(t, x, Query{Q: `hunter*`, Limit: 100}, nil); len(r.Hits) != 3 {
		t.Errorf("root's hunter* found %v", uris(r))
	}
}
