package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The daemon keeps "no such attribute" answers per node (fs/xattrcache.go):
// `ls -l` asks every name for security.selinux, and a caller that does
// not own a file makes the kernel ask for its ACL. Whatever it keeps, the
// mount must answer every extended-attribute and ACL question as the
// backing folder does, right after a change through the mount and soon
// after one behind it, for every kind of change that can make an absent
// attribute exist: setxattr, setfacl, a file replaced by rename, a file
// made anew where a default ACL applies, a chmod of a file with an ACL.
func TestAbsentExtendedAttributesFollowTheDisk(t *testing.T) {
	requireFUSE(t)
	requireACL(t)
	e := newEnv(t, "", src{slug: "data"})
	b, m := e.b("data"), e.m("data")
	must(t, os.Chmod(b, 0o777))
	for _, f := range []string{"a.txt", "b.txt", "c.txt", "swap.txt"} {
		writeFile(t, filepath.Join(b, f), "text\n", 0o644)
	}
	must(t, os.Mkdir(filepath.Join(b, "d"), 0o777))
	// attrs prints what getfattr and getfacl say of each name under
	// root, as uid.
	attrs := func(uid int, root string) string {
		out, _ := run(t, uid, fmt.Sprintf(`cd %q && for f in a.txt b.txt c.txt swap.txt made.txt d d/new.txt; do
  [ -e "$f" ] || continue
  echo "== $f"; /usr/bin/python3 -c "$XATTRS" "$f"
  getfacl -cp "$f" 2>/dev/null | grep -v '^$'
done`, root), "XATTRS="+xattrsPy)
		return out
	}
	setfattr := func(path, name, value string) {
		t.Helper()
		py := "import os, sys; os.setxattr(sys.argv[1], sys.argv[2], sys.argv[3].encode())"
		if value == "" {
			py = "import os, sys; os.removexattr(sys.argv[1], sys.argv[2])"
		}
		if out, err := run(t, 0, `/usr/bin/python3 -c "$PY" "$F" "$N" "$V"`, "PY="+py, "F="+path, "N="+name, "V="+value); err != nil {
			t.Fatalf("setxattr %s %s: %v %s", path, name, err, out)
		}
	}
	// same waits until the mount answers as the backing folder, as uid.
	same := func(uid int, what string, at time.Duration) {
		t.Helper()
		var got, want string
		deadline := time.Now().Add(at)
		for {
			want, got = noLabelSupport(attrs(uid, b)), attrs(uid, m)
			if got == want || !time.Now().Before(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		ok := got == want && strings.Contains(got, "== a.txt")
		if !ok {
			t.Errorf("%s: the mount answers\n%s\nthe backing folder\n%s", what, got, want)
		}
	}
	// cat reports whether uid may read name on the mount.
	cat := func(uid int, name string) bool {
		_, err := run(t, uid, "cat "+filepath.Join(m, name))
		return err == nil
	}
	// Ask twice, as root and as a caller that owns nothing, so every
	// absence is kept.
	for range 2 {
		same(0, "at first", time.Second)
		same(1001, "at first, uid 1001", time.Second)
		if !cat(1001, "a.txt") {
			t.Fatal("uid 1001 cannot read a world-readable file")
		}
	}

	// Through the mount: seen at once.
	setfattr(filepath.Join(m, "a.txt"), "user.tag", "mount")
	same(0, "after setfattr through the mount", 0)
	sh(t, "setfacl -m u:1001:--- "+filepath.Join(m, "b.txt"))
	same(0, "after setfacl through the mount", 0)
	if cat(1001, "b.txt") {
		t.Error("uid 1001 reads a file an ACL set through the mount denies it")
	}
	sh(t, "chmod 0604 "+filepath.Join(m, "b.txt"))
	same(0, "after chmod of a file with an ACL through the mount", 0)
	sh(t, "setfacl -d -m u:1001:--- "+filepath.Join(m, "d")+" && echo n > "+filepath.Join(m, "d", "new.txt"))
	same(0, "after a file made under a default ACL through the mount", 0)
	setfattr(filepath.Join(m, "a.txt"), "user.tag", "")
	same(0, "after setfattr -x through the mount", 0)
	// A file made through the mount is known to have no capabilities
	// (the kernel asks at its first write); giving it some, through the
	// mount or behind it, shows.
	setcap := func(path string) {
		t.Helper()
		py := "import os, struct, sys; os.setxattr(sys.argv[1], 'security.capability', struct.pack('<5I', 0x02000001, 1 << 13, 0, 0, 0))"
		if out, err := run(t, 0, `/usr/bin/python3 -c "$PY" "$F"`, "PY="+py, "F="+path); err != nil {
			t.Fatalf("setting security.capability on %s: %v %s", path, err, out)
		}
	}
	sh(t, "echo made > "+filepath.Join(m, "made.txt"))
	same(0, "after a file made and written through the mount", 0)
	setcap(filepath.Join(m, "made.txt"))
	same(0, "after capabilities given through the mount to a file made there", 0)
	setfattr(filepath.Join(m, "made.txt"), "security.capability", "")
	sh(t, "rm "+filepath.Join(m, "made.txt")+" && echo made > "+filepath.Join(m, "made.txt"))
	setcap(filepath.Join(b, "made.txt"))
	same(0, "after capabilities given behind the mount to a file just made through it", 5*time.Second)

	// Behind the mount: seen once the watcher reports it.
	setfattr(filepath.Join(b, "c.txt"), "user.tag", "disk")
	same(0, "after setfattr behind the mount", 5*time.Second)
	sh(t, "setfacl -m u:1001:--- "+filepath.Join(b, "c.txt"))
	same(0, "after setfacl behind the mount", 5*time.Second)
	eventually(t, 5*time.Second, "an ACL set behind the mount to deny uid 1001", func() bool { return !cat(1001, "c.txt") })
	writeFile(t, filepath.Join(b, "swap.new"), "new\n", 0o644)
	setfattr(filepath.Join(b, "swap.new"), "user.tag", "swapped")
	sh(t, "setfacl -m u:1001:--- "+filepath.Join(b, "swap.new")+" && mv "+filepath.Join(b, "swap.new")+" "+filepath.Join(b, "swap.txt"))
	same(0, "after a file replaced by rename behind the mount", 5*time.Second)
	same(1001, "after a file replaced by rename behind the mount, uid 1001", 5*time.Second)
	eventually(t, 5*time.Second, "the replacing file's ACL to deny uid 1001", func() bool { return !cat(1001, "swap.txt") })
	if got := attrs(0, m); !strings.Contains(got, "user.tag=swapped") {
		t.Errorf("the mount does not show the replacing file's attribute:\n%s", got)
	}
}

// xattrsPy prints a name's extended attributes (not following a symlink)
// and, for four names, whether each exists.
const xattrsPy = `
import os, sys
p = sys.argv[1]
try:
    for n in sorted(os.listxattr(p, follow_symlinks=False)):
        v = os.getxattr(p, n, follow_symlinks=False)
        print(n + "=" + (v.decode() if n.startswith("user.") else str(len(v))))
except OSError as e:
    print("listxattr:", e.strerror)
for n in ("user.tag", "security.selinux", "system.posix_acl_access", "security.capability"):
    try:
        os.getxattr(p, n, follow_symlinks=False)
        print("has", n)
    except OSError as e:
        print("no", n, e.strerror)
`

// Kept absences and held writes: an attribute the agent sets is held (in
// its layer), so everyone else keeps getting "no such attribute" —
// through the main mount, where the same node serves both — while the
// agent sees its value at once; once a person approves the change, every
// caller sees it.
func TestAbsentExtendedAttributesAndHeldWrites(t *testing.T) {
	e, view := heldEdgeEnv(t, "echo x > f.txt && echo y > g.txt && chmod 0666 f.txt g.txt")
	get := func(uid int, path string) string {
		out, _ := run(t, uid, `/usr/bin/python3 -c 'import os, sys
try: print(os.getxattr(sys.argv[1], "user.tag").decode())
except OSError as e: print(e.strerror)' "$F"`, "F="+path)
		return strings.TrimSpace(out)
	}
	main := e.m("d", "f.txt")
	for range 2 { // kept after the first
		if got := get(0, main); got != "No data available" {
			t.Fatalf("root, before: %q", got)
		}
		if got := get(1001, main); got != "No data available" {
			t.Fatalf("agent, before: %q", got)
		}
	}
	if out, err := run(t, 1001, `/usr/bin/python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.tag", b"held")' "$F"`, "F="+main); err != nil {
		t.Fatalf("agent setxattr: %v %s", err, out)
	}
	if got := get(1001, main); got != "held" {
		t.Errorf("the agent does not see its held attribute in the main mount: %q", got)
	}
	if got := get(1001, filepath.Join(view, "f.txt")); got != "held" {
		t.Errorf("the agent does not see its held attribute in its view: %q", got)
	}
	if got := get(0, main); got != "No data available" {
		t.Errorf("root sees the agent's held attribute: %q", got)
	}
	if got := get(0, e.b("d", "f.txt")); got != "No data available" {
		t.Errorf("the held attribute reached the backing file: %q", got)
	}
	// A rejected attribute is gone for the agent too: it sees the
	// backing file again, and what was kept of it.
	g := e.m("d", "g.txt")
	for _, uid := range []int{0, 1001, 0, 1001} {
		if got := get(uid, g); got != "No data available" {
			t.Fatalf("uid %d, g.txt before: %q", uid, got)
		}
	}
	if out, err := run(t, 1001, `/usr/bin/python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.tag", b"no")' "$F"`, "F="+g); err != nil {
		t.Fatalf("agent setxattr g.txt: %v %s", err, out)
	}
	if got := get(1001, g); got != "no" {
		t.Errorf("the agent does not see its held attribute on g.txt: %q", got)
	}
	sh(t, binPath+" review reject d://g.txt -c "+e.cfg)
	eventually(t, 5*time.Second, "the agent to see g.txt without the rejected attribute", func() bool { return get(1001, g) == "No data available" })
	if got := get(0, g); got != "No data available" {
		t.Errorf("root, g.txt after the reject: %q", got)
	}
	sh(t, binPath+" review approve --all -c "+e.cfg)
	eventually(t, 5*time.Second, "root to see the approved attribute", func() bool { return get(0, main) == "held" })
	if got := get(0, e.b("d", "f.txt")); got != "held" {
		t.Errorf("the approved attribute is not on the backing file: %q", got)
	}
}

// noLabelSupport is what the mount says where the backing folder says a
// file has no security label: that it carries none (fs/label.go), where
// SELinux is off.
func noLabelSupport(backing string) string {
	if _, err := os.Stat("/sys/fs/selinux/enforce"); err == nil {
		return backing
	}
	return strings.ReplaceAll(backing, "no security.selinux No data available", "no security.selinux Operation not supported")
}

// ls -l asks every name it lists for its security label (lgetxattr
// security.selinux), and the kernel keeps no answer of the filesystem's.
// The mount answers a label that is not there with EOPNOTSUPP, after
// which ls asks the device no more: a listing of 300 names costs one
// such question, not 300. A label that is there is read as before, and
// every other absent name still answers ENODATA, as on the backing
// folder.
func TestLsAsksTheMountForOneLabelAListing(t *testing.T) {
	requireFUSE(t)
	if _, err := os.Stat("/sys/fs/selinux/enforce"); err == nil {
		t.Skip("SELinux is on: it answers for the mount's labels itself, and the mount keeps ENODATA")
	}
	// Made before the mount: nothing the watcher reports meanwhile.
	back := t.TempDir()
	must(t, os.Mkdir(filepath.Join(back, "d"), 0o755))
	for i := range 300 {
		writeFile(t, filepath.Join(back, "d", fmt.Sprintf("f%03d", i)), "x\n", 0o644)
	}
	const label = "system_u:object_r:etc_t:s0"
	// A label that is there (root may set one without SELinux on ext4 and
	// tmpfs); the rest of the test holds without it.
	labelled := unix.Lsetxattr(filepath.Join(back, "d", "f007"), "security.selinux", []byte(label), 0) == nil
	if !labelled {
		t.Log("the backing folder takes no security label: only missing ones are asked")
	}
	e := newEnv(t, "\n[metrics]\nlisten = \"127.0.0.1:0\"\n", src{slug: "data", path: back})
	var addr []string
	eventually(t, 10*time.Second, "the daemon logs the metrics address", func() bool {
		addr = regexp.MustCompile(`msg="serving metrics" listen=(\S+)`).FindStringSubmatch(e.stderr.String())
		return addr != nil
	})
	getxattrs := func() uint64 { return requests(scrape(t, "http://"+addr[1]+"/metrics"), "GETXATTR") }
	buf := make([]byte, 256)
	if n, err := unix.Lgetxattr(e.m("data", "d", "f007"), "security.selinux", buf); labelled && (err != nil || string(buf[:n]) != label) {
		t.Errorf("a label that is there: got %q, %v; want %q", buf[:max(n, 0)], err, label)
	}
	if _, err := unix.Lgetxattr(e.m("data", "d", "f008"), "security.selinux", buf); err != unix.EOPNOTSUPP {
		t.Errorf("a label that is not there: %v; want EOPNOTSUPP", err)
	}
	for _, name := range []string{"user.tag", "security.capability", "system.posix_acl_access"} {
		_, back := unix.Lgetxattr(e.b("data", "d", "f008"), name, buf)
		if _, err := unix.Lgetxattr(e.m("data", "d", "f008"), name, buf); err != back {
			t.Errorf("%s: the mount answers %v, the backing folder %v", name, err, back)
		}
	}
	for round := range 2 {
		before := getxattrs()
		out, err := run(t, 0, "ls -l "+e.m("data", "d")+" | wc -l")
		if err != nil || strings.TrimSpace(out) != "301" {
			t.Fatalf("ls -l: %v %q; want 300 names and the total", err, out)
		}
		// The first listing asks each name for its ACL once (the kernel
		// keeps the answers); the label question is asked once a listing.
		// (Answering ENODATA, ls asked for 300 labels each time.)
		want := uint64(5)
		if round == 0 {
			want += 300
		}
		if d := getxattrs() - before; d > want {
			t.Errorf("round %d: ls -l of 300 names sent %d GETXATTR; want at most %d", round, d, want)
		}
	}
}
