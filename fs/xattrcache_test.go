package fs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Absences are kept only where the daemon is told of every change: with no
// watcher running, a mount that believes its files watched keeps answering
// "no such attribute" after one appears behind it (the kept answer is what
// serves), a mount that does not believe so sees it at once, and a
// setxattr or a new name through the mount forgets every kept absence.
// (tests/xattrcache_test.go checks the answers against the disk with the
// real watcher.)
func TestAbsentXattrsAreKeptWhereWatched(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"f", "g"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	watched := mountWith(t, dir, Options{Watched: func(string, string) bool { return true }, WatchedTimeout: time.Minute})
	plain := mount(t, dir)
	get := func(root, name string) error {
		_, err := unix.Lgetxattr(filepath.Join(root, name), "user.tag", make([]byte, 64))
		return err
	}
	for _, root := range []string{watched, plain} {
		for _, f := range []string{"f", "g"} {
			if err := get(root, f); err != unix.ENODATA {
				t.Fatalf("%s/%s before: %v, want ENODATA", root, f, err)
			}
		}
	}
	// Behind the mount, with no watcher to tell it.
	for _, f := range []string{"f", "g"} {
		if err := unix.Lsetxattr(filepath.Join(dir, f), "user.tag", []byte("v"), 0); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("the backing file system keeps no user xattrs: %v", err)
			}
			t.Skipf("the backing file system keeps no user xattrs: %v", err)
		}
	}
	if err := get(watched, "f"); err != unix.ENODATA {
		t.Errorf("watched mount after a change it was not told of: %v; want the kept ENODATA", err)
	}
	if err := get(plain, "f"); err != nil {
		t.Errorf("unwatched mount after the change: %v; want the attribute", err)
	}
	// A setxattr through the mount forgets every kept absence, not only
	// the file's own.
	if err := unix.Lsetxattr(filepath.Join(watched, "g"), "user.other", []byte("w"), 0); err != nil {
		t.Fatal(err)
	}
	if err := get(watched, "f"); err != nil {
		t.Errorf("watched mount after a setxattr through it: %v; want the attribute", err)
	}
	// So does a new name.
	if err := unix.Lremovexattr(filepath.Join(dir, "f"), "user.tag"); err != nil {
		t.Fatal(err)
	}
	if err := get(watched, "f"); err != unix.ENODATA {
		t.Fatalf("f after its attribute went: %v", err)
	}
	if err := unix.Lsetxattr(filepath.Join(dir, "f"), "user.tag", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(watched, "new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := get(watched, "f"); err != nil {
		t.Errorf("watched mount after a create through it: %v; want the attribute", err)
	}
}
