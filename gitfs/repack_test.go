package gitfs

import (
	"context"
	"testing"
)

// TestStatusAfterRepack checks that a Repo kept open across git gc, which
// packs loose objects into a new pack, deletes them and drops the old pack,
// still finds HEAD's objects (go-git lists the packs only once).
func TestStatusAfterRepack(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	write(t, wt, "a/x.txt", "x\n")
	write(t, wt, "b/y.txt", "y\n")
	commitAll(t, wt, "one")
	git(t, wt, "gc", "-q")
	write(t, wt, "a/x.txt", "x2\n")
	commitAll(t, wt, "two") // loose objects next to the pack
	write(t, wt, "b/y.txt", "y2\n")
	git(t, wt, "add", "b/y.txt") // staged: the HEAD tree is walked, into the pack
	r, err := Open(wt, Options{MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, step := range []func(){
		func() {},
		func() {
			commitAll(t, wt, "three")
			write(t, wt, "a/x.txt", "x3\n")
			git(t, wt, "add", "a/x.txt")
			git(t, wt, "gc", "-q", "--prune=now")
		},
	} {
		step()
		r.Invalidate()
		got, err := r.Status(ctx, "", nil)
		if err != nil {
			t.Fatalf("step %d: Status: %v", i, err)
		}
		if want := cliStatus(t, wt, ""); string(got) != want {
			t.Fatalf("step %d: Status = %q; git says %q", i, got, want)
		}
	}
}
