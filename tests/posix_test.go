package tests

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// snapshot describes a tree as text: one line per entry with type, mode,
// owner, size, link count, content digest and link target, but no times
// or inode numbers (those differ between two runs of the same script).
func snapshot(tb testing.TB, root string) string {
	tb.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s %o %d:%d", rel, st.Mode, st.Uid, st.Gid)
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" size=%d nlink=%d sha=%x", st.Size, st.Nlink, sha256.Sum256(data))
		case syscall.S_IFLNK:
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		tb.Fatalf("snapshot %s: %v", root, err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// posixScript exercises ordinary tools. It runs in $ROOT, prints what it
// observes, and must print the same on the mount as on a plain folder.
const posixScript = `
set -e
cd "$ROOT"
umask 022
mkdir -p a/b/c
echo hello > a/b/c/f.txt
printf 'line1\nline2\n' > a/lines.txt
echo more >> a/lines.txt
cat a/lines.txt
cp -r a acopy
mv acopy a2
ln -s b/c/f.txt a/link
readlink a/link
cat a/link
ln a/lines.txt a/hard
stat -c '%h %s' a/lines.txt a/hard
chmod 640 a/lines.txt; stat -c '%a' a/lines.txt
chmod 4755 a/b/c/f.txt; stat -c '%a' a/b/c/f.txt
truncate -s 3 a/b/c/f.txt; cat a/b/c/f.txt; echo
truncate -s 100000 sparse; stat -c '%s' sparse
# rename over an existing file keeps the moved file's inode number
echo old > target; echo new > moved
i1=$(stat -c %i moved); mv moved target; i2=$(stat -c %i target)
[ "$i1" = "$i2" ] && echo "rename keeps inode"
cat target
# an editor's save: write a temp file, fsync it, rename over the original
echo v1 > doc.txt
printf 'v2\n' | dd of=.doc.txt.swp conv=fsync status=none
mv .doc.txt.swp doc.txt
cat doc.txt
ls -a
# tar round trip
tar cf "$TMPTAR" -C a .
mkdir untar; tar xf "$TMPTAR" -C untar
diff -r a untar && echo "tar round trip ok"
find . | sort
grep -r hello . | sort || true
grep -rl line . | sort
flock a/lines.txt -c 'echo under flock'
touch -d '2020-01-02 03:04:05' dated; stat -c '%Y' dated
touch -h -d '2021-01-01 00:00:00' a/link; stat -c '%Y' a/link
mkfifo fifo; stat -c '%F' fifo
mkdir -m 2775 sgid; stat -c '%a' sgid
mkdir -p deep/1/2/3/4/5/6/7/8/9 && echo deep > deep/1/2/3/4/5/6/7/8/9/f && cat deep/1/2/3/4/5/6/7/8/9/f
rm -rf a2 deep
ls
python3 - <<'PY'
import os, mmap, fcntl, ctypes, errno
os.umask(0)
# odd modes survive (the daemon's umask must not touch them)
for name, mode in (("odd4777", 0o4777), ("odd0620", 0o620), ("odd2755", 0o2755)):
    fd = os.open(name, os.O_CREAT | os.O_WRONLY, mode); os.close(fd)
    print(name, oct(os.stat(name).st_mode & 0o7777))
os.mkdir("oddir", 0o1777); print("oddir", oct(os.stat("oddir").st_mode & 0o7777))
# appends, fsync, pread/pwrite
with open("app.txt", "ab") as f:
    f.write(b"one\n"); f.flush(); os.fsync(f.fileno())
with open("app.txt", "ab") as f:
    f.write(b"two\n")
print(open("app.txt").read().split())
fd = os.open("pw", os.O_CREAT | os.O_RDWR, 0o644)
os.pwrite(fd, b"abcdef", 0); os.pwrite(fd, b"XY", 2)
print(os.pread(fd, 6, 0)); os.close(fd)
# a shared writable mapping: the bytes reach the file
with open("mm", "wb") as f:
    f.write(b"\0" * 8192)
with open("mm", "r+b") as f:
    m = mmap.mmap(f.fileno(), 8192, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    m[0:5] = b"mmap!"; m[4096:4100] = b"page"; m.flush(); m.close()
d = open("mm", "rb").read(); print(d[:5], d[4096:4100])
# POSIX record locks
fd = os.open("lk", os.O_CREAT | os.O_RDWR, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
print("fcntl lock taken")
fcntl.lockf(fd, fcntl.LOCK_UN, 10, 0); os.close(fd)
# SEEK_DATA / SEEK_HOLE on a sparse file
fd = os.open("holes", os.O_CREAT | os.O_RDWR, 0o644)
os.pwrite(fd, b"x" * 4096, 1 << 20); os.ftruncate(fd, 4 << 20)
print("data at", os.lseek(fd, 0, os.SEEK_DATA), "hole at", os.lseek(fd, 1 << 20, os.SEEK_HOLE))
os.close(fd)
# copy_file_range
src = os.open("pw", os.O_RDONLY); dst = os.open("cfr", os.O_CREAT | os.O_WRONLY, 0o644)
print("copied", os.copy_file_range(src, dst, 6)); os.close(src); os.close(dst)
print(open("cfr", "rb").read())
# renameat2: RENAME_NOREPLACE and RENAME_EXCHANGE
libc = ctypes.CDLL(None, use_errno=True)
def renameat2(a, b, flags):
    r = libc.syscall(316, -100, a.encode(), -100, b.encode(), flags)
    return 0 if r == 0 else ctypes.get_errno()
open("x1", "w").write("one"); open("x2", "w").write("two")
print("noreplace:", errno.errorcode.get(renameat2("x1", "x2", 1), "ok"))
print("exchange:", errno.errorcode.get(renameat2("x1", "x2", 2), "ok"), open("x1").read(), open("x2").read())
# xattrs
try:
    os.setxattr("x1", "user.neuralis", b"v"); print("xattr", os.getxattr("x1", "user.neuralis"), "user.neuralis" in os.listxattr("x1"))
    os.removexattr("x1", "user.neuralis"); print("xattr removed", "user.neuralis" in os.listxattr("x1"))
except OSError as e:
    print("xattr", errno.errorcode[e.errno])
# errors are the same errors
for f in (lambda: os.rmdir("a"), lambda: os.unlink("a"), lambda: os.mkdir("a"), lambda: os.open("nope/x", os.O_RDONLY),
          lambda: os.rename("a", "a/b/inside"), lambda: os.open("a", os.O_WRONLY), lambda: os.link("a", "alink"),
          lambda: os.symlink("x", "x1"), lambda: os.readlink("x1"), lambda: os.open("fifo/x", os.O_RDONLY)):
    try:
        f(); print("no error")
    except OSError as e:
        print(errno.errorcode[e.errno])
# statfs answers
print("statfs ok", os.statvfs(".").f_bsize > 0)
PY
`

func TestPOSIXAgainstPlainFolder(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	native := t.TempDir()
	os.Chmod(native, 0o777) // as newEnv makes the backing folder
	tarA := filepath.Join(t.TempDir(), "a.tar")
	tarB := filepath.Join(t.TempDir(), "b.tar")
	want := sh(t, posixScript, "ROOT="+native, "TMPTAR="+tarA)
	got := sh(t, posixScript, "ROOT="+e.m("data"), "TMPTAR="+tarB)
	if got != want {
		t.Errorf("the script printed differently on the mount\n--- plain folder\n%s\n--- mount\n%s", want, got)
	}
	if a, b := snapshot(t, native), snapshot(t, e.m("data")); a != b {
		t.Errorf("trees differ after the script\n--- plain folder\n%s\n--- mount\n%s", a, b)
	}
	// What the mount shows is what is on disk.
	if a, b := snapshot(t, e.b("data")), snapshot(t, e.m("data")); a != b {
		t.Errorf("mount and backing folder differ\n--- backing\n%s\n--- mount\n%s", a, b)
	}
	for _, line := range []string{"rename keeps inode", "tar round trip ok", "fcntl lock taken", "under flock", "exchange: ok two one"} {
		if !strings.Contains(got, line) {
			t.Errorf("mount output lacks %q", line)
		}
	}
}

// gitScript uses git on the tree; its output must match a plain folder's.
const gitScript = `
set -e
cd "$ROOT"
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.com GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.com
export GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' GIT_COMMITTER_DATE='2020-01-01T00:00:00Z'
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git init -q -b main repo
cd repo
mkdir -p src docs
for i in $(seq 1 50); do echo "file $i" > src/f$i.txt; done
echo "# readme" > README.md
git add -A
git commit -q -m first
echo change >> src/f1.txt
rm src/f2.txt
echo new > docs/new.md
git mv src/f3.txt src/f3-renamed.txt
git status --porcelain=v1 --branch
git add -A
git commit -q -m second
git log --format='%H %s'
git status --porcelain
git fsck --no-progress 2>&1 | grep -v '^Checking' || true
git gc -q
git log --oneline | wc -l
git checkout -q -b topic
echo topic > topic.txt && git add topic.txt && git commit -q -m topic
git checkout -q main && git merge -q --no-edit topic && git log --format=%s | head -3
`

func TestGitInsideMount(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	native := t.TempDir()
	want := sh(t, gitScript, "ROOT="+native)
	got := sh(t, gitScript, "ROOT="+e.m("data"))
	if got != want {
		t.Errorf("git printed differently on the mount\n--- plain folder\n%s\n--- mount\n%s", want, got)
	}
}
