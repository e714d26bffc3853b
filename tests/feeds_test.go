package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sourceLine is slug's line of .neuralis/sources split into its fields
// (slug, kind, status, code, identity, reason), or nil.
func sourceLine(tb testing.TB, mnt, slug string) []string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(mnt, ".neuralis", "sources"))
	must(tb, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Split(line, "\t"); len(f) == 6 && f[0] == slug {
			return f
		}
	}
	return nil
}

// hasStatus reports whether slug's line of .neuralis/sources has state
// and code, and its reason contains reason.
func hasStatus(tb testing.TB, mnt, slug, state, code, reason string) bool {
	f := sourceLine(tb, mnt, slug)
	return f != nil && f[2] == state && f[3] == code && strings.Contains(f[5], reason)
}

func sha(s string) string {
	d := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(d[:])
}

// readDirNames lists a folder on the mount.
func readDirNames(path string) ([]string, error) {
	ents, err := os.ReadDir(path)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, err
}

// A file source shows one file under its own name; changes show; a file
// that is missing, not text or not a regular file makes the source
// UNAVAILABLE with a code (ENOMEDIUM, never an empty folder) until it is
// back; its copy keeps the file's owner and read bits.
func TestFileSource(t *testing.T) {
	requireFUSE(t)
	dir := sharedTempDir(t)
	motd := filepath.Join(dir, "motd")
	writeFile(t, motd, "hello\n", 0o644)
	private := filepath.Join(dir, "private.txt")
	writeFile(t, private, "root only\n", 0o600)
	e := newEnv(t, fmt.Sprintf(`[[source]]
slug = "motd"
kind = "file"
path = %q
refresh = "100ms"

[[source]]
slug = "private"
kind = "file"
path = %q
`, motd, private))

	names, err := readDirNames(e.m("motd"))
	if err != nil || strings.Join(names, ",") != "motd" {
		t.Fatalf("file source lists %v, %v; want only motd", names, err)
	}
	if b, err := os.ReadFile(e.m("motd", "motd")); err != nil || string(b) != "hello\n" {
		t.Fatalf("read %q, %v", b, err)
	}
	if f := sourceLine(t, e.mnt, "motd"); f == nil || f[1] != "file" || f[2] != "AVAILABLE" || f[4] != sha("hello\n") {
		t.Errorf(".neuralis/sources line %q; want AVAILABLE with identity %s", f, sha("hello\n"))
	}
	if err := os.WriteFile(e.m("motd", "motd"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing a file source: %v; want EROFS", err)
	}
	if err := os.WriteFile(e.m("motd", "new"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("creating in a file source: %v; want EROFS", err)
	}

	// The copy of a 0600 file is 0400 and the owner's: uid 1001 cannot read it.
	fi, err := os.Stat(e.m("private", "private.txt"))
	if err != nil || fi.Mode().Perm() != 0o400 {
		t.Errorf("copy of a 0600 file: %v %v; want mode 0400", fi, err)
	}
	if out, err := run(t, 1001, "cat "+e.m("private", "private.txt")); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("uid 1001 read a 0600 root file through a file source: %v %s", err, out)
	}

	writeFile(t, motd, "changed\n", 0o644)
	eventually(t, 5*time.Second, "a changed file shows", func() bool {
		b, _ := os.ReadFile(e.m("motd", "motd"))
		return string(b) == "changed\n"
	})
	eventually(t, 5*time.Second, "the identity follows the content", func() bool {
		f := sourceLine(t, e.mnt, "motd")
		return f != nil && f[4] == sha("changed\n")
	})

	for _, tt := range []struct {
		name, code, reason string
		make               func()
	}{
		{"missing", "SOURCE_MISSING", "does not exist", func() { must(t, os.Remove(motd)) }},
		{"not UTF-8", "SOURCE_NOT_TEXT", "not valid UTF-8 text", func() { must(t, os.WriteFile(motd, []byte{'a', 0xff, 0xfe, '\n'}, 0o644)) }},
		{"binary", "SOURCE_NOT_TEXT", "binary content", func() { must(t, os.WriteFile(motd, []byte("a\x00b"), 0o644)) }},
		{"a folder", "NOT_A_REGULAR_FILE", "is a folder", func() { os.Remove(motd); must(t, os.Mkdir(motd, 0o755)) }},
		{"a symlink", "NOT_A_REGULAR_FILE", "is a symlink", func() { os.Remove(motd); must(t, os.Symlink(private, motd)) }},
		{"a fifo", "NOT_A_REGULAR_FILE", "not a regular file", func() { os.Remove(motd); must(t, syscall.Mkfifo(motd, 0o644)) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			os.RemoveAll(motd)
			writeFile(t, motd, "back "+tt.name+"\n", 0o644)
			eventually(t, 5*time.Second, "the file is back", func() bool {
				b, _ := os.ReadFile(e.m("motd", "motd"))
				return string(b) == "back "+tt.name+"\n"
			})
			tt.make()
			eventually(t, 5*time.Second, "UNAVAILABLE "+tt.code, func() bool {
				return hasStatus(t, e.mnt, "motd", "UNAVAILABLE", tt.code, tt.reason)
			})
			if f := sourceLine(t, e.mnt, "motd"); f[4] != "-" {
				t.Errorf("an unavailable file source shows identity %q", f[4])
			}
			if _, err := os.ReadDir(e.m("motd")); !errors.Is(err, syscall.ENOMEDIUM) {
				t.Errorf("listing a %s file source: %v; want ENOMEDIUM", tt.name, err)
			}
			if _, err := os.ReadFile(e.m("motd", "motd")); !errors.Is(err, syscall.ENOMEDIUM) {
				t.Errorf("reading a %s file source: %v; want ENOMEDIUM", tt.name, err)
			}
		})
	}
	os.RemoveAll(motd)
	writeFile(t, motd, "final\n", 0o644)
	eventually(t, 5*time.Second, "AVAILABLE again", func() bool {
		return hasStatus(t, e.mnt, "motd", "AVAILABLE", "-", "")
	})
	// The status follows the feed at once; the kernel's cached name of
	// the old copy is dropped by the watcher a moment later.
	eventually(t, 5*time.Second, "the content after coming back", func() bool {
		b, _ := os.ReadFile(e.m("motd", "motd"))
		return string(b) == "final\n"
	})
}

// An inline source is one read-only file with the config's text; a text
// with a credential in it is refused when the config loads, naming file,
// line and key.
func TestInlineSource(t *testing.T) {
	requireFUSE(t)
	text := "# Notes\n\nThe build runs `make ci`.\n"
	e := newEnv(t, "[[source]]\nslug = \"notes\"\nkind = \"inline\"\nname = \"notes.md\"\ntext = \"\"\"\n"+text+"\"\"\"\n")
	names, err := readDirNames(e.m("notes"))
	if err != nil || strings.Join(names, ",") != "notes.md" {
		t.Fatalf("inline source lists %v, %v; want only notes.md", names, err)
	}
	if b, err := os.ReadFile(e.m("notes", "notes.md")); err != nil || string(b) != text {
		t.Errorf("read %q, %v; want %q", b, err, text)
	}
	if f := sourceLine(t, e.mnt, "notes"); f == nil || f[2] != "AVAILABLE" || f[4] != sha(text) {
		t.Errorf(".neuralis/sources line %q; want AVAILABLE, identity %s", f, sha(text))
	}
	if err := os.WriteFile(e.m("notes", "notes.md"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing an inline source: %v; want EROFS", err)
	}
	if err := os.Remove(e.m("notes", "notes.md")); !errors.Is(err, syscall.EROFS) {
		t.Errorf("removing an inline source's file: %v; want EROFS", err)
	}

	bad := filepath.Join(e.dir, "bad.toml")
	must(t, os.WriteFile(bad, []byte("[[source]]\nslug = \"notes\"\nkind = \"inline\"\nname = \"n.md\"\ntext = \"\"\"\nDeploy with\nexport GITHUB_TOKEN=ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789\n\"\"\"\n"), 0o644))
	for _, args := range [][]string{{"config", "validate", "-c", bad}, {"mount", "-c", bad, filepath.Join(e.dir, "mnt2")}} {
		out, err := exec.Command(binPath, args...).CombinedOutput()
		want := bad + ":5: source[0].text: line 2 of the text holds what looks like a GitHub token"
		if err == nil || !strings.Contains(string(out), want) || strings.Contains(string(out), "ghp_") {
			t.Errorf("neuralisfs %s with a token in inline text: %v\n%s\nwant one sentence with %q, never the token", args[0], err, out, want)
		}
	}
}
