package gitfs

import (
	"context"
	"errors"
	iofs "io/fs"
	"slices"
	"testing"
)

// Sub and IdentityIn serve a git source that is a sub-folder of its
// checkout: that folder of each commit, and the changes under it only.
func TestSubTreeAndIdentityIn(t *testing.T) {
	wt := newRepo(t)
	write(t, wt, "a/x.txt", "x\n")
	write(t, wt, "a/b/y.txt", "y\n")
	write(t, wt, "other.txt", "o\n")
	commitAll(t, wt, "one")
	write(t, wt, "a/x.txt", "x2\n")
	write(t, wt, "other.txt", "o2\n")
	write(t, wt, "a/new.txt", "n\n")
	r, err := Open(wt)
	if err != nil {
		t.Fatal(err)
	}
	h, err := r.ResolveRev("HEAD")
	if err != nil {
		t.Fatal(err)
	}
	tree, err := r.Tree(h)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := tree.Sub("a")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := sub.ReadFile("b/y.txt"); err != nil || string(b) != "y\n" {
		t.Errorf("Sub(a).ReadFile(b/y.txt) = %q, %v", b, err)
	}
	if sub.Commit() != h {
		t.Errorf("Sub changed the commit")
	}
	for _, p := range []string{"nope", "other.txt"} {
		if _, err := tree.Sub(p); !errors.Is(err, iofs.ErrNotExist) {
			t.Errorf("Sub(%q): %v; want not found", p, err)
		}
	}
	commit, dirty, err := r.IdentityIn(context.Background(), "a")
	if err != nil || commit != h.String() {
		t.Fatalf("IdentityIn: %q %v", commit, err)
	}
	if want := []string{"a/new.txt", "a/x.txt"}; !slices.Equal(dirty, want) {
		t.Errorf("IdentityIn(a) dirty = %q; want %q (nothing outside a)", dirty, want)
	}
	if _, all, _ := r.Identity(context.Background()); !slices.Contains(all, "other.txt") {
		t.Errorf("Identity dirty = %q; want other.txt too", all)
	}
}
