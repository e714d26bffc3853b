package index

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScan(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"README.md":           "hello\n",
		"src/main.go":         "package main\n",
		"src/skip_me.go":      "package main\n",
		"bin/tool":            "ELF\x00\x01",
		"latin1.txt":          "caf\xe9\n",
		"big.txt":             strings.Repeat("x", 2000),
		".env":                "SECRET=1\n",
		"keys/id_rsa":         "-----BEGIN\n",
		"node_modules/x.js":   "module.exports = 1\n",
		"node_modules/y/z.js": "1\n",
		".git/config":         "[core]\n",
		"docs/guide.md":       "guide\n",
		"package-lock.json":   "{}\n",
	})
	if err := os.Symlink("README.md", filepath.Join(dir, "link.md")); err != nil {
		t.Fatal(err)
	}
	src := Source{Slug: "data", FS: os.DirFS(dir), MaxFileBytes: 1000, Exclude: []string{"**/skip_*"}}
	rep, err := Scan(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	var admitted []string
	for _, f := range rep.Admitted {
		admitted = append(admitted, f.Path)
	}
	if got, want := strings.Join(admitted, " "), "README.md docs/guide.md src/main.go"; got != want {
		t.Errorf("admitted = %s; want %s", got, want)
	}
	want := map[string]string{
		"bin/tool":          ReasonBinary,
		"latin1.txt":        ReasonNotUTF8,
		"big.txt":           "larger than 1000 bytes",
		".env":              ReasonSecret,
		"keys/id_rsa":       ReasonSecret,
		"node_modules/":     ReasonGenerated,
		".git/":             ReasonVCS,
		"package-lock.json": ReasonLockFile,
		"src/skip_me.go":    `excluded by pattern "**/skip_*"`,
		"link.md":           ReasonNotRegular,
	}
	got := map[string]string{}
	for _, s := range rep.Skipped {
		got[s.Path] = s.Reason
	}
	for p, r := range want {
		if got[p] != r {
			t.Errorf("skip %s: reason %q; want %q", p, got[p], r)
		}
	}
	if len(got) != len(want) {
		t.Errorf("skipped = %v; want %v (pruned folders once, nothing below them)", got, want)
	}

	// Identity: sha256 over sorted (path, NUL, sha256(content)).
	h := sha256.New()
	for _, f := range []struct{ p, c string }{{"README.md", "hello\n"}, {"docs/guide.md", "guide\n"}, {"src/main.go", "package main\n"}} {
		d := sha256.Sum256([]byte(f.c))
		h.Write([]byte(f.p + "\x00"))
		h.Write(d[:])
	}
	if want := "sha256:" + hexString(h.Sum(nil)); rep.Identity != want {
		t.Errorf("identity = %s; want %s", rep.Identity, want)
	}

	// Include narrows.
	src.Include = []string{"**/*.md"}
	rep, err = Scan(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Admitted) != 2 {
		t.Errorf("with include, admitted = %v; want the two .md files", rep.Admitted)
	}
}

func TestScanMissingSource(t *testing.T) {
	_, err := Scan(context.Background(), Source{Slug: "gone", FS: os.DirFS(filepath.Join(t.TempDir(), "nope"))})
	if err == nil {
		t.Fatal("Scan of a missing folder succeeded")
	}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}
