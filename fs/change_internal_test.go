package fs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
)

// The marks of the mount's own changes are bounded: once there are
// ownPruneAt of them, those past the window go. A burst whose marks are
// all within the window keeps them, and is not looked through again until
// it has doubled.
func TestOwnMarksDropThoseOutsideTheWindow(t *testing.T) {
	var o ownChanges
	o.m = map[string]ownMark{}
	old := time.Now().Add(-2 * ownWindow)
	for i := range ownPruneAt {
		o.m[ownKey("s", fmt.Sprint("old", i))] = ownMark{when: old}
	}
	o.mark("s", "new", nil, nil)
	if len(o.m) != 1 || !o.recent("s", "new") {
		t.Fatalf("after a mark with %d marks past the window: %d kept; want only the new one", ownPruneAt, len(o.m))
	}
	for i := range 3 * ownPruneAt {
		o.mark("s", fmt.Sprint("burst", i), nil, nil)
	}
	if len(o.m) != 3*ownPruneAt+1 {
		t.Errorf("a burst within the window kept %d marks; want all %d", len(o.m), 3*ownPruneAt+1)
	}
	if o.prune <= ownPruneAt*2 {
		t.Errorf("the next look through the marks is at %d; want past twice the burst seen at the last one", o.prune)
	}
}

// BenchmarkOwnMarkBurst is the cost of a mark in a burst of 200,000
// changes within the window (an untar or rm -rf faster than 25,000
// requests a second): every mark looked through every other one before.
func BenchmarkOwnMarkBurst(b *testing.B) {
	keys := make([]string, 200000)
	for i := range keys {
		keys[i] = fmt.Sprint("f", i)
	}
	for b.Loop() {
		var o ownChanges
		for _, k := range keys {
			o.mark("s", k, nil, nil)
		}
	}
}

// A watcher report of a rename made through the mount that comes in
// between the backing folder's rename and go-fuse's move of the node
// leaves the node at its new name, and the file's next requests find it.
// Before, the report that the old name was gone, with the node still
// there, was taken for an external removal and dropped the node's only
// name; go-fuse then had nothing to move, and a link of the renamed file
// answered ENOENT (TestLongPathsAgainstPlainFolder failed so once, under
// load, in CI).
func TestWatcherReportDuringRenameKeepsTheNode(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, f := mountFS(t, dir, Options{})
	p, q := filepath.Join(root, "p"), filepath.Join(root, "q")
	// A change through the mount first, as in the failing run: the
	// report of p then finds it among the mount's own recent changes.
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	reported := make(chan struct{})
	hook := func(slug, oldRel, newRel string) {
		go func() {
			f.Changed([]mounts.Change{{Slug: slug, Rel: oldRel, Gone: true}})
			close(reported)
		}()
		// Without the hold, the report waits for the kernel, which holds
		// the folder until the rename is answered.
		select {
		case <-reported:
		case <-time.After(500 * time.Millisecond):
		}
	}
	afterBackingRename.Store(&hook)
	err := os.Rename(p, q)
	afterBackingRename.Store(nil)
	if err != nil {
		t.Fatal(err)
	}
	<-reported
	if err := os.Link(q, p); err != nil {
		t.Fatalf("link of the renamed file after a watcher report of its old name: %v", err)
	}
	if err := os.Chmod(q, 0o600); err != nil {
		t.Errorf("chmod of the renamed file: %v", err)
	}
	var sp, sq, sb unix.Stat_t
	if err := errors.Join(unix.Lstat(p, &sp), unix.Lstat(q, &sq), unix.Lstat(filepath.Join(dir, "q"), &sb)); err != nil {
		t.Fatal(err)
	}
	if sp.Ino != sq.Ino || sq.Nlink != 2 || sb.Nlink != 2 || sb.Mode&0o777 != 0o600 {
		t.Errorf("after the link: p ino %d, q ino %d nlink %d; backing nlink %d mode %o; want one file with two names, mode 600",
			sp.Ino, sq.Ino, sq.Nlink, sb.Nlink, sb.Mode&0o777)
	}
}
