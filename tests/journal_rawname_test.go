package tests

import (
	"encoding/base64"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestRevertOfANameThatIsNotUTF8 reverts a file whose name is not UTF-8,
// before and after a restart, beside a file whose name is that name with
// the bad byte read as U+FFFD. A name is bytes: JSON (records.jsonl, the
// control socket) writes such a byte as U+FFFD, so the revert named the
// other file, or nothing.
func TestRevertOfANameThatIsNotUTF8(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	bad, lookalike := "z\xff.txt", "z\uFFFD.txt"
	writeFile(t, e.b("data", bad), "original\n", 0o644)
	writeFile(t, e.b("data", lookalike), "bystander\n", 0o644)
	for round, restart := range []bool{false, true} {
		must(t, os.WriteFile(e.m("data", bad), []byte("changed\n"), 0o644))
		if restart {
			e.stop()
			e.start()
		}
		e.revert(t, "data://"+bad)
		same(t, e.b("data", bad), "original\n", 0o644)
		same(t, e.b("data", lookalike), "bystander\n", 0o644)
		// The history names the file, and only it: quoted in the
		// listing, and in --json as NUL and the base64 of its bytes.
		out, err := exec.Command(binPath, "history", "-c", e.cfg, "data://"+bad).CombinedOutput()
		if err != nil || !strings.Contains(string(out), strconv.Quote("data://"+bad)) || strings.Contains(string(out), lookalike) {
			t.Errorf("round %d: history of %q: %v\n%s", round, bad, err, out)
		}
		recs := e.history(t, "data://"+bad)
		want := "\x00" + base64.RawStdEncoding.EncodeToString([]byte("data://"+bad))
		if len(recs) == 0 {
			t.Fatalf("round %d: no history --json of %q", round, bad)
		}
		for _, r := range recs {
			if r.URI != want {
				t.Errorf("round %d: history --json uri %q; want %q", round, r.URI, want)
			}
		}
		if recs := e.history(t, "data://"+lookalike); len(recs) != 0 {
			t.Errorf("round %d: the lookalike has a history: %+v", round, recs)
		}
	}
	// A rename's record carries both names through a restart: the old
	// name's history finds it by its from, and reverting the new name
	// removes it.
	must(t, os.Rename(e.m("data", bad), e.m("data", "moved\xfe.txt")))
	e.stop()
	e.start()
	from := "\x00" + base64.RawStdEncoding.EncodeToString([]byte("data://"+bad))
	if recs := e.history(t, "data://moved\xfe.txt"); len(recs) != 1 || recs[0].From != from {
		t.Errorf("history --json of the new name: %+v", recs)
	}
	if recs := e.history(t, "data://"+bad); len(recs) == 0 || recs[0].From != from {
		t.Errorf("history --json of the old name does not start with the rename: %+v", recs)
	}
	e.revert(t, "data://moved\xfe.txt")
	if _, err := os.Lstat(e.b("data", "moved\xfe.txt")); err == nil {
		t.Errorf("revert of a rename left the new name")
	}
	same(t, e.b("data", lookalike), "bystander\n", 0o644)
}
