package gitfs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestIndexDecodeMatchesGit decodes indexes git wrote in every format this
// package reads (versions 2, 3 and 4, split, sparse, with assume-unchanged,
// skip-worktree and intent-to-add entries and unmerged stages) and compares
// each entry with what git ls-files reports.
func TestIndexDecodeMatchesGit(t *testing.T) {
	gitEnv(t)
	wt := newRepo(t)
	for _, f := range []string{"a.txt", "sub/b.txt", "sub/deep/c.txt", "ü.txt", "z/y"} {
		write(t, wt, f, f+"\n")
	}
	os.Symlink("a.txt", filepath.Join(wt, "link"))
	os.Chmod(filepath.Join(wt, "sub/b.txt"), 0o755)
	commitAll(t, wt, "c")
	git(t, wt, "update-index", "--assume-unchanged", "a.txt")
	git(t, wt, "update-index", "--skip-worktree", "sub/b.txt")
	write(t, wt, "ita", "x")
	git(t, wt, "add", "-N", "ita")
	// An unmerged path.
	blob := strings.TrimSpace(git(t, wt, "hash-object", "-w", "a.txt"))
	cmd := execGit(wt, "update-index", "--index-info")
	// A name longer than the 12-bit length field, stored NUL-terminated.
	long := strings.Repeat(strings.Repeat("n", 200)+"/", 22) + "x"
	cmd.Stdin = strings.NewReader(fmt.Sprintf("0 %s\tconf\n100644 %s 1\tconf\n100644 %s 3\tconf\n100644 %s 0\t%s\n",
		strings.Repeat("0", 40), blob, blob, blob, long))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("update-index: %v %s", err, out)
	}

	check := func(name string) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(wt, ".git", "index"))
		if err != nil {
			t.Fatal(err)
		}
		r, err := Open(wt)
		if err != nil {
			t.Fatal(err)
		}
		ents, _, sparse, err := decodeIndexTree(data, filepath.Join(wt, ".git"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if sparse {
			if ents, err = r.expandSparseDirs(ents); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		var got []string
		for _, e := range ents {
			tag := "H"
			switch {
			case e.SkipWorktree:
				tag = "S"
			case e.Stage != 0:
				tag = "M"
			}
			if e.AssumeValid {
				tag = strings.ToLower(tag)
			}
			got = append(got, fmt.Sprintf("%s %o %s %d\t%s", tag, e.Mode, e.Hash, e.Stage, e.Name))
		}
		want := strings.Split(strings.TrimSuffix(git(t, wt, "-c", "core.quotePath=false", "ls-files", "-v", "-s"), "\n"), "\n")
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: entries differ\n--- git\n%s\n--- ours\n%s", name, strings.Join(want, "\n"), strings.Join(got, "\n"))
		}
		// Stat data, for the stage-0 entries git reports with --debug.
		debug := git(t, wt, "-c", "core.quotePath=false", "ls-files", "--debug")
		for _, e := range ents {
			if e.Stage != 0 || e.SkipWorktree {
				continue
			}
			want := fmt.Sprintf("  ctime: %d:%d\n  mtime: %d:%d\n  dev: %d\tino: %d\n  uid: %d\tgid: %d\n  size: %d",
				e.CtimeSec, e.CtimeNsec, e.MtimeSec, e.MtimeNsec, e.Dev, e.Inode, e.UID, e.GID, e.Size)
			if !strings.Contains(debug, e.Name+"\n"+want) {
				t.Errorf("%s: stat data of %s not as git reports it (want %q)", name, e.Name, want)
			}
		}
	}
	for _, v := range []string{"2", "3", "4"} {
		git(t, wt, "update-index", "--index-version", v)
		check("version " + v)
	}
	git(t, wt, "update-index", "--split-index")
	write(t, wt, "z/y", "changed\n")
	git(t, wt, "add", "z/y")
	check("split, version 4")
	git(t, wt, "update-index", "--index-version", "2")
	check("split, version 2")
	git(t, wt, "update-index", "--no-split-index")

	// A sparse index: sparse-directory entries expand to their files.
	wt2 := newRepo(t)
	for _, f := range []string{"in/a", "out/b", "out/deep/c", "top"} {
		write(t, wt2, f, f)
	}
	commitAll(t, wt2, "c")
	git(t, wt2, "sparse-checkout", "set", "--cone", "--sparse-index", "in")
	wt = wt2
	check("sparse index")
}
