package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHeldDeleteOfAnOpenFileKeepsItsBackingFile: the agent opens a backing
// file to read, then removes the name (a held delete: the file stays on
// disk) or renames a held file over it, and changes the file through its
// descriptor — truncate and chmod and utime of /proc/self/fd/N, setxattr
// and removexattr on the descriptor. None of it may reach the backing
// file: it still has its name there, so review and the rules decide it,
// and the agent's view says it is gone. Before, the daemon took such a
// node for an unlinked file, which no rule decides, and made every change
// on the backing file through the descriptor (found by a red-team pass:
// the backing file truncated to 0 bytes, chmod 0666, with no history and
// nothing to review but a delete). The same hole let a principal whose
// writes are denied truncate a file it had open once the agent's held
// delete dropped its name in the main mount. A file that is really
// unlinked (no name left on disk) still takes such changes, as POSIX
// says.
func TestHeldDeleteOfAnOpenFileKeepsItsBackingFile(t *testing.T) {
	e, vd := heldEdgeEnvWith(t, `
[[rule]]
uri = "*://**"
who = ["alice"]
deny = ["write"]
`, "")
	const content = "the backing content\n"
	names := []string{"v1", "v2", "v3", "v4"}
	for _, n := range names {
		writeFile(t, e.b("d", n), content, 0o666)
		must(t, unix.Setxattr(e.b("d", n), "user.kept", []byte("yes"), 0))
	}
	st0 := map[string]syscall.Stat_t{}
	for _, n := range names {
		var st syscall.Stat_t
		must(t, syscall.Stat(e.b("d", n), &st))
		st0[n] = st
	}

	// As the agent, in its view (v1, v2) and in the main mount (v3, v4);
	// the odd ones removed, the even ones replaced by a held rename.
	script := `python3 - "$D" "$N" "$HOW" <<'PY'
import os, sys
d, n, how = sys.argv[1:]
os.chdir(d)
fd = os.open(n, os.O_RDONLY)
if how == "rm":
    os.unlink(n)
else:
    with open(n + ".new", "w") as f:
        f.write("the agent's\n")
    os.rename(n + ".new", n)
p = "/proc/self/fd/%d" % fd
for what, call in [
    ("truncate", lambda: os.truncate(p, 0)),
    ("chmod", lambda: os.chmod(p, 0o600)),
    ("utime", lambda: os.utime(p, (0, 0))),
    ("fchmod", lambda: os.fchmod(fd, 0o640)),
    ("setxattr", lambda: os.setxattr(fd, "user.pwned", b"yes")),
    ("removexattr", lambda: os.removexattr(fd, "user.kept")),
]:
    try:
        call()
        print(what, "ok")
    except OSError as e:
        print(what, e.strerror)
print("read", repr(os.pread(fd, 100, 0)))
PY`
	for i, n := range names {
		dir := vd
		if i >= 2 {
			dir = e.m("d")
		}
		how := "rm"
		if i%2 == 1 {
			how = "mv"
		}
		out, err := run(t, 1001, script, "D="+dir, "N="+n, "HOW="+how)
		if err != nil {
			t.Fatalf("the agent on %s: %v\n%s", n, err, out)
		}
		t.Logf("%s (%s, in %s):\n%s", n, how, dir, out)
		if !strings.Contains(out, "read b'the backing content") {
			t.Errorf("the agent's descriptor of %s no longer reads the backing file:\n%s", n, out)
		}
	}
	for _, n := range names {
		b, err := os.ReadFile(e.b("d", n))
		if err != nil || string(b) != content {
			t.Errorf("the backing %s after the agent's changes through its descriptor: %q, %v", n, b, err)
		}
		var st syscall.Stat_t
		must(t, syscall.Stat(e.b("d", n), &st))
		if st.Mode != st0[n].Mode || st.Mtim != st0[n].Mtim {
			t.Errorf("the backing %s changed: mode %o mtime %v, was %o %v", n, st.Mode, st.Mtim, st0[n].Mode, st0[n].Mtim)
		}
		if v, err := unix.Getxattr(e.b("d", n), "user.pwned", make([]byte, 16)); err == nil {
			t.Errorf("the backing %s got the agent's xattr (%d bytes)", n, v)
		}
		if _, err := unix.Getxattr(e.b("d", n), "user.kept", make([]byte, 16)); err != nil {
			t.Errorf("the backing %s lost its xattr: %v", n, err)
		}
	}

	// Alice may not write: with a file open to read in the main mount,
	// the agent's held delete drops the name there, and her truncate and
	// setxattr through the descriptor must still be refused.
	writeFile(t, e.b("d", "shared"), content, 0o666)
	flags := sharedTempDir(t)
	must(t, os.Chmod(flags, 0o777))
	ready, goOn := filepath.Join(flags, "alice-ready"), filepath.Join(flags, "alice-go")
	alice := exec.Command("/usr/bin/python3", "-c", `
import os, sys, time
path, ready, go = sys.argv[1:]
fd = os.open(path, os.O_RDONLY)
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.02)
p = "/proc/self/fd/%d" % fd
for what, call in [("truncate", lambda: os.truncate(p, 0)), ("setxattr", lambda: os.setxattr(fd, "user.pwned", b"yes"))]:
    try:
        call()
        print(what, "ok")
    except OSError as e:
        print(what, e.strerror)
`, e.m("d", "shared"), ready, goOn)
	alice.Dir = "/"
	alice.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1002, Gid: 1002}}
	var aliceOut syncBuffer
	alice.Stdout, alice.Stderr = &aliceOut, &aliceOut
	must(t, alice.Start())
	eventually(t, 10*time.Second, "alice to open the file", func() bool { _, err := os.Stat(ready); return err == nil })
	if out, err := run(t, 1001, "rm "+e.m("d", "shared")); err != nil {
		t.Fatalf("the agent's held rm: %v\n%s", err, out)
	}
	must(t, os.WriteFile(goOn, nil, 0o644))
	if err := alice.Wait(); err != nil {
		t.Fatalf("alice: %v\n%s", err, aliceOut.String())
	}
	if out := aliceOut.String(); strings.Contains(out, " ok") {
		t.Errorf("alice, whose writes are denied, changed the file through her descriptor after the agent's held delete:\n%s", out)
	}
	if b, _ := os.ReadFile(e.b("d", "shared")); string(b) != content {
		t.Errorf("the backing shared after alice's truncate: %q", b)
	}

	// A file really unlinked (no name left on disk) still takes changes
	// through a descriptor, as on a plain folder: root's own file, in a
	// source the agent holds nothing of.
	out := sh(t, fmt.Sprintf(`cd %s && echo x > gone && python3 -c '
import os, stat
fd = os.open("gone", os.O_RDONLY)
os.unlink("gone")
p = "/proc/self/fd/%%d" %% fd
os.truncate(p, 0)
os.chmod(p, 0o600)
os.setxattr(fd, "user.a", b"1")
st = os.fstat(fd)
print(st.st_size, oct(stat.S_IMODE(st.st_mode)), os.getxattr(fd, "user.a"))'`, e.m("d")))
	if strings.TrimSpace(out) != "0 0o600 b'1'" {
		t.Errorf("changes through the descriptor of a really unlinked file: %q, want size 0 mode 600", out)
	}
}

// A file the agent made where its writes are held, opened and then
// removed, is a layer copy with no name left anywhere: opening it again
// through /proc/self/fd/N works as on a plain folder (orphanOpen), for
// writing too, and the new descriptor writes the layer's copy, never a
// backing file; a backing file removed by a held delete still answers
// ESTALE (it keeps its name on disk).
func TestHeldRemovedFileOpensAgainThroughProc(t *testing.T) {
	e, vd := heldEdgeEnv(t, "echo backing > b.txt && chmod 0666 b.txt && chmod 0777 .")
	out, err := run(t, 1001, `/usr/bin/python3 - <<'PY'
import os
os.chdir(os.environ["V"])
fd = os.open("made.txt", os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b"held content")
os.unlink("made.txt")
reopen = lambda flags: os.open("/proc/self/fd/%d" % fd, flags)
w = reopen(os.O_RDWR)
os.pwrite(w, b"HELD", 0)
print("made:", os.pread(fd, 20, 0), os.path.exists("made.txt"))
b = os.open("b.txt", os.O_RDONLY)
os.unlink("b.txt")
try:
    os.pwrite(os.open("/proc/self/fd/%d" % b, os.O_RDWR), b"X", 0)
    print("backing: reopened")
except OSError as e:
    print("backing:", e.strerror)
PY`, "V="+vd)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"made: b'HELD content' False", "backing: Stale file handle"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if b, _ := os.ReadFile(e.b("d", "b.txt")); string(b) != "backing\n" {
		t.Errorf("the backing file holds %q", b)
	}
	if _, err := os.Stat(e.b("d", "made.txt")); err == nil {
		t.Errorf("the agent's removed file reached the backing folder")
	}
}
