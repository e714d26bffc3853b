package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hiddenFromAgent: the agent (uid 1001) may not read data://secret/.
const hiddenFromAgent = reloadCaching + `
[[rule]]
uri = "data://secret/**"
who = ["role:agent"]
deny = ["read"]
`

// status is what `neuralisfs status` prints.
func (e *env) status(t *testing.T) string {
	t.Helper()
	out, err := run(t, 0, binPath+" status -c "+e.cfg)
	if err != nil {
		t.Fatalf("neuralisfs status: %v\n%s", err, out)
	}
	return out
}

// reloadEnabled writes the config orig with [section] enabled set, and
// reloads it; the reload must apply it rather than wait for a restart.
func (e *env) reloadEnabled(t *testing.T, orig, section, enabled string) string {
	t.Helper()
	e.rewrite(orig + "\n[" + section + "]\nenabled = " + enabled + "\n")
	out, err := e.reloadCLI(0)
	if err != nil {
		t.Fatalf("neuralisfs reload: %v\n%s", err, out)
	}
	if strings.Contains(out, "restarted") {
		t.Errorf("a reload of [%s] enabled = %s names it as waiting for a restart:\n%s", section, enabled, out)
	}
	return out
}

// A reload turns the index on and off without remounting. Off, every way
// to search says search is off, and the mount keeps working; on, what
// the index held before is brought up to date by a walk of every source
// (files written while it was off are found), changes through the mount
// reach it again, and what the policy hides stays hidden from a search
// by the agent. Before, [index] enabled was read at start only and a
// reload that changed it said it waited for a restart.
func TestReloadTurnsTheIndexOnAndOff(t *testing.T) {
	e := newEnv(t, hiddenFromAgent, src{slug: "data"})
	cfg, err := os.ReadFile(e.cfg)
	must(t, err)
	orig := string(cfg)
	writeFile(t, e.b("data", "a.txt"), "alphaword\n", 0o644)
	writeFile(t, e.b("data", "secret", "s.txt"), "alphaword hiddenword\n", 0o644)
	e.found(t, "alphaword", "data://a.txt")

	reload := func(enabled string) string { return e.reloadEnabled(t, orig, "index", enabled) }
	off := func(when string) {
		t.Helper()
		for _, uid := range []int{0, 1001} {
			if out, err := e.search(t, uid, "alphaword"); err == nil || !strings.Contains(out, "search is off") {
				t.Errorf("%s: search as uid %d: %v\n%s", when, uid, err, out)
			}
		}
		b, err := os.ReadFile(filepath.Join(e.mnt, ".neuralis", "search", "alphaword"))
		if err != nil || !strings.Contains(string(b), "search is off") {
			t.Errorf("%s: .neuralis/search/alphaword: %v\n%s", when, err, b)
		}
		if st := e.status(t); !strings.Contains(st, "index: off") {
			t.Errorf("%s: neuralisfs status says:\n%s", when, st)
		}
	}

	if out := reload("false"); !strings.Contains(out, "[index] enabled unset → false") {
		t.Errorf("the reload turning the index off said:\n%s", out)
	}
	off("after a reload turned the index off")
	// The mount works on, and what it writes meanwhile is found later.
	must(t, os.WriteFile(e.m("data", "while-off.txt"), []byte("gammaword\n"), 0o644))
	must(t, os.Remove(e.m("data", "a.txt")))
	off("after writes with the index off")

	if out := reload("true"); !strings.Contains(out, "[index] enabled false → true") {
		t.Errorf("the reload turning the index on said:\n%s", out)
	}
	e.found(t, "gammaword", "data://while-off.txt")
	if st := e.status(t); strings.Contains(st, "index: off") || !strings.Contains(st, "index: ") {
		t.Errorf("with the index on again, neuralisfs status says:\n%s", st)
	}
	e.notFound(t, "alphaword", "data://a.txt")
	must(t, os.WriteFile(e.m("data", "after-on.txt"), []byte("deltaword\n"), 0o644))
	e.found(t, "deltaword", "data://after-on.txt")
	e.found(t, "hiddenword", "data://secret/s.txt")
	// The agent searches the index that came back, and its hidden
	// folder stays out of what it finds.
	if out, err := e.search(t, 1001, "deltaword"); err != nil || !strings.Contains(out, "data://after-on.txt") {
		t.Errorf("the agent's search after the index came back: %v\n%s", err, out)
	}
	if out, err := e.search(t, 1001, "hiddenword"); err != nil || strings.Contains(out, "secret") {
		t.Errorf("the agent's search after the index came back: %v\n%s", err, out)
	}
	if out, err := run(t, 1001, "cat "+filepath.Join(e.mnt, ".neuralis", "search", "alphaword")); err != nil || strings.Contains(out, "secret") {
		t.Errorf("the agent's .neuralis/search after the index came back: %v\n%s", err, out)
	}

	// Off and on again at once, twice: nothing is left half open.
	reload("false")
	reload("true")
	reload("false")
	off("after turning the index off again")
	reload("true")
	e.found(t, "deltaword", "data://after-on.txt")
}

// A reload turns the journal on and off without remounting. Off, history
// and revert say the journal is off and the mount's writes go on, kept
// nowhere; on again, every record kept before is there (and revertable),
// and the next change is kept. Before, [journal] enabled was read at
// start only.
func TestReloadTurnsTheJournalOnAndOff(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	cfg, err := os.ReadFile(e.cfg)
	must(t, err)
	orig := string(cfg)
	f := e.m("data", "f.txt")
	must(t, os.WriteFile(f, []byte("v1\n"), 0o644))
	must(t, os.WriteFile(f, []byte("v2\n"), 0o644))
	before := e.history(t, "data://f.txt")
	if len(before) == 0 {
		t.Fatal("the overwrite of v1 left no record")
	}
	reload := func(enabled string) string { return e.reloadEnabled(t, orig, "journal", enabled) }

	if out := reload("false"); !strings.Contains(out, "[journal] enabled unset → false") {
		t.Errorf("the reload turning the journal off said:\n%s", out)
	}
	if st := e.status(t); !strings.Contains(st, "journal: off") {
		t.Errorf("with the journal off, neuralisfs status says:\n%s", st)
	}
	for _, cmd := range []string{"history data://f.txt", "revert data://f.txt"} {
		if out, err := run(t, 0, binPath+" "+cmd+" -c "+e.cfg); err == nil || !strings.Contains(out, "journal is disabled") {
			t.Errorf("%s with the journal off: %v\n%s", cmd, err, out)
		}
	}
	must(t, os.WriteFile(f, []byte("v3\n"), 0o644))
	must(t, os.WriteFile(e.m("data", "new.txt"), []byte("new\n"), 0o644))
	if b, err := os.ReadFile(e.b("data", "f.txt")); err != nil || string(b) != "v3\n" {
		t.Fatalf("a write with the journal off: %q %v", b, err)
	}

	if out := reload("true"); !strings.Contains(out, "[journal] enabled false → true") {
		t.Errorf("the reload turning the journal on said:\n%s", out)
	}
	if st := e.status(t); strings.Contains(st, "journal: off") {
		t.Errorf("with the journal on again, neuralisfs status says:\n%s", st)
	}
	after := e.history(t, "data://f.txt")
	if len(after) != len(before) || after[0].ID != before[0].ID {
		t.Errorf("history after the journal came back: %+v; want the %d records kept before it went off, and none for the write meanwhile: %+v", after, len(before), before)
	}
	must(t, os.WriteFile(f, []byte("v4\n"), 0o644))
	eventually(t, 10*time.Second, "a record of the overwrite of v3", func() bool {
		return len(e.history(t, "data://f.txt")) == len(before)+1
	})
	e.revert(t, "data://f.txt")
	same(t, e.b("data", "f.txt"), "v3\n", 0o644)
	// The record kept before the journal went off still brings its bytes back.
	e.revert(t, "data://f.txt", "--to", before[0].ID)
	same(t, e.b("data", "f.txt"), "v1\n", 0o644)

	reload("false")
	reload("true")
	if n := len(e.history(t, "data://f.txt")); n < len(before)+3 {
		t.Errorf("after turning the journal off and on again, f.txt has %d records; want at least %d", n, len(before)+3)
	}
}

// A held file is searched by its principal under the running [index]
// max_file_bytes: after a reload raises the bound past the file's size,
// the agent's search finds it. Before, the held files' overlay took the
// bound from the config the daemon started with.
func TestReloadRaisesTheHeldSearchBound(t *testing.T) {
	view := filepath.Join(sharedTempDir(t), "view")
	must(t, os.Mkdir(view, 0o755))
	e := newEnv(t, settingsTOML+viewTOML("agent", view), src{slug: "data"})
	cfg, err := os.ReadFile(e.cfg)
	must(t, err)
	must(t, os.Chmod(e.b("data"), 0o777))
	// 1.5 MB: over the default bound of 1 MiB, under the raised one.
	if out, err := run(t, 1001, "cd "+filepath.Join(view, "data")+" && { echo heldbigword; yes 'filler words of a held log' | head -c 1500000; } > big.txt"); err != nil {
		t.Fatalf("the agent's held write: %v\n%s", err, out)
	}
	if l := sh(t, binPath+" review list -c "+e.cfg); !strings.Contains(l, "data://big.txt") {
		t.Fatalf("big.txt is not held:\n%s", l)
	}
	if out, err := e.search(t, 1001, "heldbigword"); err != nil || strings.Contains(out, "big.txt") {
		t.Errorf("the agent's search under the default bound: %v\n%s", err, out)
	}
	e.rewrite(string(cfg) + "\n[index]\nmax_file_bytes = 4000000\n")
	if out, err := e.reloadCLI(0); err != nil || !strings.Contains(out, "[index] max_file_bytes unset → 4000000") {
		t.Fatalf("neuralisfs reload: %v\n%s", err, out)
	}
	if out, err := e.search(t, 1001, "heldbigword"); err != nil || !strings.Contains(out, "data://big.txt") {
		t.Errorf("the agent's search after the bound was raised to 4000000: %v\n%s", err, out)
	}
	if _, err := os.Stat(e.b("data", "big.txt")); err == nil {
		t.Error("the held file reached the backing folder")
	}
}
