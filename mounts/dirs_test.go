package mounts

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Dirs answers as Root.Lstat does, folder after folder and back, at any
// depth, and confines its names as the Root does: a symlink on the way
// is ELOOP, "..", an absolute or an empty path is refused, and a final
// symlink is the link itself, also through Name.
func TestDirsAnswersAsTheRoot(t *testing.T) {
	dir := t.TempDir()
	r, err := OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	deep := deepDir(t, r, 5000)
	var names []string
	for _, d := range []string{"a", "a/b", "c"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"a", "a/b", "c", deep[len(deep)-1]} {
		for i := range 3 {
			rel := fmt.Sprintf("%s/f%d", d, i)
			fd, _, err := r.Create(rel, unix.O_WRONLY, 0o640+uint32(i), -1, -1)
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(fd)
			names = append(names, rel)
		}
	}
	if _, err := r.Symlink("/etc", "a/link", -1, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Symlink("b", "a/tob", -1, -1); err != nil {
		t.Fatal(err)
	}
	names = append(names, "a", "a/link", "c/f0", "a/f1") // back to a folder it left
	d := r.Dirs()
	defer d.Close()
	for _, rel := range names {
		want, werr := r.Lstat(rel)
		got, gerr := d.Lstat(rel)
		if werr != nil || gerr != nil || got.Ino != want.Ino || got.Mode != want.Mode {
			t.Errorf("%.40s: Dirs %v %o, Root %v %o", rel, gerr, got.Mode, werr, want.Mode)
		}
	}
	if st, err := d.Lstat("a/link"); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Errorf("a/link: %v %o, want the symlink itself", err, st.Mode)
	}
	_, err = d.Lstat("a/tob/f0")
	wantErrno(t, "a symlink on the way", err, unix.ELOOP)
	_, err = d.Name("a/tob/f0")
	wantErrno(t, "Name through a symlink on the way", err, unix.ELOOP)
	for _, bad := range []string{"../x", "a/../a/f0", "/etc/passwd", "a//f0", "a/"} {
		if _, err := d.Lstat(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// Name is the file itself: the l* calls on it do not follow a final
	// symlink (lgetxattr of /etc would be ENODATA too, so compare inodes).
	p, err := d.Name("a/link")
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Errorf("lstat of Name(a/link) %s: %v %o", p, err, st.Mode)
	}
	d.Close()
	d.Close() // twice is harmless, and the cursor works again
	if _, err := d.Lstat("c/f1"); err != nil {
		t.Errorf("after Close: %v", err)
	}
}
