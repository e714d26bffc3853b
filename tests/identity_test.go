package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// agentViewOfData makes the mountpoint of a view for the agent (uid 1001),
// under a config with no rules, and a source folder anyone may change, so
// that the agent changes it behind the mount as well as through it.
func agentViewOfData(t *testing.T) (view, data, cfg string) {
	t.Helper()
	view = filepath.Join(sharedTempDir(t), "agentview")
	must(t, os.Mkdir(view, 0o755))
	data = sharedTempDir(t)
	must(t, os.Chmod(data, 0o777))
	return view, data, "[[principal]]\nname = \"agent\"\nuids = [1001]\n" + viewTOML("agent", view)
}

// A folder renamed behind the mount is the same folder under its new
// name: once the mount has looked the new name up, a process working
// inside it goes on working there, as on the plain folder.
func TestFolderRenamedBehindTheMountKeepsItsProcesses(t *testing.T) {
	view, data, cfg := agentViewOfData(t)
	b := filepath.Join(data, "mv")
	writeFile(t, filepath.Join(b, "d", "f"), "in d\n", 0o666)
	must(t, os.Chmod(b, 0o777))
	must(t, os.Chmod(filepath.Join(b, "d"), 0o777))
	e := newEnv(t, cfg, src{slug: "data", path: data})
	script := `
import os, sys
root, back = sys.argv[1], sys.argv[2]
os.chdir(os.path.join(root, "d"))
with open("f") as f: assert f.read() == "in d\n"
os.rename(os.path.join(back, "d"), os.path.join(back, "e"))
os.stat(os.path.join(root, "e"))
with open("f") as f: got = f.read()
with open("g", "w") as f: f.write("made in e\n")
with open(os.path.join(back, "e", "g")) as f: made = f.read()
os.rename(os.path.join(back, "e"), os.path.join(back, "d"))
print(got.strip(), "|", made.strip(), "|", os.path.basename(os.getcwd()))
`
	sp := filepath.Join(sharedTempDir(t), "mv.py")
	must(t, os.WriteFile(sp, []byte(script), 0o644))
	for _, c := range []struct {
		root string
		uid  int
	}{{filepath.Join(view, "data", "mv"), 1001}, {e.m("data", "mv"), 0}} {
		out, err := run(t, c.uid, fmt.Sprintf("python3 %s %s %s", sp, c.root, b))
		if want := "in d | made in e | e\n"; err != nil || out != want {
			t.Errorf("%s: %v\n%s\nwant %s", c.root, err, out, want)
		}
		must(t, os.Remove(filepath.Join(b, "d", "g")))
	}
}

// Hard links are one file: a lock taken through one name holds against
// the other, also after the name the lock was taken through is removed —
// behind the mount or through it — while the file is still open: the
// mount finds a known node by the file's number, which is not free while
// the file is open, so a lookup of the other name finds the node the lock
// is on, not a node of its own.
func TestHardLinkKeepsItsLocksWhenANameGoes(t *testing.T) {
	view, data, cfg := agentViewOfData(t)
	b := filepath.Join(data, "hl")
	writeFile(t, filepath.Join(b, "y"), "one file\n", 0o666)
	must(t, os.Chmod(b, 0o777))
	e := newEnv(t, cfg, src{slug: "data", path: data})
	script := `
import fcntl, os, sys
root, back, how = sys.argv[1], sys.argv[2], sys.argv[3]
os.stat(os.path.join(root, "y"))
f = open(os.path.join(root, "x"), "r+")
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.unlink(os.path.join(back if how == "behind" else root, "x"))
os.stat(os.path.join(root, "y"))
pid = os.fork()
if pid == 0:
    g = open(os.path.join(root, "y"), "r+")
    try:
        fcntl.lockf(g, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("y locked too")
    except OSError as e:
        print("refused")
    os._exit(0)
os.waitpid(pid, 0)
`
	sp := filepath.Join(sharedTempDir(t), "lock.py")
	must(t, os.WriteFile(sp, []byte(script), 0o644))
	for _, how := range []string{"behind", "through"} {
		for _, c := range []struct {
			root string
			uid  int
		}{{filepath.Join(view, "data", "hl"), 1001}, {e.m("data", "hl"), 0}} {
			must(t, os.Link(filepath.Join(b, "y"), filepath.Join(b, "x")))
			out, err := run(t, c.uid, fmt.Sprintf("python3 %s %s %s %s", sp, c.root, b, how))
			if err != nil || out != "refused\n" {
				t.Errorf("%s, x removed %s the mount: %v\n%s", c.root, how, err, out)
			}
		}
	}
}

// A request through a hard link's remaining name, made before the watcher
// has reported the other name gone, finds the file: the daemon goes by a
// hard-linked file's last-found name, and checks it is still the file's
// (liveName). The requests follow the removal at once — far inside the
// watcher's latency — so without the check each of them fails
// deterministically with ENOENT (shown by hand: chmod answers "No such
// file or directory").
func TestHardLinkAnswersByItsOtherNameAtOnce(t *testing.T) {
	view, data, cfg := agentViewOfData(t)
	b := filepath.Join(data, "hl2")
	writeFile(t, filepath.Join(b, "y"), "one file\n", 0o666)
	must(t, os.Chmod(b, 0o777))
	must(t, os.Chown(filepath.Join(b, "y"), 1001, 1001))
	e := newEnv(t, cfg, src{slug: "data", path: data})
	script := `
import os, sys
root, back = sys.argv[1], sys.argv[2]
y, x = os.path.join(root, "y"), os.path.join(root, "x")
os.stat(y)
os.stat(x)  # found last: the name the daemon goes by
os.unlink(os.path.join(back, "x"))
os.chmod(y, 0o640)
st = os.stat(y)
os.setxattr(y, "user.k", b"v")
v = os.getxattr(y, "user.k")
with open(y) as f: got = f.read()
print(oct(st.st_mode & 0o777), st.st_nlink, v.decode(), got.strip())
`
	sp := filepath.Join(sharedTempDir(t), "hl2.py")
	must(t, os.WriteFile(sp, []byte(script), 0o644))
	for _, c := range []struct {
		root string
		uid  int
	}{{filepath.Join(view, "data", "hl2"), 1001}, {e.m("data", "hl2"), 0}} {
		must(t, os.Chmod(filepath.Join(b, "y"), 0o666))
		must(t, os.Link(filepath.Join(b, "y"), filepath.Join(b, "x")))
		out, err := run(t, c.uid, fmt.Sprintf("python3 %s %s %s", sp, c.root, b))
		if want := "0o640 1 v one file\n"; err != nil || out != want {
			t.Errorf("%s: requests through y right after x was removed behind the mount: %v\n%s\nwant %s", c.root, err, out, want)
		}
		st, err := os.Stat(filepath.Join(b, "y"))
		if err != nil || st.Mode().Perm() != 0o640 {
			t.Errorf("%s: on disk y is %v, %v; want mode 0640", c.root, st, err)
		}
	}
}
