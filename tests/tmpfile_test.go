package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tmpfileCases opens files with O_TMPFILE in $W/t and in the setgid
// folder $W/g, writes and changes them with no name, links them into
// place (through /proc/self/fd and with AT_EMPTY_PATH), and tries what
// must fail; it prints one line per step, the same on any file system
// that has O_TMPFILE.
const tmpfileCases = `
set -e
/usr/bin/python3 - "$W" <<'EOF'
import ctypes, errno, os, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, AT_SYMLINK_FOLLOW, AT_EMPTY_PATH = -100, 0x400, 0x1000

def link(fd, dst, how="proc"):
    if how == "proc":
        r = libc.linkat(AT_FDCWD, b"/proc/self/fd/%d" % fd, AT_FDCWD, dst.encode(), AT_SYMLINK_FOLLOW)
    else:
        r = libc.linkat(fd, b"", AT_FDCWD, dst.encode(), AT_EMPTY_PATH)
    return "ok" if r == 0 else errno.errorcode[ctypes.get_errno()]

def tmp(folder, flags, mode=0o666):
    try:
        return os.open(folder, os.O_TMPFILE | flags, mode), "ok"
    except OSError as e:
        return -1, errno.errorcode[e.errno]

def desc(st):
    return "%s links=%d %d:%d size=%d" % (stat.filemode(st.st_mode), st.st_nlink, st.st_uid, st.st_gid, st.st_size)

os.umask(0o022)
os.chdir(sys.argv[1])
uid = os.getuid()
fd, r = tmp("t", os.O_RDWR)
print("tmpfile:", r, desc(os.fstat(fd)))
os.write(fd, b"quokkas, nameless\n")
print("written:", desc(os.fstat(fd)), "listed:", sorted(os.listdir("t")))
os.fchmod(fd, 0o640)
os.ftruncate(fd, 7)
print("fchmod, ftruncate:", desc(os.fstat(fd)), os.pread(fd, 64, 0))
os.setxattr(fd, "user.note", b"kept")
print("xattrs:", os.listxattr(fd), os.getxattr(fd, "user.note"))
print("link:", link(fd, "t/a"), desc(os.stat("t/a")), open("t/a", "rb").read(), os.getxattr("t/a", "user.note"))
print("after link:", desc(os.fstat(fd)))
os.lseek(fd, 0, os.SEEK_END)
os.write(fd, b"!")
print("written after link:", open("t/a", "rb").read())
print("a second name:", link(fd, "t/b"), desc(os.stat("t/b")))
print("onto a name taken:", link(fd, "t/a"))
os.close(fd)

fd, r = tmp("t", os.O_WRONLY | os.O_EXCL)
print("O_EXCL:", r, "link:", link(fd, "t/c"))
os.close(fd)
fd, r = tmp("t", os.O_WRONLY)
os.write(fd, b"x" * 100000)
os.close(fd) # never linked: nothing is left of it
fd, r = tmp("t", os.O_WRONLY, 0o600)
os.write(fd, b"by fd\n")
print("AT_EMPTY_PATH:", link(fd, "t/d", "empty"))
os.close(fd)
fd, r = tmp("g", os.O_RDWR, 0o2755)
st = os.fstat(fd)
print("setgid folder:", r, desc(st), "group is the folder's:", st.st_gid == os.stat("g").st_gid)
print("link:", link(fd, "g/x"))
os.close(fd)
print("read-only:", tmp("t", os.O_RDONLY)[1])
print("on a file:", tmp("t/a", os.O_WRONLY)[1])
print("missing folder:", tmp("t/nope", os.O_WRONLY)[1])
print("listed:", sorted(os.listdir("t")), sorted(os.listdir("g")))
EOF
`

// TestTmpfileLikePlainFolder: open(2) with O_TMPFILE in a folder of the
// mount, and linking the file into place, behave as on the backing
// file system itself, for root and for another uid; the linked file is
// then a file like any other (the index and .status hear of it).
func TestTmpfileLikePlainFolder(t *testing.T) {
	requireFUSE(t)
	e := newEnv(t, "", src{slug: "data"})
	native := sharedTempDir(t)
	cases := func(root string, uid int) string {
		w := filepath.Join(root, "u"+string(rune('0'+uid%10)))
		must(t, os.Mkdir(w, 0o777))
		must(t, os.Chown(w, uid, uid))
		must(t, os.Mkdir(filepath.Join(w, "t"), 0o777))
		must(t, os.Chown(filepath.Join(w, "t"), uid, uid))
		must(t, os.Mkdir(filepath.Join(w, "g"), 0o777))
		must(t, os.Chown(filepath.Join(w, "g"), uid, 4242))
		must(t, os.Chmod(filepath.Join(w, "g"), 0o2777))
		out, err := run(t, uid, tmpfileCases, "W="+w)
		if err != nil {
			t.Fatalf("the cases in %s as uid %d: %v\n%s", w, uid, err, out)
		}
		return out
	}
	for _, uid := range []int{0, 1001} {
		want := cases(native, uid)
		for _, line := range []string{"tmpfile: ok -rw-r--r-- links=0", "link: ok -rw-r----- links=1", "O_EXCL: ok link: ENOENT", "setgid folder: ok"} {
			if !strings.Contains(want, line) {
				t.Fatalf("the plain folder does not show %q: the cases cannot tell anything:\n%s", line, want)
			}
		}
		if got := cases(e.m("data"), uid); got != want {
			t.Errorf("as uid %d the mount differs from a plain folder\n--- plain folder\n%s\n--- mount\n%s", uid, want, got)
		}
	}
	// The names made by linking are files like any other.
	e.found(t, "quokkas", "data://u1/t/a")
	if b, err := os.ReadFile(e.b("data", "u1", "t", "d")); err != nil || string(b) != "by fd\n" {
		t.Errorf("the backing folder's u1/t/d: %q, %v", b, err)
	}
}

// tmpfileProbe, run as the agent with $M the data source's folder,
// tries O_TMPFILE in every kind of folder agentTOML guards and links a
// tmpfile made in public/ onto every kind of name, printing beside each
// the answer of a plain create of a name there: the two must agree.
const tmpfileProbe = `
/usr/bin/python3 - "$M" <<'EOF'
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
os.chdir(sys.argv[1])

def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]

def tmp(folder):
    fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o644)
    os.write(fd, b"the agent's own words\n")
    os.close(fd)

def create(p):
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))

for folder in ("public", "ro", "secrets", "secrets/sub", "mixed/hidden", "free"):
    print("tmpfile in %s: %s (a create there: %s)" % (folder, err(lambda: tmp(folder)), err(lambda: create(folder + "/made-" + folder.replace("/", "-")))))

fd = os.open("public", os.O_TMPFILE | os.O_RDWR, 0o644)
os.write(fd, b"linked by the agent\n")
def link(dst):
    if libc.linkat(-100, b"/proc/self/fd/%d" % fd, -100, dst.encode(), 0x400) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
for name in ("ro/r.txt", "ro/free", "secrets", "secrets/k", "secrets/free", "mixed/hidden", "mixed/hidden/h.txt", "mixed/hidden/free", "mixed/open.txt"):
    print("link onto %s: %s (a create of it: %s)" % (name, err(lambda: link(name)), err(lambda: create(name))))
print("link into public:", err(lambda: link("public/linked.txt")), "owner:", os.stat("public/linked.txt").st_uid)
os.close(fd)
EOF
`

// TestTmpfileKeepsThePolicy: a tmpfile needs write on its folder, and
// linking it into place is a new name like any other: refused where the
// agent may not write, and refused the same way whether or not a hidden
// name exists, in the main mount and in the agent's view; nothing of it
// reaches the folders the agent may not write or see.
func TestTmpfileKeepsThePolicy(t *testing.T) {
	e, view := policyEnv(t)
	list := `cd "$D" && find ro secrets mixed -print0 | sort -z | xargs -0 stat -c '%n %s %Y'`
	before := sh(t, list, "D="+e.b("data"))
	for _, m := range []string{e.m("data"), filepath.Join(view, "data")} {
		out := agent(t, strings.ReplaceAll(tmpfileProbe, "$M", m))
		for _, want := range []string{
			"tmpfile in public: ok (a create there: ok)",
			"tmpfile in ro: EACCES (a create there: EACCES)",
			"tmpfile in secrets: ENOENT (a create there: ENOENT)",
			"tmpfile in secrets/sub: ENOENT (a create there: ENOENT)",
			"tmpfile in mixed/hidden: ENOENT (a create there: ENOENT)",
			"tmpfile in free: ENOENT (a create there: ENOENT)",
			"link onto ro/r.txt: EEXIST (a create of it: EEXIST)",
			"link onto ro/free: EACCES (a create of it: EACCES)",
			"link onto secrets: EACCES (a create of it: EACCES)",
			"link onto secrets/k: ENOENT (a create of it: ENOENT)",
			"link onto secrets/free: ENOENT (a create of it: ENOENT)",
			"link onto mixed/hidden: EACCES (a create of it: EACCES)",
			"link onto mixed/hidden/h.txt: ENOENT (a create of it: ENOENT)",
			"link onto mixed/hidden/free: ENOENT (a create of it: ENOENT)",
			"link onto mixed/open.txt: EEXIST (a create of it: EEXIST)",
			"link into public: ok owner: 1001",
		} {
			if !strings.Contains(out, want+"\n") {
				t.Errorf("in %s: want %q\n%s", m, want, out)
			}
		}
		sh(t, `rm -f "$D"/public/linked.txt "$D"/public/made-public`, "D="+e.b("data"))
	}
	if after := sh(t, list, "D="+e.b("data")); after != before {
		t.Errorf("the folders the agent may not write changed:\n--- before\n%s\n--- after\n%s", before, after)
	}
}

// tmpfileCrossing, run as the agent in $M, a source whose folder held/
// is under review and scratch/ is not, links tmpfiles across the two.
const tmpfileCrossing = `
/usr/bin/python3 - "$M" <<'EOF'
import ctypes, errno, os, sys, tempfile
libc = ctypes.CDLL(None, use_errno=True)
os.chdir(sys.argv[1])
def link(fd, dst):
    r = libc.linkat(-100, b"/proc/self/fd/%d" % fd, -100, dst.encode(), 0x400)
    return "ok" if r == 0 else errno.errorcode[ctypes.get_errno()]
held = os.open("held", os.O_TMPFILE | os.O_RDWR, 0o644)
os.write(held, b"made in held\n")
scratch = os.open("scratch", os.O_TMPFILE | os.O_RDWR, 0o644)
os.write(scratch, b"made in scratch\n")
print("held's onto scratch/y:", link(held, "scratch/y"))
print("scratch's onto held/x:", link(scratch, "held/x"))
print("scratch's onto scratch/x:", link(scratch, "scratch/x"))
with tempfile.TemporaryFile(dir="held") as f:
    f.write(b"scratch data\n")
    f.seek(0)
    print("TemporaryFile in held:", f.read())
print("listed:", sorted(os.listdir("held")), sorted(os.listdir("scratch")))
EOF
`

// TestTmpfileWhereWritesAreHeld: where the agent's writes are held for
// review, O_TMPFILE and the link that names the file behave as on a
// plain folder in the agent's view, nothing reaches the backing folder
// before approval, and approval lands what a plain folder has. A
// tmpfile cannot be linked from a held folder into one the agent writes
// directly, nor the other way (EXDEV).
func TestTmpfileWhereWritesAreHeld(t *testing.T) {
	requireFUSE(t)
	view := filepath.Join(sharedTempDir(t), "view")
	must(t, os.Mkdir(view, 0o755))
	e := newEnv(t, heldConfig(view)+"\n[[rule]]\nuri = \"d://scratch/**\"\nwho = [\"role:agent\"]\nallow = [\"write\"]\n", src{slug: "d"})
	sh(t, `set -e; cd "$D"; mkdir -p scratch held/t held/g; chmod 0777 scratch held
chown 1001:1001 held/t; chown 1001:4242 held/g; chmod 2777 held/g`, "D="+e.b("d"))
	empty := `cd "$D" && ls -A held/t held/g`
	for _, m := range []string{e.m("d"), filepath.Join(view, "d")} {
		out, err := run(t, 1001, tmpfileCrossing, "M="+m)
		if err != nil {
			t.Fatalf("in %s: %v\n%s", m, err, out)
		}
		want := "held's onto scratch/y: EXDEV\nscratch's onto held/x: EXDEV\nscratch's onto scratch/x: ok\nTemporaryFile in held: b'scratch data\\n'\nlisted: ['g', 't'] ['x']\n"
		if out != want {
			t.Errorf("in %s:\n--- got\n%s--- want\n%s", m, out, want)
		}
		if got := sh(t, empty+` && cat scratch/x && rm scratch/x`, "D="+e.b("d")); got != "held/g:\n\nheld/t:\nmade in scratch\n" {
			t.Errorf("the backing folder after %s: %q", m, got)
		}
	}
	native := sharedTempDir(t)
	must(t, os.Mkdir(filepath.Join(native, "t"), 0o777))
	must(t, os.Mkdir(filepath.Join(native, "g"), 0o777))
	must(t, os.Chown(filepath.Join(native, "t"), 1001, 1001))
	must(t, os.Chown(filepath.Join(native, "g"), 1001, 4242))
	must(t, os.Chmod(filepath.Join(native, "g"), os.ModeSetgid|0o777))
	want, err := run(t, 1001, tmpfileCases, "W="+native)
	if err != nil {
		t.Fatalf("the cases in a plain folder: %v\n%s", err, want)
	}
	if got, err := run(t, 1001, tmpfileCases, "W="+filepath.Join(view, "d", "held")); err != nil || got != want {
		t.Errorf("the held view differs from a plain folder (%v)\n--- plain folder\n%s\n--- view\n%s", err, want, got)
	}
	if got := sh(t, empty, "D="+e.b("d")); got != "held/g:\n\nheld/t:\n" {
		t.Errorf("held tmpfiles reached the backing folder before approval:\n%s", got)
	}
	out := sh(t, binPath+" review list -c "+e.cfg)
	for _, name := range []string{"d://held/t/a", "d://held/t/b", "d://held/t/d", "d://held/g/x"} {
		if !strings.Contains(out, name) {
			t.Errorf("the review does not list %s:\n%s", name, out)
		}
	}
	sh(t, binPath+" review approve --all -c "+e.cfg)
	list := `cd "$W" && for f in t/* g/*; do echo "$f $(stat -c '%A %u:%g %s' "$f") $(md5sum < "$f")"; done`
	if got, want := sh(t, list, "W="+e.b("d", "held")), sh(t, list, "W="+native); got != want {
		t.Errorf("approved, the backing folder differs from a plain folder\n--- plain folder\n%s\n--- backing folder\n%s", want, got)
	}
}

// setgidUmask is xfstests' generic/696 (vfstest's setgid-create-umask)
// in a few lines: as a caller outside the group of a setgid folder $W,
// under three umasks, make a file with O_TMPFILE (unless $NOTMP), with
// open(O_CREAT), with mknod and a folder, each with five modes, and
// print the mode each got.
const setgidUmask = `
/usr/bin/python3 - "$W" <<'EOF'
import os, stat, sys
d = sys.argv[1]
for um in (0, 0o010, 0o022):
    os.umask(um)
    for mode in (0o2755, 0o6777, 0o2745, 0o2711, 0o0777):
        tag = "umask %03o mode %04o" % (um, mode)
        got = []
        if not os.environ.get("NOTMP"):
            fd = os.open(d, os.O_TMPFILE | os.O_RDWR, mode)
            got.append("tmpfile " + stat.filemode(os.fstat(fd).st_mode))
            os.close(fd)
        p = "%s/c-%03o-%04o" % (d, um, mode)
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, mode))
        got.append("creat " + stat.filemode(os.stat(p).st_mode))
        p = "%s/n-%03o-%04o" % (d, um, mode)
        os.mknod(p, stat.S_IFREG | mode)
        got.append("mknod " + stat.filemode(os.stat(p).st_mode))
        p = "%s/d-%03o-%04o" % (d, um, mode)
        os.mkdir(p, mode)
        got.append("mkdir " + stat.filemode(os.stat(p).st_mode))
        print(tag + ": " + ", ".join(got))
EOF
`

// TestSetgidCreateUmaskLikePlainFolder: files and folders the agent
// makes in a setgid folder of a group it is not in keep or lose the
// set-group-id bit, and take the umask, as on a plain folder: in a main
// mount without rules (O_TMPFILE too) and in a view whose writes are
// held, where approval lands the same modes.
func TestSetgidCreateUmaskLikePlainFolder(t *testing.T) {
	e, view := heldEdgeEnv(t, "mkdir sg && chown 1001:4242 sg && chmod 2777 sg")
	main := newEnv(t, "", src{slug: "data"}).m("data", "sg")
	must(t, os.Mkdir(main, 0o777))
	must(t, os.Chown(main, 1001, 4242))
	must(t, os.Chmod(main, os.ModeSetgid|0o777))
	native := filepath.Join(sharedTempDir(t), "sg")
	must(t, os.Mkdir(native, 0o777))
	must(t, os.Chown(native, 1001, 4242))
	must(t, os.Chmod(native, os.ModeSetgid|0o777))
	makeAll := func(w string, env ...string) string {
		out, err := run(t, 1001, setgidUmask, append(env, "W="+w)...)
		if err != nil {
			t.Fatalf("as the agent in %s: %v\n%s", w, err, out)
		}
		return out
	}
	want := makeAll(native)
	if !strings.Contains(want, "umask 010 mode 6777: tmpfile -rwsrw-rwx") || !strings.Contains(want, "mkdir drwxr-Sr-x") {
		t.Fatalf("the plain folder does not answer as expected: the case cannot tell anything:\n%s", want)
	}
	if got := makeAll(main); got != want {
		t.Errorf("the main mount differs from a plain folder\n--- plain folder\n%s\n--- mount\n%s", want, got)
	}
	list := `cd "$W" && for f in [cnd]-*; do echo "$f $(stat -c '%A %u:%g' "$f")"; done`
	wantList := sh(t, list, "W="+native)
	must(t, os.RemoveAll(native))
	must(t, os.Mkdir(native, 0o777))
	must(t, os.Chown(native, 1001, 4242))
	must(t, os.Chmod(native, os.ModeSetgid|0o777))
	wantHeld := makeAll(native, "NOTMP=1")
	if got := makeAll(filepath.Join(view, "sg"), "NOTMP=1"); got != wantHeld {
		t.Errorf("the held view differs from a plain folder\n--- plain folder\n%s\n--- view\n%s", wantHeld, got)
	}
	sh(t, binPath+" review approve --all -c "+e.cfg)
	if got := sh(t, list, "W="+e.b("d", "sg")); got != wantList {
		t.Errorf("approved, the backing folder differs from a plain folder\n--- plain folder\n%s\n--- backing folder\n%s", wantList, got)
	}
}
