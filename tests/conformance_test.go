package tests

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// conformancePy checks, pjdfstest-style, what POSIX says a filesystem must
// answer — error numbers, permission rules for another uid, set-id bits,
// sticky folders, ctime and mtime updates — printing one line per check.
// It runs in a plain folder and on the mount; the lines must match. PHASE
// setup and check run as root, user as uid 1001.
const conformancePy = `
import errno, os, socket, stat, sys, time
os.chdir(os.environ["ROOT"])
phase = os.environ["PHASE"]

def t(name, f):
    try:
        r = f()
        print(name, "ok", "" if r is None else r)
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))

def mode(p):
    return oct(os.lstat(p).st_mode)

def changes(name, path, f, field="st_ctime_ns", after=None):
    before = getattr(os.lstat(path), field)
    time.sleep(0.01)
    try:
        f()
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno)); return
    print(name, "changed" if getattr(os.lstat(after or path), field) != before else "unchanged")

def touch(p, m=0o644):
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, m); os.close(fd); os.chmod(p, m)

if phase == "setup":
    os.mkdir("sticky", 0o1777); os.chmod("sticky", 0o1777)
    touch("sticky/rootfile", 0o666)
    os.mkdir("ro", 0o555); os.chmod("ro", 0o555)
    touch("ro/f", 0o644)
    touch("rootfile", 0o644)
    touch("shared", 0o666)
    os.mkdir("u", 0o755); os.chown("u", 1001, 1001)
    for n, m in (("suid", 0o4755), ("sgid", 0o2775), ("sgidnox", 0o2664), ("truncsuid", 0o6775),
                 ("truncpath", 0o6775), ("ftrunc", 0o4755), ("rewrite", 0o4755), ("later", 0o755)):
        touch("u/" + n); os.chown("u/" + n, 1001, 1001); os.chmod("u/" + n, m)
    touch("u/other"); os.chown("u/other", 1001, 1001)
    os.mkdir("sgiddir", 0o2777); os.chmod("sgiddir", 0o2777); os.chown("sgiddir", 0, 4242)
    t("name 255", lambda: touch("n" * 255))
    t("name 256", lambda: touch("n" * 256))
    t("create excl existing", lambda: os.close(os.open("rootfile", os.O_CREAT | os.O_EXCL | os.O_WRONLY)))
    t("open dir for write", lambda: os.close(os.open("ro", os.O_WRONLY)))
    t("open O_DIRECTORY on file", lambda: os.close(os.open("rootfile", os.O_RDONLY | os.O_DIRECTORY)))
    t("rmdir nonempty", lambda: os.rmdir("ro"))
    t("rmdir file", lambda: os.rmdir("rootfile"))
    t("unlink dir", lambda: os.unlink("sticky"))
    t("mkdir existing", lambda: os.mkdir("ro"))
    t("rename dir into itself", lambda: os.rename("u", "u/inside"))
    t("rename file over dir", lambda: os.rename("rootfile", "ro"))
    t("rename dir over file", lambda: os.rename("sticky", "rootfile"))
    os.mkdir("e1"); os.mkdir("e2"); touch("e2/x")
    t("rename dir over nonempty dir", lambda: os.rename("e1", "e2"))
    t("rename dir over empty dir", lambda: os.rename("e2", "e1") if False else os.rename("e1", "e3"))
    t("truncate dir", lambda: os.truncate("ro", 0))
    fd = os.open("rootfile", os.O_RDONLY)
    t("ftruncate read-only fd", lambda: os.ftruncate(fd, 0))
    os.close(fd)
    t("link to dir", lambda: os.link("ro", "rolink"))
    t("link existing name", lambda: os.link("rootfile", "shared"))
    os.symlink("rootfile", "sl")
    t("readlink", lambda: os.readlink("sl"))
    t("readlink on file", lambda: os.readlink("rootfile"))
    t("open symlink O_NOFOLLOW", lambda: os.close(os.open("sl", os.O_RDONLY | os.O_NOFOLLOW)))
    t("symlink long target", lambda: os.symlink("x" * 4095, "longsl"))
    t("lchown symlink", lambda: os.chown("sl", 7, 7, follow_symlinks=False))
    print("symlink owner", os.lstat("sl").st_uid, "target owner", os.stat("sl").st_uid)
    os.mkfifo("fifo", 0o640)
    print("fifo", mode("fifo"))
    t("mknod char", lambda: os.mknod("chr", 0o600 | stat.S_IFCHR, os.makedev(1, 3)))
    s = socket.socket(socket.AF_UNIX); s.bind("sock"); s.close()
    print("sock", mode("sock"))
    changes("ctime after chmod", "rootfile", lambda: os.chmod("rootfile", 0o640))
    changes("ctime after chown", "rootfile", lambda: os.chown("rootfile", 0, 0))
    changes("ctime after chown -1 -1", "rootfile", lambda: os.chown("rootfile", -1, -1))
    changes("ctime after lchown -1 -1 of a symlink", "sl", lambda: os.chown("sl", -1, -1, follow_symlinks=False))
    changes("ctime after link", "rootfile", lambda: os.link("rootfile", "rootlink"))
    changes("ctime after unlink of other name", "rootfile", lambda: os.unlink("rootlink"))
    changes("ctime after rename", "rootfile", lambda: os.rename("rootfile", "rootfile2"), after="rootfile2")
    os.rename("rootfile2", "rootfile")
    changes("mtime of dir after create", ".", lambda: touch("newone"), "st_mtime_ns")
    changes("mtime of dir after unlink", ".", lambda: os.unlink("newone"), "st_mtime_ns")
    changes("mtime after O_TRUNC open", "shared", lambda: os.close(os.open("shared", os.O_WRONLY | os.O_TRUNC)), "st_mtime_ns")
    changes("mtime after truncate to same size", "shared", lambda: os.truncate("shared", 0), "st_mtime_ns")
    t("utime omit", lambda: os.utime("shared", ns=(1, 2)))
    print("times", os.stat("shared").st_atime_ns, os.stat("shared").st_mtime_ns)
    touch("sgiddir/f"); os.mkdir("sgiddir/d")
    print("sgid dir gid inherit", os.stat("sgiddir/f").st_gid, os.stat("sgiddir/d").st_gid, mode("sgiddir/d"))

elif phase == "user":
    t("chmod not owner", lambda: os.chmod("rootfile", 0o777))
    t("chown to other uid", lambda: os.chown("u/other", 1002, -1))
    t("chown to own uid, other group", lambda: os.chown("u/other", 1001, 4242))
    t("chown -1 -1", lambda: os.chown("u/other", -1, -1))
    changes("ctime after chown -1 -1 by a non-owner", "shared", lambda: os.chown("shared", -1, -1))
    t("utime explicit not owner", lambda: os.utime("shared", (1, 1)))
    t("utime now not owner with write", lambda: os.utime("shared", None))
    t("utime now not owner without write", lambda: os.utime("rootfile", None))
    t("create in read-only dir", lambda: touch("ro/new"))
    t("unlink in read-only dir", lambda: os.unlink("ro/f"))
    t("rename out of read-only dir", lambda: os.rename("ro/f", "u/f"))
    t("unlink other's file in sticky dir", lambda: os.unlink("sticky/rootfile"))
    t("rename other's file in sticky dir", lambda: os.rename("sticky/rootfile", "sticky/mine"))
    touch("sticky/mine")
    t("unlink own file in sticky dir", lambda: os.unlink("sticky/mine"))
    t("open other's file for write", lambda: os.close(os.open("rootfile", os.O_WRONLY)))
    t("link to other's file", lambda: os.link("rootfile", "u/hard"))
    t("set sgid on file of a group not mine", lambda: (os.chown("u/other", -1, 0), os.chmod("u/other", 0o2755)))
    for n in ("suid", "sgid", "sgidnox"):
        fd = os.open("u/" + n, os.O_WRONLY); os.write(fd, b"x"); os.close(fd)
    os.close(os.open("u/truncsuid", os.O_WRONLY | os.O_TRUNC))
    os.truncate("u/truncpath", 0)
    fd = os.open("u/ftrunc", os.O_WRONLY); os.ftruncate(fd, 1); os.close(fd)
    # Set-id bits given again, or for the first time, to a file open for
    # writing after its first write: the next write drops them again.
    for n, m in (("rewrite", 0o4755), ("later", 0o6775)):
        fd = os.open("u/" + n, os.O_WRONLY); os.write(fd, b"a"); first = mode("u/" + n)
        os.chmod("u/" + n, m); os.write(fd, b"b"); os.close(fd)
        print("write, chmod", oct(m), "and write again", n, first, mode("u/" + n))
    t("chmod own file", lambda: os.chmod("u/other", 0o2755))
    print("sgid kept when group is mine", mode("u/other"))
    t("mknod char as user", lambda: os.mknod("u/chr", 0o600 | stat.S_IFCHR, os.makedev(1, 3)))
    t("truncate other's file", lambda: os.truncate("rootfile", 0))
    t("access R_OK other's file", lambda: os.access("rootfile", os.R_OK))
    t("access W_OK other's file", lambda: os.access("rootfile", os.W_OK))

elif phase == "check":
    for n in ("suid", "sgid", "sgidnox", "other", "truncsuid", "truncpath", "ftrunc"):
        print("after user write", n, mode("u/" + n))
    touch("u/rootwrite", 0o6755)
    fd = os.open("u/rootwrite", os.O_WRONLY); os.write(fd, b"a"); os.ftruncate(fd, 0); os.close(fd)
    print("root write and truncate keep set-id", mode("u/rootwrite"))
    touch("u/rootchown", 0o6755)
    os.chown("u/rootchown", 1001, 1001)
    print("root chown clears set-id", mode("u/rootchown"))
`

func TestConformanceAgainstPlainFolder(t *testing.T) {
	requireFUSE(t)
	// Without passthrough the kernel sends each write to the daemon,
	// which then drops set-id bits on the kernel's word, not ext4's.
	for _, pass := range []bool{true, false} {
		t.Run(fmt.Sprintf("passthrough=%v", pass), func(t *testing.T) {
			conformance(t, fmt.Sprintf("[mount]\npassthrough = %v\n", pass))
		})
	}
}

func conformance(t *testing.T, config string) {
	e := newEnv(t, config, src{slug: "data"})
	native := t.TempDir()
	os.Chmod(native, 0o777)
	script := func(root string) string {
		var b strings.Builder
		for _, p := range []struct {
			phase string
			uid   int
		}{{"setup", 0}, {"user", 1001}, {"check", 0}} {
			out, err := run(t, p.uid, "umask 022; python3 - <<'PY'\n"+conformancePy+"\nPY", "ROOT="+root, "PHASE="+p.phase)
			if err != nil {
				t.Fatalf("%s phase on %s: %v\n%s", p.phase, root, err, out)
			}
			b.WriteString(out)
		}
		return b.String()
	}
	want := script(native)
	got := script(e.m("data"))
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
		t.Errorf("the mount answers differently from a plain folder:\n%s", diff.String())
	}
	for _, line := range []string{"unlink other's file in sticky dir EPERM", "chmod not owner EPERM", "name 256 ENAMETOOLONG", "ctime after chown -1 -1 changed",
		"after user write truncpath 0o100775", "write, chmod 0o4755 and write again rewrite 0o100755 0o100755",
		"write, chmod 0o6775 and write again later 0o100755 0o100775", "root write and truncate keep set-id 0o106755"} {
		if !strings.Contains(want, line) {
			t.Errorf("the plain folder did not print %q; the check proves nothing", line)
		}
	}
}

// Each write(2) used to ask the daemon whether the file had set-id bits or
// file capabilities to drop (a GETXATTR security.capability round trip,
// passthrough writes included). With FUSE_HANDLE_KILLPRIV_V2 only a file's
// first write asks, until its attributes show set-id bits; the bits still
// go where they must (TestConformanceAgainstPlainFolder).
func TestWritesAskAboutSetIDBitsOnce(t *testing.T) {
	requireFUSE(t)
	e := newDebugEnv(t, "", src{slug: "data"})
	must(t, os.Chmod(e.b("data"), 0o777))
	d := e.m("data")
	run(t, 1001, "stat "+d+"/marker-w-1 2>/dev/null")
	const writes = `python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o755)
for _ in range(200): os.write(fd, b"0123456789")
os.close(fd)' `
	if out, err := run(t, 1001, writes+d+"/log"); err != nil {
		t.Fatalf("writing: %v\n%s", err, out)
	}
	log := debugLogUpTo(t, e, 1001, d+"/marker-w-2")
	log = log[strings.Index(log, `\"marker-w-1\"`):]
	c := opcodes(log, "")
	// (The other GETXATTRs are of the folders' ACLs, for uid 1001's walk.)
	if n := strings.Count(log, `\"security.capability\"`); n != 1 || c["SETATTR"] > 0 {
		t.Errorf("200 writes to a new file sent %v, %d of them GETXATTR security.capability; want one (the first write's) and no SETATTR", c, n)
	}
	// Set-id bits given to the file: its next writes drop them again.
	if out, err := run(t, 1001, "chmod 4755 "+d+"/log && "+writes+d+"/log && stat -c %a "+d+"/log "+e.b("data", "log")); err != nil || out != "755\n755\n" {
		t.Errorf("after chmod 4755 and writes the mount and the disk show %q (%v); want 755 for both", out, err)
	}
	if fi, err := os.Stat(e.b("data", "log")); err != nil {
		t.Error(err)
	} else if fi.Size() != 4000 {
		t.Errorf("the file holds %d bytes; want 4000", fi.Size())
	}
}
