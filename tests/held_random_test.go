package tests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// heldOps applies a seeded random sequence of file operations (create,
// write, append, mkdir, rmdir, unlink, rename, symlink, chmod, truncate,
// link, rm -rf) below a root and prints each one's outcome.
const heldOps = `import os, random, sys, errno, stat
root, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(seed)
names = ["a", "b", "c", "d", "e"]
kinds = ["create", "write", "append", "mkdir", "rmdir", "unlink", "rename", "symlink", "chmod", "truncate", "link", "rmtree"]
if "nolink" in sys.argv[4:]:
    kinds.remove("link")
if "renames" in sys.argv[4:]:
    # Mostly renames, among few names: folders renamed, then names moved
    # out of them, back in, onto their old names.
    names = ["a", "b", "c"]
    kinds = ["rename"] * 8 + ["mkdir"] * 2 + ["create", "write", "unlink", "rmdir", "rmtree"]
def rmtree(p):
    # shutil.rmtree, in name order: where it fails part way (a folder it
    # may not read) what it removed first must not hang on the order a
    # folder lists its names in, which no two file systems share.
    if not stat.S_ISDIR(os.lstat(p).st_mode):
        raise OSError(errno.ENOTDIR, "not a folder", p)
    for n in sorted(os.listdir(p)):
        q = os.path.join(p, n)
        if stat.S_ISDIR(os.lstat(q).st_mode):
            rmtree(q)
        else:
            os.unlink(q)
    os.rmdir(p)
def rp():
    depth = rnd.randint(1, 3)
    return "/".join(rnd.choice(names) for _ in range(depth))
log = []
for i in range(n):
    op = rnd.choice(kinds)
    p, q = rp(), rp()
    P, Q = os.path.join(root, p), os.path.join(root, q)
    try:
        if op == "create": open(P, "x").write("c%d\n" % i)
        elif op == "write": open(P, "w").write("w%d\n" % i)
        elif op == "append": open(P, "a").write("a%d\n" % i)
        elif op == "mkdir": os.mkdir(P, 0o755)
        elif op == "rmdir": os.rmdir(P)
        elif op == "unlink": os.unlink(P)
        elif op == "rename": os.rename(P, Q)
        elif op == "symlink": os.symlink("t%d" % i, P)
        elif op == "chmod": os.chmod(P, rnd.choice([0o600, 0o644, 0o755, 0o700]))
        elif op == "truncate": os.truncate(P, rnd.randint(0, 3))
        elif op == "link": os.link(P, Q)
        elif op == "rmtree": rmtree(P)
        r = "ok"
    except OSError as e:
        r = errno.errorcode.get(e.errno, str(e.errno))
    log.append("%d %s %s %s %s" % (i, op, p, q, r))
print("\n".join(log))
`

// Random operations as the agent, held, give the same outcomes and the
// same tree (link counts and hard links included) as on a plain folder, in the main mount and in the view; the
// backing folder stays as it was; approving everything makes it the plain
// folder's tree.
func TestHeldRandomOperationsMatchAPlainFolder(t *testing.T) {
	e, base, view, ops := heldRandomEnv(t)
	for _, seed := range []int{1, 2, 3, 12, 16} { // 12 and 16 link symbolic links
		for _, at := range []string{"main", "view"} {
			plain := filepath.Join(base, "plain-"+at+strconv.Itoa(seed))
			must(t, os.Mkdir(plain, 0o777))
			must(t, os.Chmod(plain, 0o777))
			must(t, os.Chown(plain, 1001, 1001))
			mnt := e.m("d")
			if at == "view" {
				mnt = filepath.Join(view, "d")
			}
			sh(t, binPath+" review reject --all -c "+e.cfg+" >/dev/null; rm -rf "+e.b("d")+"/*")
			want, got := ops(plain, seed, 300, ""), ops(mnt, seed, 300, "")
			if got != want {
				t.Errorf("seed %d in the %s mount: outcomes differ from a plain folder:\n%s", seed, at, firstDiff(want, got))
				continue
			}
			wantTree := manifestAll(t, 1001, plain)
			for _, look := range []string{e.m("d"), filepath.Join(view, "d")} {
				if tree := manifestAll(t, 1001, look); tree != wantTree {
					t.Errorf("seed %d (written in the %s mount): %s differs from the plain folder:\n%s", seed, at, look, firstDiff(wantTree, tree))
				}
			}
			if ents, _ := os.ReadDir(e.b("d")); len(ents) != 0 {
				t.Errorf("seed %d: held writes reached the backing folder (%d names)", seed, len(ents))
			}
			sh(t, binPath+" review approve --all -c "+e.cfg+" >/dev/null")
			if tree, plainTree := manifestAll(t, 0, e.b("d")), manifestAll(t, 0, plain); tree != plainTree {
				t.Errorf("seed %d: after approve --all the backing folder differs from the plain folder:\n%s", seed, firstDiff(plainTree, tree))
			}
		}
	}
}

// heldRandomEnv is a daemon whose agent (uid 1001) has every write held,
// with a view under base, over one source d the agent owns, and ops, which
// runs heldOps as the agent below root with seed for n operations (more:
// extra arguments, " nolink") and returns its outcomes.
func heldRandomEnv(t *testing.T) (e *env, base, view string, ops func(root string, seed, n int, more string) string) {
	t.Helper()
	requireFUSE(t)
	base = sharedTempDir(t)
	view = filepath.Join(base, "view")
	must(t, os.Mkdir(view, 0o755))
	e = newEnv(t, heldConfig(view), src{slug: "d"})
	script := filepath.Join(base, "ops.py")
	must(t, os.WriteFile(script, []byte(heldOps), 0o644))
	must(t, os.Chown(e.b("d"), 1001, 1001))
	must(t, os.Chmod(e.b("d"), 0o777))
	ops = func(root string, seed, n int, more string) string {
		out, err := run(t, 1001, "/usr/bin/python3 "+script+" "+root+" "+strconv.Itoa(seed)+" "+strconv.Itoa(n)+more)
		if err != nil {
			t.Fatalf("ops on %s: %v\n%s", root, err, out)
		}
		return out
	}
	return e, base, view, ops
}

// manifestAll lists a whole tree as manifest does, with link counts and
// which names are one file (errors from folders the operations made
// unreadable are part of the listing).
func manifestAll(tb testing.TB, uid int, dir string) string {
	tb.Helper()
	out, _ := run(tb, uid, `cd "$W" && find . -printf '%y %m %s %n %p %l\n' 2>&1 | LC_ALL=C sort && find . -type f -print0 2>/dev/null | LC_ALL=C sort -z | xargs -0 -r sha256sum 2>&1
find . -type f -links +1 -printf '%i %p\n' 2>/dev/null | LC_ALL=C sort -k2 | awk '{ if (!($1 in f)) f[$1] = $2; print $2, "is", f[$1] }'`, "W="+dir)
	return out
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n- " + x + "\n+ " + y
		}
	}
	return ""
}

// The same over a backing folder that already holds a tree (made by the
// operations with another seed, directly on the backing folder and on
// the plain one): the agent's renames, replacements and deletions of
// backing files are held, and approving them all lands the plain
// folder's tree. (Starting from an empty folder every unit was a file
// the agent made. Over backing files it found: approving a rename whose
// origin another unit replaces lost the renamed file; a file renamed
// back to its own name was deleted by its approval; a folder renamed
// away whose copy was then deleted, or a copied-up file renamed over,
// made a false conflict of the unit at the old name; a file renamed
// over a folder left the folder's deletions as units that failed after
// it.)
func TestHeldRandomOperationsOnBackingFiles(t *testing.T) {
	heldRandomOnBackingFiles(t, 40, "")
}

// The same with mostly renames among few names: folders renamed, then
// names moved out of them, back in and onto their old names. (A rename
// out of a folder renamed before took its name in the agent's tree for
// its backing origin: approve --all failed with a conflict, for ever.)
func TestHeldRandomRenamesOnBackingFiles(t *testing.T) {
	heldRandomOnBackingFiles(t, 30, " renames")
}

// heldRandomOnBackingFiles runs seeds 1 to n of the agent's operations
// (heldOps with more) over a backing tree and approves them all.
func heldRandomOnBackingFiles(t *testing.T, n int, more string) {
	e, base, view, ops := heldRandomEnv(t)
	for seed := 1; seed <= n; seed++ {
		at := []string{"main", "view"}[seed%2]
		plain := filepath.Join(base, "plain-backing"+strings.TrimSpace(more)+strconv.Itoa(seed))
		must(t, os.Mkdir(plain, 0o777))
		must(t, os.Chmod(plain, 0o777))
		must(t, os.Chown(plain, 1001, 1001))
		// One folder, emptied between seeds behind the mount and after a
		// reject: whatever the layer kept of an earlier seed (a copy it
		// left unchanged, a folder copy holding nothing) would show.
		sub := "s"
		back := e.b("d", sub)
		sh(t, binPath+" review reject --all -c "+e.cfg+" >/dev/null; rm -rf "+back)
		must(t, os.Mkdir(back, 0o777))
		must(t, os.Chmod(back, 0o777))
		must(t, os.Chown(back, 1001, 1001))
		// No hard links between backing files: the layer copies up the
		// name written, and the file's other backing names stay the
		// backing file (README, "Hard links"), where on the plain
		// folder they would see the write.
		ops(plain, seed+100, 200, " nolink")
		ops(back, seed+100, 200, " nolink")
		before := manifestAll(t, 1001, back)
		mnt := e.m("d", sub)
		if at == "view" {
			mnt = filepath.Join(view, "d", sub)
		}
		if want, got := ops(plain, seed, 300, more), ops(mnt, seed, 300, more); got != want {
			t.Errorf("seed %d in the %s mount: outcomes differ from a plain folder:\n%s", seed, at, firstDiff(want, got))
			continue
		}
		if tree, wantTree := manifestAll(t, 1001, mnt), manifestAll(t, 1001, plain); tree != wantTree {
			t.Errorf("seed %d: the %s mount differs from the plain folder:\n%s", seed, at, firstDiff(wantTree, tree))
		}
		if now := manifestAll(t, 1001, back); now != before {
			t.Errorf("seed %d: held writes reached the backing folder:\n%s", seed, firstDiff(before, now))
		}
		if out, err := run(t, 0, binPath+" review approve --all -c "+e.cfg); err != nil {
			t.Errorf("seed %d: approve --all: %v\n%s", seed, err, out)
		}
		if tree, plainTree := manifestAll(t, 0, back), manifestAll(t, 0, plain); tree != plainTree {
			t.Errorf("seed %d: after approve --all the backing folder differs from the plain folder:\n%s", seed, firstDiff(plainTree, tree))
		}
	}
}
