package tests

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// One caller cannot take every descriptor the daemon has: past a
// quarter of the daemon's RLIMIT_NOFILE its opens (files and folders)
// answer ENFILE, and root and other users go on opening, writing and
// listing; once it closes them it opens again. Before, an agent that
// opened 20,000 files made every source UNAVAILABLE and every open by
// anyone fail (found by a red-team pass).
func TestOneCallerCannotTakeEveryDescriptor(t *testing.T) {
	e := newEnv(t, `
[[principal]]
name = "agent"
uids = [1001]
`, src{slug: "data"})
	writeFile(t, e.b("data", "a.txt"), "a\n", 0o644)
	must(t, os.Mkdir(e.b("data", "dir"), 0o777))
	must(t, os.Chmod(e.b("data", "dir"), 0o777))
	out := sh(t, `/usr/bin/python3 - <<'PY'
import os, resource, errno, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
m = os.environ["M"]
def t(name, f):
    try:
        print(name, repr(f()))
    except OSError as e:
        print(name, "ERR", errno.errorcode[e.errno])
os.setgroups([]); os.setresgid(1001, 1001, 0); os.setresuid(1001, 1001, 0)
fds, err = [], None
while len(fds) < hard - 100:
    try:
        fds.append(os.open(m + ("/a.txt" if len(fds) % 2 else "/dir"), os.O_RDONLY))
    except OSError as e:
        err = errno.errorcode[e.errno]
        break
print("opened", len(fds), err, hard)
t("agent create", lambda: os.open(m + "/dir/agent.txt", os.O_CREAT | os.O_WRONLY, 0o644))
for uid in (0, 1002):
    os.seteuid(0)
    os.seteuid(uid)
    t("%d read" % uid, lambda: os.read(os.open(m + "/a.txt", os.O_RDONLY), 10))
    t("%d create" % uid, lambda: os.close(os.open(m + "/dir/by%d.txt" % uid, os.O_CREAT | os.O_WRONLY, 0o644)))
    t("%d list" % uid, lambda: len(os.listdir(m + "/dir")) > 0)
os.seteuid(0)
os.seteuid(1001)
for fd in fds:
    os.close(fd)
# The kernel tells the daemon of each close after close(2) returns.
def again():
    for _ in range(200):
        try:
            return os.read(os.open(m + "/a.txt", os.O_RDONLY), 10)
        except OSError as e:
            if e.errno != errno.ENFILE:
                raise
            time.sleep(0.05)
    return "still ENFILE"
t("agent again", again)
PY`, "M="+e.m("data"))
	var n, hard int
	var why string
	if i := strings.Index(out, "opened "); i >= 0 {
		fmt.Sscanf(out[i:], "opened %d %s %d", &n, &why, &hard)
	}
	if why != "ENFILE" || n < 256 || n > hard/4+1 {
		t.Fatalf("the agent's opens stopped at %d (%s), its limit %d:\n%s", n, why, hard, out)
	}
	for _, want := range []string{"agent create ERR ENFILE", "0 read b'a\\n'", "0 create None", "0 list True",
		"1002 read b'a\\n'", "1002 create None", "1002 list True", "agent again b'a\\n'"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
