package mounts

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// deepDir makes nested folders below r until the innermost one's path is
// at least n bytes long and returns the path of each level, outermost
// first. The names vary in length so the pieces walk cuts a path into end
// at different places from level to level.
func deepDir(t testing.TB, r *Root, n int) []string {
	t.Helper()
	var levels []string
	rel := ""
	for i := 0; len(rel) < n; i++ {
		name := fmt.Sprintf("d%03d-", i) + strings.Repeat("x", 37+(i*53)%200)
		if rel == "" {
			rel = name
		} else {
			rel += "/" + name
		}
		if _, err := r.Mkdir(rel, 0o755, -1, -1); err != nil {
			t.Fatalf("mkdir at depth %d (%d bytes): %v", i, len(rel), err)
		}
		levels = append(levels, rel)
	}
	return levels
}

// hostLstat stats rel below dir by opening one component at a time, the
// way a process that cds down the tree reaches it: a check that does not
// go through Root.
func hostLstat(t *testing.T, dir, rel string) (unix.Stat_t, error) {
	t.Helper()
	var st unix.Stat_t
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	segs := strings.Split(rel, "/")
	for _, seg := range segs[:len(segs)-1] {
		next, err := unix.Openat(fd, seg, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return st, err
		}
		fd = next
	}
	defer unix.Close(fd)
	err = unix.Fstatat(fd, segs[len(segs)-1], &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

func wantErrno(t *testing.T, what string, err error, want unix.Errno) {
	t.Helper()
	if got := Errno(err); got != want {
		// The error names the whole path, thousands of bytes: leave it out.
		t.Errorf("%s: %v (errno %d); want %v", what, got, got, want)
	}
}

// Every Root method works on names whose path inside the source is
// longer than PATH_MAX, where one openat2 of the whole path answers
// ENAMETOOLONG (issue 16, pjdfstest's */03.t run from a subfolder).
func TestRootAnyDepth(t *testing.T) {
	for _, n := range []int{5000, 12000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			dir := t.TempDir()
			r, err := OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			levels := deepDir(t, r, n)
			d := levels[len(levels)-1]
			f := d + "/f"

			fd, st, err := r.Create(f, unix.O_RDWR|unix.O_EXCL, 0o644, -1, -1)
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if _, err := unix.Write(fd, []byte("hello")); err != nil {
				t.Fatal(err)
			}
			unix.Close(fd)
			if st.Mode&unix.S_IFMT != unix.S_IFREG {
				t.Errorf("create: mode %o", st.Mode)
			}
			if hst, err := hostLstat(t, dir, f); err != nil || hst.Ino != st.Ino {
				t.Errorf("the created file is not where the host finds it: %v", err)
			}

			fd, err = r.Open(f, unix.O_RDONLY, 0)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			buf := make([]byte, 16)
			nr, _ := unix.Read(fd, buf)
			unix.Close(fd)
			if string(buf[:nr]) != "hello" {
				t.Errorf("read %q; want hello", buf[:nr])
			}
			if fd, err := r.OpenNoAtime(f, unix.O_RDONLY); err != nil {
				t.Errorf("open noatime: %v", err)
			} else {
				unix.Close(fd)
			}

			if err := r.Truncate(f, 2); err != nil {
				t.Errorf("truncate: %v", err)
			}
			pfd, err := r.OpenPath(f)
			if err != nil {
				t.Fatalf("open path: %v", err)
			}
			if err := unix.Chmod(ProcPath(pfd), 0o600); err != nil {
				t.Errorf("chmod: %v", err)
			}
			chown := os.Geteuid() == 0
			if chown {
				if err := unix.Fchownat(pfd, "", 1234, 5678, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
					t.Errorf("chown: %v", err)
				}
			}
			unix.Close(pfd)
			ts := [2]unix.Timespec{{Sec: 1e9}, {Sec: 1.5e9}}
			if err := r.Utimens(f, ts); err != nil {
				t.Errorf("utimens: %v", err)
			}
			st, err = r.Lstat(f)
			if err != nil {
				t.Fatalf("lstat: %v", err)
			}
			if st.Size != 2 || st.Mode&07777 != 0o600 || st.Mtim.Sec != 1.5e9 || st.Atim.Sec != 1e9 {
				t.Errorf("after truncate, chmod and utimens: size %d mode %o times %d %d", st.Size, st.Mode&07777, st.Atim.Sec, st.Mtim.Sec)
			}
			if chown && (st.Uid != 1234 || st.Gid != 5678) {
				t.Errorf("after chown: %d:%d", st.Uid, st.Gid)
			}

			if err := r.Setxattr(f, "user.k", []byte("v"), 0); err != nil {
				t.Errorf("setxattr: %v", err)
			}
			xb := make([]byte, 64)
			if nx, err := r.Getxattr(f, "user.k", xb); err != nil || string(xb[:nx]) != "v" {
				t.Errorf("getxattr = %q, %v", xb[:max(nx, 0)], err)
			}
			if nx, err := r.Listxattr(f, xb); err != nil || !bytes.Contains(xb[:nx], []byte("user.k\x00")) {
				t.Errorf("listxattr = %q, %v", xb[:max(nx, 0)], err)
			}
			if err := r.Removexattr(f, "user.k"); err != nil {
				t.Errorf("removexattr: %v", err)
			}
			_, err = r.Getxattr(f, "user.k", xb)
			wantErrno(t, "getxattr after removexattr", err, unix.ENODATA)

			if _, err := r.Mkdir(d+"/sub", 0o700, -1, -1); err != nil {
				t.Errorf("mkdir: %v", err)
			}
			if _, err := r.Symlink("target", d+"/l", -1, -1); err != nil {
				t.Errorf("symlink: %v", err)
			}
			if b, err := r.Readlink(d + "/l"); err != nil || string(b) != "target" {
				t.Errorf("readlink = %q, %v", b, err)
			}
			if err := r.Utimens(d+"/l", ts); err != nil {
				t.Errorf("utimens of a symlink: %v", err)
			}
			if _, err := r.Mknod(d+"/p", unix.S_IFIFO|0o644, 0, -1, -1); err != nil {
				t.Errorf("mknod: %v", err)
			}
			if st, err := r.Link(f, d+"/sub/g"); err != nil || st.Nlink != 2 {
				t.Errorf("link: nlink %d, %v", st.Nlink, err)
			}
			if err := r.Rename(d+"/sub/g", d+"/g2", 0); err != nil {
				t.Errorf("rename: %v", err)
			}
			// Out to the root and back, across every piece.
			if err := r.Rename(d+"/g2", "top", unix.RENAME_NOREPLACE); err != nil {
				t.Errorf("rename to the root: %v", err)
			}
			if err := r.Rename("top", levels[0]+"/top", 0); err != nil {
				t.Errorf("rename back down: %v", err)
			}
			if err := r.Rename(levels[0]+"/top", d+"/sub", unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("rename exchange: %v", err)
			}
			if st, err := hostLstat(t, dir, levels[0]+"/top"); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				t.Errorf("after exchange the folder is not at the top: %v", err)
			}

			for _, name := range []string{f, d + "/sub", d + "/l", d + "/p"} {
				if err := r.Unlink(name); err != nil {
					t.Errorf("unlink: %v", err)
				}
			}
			if err := r.Rmdir(levels[0] + "/top"); err != nil {
				t.Errorf("rmdir: %v", err)
			}
			_, err = r.Lstat(f)
			wantErrno(t, "lstat after unlink", err, unix.ENOENT)
			for i := len(levels) - 1; i >= 0; i-- {
				if err := r.Rmdir(levels[i]); err != nil {
					t.Fatalf("rmdir %d: %v", i, err)
				}
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("left behind: %v", ents)
			}
		})
	}
}

// A symlink swapped in for any folder on the way to a name answers ELOOP,
// on a short path and on a deep one, whether it ends one of walk's pieces
// or sits inside one, is the folder holding the name, and points inside
// the root or out of it.
func TestRootSymlinkSwapped(t *testing.T) {
	for _, n := range []int{300, 12000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			dir := t.TempDir()
			r, err := OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			levels := deepDir(t, r, n)
			f := levels[len(levels)-1] + "/f"
			fd, _, err := r.Create(f, unix.O_WRONLY, 0o644, -1, -1)
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(fd)
			for i, lv := range levels {
				away := lv + ".away"
				if err := r.Rename(lv, away, 0); err != nil {
					t.Fatal(err)
				}
				target := away[strings.LastIndexByte(away, '/')+1:]
				if i%2 == 1 {
					target = "/"
				}
				if _, err := r.Symlink(target, lv, -1, -1); err != nil {
					t.Fatal(err)
				}
				_, err := r.Lstat(f)
				wantErrno(t, fmt.Sprintf("lstat through a symlink at level %d", i), err, unix.ELOOP)
				_, err = r.Open(f, unix.O_RDONLY, 0)
				wantErrno(t, fmt.Sprintf("open through a symlink at level %d", i), err, unix.ELOOP)
				_, err = r.Mkdir(f+"x", 0o755, -1, -1)
				wantErrno(t, fmt.Sprintf("mkdir through a symlink at level %d", i), err, unix.ELOOP)
				if err := r.Unlink(lv); err != nil {
					t.Fatal(err)
				}
				if err := r.Rename(away, lv, 0); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := r.Lstat(f); err != nil {
				t.Errorf("after the swaps: %v", err)
			}
		})
	}
}

// Long paths are refused or fail as a plain folder's would: ".."
// anywhere is not a clean path, a file on the way is ENOTDIR, a missing
// folder ENOENT, and a name past NAME_MAX ENAMETOOLONG.
func TestRootLongPathErrors(t *testing.T) {
	dir := t.TempDir()
	r, err := OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	levels := deepDir(t, r, 5000)
	d := levels[len(levels)-1]
	fd, _, err := r.Create(d+"/file", unix.O_WRONLY, 0o644, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)

	for _, rel := range []string{
		d + "/..",
		d + "/../../x",
		levels[1] + "/../" + d,
		d + "/./x",
		d + "//x",
		strings.Repeat("a/", 3000) + "..",
	} {
		if _, err := r.Open(rel, unix.O_RDONLY, 0); !errors.Is(err, ErrBadPath) {
			t.Errorf("open of a path with %q: %v; want ErrBadPath", rel[len(rel)-min(len(rel), 12):], err)
		}
		if _, err := r.Lstat(rel); !errors.Is(err, ErrBadPath) {
			t.Errorf("lstat of a path with %q: %v; want ErrBadPath", rel[len(rel)-min(len(rel), 12):], err)
		}
	}
	_, err = r.Lstat(d + "/file/" + strings.TrimPrefix(d, levels[0]+"/") + "/x")
	wantErrno(t, "lstat below a file", err, unix.ENOTDIR)
	_, err = r.Open(levels[0]+"/nope/"+strings.TrimPrefix(d, levels[0]+"/"), unix.O_RDONLY, 0)
	wantErrno(t, "open below a missing folder", err, unix.ENOENT)
	_, err = r.Lstat(d + "/missing")
	wantErrno(t, "lstat of a missing name", err, unix.ENOENT)
	_, err = r.Lstat(d + "/" + strings.Repeat("n", 256))
	wantErrno(t, "lstat of a name past NAME_MAX", err, unix.ENAMETOOLONG)
	_, err = r.Open(strings.Repeat("n", 5000), unix.O_RDONLY, 0)
	wantErrno(t, "open of one 5000-byte name", err, unix.ENAMETOOLONG)
	_, err = r.Open(levels[0]+"/"+strings.Repeat("n", 5000)+"/x", unix.O_RDONLY, 0)
	wantErrno(t, "open below a 5000-byte name", err, unix.ENAMETOOLONG)
}

// BenchmarkRootLstat stats a name 3 folders down (one openat2 and an
// fstatat) and one 12,000 bytes down (walk's pieces first).
func BenchmarkRootLstat(b *testing.B) {
	for _, n := range []int{0, 12000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			dir := b.TempDir()
			r, err := OpenRoot(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			d := "a/b/c"
			if n > 0 {
				levels := deepDir(b, r, n)
				d = levels[len(levels)-1]
			} else if err := os.MkdirAll(dir+"/"+d, 0o755); err != nil {
				b.Fatal(err)
			}
			if _, err := r.Mkdir(d+"/f", 0o755, -1, -1); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Lstat(d + "/f"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
