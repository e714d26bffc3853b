package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/neuralis/neuralisfs/mounts"
)

// mount serves a local source over dir on a fresh mountpoint until the
// benchmark or test ends. It skips where FUSE or root is unavailable
// (CI=true fails instead).
func mount(tb testing.TB, dir string) string {
	tb.Helper()
	why := ""
	if _, err := os.Stat("/dev/fuse"); err != nil {
		why = "FUSE unavailable: " + err.Error()
	} else if os.Geteuid() != 0 {
		why = "direct mounts need root"
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal(why)
		}
		tb.Skip(why)
	}
	src := mounts.NewSource(mounts.SourceConfig{Slug: "d", Kind: mounts.KindLocal, Path: dir})
	src.Refresh()
	f := New(Options{Sources: []*mounts.Source{src}, EntryTimeout: time.Second, AttrTimeout: time.Second, Passthrough: true})
	mnt := tb.TempDir()
	srv, err := f.Mount(mnt, MountOptions{})
	if err != nil {
		tb.Fatalf("mount: %v", err)
	}
	tb.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			tb.Errorf("unmount: %v", err)
		}
		src.Close()
	})
	return filepath.Join(mnt, "d")
}

// BenchmarkStat: lstat of a cached name, through the mount and natively.
func BenchmarkStat(b *testing.B) {
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	for name, root := range map[string]string{"native": dir, "mount": mount(b, dir)} {
		b.Run(name, func(b *testing.B) {
			p := filepath.Join(root, "f")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := os.Lstat(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOpenRead4K: open, read 4 KiB and close, the per-file cost of
// grep -r and builds.
func BenchmarkOpenRead4K(b *testing.B) {
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), make([]byte, 4096), 0o644)
	buf := make([]byte, 4096)
	for name, root := range map[string]string{"native": dir, "mount": mount(b, dir)} {
		b.Run(name, func(b *testing.B) {
			p := filepath.Join(root, "f")
			b.SetBytes(4096)
			for b.Loop() {
				f, err := os.Open(p)
				if err != nil {
					b.Fatal(err)
				}
				f.Read(buf)
				f.Close()
			}
		})
	}
}

// BenchmarkCreate: create, write 100 bytes and close a new file.
func BenchmarkCreate(b *testing.B) {
	dir := b.TempDir()
	for name, root := range map[string]string{"native": dir, "mount": mount(b, dir)} {
		b.Run(name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("%s-%d", name, i)), make([]byte, 100), 0o644); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The in-process mount works at all (so the benchmarks measure something).
func TestInProcessMount(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("hello"), 0o644)
	root := mount(t, dir)
	b, err := os.ReadFile(filepath.Join(root, "f"))
	if err != nil || string(b) != "hello" {
		t.Fatalf("read through the mount: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(root, "g"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "g")); string(b) != "new" {
		t.Errorf("backing file = %q", b)
	}
}
