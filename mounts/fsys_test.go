package mounts

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

func TestSourceFS(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(dir, "a", "b", "f.txt"), []byte("hello"), 0o644)
	os.WriteFile(filepath.Join(dir, "top.txt"), []byte("top"), 0o644)
	s := NewSource(SourceConfig{Slug: "s", Kind: KindLocal, Path: dir})
	s.Refresh()
	defer s.Close()
	if err := fstest.TestFS(s.FS(), "top.txt", "a/b/f.txt"); err != nil {
		t.Fatal(err)
	}
	// A symlink is reported as one and never followed.
	os.Symlink("/etc", filepath.Join(dir, "out"))
	fi, err := s.FS().(interface {
		Stat(string) (os.FileInfo, error)
	}).Stat("out")
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("Stat(out) = %v, %v; want a symlink", fi, err)
	}
	if _, err := s.FS().Open("out/passwd"); err == nil {
		t.Errorf("opened a path through a symlink")
	}
}
