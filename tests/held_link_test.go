package tests

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// heldLinkWorkload makes, writes through, unlinks and renames hard links
// (of new files, of backing files, across folders) and checks link counts
// and inode numbers as it goes, right after each link (a cached node of
// the backing file must not answer for its copy), and folders' link
// counts (2 plus their subfolders) as mkdir, rmdir and rename change
// them. It runs in the folder W.
const heldLinkWorkload = `set -e
cd "$W"
same() { test "$(stat -c %i "$1")" = "$(stat -c %i "$2")" || { echo "$1 and $2 are not one file"; exit 1; }; }
links() { test "$(stat -c %h "$1")" = "$2" || { echo "$1 has $(stat -c %h "$1") links, want $2"; exit 1; }; }
echo one > a
ln a b
links a 2; same a b
echo two >> b
test "$(cat a)" = "$(printf 'one\ntwo')"
cat bk > /dev/null
ln bk bkl
links bk 2; links bkl 2; same bk bkl
echo more >> bkl
grep -q more bk
ln sub/s s2
links sub/s 2; same sub/s s2
ln keep keepl
same keep keepl
mkdir nd && echo x > nd/x && ln nd/x y
links y 2; same nd/x y
ln a c
links b 3
rm a
links b 2; links c 2
mv c c2
links c2 2; same b c2
ln b sub/b3
links c2 3; same c2 sub/b3
chmod 0640 sub/b3
test "$(stat -c %a b)" = 640
ln y y2 && rm y2
links y 2
links tree 4
rmdir tree/t1
links tree 3
mkdir tree/t3 tree/t3/u
links tree 4; links tree/t3 3
mv tree/t2 nd/
links tree 3; links nd 3
mv tree/t3/u tree/u
links tree/t3 2; links tree 4
`

// linkManifest lists a tree with, per name, its type, link count, size,
// mode, content digest and the first name (in sorted order) of the file
// it is: inode numbers differ between folders, which names share one
// must not.
func linkManifest(tb testing.TB, uid int, dir string) string {
	tb.Helper()
	script := `cd "$W" && find . -mindepth 1 -printf '%i %p %y %n %s %m\n' | LC_ALL=C sort -k2 | while read -r ino p y n s m; do
  d=-; [ "$y" = f ] && d=$(sha256sum < "$p" | cut -c1-16)
  [ "$y" = d ] && n=-
  [ "$y" = d ] && s=-
  echo "$ino $p $y $n $s $m $d"
done | awk '{ if (!($1 in first)) first[$1] = $2; print $2, $3, $4, $5, $6, $7, "is", ($3 == "f" ? first[$1] : $2) }'`
	out, err := run(tb, uid, script, "W="+dir)
	if err != nil {
		tb.Fatalf("link manifest of %s: %v\n%s", dir, err, out)
	}
	return out
}

// Hard links made in a held folder behave as on a plain folder (one
// file, its link count, writes through one name seen through the others,
// unlink and rename keep the rest), in the agent's view and in the main
// mount, in a bubblewrap sandbox; approving one name takes the other
// names of its file with it, and approving lands them as one backing
// file, so the backing folder then is what the plain folder is, links
// included; revert undoes it. A link between a held and a direct name is
// EXDEV.
func TestHeldHardLinks(t *testing.T) {
	requireFUSE(t)
	base := sharedTempDir(t)
	view := filepath.Join(base, "view")
	must(t, os.Mkdir(view, 0o755))
	cfg := heldConfig(view) + `
[[rule]]
uri = "d://direct/**"
who = ["role:agent"]
allow = ["write"]
`
	e := newEnv(t, cfg, src{slug: "d"}, src{slug: "e"})
	seed := `set -e
cd "$D"
echo base > bk
mkdir sub direct tree tree/t1 tree/t2
echo s > sub/s
echo k > keep && ln keep keep-backing
chmod -R a+rwX . && chown -R 1001:1001 .
`
	sh(t, seed, "D="+e.b("d"))
	sh(t, seed, "D="+e.b("e"))
	plain := filepath.Join(base, "plain")
	sh(t, `cp -a "$B" "$P" && chmod 0777 "$P"`, "B="+e.b("d"), "P="+plain)
	before := linkManifest(t, 0, e.b("d"))
	box := func(dir string) string {
		return sandbox(dir, "/work") + " bash -c '" + strings.ReplaceAll(heldLinkWorkload, "'", `'\''`) + "'"
	}
	if out, err := run(t, 1001, box(plain), "W=/work"); err != nil {
		t.Fatalf("workload on a plain folder: %v\n%s", err, out)
	}
	want := linkManifest(t, 1001, plain)
	// keep has a backing name the layer cannot link (keep-backing): the
	// principal's copy is a file of its own until approved, and the
	// backing file still counts its backing name keep.
	wantHeld := editManifest(want, map[string]func(f []string){
		"./keep":         func(f []string) { f[2] = "2" },
		"./keepl":        func(f []string) { f[2] = "2" },
		"./keep-backing": func(f []string) { f[2], f[7] = "2", "./keep-backing" },
	})

	if out, err := run(t, 1001, box(view), "W=/work/d"); err != nil {
		t.Fatalf("workload in the view: %v\n%s", err, out)
	}
	if out, err := run(t, 1001, box(e.mnt), "W=/work/e"); err != nil {
		t.Fatalf("workload in the main mount: %v\n%s", err, out)
	}
	for _, at := range []string{filepath.Join(view, "d"), e.m("d"), e.m("e"), filepath.Join(view, "e")} {
		if got := linkManifest(t, 1001, at); got != wantHeld {
			t.Errorf("the agent's %s differs from the plain folder:\n--- held\n%s\n--- plain (keep's backing name apart)\n%s", at, got, wantHeld)
		}
	}
	for _, who := range []int{0, 1002} {
		if got := linkManifest(t, who, e.m("d")); got != before {
			t.Errorf("uid %d sees the agent's held links:\n%s", who, got)
		}
	}
	if got := linkManifest(t, 0, e.b("d")); got != before {
		t.Errorf("the backing folder changed:\n%s", got)
	}

	// A link between a held name and a direct one is EXDEV, both ways.
	for _, s := range []string{`ln "$M/b" "$M/direct/b"`, `echo d > "$M/direct/f" && ln "$M/direct/f" "$M/f"`} {
		out, err := run(t, 1001, s, "M="+e.m("d"))
		if err == nil || !strings.Contains(out, "cross-device") {
			t.Errorf("%s: %v\n%s (want EXDEV)", s, err, out)
		}
	}
	os.Remove(e.b("d", "direct", "f"))

	// review list names the links; approving y alone takes nd (which
	// holds nd/x, its other name) with it.
	links := map[string][]string{}
	for _, it := range reviewJSON(t, 0, e, "list") {
		links[it.URI] = it.Links
	}
	if got := links["d://y"]; len(got) != 1 || got[0] != "nd/x" {
		t.Errorf("review list: links of d://y = %v, want [nd/x] (all %v)", got, links)
	}
	out, err := run(t, 0, binPath+" review approve d://y -c "+e.cfg)
	if err != nil || !strings.Contains(out, "d://nd\n") || !strings.Contains(out, "d://y\n") {
		t.Fatalf("approve d://y: %v\n%s", err, out)
	}
	var x, y syscall.Stat_t
	must(t, syscall.Lstat(e.b("d", "nd", "x"), &x))
	must(t, syscall.Lstat(e.b("d", "y"), &y))
	if x.Ino != y.Ino || x.Nlink != 2 {
		t.Errorf("approved nd/x and y: inodes %d and %d, %d links; want one file with 2", x.Ino, y.Ino, x.Nlink)
	}
	if out, err := run(t, 0, binPath+" review approve --all -c "+e.cfg); err != nil {
		t.Fatalf("review approve --all: %v\n%s", err, out)
	}
	if got := linkManifest(t, 0, e.b("d")); got != want {
		t.Errorf("after approval the backing folder differs from the plain folder:\n--- backing\n%s\n--- plain\n%s", got, want)
	}
	for _, who := range []int{0, 1001} {
		if got := linkManifest(t, who, e.m("d")); got != want {
			t.Errorf("uid %d on the mount after approval:\n%s", who, got)
		}
	}
	// Journaled: revert removes a name the approval made and brings back
	// the content it replaced.
	for _, u := range []string{"d://y", "d://bk"} {
		if out, err := run(t, 0, binPath+" revert "+u+" -c "+e.cfg); err != nil {
			t.Fatalf("revert %s: %v\n%s", u, err, out)
		}
	}
	if _, err := os.Lstat(e.b("d", "y")); err == nil {
		t.Errorf("y is still there after revert")
	}
	if b, _ := os.ReadFile(e.b("d", "bk")); string(b) != "base\n" {
		t.Errorf("bk after revert = %q, want the content before the approval", b)
	}
}

// editManifest applies edit to the fields of the manifest lines of the
// names it has.
func editManifest(m string, edit map[string]func(f []string)) string {
	lines := strings.Split(m, "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 || edit[f[0]] == nil {
			continue
		}
		edit[f[0]](f)
		lines[i] = strings.Join(f, " ")
	}
	return strings.Join(lines, "\n")
}
