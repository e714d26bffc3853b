package gitfs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// copyView is a View in which the reader sees the tree upper, a copy of
// the checkout lower that the test changed: paths whose type, mode or
// content differ (or that lower lacks) are read from upper, the others
// from lower, as the mount serves a layer of held changes over the
// backing files.
type copyView struct {
	lower, upper string
	changed      map[string]bool // paths that differ, and every folder above one
}

func newCopyView(t *testing.T, lower, upper string) *copyView {
	t.Helper()
	v := &copyView{lower: lower, upper: upper, changed: map[string]bool{}}
	mark := func(rel string) {
		for {
			v.changed[rel] = true
			if rel == "" {
				return
			}
			rel = filepath.Dir(rel)
			if rel == "." {
				rel = ""
			}
		}
	}
	for _, pair := range [][2]string{{upper, lower}, {lower, upper}} {
		err := filepath.Walk(pair[0], func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(pair[0], p)
			if rel == "." {
				return nil
			}
			rel = filepath.ToSlash(rel)
			if !sameFile(p, filepath.Join(pair[1], rel)) {
				mark(rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// sameFile reports whether a and b have the same type, mode and content.
func sameFile(a, b string) bool {
	var sa, sb unix.Stat_t
	if unix.Lstat(a, &sa) != nil || unix.Lstat(b, &sb) != nil || sa.Mode != sb.Mode {
		return false
	}
	switch sa.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		ba, _ := os.ReadFile(a)
		bb, _ := os.ReadFile(b)
		return bytes.Equal(ba, bb)
	case unix.S_IFLNK:
		ta, _ := os.Readlink(a)
		tb, _ := os.Readlink(b)
		return ta == tb
	}
	return true
}

func (v *copyView) Path(rel string) (string, bool) {
	up := filepath.Join(v.upper, filepath.FromSlash(rel))
	var st unix.Stat_t
	if unix.Lstat(up, &st) != nil {
		return "", false
	}
	if !v.changed[rel] {
		return filepath.Join(v.lower, filepath.FromSlash(rel)), true
	}
	return up, true
}

func (v *copyView) Open(rel string) (*os.File, error) {
	p, ok := v.Path(rel)
	if !ok {
		return nil, os.ErrNotExist
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

func (v *copyView) List(rel string) ([]ViewEntry, bool) {
	ents, err := os.ReadDir(filepath.Join(v.upper, filepath.FromSlash(rel)))
	if err != nil {
		return nil, false
	}
	var out []ViewEntry
	for _, e := range ents {
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(v.upper, filepath.FromSlash(rel), e.Name()), &st) == nil {
			out = append(out, ViewEntry{Name: e.Name(), Mode: st.Mode})
		}
	}
	return out, true
}

func (v *copyView) Changed(rel string) bool { return v.changed[rel] }

// StatusView over a changed copy of the checkout prints what the git CLI
// prints in that copy: the reader's worktree, its own index after a git
// add and its own commits, while the checkout's own Status is unchanged.
func TestStatusViewMatchesGitOnTheReadersTree(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	write(t, wt, "a.txt", "a\n")
	write(t, wt, "b.txt", "b\n")
	write(t, wt, "dir/c.txt", "c\n")
	write(t, wt, "dir/d.txt", "d\n")
	write(t, wt, "dir/deep/e.txt", "e\n")
	write(t, wt, "keep/f.txt", "f\n")
	write(t, wt, "big.txt", strings.Repeat("line of a file that will be renamed\n", 40))
	write(t, wt, ".gitignore", "*.log\n")
	commitAll(t, wt, "one")
	write(t, wt, "staged.txt", "s\n")
	git(t, wt, "add", "staged.txt")
	backing := git(t, wt, "status", "--porcelain=v1", "--branch")

	upper := filepath.Join(t.TempDir(), "wt")
	if out, err := exec.Command("cp", "-a", wt, upper).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	r, err := Open(wt, Options{ScanTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}

	check := func(step string) {
		t.Helper()
		v := newCopyView(t, wt, upper)
		for _, dir := range []string{"", "dir", "dir/deep", "keep", "new"} {
			if fi, err := os.Lstat(filepath.Join(upper, dir)); err != nil || !fi.IsDir() {
				continue
			}
			got, err := r.StatusView(context.Background(), dir, v, nil)
			if err != nil {
				t.Fatalf("%s: StatusView(%q): %v", step, dir, err)
			}
			want := git(t, filepath.Join(upper, dir), "--no-optional-locks", "status", "--porcelain=v1", "--branch", "--", ".")
			if string(got) != want {
				t.Errorf("%s: StatusView(%q):\n%s\ngit status in the reader's tree:\n%s", step, dir, got, want)
			}
		}
		// The checkout's own status is the backing one throughout.
		got, err := r.Status(context.Background(), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != backing {
			t.Errorf("%s: Status of the checkout changed:\n%s\nwant\n%s", step, got, backing)
		}
	}

	check("unchanged")
	sh := func(script string) {
		t.Helper()
		cmd := exec.Command("sh", "-ec", script)
		cmd.Dir = upper
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}
	sh(`echo changed >> a.txt; rm b.txt; chmod +x dir/c.txt; echo u > untracked.txt; mkdir -p new/sub && echo n > new/sub/n.txt; echo l > x.log`)
	check("worktree edits")
	sh(`rm -rf dir/deep; ln -s a.txt dir/d.txt.link; rm dir/d.txt && ln -s a.txt dir/d.txt; mv big.txt big2.txt`)
	check("deleted folder, symlinks, a rename")
	sh(`printf '*.log\nnew/\n' > .gitignore; mkdir keep/nested && cd keep/nested && git init -q && echo x > x && git add x && git commit -qm n`)
	check("a changed .gitignore and a nested repository")
	sh(`git add big2.txt dir/c.txt new/sub/n.txt 2>/dev/null || git add -f new/sub/n.txt big2.txt dir/c.txt; git rm -q --cached big.txt; echo after >> dir/c.txt`)
	check("the reader's own git add")
	sh(`git commit -qm two; echo more >> a.txt`)
	check("the reader's own commit")
	sh(`git checkout -q -b side; echo side > side.txt; git add side.txt; git commit -qm side`)
	check("a branch of the reader's")
}

// An index entry whose name climbs out of the worktree ("../..", which an
// agent able to write .git/index can put there) is never looked up on the
// host: it is deleted in the worktree whether or not a file has that name
// outside, with and without a View, so .status tells nothing of the
// daemon's filesystem.
func TestIndexNamesOutsideTheWorktreeAreNeverLookedUp(t *testing.T) {
	gitEnv(t)
	outside := t.TempDir()
	write(t, outside, "there", "a file outside the worktree\n")
	var results []string
	for _, target := range []string{"there", "thera"} {
		wt := newRepo(t)
		climb := strings.Repeat("../", strings.Count(wt, "/")+2) + strings.TrimPrefix(outside, "/") + "/" + target
		placeholder := strings.Repeat("p", len(climb))
		write(t, wt, placeholder, "a file outside the worktree\n")
		git(t, wt, "add", placeholder)
		idx := filepath.Join(wt, ".git", "index")
		b, err := os.ReadFile(idx)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(placeholder)) {
			t.Fatal("the placeholder is not in the index")
		}
		must := func(err error) {
			if err != nil {
				t.Helper()
				t.Fatal(err)
			}
		}
		must(os.WriteFile(idx, bytes.Replace(b, []byte(placeholder), []byte(climb), 1), 0o644))
		must(os.Remove(filepath.Join(wt, placeholder)))
		r, err := Open(wt, Options{ScanTimeout: -1})
		must(err)
		plain, err := r.Status(context.Background(), "", nil)
		must(err)
		viewed, err := r.StatusView(context.Background(), "", &copyView{lower: wt, upper: wt, changed: map[string]bool{}}, nil)
		must(err)
		if string(plain) != string(viewed) {
			t.Errorf("Status and StatusView differ:\n%s\n%s", plain, viewed)
		}
		results = append(results, strings.ReplaceAll(string(plain), target, "TARGET"))
	}
	if results[0] != results[1] {
		t.Errorf("the status tells whether a file outside the worktree exists:\n%s\n%s", results[0], results[1])
	}
	if !strings.Contains(results[0], "AD ") && !strings.Contains(results[0], " D ") {
		t.Errorf("the climbing entry is not shown deleted:\n%s", results[0])
	}
}
