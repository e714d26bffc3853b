package gitfs

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// The fast decoder agrees with go-git's on real indexes written by git:
// plain, with a cache-tree, after git add (invalidated tree), and with an
// intent-to-add entry (extended flags, version 3).
func TestFastDecodeMatchesGoGit(t *testing.T) {
	dir := t.TempDir()
	git(t, dir, "init", "-q", "-b", "main")
	for _, f := range []string{"a.txt", "sub/b.txt", "sub/deep/c.txt", "ü.txt"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755)
		os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644)
	}
	check := func(when string, wantTree bool) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(dir, ".git", "index"))
		if err != nil {
			t.Fatal(err)
		}
		fast, tree, ok := fastDecodeIndex(data)
		if !ok {
			t.Fatalf("%s: the fast decoder gave up", when)
		}
		idx := &index.Index{}
		if err := index.NewDecoder(bytes.NewReader(data)).Decode(idx); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, idx.Entries) {
			t.Errorf("%s: entries differ from go-git's:\nfast %v\ngo-git %v", when, fast, idx.Entries)
		}
		if got := !tree.IsZero(); got != wantTree {
			t.Errorf("%s: cache-tree root found = %v; want %v", when, got, wantTree)
		}
		if wantTree && idx.Cache != nil && idx.Cache.Entries[0].Hash != tree {
			t.Errorf("%s: cache-tree root %s; go-git has %s", when, tree, idx.Cache.Entries[0].Hash)
		}
	}
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "c")
	check("after commit", true)
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("changed"), 0o644)
	git(t, dir, "add", "a.txt")
	check("after add", false)
	os.WriteFile(filepath.Join(dir, "itoa.txt"), []byte("x"), 0o644)
	git(t, dir, "add", "-N", "itoa.txt")
	check("with intent-to-add", false)
}
