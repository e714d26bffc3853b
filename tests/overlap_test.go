package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two sources over one folder, or one inside the other's folder (a
// checkout and a source of one of its subfolders): the same files show
// under both slugs, each with inodes of its own. Before, they got one
// inode number, go-fuse kept one node for both, and whichever slug looked
// a folder up second answered ENOENT for it and for the files in it
// (ENOMEDIUM once a reload removed the other source; found by a
// differential pass).
func TestSourcesOverTheSameFiles(t *testing.T) {
	requireFUSE(t)
	repo := sharedTempDir(t)
	writeFile(t, filepath.Join(repo, "top.txt"), "top\n", 0o644)
	writeFile(t, filepath.Join(repo, "sub", "deep", "f.txt"), "f\n", 0o644)
	e := newEnv(t, "", src{slug: "outer", path: repo}, src{slug: "inner", path: filepath.Join(repo, "sub")}, src{slug: "again", path: repo})
	for _, order := range [][]string{
		{e.m("outer", "sub", "deep"), e.m("inner", "deep"), e.m("again", "sub", "deep")},
		{e.m("inner", "deep"), e.m("again", "sub", "deep"), e.m("outer", "sub", "deep")},
	} {
		for _, d := range order {
			out := sh(t, `ls "$D" && cat "$D/f.txt" && stat -c %h "$D" && cd "$D" && pwd`, "D="+d)
			if !strings.HasPrefix(out, "f.txt\nf\n") || !strings.HasSuffix(out, d+"\n") {
				t.Errorf("%s: %q", d, out)
			}
		}
		// A change through one slug shows under the others.
		must(t, os.WriteFile(filepath.Join(order[0], "f.txt"), []byte("changed\n"), 0o644))
		for _, d := range order[1:] {
			eventually(t, 5e9, "the change through "+order[0]+" under "+d, func() bool {
				b, err := os.ReadFile(filepath.Join(d, "f.txt"))
				return err == nil && string(b) == "changed\n"
			})
		}
		must(t, os.WriteFile(filepath.Join(order[0], "f.txt"), []byte("f\n"), 0o644))
	}
}
