package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

// feedServer is the test's HTTP server for http sources.
type feedServer struct {
	mu             sync.Mutex
	etagBody, etag string
	flakyDown      bool
	got200, got304 map[string]int // by path
}

func (s *feedServer) count(path string, code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if code == http.StatusNotModified {
		s.got304[path]++
	} else if code == http.StatusOK {
		s.got200[path]++
	}
}

func (s *feedServer) counts(path string) (ok, notModified int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got200[path], s.got304[path]
}

func (s *feedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	body, etag, down := s.etagBody, s.etag, s.flakyDown
	s.mu.Unlock()
	switch r.URL.Path {
	case "/etag":
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			s.count(r.URL.Path, http.StatusNotModified)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		s.count(r.URL.Path, http.StatusOK)
		io.WriteString(w, body)
	case "/lastmod":
		mod := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		if t, err := http.ParseTime(r.Header.Get("If-Modified-Since")); err == nil && !mod.After(t) {
			s.count(r.URL.Path, http.StatusNotModified)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Last-Modified", mod.Format(http.TimeFormat))
		s.count(r.URL.Path, http.StatusOK)
		io.WriteString(w, "dated\n")
	case "/flaky":
		if down {
			http.Error(w, "down for maintenance", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "flaky but fine\n")
	case "/500":
		http.Error(w, "broken", http.StatusInternalServerError)
	case "/slow":
		<-r.Context().Done() // until the daemon gives up
	case "/big":
		w.Write(bytes.Repeat([]byte("x"), 4096))
	default:
		http.NotFound(w, r)
	}
}

// http sources fetch files from URLs and refresh them with
// If-None-Match / If-Modified-Since; a URL that fails after a good fetch
// keeps its last content and the source is DEGRADED, naming the status
// or error; one that never answered well makes the source UNAVAILABLE
// (HTTP_ERROR, UNREACHABLE, SOURCE_TOO_LARGE), never an empty file. The
// last good content survives a restart.
func TestHTTPSource(t *testing.T) {
	requireFUSE(t)
	fs := &feedServer{etagBody: "v1 body\n", etag: `"v1"`, got200: map[string]int{}, got304: map[string]int{}}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "soon gone\n") }))
	goneClosed := false
	defer func() {
		if !goneClosed {
			gone.Close()
		}
	}()
	u := srv.URL
	e := newEnv(t, fmt.Sprintf(`[[source]]
slug = "live"
kind = "http"
refresh = "200ms"
[[source.file]]
path = "etag.json"
url = "%[1]s/etag"
[[source.file]]
path = "sub/lm.txt"
url = "%[1]s/lastmod"
[[source.file]]
path = "flaky.txt"
url = "%[1]s/flaky"
[[source.file]]
path = "gone.txt"
url = "%[2]s/gone"

[[source]]
slug = "err"
kind = "http"
refresh = "200ms"
[[source.file]]
path = "a.txt"
url = "%[1]s/500"

[[source]]
slug = "slow"
kind = "http"
refresh = "200ms"
timeout = "300ms"
[[source.file]]
path = "a.txt"
url = "%[1]s/slow"

[[source]]
slug = "big"
kind = "http"
max_bytes = 1024
[[source.file]]
path = "a.txt"
url = "%[1]s/big"

[[principal]]
name = "agent"
uids = [1001]

[[rule]]
uri = "live://etag.json"
who = ["agent"]
deny = ["read"]
`, u, gone.URL))

	eventually(t, 10*time.Second, "live AVAILABLE", func() bool { return hasStatus(t, e.mnt, "live", "AVAILABLE", "-", "") })
	names, err := readDirNames(e.m("live"))
	if err != nil || strings.Join(names, ",") != "etag.json,flaky.txt,gone.txt,sub" {
		t.Errorf("live lists %v, %v", names, err)
	}
	for p, want := range map[string]string{"etag.json": "v1 body\n", "sub/lm.txt": "dated\n", "flaky.txt": "flaky but fine\n", "gone.txt": "soon gone\n"} {
		if b, err := os.ReadFile(e.m("live", p)); err != nil || string(b) != want {
			t.Errorf("live/%s: %q, %v; want %q", p, b, err, want)
		}
	}
	if f := sourceLine(t, e.mnt, "live"); !strings.HasPrefix(f[4], "sha256:") || !strings.Contains(f[4], `etag.json="v1"`) {
		t.Errorf("identity %q: want a digest and the ETag seen", f[4])
	}
	if err := os.WriteFile(e.m("live", "etag.json"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing an http source: %v; want EROFS", err)
	}
	// A file hidden from the agent is absent for it, and out of the
	// identity it is shown.
	out, err := run(t, 1001, "ls "+e.m("live")+"; cat "+filepath.Join(e.mnt, ".neuralis", "sources"))
	if err != nil || strings.Contains(out, "etag.json") || !strings.Contains(out, "flaky.txt") || !strings.Contains(out, "live\thttp\tAVAILABLE\t-\tsha256:") {
		t.Errorf("as the agent, who may not read live://etag.json: %v\n%s", err, out)
	}
	eventually(t, 10*time.Second, "refreshes answered 304 Not Modified", func() bool {
		ok1, nm1 := fs.counts("/etag")
		ok2, nm2 := fs.counts("/lastmod")
		return ok1 == 1 && nm1 >= 2 && ok2 == 1 && nm2 >= 2
	})

	fs.mu.Lock()
	fs.etagBody, fs.etag = "v2 body\n", `W/"v2"`
	fs.mu.Unlock()
	eventually(t, 10*time.Second, "a changed feed shows", func() bool {
		b, _ := os.ReadFile(e.m("live", "etag.json"))
		f := sourceLine(t, e.mnt, "live")
		return string(b) == "v2 body\n" && strings.Contains(f[4], `etag.json=W/"v2"`)
	})

	fs.mu.Lock()
	fs.flakyDown = true
	fs.mu.Unlock()
	gone.Close()
	goneClosed = true
	eventually(t, 10*time.Second, "DEGRADED naming the 500 and the refused connection", func() bool {
		f := sourceLine(t, e.mnt, "live")
		return f[2] == "DEGRADED" && strings.Contains(f[5], "flaky.txt: "+u+"/flaky answered 500 Internal Server Error") &&
			strings.Contains(f[5], "gone.txt: "+gone.URL+"/gone: ") && strings.Contains(f[5], "serving the content fetched at")
	})
	for p, want := range map[string]string{"flaky.txt": "flaky but fine\n", "gone.txt": "soon gone\n"} {
		if b, err := os.ReadFile(e.m("live", p)); err != nil || string(b) != want {
			t.Errorf("a failing feed lost its last good content: %s: %q, %v", p, b, err)
		}
	}

	for _, tt := range []struct{ slug, code, reason string }{
		{"err", "HTTP_ERROR", "a.txt: " + u + "/500 answered 500 Internal Server Error"},
		{"slow", "UNREACHABLE", "a.txt: " + u + "/slow did not answer within 300ms"},
		{"big", "SOURCE_TOO_LARGE", "more than max_bytes (1024)"},
	} {
		eventually(t, 10*time.Second, tt.slug+" UNAVAILABLE "+tt.code, func() bool {
			return hasStatus(t, e.mnt, tt.slug, "UNAVAILABLE", tt.code, tt.reason)
		})
		if f := sourceLine(t, e.mnt, tt.slug); f[4] != "-" {
			t.Errorf("%s: identity %q for a source that serves nothing", tt.slug, f[4])
		}
		if _, err := os.ReadDir(e.m(tt.slug)); !errors.Is(err, syscall.ENOMEDIUM) {
			t.Errorf("listing %s: %v; want ENOMEDIUM, never an empty folder", tt.slug, err)
		}
		if _, err := os.ReadFile(e.m(tt.slug, "a.txt")); !errors.Is(err, syscall.ENOMEDIUM) {
			t.Errorf("reading %s/a.txt: %v; want ENOMEDIUM, never an empty file", tt.slug, err)
		}
	}

	// A restart serves the last good content and asks with the ETag it had.
	e.stop()
	_, before := fs.counts("/etag")
	e.start()
	for p, want := range map[string]string{"etag.json": "v2 body\n", "gone.txt": "soon gone\n", "flaky.txt": "flaky but fine\n"} {
		if b, err := os.ReadFile(e.m("live", p)); err != nil || string(b) != want {
			t.Errorf("after a restart, live/%s: %q, %v; want %q", p, b, err, want)
		}
	}
	eventually(t, 10*time.Second, "after a restart: a 304 for the ETag kept, DEGRADED for the failing feeds", func() bool {
		_, after := fs.counts("/etag")
		f := sourceLine(t, e.mnt, "live")
		return after > before && f[2] == "DEGRADED" && strings.Contains(f[5], "flaky.txt") && strings.Contains(f[5], "gone.txt")
	})
	if ok, _ := fs.counts("/etag"); ok != 2 {
		t.Errorf("/etag sent its body %d times; want 2 (v1, v2): every other fetch must be a 304", ok)
	}
}
