package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// stagingProbePy stats, opens and makes names through the mount and
// prints one line per attempt, errors by name, so that two names can be
// compared: a name an approval moves files aside to must answer as a free
// one does, whether or not something is there.
const stagingProbePy = `
import errno, os, sys
d, name = sys.argv[1], sys.argv[2]
p = os.path.join(d, name)
def case(what, f):
    try:
        f()
        r = "ok"
    except OSError as e:
        r = errno.errorcode[e.errno]
    print("%s: %s" % (what, r))
case("stat", lambda: os.lstat(p))
case("open", lambda: os.close(os.open(p, os.O_RDONLY)))
case("stat below", lambda: os.lstat(os.path.join(p, "inner.txt")))
case("create", lambda: os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)))
case("mkdir", lambda: os.mkdir(p))
case("symlink", lambda: os.symlink("x", p))
case("link", lambda: os.link(os.path.join(d, "control.txt"), p))
case("rename onto", lambda: os.rename(os.path.join(d, "control.txt"), p))
case("listed", lambda: [n for n in os.listdir(d) if n.startswith(".neuralisfs-")] and os.lstat("/nonexistent/listed"))
`

// The daemon writes names of its own into backing folders for a moment:
// an approval lands each held file under a name next to it
// (.neuralisfs-approve-…) and renames it over, a revert does the same
// (.neuralisfs-revert-…), and an approval of renames whose old names other
// changes reuse moves backing files aside at the top of the source
// (.neuralisfs-approving-…). Each is out of reach of the rules that decide
// the file at its own name. Nobody sees such a name: not on the mount (as
// any caller, in the main mount and in a view, at the top and below), not
// through MCP, not in search; it answers exactly as a free name does, and
// none can be made through the mount. A caller that lists the folders
// over and over while an approval of forty swaps of files hidden from it
// and forty new files of a name hidden from it runs never catches one.
func TestStagingNamesAreNobodys(t *testing.T) {
	base := sharedTempDir(t)
	view := filepath.Join(base, "view")
	must(t, os.Mkdir(view, 0o755))
	e := newEnv(t, heldConfig(view)+`
[[rule]]
uri = "d://secret/**"
who = ["alice"]
deny = ["read"]

[[rule]]
uri = "d://**/*.key"
who = ["alice"]
deny = ["read"]
`, src{slug: "d"})
	const staged, free = ".neuralisfs-approving-0123456789ab", ".neuralisfs-approving-ba9876543210"
	sh(t, `set -e
cd "$D"
echo 'stagedwordqzx control' > control.txt
echo 'stagedwordqzx staged' > `+staged+`
mkdir .neuralisfs-approving-aaaaaaaaaaaa && echo 'stagedwordqzx below' > .neuralisfs-approving-aaaaaaaaaaaa/inner.txt
mkdir pub && echo 'stagedwordqzx control below' > pub/control.txt && echo 'stagedwordqzx landing' > pub/.neuralisfs-approve-0a1 && echo 'stagedwordqzx revert' > pub/.neuralisfs-revert-0b2
mkdir secret && for i in $(seq 1 40); do echo "secret a$i" > secret/a$i; echo "secret b$i" > secret/b$i; done
chmod -R a+rwX . && chown -R 1001:1001 .
`, "D="+e.b("d"))
	type probeAt struct{ dir, staged, free string }
	for _, uid := range []int{0, 1001, 1002} {
		for _, p := range []probeAt{
			{e.m("d"), staged, free},
			{filepath.Join(view, "d"), staged, free},
			{e.m("d", "pub"), ".neuralisfs-approve-0a1", ".neuralisfs-approve-0a2"},
			{e.m("d", "pub"), ".neuralisfs-revert-0b2", ".neuralisfs-revert-0b3"},
		} {
			dir := p.dir
			if strings.HasPrefix(dir, view) && uid != 1001 {
				continue // the view is the agent's
			}
			probe := func(name string) string {
				out, err := run(t, uid, "python3 -c '"+stagingProbePy+"' "+dir+" "+name)
				if err != nil {
					t.Fatalf("probe of %s as uid %d: %v\n%s", name, uid, err, out)
				}
				return out
			}
			got, want := probe(p.staged), probe(p.free)
			if got != want {
				t.Errorf("uid %d in %s: a staged name answers otherwise than a free one:\n--- staged\n%s--- free\n%s", uid, dir, got, want)
			}
			for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
				what, r, _ := strings.Cut(line, ": ")
				wantR := "ENOENT"
				switch what {
				case "create", "mkdir", "symlink", "link", "rename onto":
					wantR = "EPERM"
				case "listed":
					wantR = "ok"
				}
				if r != wantR {
					t.Errorf("uid %d in %s: %s of a staged name: %s; want %s", uid, dir, what, r, wantR)
				}
			}
		}
	}
	// Nothing was made through the mount, in the layer or on disk.
	if out := sh(t, `find "$D" -name '.neuralisfs-*' | wc -l`, "D="+e.b("d")); strings.TrimSpace(out) != "4" {
		t.Errorf("the backing folder's staged names changed: %s", out)
	}
	if items := reviewJSON(t, 0, e, "list"); len(items) != 0 {
		t.Errorf("the agent's attempts left held changes: %v", items)
	}

	// Search and MCP.
	e.found(t, "stagedwordqzx", "d://control.txt")
	e.found(t, "stagedwordqzx", "d://pub/control.txt")
	if out, _ := e.search(t, 0, "stagedwordqzx"); strings.Contains(out, ".neuralisfs-") {
		t.Errorf("search shows a staged name:\n%s", out)
	}
	cs := mcpSession(t, e, 0)
	for _, l := range mcpList(t, cs, "d://") {
		if strings.Contains(l, ".neuralisfs-") {
			t.Errorf("MCP lists a staged name: %s", l)
		}
	}
	gotS, errS := callTool(t, cs, "read", map[string]any{"uri": "d://" + staged})
	gotF, errF := callTool(t, cs, "read", map[string]any{"uri": "d://" + free})
	if !errS || strings.Contains(gotS, "stagedwordqzx") || strings.ReplaceAll(gotS, staged, free) != gotF || !errF {
		t.Errorf("MCP read of a staged name: %q (error %v); of a free one: %q (error %v)", gotS, errS, gotF, errF)
	}

	// The race: the agent swaps forty pairs of secret files (each swap is
	// landed by moving one file aside), alice lists the top of the source
	// and opens whatever she finds there until the approval is done.
	var swaps strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&swaps, "mv secret/a%d t && mv secret/b%d secret/a%d && mv t secret/b%d\n", i, i, i, i)
	}
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&swaps, "echo key%d > pub/k%d.key\n", i, i)
	}
	if out, err := run(t, 1001, "set -e\ncd "+e.m("d")+"\n"+swaps.String()); err != nil {
		t.Fatalf("the agent's swaps: %v\n%s", err, out)
	}
	sig := filepath.Join(base, "sig") // alice's and the test's signals
	must(t, os.Mkdir(sig, 0o777))
	must(t, os.Chmod(sig, 0o777))
	ready, stop := filepath.Join(sig, "ready"), filepath.Join(sig, "stop")
	seen := make(chan string, 1)
	go func() {
		out, _ := run(t, 1002, `python3 -c '
import os, sys
d, ready, stop = sys.argv[1], sys.argv[2], sys.argv[3]
seen, rounds = set(), 0
while not os.path.exists(stop):
    for sub in (d, os.path.join(d, "pub")):
        for n in os.listdir(sub):
            if n.startswith(".neuralisfs-"):
                try:
                    with open(os.path.join(sub, n)) as f:
                        seen.add(n + "=" + f.read().strip())
                except OSError as e:
                    seen.add(n + " " + e.strerror)
    rounds += 1
    if rounds == 1:
        open(ready, "w").close()
print(rounds)
print(" ".join(sorted(seen)))
' `+e.m("d")+" "+ready+" "+stop)
		seen <- out
	}()
	eventually(t, 30*time.Second, "alice listing the source", func() bool {
		_, err := os.Stat(ready)
		return err == nil
	})
	if out, err := run(t, 0, binPath+" review approve --all -c "+e.cfg); err != nil {
		t.Fatalf("review approve --all: %v\n%s", err, out)
	}
	must(t, os.WriteFile(stop, nil, 0o644))
	rounds, saw, _ := strings.Cut(<-seen, "\n")
	if n, err := strconv.Atoi(rounds); err != nil || n < 2 {
		t.Fatalf("alice listed %q times: she was not listing while the approval ran", rounds)
	}
	if saw = strings.TrimSpace(saw); saw != "" {
		t.Errorf("alice saw staged names during the approval: %s", saw)
	}
	for i := 1; i <= 40; i++ {
		if b, _ := os.ReadFile(e.b("d", "secret", fmt.Sprintf("a%d", i))); string(b) != fmt.Sprintf("secret b%d\n", i) {
			t.Fatalf("secret/a%d after the approval: %q", i, b)
		}
		if b, _ := os.ReadFile(e.b("d", "pub", fmt.Sprintf("k%d.key", i))); string(b) != fmt.Sprintf("key%d\n", i) {
			t.Fatalf("pub/k%d.key after the approval: %q", i, b)
		}
	}
}
