package tests

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startMCPServer builds and starts tests/testdata/mcpserver serving the
// files of dir, and returns its URL and a function that stops it.
func startMCPServer(t *testing.T, dir string) (url string, stop func()) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcpserver")
	if out, err := exec.Command("nice", "-n", "19", "go", "build", "-o", bin, "./testdata/mcpserver").CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/mcpserver: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, dir)
	cmd.Dir = "/"
	out, err := cmd.StdoutPipe()
	must(t, err)
	cmd.Stderr = os.Stderr
	must(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("mcpserver printed no address: %v", err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	t.Cleanup(stop)
	return strings.TrimSpace(line), stop
}

// An mcp source shows the text resources of an MCP server (listed over
// pages of two: all show only when the cursors are followed) as files
// under paths derived from their URIs; blob, oversized, colliding and
// badly-named resources and NUL-holding text are skipped with a reason
// in the status. A changed resource shows after a refresh, a removed one
// goes; a server that stops leaves the last snapshot served and the
// source DEGRADED, also after a restart. A server never reached is
// UNAVAILABLE UNREACHABLE; one that answers but not as MCP, MCP_ERROR.
func TestMCPSource(t *testing.T) {
	requireFUSE(t)
	dir := sharedTempDir(t)
	files := filepath.Join(dir, "files")
	for name, text := range map[string]string{"a.md": "# A\n", "b.txt": "bee\n", "c.txt": "sea\n", "gone.txt": "soon gone\n"} {
		writeFile(t, filepath.Join(files, name), text, 0o644)
	}
	url, stop := startMCPServer(t, files)
	notMCP := httptest.NewServer(http.NotFoundHandler())
	defer notMCP.Close()
	e := newEnv(t, fmt.Sprintf(`[[source]]
slug = "res"
kind = "mcp"
url = %q
refresh = "200ms"
timeout = "5s"
max_bytes = 1024

[[source]]
slug = "dead"
kind = "mcp"
url = "http://127.0.0.1:1/mcp"
timeout = "2s"

[[source]]
slug = "notmcp"
kind = "mcp"
url = "%s/mcp"
`, url, notMCP.URL))

	eventually(t, 20*time.Second, "res AVAILABLE", func() bool { return hasStatus(t, e.mnt, "res", "AVAILABLE", "-", "") })
	out := sh(t, "cd "+e.m("res")+" && find . -type f | sort && cat files/a.md files/b.txt")
	if want := "./files/a.md\n./files/b.txt\n./files/c.txt\n./files/gone.txt\n# A\nbee\n"; out != want {
		t.Errorf("the mount shows\n%s\nwant\n%s", out, want)
	}
	f := sourceLine(t, e.mnt, "res")
	for _, skipped := range []string{
		"test://bin/logo.png: binary (blob) resource",
		"test://bin/nul.txt: binary content (a NUL byte)",
		`test://files/a.md?v=2: its path "files/a.md" is already test://files/a.md's`,
		"test://big/x.txt: larger than max_bytes (1024 bytes)",
		`test://bad//x.txt: the path "bad//x.txt" has an empty segment`,
	} {
		if !strings.Contains(f[5], skipped) {
			t.Errorf("reason %q lacks %q", f[5], skipped)
		}
	}
	want := "sha256:" + hexDigest(
		"files/a.md\x00", sha("# A\n"), "files/b.txt\x00", sha("bee\n"), "files/c.txt\x00", sha("sea\n"), "files/gone.txt\x00", sha("soon gone\n"))
	if f[4] != want {
		t.Errorf("identity %q, want %q (sorted path and content digests)", f[4], want)
	}
	if err := os.WriteFile(e.m("res", "files", "a.md"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing an mcp source: %v; want EROFS", err)
	}

	writeFile(t, filepath.Join(files, "b.txt"), "bee two\n", 0o644)
	must(t, os.Remove(filepath.Join(files, "gone.txt")))
	eventually(t, 20*time.Second, "a changed resource shows and a removed one goes", func() bool {
		b, _ := os.ReadFile(e.m("res", "files", "b.txt"))
		_, err := os.Stat(e.m("res", "files", "gone.txt"))
		return string(b) == "bee two\n" && errors.Is(err, os.ErrNotExist)
	})

	eventually(t, 20*time.Second, "dead UNAVAILABLE UNREACHABLE", func() bool {
		return hasStatus(t, e.mnt, "dead", "UNAVAILABLE", "UNREACHABLE", "http://127.0.0.1:1/mcp")
	})
	if _, err := os.ReadDir(e.m("dead")); !errors.Is(err, syscall.ENOMEDIUM) {
		t.Errorf("listing dead: %v; want ENOMEDIUM, never an empty folder", err)
	}
	eventually(t, 20*time.Second, "notmcp UNAVAILABLE MCP_ERROR", func() bool {
		return hasStatus(t, e.mnt, "notmcp", "UNAVAILABLE", "MCP_ERROR", notMCP.URL+"/mcp")
	})
	t.Logf("notmcp: %q", sourceLine(t, e.mnt, "notmcp"))

	stop()
	eventually(t, 20*time.Second, "DEGRADED naming the server that stopped", func() bool {
		f := sourceLine(t, e.mnt, "res")
		return f[2] == "DEGRADED" && strings.Contains(f[5], url) && strings.Contains(f[5], "serving the resources read at")
	})
	check := func(when string) {
		t.Helper()
		out := sh(t, "cd "+e.m("res")+" && find . -type f | sort && cat files/b.txt")
		if want := "./files/a.md\n./files/b.txt\n./files/c.txt\nbee two\n"; out != want {
			t.Errorf("%s, the mount shows\n%s\nwant\n%s", when, out, want)
		}
	}
	check("with the server stopped")
	e.stop()
	e.start()
	check("after a restart with the server stopped")
	eventually(t, 20*time.Second, "DEGRADED after a restart", func() bool { return hasStatus(t, e.mnt, "res", "DEGRADED", "-", url) })
}

// hexDigest is the hex SHA-256 of parts, where a "sha256:" part counts
// as the bytes it names.
func hexDigest(parts ...string) string {
	var b []byte
	for _, p := range parts {
		if h, ok := strings.CutPrefix(p, "sha256:"); ok {
			d := make([]byte, len(h)/2)
			fmt.Sscanf(h, "%x", &d)
			b = append(b, d...)
			continue
		}
		b = append(b, p...)
	}
	return strings.TrimPrefix(sha(string(b)), "sha256:")
}

// The reference server from npm, @modelcontextprotocol/server-everything,
// over streamable HTTP: its static documents
// (demo://resource/static/document/<name>) are read through the mount
// under resource/static/document/<name>, byte for byte as the package
// holds them.
func TestMCPSourceEverything(t *testing.T) {
	requireFUSE(t)
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is missing, so @modelcontextprotocol/server-everything cannot be installed: install npm to run this test")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is missing, so @modelcontextprotocol/server-everything cannot be run: install nodejs to run this test")
	}
	prefix := t.TempDir()
	install := exec.Command("nice", "-n", "19", "npm", "install", "--no-audit", "--no-fund", "--prefix", prefix, "@modelcontextprotocol/server-everything@"+everythingVersion)
	install.Dir = prefix
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("npm could not install @modelcontextprotocol/server-everything@%s (no registry reachable?): %v\n%s", everythingVersion, err, out)
	}
	pkg := filepath.Join(prefix, "node_modules", "@modelcontextprotocol", "server-everything")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := exec.Command("node", filepath.Join(pkg, "dist", "index.js"), "streamableHttp")
	srv.Dir = "/"
	srv.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	var logs strings.Builder
	srv.Stdout, srv.Stderr = &logs, &logs
	must(t, srv.Start())
	t.Cleanup(func() {
		srv.Process.Kill()
		srv.Wait()
		if t.Failed() {
			t.Logf("server-everything said:\n%s", logs.String())
		}
	})
	eventually(t, 60*time.Second, "server-everything listens", func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	e := newEnv(t, fmt.Sprintf(`[[source]]
slug = "everything"
kind = "mcp"
url = "http://127.0.0.1:%d/mcp"
`, port))
	eventually(t, 60*time.Second, "everything AVAILABLE", func() bool {
		f := sourceLine(t, e.mnt, "everything")
		return f != nil && f[2] == "AVAILABLE"
	})
	t.Logf("everything: %q", sourceLine(t, e.mnt, "everything"))
	docs, err := os.ReadDir(filepath.Join(pkg, "dist", "docs"))
	must(t, err)
	if len(docs) == 0 {
		t.Fatalf("the package has no docs to serve")
	}
	for _, d := range docs {
		want, err := os.ReadFile(filepath.Join(pkg, "dist", "docs", d.Name()))
		must(t, err)
		got := sh(t, "cat "+e.m("everything", "resource", "static", "document", d.Name()))
		if got != string(want) {
			t.Errorf("everything/resource/static/document/%s differs from the package's dist/docs/%s", d.Name(), d.Name())
		}
	}
}

// everythingVersion is the release of server-everything the test runs.
const everythingVersion = "2026.8.31"
