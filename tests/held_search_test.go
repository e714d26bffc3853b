package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The agent's searches find its held content: a held new file and a held
// edit are found, a held delete is not, through the mount's
// .neuralis/search and the CLI as the agent; the owner and a third
// principal find none of the held words and still find what the agent
// deleted.
func TestHeldSearchFindsHeldContent(t *testing.T) {
	e := newEnv(t, `
[[principal]]
name = "agent"
uids = [1001]
roles = ["agent"]

[[principal]]
name = "carol"
uids = [1003]

[[rule]]
uri = "*://**"
who = ["role:agent"]
review = ["write"]
`, src{slug: "d"})
	sh(t, `set -e
cd "$D"
echo 'original line plainwordqrs' > edit.txt
echo 'bye gonewordkjh' > gone.txt
echo 'stays keptwordmnb' > kept.txt
chmod -R a+rwX . && chown -R 1001:1001 .
`, "D="+e.b("d"))
	e.found(t, "gonewordkjh", "d://gone.txt:1:")
	e.found(t, "plainwordqrs", "d://edit.txt:1:")

	if out, err := run(t, 1001, `set -e
cd "$M"
echo 'fresh heldnewzqx' > new.txt
echo 'added heldeditwqv' >> edit.txt
rm gone.txt
`, "M="+e.m("d")); err != nil {
		t.Fatalf("agent's writes: %v\n%s", err, out)
	}
	// Held, not applied.
	if b, _ := os.ReadFile(e.b("d", "edit.txt")); strings.Contains(string(b), "heldeditwqv") {
		t.Fatalf("the agent's edit reached the backing file: %q", b)
	}
	if _, err := os.Stat(e.b("d", "gone.txt")); err != nil {
		t.Fatalf("the agent's delete reached the backing folder: %v", err)
	}

	mountSearch := func(uid int, q string) string {
		t.Helper()
		out, err := run(t, uid, `cat "$F"`, "F="+filepath.Join(e.mnt, ".neuralis", "search", q))
		if err != nil {
			t.Fatalf(".neuralis/search/%s as uid %d: %v\n%s", q, uid, err, out)
		}
		return out
	}
	cliSearch := func(uid int, q string) string {
		t.Helper()
		out, err := e.search(t, uid, q)
		if err != nil && strings.TrimSpace(out) != "" && !strings.Contains(out, "no match") && !strings.Contains(out, "d://") {
			t.Fatalf("neuralisfs search %s as uid %d: %v\n%s", q, uid, err, out)
		}
		return out
	}
	type want struct {
		q, has, hasNot string
	}
	agent := []want{
		{"heldnewzqx", "d://new.txt:1:", ""},
		{"heldeditwqv", "d://edit.txt:2:", ""},
		{"plainwordqrs", "d://edit.txt:1:", ""}, // the edited file, once
		{"gonewordkjh", "", "gone.txt"},
		{"keptwordmnb", "d://kept.txt:1:", ""}, // unchanged files as before
	}
	others := []want{
		{"heldnewzqx", "", "new.txt"},
		{"heldeditwqv", "", "edit.txt"},
		{"gonewordkjh", "d://gone.txt:1:", ""},
		{"plainwordqrs", "d://edit.txt:1:", ""},
	}
	check := func(who string, uid int, ws []want) {
		t.Helper()
		for _, w := range ws {
			for surface, out := range map[string]string{"mount": mountSearch(uid, w.q), "cli": cliSearch(uid, w.q)} {
				if w.has != "" && !strings.Contains(out, w.has) {
					t.Errorf("%s (%s) searching %s: want %s in\n%s", who, surface, w.q, w.has, out)
				}
				if w.hasNot != "" && strings.Contains(out, w.hasNot) {
					t.Errorf("%s (%s) searching %s: %s must not show in\n%s", who, surface, w.q, w.hasNot, out)
				}
				if strings.Count(out, "d://edit.txt:1:") > 1 {
					t.Errorf("%s (%s) searching %s: edit.txt listed twice\n%s", who, surface, w.q, out)
				}
			}
		}
	}
	check("agent", 1001, agent)
	check("owner", 0, others)
	check("carol", 1003, others)
	// The held-edit hit carries the held line as its snippet.
	if out := mountSearch(1001, "heldeditwqv"); !strings.Contains(out, "added «heldeditwqv»") {
		t.Errorf("agent's hit on the held edit has no snippet from the held file:\n%s", out)
	}
}
