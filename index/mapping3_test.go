// Tests of what mapping version 3 (neuralisfs-index-3) changed: the dir
// field behind folder filters, size and mtime answered from the side store,
// and the rebuild of an index of an older version.

package index

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/blevesearch/bleve/v2/search/query"
	bolt "go.etcd.io/bbolt"
)

// A folder filter, as a path glob or as path:<folder>/**, is the one term
// dir:<folder>: it matches the files at any depth below the folder and no
// file of a folder whose name merely starts the same; the glob is still
// checked hit by hit, and canRead still decides.
func TestFolderFilter(t *testing.T) {
	x, _ := newTestIndex(t, map[string]string{
		"deep/a/x.md":     "needle\n",
		"deep/a/b/c.md":   "needle\n",
		"deep/a/b/d.go":   "needle\n",
		"deep/ab/y.md":    "needle\n", // shares the prefix "deep/a", not the folder
		"deep/a.md":       "needle\n",
		"other/deep/a/z":  "needle\n",
		"deep/a/secret/s": "needle\n",
	})
	if q, ok := pathPrefixQuery("deep/a/").(*query.TermQuery); !ok || q.FieldVal != "dir" || q.Term != "deep/a" {
		t.Errorf("pathPrefixQuery(deep/a/) = %#v; want the term dir:deep/a", pathPrefixQuery("deep/a/"))
	}
	if _, ok := pathPrefixQuery("deep/a").(*query.PrefixQuery); !ok {
		t.Errorf("pathPrefixQuery(deep/a) = %#v; want a prefix query over path", pathPrefixQuery("deep/a"))
	}
	fields, err := x.bleve.Fields()
	if err != nil || !strings.Contains(" "+strings.Join(fields, " ")+" ", " dir ") {
		t.Errorf("fields %q (%v): no dir", fields, err)
	}
	notSecret := func(uri string) bool { return !strings.Contains(uri, "/secret/") }
	for _, tt := range []struct {
		name    string
		q       Query
		canRead func(string) bool
		want    string
	}{
		{"glob folder", Query{Q: "needle", PathGlob: "deep/a/**"}, nil, "deep/a/b/c.md deep/a/b/d.go deep/a/secret/s deep/a/x.md"},
		{"glob folder, leading slash", Query{Q: "needle", PathGlob: "/deep/a/**"}, nil, "deep/a/b/c.md deep/a/b/d.go deep/a/secret/s deep/a/x.md"},
		{"glob folder, restricted caller", Query{Q: "needle", PathGlob: "deep/a/**"}, notSecret, "deep/a/b/c.md deep/a/b/d.go deep/a/x.md"},
		{"glob folder, one level (checked hit by hit)", Query{Q: "needle", PathGlob: "deep/a/*"}, nil, "deep/a/x.md"},
		{"glob folder and pattern", Query{Q: "needle", PathGlob: "deep/a/**/*.md"}, nil, "deep/a/b/c.md deep/a/x.md"},
		{"glob folder and ext", Query{Q: "needle", PathGlob: "deep/a/**", Ext: "go"}, nil, "deep/a/b/d.go"},
		{"glob nested folder", Query{PathGlob: "deep/a/b/**"}, nil, "deep/a/b/c.md deep/a/b/d.go"},
		{"glob alternatives", Query{Q: "needle", PathGlob: "deep/{a,ab}/*.md"}, nil, "deep/a/x.md deep/ab/y.md"},
		{"glob partial name", Query{Q: "needle", PathGlob: "deep/a*"}, nil, "deep/a.md"},
		{"glob of a folder name is no file", Query{Q: "needle", PathGlob: "deep/a"}, nil, ""},
		{"path field folder", Query{Q: "+needle +path:deep/a/**"}, nil, "deep/a/b/c.md deep/a/b/d.go deep/a/secret/s deep/a/x.md"},
		{"path field folder, restricted caller", Query{Q: "+needle +path:deep/a/**"}, notSecret, "deep/a/b/c.md deep/a/b/d.go deep/a/x.md"},
		{"path field folder excluded", Query{Q: "+needle -path:deep/**"}, nil, "other/deep/a/z"},
		{"path field folder boosted", Query{Q: "needle path:deep/ab/**^5"}, nil, "deep/a.md deep/a/b/c.md deep/a/b/d.go deep/a/secret/s deep/a/x.md deep/ab/y.md other/deep/a/z"},
		{"path field not a folder", Query{Q: "path:deep/a*"}, nil, "deep/a.md deep/a/b/c.md deep/a/b/d.go deep/a/secret/s deep/a/x.md deep/ab/y.md"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := search(t, x, Query{Q: tt.q.Q, PathGlob: tt.q.PathGlob, Ext: tt.q.Ext, Limit: 100}, tt.canRead)
			var got []string
			for _, h := range r.Hits {
				got = append(got, h.Path)
			}
			if g := strings.Join(sortedCopy(got), " "); g != tt.want || r.Total != len(got) {
				t.Errorf("hits %q (total %d); want %q", g, r.Total, tt.want)
			}
		})
	}
	// The boost of path:deep/ab/** survives the rewrite: its file ranks first.
	if r := search(t, x, Query{Q: "needle path:deep/ab/**^5"}, nil); len(r.Hits) == 0 || r.Hits[0].Path != "deep/ab/y.md" {
		t.Errorf("boosted folder: first hit %+v; want deep/ab/y.md", r.Hits)
	}
}

// size and mtime are not index terms: after a restart, before and after the
// reconcile, ranges over them are answered from the remembered state, and a
// file changed while the daemon was down answers with its new size.
func TestRangesAfterRestart(t *testing.T) {
	src, idx := t.TempDir(), t.TempDir()
	writeTree(t, src, map[string]string{
		"small.txt": "word\n",
		"big.txt":   "word " + strings.Repeat("b", 4000) + "\n",
		"old.txt":   "word old\n",
	})
	old := time.Date(2019, 5, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(src, "old.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	open := func() *Index { return openWithSource(t, idx, src) }
	buildOnce(t, idx, src)

	check := func(x *Index, when string, cases map[string]string) {
		t.Helper()
		for q, want := range cases {
			r := search(t, x, Query{Q: q, Limit: 100}, nil)
			var got []string
			for _, h := range r.Hits {
				got = append(got, h.Path)
			}
			if g := strings.Join(sortedCopy(got), " "); g != want || r.Total != len(got) {
				t.Errorf("%s: %s: hits %q (total %d); want %q", when, q, g, r.Total, want)
			}
		}
	}
	x := open()
	// Not in the index: no term of size or mtime was written.
	fields, err := x.bleve.Fields()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		if f == "size" || f == "mtime" {
			t.Errorf("the index holds the field %s", f)
		}
	}
	check(x, "restarted, before the reconcile", map[string]string{
		"size:>1000":                     "big.txt",
		"+word +size:<1000":              "old.txt small.txt",
		`mtime:<"2020-01-01"`:            "old.txt",
		`+word -mtime:<"2020-01-01"`:     "big.txt small.txt",
		"+old +size:<1000":               "old.txt",
		`size:>1000 mtime:<"2020-01-01"`: "big.txt old.txt",
	})
	// A restricted caller sees only what it may read, counts included.
	r := search(t, x, Query{Q: "size:>0"}, func(uri string) bool { return uri != "data://big.txt" })
	if r.Total != 2 || len(r.Hits) != 2 {
		t.Errorf("size:>0 for a caller who may not read big.txt: %+v", r)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}

	// Grown while down: the reconcile re-reads it and the range follows.
	writeTree(t, src, map[string]string{"small.txt": "word " + strings.Repeat("s", 3000) + "\n"})
	x = open()
	defer x.Close()
	if _, err := x.Reconcile(ctx, "data", nil); err != nil {
		t.Fatal(err)
	}
	check(x, "after the reconcile", map[string]string{
		"size:>1000":          "big.txt small.txt",
		`mtime:>"2020-01-01"`: "big.txt small.txt",
	})
}

// An index of an older mapping version is rebuilt from scratch once: its
// documents are gone at Open (they lack the dir field), the reconcile reads
// every file again, and folder filters then find them. The next restart
// reads nothing.
func TestRebuiltAfterMappingBump(t *testing.T) {
	src, idx := t.TempDir(), t.TempDir()
	files := map[string]string{}
	for i := 0; i < 30; i++ {
		files[fmt.Sprintf("d%d/f%02d.txt", i%3, i)] = "bumpword\n"
	}
	writeTree(t, src, files)
	age(t, src)
	ctx := context.Background()
	open := func() *Index { return openWithSource(t, idx, src) }
	buildOnce(t, idx, src)

	// Mark the side store as written by the previous version.
	db, err := bolt.Open(filepath.Join(idx, "meta.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(stateBucket).Put(versionKey, []byte("neuralisfs-index-2"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	x := open()
	if r := search(t, x, Query{Q: "bumpword"}, nil); r.Total != 0 {
		t.Errorf("an index of the old version still answers: total %d", r.Total)
	}
	if got := x.Stats().Sources[0].Documents; got != 0 {
		t.Errorf("documents remembered from the old version: %d", got)
	}
	st, err := x.Reconcile(ctx, "data", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Read != 30 || st.Reindexed != 30 {
		t.Errorf("reconcile after the bump = %+v; want every file read and indexed", st)
	}
	if r := search(t, x, Query{Q: "bumpword", PathGlob: "d1/**"}, nil); r.Total != 10 {
		t.Errorf("folder filter after the rebuild: total %d; want 10", r.Total)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	var have string
	db, err = bolt.Open(filepath.Join(idx, "meta.db"), 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *bolt.Tx) error { have = string(tx.Bucket(stateBucket).Get(versionKey)); return nil })
	db.Close()
	if have != mappingVersion {
		t.Errorf("version after the rebuild = %q; want %q", have, mappingVersion)
	}

	// Once only: the next restart reads nothing.
	x = open()
	defer x.Close()
	st, err = x.Reconcile(ctx, "data", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Read != 0 || st.Unchanged != 30 {
		t.Errorf("restart after the rebuild = %+v; want nothing read", st)
	}
}

// openWithSource opens the index in idx (not closed for the caller) with
// the folder src added as source "data".
func openWithSource(t *testing.T, idx, src string) *Index {
	t.Helper()
	x, err := Open(Options{Dir: idx})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.AddSource(Source{Slug: "data", FS: os.DirFS(src)}); err != nil {
		t.Fatal(err)
	}
	return x
}

// buildOnce builds the index in idx over src and closes it.
func buildOnce(t *testing.T, idx, src string) {
	t.Helper()
	x := openWithSource(t, idx, src)
	if _, err := x.Reconcile(context.Background(), "data", nil); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
}
