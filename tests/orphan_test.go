package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// orphanPy opens a file, unlinks it and goes on using it, as temp files,
// sqlite and stress-ng do: every f* call must work on the open file as it
// does on a plain folder, though the file has no name left.
const orphanPy = `
import os
d = os.environ["ROOT"]
p = os.path.join(d, "orphan")
fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b"hello world")
ro = os.open(p, os.O_RDONLY)
os.unlink(p)
# open("/proc/self/fd/N") opens the file again, though it has no name.
reopen = lambda fd, flags: os.open("/proc/self/fd/%d" % fd, flags)
steps = [
    ("fstat", lambda: os.fstat(fd).st_size),
    ("ftruncate", lambda: os.ftruncate(fd, 5)),
    ("size", lambda: os.fstat(fd).st_size),
    ("fchmod", lambda: os.fchmod(fd, 0o600)),
    ("mode", lambda: oct(os.fstat(fd).st_mode)),
    ("fchown", lambda: os.fchown(fd, 1001, 1001)),
    ("owner", lambda: (os.fstat(fd).st_uid, os.fstat(fd).st_gid)),
    ("futimens", lambda: os.utime(fd, (1, 2))),
    ("times", lambda: (os.fstat(fd).st_atime, os.fstat(fd).st_mtime)),
    ("pread", lambda: os.pread(fd, 100, 0)),
    ("pread-other-handle", lambda: os.pread(ro, 100, 0)),
    ("fallocate", lambda: os.posix_fallocate(fd, 0, 100)),
    ("size-after-fallocate", lambda: os.fstat(fd).st_size),
    ("fsetxattr", lambda: os.setxattr(fd, "user.x", b"1")),
    ("fgetxattr", lambda: os.getxattr(fd, "user.x")),
    ("flistxattr", lambda: sorted(os.listxattr(fd))),
    ("fremovexattr", lambda: os.removexattr(fd, "user.x")),
    ("flistxattr-again", lambda: sorted(os.listxattr(fd))),
    ("fstat-other-handle", lambda: oct(os.fstat(ro).st_mode)),
    ("close-writer", lambda: os.close(fd)),
    ("fchmod-via-reader", lambda: os.fchmod(ro, 0o640)),
    ("mode-via-reader", lambda: oct(os.fstat(ro).st_mode)),
    ("ftruncate-reader", lambda: os.ftruncate(ro, 1)),
    ("reopen-read", lambda: os.pread(reopen(ro, os.O_RDONLY), 10, 0)),
    ("reopen-write", lambda: os.pwrite(reopen(ro, os.O_RDWR), b"Zz", 0)),
    ("read-after-reopen-write", lambda: os.pread(ro, 10, 0)),
    ("reopen-append", lambda: os.write(reopen(ro, os.O_WRONLY | os.O_APPEND), b"!")),
    ("read-after-append", lambda: os.pread(ro, 10, 0)),
    ("reopen-trunc", lambda: os.fstat(reopen(ro, os.O_WRONLY | os.O_TRUNC)).st_size),
    ("size-after-trunc", lambda: os.fstat(ro).st_size),
    ("name-gone", lambda: os.path.exists(p)),
]
for name, f in steps:
    try:
        print(name, repr(f()))
    except OSError as e:
        print(name, "ERR", e.strerror)
os.close(ro)
`

func TestUnlinkedOpenFileAgainstPlainFolder(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	native := filepath.Join(e.dir, "native")
	must(t, os.Mkdir(native, 0o755))
	want := sh(t, "python3 - <<'PY'\n"+orphanPy+"\nPY", "ROOT="+native)
	got := sh(t, "python3 - <<'PY'\n"+orphanPy+"\nPY", "ROOT="+e.m("data"))
	if got != want {
		t.Fatalf("an unlinked, open file behaves differently on the mount\nmount:\n%s\nplain folder:\n%s", got, want)
	}
	// The plain run must show the calls working, or the comparison proves
	// nothing.
	for _, line := range []string{"size 5", "mode '0o100600'", "fgetxattr b'1'", "mode-via-reader '0o100640'", "read-after-reopen-write b'Zzllo", "reopen-append 1", "size-after-trunc 0"} {
		if !strings.Contains(want, line) {
			t.Fatalf("plain folder run lacks %q:\n%s", line, want)
		}
	}
	if ents, _ := os.ReadDir(e.b("data")); len(ents) != 0 {
		t.Fatalf("backing folder keeps %d entries after the orphan was closed", len(ents))
	}
}

// removedCwd, run in $W, removes the folder it works in (by its
// absolute path, by "..", and by renaming another folder over it) and
// goes on asking about it, as a shell left in a folder another command
// removed does. A view's kernel may answer stat from its cache, so the
// last question is a statx with AT_STATX_FORCE_SYNC, which always
// reaches the daemon (a plain folder answers it as stat).
const removedCwd = `
for how in abs dots renamed; do
  mkdir -p "$W/gone-$how"
  cd "$W/gone-$how"
  case $how in
  abs) rmdir "$W/gone-$how" ;;
  dots) rmdir ../gone-$how ;;
  renamed) mkdir "$W/other" && mv -T "$W/other" "$W/gone-$how" ;;
  esac
  echo "$how: stat: $(stat -c '%F links=%h mode=%a' . 2>&1)"
  echo "$how: ls: $(ls -A 2>&1 | wc -l) $(ls -A 2>&1 | head -1)"
  echo "$how: touch: $(touch x 2>&1 | sed 's/.*: //')"
  echo "$how: mkdir: $(mkdir sub 2>&1 | sed 's/.*: //')"
  echo "$how: pwd -P: $(/bin/pwd 2>&1 | sed 's/.*: //')"
  echo "$how: forced statx: $(/usr/bin/python3 -c '
import ctypes, errno, struct
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(256)
if libc.statx(-100, b".", 0x2000, 0x7ff, buf) != 0: # AT_STATX_FORCE_SYNC, STATX_BASIC_STATS
    print(errno.errorcode[ctypes.get_errno()])
else:
    nlink, = struct.unpack_from("I", buf, 16)
    mode, = struct.unpack_from("H", buf, 28)
    print("links=%d mode=%o" % (nlink, mode))
')"
  cd "$W" && echo "$how: back out"
done
`

// TestRemovedWorkingFolderLikePlainFolder: a process whose working
// folder is removed through the mount sees what it sees on a plain
// folder: stat(".") answers with link count 0 (it answered ESTALE), ls
// lists nothing (it answered ENOENT), and new names fail with ENOENT; in
// the main mount as root and as the agent in its view whose writes are
// held.
func TestRemovedWorkingFolderLikePlainFolder(t *testing.T) {
	e, view := heldEdgeEnv(t, "mkdir agent && chown 1001:1001 agent")
	native := filepath.Join(sharedTempDir(t), "w")
	must(t, os.Mkdir(native, 0o777))
	want := sh(t, removedCwd, "W="+native)
	if !strings.Contains(want, "abs: stat: directory links=0 mode=755") || !strings.Contains(want, "dots: ls: 0") || !strings.Contains(want, "renamed: forced statx: links=0 mode=40755") {
		t.Fatalf("the plain folder does not answer as expected: the case cannot tell anything:\n%s", want)
	}
	if got := sh(t, removedCwd, "W="+e.m("d")); got != want {
		t.Errorf("the main mount differs from a plain folder\n--- plain folder\n%s\n--- mount\n%s", want, got)
	}
	agentNative := filepath.Join(sharedTempDir(t), "agent")
	must(t, os.Mkdir(agentNative, 0o777))
	must(t, os.Chown(agentNative, 1001, 1001))
	want, err := run(t, 1001, removedCwd, "W="+agentNative)
	if err != nil {
		t.Fatalf("as the agent in a plain folder: %v\n%s", err, want)
	}
	if got, err := run(t, 1001, removedCwd, "W="+filepath.Join(view, "agent")); err != nil || got != want {
		t.Errorf("the agent's held view differs from a plain folder (%v)\n--- plain folder\n%s\n--- view\n%s", err, want, got)
	}
}

// A file removed while open is opened again through /proc/self/fd/N
// (orphanOpen) under the rules too, but only with access the caller's
// uid holds through an open of its own: the agent, denied writes to ro/,
// cannot reopen its read-only descriptor of a removed file there for
// writing, though the file's mode (0666) would let it on a plain folder;
// it reopens what it opened for writing in rw/ as it likes. A file
// removed from the mount that keeps a name on disk (another hard link)
// is not opened again: a write through a new descriptor would reach a
// backing file the rules decide by its name.
func TestReopenOfRemovedFileKeepsTheRules(t *testing.T) {
	e := newEnv(t, `
[[principal]]
name = "agent"
uids = [1001]

[[rule]]
uri = "data://ro/**"
who = ["agent"]
deny = ["write"]
`, src{slug: "data"})
	sh(t, `set -e; cd "$D"; mkdir ro rw; echo read-only > ro/r.txt; echo writable > rw/w.txt; echo linked > rw/l.txt
ln rw/l.txt keep-l.txt; chmod 0666 ro/r.txt rw/w.txt rw/l.txt; chmod 0777 ro rw`, "D="+e.b("data"))
	out := sh(t, `/usr/bin/python3 - <<'PY'
import os
m = os.environ["M"]
os.setgroups([]); os.setresgid(1001, 1001, 0); os.setresuid(1001, 1001, 0)
r = os.open(m + "/ro/r.txt", os.O_RDONLY)
w = os.open(m + "/rw/w.txt", os.O_RDWR)
l = os.open(m + "/rw/l.txt", os.O_RDONLY)
os.seteuid(0)
for n in ["ro/r.txt", "rw/w.txt", "rw/l.txt"]:
    os.unlink(m + "/" + n)
os.seteuid(1001)
reopen = lambda fd, flags: os.open("/proc/self/fd/%d" % fd, flags)
def t(name, f):
    try:
        print(name, repr(f()))
    except OSError as e:
        print(name, "ERR", e.strerror)
t("ro read", lambda: os.pread(reopen(r, os.O_RDONLY), 20, 0))
t("ro write", lambda: os.pwrite(reopen(r, os.O_RDWR), b"X", 0))
t("ro trunc", lambda: reopen(r, os.O_RDONLY | os.O_TRUNC) and 0)
t("ro after", lambda: os.pread(r, 20, 0))
t("rw write", lambda: os.pwrite(reopen(w, os.O_RDWR), b"W", 0))
t("rw read", lambda: os.pread(reopen(w, os.O_RDONLY), 20, 0))
t("linked write", lambda: os.pwrite(reopen(l, os.O_RDWR), b"L", 0))
t("linked read", lambda: os.pread(reopen(l, os.O_RDONLY), 20, 0))
PY`, "M="+e.m("data"))
	for _, want := range []string{
		"ro read b'read-only\\n'", "ro write ERR Permission denied", "ro trunc ERR Permission denied",
		"ro after b'read-only\\n'", "rw write 1", "rw read b'Writable\\n'",
		"linked write ERR Stale file handle", "linked read ERR Stale file handle",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if b, _ := os.ReadFile(e.b("data", "keep-l.txt")); string(b) != "linked\n" {
		t.Errorf("the file that kept a name on disk holds %q", b)
	}
}
