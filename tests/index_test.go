package tests

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// search runs `neuralisfs search` as uid and returns its output.
func (e *env) search(t *testing.T, uid int, args ...string) (string, error) {
	t.Helper()
	q := []string{binPath, "search", "-c", e.cfg}
	for _, a := range args {
		q = append(q, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	return run(t, uid, strings.Join(q, " "))
}

// found polls until query finds want through the CLI and through
// .neuralis/search as root, and returns how long that took.
func (e *env) found(t *testing.T, query, want string) time.Duration {
	t.Helper()
	start := time.Now()
	eventually(t, 5*time.Second, "search finds "+want, func() bool {
		out, _ := e.search(t, 0, query)
		return strings.Contains(out, want)
	})
	took := time.Since(start)
	b, err := os.ReadFile(filepath.Join(e.mnt, ".neuralis", "search", url.PathEscape(query)))
	if err != nil || !strings.Contains(string(b), want) {
		t.Errorf(".neuralis/search/%s: %v\n%s", query, err, b)
	}
	return took
}

func (e *env) notFound(t *testing.T, query, unwanted string) {
	t.Helper()
	eventually(t, 5*time.Second, "search no longer finds "+unwanted, func() bool {
		out, _ := e.search(t, 0, query)
		return !strings.Contains(out, unwanted)
	})
}

func TestSearchIsFreshAfterWrites(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	must(t, os.WriteFile(e.m("data", "notes.txt"), []byte("alpha\nthe quick zebrafish jumps\n"), 0o644))
	took := e.found(t, "zebrafish", "data://notes.txt:2:")
	t.Logf("written through the mount → searchable in %v", took)
	// Phrase and filters.
	if out, _ := e.search(t, 0, `"quick zebrafish"`); !strings.Contains(out, "«quick zebrafish»") {
		t.Errorf("phrase query: %s", out)
	}
	if out, _ := e.search(t, 0, "--ext", "md", "zebrafish"); strings.Contains(out, "notes.txt") {
		t.Errorf("ext filter ignored: %s", out)
	}
	out, err := e.search(t, 0, "--json", "zebrafish")
	var res struct {
		Hits []struct {
			URI   string `json:"uri"`
			Lines []struct {
				N int `json:"n"`
			} `json:"lines"`
		} `json:"hits"`
	}
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || len(res.Hits) != 1 || res.Hits[0].URI != "data://notes.txt" {
		t.Errorf("--json: %v %s", err, out)
	}
	// Rename and unlink drop the old uri.
	must(t, os.Rename(e.m("data", "notes.txt"), e.m("data", "moved.txt")))
	e.found(t, "zebrafish", "data://moved.txt")
	e.notFound(t, "zebrafish", "data://notes.txt")
	must(t, os.MkdirAll(e.m("data", "dir"), 0o755))
	must(t, os.Rename(e.m("data", "moved.txt"), e.m("data", "dir", "in.txt")))
	must(t, os.Rename(e.m("data", "dir"), e.m("data", "dir2")))
	e.found(t, "zebrafish", "data://dir2/in.txt")
	e.notFound(t, "zebrafish", "data://dir/in.txt")
	must(t, os.RemoveAll(e.m("data", "dir2")))
	e.notFound(t, "zebrafish", "data://")
	// A write made directly on the backing folder is found too.
	writeFile(t, e.b("data", "external.txt"), "written behind the mount: okapi\n", 0o644)
	e.found(t, "okapi", "data://external.txt")
	// A bad query is one sentence.
	out, err = e.search(t, 0, "nosuchfield:(")
	if err == nil || strings.Count(strings.TrimSpace(out), "\n") != 0 || strings.Contains(out, "goroutine") {
		t.Errorf("bad query: %v %q", err, out)
	}
}

func TestSearchNeverShowsWhatTheCallerCannotRead(t *testing.T) {
	e := newEnv(t, `
[[principal]]
name = "agent"
uids = [1001]
roles = ["agent"]

[[rule]]
uri = "data://private/**"
who = ["role:agent"]
deny = ["read"]
`, src{slug: "data"})
	writeFile(t, e.b("data", "private", canary+"-name.txt"), "marmoset "+canary+"\n", 0o644)
	writeFile(t, e.b("data", "public.txt"), "marmoset in public\n", 0o644)
	e.found(t, "marmoset", "data://public.txt")
	e.found(t, "marmoset", "private")
	for _, q := range []string{"marmoset", canary, "path:private*", canary + "-name"} {
		out, _ := e.search(t, 1001, q)
		if strings.Contains(out, canary) || strings.Contains(out, "private") {
			t.Errorf("agent's CLI search %q shows the hidden file:\n%s", q, out)
		}
		b, _ := run(t, 1001, "cat '"+filepath.Join(e.mnt, ".neuralis", "search", url.PathEscape(q))+"'")
		if strings.Contains(b, canary) || strings.Contains(b, "private") {
			t.Errorf("agent's .neuralis/search/%s shows the hidden file:\n%s", q, b)
		}
	}
	out, _ := e.search(t, 1001, "marmoset")
	if !strings.Contains(out, "data://public.txt") {
		t.Errorf("agent does not find what it may read:\n%s", out)
	}
	// The count is of readable files only: 1 for the agent, 2 for the owner.
	total := func(uid int) int {
		out, _ := e.search(t, uid, "--json", "marmoset")
		var r struct {
			Total int `json:"total"`
		}
		json.Unmarshal([]byte(out), &r)
		return r.Total
	}
	if a, o := total(1001), total(0); a != 1 || o != 2 {
		t.Errorf("totals: agent %d (want 1), owner %d (want 2)", a, o)
	}
}

// TestSearchFileReadUnderSignals reads .neuralis/search/<query> again and
// again from a process that a timer interrupts every 200 µs (as Go's
// runtime preempts goroutines with SIGURG): an open the signal interrupts
// fails with EINTR, which Python retries, and every read shows the hits —
// never the interruption rendered as the file's content.
func TestSearchFileReadUnderSignals(t *testing.T) {
	e := newDebugEnv(t, "", src{slug: "data"})
	for i := range 200 {
		writeFile(t, e.b("data", fmt.Sprintf("f%03d.txt", i)), fmt.Sprintf("capybara number %d\n", i), 0o644)
	}
	e.found(t, "capybara", "data://")
	eventually(t, 10*time.Second, "all 200 files indexed", func() bool {
		b, err := os.ReadFile(filepath.Join(e.mnt, ".neuralis", "search", "capybara"))
		return err == nil && strings.Contains(string(b), "of 200 matching files")
	})
	out := sh(t, `python3 - "$F" <<'EOF'
import signal, sys
signal.signal(signal.SIGALRM, lambda *a: None)
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
bad, n = {}, 0
for i in range(300):
    with open(sys.argv[1]) as f:
        s = f.read()
    n += 1
    if "data://" not in s:
        bad[s] = bad.get(s, 0) + 1
signal.setitimer(signal.ITIMER_REAL, 0, 0)
print(n, "reads;", "wrong:", bad)
EOF`, "F="+filepath.Join(e.mnt, ".neuralis", "search", "capybara"))
	if !strings.Contains(out, "300 reads; wrong: {}") {
		t.Errorf("reads of the search file under signals:\n%s", out)
	}
	// Else nothing was interrupted, and the reads prove nothing.
	eventually(t, 5*time.Second, "the daemon's trace shows an INTERRUPT", func() bool {
		return strings.Contains(e.stderr.String(), ": INTERRUPT")
	})
}

func TestIndexAdmissionAndRestart(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	writeFile(t, e.b("data", "keep1.txt"), "kept one\n", 0o644)
	writeFile(t, e.b("data", "keep2.go"), "package kept\n", 0o644)
	writeFile(t, e.b("data", "bin.dat"), "abc\x00def", 0o644)
	writeFile(t, e.b("data", "latin1.txt"), "caf\xe9\n", 0o644)
	writeFile(t, e.b("data", "big.txt"), strings.Repeat("x", 2<<20), 0o644)
	writeFile(t, e.b("data", ".env"), "TOKEN=1\n", 0o644)
	writeFile(t, e.b("data", "id_rsa"), "key\n", 0o644)
	writeFile(t, e.b("data", "node_modules", "x.js"), "x\n", 0o644)
	out, err := exec.Command(binPath, "sources", "-c", e.cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("sources: %v\n%s", err, out)
	}
	for _, want := range []string{"keep1.txt", "keep2.go", "bin.dat\tbinary content", "latin1.txt\tnot valid UTF-8 text", "big.txt\tlarger than", ".env\t", "id_rsa\t", "node_modules/\t", "identity: sha256:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("sources output lacks %q:\n%s", want, out)
		}
	}
	e.found(t, "kept", "data://keep1.txt")
	for _, q := range []string{"TOKEN", "def", "xxxx*"} {
		if o, _ := e.search(t, 0, q); strings.Contains(o, "data://") {
			t.Errorf("search %q found a file that is not admitted:\n%s", q, o)
		}
	}
	// Restart: only the changed file is read again.
	e.stop()
	writeFile(t, e.b("data", "keep1.txt"), "kept one, changed while down\n", 0o644)
	e.start()
	re := regexp.MustCompile(`msg=indexed source=data walked=(\d+) reindexed=(\d+)`)
	var m []string
	eventually(t, 10*time.Second, "reconcile after restart", func() bool {
		m = re.FindStringSubmatch(e.stderr.String())
		return m != nil
	})
	if m[2] != "1" {
		t.Errorf("restart re-indexed %s files; want 1 (only the changed one): %s", m[2], m[0])
	}
	e.found(t, "changed", "data://keep1.txt")
	st, err := exec.Command(binPath, "status", "-c", e.cfg).CombinedOutput()
	if err != nil || !strings.Contains(string(st), "data") || !strings.Contains(string(st), "local") {
		t.Errorf("status: %v\n%s", err, st)
	}
}

func TestSearchWithoutDaemonSaysSo(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.toml")
	writeFile(t, cfg, fmt.Sprintf("state_dir = %q\n", filepath.Join(dir, "state")), 0o644)
	out, err := exec.Command(binPath, "search", "-c", cfg, "anything").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no neuralisfs daemon is running") || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Errorf("search with no daemon: %v %q", err, out)
	}
}
