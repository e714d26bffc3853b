package tests

// Hidden names are neither probeable nor replaceable (issue 14): every
// way the agent (uid 1001) can aim a syscall at a name it may not read
// answers the same errno whether or not something has that name, and
// leaves what has it as it was. The create family (create, mkdir, mknod,
// symlink, link, rename onto) is refused with EACCES by the rule alone;
// everything else fails at the kernel's lookup of the name with ENOENT,
// as for a free name.

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hiddenTOML: for the agent, hidw* at the top of each source may be
// written but not read (a write-only drop, or a forgotten write), hidd*
// neither read nor written. Names inside hidw*/ and hidd*/ folders are
// hidden as their folder is. (Source r is read-only for everyone.)
const hiddenTOML = `
[[principal]]
name = "agent"
uids = [1001]
roles = ["agent"]

[[rule]]
uri = "*://hidw*"
who = ["role:agent"]
deny = ["read"]

[[rule]]
uri = "*://hidd*"
who = ["role:agent"]
deny = ["read", "write"]
`

// hiddenProbe is one syscall the agent aims at the hidden name p, written
// as a Python statement. s is a fresh public file, d a fresh public folder
// and t a free public name, made again before each probe. top is the
// errno wanted for a name directly in the source root (a hidden file, a
// hidden folder, a hidden free name), nested for one inside a hidden
// folder (existing or not) — "OK" would be success, which no probe may get.
type hiddenProbe struct {
	name, py    string
	top, nested string
}

var hiddenProbes = []hiddenProbe{
	// The create family: refused by the rule, before the backing folder is
	// asked. (echo y > p, touch p, truncate -s0 p, cp x p, …)
	{"open O_WRONLY|O_CREAT|O_TRUNC", "os.close(os.open(p, os.O_WRONLY|os.O_CREAT|os.O_TRUNC, 0o644))", "EACCES", "ENOENT"},
	{"open O_RDWR|O_CREAT", "os.close(os.open(p, os.O_RDWR|os.O_CREAT, 0o644))", "EACCES", "ENOENT"},
	{"open O_RDONLY|O_CREAT", "os.close(os.open(p, os.O_RDONLY|os.O_CREAT, 0o644))", "EACCES", "ENOENT"},
	{"open O_WRONLY|O_CREAT|O_APPEND", "os.close(os.open(p, os.O_WRONLY|os.O_CREAT|os.O_APPEND, 0o644))", "EACCES", "ENOENT"},
	{"open O_CREAT|O_EXCL", "os.close(os.open(p, os.O_WRONLY|os.O_CREAT|os.O_EXCL, 0o644))", "EACCES", "ENOENT"},
	{"open O_WRONLY|O_CREAT|O_NONBLOCK (truncate -s0)", "os.close(os.open(p, os.O_WRONLY|os.O_CREAT|os.O_NONBLOCK, 0o666))", "EACCES", "ENOENT"},
	{"open O_CREAT through a symlink", "create_via_symlink(p)", "EACCES", "ENOENT"},
	{"mkdir", "os.mkdir(p, 0o755)", "EACCES", "ENOENT"},
	{"mkfifo", "os.mkfifo(p, 0o644)", "EACCES", "ENOENT"},
	{"mknod S_IFREG", "os.mknod(p, 0o644|stat.S_IFREG)", "EACCES", "ENOENT"},
	{"symlink", "os.symlink('y', p)", "EACCES", "ENOENT"},
	{"link onto", "os.link(s, p)", "EACCES", "ENOENT"},
	{"rename file onto", "os.rename(s, p)", "EACCES", "ENOENT"},
	{"rename folder onto", "os.rename(d, p)", "EACCES", "ENOENT"},
	{"renameat2 RENAME_NOREPLACE onto", "rename2(s, p, 1)", "EACCES", "ENOENT"},
	// An exchange needs both names: the kernel's lookup of p fails, and
	// the kernel answers ENOENT itself, as for a free name.
	{"renameat2 RENAME_EXCHANGE with", "rename2(s, p, 2)", "ENOENT", "ENOENT"},
	{"renameat2 RENAME_EXCHANGE from", "rename2(p, s, 2)", "ENOENT", "ENOENT"},
	// The hidden name as the source of a move or link: absent.
	{"rename from", "os.rename(p, t)", "ENOENT", "ENOENT"},
	{"link from", "os.link(p, t)", "ENOENT", "ENOENT"},
	// Into a hidden folder (mkdir -p secrets/x, ln x secrets/new): the
	// folder is absent.
	{"mkdir inside", "os.mkdir(p + '/x', 0o755)", "ENOENT", "ENOENT"},
	{"create inside", "os.close(os.open(p + '/new', os.O_WRONLY|os.O_CREAT, 0o644))", "ENOENT", "ENOENT"},
	{"link inside", "os.link(s, p + '/new')", "ENOENT", "ENOENT"},
	{"rename inside", "os.rename(s, p + '/new')", "ENOENT", "ENOENT"},
	// Everything else names an existing file: absent.
	{"stat", "os.stat(p)", "ENOENT", "ENOENT"},
	{"lstat", "os.lstat(p)", "ENOENT", "ENOENT"},
	{"open O_RDONLY", "os.close(os.open(p, os.O_RDONLY))", "ENOENT", "ENOENT"},
	{"open O_WRONLY", "os.close(os.open(p, os.O_WRONLY))", "ENOENT", "ENOENT"},
	{"open O_WRONLY|O_TRUNC", "os.close(os.open(p, os.O_WRONLY|os.O_TRUNC))", "ENOENT", "ENOENT"},
	{"open O_PATH", "os.close(os.open(p, os.O_PATH))", "ENOENT", "ENOENT"},
	{"open O_TMPFILE in", "os.close(os.open(p, os.O_TMPFILE|os.O_WRONLY, 0o644))", "ENOENT", "ENOENT"},
	{"listdir", "os.listdir(p)", "ENOENT", "ENOENT"},
	{"chdir", "os.chdir(p)", "ENOENT", "ENOENT"},
	{"truncate", "os.truncate(p, 0)", "ENOENT", "ENOENT"},
	{"utimensat", "os.utime(p)", "ENOENT", "ENOENT"},
	{"utimensat AT_SYMLINK_NOFOLLOW", "os.utime(p, (1, 1), follow_symlinks=False)", "ENOENT", "ENOENT"},
	{"chmod", "os.chmod(p, 0o777)", "ENOENT", "ENOENT"},
	{"chown", "os.chown(p, 1001, 1001)", "ENOENT", "ENOENT"},
	{"readlink", "os.readlink(p)", "ENOENT", "ENOENT"},
	{"getxattr", "os.getxattr(p, 'user.x')", "ENOENT", "ENOENT"},
	{"listxattr", "os.listxattr(p)", "ENOENT", "ENOENT"},
	{"setxattr", "os.setxattr(p, 'user.x', b'1')", "ENOENT", "ENOENT"},
	{"removexattr", "os.removexattr(p, 'user.x')", "ENOENT", "ENOENT"},
	{"statvfs", "os.statvfs(p)", "ENOENT", "ENOENT"},
	{"access", "check_access(p)", "ENOENT", "ENOENT"},
	{"unlink", "os.unlink(p)", "ENOENT", "ENOENT"},
	{"rmdir", "os.rmdir(p)", "ENOENT", "ENOENT"},
}

// hiddenNames are the names every probe is aimed at, per rule: a hidden
// file, a hidden folder and a free name directly in the source root (top),
// and a file in the hidden folder, a free name in it and a name in a
// hidden folder that does not exist (nested).
func hiddenNames(prefix string) (top, nested []string) {
	return []string{prefix + ".txt", prefix + "dir", prefix + "-free"},
		[]string{prefix + "dir/in.txt", prefix + "dir/free", prefix + "-free/x"}
}

// hiddenScript is the Python program that runs every probe on every name
// under root and prints {probe: {name: errno name or "OK"}}.
func hiddenScript(root string, names []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `import ctypes, errno, json, os, shutil, stat, tempfile
libc = ctypes.CDLL(None, use_errno=True)
D = %q
s, d, t = D + "/pub/s", D + "/pub/d", D + "/pub/t"
def rename2(a, b, flags):
    if libc.renameat2(-100, a.encode(), -100, b.encode(), flags) != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
def check_access(p):
    if libc.access(p.encode(), 0) != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
def create_via_symlink(p):
    # The link lives outside the mount (a read-only source takes none).
    l = tempfile.mktemp(dir="/tmp")
    os.symlink(p, l)
    try:
        os.close(os.open(l, os.O_WRONLY|os.O_CREAT, 0o644))
    finally:
        os.unlink(l)
def fresh():
    os.chdir("/")
    if not os.path.isfile(s):
        if os.path.lexists(s): shutil.rmtree(s)
        with open(s, "w") as f: f.write("agent's\n")
    if not os.path.isdir(d):
        if os.path.lexists(d): os.unlink(d)
        os.mkdir(d)
    if os.path.isdir(t) and not os.path.islink(t): shutil.rmtree(t)
    elif os.path.lexists(t): os.unlink(t)
probes = []
`, root)
	for _, p := range hiddenProbes {
		fmt.Fprintf(&b, "probes.append((%q, lambda p: %s))\n", p.name, p.py)
	}
	list, _ := json.Marshal(names)
	fmt.Fprintf(&b, `out = {}
for name, fn in probes:
    out[name] = {}
    for n in %s:
        fresh()
        try:
            fn(D + "/" + n); r = "OK"
        except OSError as e:
            r = errno.errorcode.get(e.errno, str(e.errno))
        out[name][n] = r
fresh()
print(json.dumps(out))
`, list)
	return b.String()
}

// hiddenState describes everything in the backing folder but the agent's
// own pub/: type, mode, owner, size, link count, mtime, ctime and content
// digest of each entry (not atime: the owner's reads stamp it).
func hiddenState(tb testing.TB, root string) string {
	tb.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "pub" {
			return filepath.SkipDir
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s %o %d:%d size=%d nlink=%d mtime=%d.%09d", rel, st.Mode, st.Uid, st.Gid, st.Size, st.Nlink, st.Mtim.Sec, st.Mtim.Nsec)
		if rel != "." {
			// The root's ctime moves with pub/ being made and removed.
			line += fmt.Sprintf(" ctime=%d.%09d", st.Ctim.Sec, st.Ctim.Nsec)
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" sha=%x", sha256.Sum256(data))
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		tb.Fatalf("state of %s: %v", root, err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// hiddenEnv mounts the sources a (writable) and r (read_only) under
// hiddenTOML, plus a view for the agent, with the same hidden names in
// both. Everything is world-writable (files 0666, owned by uid 1002), so
// only the policy stands between the agent and the hidden names. r's pub/
// already holds the public file s and folder d the probes move.
func hiddenEnv(t *testing.T) (e *env, view string) {
	t.Helper()
	requireFUSE(t)
	base := sharedTempDir(t)
	view = filepath.Join(base, "agentview")
	must(t, os.Mkdir(view, 0o755))
	var srcs []src
	for _, slug := range []string{"a", "r"} {
		dir := filepath.Join(base, slug)
		for _, pre := range []string{"hidw", "hidd"} {
			writeFile(t, filepath.Join(dir, pre+".txt"), canary+" "+pre+" file\n", 0o666)
			writeFile(t, filepath.Join(dir, pre+"dir", "in.txt"), canary+" "+pre+" folder\n", 0o666)
		}
		must(t, os.Mkdir(filepath.Join(dir, "pub"), 0o777))
		sh(t, "chown -R 1002:1002 "+dir+" && chmod -R a+rwX "+dir+" && chown 1001:1001 "+filepath.Join(dir, "pub"))
		s := src{slug: slug, path: dir}
		if slug == "r" {
			writeFile(t, filepath.Join(dir, "pub", "s"), "agent's\n", 0o666)
			must(t, os.Mkdir(filepath.Join(dir, "pub", "d"), 0o777))
			s.extra = "read_only = true"
		}
		srcs = append(srcs, s)
	}
	e = newEnv(t, hiddenTOML+viewTOML("agent", view), srcs...)
	return e, view
}

// hiddenStates is hiddenState of both sources.
func hiddenStates(tb testing.TB, e *env) string {
	return hiddenState(tb, e.b("a")) + "\n--- r\n" + hiddenState(tb, e.b("r"))
}

// A name the agent may not read: every probe answers the same whether or
// not something has the name, the create family with EACCES (also where
// write is denied, and on a read-only source, where a free name the agent
// may read answers EROFS), and nothing hidden changes — in the main mount
// and in the agent's view, cold and with the kernel's caches warmed (by
// the owner in the main mount, by the agent itself in its view, where no
// one else may walk).
func TestHiddenNamesAreNeitherProbeableNorReplaceable(t *testing.T) {
	e, view := hiddenEnv(t)
	before := hiddenStates(t, e)
	var top, nested []string
	for _, pre := range []string{"hidw", "hidd"} {
		tp, ns := hiddenNames(pre)
		top, nested = append(top, tp...), append(nested, ns...)
	}
	all := append(append([]string(nil), top...), nested...)
	warmOwner := func(root string) {
		sh(t, fmt.Sprintf(`cd %[1]s && ls -laR . >/dev/null && cat hidw.txt hidd.txt hidwdir/in.txt hidddir/in.txt >/dev/null && stat hidw.txt hidd.txt hidwdir hidddir hidwdir/in.txt hidddir/in.txt >/dev/null`, root))
	}
	warmAgent := func(root string) {
		agent(t, fmt.Sprintf(`cd %[1]s && ls -laR . >/dev/null; stat %[2]s >/dev/null 2>&1; true`, root, strings.Join(all, " ")))
	}
	for _, c := range []struct {
		name string
		mnt  string
		warm func(string)
		// box runs the probes in a bubblewrap sandbox with only the
		// mount bound in, at /work, as an agent's container does.
		box bool
	}{
		{"main mount, cold", e.mnt, nil, false},
		{"view, cold", view, nil, false},
		{"main mount, warmed by the owner", e.mnt, warmOwner, false},
		{"main mount, warmed by the agent", e.mnt, warmAgent, false},
		{"view, warmed by the agent", view, warmAgent, false},
		{"view, in a sandbox", view, nil, true},
	} {
		for _, slug := range []string{"a", "r"} {
			t.Run(c.name+", source "+slug, func(t *testing.T) {
				root := filepath.Join(c.mnt, slug)
				if c.warm != nil {
					c.warm(root)
				}
				cmd := py + " - <<'EOF'\n" + hiddenScript(root, all) + "EOF\n"
				if c.box {
					cmd = sandbox(c.mnt, "/work") + py + " - <<'EOF'\n" + hiddenScript(filepath.Join("/work", slug), all) + "EOF\n"
				}
				out, err := run(t, 1001, cmd)
				if strings.Contains(out, canary) {
					t.Fatalf("the agent saw the canary:\n%s", out)
				}
				var got map[string]map[string]string
				if err != nil || json.Unmarshal([]byte(out), &got) != nil {
					t.Fatalf("probe script: %v\n%s", err, out)
				}
				for _, p := range hiddenProbes {
					for _, g := range []struct {
						names []string
						want  string
					}{{top, p.top}, {nested, p.nested}} {
						for _, n := range g.names {
							if r := got[p.name][n]; r != g.want {
								t.Errorf("%s %s: %s; want %s (all names: %v)", p.name, n, r, g.want, got[p.name])
							}
						}
					}
				}
				if after := hiddenStates(t, e); after != before {
					t.Fatalf("the probes changed hidden names:\n--- before\n%s\n--- after\n%s", before, after)
				}
			})
		}
	}
}

// The agent cannot tell which hidden names exist from the shell either:
// the commands of issue 14 fail the same way (and with the same message)
// for an existing hidden file and a free hidden name, and a rename onto
// the hidden file leaves it as it was.
func TestHiddenNamesFromTheShell(t *testing.T) {
	e, view := hiddenEnv(t)
	before := hiddenStates(t, e)
	for _, root := range []string{e.m("a"), filepath.Join(view, "a")} {
		script := `cd ` + root + ` || exit 1
try() { out=$("$@" 2>&1 </dev/null); echo "rc=$? $(printf %s "$out" | sed "s#$N#<N>#g")"; }
for N in hidw.txt hidw-free hidd.txt hidd-free; do
  echo "== $N"
  echo x > pub/x
  try mv pub/x $N
  try mv -T pub/x $N
  try ln pub/x $N
  try ln -s y $N
  try mkfifo $N
  try mkdir $N
  try mkdir -p $N/x
  try touch $N
  try truncate -s0 $N
  try cp pub/x $N
  try sh -c "echo y > $N"
  try sh -c "echo y >> $N"
  try sh -c "set -C; echo y > $N"
  try install -m 644 pub/x $N
  try rm $N
  try rm -rf $N
  try cat $N
  try stat -c %s $N
  try ln pub/x $N/new
done`
		out, _ := run(t, 1001, script)
		if strings.Contains(out, canary) {
			t.Fatalf("the agent saw the canary:\n%s", out)
		}
		parts := strings.Split(out, "== ")
		if len(parts) != 5 {
			t.Fatalf("script output:\n%s", out)
		}
		results := map[string]string{}
		for _, p := range parts[1:] {
			name, rest, _ := strings.Cut(p, "\n")
			results[name] = rest
		}
		for name, r := range results {
			// rm -rf of an absent name succeeds on any filesystem; nothing
			// else may.
			if n := strings.Count(r, "rc=0"); n != 1 {
				t.Errorf("%s: %d commands at %s succeeded; want only rm -rf:\n%s", root, n, name, r)
			}
		}
		for _, pair := range [][2]string{{"hidw.txt", "hidw-free"}, {"hidd.txt", "hidd-free"}} {
			if results[pair[0]] != results[pair[1]] {
				t.Errorf("%s: the shell tells %s (exists) from %s (free):\n--- %s\n%s--- %s\n%s", root, pair[0], pair[1], pair[0], results[pair[0]], pair[1], results[pair[1]])
			}
		}
		if after := hiddenStates(t, e); after != before {
			t.Fatalf("%s: the shell changed hidden names:\n--- before\n%s\n--- after\n%s", root, before, after)
		}
	}
}

// Each refusal at a hidden name is audited, with the rule that hides the
// name, whether or not something has the name.
func TestHiddenNameRefusalsAreAudited(t *testing.T) {
	e, _ := hiddenEnv(t)
	d := e.m("a")
	// Few operations, well inside the audit log's burst.
	agent(t, fmt.Sprintf(`cd %s || exit 1
for N in hidw.txt hidw-free hidd.txt hidd-free; do
  : > $N; mkdir $N; mkfifo $N; ln -s y $N; echo x > pub/x; ln pub/x $N; mv pub/x $N
done 2>/dev/null; true`, d))
	cfg, err := os.ReadFile(e.cfg)
	must(t, err)
	ruleAt := func(uri string) string {
		// The rule's place is its [[rule]] header.
		lines := strings.Split(string(cfg), "\n")
		for i, l := range lines {
			if strings.TrimSpace(l) == fmt.Sprintf("uri = %q", uri) {
				for j := i; j >= 0; j-- {
					if strings.TrimSpace(lines[j]) == "[[rule]]" {
						return fmt.Sprintf("%s:%d", e.cfg, j+1)
					}
				}
			}
		}
		t.Fatalf("no rule %s in the config", uri)
		return ""
	}
	rules := map[string]string{"hidw": ruleAt("*://hidw*"), "hidd": ruleAt("*://hidd*")}
	want := map[string]bool{}
	for _, n := range []string{"hidw.txt", "hidw-free", "hidd.txt", "hidd-free"} {
		for _, op := range []string{"create", "mkdir", "mknod", "symlink", "link", "rename"} {
			want[op+" a://"+n+" "+rules[n[:4]]] = true
		}
	}
	logPath := filepath.Join(e.state, "audit.log")
	missing := ""
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("missing %q; audit.log:\n%s", missing, b)
		}
	}()
	eventually(t, 5*time.Second, "audit lines for every refusal at a hidden name", func() bool {
		seen := map[string]bool{}
		f, err := os.Open(logPath)
		if err != nil {
			return false
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var l struct{ Principal, Op, URI, Rule string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Principal == "agent" {
				seen[l.Op+" "+l.URI+" "+l.Rule] = true
			}
		}
		for w := range want {
			if !seen[w] {
				missing = w
				return false
			}
		}
		return true
	})
}

// A folder the agent holds open (a descriptor, its working folder) that
// the owner then moves under a hidden name on the host: names made in it
// through the descriptor are hidden names too, and a create-family call
// there answers the same for a name the owner added after the move as for
// a free one, and makes nothing.
func TestHiddenNamesThroughAHeldFolder(t *testing.T) {
	e, _ := hiddenEnv(t)
	box := e.b("a", "pub", "box")
	must(t, os.Mkdir(box, 0o777))
	os.Chmod(box, 0o777)
	sync := sharedTempDir(t)
	os.Chmod(sync, 0o777)
	ready, moved := filepath.Join(sync, "ready"), filepath.Join(sync, "moved")
	done := make(chan string, 1)
	go func() {
		out, _ := run(t, 1001, fmt.Sprintf(`%s - <<'EOF'
import ctypes, errno, json, os, time
libc = ctypes.CDLL(None, use_errno=True)
D = %q
d = os.open(D + "/pub/box", os.O_RDONLY|os.O_DIRECTORY)
s = D + "/pub/s"
open(%q, "w").close()
while not os.path.exists(%q):
    time.sleep(0.02)
def rename2(a, b, flags):
    if libc.renameat2(-100, a.encode(), d, b.encode(), flags) != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
probes = [
    ("open O_CREAT", lambda n: os.close(os.open(n, os.O_WRONLY|os.O_CREAT, 0o644, dir_fd=d))),
    ("open O_CREAT|O_EXCL", lambda n: os.close(os.open(n, os.O_WRONLY|os.O_CREAT|os.O_EXCL, 0o644, dir_fd=d))),
    ("mkdir", lambda n: os.mkdir(n, 0o755, dir_fd=d)),
    ("mkfifo", lambda n: os.mkfifo(n, 0o644, dir_fd=d)),
    ("symlink", lambda n: os.symlink("y", n, dir_fd=d)),
    ("link onto", lambda n: os.link(s, n, dst_dir_fd=d)),
    ("rename onto", lambda n: os.rename(s, n, dst_dir_fd=d)),
    ("renameat2 RENAME_NOREPLACE onto", lambda n: rename2(s, n, 1)),
]
out = {}
for name, fn in probes:
    out[name] = {}
    for n in ("added.txt", "free.txt"):
        if not os.path.exists(s):
            with open(s, "w") as f: f.write("agent's\n")
        try:
            fn(n); r = "OK"
        except OSError as e:
            r = errno.errorcode.get(e.errno, str(e.errno))
        out[name][n] = r
print(json.dumps(out))
EOF`, py, e.m("a"), ready, moved))
		done <- out
	}()
	eventually(t, 10*time.Second, "the agent to hold the folder", func() bool { _, err := os.Stat(ready); return err == nil })
	must(t, os.Rename(box, e.b("a", "hidwdir", "box")))
	writeFile(t, e.b("a", "hidwdir", "box", "added.txt"), canary+" added after the move\n", 0o666)
	// Once the owner no longer finds the folder where it was, the watcher
	// has told the kernel about the move.
	eventually(t, 10*time.Second, "the move to show on the mount", func() bool {
		_, err := os.Stat(e.m("a", "pub", "box"))
		return errors.Is(err, os.ErrNotExist)
	})
	before := hiddenStates(t, e)
	must(t, os.WriteFile(moved, nil, 0o666))
	out := <-done
	if strings.Contains(out, canary) {
		t.Fatalf("the agent saw the canary:\n%s", out)
	}
	var got map[string]map[string]string
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) == 0 {
		t.Fatalf("probe script: %v\n%s", err, out)
	}
	for probe, r := range got {
		if r["added.txt"] != r["free.txt"] || r["free.txt"] == "OK" {
			t.Errorf("%s through the held folder: %v; want the same refusal for both names", probe, r)
		}
	}
	t.Logf("through the held folder: %v", got)
	if after := hiddenStates(t, e); after != before {
		t.Errorf("the probes changed hidden names:\n--- before\n%s\n--- after\n%s", before, after)
	}
}
