package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Reload: SIGHUP and `neuralisfs reload` apply a new config without
// unmounting. The kernel caches names and attributes for a minute here
// (entry_timeout, attr_timeout, watched_timeout), so a narrowed rule that
// bit only once those expired would fail these tests.

const reloadCaching = `
[mount]
entry_timeout = "60s"
attr_timeout = "60s"
watched_timeout = "60s"

[[principal]]
name = "agent"
uids = [1001]
roles = ["agent"]
`

const denyNotes = `
[[rule]]
uri = "data://notes/**"
who = ["role:agent"]
deny = ["read"]
`

// reloadEnv mounts a data source with notes/n.txt and a view for the
// agent; base is the config text newEnv wrote, for rewriting.
func reloadEnv(t *testing.T, extra string, more ...src) (e *env, view, base string) {
	view = filepath.Join(sharedTempDir(t), "agentview")
	must(t, os.Mkdir(view, 0o755))
	data := sharedTempDir(t)
	os.Chmod(data, 0o777)
	writeFile(t, filepath.Join(data, "notes", "n.txt"), "a note\n", 0o644)
	writeFile(t, filepath.Join(data, "public.txt"), "public\n", 0o644)
	os.Chmod(filepath.Join(data, "notes"), 0o755)
	viewCfg := viewTOML("agent", view)
	e = newEnv(t, reloadCaching+viewCfg+extra, append([]src{{slug: "data", path: data}}, more...)...)
	cfg, err := os.ReadFile(e.cfg)
	must(t, err)
	base = strings.TrimSuffix(string(cfg), extra)
	return e, view, base
}

// rewrite replaces the config file with text, as an editor saves it (a
// new file renamed over the old), so that a CLI reading the file
// meanwhile (say for the daemon's socket) reads one config or the other,
// never half of one.
func (e *env) rewrite(text string) {
	e.t.Helper()
	tmp := e.cfg + ".new"
	must(e.t, os.WriteFile(tmp, []byte(text), 0o644))
	must(e.t, os.Rename(tmp, e.cfg))
}

// hup sends SIGHUP and waits for the daemon to log that it reloaded (or
// refused); it returns that log line.
func (e *env) hup() string {
	e.t.Helper()
	before := reloadLines(e.stderr.String())
	must(e.t, e.cmd.Process.Signal(syscall.SIGHUP))
	var line string
	eventually(e.t, 20*time.Second, "the daemon logs the reload", func() bool {
		l := reloadLines(e.stderr.String())
		if len(l) > len(before) {
			line = l[len(l)-1]
			return true
		}
		return false
	})
	return line
}

// reloadLines are the daemon's log lines that end a reload.
func reloadLines(log string) []string {
	var out []string
	for l := range strings.SplitSeq(log, "\n") {
		if strings.Contains(l, "msg=reloaded") || strings.Contains(l, `msg="reload refused"`) {
			out = append(out, l)
		}
	}
	return out
}

// reloadCLI runs `neuralisfs reload -c cfg` as uid.
func (e *env) reloadCLI(uid int) (string, error) {
	e.t.Helper()
	return run(e.t, uid, fmt.Sprintf("%s reload -c %s 2>&1", binPath, e.cfg))
}

// agentSees reports what the agent gets from stat and cat of path.
func agentSees(t *testing.T, path string) string {
	t.Helper()
	out, _ := run(t, 1001, fmt.Sprintf("stat -c %%n %[1]q 2>&1; cat %[1]q 2>&1", path))
	return out
}

// TestFolderLinksCountWhereNothingIsHidden: in the main mount, folders of
// a source where the policy hides nothing from anyone (here a rule denies
// the agent only writes) have their link counts on disk, for every caller
// (pjdfstest's rename/24 counts them; find's leaf optimisation uses them).
// A reload that hides something there turns every folder of the source to
// one link at once, cached attributes (60 s here) and all, and a reload
// that hides nothing again brings the counts back.
func TestFolderLinksCountWhereNothingIsHidden(t *testing.T) {
	const writeOnly = `
[[rule]]
uri = "data://**"
who = ["role:agent"]
deny = ["write"]
`
	e, _, base := reloadEnv(t, writeOnly)
	for _, d := range []string{"a/x", "a/y", "b"} {
		must(t, os.MkdirAll(e.b("data", "tree", d), 0o755))
	}
	script := "stat -c '%h' " + e.m("data") + " " + e.m("data", "tree") + " " + e.m("data", "tree", "a") + " " + e.m("data", "tree", "b")
	onDisk, err := run(t, 0, "stat -c '%h' "+e.b("data")+" "+e.b("data", "tree")+" "+e.b("data", "tree", "a")+" "+e.b("data", "tree", "b"))
	must(t, err)
	if onDisk != "4\n4\n4\n2\n" {
		t.Fatalf("the backing folders' link counts: %q", onDisk)
	}
	counts := func(when, want string) {
		t.Helper()
		for _, uid := range []int{0, 1001} {
			if got, err := run(t, uid, script); err != nil || got != want {
				t.Errorf("%s, uid %d sees link counts %q (%v); want %q", when, uid, got, err, want)
			}
		}
	}
	counts("with a rule that hides nothing", onDisk)

	e.rewrite(base + denyNotes)
	if out, err := e.reloadCLI(0); err != nil {
		t.Fatalf("neuralisfs reload: %v\n%s", err, out)
	}
	counts("once notes/ is hidden from the agent", "1\n1\n1\n1\n")

	e.rewrite(base + writeOnly)
	if out, err := e.reloadCLI(0); err != nil {
		t.Fatalf("neuralisfs reload: %v\n%s", err, out)
	}
	counts("once nothing is hidden again", onDisk)
}

func TestReloadNarrowsAndWidensWithWarmCaches(t *testing.T) {
	e, view, base := reloadEnv(t, "")
	note, vnote := e.m("data", "notes", "n.txt"), filepath.Join(view, "data", "notes", "n.txt")
	// Warm the kernel's caches: every name on the way, the attributes
	// and the listings, in the main mount and in the view.
	for _, p := range []string{note, vnote} {
		if out := agentSees(t, p); !strings.Contains(out, "a note") {
			t.Fatalf("before the reload the agent cannot read %s:\n%s", p, out)
		}
		run(t, 1001, "ls -la "+filepath.Dir(p)+" "+filepath.Dir(filepath.Dir(p)))
	}

	e.rewrite(base + denyNotes)
	if line := e.hup(); !strings.Contains(line, "msg=reloaded") {
		t.Fatalf("SIGHUP did not reload: %s\n%s", line, e.stderr)
	}
	for _, p := range []string{note, vnote} {
		out := agentSees(t, p)
		if strings.Contains(out, "a note") || strings.Count(out, "No such file or directory") != 2 {
			t.Errorf("after narrowing, the agent's next stat and cat of %s:\n%s", p, out)
		}
		if out, _ := run(t, 1001, "ls "+filepath.Dir(p)+" 2>&1"); strings.Contains(out, "n.txt") {
			t.Errorf("after narrowing, the agent lists %s:\n%s", filepath.Dir(p), out)
		}
	}
	// Root (the owner) still reads it in the main mount.
	if out := sh(t, "cat "+note); out != "a note\n" {
		t.Errorf("the owner after narrowing: %q", out)
	}

	// Widening shows at once, with the denied names just looked up.
	e.rewrite(base)
	if out, err := e.reloadCLI(0); err != nil || !strings.Contains(out, "policy") {
		t.Fatalf("neuralisfs reload: %v\n%s", err, out)
	}
	for _, p := range []string{note, vnote} {
		if out := agentSees(t, p); !strings.Contains(out, "a note") {
			t.Errorf("after widening, the agent reads %s:\n%s", p, out)
		}
	}

	// Narrow again, now from a non-trivial policy (a rule in force) with
	// caches warm again.
	e.rewrite(base + `
[[rule]]
uri = "data://public.txt"
who = ["role:agent"]
deny = ["write"]
`)
	must(t, func() error { _, err := e.reloadCLI(0); return err }())
	for _, p := range []string{note, vnote} {
		agentSees(t, p)
	}
	e.rewrite(base + denyNotes)
	if out, err := e.reloadCLI(0); err != nil {
		t.Fatalf("neuralisfs reload: %v\n%s", err, out)
	}
	for _, p := range []string{note, vnote} {
		if out := agentSees(t, p); strings.Contains(out, "a note") {
			t.Errorf("after narrowing a non-trivial policy, the agent reads %s:\n%s", p, out)
		}
	}

	// Only root and the daemon's uid may reload.
	if out, err := e.reloadCLI(1001); err == nil || !strings.Contains(out, "only root") {
		t.Errorf("uid 1001 reloads: %v\n%s", err, out)
	}

	// Every reload is an audit line.
	data, err := os.ReadFile(filepath.Join(e.state, "audit.log"))
	must(t, err)
	applied, refused := 0, 0
	for l := range strings.SplitSeq(string(data), "\n") {
		var rec struct {
			Op, Rule, URI, Detail string
			UID                   int
		}
		if json.Unmarshal([]byte(l), &rec) != nil || rec.Op != "reload" {
			continue
		}
		switch {
		case rec.URI == e.cfg && rec.Rule == "applied":
			applied++
		case rec.Rule == "refused" && rec.UID == 1001:
			refused++
		default:
			t.Errorf("audit line of a reload: %s", l)
		}
	}
	if applied != 4 || refused != 1 {
		t.Errorf("%d applied and %d refused reloads in the audit log, want 4 and 1:\n%s", applied, refused, data)
	}
}

func TestReloadAddsAndRemovesSourcesAndViews(t *testing.T) {
	e, view, base := reloadEnv(t, "")
	extra := filepath.Join(sharedTempDir(t), "extra")
	writeFile(t, filepath.Join(extra, "e.txt"), "extra\n", 0o644)
	os.Chmod(extra, 0o755)
	view2 := filepath.Join(sharedTempDir(t), "view2")
	must(t, os.Mkdir(view2, 0o755))
	// The agent looks for the source before it exists: a negative entry.
	if out, err := run(t, 1001, "ls "+e.m("more")+" 2>&1"); err == nil {
		t.Fatalf("a source not configured yet is there:\n%s", out)
	}
	ls := func(uid int, dir string) string { out, _ := run(t, uid, "ls "+dir+" 2>&1"); return out }
	before := ls(1001, e.mnt)
	viewBefore := ls(1001, view) // kept by the kernel: the reload must drop it

	e.rewrite(base + fmt.Sprintf("\n[[source]]\nslug = \"more\"\nkind = \"local\"\npath = %q\n", extra) + viewTOML("agent", view2))
	out, err := e.reloadCLI(0)
	if err != nil || !strings.Contains(out, "source more added") || !strings.Contains(out, "view "+view2+" added") {
		t.Fatalf("neuralisfs reload adding a source and a view: %v\n%s", err, out)
	}
	if got := ls(1001, e.mnt); !strings.Contains(got, "more") {
		t.Errorf("root listing after adding a source: %q (before %q)", got, before)
	}
	if got := ls(1001, view); !strings.Contains(got, "more") {
		t.Errorf("the view's listing after adding a source: %q (before %q)", got, viewBefore)
	}
	for _, p := range []string{e.m("more", "e.txt"), filepath.Join(view, "more", "e.txt"), filepath.Join(view2, "more", "e.txt")} {
		if got := agentSees(t, p); !strings.Contains(got, "extra") {
			t.Errorf("the added source through %s:\n%s", p, got)
		}
	}
	if !mounted(view2) {
		t.Fatalf("the added view %s is not mounted", view2)
	}

	// Changing the source's path replaces it: names the kernel cached for
	// the old folder go, in the main mount and the views.
	other := filepath.Join(sharedTempDir(t), "other")
	writeFile(t, filepath.Join(other, "e.txt"), "other\n", 0o644)
	writeFile(t, filepath.Join(other, "only-here.txt"), "here\n", 0o644)
	os.Chmod(other, 0o755)
	e.rewrite(base + fmt.Sprintf("\n[[source]]\nslug = \"more\"\nkind = \"local\"\npath = %q\n", other) + viewTOML("agent", view2))
	if out, err := e.reloadCLI(0); err != nil || !strings.Contains(out, "source more changed") {
		t.Fatalf("neuralisfs reload changing a source's path: %v\n%s", err, out)
	}
	for _, dir := range []string{e.m("more"), filepath.Join(view, "more"), filepath.Join(view2, "more")} {
		if got := agentSees(t, filepath.Join(dir, "e.txt")); !strings.Contains(got, "other") {
			t.Errorf("after changing the source's path, %s/e.txt:\n%s", dir, got)
		}
		if got := ls(1001, dir); !strings.Contains(got, "only-here.txt") {
			t.Errorf("after changing the source's path, ls %s: %q", dir, got)
		}
	}

	e.rewrite(base)
	out, err = e.reloadCLI(0)
	if err != nil || !strings.Contains(out, "source more removed") || !strings.Contains(out, "view "+view2+" removed") {
		t.Fatalf("neuralisfs reload removing a source and a view: %v\n%s", err, out)
	}
	for _, dir := range []string{e.mnt, view} {
		if got := ls(1001, dir); strings.Contains(got, "more") {
			t.Errorf("listing of %s after removing a source: %q", dir, got)
		}
	}
	if got := agentSees(t, e.m("more", "e.txt")); strings.Contains(got, "extra") {
		t.Errorf("the removed source is still served:\n%s", got)
	}
	eventually(t, 10*time.Second, "the removed view is unmounted", func() bool { return !mounted(view2) })
	// The daemon carries on serving after a view was unmounted.
	if got := agentSees(t, e.m("data", "public.txt")); !strings.Contains(got, "public") {
		t.Errorf("after removing a view, the main mount:\n%s", got)
	}
}

func TestReloadRefusesABrokenConfig(t *testing.T) {
	e, view, base := reloadEnv(t, denyNotes)
	broken := base + denyNotes + "\n[[rule]]\nuri = \"data://public.txt\"\nwho = [\"*\"]\nallow = [\"read\"]\nbogus = 1\n"
	line := strings.Count(strings.SplitN(broken, "bogus = 1", 2)[0], "\n") + 1
	e.rewrite(broken)
	out, err := e.reloadCLI(0)
	if err == nil {
		t.Fatalf("neuralisfs reload accepted a broken config:\n%s", out)
	}
	if code := exitCode(err); code != 1 {
		t.Errorf("neuralisfs reload exit code %d, want 1", code)
	}
	want := fmt.Sprintf("%s:%d: rule.bogus: unknown key", e.cfg, line)
	if !strings.Contains(out, want) {
		t.Errorf("neuralisfs reload output lacks %q:\n%s", want, out)
	}
	// The daemon logs before it answers, but its stderr reaches the test
	// through a pipe that another goroutine copies.
	eventually(t, 5*time.Second, "the daemon's log to hold "+want, func() bool { return strings.Contains(e.stderr.String(), want) })
	// SIGHUP with the same file: refused, logged, the daemon runs on.
	if l := e.hup(); !strings.Contains(l, "reload refused") {
		t.Errorf("SIGHUP with a broken config: %s", l)
	}
	// The old rules still hold, in the main mount and the view.
	for _, p := range []string{e.m("data", "notes", "n.txt"), filepath.Join(view, "data", "notes", "n.txt")} {
		if got := agentSees(t, p); strings.Contains(got, "a note") {
			t.Errorf("after a refused reload the agent reads %s:\n%s", p, got)
		}
	}
	if got := agentSees(t, e.m("data", "public.txt")); !strings.Contains(got, "public") {
		t.Errorf("after a refused reload:\n%s", got)
	}
	data, _ := os.ReadFile(filepath.Join(e.state, "audit.log"))
	if !strings.Contains(string(data), `"op":"reload"`) || !strings.Contains(string(data), `"rule":"refused"`) {
		t.Errorf("no audit line for the refused reload:\n%s", data)
	}
}

// exitCode is the exit status in err from a command that ran, or -1.
func exitCode(err error) int {
	if e, ok := err.(interface{ ExitCode() int }); ok {
		return e.ExitCode()
	}
	return -1
}

// A reload that adds a file, inline or http source starts its feed (the
// source serves its file), and one that drops it stops the feed.
func TestReloadAddsAndRemovesAFeedSource(t *testing.T) {
	e, _, base := reloadEnv(t, "")
	inline := "\n[[source]]\nslug = \"notes2\"\nkind = \"inline\"\nname = \"n.md\"\ntext = \"\"\"\nadded by a reload\n\"\"\"\n"
	e.rewrite(base + inline)
	if out, err := e.reloadCLI(0); err != nil || !strings.Contains(out, "source notes2 added") {
		t.Fatalf("reload adding an inline source: %v\n%s", err, out)
	}
	eventually(t, 10*time.Second, "the added inline source to serve its file", func() bool {
		b, err := os.ReadFile(e.m("notes2", "n.md"))
		return err == nil && strings.Contains(string(b), "added by a reload")
	})
	e.rewrite(base)
	if out, err := e.reloadCLI(0); err != nil || !strings.Contains(out, "source notes2 removed") {
		t.Fatalf("reload removing the inline source: %v\n%s", err, out)
	}
	if _, err := os.Stat(e.m("notes2")); err == nil {
		t.Error("the removed source is still on the mount")
	}
}

// An open file cannot be revoked: with passthrough the kernel sends the
// reads and writes of a descriptor straight to the backing file, so a
// reload that holds or refuses what a descriptor was opened for cannot
// stop it. The reload names every such descriptor (in its answer, the
// log and the audit line), with who opened it and the process, so that
// whoever tightened the rules can end it; a descriptor of a held copy
// is not named (what it writes waits for review whatever changes), and
// once the files are closed a reload names nothing.
func TestReloadNamesDescriptorsItCannotCutOff(t *testing.T) {
	requireFUSE(t)
	e, view, base := reloadEnv(t, "")
	data := e.b("data")
	writeFile(t, filepath.Join(data, "w.txt"), "before\n", 0o666)
	writeFile(t, filepath.Join(data, "owner.txt"), "owner\n", 0o666)
	os.Chmod(filepath.Join(data, "w.txt"), 0o666)
	sync := filepath.Join(sharedTempDir(t), "sync")
	must(t, os.Mkdir(sync, 0o777))
	os.Chmod(sync, 0o777)
	for _, f := range []string{"go1", "go2"} {
		must(t, syscall.Mkfifo(filepath.Join(sync, f), 0o666))
		os.Chmod(filepath.Join(sync, f), 0o666)
	}
	// The agent holds w.txt open for appending through its view and
	// notes/n.txt open for reading through the main mount.
	agent := exec.Command("bash", "-c", `set -e
exec 3>>"$V/data/w.txt" 4<"$M/data/notes/n.txt"
echo $$ > "$S/pid"
read x < "$S/go1"
echo after >&3
exec 6>>"$V/data/w.txt"
echo held >&6
echo $$ > "$S/step2"
read x < "$S/go2"
exec 3>&- 4<&- 6>&-
echo $$ > "$S/closed"`)
	agent.Dir = "/"
	agent.Env = append(os.Environ(), "V="+view, "M="+e.mnt, "S="+sync, "HOME=/tmp")
	agent.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	var agentOut strings.Builder
	agent.Stdout, agent.Stderr = &agentOut, &agentOut
	must(t, agent.Start())
	done := make(chan error, 1)
	go func() { done <- agent.Wait() }()
	t.Cleanup(func() {
		agent.Process.Kill()
		<-done
	})
	await := func(name string) string {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if b, err := os.ReadFile(filepath.Join(sync, name)); err == nil && len(b) > 0 {
				return strings.TrimSpace(string(b))
			}
			select {
			case err := <-done:
				done <- err
				t.Fatalf("the agent's script ended before %s: %v\n%s", name, err, agentOut.String())
			default:
			}
		}
		t.Fatalf("the agent's script did not reach %s:\n%s", name, agentOut.String())
		return ""
	}
	pid := await("pid")
	// The owner holds a file open for writing too; its rules do not change.
	owner, err := os.OpenFile(e.m("data", "owner.txt"), os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	defer owner.Close()

	tight := base + denyNotes + `
[[rule]]
uri = "data://**"
who = ["role:agent"]
review = ["write"]
`
	e.rewrite(tight)
	out, err := e.reloadCLI(0)
	if err != nil {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	wantW := "data://w.txt is open for write by agent (uid 1001, pid " + pid + ")"
	wantR := "data://notes/n.txt is open for read by agent (uid 1001, pid " + pid + ")"
	for _, want := range []string{wantW + " since before the reload: its writes are now held for review", wantR + " since before the reload: the new config refuses it"} {
		if strings.Count(out, want) != 1 {
			t.Errorf("the reload does not name once %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "owner.txt") {
		t.Errorf("the reload names the owner's file, whose access did not change:\n%s", out)
	}

	// What the reload said is what happens: the old descriptor still
	// writes the backing file; a new open is held.
	must(t, os.WriteFile(filepath.Join(sync, "go1"), []byte("\n"), 0))
	await("step2")
	if b, _ := os.ReadFile(filepath.Join(data, "w.txt")); string(b) != "before\nafter\n" {
		t.Errorf("backing w.txt = %q, want the old descriptor's write and not the held one", b)
	}
	if items := reviewJSON(t, 0, e, "list"); len(items) != 1 || items[0].URI != "data://w.txt" {
		t.Errorf("review list = %+v, want the new open's write to w.txt held", items)
	}
	out, err = e.reloadCLI(0)
	if err != nil {
		t.Fatalf("second reload: %v\n%s", err, out)
	}
	if strings.Count(out, "data://w.txt is open") != 1 || !strings.Contains(out, wantW) {
		t.Errorf("the second reload must name the direct descriptor of w.txt once and not the held one:\n%s", out)
	}

	must(t, os.WriteFile(filepath.Join(sync, "go2"), []byte("\n"), 0))
	await("closed")
	if err := <-done; err != nil {
		t.Fatalf("the agent's script: %v\n%s", err, agentOut.String())
	}
	done <- nil
	out, err = e.reloadCLI(0)
	if err != nil {
		t.Fatalf("third reload: %v\n%s", err, out)
	}
	if strings.Contains(out, "open before the reload") {
		t.Errorf("with the files closed the reload still names some:\n%s", out)
	}
	audit, _ := os.ReadFile(filepath.Join(e.state, "audit.log"))
	for _, want := range []string{`"policy; 2 opened before keep their access: ` + wantR, `"no change; 2 opened before keep their access: ` + wantR, `"no change"}`} {
		if n := strings.Count(string(audit), want); n != 1 {
			t.Errorf("%d audit lines hold %q, want 1 (the three reloads):\n%s", n, want, audit)
		}
	}
}

// TestViewUnmountedByHand: `umount` of one agent's view (say to cut the
// agent off) unmounts that view only: the main mount serves on, for
// root and for the agent, `neuralisfs status` says the view is not
// mounted, and `neuralisfs reload` mounts it again. Before, the daemon took any
// mount gone from outside for the end of its service and unmounted
// everything.
func TestViewUnmountedByHand(t *testing.T) {
	e, view, _ := reloadEnv(t, "")
	if out := agentSees(t, filepath.Join(view, "data", "public.txt")); !strings.Contains(out, "public") {
		t.Fatalf("the agent's view before the umount:\n%s", out)
	}
	if out, err := exec.Command("umount", view).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v\n%s", view, err, out)
	}
	if !e.logged("a view was unmounted from outside") {
		t.Fatalf("the daemon's log does not say it saw the view go:\n%s", e.stderr)
	}
	if mounted(view) {
		t.Errorf("%s is still mounted after umount", view)
	}
	if out := agentSees(t, e.m("data", "public.txt")); !strings.Contains(out, "public") {
		t.Errorf("the agent in the main mount after its view was unmounted:\n%s", out)
	}
	if b, err := os.ReadFile(e.m("data", "notes", "n.txt")); err != nil || string(b) != "a note\n" {
		t.Errorf("root in the main mount after the view was unmounted: %q, %v", b, err)
	}
	if st := e.status(t); strings.Contains(st, "mount: "+view) || !strings.Contains(st, "view: "+view+" is not mounted") {
		t.Errorf("neuralisfs status after the view was unmounted:\n%s", st)
	}
	out, err := e.reloadCLI(0)
	if err != nil || !strings.Contains(out, "view "+view+" added") {
		t.Fatalf("neuralisfs reload after the view was unmounted: %v\n%s", err, out)
	}
	if out := agentSees(t, filepath.Join(view, "data", "public.txt")); !strings.Contains(out, "public") {
		t.Errorf("the agent's view mounted again by the reload:\n%s", out)
	}
	if st := e.status(t); !strings.Contains(st, "mount: "+view) || strings.Contains(st, "not mounted") {
		t.Errorf("neuralisfs status with the view mounted again:\n%s", st)
	}
}

// A reload that hides a folder drops the listing the kernel keeps of it
// in a view, where no OPENDIR reaches the daemon: a process of the agent
// working in the folder, which had listed it, listed its names again
// after the reload (found by a red-team pass; the names themselves were
// dropped, not the folder's cached listing).
func TestReloadDropsAHiddenFoldersListingInAView(t *testing.T) {
	e, view, base := reloadEnv(t, "")
	sh := startShell(t, filepath.Join(view, "data", "notes"))
	for range 2 {
		if out := sh.do(t, "ls; cat n.txt"); !strings.Contains(out, "n.txt") {
			t.Fatalf("the agent lists notes/ before the reload: %q", out)
		}
		time.Sleep(time.Second)
	}
	e.rewrite(base + denyNotes)
	if out, err := e.reloadCLI(0); err != nil {
		t.Fatalf("neuralisfs reload: %v\n%s", err, out)
	}
	if out := sh.do(t, "ls 2>&1; cat n.txt 2>&1"); strings.Contains(out, "n.txt\n") || strings.Contains(out, "a note") {
		t.Errorf("after the reload that hides notes/, the agent working in it reads:\n%s", out)
	}
}

// A view a reload makes read-only (or removes) takes no more writes from
// a process that was working inside it: its unmount is lazy while the
// process is there, and the daemon served that process under the view's
// old settings, so creates and unlinks relative to its working folder or
// a folder descriptor kept from before reached the backing files (found
// by a red-team pass). They answer EROFS now; reading goes on.
func TestReloadedViewTakesNoWritesFromInside(t *testing.T) {
	requireFUSE(t)
	view := filepath.Join(sharedTempDir(t), "agentview")
	must(t, os.Mkdir(view, 0o755))
	data := sharedTempDir(t)
	must(t, os.Chmod(data, 0o777))
	writeFile(t, filepath.Join(data, "w", "keep.txt"), "kept\n", 0o666)
	must(t, os.Chmod(filepath.Join(data, "w"), 0o777))
	e := newEnv(t, agentTOML+viewTOML("agent", view), src{slug: "data", path: data})
	cfg, err := os.ReadFile(e.cfg)
	must(t, err)
	flag := filepath.Join(sharedTempDir(t), "reloaded")
	agent := exec.Command("/usr/bin/python3", "-c", `
import os, sys, time
os.chdir(sys.argv[1])
dfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
print("in", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
def try_(what, f):
    try:
        f()
        print(what, "ok", flush=True)
    except OSError as e:
        print(what, e.errno, flush=True)
try_("create", lambda: os.close(os.open("after.txt", os.O_CREAT | os.O_WRONLY, 0o644)))
try_("createat", lambda: os.close(os.open("afterat.txt", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=dfd)))
try_("unlink", lambda: os.unlink("keep.txt"))
try_("mkdir", lambda: os.mkdir("d"))
try_("read", lambda: open("keep.txt").read())
`, filepath.Join(view, "data", "w"), flag)
	agent.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	var out strings.Builder
	stdout, err := agent.StdoutPipe()
	must(t, err)
	agent.Stderr = &out
	must(t, agent.Start())
	r := bufio.NewReader(stdout)
	if line, err := r.ReadString('\n'); err != nil || line != "in\n" {
		t.Fatalf("agent: %q, %v\n%s", line, err, out.String())
	}
	e.rewrite(strings.Replace(string(cfg), "mountpoint = \""+view+"\"", "mountpoint = \""+view+"\"\nread_only = true", 1))
	if o, err := e.reloadCLI(0); err != nil {
		t.Fatalf("reload: %v\n%s", err, o)
	}
	must(t, os.WriteFile(flag, nil, 0o644))
	rest, _ := io.ReadAll(r)
	agent.Wait()
	got := string(rest)
	for _, want := range []string{"create 30\n", "createat 30\n", "unlink 30\n", "mkdir 30\n", "read ok\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("inside the view the reload made read-only, no %q in:\n%s%s", want, got, out.String())
		}
	}
	for _, name := range []string{"after.txt", "afterat.txt", "d"} {
		if _, err := os.Lstat(filepath.Join(data, "w", name)); err == nil {
			t.Errorf("w/%s was made through the old view", name)
		}
	}
	if _, err := os.Stat(filepath.Join(data, "w", "keep.txt")); err != nil {
		t.Errorf("w/keep.txt: %v", err)
	}
}
