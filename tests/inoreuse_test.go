package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file's inode number, freed when a rename behind the mount replaces
// it, is soon given to the next file made there: ext4 hands out the
// lowest free number. A name the kernel still holds for the replaced
// file must not then read the new file's bytes. Before the mount told
// the two files apart, go-fuse found the old node by the reused number,
// the kernel took both names for one inode, and reading the stale name
// read the other file (seen in TestPageCacheReadsFollowWritesUnderChurn:
// f04 read as "f05 v000002").
func TestReusedInodeNumberIsAnotherFile(t *testing.T) {
	view := filepath.Join(sharedTempDir(t), "agentview")
	must(t, os.Mkdir(view, 0o755))
	data := sharedTempDir(t)
	must(t, os.Chmod(data, 0o777))
	b := filepath.Join(data, "reuse")
	writeFile(t, filepath.Join(b, "a"), "a0\n", 0o666)
	writeFile(t, filepath.Join(b, "b"), "b0\n", 0o666)
	must(t, os.Chmod(b, 0o777))
	e := newEnv(t, "[[principal]]\nname = \"agent\"\nuids = [1001]\n"+viewTOML("agent", view), src{slug: "data", path: data})
	script := `
import os, sys
root, back, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
reused = wrong = 0
for r in range(rounds):
    # The kernel holds the name a for a's inode.
    with open(os.path.join(root, "a")) as f: f.read()
    old = os.stat(os.path.join(back, "a")).st_ino
    # Behind the mount: a is replaced, and its number goes to b's new file.
    with open(os.path.join(back, ".ta"), "w") as f: f.write("a%d\n" % (r + 1))
    os.rename(os.path.join(back, ".ta"), os.path.join(back, "a"))
    with open(os.path.join(back, ".tb"), "w") as f: f.write("b%d\n" % (r + 1))
    if os.stat(os.path.join(back, ".tb")).st_ino == old:
        reused += 1
    os.rename(os.path.join(back, ".tb"), os.path.join(back, "b"))
    # The mount looks b up (the reused number), then reads a.
    os.stat(os.path.join(root, "b"))
    with open(os.path.join(root, "a")) as f: got = f.read()
    if got.startswith("b"):
        wrong += 1
        print("round %d: a read %r" % (r, got))
print("reused %d wrong %d" % (reused, wrong))
`
	sp := filepath.Join(sharedTempDir(t), "reuse.py")
	must(t, os.WriteFile(sp, []byte(script), 0o644))
	for _, c := range []struct {
		root string
		uid  int
	}{{filepath.Join(view, "data", "reuse"), 1001}, {e.m("data", "reuse"), 0}} {
		out, err := run(t, c.uid, fmt.Sprintf("python3 %s %s %s 200", sp, c.root, b))
		t.Logf("%s: %s", c.root, out)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var reused, wrong int
		if n, _ := fmt.Sscanf(lines[len(lines)-1], "reused %d wrong %d", &reused, &wrong); n != 2 || wrong > 0 {
			t.Errorf("%s: %s", c.root, out)
		}
	}
}

// A folder renamed behind the mount is the same folder under its new
// name: once the mount has looked the new name up, a process working
// inside it goes on working there, as on the plain folder.
func TestFolderRenamedBehindTheMountKeepsItsProcesses(t *testing.T) {
	view := filepath.Join(sharedTempDir(t), "agentview")
	must(t, os.Mkdir(view, 0o755))
	data := sharedTempDir(t)
	must(t, os.Chmod(data, 0o777))
	b := filepath.Join(data, "mv")
	writeFile(t, filepath.Join(b, "d", "f"), "in d\n", 0o666)
	must(t, os.Chmod(b, 0o777))
	must(t, os.Chmod(filepath.Join(b, "d"), 0o777))
	e := newEnv(t, "[[principal]]\nname = \"agent\"\nuids = [1001]\n"+viewTOML("agent", view), src{slug: "data", path: data})
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
// behind the mount or through it — while the file is still open. The
// file's number is not free while it is open, so a lookup of the other
// name finds the node the lock is on, not a file of its own.
func TestHardLinkKeepsItsLocksWhenANameGoes(t *testing.T) {
	view := filepath.Join(sharedTempDir(t), "agentview")
	must(t, os.Mkdir(view, 0o755))
	data := sharedTempDir(t)
	must(t, os.Chmod(data, 0o777))
	b := filepath.Join(data, "hl")
	writeFile(t, filepath.Join(b, "y"), "one file\n", 0o666)
	must(t, os.Chmod(b, 0o777))
	e := newEnv(t, "[[principal]]\nname = \"agent\"\nuids = [1001]\n"+viewTOML("agent", view), src{slug: "data", path: data})
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
