package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// freePort is a TCP address on the loopback nobody listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// settingsTOML: the kernel may cache names for a minute (reloadCaching);
// the agent (uid 1001) has its writes to data:// held, and a view.
const settingsTOML = reloadCaching + `
[[rule]]
uri = "data://**"
who = ["role:agent"]
review = ["write"]
`

// A reload applies [review] max_bytes, the journal's bounds and sync,
// [index] batch_delay and max_file_bytes, the kernel cache timeouts and
// [metrics] listen to the running daemon, and says so; it names only
// what it cannot apply ([mount] passthrough here) as waiting for a
// restart. Before, a changed [review] max_bytes changed nothing and was
// named nowhere, and the others were named as whole sections to restart
// for.
func TestReloadAppliesSettings(t *testing.T) {
	requireFUSE(t)
	view := filepath.Join(sharedTempDir(t), "view")
	must(t, os.Mkdir(view, 0o755))
	e := newDebugEnv(t, settingsTOML+viewTOML("agent", view), src{slug: "data"}, src{slug: "plain"})
	cfg, err := os.ReadFile(e.cfg)
	must(t, err)
	orig := string(cfg)
	must(t, os.Chmod(e.b("data"), 0o777))
	for _, name := range []string{"t60a", "t0", "t60b"} {
		writeFile(t, e.b("plain", name), "t\n", 0o644)
	}
	writeFile(t, e.b("plain", "big.txt"), "reloadbigword "+strings.Repeat("x ", 1<<20), 0o644)
	e.found(t, "reloadbigword OR kept", "") // the first reconcile is done
	if out, _ := e.search(t, 0, "reloadbigword"); strings.Contains(out, "big.txt") {
		t.Fatalf("a 2 MiB file is indexed under the default bound of 1 MiB:\n%s", out)
	}
	// reload writes orig with the [mount] lines replaced and extra
	// appended, and reloads through the CLI.
	reload := func(mount map[string]string, extra string) (string, error) {
		t.Helper()
		text := orig
		for k, v := range mount {
			text = regexp.MustCompile(`(?m)^`+k+` = .*$`).ReplaceAllString(text, k+" = "+v)
		}
		e.rewrite(text + extra)
		return e.reloadCLI(0)
	}
	mustReload := func(mount map[string]string, extra string) string {
		t.Helper()
		out, err := reload(mount, extra)
		if err != nil {
			t.Fatalf("neuralisfs reload: %v\n%s", err, out)
		}
		return out
	}
	agent := func(script string) (string, error) {
		return run(t, 1001, "cd "+filepath.Join(view, "data")+" && "+script)
	}

	// [review] max_bytes: lowered below what the agent holds, its next
	// held write fails with EDQUOT and nothing held is lost; raised, it
	// writes again.
	if out, err := agent("head -c 20000 /dev/zero > held1.bin"); err != nil {
		t.Fatalf("agent's first held write: %v\n%s", err, out)
	}
	out := mustReload(nil, "\n[review]\nmax_bytes = 10000\n")
	if !strings.Contains(out, "[review] max_bytes unset → 10000") || strings.Contains(out, "restarted") {
		t.Errorf("reload lowering [review] max_bytes said:\n%s", out)
	}
	if out, err := agent("echo x > held2.txt"); err == nil || !strings.Contains(out, "quota") {
		t.Errorf("a held write past the lowered bound: %v\n%s", err, out)
	}
	if l := sh(t, binPath+" review list -c "+e.cfg); !strings.Contains(l, "data://held1.bin") || strings.Contains(l, "held2") {
		t.Errorf("review list after the bound was lowered:\n%s", l)
	}
	review := "\n[review]\nmax_bytes = 1000000\n"
	mustReload(nil, review)
	if out, err := agent("echo x > held2.txt"); err != nil {
		t.Errorf("a held write after the bound was raised: %v\n%s", err, out)
	}

	// [journal] max_records: lowered, the oldest records go at once.
	for i := range 12 {
		must(t, os.WriteFile(e.m("plain", "j.txt"), fmt.Appendf(nil, "version %d\n", i), 0o644))
	}
	records := func() int {
		t.Helper()
		out, err := run(t, 0, binPath+" history --json plain://j.txt -c "+e.cfg+" 2>/dev/null")
		var recs []json.RawMessage
		if jerr := json.Unmarshal([]byte(out), &recs); jerr != nil {
			t.Logf("history --json: %v %v\n%s", err, jerr, out)
			return -1
		}
		return len(recs)
	}
	eventually(t, 10*time.Second, "the journal records the 12 writes", func() bool { return records() >= 12 })
	journal := review + "\n[journal]\nmax_records = 4\nsync = \"each\"\n"
	out = mustReload(nil, journal)
	if !strings.Contains(out, "[journal] max_records unset → 4") || !strings.Contains(out, "[journal] sync unset → each") {
		t.Errorf("reload lowering [journal] max_records and setting sync said:\n%s", out)
	}
	if n := records(); n > 4 {
		t.Errorf("after lowering max_records to 4 the journal holds %d records of plain://j.txt", n)
	}
	// Strict now: each write's record is written when the write returns.
	for i := range 3 {
		must(t, os.WriteFile(e.m("plain", "j.txt"), fmt.Appendf(nil, "strict %d\n", i), 0o644))
	}
	if n := records(); n != 4 {
		t.Errorf("after three more writes under sync = each the journal holds %d records; want 4", n)
	}

	// [index] max_file_bytes: raised, the file it kept out is indexed,
	// and the collection (which admits files by the same bound) takes it.
	excluded := func() bool {
		t.Helper()
		for _, x := range collectJSON(t, e, "--source", "plain", "--max-file-bytes", "8000000", "--max-bytes", "100000000").Excluded {
			if x.URI == "plain://big.txt" {
				return true
			}
		}
		return false
	}
	if !excluded() {
		t.Errorf("the collection takes plain://big.txt (2 MiB) under the default bound of 1 MiB")
	}
	index := journal + "\n[index]\nmax_file_bytes = 4000000\nbatch_delay = \"5ms\"\n"
	out = mustReload(nil, index)
	if !strings.Contains(out, "[index] max_file_bytes unset → 4000000") || !strings.Contains(out, "[index] batch_delay unset → 5ms") {
		t.Errorf("reload of [index] said:\n%s", out)
	}
	e.found(t, "reloadbigword", "plain://big.txt")
	if excluded() {
		t.Errorf("after a reload raised [index] max_file_bytes to 4000000, the collection still leaves plain://big.txt out")
	}

	// Timeouts: a name first looked up after the reload is cached for the
	// new entry timeout. With 60 s, six stats of a name send one LOOKUP
	// (or two, should the watcher's news of the file's making drop the
	// entry in between: the files are made at the start, seconds before,
	// to make that unlikely); with 0 s, six.
	lookups := func(name string) int {
		t.Helper()
		for range 6 {
			if _, err := os.Stat(e.m("plain", name)); err != nil {
				t.Fatal(err)
			}
		}
		marker := name + ".marker"
		os.Stat(e.m("plain", marker))
		eventually(t, 10*time.Second, "the daemon's log of the LOOKUP of "+marker, func() bool {
			return strings.Contains(e.stderr.String(), `\"`+marker+`\"`)
		})
		return len(regexp.MustCompile(`LOOKUP n\d+ +\\"`+regexp.QuoteMeta(name)+`\\"`).FindAllString(e.stderr.String(), -1))
	}
	if n := lookups("t60a"); n > 2 {
		t.Errorf("with entry_timeout 60s, six stats of a name sent %d LOOKUPs; want 1", n)
	}
	zero := map[string]string{"entry_timeout": `"0s"`, "attr_timeout": `"0s"`, "watched_timeout": `"0s"`}
	out = mustReload(zero, index)
	for _, k := range []string{"[mount] entry_timeout 1m0s → 0s", "[mount] attr_timeout 1m0s → 0s", "[mount] watched_timeout 1m0s → 0s"} {
		if !strings.Contains(out, k) {
			t.Errorf("reload of the timeouts lacks %q:\n%s", k, out)
		}
	}
	if n := lookups("t0"); n != 6 {
		t.Errorf("after a reload to entry_timeout 0s, six stats of a new name sent %d LOOKUPs; want 6", n)
	}
	mustReload(nil, index)
	if n := lookups("t60b"); n > 2 {
		t.Errorf("after a reload back to 60s, six stats of a new name sent %d LOOKUPs; want 1", n)
	}

	// [metrics] listen: started, moved, refused where the address is
	// taken (the running endpoint stays), stopped.
	get := func(addr string) (string, error) {
		c := &http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get("http://" + addr + "/metrics")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.Status + "\n" + string(body), err
	}
	a1, a2 := freePort(t), freePort(t)
	out = mustReload(nil, index+fmt.Sprintf("\n[metrics]\nlisten = %q\n", a1))
	if !strings.Contains(out, "[metrics] listen unset → "+a1) {
		t.Errorf("reload starting the metrics said:\n%s", out)
	}
	os.Stat(e.m("plain", "counted"))
	if body, err := get(a1); err != nil || !strings.Contains(body, `neuralisfs_fuse_request_duration_seconds_count{op="LOOKUP"}`) {
		t.Errorf("metrics at %s after the reload started them: %v\n%.2000s", a1, err, body)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer taken.Close()
	if out, err := reload(nil, index+fmt.Sprintf("\n[metrics]\nlisten = %q\n", taken.Addr().String())); err == nil || !strings.Contains(out, "metrics.listen") {
		t.Errorf("a reload to a metrics address in use was not refused: %v\n%s", err, out)
	}
	if _, err := get(a1); err != nil {
		t.Errorf("after a refused reload the metrics at %s stopped: %v", a1, err)
	}
	out = mustReload(nil, index+fmt.Sprintf("\n[metrics]\nlisten = %q\n", a2))
	if !strings.Contains(out, "[metrics] listen "+a1+" → "+a2) {
		t.Errorf("reload moving the metrics said:\n%s", out)
	}
	if _, err := get(a1); err == nil {
		t.Errorf("the metrics still serve at the old address %s", a1)
	}
	if body, err := get(a2); err != nil || !strings.Contains(body, `op="LOOKUP"`) {
		t.Errorf("metrics at the new address %s: %v\n%.2000s", a2, err, body)
	}
	mustReload(nil, index)
	if _, err := get(a2); err == nil {
		t.Errorf("the metrics still serve at %s after a reload dropped [metrics]", a2)
	}

	// What a reload cannot apply is named, key by key, as waiting for a
	// restart; the live settings are not.
	out = mustReload(map[string]string{"watched_timeout": "\"60s\"\npassthrough = false"}, index)
	if !strings.Contains(out, "[mount] passthrough changed: takes effect when the daemon is restarted") {
		t.Errorf("reload changing [mount] passthrough said:\n%s", out)
	}
	for _, k := range []string{"entry_timeout changed", "[index] max_file_bytes changed", "[journal] max_records changed", "[review]", "[metrics]"} {
		if strings.Contains(out, k) {
			t.Errorf("reload names %q, which it applied, as waiting for a restart:\n%s", k, out)
		}
	}
}
