package gitfs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestStatusForAReaderIsGitsWithoutWhatItCannotSee: filtered for a reader,
// the untracked part of a status is what git prints for the same worktree
// with the untracked files hidden from that reader removed. In particular
// an untracked folder whose untracked content is all hidden has no "??
// dir/" line (git shows no line for an empty folder, so one would tell the
// reader that hidden files are there), while a folder holding anything the
// reader sees keeps its line, whichever file the scan met first. The
// reader's identity lists the same paths.
func TestStatusForAReaderIsGitsWithoutWhatItCannotSee(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	write(t, wt, "a.txt", "a\n")
	write(t, wt, ".gitignore", "*.o\n")
	write(t, wt, "tracked/t.txt", "t\n")
	// Folders whose tracked files are all hidden, and one with a tracked
	// file the reader sees.
	write(t, wt, "hid/t.key", "t\n")
	write(t, wt, "hid2/t.key", "t\n")
	write(t, wt, "hid2/deeper/t2.key", "t\n")
	write(t, wt, "hid3/sub/t.key", "t\n")
	write(t, wt, "vis/t.txt", "t\n")
	write(t, wt, "vis/h.key", "t\n")
	commitAll(t, wt, "init")
	trackedHidden := []string{"hid/t.key", "hid2/t.key", "hid2/deeper/t2.key", "hid3/sub/t.key", "vis/h.key"}
	files := []string{
		"top.key",
		"only/x.key",
		"mixed/x.key", "mixed/v.txt",
		"nest/sub/x.key",
		"nest2/sub/x.key", "nest2/v.txt",
		"ign/x.key", "ign/b.o",
		"secret/v.txt",
		"deep/a/b/c/x.key", "deep/a/b/d/v.txt",
		"tracked/new.key", "tracked/untr/x.key", "tracked/untr2/x.key", "tracked/untr2/v.txt",
		"hid/v.txt", "hid/sub/w.txt",
		"hid2/deeper/v.txt",
		"hid3/sub/v.txt", "hid3/w.txt",
		"vis/v.txt", "vis/sub/w.txt",
	}
	// Many hidden files beside one the reader sees: the scan's first find
	// is most likely hidden.
	for i := range 40 {
		files = append(files, fmt.Sprintf("manykeys/k%02d.key", i))
	}
	files = append(files, "manykeys/seen.txt")
	for _, f := range files {
		write(t, wt, f, "x\n")
	}
	hidden := func(p string) bool {
		return strings.HasSuffix(p, ".key") || p == "secret" || strings.HasPrefix(p, "secret/")
	}
	canRead := func(p string) bool { return !hidden(p) }

	// The reference: a copy without the hidden untracked files.
	ref := filepath.Join(t.TempDir(), "ref")
	if out, err := exec.Command("cp", "-a", wt, ref).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	for _, f := range files {
		if hidden(f) {
			if err := os.Remove(filepath.Join(ref, f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	os.RemoveAll(filepath.Join(ref, "secret"))
	// ... and without the hidden tracked files, in the index too: git
	// then shows their deletion, a line the reader's filter drops.
	for _, f := range trackedHidden {
		git(t, ref, "rm", "-q", "--cached", f)
		if err := os.Remove(filepath.Join(ref, f)); err != nil {
			t.Fatal(err)
		}
	}
	seen := func(out string) string {
		var b strings.Builder
		for line := range strings.Lines(out) {
			if !strings.HasPrefix(line, "D  ") || !hidden(strings.TrimSpace(line[3:])) {
				b.WriteString(line)
			}
		}
		return b.String()
	}

	r, err := Open(wt)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, dir := range []string{"", "only", "mixed", "manykeys", "nest", "deep", "deep/a", "tracked", "tracked/untr", "hid", "hid/sub", "hid2", "hid2/deeper", "hid3", "hid3/sub", "vis", "vis/sub"} {
		b, err := r.Status(ctx, dir, canRead)
		if err != nil {
			t.Fatal(err)
		}
		want := ""
		if _, err := os.Stat(filepath.Join(ref, dir)); err == nil {
			want = seen(cliStatus(t, ref, dir))
		}
		if string(b) != want {
			t.Errorf("Status(%q) for the reader:\n%s\nwant git's without the hidden files:\n%s", dir, b, want)
		}
	}
	full, _ := r.Status(ctx, "", nil)
	for _, line := range []string{"?? only/\n", "?? nest/\n", "?? manykeys/\n", "?? hid/v.txt\n", "?? hid2/deeper/v.txt\n", "?? hid3/w.txt\n", "?? vis/v.txt\n"} {
		if !strings.Contains(string(full), line) {
			t.Errorf("unfiltered status lacks %q:\n%s", line, full)
		}
	}

	_, dirty, err := r.IdentityFor(ctx, "", canRead)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for line := range strings.Lines(cliStatus(t, ref, "")) {
		if p, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "?? "); ok {
			want = append(want, p)
		}
	}
	sort.Strings(want)
	if strings.Join(dirty, " ") != strings.Join(want, " ") {
		t.Errorf("IdentityFor lists %v; want %v", dirty, want)
	}
}

// TestStatusForAReaderRenames: a staged rename with one side hidden is, for
// the reader, what git shows without the hidden side: the origin deleted
// or the new file added, never left out (a tracked file gone with no line
// would tell that it went somewhere hidden).
func TestStatusForAReaderRenames(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	body := strings.Repeat("the same content, long enough to pair\n", 20)
	write(t, wt, "a/out.txt", body+"1")
	write(t, wt, "a/in.key", body+"2")
	write(t, wt, "a/both.key", body+"3")
	write(t, wt, "a/plain.txt", body+"4")
	write(t, wt, "a/back.txt", body+"5")
	commitAll(t, wt, "init")
	git(t, wt, "mv", "a/out.txt", "a/out.key")      // to a hidden name
	git(t, wt, "mv", "a/in.key", "a/in.txt")        // from one
	git(t, wt, "mv", "a/both.key", "a/both2.key")   // hidden on both sides
	git(t, wt, "mv", "a/plain.txt", "a/plain2.txt") // seen on both
	git(t, wt, "mv", "a/back.txt", "a/back.key")    // to a hidden name...
	write(t, wt, "a/back.txt", "new\n")             // ...and the name
	git(t, wt, "add", "a/back.txt")                 // staged again
	write(t, wt, "a/in.txt", body+"2 changed")      // modified after
	full := cliStatus(t, wt, "")
	for _, line := range []string{"R  a/out.txt -> a/out.key", "RM a/in.key -> a/in.txt", "R  a/both.key -> a/both2.key", "R  a/plain.txt -> a/plain2.txt"} {
		if !strings.Contains(full, line+"\n") {
			t.Fatalf("git status lacks %q; the test needs it:\n%s", line, full)
		}
	}
	r, err := Open(wt)
	if err != nil {
		t.Fatal(err)
	}
	canRead := func(p string) bool { return !strings.HasSuffix(p, ".key") }
	b, err := r.Status(context.Background(), "", canRead)
	if err != nil {
		t.Fatal(err)
	}
	var changes []string
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "##") {
			changes = append(changes, strings.TrimSuffix(line, "\n"))
		}
	}
	// a/back.txt: whatever git says of the name now, once.
	var back string
	for line := range strings.Lines(full) {
		if strings.HasSuffix(line, " a/back.txt\n") && !strings.Contains(line, "->") {
			back = strings.TrimSuffix(line, "\n")
		}
	}
	want := []string{"D  a/out.txt", "AM a/in.txt", "R  a/plain.txt -> a/plain2.txt"}
	if back != "" {
		want = append(want, back)
	}
	sort.Slice(want, func(i, j int) bool { return want[i][3:] < want[j][3:] })
	if strings.Join(changes, "\n") != strings.Join(want, "\n") {
		t.Errorf("the reader's status:\n%s\nwant:\n%s\n(git's, unfiltered:\n%s)", strings.Join(changes, "\n"), strings.Join(want, "\n"), full)
	}
}
