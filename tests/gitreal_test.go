package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// realTreeDirs are the folders of the Go distribution's source tree the
// real-tree test builds its repository from: a few thousand files of a
// real project (testdata with odd names, vendored code with its own
// .gitignore and .gitattributes, executable scripts).
var realTreeDirs = []string{
	"cmd/go", "net", "encoding", "image", "go", "text", "regexp", "compress", "archive",
	"cmd/vendor/golang.org/x/telemetry", "cmd/vendor/golang.org/x/sys/unix",
}

// copyTree copies the regular files below src/rel into dst/rel, keeping
// the owner exec bit, and appends each as a blob to the fast-import stream
// fi, recording its path and mode in tree.
func copyTree(t *testing.T, src, dst, rel string, fi *bytes.Buffer, tree *[]string) {
	t.Helper()
	err := filepath.Walk(filepath.Join(src, rel), func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, r)
		switch {
		case info.IsDir():
			return os.MkdirAll(out, 0o755)
		case !info.Mode().IsRegular():
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if info.Mode()&0o100 != 0 {
			mode = 0o755
		}
		if err := os.WriteFile(out, data, mode); err != nil {
			return err
		}
		*tree = append(*tree, fmt.Sprintf("M %o :%d %s", 0o100000|mode, len(*tree)+1, filepath.ToSlash(r)))
		fmt.Fprintf(fi, "blob\nmark :%d\ndata %d\n", len(*tree), len(data))
		fi.Write(data)
		fi.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatalf("copying %s: %v", rel, err)
	}
}

// TestStatusOfRealTreeMatchesGitCLI builds a repository with a history
// from the Go source tree that every machine with Go has, puts it in many
// hard states at once (staged directory renames and copies, intent-to-add
// renames, type changes, assume-unchanged and skip-worktree entries,
// line-ending attributes after a checkout, nested ignore files with
// negations, ignored and empty untracked folders, quoted names, an
// upstream it is ahead of and behind, a merge conflict) and compares every
// folder's .status on a real mount with git status.
func TestStatusOfRealTreeMatchesGitCLI(t *testing.T) {
	requireFUSE(t)
	requireTool(t, "git", "git")
	goSrc := filepath.Join(runtime.GOROOT(), "src")
	if _, err := os.Stat(filepath.Join(goSrc, "cmd", "go")); err != nil {
		t.Skipf("the Go source tree is not at %s: %v", goSrc, err)
	}
	start := time.Now()
	base := t.TempDir()
	repo := filepath.Join(base, "repo")
	// The first commit goes in through git fast-import, as one pack:
	// git add writes a loose object per file, which on a slow disk costs
	// more than the rest of the test.
	var fi bytes.Buffer
	var tree []string
	for _, d := range realTreeDirs {
		if _, err := os.Stat(filepath.Join(goSrc, d)); err == nil {
			copyTree(t, goSrc, repo, d, &fi, &tree)
		}
	}
	fmt.Fprintf(&fi, "commit refs/heads/main\ncommitter C <c@x> 1577836800 +0000\ndata 2\nv1\n%s\n\n", strings.Join(tree, "\n"))
	t.Logf("copied %d files from %s in %v", len(tree), goSrc, time.Since(start))
	env := append(gitEnv(), "REPO="+repo, "BASE="+base)
	sh(t, `git init -q -b main "$REPO"`, env...)
	imp := exec.Command("git", "-C", repo, "fast-import", "--quiet")
	imp.Env = append(os.Environ(), env...)
	imp.Stdin = &fi
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("git fast-import: %v\n%s", err, out)
	}
	t.Logf("imported in %v", time.Since(start))

	sh(t, `set -e
cd "$REPO"
git reset -q
git clone -q --bare . ../remote.git
git remote add origin ../remote.git && git fetch -q origin && git branch -q -u origin/main
# A second version: edits, a moved package, a deleted one.
for f in $(git ls-files 'net/*.go' | head -40); do echo "// v2" >> "$f"; done
git mv image/png image/png2
git rm -q -r archive/tar
git commit -q -m v2
git push -q origin main
git reset -q --hard HEAD~1
# Behind origin by one, ahead by two.
echo local > local.txt && git add local.txt && git commit -q -m local1
git mv text/template/parse text/template/parse2 && git commit -q -m local2
# Line endings: CRLF in the worktree that git converts on the way in.
printf '*.crlf text eol=crlf\n*.auto text=auto\n' > text/.gitattributes
printf 'a\nb\n' > text/x.crlf && printf 'a\r\nb\r\n' > text/y.auto
git add text/.gitattributes text/x.crlf text/y.auto && git commit -q -m attrs
rm text/x.crlf && git checkout -- text/x.crlf && touch -d '+2 seconds' text/x.crlf text/y.auto
# Staged: a directory moved, files changed and copied, a deletion.
git mv go/ast go/ast2
for f in $(git ls-files 'encoding/json/*.go' | head -8); do echo "// staged" >> "$f"; done
echo "// staged" >> regexp/regexp.go && cp regexp/regexp.go regexp/regexp_copy.go
git add encoding regexp
git rm -q --cached compress/gzip/gzip.go
git config status.renames copies
# Unstaged: edits, deletions, mode and type changes, a file where a
# folder was.
for f in $(git ls-files 'encoding/xml/*.go' | head -6); do echo "// wt" >> "$f"; done
rm -r compress/bzip2/testdata
chmod +x net/ip.go
rm net/mac.go && ln -s ip.go net/mac.go
rm regexp/backtrack.go && mkdir regexp/backtrack.go && echo x > regexp/backtrack.go/inside
# Renamed in the worktree and marked intent-to-add.
mv image/gif/reader.go image/gif/reader_renamed.go && git add -N image/gif/reader_renamed.go
# Bits that hide changes.
echo hidden >> image/jpeg/reader.go && git update-index --assume-unchanged image/jpeg/reader.go
git update-index --skip-worktree image/draw/draw.go && echo hidden >> image/draw/draw.go
# Ignore rules: nested files with negations, info/exclude, ignored
# folders with untracked files, empty and all-ignored untracked folders.
printf '*.log\nbuild/\n!keep.log\n/scratch/*\n!/scratch/wanted/\n' > .gitignore
printf '!*.log\nsecret*\n' > net/.gitignore
echo 'excluded.txt' >> .git/info/exclude
mkdir -p build/out scratch/wanted scratch/other empty/deeper onlyignored net/newdir
touch a.log keep.log build/out/o.bin scratch/wanted/w scratch/other/o excluded.txt net/excluded.txt
touch onlyignored/x.log net/kept.log net/secret.key net/newdir/n.go
# Names git quotes.
mkdir -p "go/sp ace" "go/ünï"
echo q > 'go/sp ace/q"uote.go' && echo u > "go/ünï/é.go" && printf 'n\n' > "go/new
line.go"
`, env...)
	t.Logf("states set up in %v", time.Since(start))

	e := newEnv(t, "", src{slug: "r", kind: "git", path: repo})
	dirs := []string{"", "net", "net/newdir", "net/http", "encoding", "encoding/json", "encoding/xml",
		"image", "image/gif", "image/png2", "image/draw", "go", "go/ast2", "go/sp ace", "go/ünï", "text",
		"text/template", "text/template/parse2", "regexp", "regexp/backtrack.go", "compress", "compress/bzip2",
		"compress/gzip", "archive", "build", "scratch", "scratch/wanted", "empty", "onlyignored",
		"cmd/go", "cmd/go/internal/modload", "cmd/vendor/golang.org/x/telemetry"}
	compare := func(when string) {
		t.Helper()
		compareStatus(t, e, "r", repo, when, dirs)
	}
	compare("initial")
	if !strings.Contains(gitOut(t, repo, "status", "--porcelain"), "C  regexp/regexp.go -> regexp/regexp_copy.go") {
		t.Errorf("the copy is not reported as one; the test no longer covers copies:\n%s", gitOut(t, repo, "status", "--porcelain"))
	}

	// Writes through the mount.
	must(t, os.WriteFile(e.m("r", "net", "dial.go"), []byte("package net\n"), 0o644))
	must(t, os.MkdirAll(e.m("r", "net", "made", "here"), 0o755))
	must(t, os.WriteFile(e.m("r", "net", "made", "here", "x.go"), []byte("x\n"), 0o644))
	must(t, os.Rename(e.m("r", "image", "gif", "writer.go"), e.m("r", "image", "gif", "writer2.go")))
	must(t, os.Remove(e.m("r", "encoding", "xml", "xml.go")))
	must(t, os.WriteFile(e.m("r", "net", "more.log"), []byte("log\n"), 0o644))
	compare("after writes through the mount")

	// git behind the mount's back: staging, and after a stash a merge
	// that conflicts.
	sh(t, `set -e
cd "$REPO"
git add -A net image
`, env...)
	compare("after git add")
	sh(t, `set -e
cd "$REPO"
git stash -q -u
git checkout -q -b other HEAD~1
for f in net/dial.go net/ip.go encoding/json/decode.go; do echo "// other" >> "$f"; done
git rm -q net/pipe.go
git commit -q -am other
git checkout -q main
for f in net/dial.go net/ip.go encoding/json/decode.go net/pipe.go; do echo "// main" >> "$f"; done
git commit -q -am main
git merge -q other >/dev/null 2>&1 || true
`, env...)
	compare("in a merge with conflicts")
	t.Logf("done in %v", time.Since(start))
}
