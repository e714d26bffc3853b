package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// opcodes counts the requests of each opcode in a -debug log after the
// LOOKUP of the marker name from (the whole log when from is "").
func opcodes(log, from string) map[string]int {
	if from != "" {
		i := strings.Index(log, `\"`+from+`\"`)
		if i < 0 {
			return nil
		}
		log = log[i:]
	}
	c := map[string]int{}
	for _, m := range regexp.MustCompile(`\brx \d+: ([A-Z_0-9]+)`).FindAllStringSubmatch(log, -1) {
		c[m[1]]++
	}
	return c
}

// debugLogUpTo waits until the daemon's log shows the LOOKUP of a marker
// name looked up at path (as uid), so everything logged before is in it.
func debugLogUpTo(t *testing.T, e *env, uid int, path string) string {
	t.Helper()
	run(t, uid, "stat "+path+" 2>/dev/null")
	name := filepath.Base(path)
	eventually(t, 10*time.Second, "the daemon's log of the LOOKUP of "+name, func() bool {
		return strings.Contains(e.stderr.String(), `\"`+name+`\"`)
	})
	return e.stderr.String()
}

// A view (every caller gets the same listing) answers the first OPENDIR
// with ENOSYS, so the kernel sends no more OPENDIR and
// RELEASEDIR, and lists folders with READDIR alone (fs/dirlist.go). Every
// tool must still see what the backing folder holds, also after changes
// through the mount and behind it, and while listings are read in chunks.
func TestListingsWithoutOpendirMatchTheBackingFolder(t *testing.T) {
	// A view of owner, so that root (the test) may use it.
	view := filepath.Join(sharedTempDir(t), "view")
	must(t, os.Mkdir(view, 0o755))
	e := newDebugEnv(t, viewTOML("owner", view), src{slug: "data"})
	b, m := e.b("data"), filepath.Join(view, "data")
	// A tree with a folder big enough to be listed in several chunks,
	// and a git checkout.
	sh(t, fmt.Sprintf(`cd %s && mkdir -p big tree/a/b tree/c && for i in $(seq 1 1500); do echo $i > big/file-with-a-longish-name-$i; done
echo x > tree/a/b/f && echo y > tree/c/g && ln -s a tree/l
git init -q repo && cd repo && echo a > a && mkdir d && echo b > d/b && git add -A && git -c user.name=t -c user.email=t@x commit -q -m a && echo changed > a && echo new > d/new`, b))
	e.offersNoOpendir(t)
	same := func(what, script string) {
		t.Helper()
		want := sh(t, strings.ReplaceAll(script, "DIR", b))
		got := sh(t, strings.ReplaceAll(script, "DIR", m))
		if got != want {
			w, g := filepath.Join(t.TempDir(), "want"), filepath.Join(t.TempDir(), "got")
			writeFile(t, w, want, 0o644)
			writeFile(t, g, got, 0o644)
			d, _ := run(t, 0, "diff "+w+" "+g+" | head -20")
			t.Errorf("%s on the mount differs from the backing folder:\n%s", what, d)
		}
	}
	check := func() {
		t.Helper()
		same("find", "cd DIR && find . | sort")
		// Link counts left out: a view shows folders with one link (counts must not tell of hidden subfolders).
		same("ls -lR", "cd DIR && ls -lR --time-style=+%s tree repo | grep -v '^total' | awk '{$2=\"\"; print}'")
		same("ls -f big | wc -l", "ls -f DIR/big | sort | md5sum")
		same("git status", "git -c safe.directory='*' -C DIR/repo status --porcelain")
	}
	for range 2 { // cold, then from the kernel's listing cache
		check()
	}
	// Changes through the mount and behind it.
	sh(t, "rm "+m+"/big/file-with-a-longish-name-7 && touch "+m+"/tree/a/new && mkdir "+m+"/tree/c/sub")
	check()
	sh(t, "rm "+b+"/big/file-with-a-longish-name-8 && touch "+b+"/tree/a/behind && rmdir "+b+"/tree/c/sub")
	eventually(t, 5*time.Second, "changes behind the mount to show in its listings", func() bool {
		l1, _ := os.ReadDir(filepath.Join(m, "tree", "a"))
		l2, _ := os.ReadDir(filepath.Join(m, "big"))
		l3, _ := os.ReadDir(filepath.Join(m, "tree", "c"))
		return len(l1) == 3 && len(l2) == 1498 && len(l3) == 1
	})
	check()
	// A reader that stops early, then a full listing of the same folder.
	sh(t, "ls -f "+m+"/big | head -3 >/dev/null; python3 -c 'import os,sys; d=os.scandir(sys.argv[1]); next(d); d.close()' "+m+"/big")
	same("ls -f big after partial reads", "ls -f DIR/big | sort | md5sum")
	// seekdir into the middle of a listing (telldir/seekdir through Python's
	// os.listdir would not; use the C library via ctypes).
	same("telldir/seekdir", `python3 -c '
import ctypes, ctypes.util, sys
c = ctypes.CDLL(ctypes.util.find_library("c"))
c.opendir.restype = ctypes.c_void_p; c.readdir.restype = ctypes.c_void_p
c.readdir.argtypes = [ctypes.c_void_p]; c.telldir.argtypes = [ctypes.c_void_p]; c.telldir.restype = ctypes.c_long
c.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]; c.closedir.argtypes = [ctypes.c_void_p]
class D(ctypes.Structure): _fields_ = [("ino", ctypes.c_ulong), ("off", ctypes.c_long), ("reclen", ctypes.c_ushort), ("type", ctypes.c_ubyte), ("name", ctypes.c_char * 256)]
d = c.opendir(sys.argv[1].encode())
names = []
for i in range(700): names.append(ctypes.cast(c.readdir(d), ctypes.POINTER(D)).contents.name)
pos = c.telldir(d)
rest = []
while True:
    p = c.readdir(d)
    if not p: break
    rest.append(ctypes.cast(p, ctypes.POINTER(D)).contents.name)
c.seekdir(d, pos)
again = []
while True:
    p = c.readdir(d)
    if not p: break
    again.append(ctypes.cast(p, ctypes.POINTER(D)).contents.name)
print(len(names) + len(rest), rest == again)
c.closedir(d)' DIR/big`)
	log := debugLogUpTo(t, e, 0, m+"/marker-end")
	if n := opcodes(log, "")["OPENDIR"]; n > 1 {
		t.Errorf("%d OPENDIR requests: want at most the first (answered ENOSYS)", n)
	}
	if n := opcodes(log, "")["RELEASEDIR"]; n > 0 {
		t.Errorf("%d RELEASEDIR requests: want none", n)
	}
	// rm -rf through the mount empties the backing folder.
	sh(t, "rm -rf "+m+"/tree "+m+"/big "+m+"/repo")
	if ents, err := os.ReadDir(b); err != nil || len(ents) != 0 {
		t.Errorf("after rm -rf through the mount the backing folder holds %v (%v)", ents, err)
	}
	if ents, err := os.ReadDir(m); err != nil || len(ents) != 0 {
		t.Errorf("after rm -rf the mount lists %v (%v)", ents, err)
	}
}

// A view serves its listings without OPENDIR too, decided once as its
// principal: denied names stay out of every listing, a stranger who never
// saw a folder's listing is refused it, and the main mount (rules that
// differ by principal) keeps asking the daemon at each opendir.
func TestViewListingsWithoutOpendirHideDeniedNames(t *testing.T) {
	view, data := agentViewData(t)
	e := newDebugEnv(t, policyTOML+viewTOML("agent", view), src{slug: "data", path: data})
	e.offersNoOpendir(t)
	v := filepath.Join(view, "data")
	// Link counts and sizes of folders differ (hidden names are not
	// counted); names and modes must not.
	list := "cd DIR && find . -printf '%M %p\\n' | sort"
	// What the agent may see: the backing tree without what the rules
	// hide from it (agentData's secrets/ and mixed/hidden/).
	want := sh(t, strings.ReplaceAll(list, "DIR", data)+" | grep -v -e secrets -e hidden")
	for i := range 3 {
		got := agent(t, strings.ReplaceAll(list, "DIR", v))
		if got != want || !strings.Contains(got, "public") {
			t.Errorf("round %d: find in the view lists:\n%s\nwant:\n%s", i, got, want)
		}
		ls, err := run(t, 1001, "ls -lR "+v+" 2>&1")
		if err != nil || strings.Contains(ls, "secrets") || strings.Contains(ls, "hidden") || !strings.Contains(ls, "p.txt") {
			t.Errorf("round %d: ls -lR in the view: %v\n%s", i, err, ls)
		}
	}
	// A file made behind the mount shows in the view's kept listing.
	writeFile(t, filepath.Join(data, "public", "later.txt"), "later\n", 0o644)
	eventually(t, 5*time.Second, "a file made behind the mount to show in the view", func() bool {
		return strings.Contains(agent(t, "ls "+v+"/public"), "later.txt")
	})
	// A stranger (root bypasses the view's 0700 top) is refused a listing
	// the agent never read: it reaches the daemon, which decides. (What
	// the kernel keeps for the agent — names, attributes, listings it
	// read — root, which may read the backing folder anyway, can read.)
	must(t, os.Mkdir(filepath.Join(data, "public", "unlisted"), 0o777))
	eventually(t, 5*time.Second, "a folder made behind the mount to show in the view", func() bool {
		_, err := run(t, 1001, "stat "+v+"/public/unlisted")
		return err == nil
	})
	if out, err := run(t, 0, "ls "+v+"/public/unlisted 2>&1"); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("root lists a view folder the agent never listed: %v %s", err, out)
	}
	vlog := debugLogUpTo(t, e, 1001, v+"/marker-view")
	// The main mount has rules for the agent only: it keeps OPENDIR.
	sh(t, "ls "+e.m("data")+" "+e.m("data", "public")+" >/dev/null; ls "+e.m("data")+" >/dev/null")
	all := debugLogUpTo(t, e, 0, e.m("data", "marker-main"))
	main := opcodes(all, "marker-view")
	if main["OPENDIR"] < 3 || main["RELEASEDIR"] < 3 {
		t.Errorf("the main mount (rules by principal) sent %d OPENDIR and %d RELEASEDIR for 3 opendirs; want each", main["OPENDIR"], main["RELEASEDIR"])
	}
	// The view: one OPENDIR at most (the first, answered ENOSYS) over
	// three rounds of find and ls -lR; the main mount's start sent none.
	if n := opcodes(vlog, "")["OPENDIR"]; n > 1 {
		t.Errorf("the view sent %d OPENDIR for its listings: want at most 1", n)
	}
}

// briefTOML decides names under walk/ per principal: the agent (uid 1001)
// may not see walk/**/hid*, alice (uid 1002) nothing of walk/d5/. In the
// main mount those names are never cached by the kernel, and their
// READDIRPLUS entries are brief (node id 0, no stat; fs/dir.go).
const briefTOML = `
[[principal]]
name = "agent"
uids = [1001]

[[principal]]
name = "alice"
uids = [1002]

[[rule]]
uri = "data://walk/**/hid*"
who = ["agent"]
deny = ["read", "write"]

[[rule]]
uri = "data://walk/d5/**"
who = ["alice"]
deny = ["read", "write"]
`

// Listings whose entries carry no attributes (names decided per principal
// in the main mount) must not tell: each caller lists what it may see,
// with the backing files' types and inode numbers, stat and ls -l show
// their attributes, a name hidden from a caller never shows to it, and
// changes behind the mount show.
func TestBriefListingsStayTrue(t *testing.T) {
	view := filepath.Join(sharedTempDir(t), "agentview")
	must(t, os.Mkdir(view, 0o755))
	data := sharedTempDir(t)
	os.Chmod(data, 0o777)
	for d := 1; d <= 6; d++ {
		dir := filepath.Join(data, "walk", fmt.Sprintf("d%d", d))
		for f := 1; f <= 4; f++ {
			writeFile(t, filepath.Join(dir, fmt.Sprintf("f%d.txt", f)), strings.Repeat("x", d*10+f), 0o644)
		}
		writeFile(t, filepath.Join(dir, "hid-"+canary), canary+"\n", 0o666)
		must(t, os.Symlink("f1.txt", filepath.Join(dir, "link")))
		must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
		writeFile(t, filepath.Join(dir, "sub", "deep.txt"), "deep\n", 0o600)
	}
	sh(t, "chmod -R a+rwX "+data+"/walk")
	e := newEnv(t, briefTOML+viewTOML("agent", view), src{slug: "data", path: data})
	b := filepath.Join(data, "walk")
	hide := map[int]string{0: "", 1001: " | grep -v hid-", 1002: " | grep -v -E '(^|/| )d5(/| |$)'"}
	scandir := `python3 -c '
import os, sys
def walk(d, rel):
    for e in sorted(os.scandir(d), key=lambda e: e.name):
        r = rel + "/" + e.name
        print(r, e.inode(), "d" if e.is_dir(follow_symlinks=False) else "l" if e.is_symlink() else "f")
        if e.is_dir(follow_symlinks=False):
            walk(e.path, r)
walk(sys.argv[1], ".")' DIR`
	checks := []string{
		"cd DIR && find . | sort",
		"cd DIR && find . -type f | sort",
		"cd DIR && find . -type l | sort",
		scandir + " | sort",
		"cd DIR && stat -c '%n %s %a %u %g %i %Y %F' d*/* d*/sub/* | sort",
		"cd DIR && ls -lnR --time-style=+%s . | grep -v -e ^total -e ^d", // folders show one link and a fixed size under rules (hideCounts)
		"cd DIR && find . -type f | sort | xargs cat | md5sum",
	}
	check := func(where, m string, uid int) {
		t.Helper()
		for _, c := range checks {
			if uid == 1002 && strings.Contains(c, "ls -lnR") {
				continue // d5's block in the backing's listing is not one line to leave out
			}
			want := sh(t, strings.ReplaceAll(c, "DIR", b)+hide[uid])
			if strings.Contains(c, "md5sum") {
				want = sh(t, "cd "+b+" && find . -type f"+hide[uid]+" | sort | xargs cat | md5sum")
			}
			got, _ := run(t, uid, strings.ReplaceAll(c, "DIR", m))
			if uid == 1001 && strings.Contains(got, canary) {
				t.Errorf("%s, uid %d: %s shows a name hidden from it:\n%s", where, uid, c, got)
			}
			if got != want {
				t.Errorf("%s, uid %d: %s gives\n%s\nwant\n%s", where, uid, c, got, want)
			}
		}
	}
	main := e.m("data", "walk")
	for round := range 2 { // cold, then with what the kernel keeps
		for _, uid := range []int{1001, 0, 1002} {
			check(fmt.Sprintf("main mount, round %d", round), main, uid)
		}
		check(fmt.Sprintf("view, round %d", round), filepath.Join(view, "data", "walk"), 1001)
	}
	// Changes behind the mount show, to every caller.
	sh(t, "cd "+b+"/d5 && echo more >> f1.txt && chmod 600 f2.txt && rm f3.txt && echo new > new.txt && echo "+canary+" > hid-new && chmod a+rw new.txt hid-new")
	ls := "cd DIR/d5 && ls -lan --time-style=+%s | grep -v -e ^total -e ^d"
	for _, c := range []struct {
		m   string
		uid int
	}{{main, 0}, {main, 1001}, {filepath.Join(view, "data", "walk"), 1001}} {
		want := sh(t, strings.ReplaceAll(ls, "DIR", b)+hide[c.uid])
		var got string
		deadline := time.Now().Add(5 * time.Second)
		for got != want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			got, _ = run(t, c.uid, strings.ReplaceAll(ls, "DIR", c.m))
		}
		if got != want {
			t.Errorf("uid %d: ls -l of %s after changes behind the mount:\n%s\nwant\n%s", c.uid, c.m, got, want)
		}
	}
	if out, err := run(t, 1002, "ls "+main+"/d5 2>&1"); err == nil || strings.Contains(out, "f1.txt") {
		t.Errorf("alice lists walk/d5, hidden from her: %v %s", err, out)
	}
}
