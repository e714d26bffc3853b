package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/neuralis/neuralisfs/mounts"
)

// What a killed revert left under its own name goes at the next start;
// a name recorded as gone is left alone; a source missing at that start
// keeps its records for a later one.
func TestLandingCleanRemovesWhatAKilledRevertLeft(t *testing.T) {
	dir := t.TempDir()
	back := filepath.Join(dir, "back")
	if err := os.MkdirAll(filepath.Join(back, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := mounts.OpenRoot(back)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l := &landing{path: filepath.Join(dir, "landing.jsonl")}
	left, landed := "sub/.neuralisfs-revert-left", "sub/.neuralisfs-revert-landed"
	for _, p := range []string{left, landed} {
		if err := os.WriteFile(filepath.Join(back, p), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.note("d", left, false))
	must(l.note("d", landed, false))
	must(l.note("d", landed, true))
	must(l.note("gone", "x/.neuralisfs-revert-later", false))
	roots := func(slug string) (*mounts.Root, error) {
		if slug == "d" {
			return r, nil
		}
		return nil, errors.New("not there")
	}
	must(l.clean(roots))
	if _, err := os.Lstat(filepath.Join(back, left)); err == nil {
		t.Errorf("%s is still there", left)
	}
	if _, err := os.Lstat(filepath.Join(back, landed)); err != nil {
		t.Errorf("%s, recorded as gone, was removed: %v", landed, err)
	}
	b, err := os.ReadFile(l.path)
	if err != nil || string(b) != `{"slug":"gone","rel":"x/.neuralisfs-revert-later"}`+"\n" {
		t.Errorf("records kept: %q, %v; want only the missing source's", b, err)
	}
	// Once the source is there, the records go.
	must(l.clean(func(string) (*mounts.Root, error) { return r, nil }))
	if _, err := os.Lstat(l.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("records left after everything was cleaned: %v", err)
	}
	// A revert that finishes leaves no records behind once nothing else is
	// in flight: the file does not grow with every revert.
	l2 := &landing{path: l.path}
	must(l2.note("d", "a/.neuralisfs-revert-1", false))
	must(l2.note("d", "b/.neuralisfs-revert-2", false))
	must(l2.note("d", "a/.neuralisfs-revert-1", true))
	if _, err := os.Lstat(l.path); err != nil {
		t.Errorf("records gone while a revert is still in flight: %v", err)
	}
	must(l2.note("d", "b/.neuralisfs-revert-2", true))
	if _, err := os.Lstat(l.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("records left after every revert finished: %v", err)
	}
}
