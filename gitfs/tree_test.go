package gitfs

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// treeRepo builds a history with files that delta well, an executable, a
// symlink, nested folders and a submodule-free layout; it returns the
// worktree.
func treeRepo(t *testing.T) string {
	t.Helper()
	wt := newRepo(t)
	var big strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&big, "line %d of a file that packs as deltas\n", i)
	}
	for v := range 4 {
		write(t, wt, "big.txt", big.String()+strings.Repeat("v", v)+"\n")
		write(t, wt, "dir/sub/deep.txt", fmt.Sprintf("deep %d\n", v))
		write(t, wt, "dir/x y.txt", "spaced\n")
		write(t, wt, "bin.dat", "\x00\x01\x02binary"+strconv.Itoa(v))
		commitAll(t, wt, fmt.Sprintf("v%d", v))
	}
	write(t, wt, "run.sh", "#!/bin/sh\necho hi\n")
	os.Chmod(filepath.Join(wt, "run.sh"), 0o755)
	os.Symlink("dir/sub/deep.txt", filepath.Join(wt, "link"))
	write(t, wt, "empty", "")
	commitAll(t, wt, "final")
	git(t, wt, "tag", "-a", "-m", "annotated", "v1.0")
	git(t, wt, "tag", "light", "HEAD~2")
	return wt
}

// checkTreeAgainstGit compares every path of rev's tree with git ls-tree and
// git show.
func checkTreeAgainstGit(t *testing.T, r *Repo, gitDir, rev string) {
	t.Helper()
	h, err := r.ResolveRev(rev)
	if err != nil {
		t.Fatalf("ResolveRev(%q): %v", rev, err)
	}
	if want := strings.TrimSpace(git(t, gitDir, "rev-parse", rev+"^{commit}")); h.String() != want {
		t.Fatalf("ResolveRev(%q) = %s; want %s", rev, h, want)
	}
	tree, err := r.Tree(h)
	if err != nil {
		t.Fatal(err)
	}
	ls := git(t, gitDir, "ls-tree", "-r", "-t", "-l", "-z", h.String())
	n := 0
	for _, line := range strings.Split(strings.TrimSuffix(ls, "\x00"), "\x00") {
		meta, p, _ := strings.Cut(line, "\t")
		f := strings.Fields(meta) // mode type hash size
		n++
		e, err := tree.Stat(p)
		if err != nil {
			t.Errorf("Stat(%q): %v", p, err)
			continue
		}
		if e.Hash.String() != f[2] || e.Name != filepath.Base(p) {
			t.Errorf("Stat(%q) = %+v; want hash %s", p, e, f[2])
		}
		switch f[0] {
		case "040000":
			if !e.Mode.IsDir() {
				t.Errorf("Stat(%q).Mode = %v; want a directory", p, e.Mode)
			}
			continue
		case "120000":
			if e.Mode&iofs.ModeSymlink == 0 {
				t.Errorf("Stat(%q).Mode = %v; want a symlink", p, e.Mode)
			}
			target, err := tree.Readlink(p)
			if want := git(t, gitDir, "cat-file", "blob", f[2]); err != nil || target != want {
				t.Errorf("Readlink(%q) = %q, %v; want %q", p, target, err, want)
			}
		case "100755":
			if e.Mode != 0o755 {
				t.Errorf("Stat(%q).Mode = %v; want 0755", p, e.Mode)
			}
		case "100644":
			if e.Mode != 0o644 {
				t.Errorf("Stat(%q).Mode = %v; want 0644", p, e.Mode)
			}
		}
		if size, _ := strconv.ParseInt(f[3], 10, 64); e.Size != size {
			t.Errorf("Stat(%q).Size = %d; want %d", p, e.Size, size)
		}
		want := git(t, gitDir, "show", h.String()+":"+p)
		got, err := tree.ReadFile(p)
		if err != nil || string(got) != want {
			t.Errorf("ReadFile(%q) = %d bytes, %v; want %d bytes as git show", p, len(got), err, len(want))
		}
		rc, err := tree.Open(p)
		if err != nil {
			t.Errorf("Open(%q): %v", p, err)
			continue
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != want {
			t.Errorf("Open(%q) content differs from git show", p)
		}
	}
	if n == 0 {
		t.Fatalf("ls-tree %s listed nothing", rev)
	}
	// ReadDir of the root lists what ls-tree lists at depth 1.
	ents, err := tree.ReadDir("")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	wantNames := strings.Fields(git(t, gitDir, "ls-tree", "--name-only", h.String()))
	if strings.Join(names, " ") != strings.Join(wantNames, " ") {
		t.Errorf("ReadDir(\"\") = %v; want %v", names, wantNames)
	}
	for _, missing := range []string{"nope", "dir/nope", "big.txt/child"} {
		if _, err := tree.Stat(missing); !errors.Is(err, iofs.ErrNotExist) {
			t.Errorf("Stat(%q) = %v; want ErrNotExist", missing, err)
		}
		if _, err := tree.ReadFile(missing); !errors.Is(err, iofs.ErrNotExist) {
			t.Errorf("ReadFile(%q) = %v; want ErrNotExist", missing, err)
		}
	}
}

func TestTreeMatchesGit(t *testing.T) {
	gitEnv(t)
	wt := treeRepo(t)
	revs := []string{"HEAD", "main", "v1.0", "light", "HEAD~1", strings.TrimSpace(git(t, wt, "rev-parse", "--short=7", "HEAD~3"))}
	revs = append(revs, strings.TrimSpace(git(t, wt, "rev-parse", "HEAD~2")))

	t.Run("loose", func(t *testing.T) {
		r, err := Open(wt)
		if err != nil {
			t.Fatal(err)
		}
		for _, rev := range revs {
			checkTreeAgainstGit(t, r, wt, rev)
		}
	})
	t.Run("packed", func(t *testing.T) {
		git(t, wt, "gc", "-q", "--aggressive")
		if out := git(t, wt, "count-objects", "-v"); !strings.Contains(out, "count: 0") {
			t.Logf("objects still loose after gc:\n%s", out)
		}
		r, err := Open(wt)
		if err != nil {
			t.Fatal(err)
		}
		for _, rev := range revs {
			checkTreeAgainstGit(t, r, wt, rev)
		}
	})
	t.Run("bare", func(t *testing.T) {
		bare := filepath.Join(t.TempDir(), "bare.git")
		git(t, wt, "clone", "-q", "--bare", wt, bare)
		r, err := OpenBare(bare)
		if err != nil {
			t.Fatal(err)
		}
		for _, rev := range revs {
			checkTreeAgainstGit(t, r, bare, rev)
		}
		refs, err := r.Refs()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(refs, " "); got != "light main v1.0" {
			t.Errorf("Refs() = %q; want %q", got, "light main v1.0")
		}
	})
	t.Run("unknown revision", func(t *testing.T) {
		r, err := Open(wt)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.ResolveRev("no-such-branch"); !errors.Is(err, iofs.ErrNotExist) {
			t.Errorf("ResolveRev(no-such-branch) = %v; want ErrNotExist", err)
		}
	})
}
