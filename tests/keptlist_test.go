package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// keptTOML decides names per principal in the main mount: the agent (uid
// 1001) may not see any name starting "hid", nor an x.txt below moved/.
// Folders holding no such name
// are listed alike for everyone, and the kernel may keep their listings
// (fs/keptlist.go); folders holding one are listed for each caller.
// The kernel's timeouts and the agent are reload_test.go's.
const keptTOML = reloadCaching + `
[[rule]]
uri = "data://**/hid*"
who = ["agent"]
deny = ["read", "write"]

[[rule]]
uri = "data://moved/**/x.txt"
who = ["agent"]
deny = ["read", "write"]
`

// keptEnv mounts a data source with pub/ (no hidden name), pub/sub/ and
// mixed/ (one hidden name), with the daemon's request trace on.
func keptEnv(t *testing.T) (e *env, b, m string) {
	data := sharedTempDir(t)
	os.Chmod(data, 0o777)
	for name, content := range map[string]string{
		"pub/a.txt":           "a\n",
		"pub/b.txt":           "b\n",
		"pub/sub/c.txt":       "c\n",
		"mixed/open":          "open\n",
		"mixed/hid-" + canary: canary + "\n",
	} {
		writeFile(t, filepath.Join(data, name), content, 0o666)
	}
	sh(t, "chmod -R a+rwX "+data)
	e = newDebugEnv(t, keptTOML, src{slug: "data", path: data})
	return e, data, e.m("data")
}

// requestsBetween counts the requests of each opcode the script (as uid)
// sends, between two marker lookups in dir (the daemon runs with -debug).
func requestsBetween(t *testing.T, e *env, dir string, uid int, script string) map[string]int {
	t.Helper()
	n := time.Now().UnixNano()
	from, to := fmt.Sprintf(".mark-a-%d", n), fmt.Sprintf(".mark-b-%d", n)
	debugLogUpTo(t, e, uid, filepath.Join(dir, from))
	run(t, uid, script)
	log := debugLogUpTo(t, e, uid, filepath.Join(dir, to))
	return opcodes(log[:strings.Index(log, `\"`+to+`\"`)], from)
}

// listings counts the READDIR and READDIRPLUS requests and the OPENDIRs
// the script's listings (as uid) send (requestsBetween).
func listings(t *testing.T, e *env, dir string, uid int, script string) (reads, opens int) {
	t.Helper()
	c := requestsBetween(t, e, dir, uid, script)
	return c["READDIR"] + c["READDIRPLUS"], c["OPENDIR"]
}

// In a main mount whose rules differ by principal, the kernel keeps the
// listing of a folder whose names are decided alike for everyone, and
// serves it to every caller; a folder with a name decided per principal
// is listed for each. Nothing hidden from the agent may reach it through
// a kept listing: not a name there from the start, not one that comes
// behind the mount or through it while the listing is kept. Everyone
// else sees every name, at once through the mount and within the
// watcher's latency behind it.
func TestKeptListingsInAMountWithRules(t *testing.T) {
	e, b, m := keptEnv(t)
	list := func(uid int, dir string) string {
		t.Helper()
		out, err := run(t, uid, "ls -a "+filepath.Join(m, dir))
		if err != nil {
			t.Fatalf("uid %d: ls %s: %v\n%s", uid, dir, err, out)
		}
		if uid == 1001 && strings.Contains(out, "hid") {
			t.Fatalf("the agent lists a hidden name in %s:\n%s", dir, out)
		}
		return out
	}
	want := func(uid int, dir string) string {
		t.Helper()
		s := "ls -a " + filepath.Join(b, dir)
		if uid == 1001 {
			s += " | grep -v '^hid'"
		}
		return sh(t, s)
	}
	check := func(what string) {
		t.Helper()
		for _, uid := range []int{0, 1001, 0, 1001} {
			for _, dir := range []string{"pub", "pub/sub", "mixed"} {
				if got, w := list(uid, dir), want(uid, dir); got != w {
					t.Errorf("%s: uid %d lists %s as\n%s\nwant\n%s", what, uid, dir, got, w)
				}
			}
		}
	}
	check("first listings")

	// Kept: listings of pub by either caller reach the kernel's copy.
	reads, opens := listings(t, e, filepath.Join(m, "pub"), 0, "ls "+m+"/pub; ls "+m+"/pub/sub; setpriv --reuid=1001 --regid=1001 --clear-groups ls "+m+"/pub "+m+"/pub/sub")
	if opens != 4 || reads != 0 {
		t.Errorf("four listings of folders with no hidden name sent %d OPENDIR and %d READDIR(PLUS); want 4 and 0 (kept listings)", opens, reads)
	}
	// Not kept: each listing of mixed asks the daemon.
	reads, opens = listings(t, e, filepath.Join(m, "pub"), 0, "ls "+m+"/mixed; setpriv --reuid=1001 --regid=1001 --clear-groups ls "+m+"/mixed")
	if opens != 2 || reads < 2 {
		t.Errorf("two listings of a folder with a hidden name sent %d OPENDIR and %d READDIR(PLUS); want 2 and at least 2", opens, reads)
	}

	// A hidden name comes into a kept folder behind the mount, and one
	// through it, with a name everyone sees beside each.
	sh(t, fmt.Sprintf("cd %s/pub && echo %s > hid-late && echo late > late.txt && chmod a+rw hid-late late.txt", b, canary))
	sh(t, fmt.Sprintf("cd %s/pub/sub && echo %s > hid-mine && echo mine > mine.txt", m, canary))
	if got := list(0, "pub/sub"); !strings.Contains(got, "hid-mine") || !strings.Contains(got, "mine.txt") {
		t.Errorf("the owner's listing right after its creates through the mount:\n%s", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := list(0, "pub")
		list(1001, "pub")
		list(1001, "pub/sub")
		if strings.Contains(got, "hid-late") && strings.Contains(got, "late.txt") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the owner does not list what came behind the mount within 5 s:\n%s", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	check("after hidden names came")
	// While pub holds a hidden name, nothing of it is kept.
	reads, _ = listings(t, e, filepath.Join(m, "pub"), 0, "ls "+m+"/pub; ls "+m+"/pub")
	if reads < 2 {
		t.Errorf("listings of a folder that got a hidden name sent %d READDIR(PLUS); want one each", reads)
	}

	// Once they are gone, the folders are kept again.
	sh(t, "rm "+b+"/pub/hid-late "+m+"/pub/sub/hid-mine")
	eventually(t, 5*time.Second, "the owner's listing without hid-late", func() bool {
		return !strings.Contains(list(0, "pub"), "hid-late")
	})
	check("after hidden names went")
	reads, _ = listings(t, e, filepath.Join(m, "pub"), 0, "ls "+m+"/pub; setpriv --reuid=1001 --regid=1001 --clear-groups ls "+m+"/pub")
	if reads != 0 {
		t.Errorf("listings of pub once its hidden names went sent %d READDIR(PLUS); want 0 (kept again)", reads)
	}
}

// A reload that hides a name in a folder whose listing the kernel keeps
// drops the kept listing: the agent's next listing, and a listing it
// rewinds on a folder it opened before the reload, no longer show it,
// while the owner still does. The same holds for a folder listed for
// each caller. Widening shows them again.
func TestReloadDropsKeptListings(t *testing.T) {
	e, _, m := keptEnv(t)
	cfg, err := os.ReadFile(e.cfg)
	must(t, err)
	base := string(cfg)
	pub := filepath.Join(m, "pub")
	for range 3 {
		for _, uid := range []int{0, 1001} {
			if out, _ := run(t, uid, "ls "+pub); !strings.Contains(out, "a.txt") {
				t.Fatalf("uid %d does not list pub/a.txt before the reload:\n%s", uid, out)
			}
		}
	}
	// The premise: pub's listing is kept, so what the reload must drop
	// is the kernel's copy.
	if reads, _ := listings(t, e, pub, 0, "ls "+pub+"; setpriv --reuid=1001 --regid=1001 --clear-groups ls "+pub); reads != 0 {
		t.Fatalf("pub's listing is not kept before the reload (%d READDIR(PLUS)); the test would not reach the reload's drop", reads)
	}
	// The agent opens pub (kept) and mixed (listed for each caller) and
	// lists them, then waits for the reload and lists the same open
	// folders again from their start.
	ready, goOn := filepath.Join(t.TempDir(), "ready"), filepath.Join(t.TempDir(), "go")
	os.Chmod(filepath.Dir(ready), 0o777)
	os.Chmod(filepath.Dir(goOn), 0o777)
	done := make(chan string, 1)
	go func() {
		out, err := run(t, 1001, fmt.Sprintf(`python3 -c '
import os, time
fds = [os.open(d, os.O_RDONLY | os.O_DIRECTORY) for d in (%q, %q)]
print("before", [sorted(os.listdir(fd)) for fd in fds])
open(%q, "w").close()
while not os.path.exists(%q):
    time.sleep(0.01)
print("after", [sorted(os.listdir(fd)) for fd in fds])
'`, pub, filepath.Join(m, "mixed"), ready, goOn))
		if err != nil {
			out += "\n" + err.Error()
		}
		done <- out
	}()
	eventually(t, 10*time.Second, "the agent's open of pub", func() bool { _, err := os.Stat(ready); return err == nil })

	// The kernel forgets the names it is not using (the folders stay
	// open), so the reload finds no entry of a.txt to drop: the kept
	// listing must be dropped as a whole.
	seen := len(e.stderr.String())
	sh(t, "sync; echo 2 > /proc/sys/vm/drop_caches")
	eventually(t, 5*time.Second, "the kernel to forget the names it does not use", func() bool {
		return strings.Contains(e.stderr.String()[seen:], "FORGET")
	})
	e.rewrite(base + `
[[rule]]
uri = "data://pub/a.txt"
who = ["agent"]
deny = ["read"]

[[rule]]
uri = "data://mixed/open"
who = ["agent"]
deny = ["read"]
`)
	if line := e.hup(); !strings.Contains(line, "msg=reloaded") {
		t.Fatalf("SIGHUP did not reload: %s", line)
	}
	writeFile(t, goOn, "", 0o644)
	out := <-done
	before, after, _ := strings.Cut(out, "\nafter")
	if !strings.Contains(before, "a.txt") || !strings.Contains(before, "'open'") {
		t.Errorf("the agent's listings before the reload miss a.txt or open:\n%s", out)
	}
	if strings.Contains(after, "a.txt") || !strings.Contains(after, "b.txt") || strings.Contains(after, "'open'") {
		t.Errorf("the agent's rewound listings of folders opened before the reload:\n%s", out)
	}
	for range 2 {
		if out, _ := run(t, 1001, "ls "+pub); strings.Contains(out, "a.txt") || !strings.Contains(out, "b.txt") {
			t.Errorf("the agent lists pub after the reload hid a.txt:\n%s", out)
		}
		if out := sh(t, "ls "+pub); !strings.Contains(out, "a.txt") {
			t.Errorf("the owner lists pub without a.txt after the reload:\n%s", out)
		}
	}

	e.rewrite(base)
	if line := e.hup(); !strings.Contains(line, "msg=reloaded") {
		t.Fatalf("SIGHUP did not reload: %s", line)
	}
	for range 3 {
		if out, _ := run(t, 1001, "ls "+pub); !strings.Contains(out, "a.txt") {
			t.Errorf("the agent does not list a.txt after widening:\n%s", out)
		}
	}
}

// In a main mount whose rules differ by principal, a settled file that no
// rule tells apart is served from the kernel's page cache as in a mount
// without rules (fs/pagecache.go): read again, it costs OPEN and RELEASE
// and neither READ nor GETATTR, for the owner and the agent alike. A
// change behind the mount shows at the next open, and a file a rule hides
// from the agent stays hidden from it whatever the owner's reads left in
// the kernel.
func TestPageCacheInAMountWithRules(t *testing.T) {
	e, b, m := keptEnv(t)
	pub, mixed := filepath.Join(m, "pub"), filepath.Join(m, "mixed")
	time.Sleep(settle)
	read := func(uid int, path string) string {
		t.Helper()
		out, _ := run(t, uid, "cat "+path+" 2>&1")
		return out
	}
	for range 3 { // first open passthrough, then cached, then pages kept
		for _, uid := range []int{0, 1001} {
			if got := read(uid, pub+"/a.txt"); got != "a\n" {
				t.Fatalf("uid %d reads pub/a.txt as %q", uid, got)
			}
		}
		if got := read(0, mixed+"/hid-"+canary); got != canary+"\n" {
			t.Fatalf("the owner reads the hidden file as %q", got)
		}
		if got := read(1001, mixed+"/hid-"+canary); strings.Contains(got, canary+"\n") || !strings.Contains(got, "No such file") {
			t.Fatalf("the agent reads the hidden file: %q", got)
		}
	}
	a := pub + "/a.txt"
	c := keptRequests(t, e, pub, 0, "cat "+a+"; setpriv --reuid=1001 --regid=1001 --clear-groups cat "+a+"; cat "+a)
	if c["OPEN"] != 3 || c["READ"] != 0 || c["GETATTR"] != 0 {
		t.Errorf("three reads of a settled file no rule tells apart sent %v; want 3 OPEN, no READ and no GETATTR", c)
	}
	writeFile(t, filepath.Join(b, "pub", "a.txt"), "A, changed and longer\n", 0o666)
	for _, uid := range []int{0, 1001} {
		if got := read(uid, pub+"/a.txt"); got != "A, changed and longer\n" {
			t.Errorf("uid %d reads pub/a.txt right after a change behind the mount as %q", uid, got)
		}
	}
	if got := read(1001, mixed+"/hid-"+canary); strings.Contains(got, canary+"\n") || !strings.Contains(got, "No such file") {
		t.Errorf("the agent reads the hidden file: %q", got)
	}
}

// A kept listing is decided for the folder's path: when a folder above it
// is renamed behind the mount to where a rule tells a name in it apart,
// the folder's own stamp does not move (renaming a parent changes nothing
// of the child), but its next open must not serve the listing kept under
// the old path.
func TestKeptListingFollowsItsFolderWhenAParentIsRenamed(t *testing.T) {
	e, b, m := keptEnv(t)
	for name, content := range map[string]string{"a/sub/x.txt": "x\n", "a/sub/y.txt": "y\n"} {
		writeFile(t, filepath.Join(b, name), content, 0o666)
	}
	sh(t, "chmod -R a+rwX "+b+"/a")
	sub := filepath.Join(m, "a", "sub")
	for range 3 {
		for _, uid := range []int{0, 1001} {
			if out, _ := run(t, uid, "ls "+sub); !strings.Contains(out, "x.txt") || !strings.Contains(out, "y.txt") {
				t.Fatalf("uid %d lists a/sub as %q before the rename", uid, out)
			}
		}
	}
	// a/sub was made after the mount started: it is kept once the
	// watcher has placed its watch.
	eventually(t, 5*time.Second, "a/sub to be kept before the rename", func() bool {
		reads, _ := listings(t, e, sub, 0, "ls "+sub)
		return reads == 0
	})
	// Through the mount the rename is refused (a folder may not carry
	// names across a rule boundary); behind it, nothing stops it.
	if out, err := run(t, 0, "mv "+filepath.Join(m, "a")+" "+filepath.Join(m, "moved")+" 2>&1"); err == nil {
		t.Fatalf("the rename across the rule's boundary went through the mount: %s", out)
	}
	moved := renameAroundAProcess(t, b, sub, filepath.Join(m, "moved", "sub"), 0)
	// The owner's first listing there is made for the new path: all of it.
	if out := sh(t, "ls "+moved); !strings.Contains(out, "x.txt") || !strings.Contains(out, "y.txt") {
		t.Errorf("the owner's first listing of moved/sub: %q", out)
	}
	agentHidden(t, moved)
	for range 3 {
		if out := sh(t, "ls "+moved); !strings.Contains(out, "x.txt") {
			t.Errorf("the owner lists moved/sub as %q", out)
		}
	}
}

// The same in a view, where the kernel keeps every listing and sends no
// OPENDIR at all: a folder whose parent is renamed behind the mount to
// where a rule hides a name in it must not show that name from the
// listing kept under the old path.
func TestViewListingFollowsItsFolderWhenAParentIsRenamed(t *testing.T) {
	view := filepath.Join(sharedTempDir(t), "agentview")
	must(t, os.Mkdir(view, 0o755))
	data := sharedTempDir(t)
	os.Chmod(data, 0o777)
	for name, content := range map[string]string{"a/sub/x.txt": "x\n", "a/sub/y.txt": "y\n"} {
		writeFile(t, filepath.Join(data, name), content, 0o666)
	}
	sh(t, "chmod -R a+rwX "+data)
	newEnv(t, keptTOML+viewTOML("agent", view), src{slug: "data", path: data})
	sub := filepath.Join(view, "data", "a", "sub")
	for range 3 {
		if out, _ := run(t, 1001, "ls "+sub); !strings.Contains(out, "x.txt") || !strings.Contains(out, "y.txt") {
			t.Fatalf("the agent lists a/sub in its view as %q before the rename", out)
		}
	}
	agentHidden(t, renameAroundAProcess(t, data, sub, filepath.Join(view, "data", "moved", "sub"), 1001))
}

// renameAroundAProcess renames a to moved in the backing folder b while a
// process of uid works in sub (a/sub on a mount) until the test ends, so
// its inode stays and the mount finds the same node at moved/sub
// (mounted, as uid may see it). It returns mounted once uid sees it there.
func renameAroundAProcess(t *testing.T, b, sub, mounted string, uid int) string {
	t.Helper()
	flags := t.TempDir()
	os.Chmod(flags, 0o777)
	ready, done := filepath.Join(flags, "ready"), filepath.Join(flags, "done")
	held := make(chan struct{})
	go func() {
		run(t, uid, fmt.Sprintf("cd %s && touch %s && while [ ! -e %s ]; do sleep 0.05; done", sub, ready, done))
		close(held)
	}()
	t.Cleanup(func() {
		os.WriteFile(done, nil, 0o644)
		<-held
	})
	eventually(t, 10*time.Second, "the process to work in "+sub, func() bool {
		_, err := os.Stat(ready)
		return err == nil
	})
	sh(t, "mv "+filepath.Join(b, "a")+" "+filepath.Join(b, "moved"))
	eventually(t, 5*time.Second, "moved/sub on the mount", func() bool {
		out, _ := run(t, uid, "test -d "+mounted+" && echo yes")
		return strings.Contains(out, "yes")
	})
	return mounted
}

// agentHidden checks that x.txt in the folder dir, just moved behind the
// mount to where a rule hides it from the agent, is hidden from it: in
// listings and to stat and cat. What the kernel held of it under the old
// path may answer until the watcher reports the rename (its latency, as
// for every change behind the mount); from then on, never.
func agentHidden(t *testing.T, dir string) {
	t.Helper()
	script := "ls " + dir + " 2>&1; stat -c %n " + dir + "/x.txt 2>&1; cat " + dir + "/x.txt 2>&1"
	hidden := func(out string) bool {
		return !strings.Contains(out, "x.txt\n") && strings.Contains(out, "y.txt") && strings.Count(out, "No such file") == 2
	}
	eventually(t, 5*time.Second, "x.txt to be hidden from the agent in "+dir, func() bool {
		out, _ := run(t, 1001, script)
		return hidden(out)
	})
	for range 5 {
		if out, _ := run(t, 1001, script); !hidden(out) {
			t.Errorf("once hidden, the agent sees x.txt in %s again:\n%s", dir, out)
		}
	}
}
