package index

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bindex "github.com/blevesearch/bleve_index_api"
)

// The index keeps no positions: phrases are relaxed to their terms, then
// checked in the files. These cases are where the relaxation alone would
// be wrong.
func TestPhraseSemantics(t *testing.T) {
	x, _ := newTestIndex(t, map[string]string{
		"adj.txt":     "return nil\n",
		"apart.txt":   "nil return\n",                    // both terms, not in order
		"gap.txt":     "return 0, nil\n",                 // both terms, not adjacent
		"lines.txt":   "return\n\tnil // across lines\n", // a phrase spans lines
		"case.txt":    "RETURN Nil\n",
		"other.txt":   "unrelated words only\n",
		"triple.txt":  "a b a b c\n", // overlapping partial match
		"long.txt":    "return " + strings.Repeat("x", maxTokenBytes+1) + " nil\n",
		"dotted.go":   "fmt.Println(x)\n",
		"dotted2.go":  "fmt\nPrintln\n",
		"notdot.go":   "Println fmt\n",
		"mixed.md":    "the return nil case and other words\n",
		"onlyword.md": "words\n",
	})
	for _, tt := range []struct {
		q    string
		want []string
	}{
		{`"return nil"`, []string{"adj.txt", "lines.txt", "case.txt", "long.txt", "mixed.txt"}},
		{`"nil return"`, []string{"apart.txt"}},
		{`"a b c"`, []string{"triple.txt"}},
		{`fmt.Println`, []string{"dotted.go", "dotted2.go"}},
		{`+return -"return nil"`, []string{"apart.txt", "gap.txt"}},
		{`"return nil" words`, []string{"adj.txt", "lines.txt", "case.txt", "long.txt", "mixed.txt", "other.txt", "onlyword.md"}},
		{`+words -"return nil"`, []string{"other.txt", "onlyword.md"}},
		{`+"return nil" +words`, []string{"mixed.md"}},
		{`"return nil" ext:md`, []string{"adj.txt", "lines.txt", "case.txt", "long.txt", "mixed.md", "onlyword.md"}},
		{`+"return nil" +ext:md`, []string{"mixed.md"}},
		{`"single"`, nil},
		{`"nil"`, []string{"adj.txt", "apart.txt", "gap.txt", "lines.txt", "case.txt", "long.txt", "mixed.md"}},
	} {
		t.Run(tt.q, func(t *testing.T) {
			// mixed.txt in a want list stands for mixed.md (typo-proof check below).
			want := map[string]bool{}
			for _, w := range tt.want {
				want["data://"+strings.Replace(w, "mixed.txt", "mixed.md", 1)] = true
			}
			r := search(t, x, Query{Q: tt.q}, nil)
			got := uris(r)
			if len(got) != len(want) || r.Total != len(want) || r.TotalIsLowerBound {
				t.Errorf("hits = %v (total %d, lower bound %v); want %v", got, r.Total, r.TotalIsLowerBound, want)
			}
			for u := range want {
				if !got[u] {
					t.Errorf("missing %s", u)
				}
			}
		})
	}
	// Highlights and filters still apply to phrase hits.
	r := search(t, x, Query{Q: `"return nil"`, Ext: "md"}, nil)
	if len(r.Hits) != 1 || len(r.Hits[0].Lines) != 1 || r.Hits[0].Lines[0].Text != "the «return nil» case and other words" {
		t.Errorf("phrase hit = %+v", r.Hits)
	}
	r = search(t, x, Query{Q: `"return nil"`}, func(uri string) bool { return uri != "data://adj.txt" })
	if uris(r)["data://adj.txt"] || r.Total != 4 {
		t.Errorf("canRead: %v (total %d)", uris(r), r.Total)
	}
}

// A phrase in many files is checked a page of candidates at a time: the
// hits come quickly and the total is then flagged as a lower bound.
func TestPhrasePagesCandidates(t *testing.T) {
	files := map[string]string{}
	for i := 0; i < 3*phrasePage; i++ {
		c := "alpha beta\n" // phrase holds in one file of three
		if i%3 != 0 {
			c = "beta alpha\n"
		}
		files[fmt.Sprintf("f%03d.txt", i)] = c
	}
	x, _ := newTestIndex(t, files)
	r := search(t, x, Query{Q: `"alpha beta"`, Limit: 5}, nil)
	if len(r.Hits) != 5 || r.Total < 5 || !r.TotalIsLowerBound {
		t.Errorf("limit 5: %d hits, total %d, lower bound %v", len(r.Hits), r.Total, r.TotalIsLowerBound)
	}
	r = search(t, x, Query{Q: `"alpha beta"`, Limit: maxLimit}, nil)
	if len(r.Hits) != phrasePage || r.Total != phrasePage || r.TotalIsLowerBound {
		t.Errorf("limit %d: %d hits, total %d, lower bound %v; want all %d", maxLimit, len(r.Hits), r.Total, r.TotalIsLowerBound, phrasePage)
	}
	for _, h := range r.Hits {
		var i int
		fmt.Sscanf(h.Path, "f%03d.txt", &i)
		if i%3 != 0 {
			t.Errorf("hit %s does not hold the phrase", h.URI)
		}
	}
}

// contentFrequencies must count what the mapping's tokenizer (used to
// parse queries) produces.
func TestContentFrequenciesMatchTokenizer(t *testing.T) {
	for _, s := range []string{
		"", "a", "Hello, World! hello_world x1 X1 fmt.Println",
		"ÉCOLE école Straße STRASSE naïve 東京 tōkyō KELVIN \u212a x",
		strings.Repeat("y", maxTokenBytes) + " " + strings.Repeat("z", maxTokenBytes+1) + " end",
		"trailing", "tabs\tand\nnewlines\r\n",
	} {
		want := map[string]int{}
		toks := codeTokenizer{}.Tokenize([]byte(s))
		for _, tok := range toks {
			want[string(tok.Term)]++
		}
		a := contentFrequencies([]byte(s))
		freqs, n := a.freqs, a.tokens
		if n != len(toks) || len(freqs) != len(want) {
			t.Errorf("%q: %d tokens, %d terms; want %d, %d", s, n, len(freqs), len(toks), len(want))
		}
		for term, tf := range freqs {
			if want[term] != tf.Frequency() || string(tf.Term) != term {
				t.Errorf("%q: term %q (%q) ×%d; want ×%d", s, term, tf.Term, tf.Frequency(), want[term])
			}
		}
	}
	f := newKeywordField("path", []byte("A/b.go"))
	f.Analyze()
	if tf := f.AnalyzedTokenFrequencies()["A/b.go"]; tf == nil || tf.Frequency() != 1 || f.Options() != bindex.IndexField {
		t.Errorf("keyword field: %v", f.AnalyzedTokenFrequencies())
	}
}

// An index written with another mapping version is rebuilt, not misread.
func TestOldFormatRebuilt(t *testing.T) {
	src, dir := t.TempDir(), t.TempDir()
	writeTree(t, src, map[string]string{"a.txt": "alpha beta\n"})
	// Make an index that claims an older version (as version 1 did, positions and all).
	m, _, err := openMeta(filepath.Join(dir, "meta.db"), "neuralisfs-index-1")
	if err != nil {
		t.Fatal(err)
	}
	m.enqueue([]metaChange{{slug: "data", path: "a.txt", entry: metaEntry{size: 11, indexed: true}}})
	m.close()
	if err := os.MkdirAll(filepath.Join(dir, "bleve"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bleve", "index_meta.json"), []byte(`{"storage":"scorch","index_type":"scorch"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	x := openTest(t, dir)
	if err := x.AddSource(Source{Slug: "data", FS: os.DirFS(src)}); err != nil {
		t.Fatal(err)
	}
	if st := x.Stats().Sources[0]; st.Documents != 0 {
		t.Fatalf("old side store was kept: %+v", st)
	}
	st, err := x.Reconcile(context.Background(), "data", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Reindexed != 1 {
		t.Errorf("reconcile = %+v; want the file re-indexed", st)
	}
	if r := search(t, x, Query{Q: `"alpha beta"`}, nil); r.Total != 1 {
		t.Errorf("after rebuild: %+v", r)
	}
}
