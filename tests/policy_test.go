package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const canary = "CANARY-7f3a9c"

// agentTOML is the rules the policy and escape tests share: the agent
// (uid 1001) may not read or write data's secrets/ and mixed/hidden/, nor
// write ro/; alice (uid 1002) may do anything; anyone else nothing.
const agentTOML = `
[[principal]]
name = "agent"
uids = [1001]
roles = ["agent"]

[[principal]]
name = "alice"
uids = [1002]

[[rule]]
uri = "*://**"
who = ["other"]
deny = ["read", "write", "exec"]

[[rule]]
uri = "data://secrets/**"
who = ["role:agent"]
deny = ["read", "write"]

[[rule]]
uri = "data://mixed/hidden/**"
who = ["role:agent"]
deny = ["read", "write"]

[[rule]]
uri = "data://ro/**"
who = ["role:agent"]
deny = ["write"]
`

// agentData writes what agentTOML guards into the data source at dir:
// each hidden file starts with the canary. Files are 0666 (folders as
// MkdirAll makes them), so only the policy stands between the agent and
// the secrets once the caller opens the folders.
func agentData(t *testing.T, dir string) {
	t.Helper()
	for name, content := range map[string]string{
		"secrets/k":          canary + " secret key\n",
		"secrets/sub/k2":     canary + " deeper\n",
		"public/p.txt":       "public text\n",
		"ro/r.txt":           "read only\n",
		"mixed/open.txt":     "open\n",
		"mixed/hidden/h.txt": canary + " hidden\n",
	} {
		writeFile(t, filepath.Join(dir, name), content, 0o666)
	}
}

// agentViewData makes a mountpoint for a view and a data folder holding
// agentData, every folder of it open to everyone (so the agent's own
// rules, not mode bits, decide).
func agentViewData(t *testing.T) (view, data string) {
	t.Helper()
	view = filepath.Join(sharedTempDir(t), "agentview")
	must(t, os.Mkdir(view, 0o755))
	data = sharedTempDir(t)
	os.Chmod(data, 0o777)
	agentData(t, data)
	for _, d := range []string{"secrets", "secrets/sub", "public", "ro", "mixed", "mixed/hidden"} {
		os.Chmod(filepath.Join(data, d), 0o777)
	}
	return view, data
}

// viewTOML is a [[view]] of principal at mountpoint.
func viewTOML(principal, mountpoint string) string {
	return fmt.Sprintf("\n[[view]]\nprincipal = %q\nmountpoint = %q\n", principal, mountpoint)
}

const policyTOML = agentTOML + `

[[rule]]
uri = "data://bin/denied"
who = ["role:agent"]
deny = ["exec"]
`

// policyEnv mounts a data source with secrets, read-only and exec-denied
// parts for the agent (uid 1001), plus a view for the agent.
func policyEnv(t *testing.T) (*env, string) {
	view := filepath.Join(sharedTempDir(t), "agentview")
	must(t, os.Mkdir(view, 0o755))
	extra := policyTOML + viewTOML("agent", view)
	data := sharedTempDir(t)
	os.Chmod(data, 0o777)
	agentData(t, data)
	writeFile(t, filepath.Join(data, "bin", "denied"), "#!/bin/sh\necho ran-denied\n", 0o755)
	writeFile(t, filepath.Join(data, "bin", "allowed"), "#!/bin/sh\necho ran-allowed\n", 0o755)
	for _, d := range []string{"secrets", "secrets/sub", "public", "ro", "mixed", "mixed/hidden", "bin"} {
		os.Chmod(filepath.Join(data, d), 0o777)
	}
	e := newEnv(t, extra, src{slug: "data", path: data})
	return e, view
}

// agent runs a script as uid 1001 and returns its output, failing the test
// if the canary shows up anywhere in it.
func agent(t *testing.T, script string) string {
	t.Helper()
	out, _ := run(t, 1001, script)
	if strings.Contains(out, canary) {
		t.Errorf("the agent saw the canary:\n--- script\n%s\n--- output\n%s", script, out)
	}
	return out
}

func TestPolicyHidesAndRefuses(t *testing.T) {
	e, _ := policyEnv(t)
	d := e.m("data")
	// Owner first, so the kernel has every name cached.
	sh(t, fmt.Sprintf("cat %s/secrets/k %s/secrets/sub/k2 %s/mixed/hidden/h.txt >/dev/null; ls -laR %s >/dev/null; stat %s/secrets", d, d, d, d, d))
	out := agent(t, fmt.Sprintf(`cd /
for p in secrets secrets/k secrets/sub/k2 mixed/hidden mixed/hidden/h.txt; do
  stat %[1]s/$p >/dev/null 2>&1 && echo "VISIBLE $p" || echo "absent $p"
  cat %[1]s/$p 2>&1 | head -1
done
ls -la %[1]s %[1]s/mixed
find %[1]s | sort
grep -r secret %[1]s || true
grep -rl CANARY %[1]s || true
du -a %[1]s | sort -k2
tar cf - -C %[1]s . | tar tf - | sort
`, d))
	for _, p := range []string{"secrets", "secrets/k", "secrets/sub/k2", "mixed/hidden", "mixed/hidden/h.txt"} {
		if !strings.Contains(out, "absent "+p) {
			t.Errorf("%s is visible to the agent:\n%s", p, out)
		}
	}
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "absent ") || strings.HasPrefix(line, "cat: ") {
			continue
		}
		if strings.Contains(line, "hidden") || strings.Contains(line, "secrets") {
			t.Errorf("a listing shows a hidden name: %q", line)
		}
		// Folder link counts would count hidden subfolders: they are 1.
		if f := strings.Fields(line); len(f) > 8 && strings.HasPrefix(f[0], "d") && f[1] != "1" {
			t.Errorf("a folder's link count can reveal hidden subfolders: %q", line)
		}
	}
	if !strings.Contains(out, "public/p.txt") || !strings.Contains(out, "mixed/open.txt") {
		t.Errorf("the agent does not see what it may read:\n%s", out)
	}
	// Owner can still read: a denial is per principal, not cached for all.
	if got := sh(t, "cat "+e.m("data", "secrets", "k")); !strings.Contains(got, canary) {
		t.Errorf("owner lost access after the agent was refused: %q", got)
	}
}

func TestPolicyCachedLookupsByAnotherUID(t *testing.T) {
	e, _ := policyEnv(t)
	// Interleave: owner looks up, the agent immediately tries the same.
	for i := range 20 {
		p := e.m("data", "secrets", "k")
		if i%2 == 1 {
			p = e.m("data", "mixed", "hidden", "h.txt")
		}
		sh(t, "stat "+p+" >/dev/null && cat "+p+" >/dev/null && ls "+filepath.Dir(p)+" >/dev/null")
		out := agent(t, "stat -c %s "+p+" 2>&1; cat "+p+" 2>&1; ls "+filepath.Dir(p)+" 2>&1; test -e "+p+" && echo EXISTS")
		if strings.Contains(out, "EXISTS") || !strings.Contains(out, "No such file") {
			t.Fatalf("round %d: the agent sees a name the owner had cached:\n%s", i, out)
		}
	}
	// And the other way round: a name refused to the agent is not cached
	// as absent for the owner.
	agent(t, "stat "+e.m("data", "secrets", "sub", "k2")+" 2>&1")
	if _, err := os.Stat(e.m("data", "secrets", "sub", "k2")); err != nil {
		t.Errorf("owner cannot see a name the agent was refused: %v", err)
	}
}

func TestPolicyWritesRefused(t *testing.T) {
	e, _ := policyEnv(t)
	d := e.m("data")
	before := snapshot(t, e.b("data"))
	out := agent(t, fmt.Sprintf(`cd /
try() { if "$@" 2>/dev/null; then echo "ALLOWED: $*"; else echo "refused: $*"; fi; }
try sh -c 'echo x > %[1]s/ro/r.txt'
try sh -c 'echo x >> %[1]s/ro/r.txt'
try truncate -s 0 %[1]s/ro/r.txt
try sh -c ': > %[1]s/ro/r.txt'
try touch %[1]s/ro/new
try mkdir %[1]s/ro/newdir
try rm %[1]s/ro/r.txt
try chmod 600 %[1]s/ro/r.txt
try touch -d 2000-01-01 %[1]s/ro/r.txt
try mv %[1]s/ro/r.txt %[1]s/public/stolen.txt
try mv %[1]s/public/p.txt %[1]s/secrets/p.txt
try mv %[1]s/public/p.txt %[1]s/ro/p.txt
try mv %[1]s/secrets/k %[1]s/public/k
try mv %[1]s/mixed %[1]s/mixed2
try mv %[1]s/mixed %[1]s/public/mixed
try ln %[1]s/secrets/k %[1]s/public/klink
try ln %[1]s/ro/r.txt %[1]s/public/rlink
try ln %[1]s/public/p.txt %[1]s/secrets/plink
try ln -s x %[1]s/ro/sym
try python3 -c 'import os; os.setxattr("%[1]s/ro/r.txt", "user.x", b"1")'
try python3 -c 'import os; os.getxattr("%[1]s/secrets/k", "user.x")'
try sh -c 'echo x > %[1]s/secrets/new'
try rm -rf %[1]s/mixed
try rmdir %[1]s/secrets
`, d))
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "ALLOWED") && !strings.Contains(line, "rm -rf") {
			t.Errorf("%s", line)
		}
	}
	if after := snapshot(t, e.b("data")); !strings.Contains(after, "mixed/hidden/h.txt") || !strings.Contains(after, "ro/r.txt") || !strings.Contains(after, "secrets/k ") {
		t.Errorf("a refused operation changed the backing folder:\n--- before\n%s\n--- after\n%s", before, after)
	}
	b, _ := os.ReadFile(e.b("data", "ro", "r.txt"))
	if string(b) != "read only\n" {
		t.Errorf("ro/r.txt changed: %q", b)
	}
	// The agent may still write where the policy allows.
	if out, err := run(t, 1001, "echo mine > "+e.m("data", "public", "mine.txt")); err != nil {
		t.Errorf("allowed write refused: %v %s", err, out)
	}
}

func TestPolicySymlinkAndExec(t *testing.T) {
	e, _ := policyEnv(t)
	d := e.m("data")
	out := agent(t, fmt.Sprintf(`cd /
ln -s ../secrets/k %[1]s/public/sl && echo made-link
cat %[1]s/public/sl 2>&1
readlink %[1]s/public/sl
%[1]s/bin/allowed 2>&1
%[1]s/bin/denied 2>&1 || echo exec-refused
python3 -c '
import mmap
f = open("%[1]s/public/p.txt", "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
print("mmap", m[:6])'
`, d))
	if !strings.Contains(out, "ran-allowed") {
		t.Errorf("allowed binary did not run:\n%s", out)
	}
	if strings.Contains(out, "ran-denied") || !strings.Contains(out, "exec-refused") {
		t.Errorf("exec-denied binary ran:\n%s", out)
	}
	if !strings.Contains(out, "mmap b'public'") {
		t.Errorf("mmap of a readable file failed:\n%s", out)
	}
}

func TestPolicyControlFilesAndAudit(t *testing.T) {
	e, _ := policyEnv(t)
	out := agent(t, "cat "+filepath.Join(e.mnt, ".neuralis", "whoami")+" "+filepath.Join(e.mnt, ".neuralis", "sources"))
	if !strings.Contains(out, "principal: agent") || !strings.Contains(out, "data\tlocal\t") || strings.Contains(out, "UNAVAILABLE") {
		t.Errorf("agent's control files:\n%s", out)
	}
	// "other" (an unknown uid) sees no sources at all.
	out, _ = run(t, 1003, "ls -a "+e.mnt+"; cat "+filepath.Join(e.mnt, ".neuralis", "sources")+"; ls "+e.m("data")+" 2>&1")
	if strings.Contains(out, "data\t") || !strings.Contains(out, "No such file") {
		t.Errorf("other sees a source:\n%s", out)
	}
	agent(t, "cat "+e.m("data", "secrets", "k")+"; echo x > "+e.m("data", "ro", "r.txt"))
	// The audit log has a JSON line per denial.
	logPath := filepath.Join(e.state, "audit.log")
	var lines []map[string]any
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("audit.log:\n%s", b)
		}
	}()
	eventually(t, 3*time.Second, "audit lines written", func() bool {
		lines = nil
		f, err := os.Open(logPath)
		if err != nil {
			return false
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["principal"] == "agent" {
				lines = append(lines, m)
			}
		}
		return len(lines) >= 2
	})
	seen := map[string]bool{}
	for _, l := range lines {
		seen[fmt.Sprint(l["uri"])] = true
		for _, k := range []string{"time", "principal", "uid", "pid", "op", "uri", "rule"} {
			if _, ok := l[k]; !ok {
				t.Errorf("audit line lacks %q: %v", k, l)
			}
		}
	}
	if !seen["data://secrets"] && !seen["data://secrets/k"] {
		t.Errorf("no audit line for the secret: %v", lines)
	}
	if !seen["data://ro/r.txt"] {
		t.Errorf("no audit line for the refused write: %v", lines)
	}
	out2, err := exec.Command(binPath, "audit", "-c", e.cfg).CombinedOutput()
	if err != nil || !strings.Contains(string(out2), `"principal":"agent"`) {
		t.Errorf("neuralisfs audit: %v\n%s", err, out2)
	}
}

func TestViewDecidesAsItsPrincipal(t *testing.T) {
	_, view := policyEnv(t)
	out := agent(t, "ls "+filepath.Join(view, "data")+"; cat "+filepath.Join(view, "data", "public", "p.txt")+"; cat "+filepath.Join(view, "data", "secrets", "k")+" 2>&1")
	if !strings.Contains(out, "public text") || strings.Contains(out, "secrets\n") {
		t.Errorf("agent in its view:\n%s", out)
	}
	// After the agent cached names in its view, another uid cannot even
	// stat them: the view's top belongs to the agent alone.
	agent(t, "stat "+filepath.Join(view, "data", "public", "p.txt"))
	if out, err := run(t, 1002, "stat "+filepath.Join(view, "data", "public", "p.txt")+" 2>&1"); err == nil {
		t.Errorf("uid 1002 stats a name the agent cached in its view:\n%s", out)
	}
	// Anyone else is refused in the agent's view, root included.
	for _, uid := range []int{0, 1002, 1003} {
		out, err := run(t, uid, "ls "+filepath.Join(view, "data")+" 2>&1")
		if err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("uid %d in the agent's view: %v %s", uid, err, out)
		}
	}
	// The agent's container: bubblewrap, dropped to uid 1001, the view bound in.
	script := sandbox(view, "/work") + " sh -c 'id -u; ls /work/data; cat /work/data/public/p.txt; cat /work/data/secrets/k 2>&1; ls -R /work 2>&1'"
	out, err := run(t, 1001, script)
	if err != nil {
		t.Fatalf("sandbox: %v\n%s", err, out)
	}
	if strings.Contains(out, canary) || !strings.Contains(out, "public text") || !strings.HasPrefix(out, "1001") {
		t.Errorf("agent container:\n%s", out)
	}
}

// TestViewTopLetsEveryUIDOfItsPrincipalIn: a view's top is its
// principal's alone, and all of it — every uid the principal has, by an
// absolute path (a process that set its uid to nobody under a principal of
// root and nobody, as LTP's tests do, could not make its folder when only
// the first uid could walk the top) — while a stranger, a uid an earlier
// principal claims and one in root's group are still refused by the
// kernel, and a reload that drops a uid shuts it out.
func TestViewTopLetsEveryUIDOfItsPrincipalIn(t *testing.T) {
	requireTool(t, "setpriv", "util-linux")
	requireACL(t)
	view := filepath.Join(sharedTempDir(t), "view")
	must(t, os.Mkdir(view, 0o755))
	principals := func(agentUIDs string) string {
		return `
[[principal]]
name = "first"
uids = [1004]

[[principal]]
name = "agent"
uids = ` + agentUIDs + `
` + viewTOML("agent", view)
	}
	e := newEnv(t, principals("[1001, 1005, 1004]"), src{slug: "data"})
	writeFile(t, e.b("data", "p.txt"), "for the agent\n", 0o644)
	as := func(uid, gid int, script string) (string, error) {
		return run(t, 0, fmt.Sprintf("setpriv --reuid=%d --regid=%d --clear-groups sh -c '%s' 2>&1", uid, gid, script))
	}
	for _, uid := range []int{1001, 1005} {
		if out, err := as(uid, uid, "cat "+view+"/data/p.txt && mkdir "+view+"/data/made$(id -u) && ls "+view+"/data"); err != nil || !strings.Contains(out, "for the agent") {
			t.Errorf("uid %d of the view's principal: %v\n%s", uid, err, out)
		}
	}
	for _, c := range []struct{ uid, gid int }{{1002, 1002}, {1004, 1004}, {1002, 0}, {1003, 1001}} {
		if out, err := as(c.uid, c.gid, "stat "+view+"/data/p.txt"); err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("uid %d gid %d walked the agent's view: %v\n%s", c.uid, c.gid, err, out)
		}
	}
	acl := sh(t, "getfacl -n "+view+" 2>/dev/null")
	if !strings.Contains(acl, "user:1005:r-x") || strings.Contains(acl, "1004") || !strings.Contains(acl, "other::---") || !strings.Contains(acl, "group::---") {
		t.Errorf("the view's top ACL:\n%s", acl)
	}
	cfg, err := os.ReadFile(e.cfg)
	must(t, err)
	e.rewrite(strings.Replace(string(cfg), "[1001, 1005, 1004]", "[1001]", 1))
	e.hup()
	eventually(t, 5*time.Second, "uid 1005, dropped by the reload, is refused at the view's top", func() bool {
		out, err := as(1005, 1005, "stat "+view+"/data/p.txt")
		return err != nil && strings.Contains(out, "Permission denied")
	})
	if out, err := as(1001, 1001, "cat "+view+"/data/p.txt"); err != nil {
		t.Errorf("the principal's own uid after the reload: %v\n%s", err, out)
	}
	if acl := sh(t, "getfacl -n "+view+" 2>/dev/null"); strings.Contains(acl, "user:1005") || !strings.Contains(acl, "# owner: 1001") {
		t.Errorf("the view's top after the reload:\n%s", acl)
	}
}

func TestPolicyCLI(t *testing.T) {
	e, _ := policyEnv(t)
	out, err := exec.Command(binPath, "policy", "explain", "data://secrets/k", "--as", "agent", "-c", e.cfg).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "read") || !strings.Contains(string(out), "deny") || !strings.Contains(string(out), e.cfg+":") {
		t.Errorf("policy explain: %v\n%s", err, out)
	}
	out, err = exec.Command(binPath, "policy", "explain", "data://x", "--as", "nobody", "-c", e.cfg).CombinedOutput()
	if err == nil || strings.Count(strings.TrimSpace(string(out)), "\n") > 0 {
		t.Errorf("explain for an unknown principal should fail with one sentence: %v\n%s", err, out)
	}
	out, err = exec.Command(binPath, "policy", "explain", "nosuch://x", "--as", "agent", "-c", e.cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "nosuch") {
		t.Errorf("explain for an unknown slug: %v\n%s", err, out)
	}
	// check: a clean config passes; a shadowed rule is reported.
	if out, err := exec.Command(binPath, "policy", "check", "-c", e.cfg).CombinedOutput(); err != nil {
		t.Errorf("policy check on a clean config: %v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	cfg, _ := os.ReadFile(e.cfg)
	writeFile(t, bad, string(cfg)+`
[[rule]]
uri = "data://**"
who = ["*"]
allow = ["read", "write"]

[[rule]]
uri = "data://x/**"
who = ["ghost"]
deny = ["read"]
`, 0o644)
	out, err = exec.Command(binPath, "policy", "check", "-c", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "ghost") {
		t.Errorf("policy check missed findings: %v\n%s", err, out)
	}
}
