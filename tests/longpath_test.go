package tests

import (
	"os"
	"strings"
	"testing"
)

// longPathPy does, at PATH_MAX and below it, what pjdfstest's */03.t do
// from a folder inside the source, and more: chmod, chown, truncate,
// open, rename, link, unlink, mkdir, rmdir and the rest on names more
// than 4096 bytes below $ROOT, reached both by one relative path just
// under PATH_MAX from a subfolder and by cd-ing down the tree. It prints
// one line per check and a snapshot of the tree (walked with folder
// descriptors, since no absolute path reaches that deep). PHASE setup
// runs as root, user as uid 1001, snap prints the snapshot.
const longPathPy = `
import errno, os, stat
os.chdir(os.environ["ROOT"])
phase = os.environ["PHASE"]
PATH_MAX = 4096

def t(name, f):
    try:
        r = f()
        print(name, "ok", "" if r is None else r)
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))

def st(p):
    s = os.lstat(p)
    return "%o %d:%d size=%d nlink=%d" % (s.st_mode, s.st_uid, s.st_gid, s.st_size, s.st_nlink)

def touch(p, m=0o644):
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, m))

def longpath(n):
    # a relative path of exactly n bytes: 200-byte folders, then a name
    parts, size = [], 0
    while n - size > 255:
        parts.append(chr(ord("a") + len(parts) % 26) * 200); size += 201
    parts.append("f" * (n - size))
    return "/".join(parts)

def down(level):
    # cd down 200-byte folders until the cwd is more than level bytes below $ROOT
    depth = 0
    while depth <= level:
        name = "%03d" % (depth // 201) + "x" * 197
        if phase == "setup":
            os.mkdir(name, 0o777); os.chmod(name, 0o777)
        os.chdir(name); depth += 201
    return depth

if phase == "setup":
    os.mkdir("work"); os.chdir("work")
    # pjdfstest's shape: from work/, one path of PATH_MAX-1 bytes, so
    # the name lies 4100 bytes below the source's root.
    p = longpath(PATH_MAX - 1)
    os.makedirs(os.path.dirname(p))
    t("create at PATH_MAX-1", lambda: touch(p))
    t("chmod at PATH_MAX-1", lambda: os.chmod(p, 0o640))
    t("chown at PATH_MAX-1", lambda: os.chown(p, 65534, 65533))
    t("truncate at PATH_MAX-1", lambda: os.truncate(p, 123))
    t("open rdwr at PATH_MAX-1", lambda: os.close(os.open(p, os.O_RDWR)))
    t("utime at PATH_MAX-1", lambda: os.utime(p, (1, 2)))
    print("stat at PATH_MAX-1", st(p), os.lstat(p).st_mtime)
    q = p[:-1] + "g"
    t("rename at PATH_MAX-1", lambda: os.rename(p, q))
    t("link at PATH_MAX-1", lambda: os.link(q, p))
    t("unlink at PATH_MAX-1", lambda: os.unlink(q))
    t("symlink at PATH_MAX-1", lambda: os.symlink("target", q))
    t("readlink at PATH_MAX-1", lambda: os.readlink(q))
    t("lchown at PATH_MAX-1", lambda: os.chown(q, 7, 7, follow_symlinks=False))
    t("mkdir at PATH_MAX-1", lambda: os.mkdir(q[:-1] + "d"))
    t("rmdir at PATH_MAX-1", lambda: os.rmdir(q[:-1] + "d"))
    t("mkfifo at PATH_MAX-1", lambda: os.mkfifo(q[:-1] + "p"))
    t("xattr at PATH_MAX-1", lambda: (os.setxattr(p, "user.k", b"v"), os.getxattr(p, "user.k"))[1])
    r = longpath(PATH_MAX)
    t("create at PATH_MAX", lambda: touch(r))
    t("chmod at PATH_MAX", lambda: os.chmod(r, 0o640))
    t("truncate at PATH_MAX", lambda: os.truncate(r, 0))

    # cd down until the cwd is 5000 bytes below $ROOT and work there.
    os.chdir(os.environ["ROOT"])
    print("depth", down(5000) > 5000)
    t("create deep", lambda: touch("f"))
    t("write deep", lambda: open("f", "w").write("hello\n"))
    t("read deep", lambda: open("f").read().strip())
    t("chmod deep", lambda: os.chmod("f", 0o4755))
    t("chown deep", lambda: os.chown("f", 1001, 1001))
    t("truncate deep", lambda: os.truncate("f", 3))
    t("open O_TRUNC deep", lambda: os.close(os.open("f", os.O_WRONLY | os.O_TRUNC)))
    print("stat deep", st("f"))
    t("mkdir deep", lambda: os.mkdir("d", 0o755))
    t("rename deep", lambda: os.rename("f", "d/f2"))
    t("rename deep over", lambda: (touch("o"), os.rename("o", "d/f2")))
    t("link deep", lambda: os.link("d/f2", "h"))
    print("stat deep link", st("h"))
    t("symlink deep", lambda: os.symlink("d/f2", "l"))
    t("readlink deep", lambda: os.readlink("l"))
    t("mkfifo deep", lambda: os.mkfifo("p", 0o600))
    t("utime deep", lambda: os.utime("h", (5, 6)))
    t("xattr deep", lambda: (os.setxattr("h", "user.k", b"v"), os.getxattr("h", "user.k"))[1])
    t("listdir deep", lambda: sorted(os.listdir(".")))
    t("unlink deep", lambda: os.unlink("h"))
    t("rmdir nonempty deep", lambda: os.rmdir("d"))
    t("unlink dir deep", lambda: os.unlink("d"))
    t("rename dir deep", lambda: os.rename("d", "d2"))
    t("rmdir deep", lambda: (os.unlink("d2/f2"), os.rmdir("d2")))
    t("mkdir deeper", lambda: down(3000) > 3000)
    t("create deeper", lambda: (touch("g"), os.chmod("g", 0o666)))
    os.chmod(".", 0o777)

elif phase == "user":
    down(5000); down(3000)
    t("user create deeper", lambda: touch("mine", 0o600))
    t("user chmod own deeper", lambda: os.chmod("mine", 0o640))
    t("user truncate other's writable deeper", lambda: os.truncate("g", 9))
    t("user chmod other's deeper", lambda: os.chmod("g", 0o777))
    t("user chown own to other deeper", lambda: os.chown("mine", 0, -1))
    t("user rename deeper", lambda: os.rename("mine", "mine2"))
    t("user unlink deeper", lambda: os.unlink("mine2"))

elif phase == "snap":
    lines = []
    for top, dirs, files, fd in os.fwalk(".", follow_symlinks=False):
        for n in dirs + files:
            s = os.lstat(n, dir_fd=fd)
            rel = os.path.join(top, n)[2:]
            lines.append("%d:%s %o %d:%d %s" % (len(rel), rel[-12:], s.st_mode, s.st_uid, s.st_gid,
                "" if stat.S_ISDIR(s.st_mode) else "size=%d nlink=%d" % (s.st_size, s.st_nlink)))
    print("\n".join(sorted(lines)))
`

// Names more than PATH_MAX bytes below a source's root behave on the
// mount as in a plain folder (issue 16: pjdfstest's chmod/03, chown/03,
// ftruncate/03 and truncate/03 failed when run from a subfolder of the
// source), and the mount's tree is the backing folder's.
func TestLongPathsAgainstPlainFolder(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	native := t.TempDir()
	os.Chmod(native, 0o777)
	script := func(root string, phases ...string) string {
		var b strings.Builder
		for _, phase := range phases {
			uid := 0
			if phase == "user" {
				uid = 1001
			}
			out, err := run(t, uid, "umask 022; python3 - <<'PY'\n"+longPathPy+"\nPY", "ROOT="+root, "PHASE="+phase)
			if err != nil {
				t.Fatalf("%s phase on %s: %v\n%s", phase, root, err, out)
			}
			b.WriteString(out)
		}
		return b.String()
	}
	want := script(native, "setup", "user", "snap")
	got := script(e.m("data"), "setup", "user", "snap")
	if got != want {
		wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
		var diff strings.Builder
		for i := 0; i < max(len(wl), len(gl)); i++ {
			var w, g string
			if i < len(wl) {
				w = wl[i]
			}
			if i < len(gl) {
				g = gl[i]
			}
			if w != g {
				diff.WriteString("plain: " + w + "\nmount: " + g + "\n")
			}
		}
		t.Errorf("the mount answers differently from a plain folder at depth:\n%s", diff.String())
	}
	if backing := script(e.b("data"), "snap"); !strings.HasSuffix(got, backing) {
		t.Errorf("mount and backing folder differ at depth\n--- backing\n%s\n--- mount\n%s", backing, got)
	}
	for _, line := range []string{
		"chmod at PATH_MAX-1 ok", "chown at PATH_MAX-1 ok", "truncate at PATH_MAX-1 ok",
		"create at PATH_MAX ENAMETOOLONG", "chown deep ok", "rename deep ok", "mkdir deep ok", "unlink deep ok",
		"user chmod other's deeper EPERM", "user truncate other's writable deeper ok", "stat deep 100755 1001:1001 size=0",
	} {
		if !strings.Contains(want, line) {
			t.Errorf("the plain folder did not print %q; the check proves nothing", line)
		}
	}
}
