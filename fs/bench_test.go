package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
)

// mount serves a local source over dir on a fresh mountpoint until the
// benchmark or test ends. It skips where FUSE or root is unavailable
// (CI=true fails instead).
func mount(tb testing.TB, dir string) string {
	tb.Helper()
	return mountWith(tb, dir, Options{})
}

// mountWith is mount with the watch settings of o (Watched and
// WatchedTimeout) added.
func mountWith(tb testing.TB, dir string, o Options) string {
	tb.Helper()
	root, _ := mountFS(tb, dir, o)
	return root
}

// mountFS is mountWith, also returning the filesystem served.
func mountFS(tb testing.TB, dir string, o Options) (string, *FS) {
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
	f := New(Options{Sources: []*mounts.Source{src}, EntryTimeout: time.Second, AttrTimeout: time.Second, Passthrough: true,
		Watched: o.Watched, WatchedTimeout: o.WatchedTimeout})
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
	return filepath.Join(mnt, "d"), f
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

// BenchmarkGetxattrAbsent: lgetxattr of an attribute the file does not
// have (`ls -l`'s security.selinux), natively, through a mount whose
// files are not watched (the daemon asks the backing folder each time)
// and through one whose files are (it answers a kept absence; see
// xattrcache.go). The difference is the daemon's parent open, getxattrat
// and close per request.
func BenchmarkGetxattrAbsent(b *testing.B) {
	dir := b.TempDir()
	os.MkdirAll(filepath.Join(dir, "a", "b", "c"), 0o755)
	os.WriteFile(filepath.Join(dir, "a", "b", "c", "f"), []byte("x"), 0o644)
	watched := Options{Watched: func(string, string) bool { return true }, WatchedTimeout: time.Minute}
	for _, t := range []struct{ name, root string }{
		{"native", dir},
		{"mount", mount(b, dir)},
		{"mount-watched", mountWith(b, dir, watched)},
	} {
		b.Run(t.name, func(b *testing.B) {
			p := filepath.Join(t.root, "a", "b", "c", "f")
			buf := make([]byte, 256)
			for b.Loop() {
				if _, err := unix.Lgetxattr(p, "security.selinux", buf); err != unix.ENODATA {
					b.Fatalf("lgetxattr: %v", err)
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

// bareFS answers every request with the least work go-fuse allows: the
// root folder's attributes, and "no such attribute" for every xattr. It
// measures the FUSE transport alone.
type bareFS struct{ fuse.RawFileSystem }

func (bareFS) GetAttr(_ <-chan struct{}, _ *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	out.Mode = fuse.S_IFDIR | 0o755
	out.Ino = 1
	out.SetTimeout(time.Second)
	return fuse.OK
}

func (bareFS) GetXAttr(_ <-chan struct{}, _ *fuse.InHeader, _ string, _ []byte) (uint32, fuse.Status) {
	return 0, fuse.ENOATTR
}

// BenchmarkRoundTrip: one getxattr that finds nothing — the request every
// write and every ls -l entry sends — natively, through a go-fuse server
// that does no work at all (the transport's floor), and through the mount.
// The difference between the last two is what neuralisfs itself costs.
func BenchmarkRoundTrip(b *testing.B) {
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	mnt := mount(b, dir)
	bare := b.TempDir()
	srv, err := fuse.NewServer(bareFS{fuse.NewDefaultRawFileSystem()}, bare, &fuse.MountOptions{DirectMount: true, Name: "bare"})
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Unmount() })
	for _, c := range []struct{ name, path string }{
		{"native", filepath.Join(dir, "f")},
		{"bare-go-fuse", bare},
		{"mount", filepath.Join(mnt, "f")},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := unix.Lgetxattr(c.path, "security.capability", nil); err != unix.ENODATA {
					b.Fatalf("getxattr: %v", err)
				}
			}
		})
	}
}
