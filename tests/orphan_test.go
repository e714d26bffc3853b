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
	for _, line := range []string{"size 5", "mode '0o100600'", "fgetxattr b'1'", "mode-via-reader '0o100640'"} {
		if !strings.Contains(want, line) {
			t.Fatalf("plain folder run lacks %q:\n%s", line, want)
		}
	}
	if ents, _ := os.ReadDir(e.b("data")); len(ents) != 0 {
		t.Fatalf("backing folder keeps %d entries after the orphan was closed", len(ents))
	}
}
