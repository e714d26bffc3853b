package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// heldConfig holds every write of the agent (uid 1001) to every source
// for review and gives it a view; uid 1002 is another principal whose
// writes are not held.
func heldConfig(view string) string {
	return `
[[principal]]
name = "agent"
uids = [1001]
roles = ["agent"]

[[principal]]
name = "alice"
uids = [1002]

[[rule]]
uri = "*://**"
who = ["role:agent"]
review = ["write"]

[[view]]
principal = "agent"
mountpoint = "` + view + `"
`
}

// seedHeld fills a folder with what the agent's workload changes.
func seedHeld(tb testing.TB, dir string) {
	tb.Helper()
	sh(tb, `set -e
cd "$D"
echo original > a.txt
mkdir -p sub dir1/inner emptydir tree/x/y gomod
echo b > sub/b.txt
echo 0123456789 > long.txt
echo bye > gone.txt
echo m > mv1.txt
echo i > dir1/inner/i.txt
echo t > tree/x/y/t.txt
echo old > sub/b2.txt
mkdir -p tarsrc/p && echo tarred > tarsrc/p/q.txt && tar -cf src.tar -C tarsrc . && rm -rf tarsrc
printf 'module example.com/hello\n\ngo 1.21\n' > gomod/go.mod
printf 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello from a held build") }\n' > gomod/main.go
chmod -R a+rwX . && chown -R 1001:1001 .
`, "D="+dir)
}

// heldWorkload is what the agent does: every kind of change an agent's
// tools make. It runs in the folder W.
const heldWorkload = `set -e
cd "$W"
echo changed > a.txt
echo more >> sub/b.txt
echo new > n.txt
truncate -s 3 long.txt
rm gone.txt
mv mv1.txt moved.txt
mv dir1 dir2
mkdir -p newdir/deep && echo x > newdir/deep/f
rmdir emptydir
chmod 0604 a.txt
ln -s a.txt link
printf 'saved\n' > sub/.b2.txt.swp && mv sub/.b2.txt.swp sub/b2.txt
mkfifo fifo
rm -rf tree
mkdir untar && tar -xf src.tar -C untar
mkdir repo && cd repo && git init -q && echo hi > f && git add f && git -c user.name=a -c user.email=a@x commit -qm m && cd ..
test "$(git -C repo log --oneline | wc -l)" = 1
test -z "$(git -C repo status --porcelain)"
[ -n "$NOGO" ] || { cd gomod && HOME=/tmp GOCACHE=/gocache GOPATH=/tmp/gopath GOFLAGS=-trimpath GOTOOLCHAIN=local /usr/local/go/bin/go build -o hello . && ./hello > out.txt && cd .. ; }
`

// manifest lists a tree as type, mode, size, content digest or link
// target per path (times, owners and git's own files left out: a commit's
// id depends on the clock).
const manifestScript = `cd "$W" && find . -path ./repo/.git -prune -o -path ./gomod/hello -prune -o -printf '%y %m %s %p %l\n' | LC_ALL=C sort && find . -path ./repo/.git -prune -o -path ./gomod/hello -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum`

func manifest(tb testing.TB, uid int, dir string) string {
	tb.Helper()
	out, err := run(tb, uid, manifestScript, "W="+dir)
	if err != nil {
		tb.Fatalf("manifest of %s: %v\n%s", dir, err, out)
	}
	return out
}

// The agent's writes are held: it reads back exactly what it wrote (the
// same workload on a plain folder is the reference), in its view and in
// the main mount, inside a bubblewrap sandbox, while the backing folder,
// the owner and another principal see nothing change — also after the
// agent warmed the kernel's caches. Approving lands exact bytes and
// modes, journaled; revert undoes an approval.
func TestHeldWritesReadYourWrites(t *testing.T) {
	requireFUSE(t)
	requireTool(t, "bwrap", "bubblewrap")
	base := sharedTempDir(t)
	view := filepath.Join(base, "view")
	must(t, os.Mkdir(view, 0o755))
	e := newEnv(t, heldConfig(view), src{slug: "d"}, src{slug: "e"})
	seedHeld(t, e.b("d"))
	plain := filepath.Join(base, "plain")
	sh(t, `cp -a "$B" "$P" && chmod 0777 "$P"`, "B="+e.b("d"), "P="+plain)
	before := manifest(t, 0, e.b("d"))
	// One Go build cache for both runs of the workload (a cold one
	// compiles the standard library).
	gocache := filepath.Join(base, "gocache")
	must(t, os.Mkdir(gocache, 0o755))
	must(t, os.Chown(gocache, 1001, 1001))
	box := func(dir string) string { return sandbox(dir, "/work") + "--bind " + gocache + " /gocache " }

	// The reference: the same workload on a plain folder, as the agent.
	if out, err := run(t, 1001, box(plain)+" bash -c '"+strings.ReplaceAll(heldWorkload, "'", `'\''`)+"'", "W=/work"); err != nil {
		t.Fatalf("workload on a plain folder: %v\n%s", err, out)
	}
	want := manifest(t, 1001, plain)

	// The agent, in a container bound to its view.
	if out, err := run(t, 1001, box(view)+" bash -c '"+strings.ReplaceAll(heldWorkload, "'", `'\''`)+"'", "W=/work/d"); err != nil {
		t.Fatalf("workload in the view: %v\n%s", err, out)
	}
	if got := manifest(t, 1001, filepath.Join(view, "d")); got != want {
		t.Errorf("the agent's view differs from the plain folder:\n--- view\n%s\n--- plain\n%s", got, want)
	}
	// The same held state in the main mount, for the agent.
	if got := manifest(t, 1001, e.m("d")); got != want {
		t.Errorf("the main mount differs for the agent:\n--- main\n%s\n--- plain\n%s", got, want)
	}
	// The same workload (less the Go build) in a sandbox bound to the main
	// mount, on a second source: nothing there is cached for everyone.
	plain2 := filepath.Join(base, "plain2")
	sh(t, `cp -a "$B" "$P" && chmod 0777 "$P"`, "B="+e.b("d"), "P="+plain2)
	sh(t, `cp -a "$B/." "$E/"`, "B="+e.b("d"), "E="+e.b("e"))
	beforeE := manifest(t, 0, e.b("e"))
	if out, err := run(t, 1001, box(plain2)+" bash -c '"+strings.ReplaceAll(heldWorkload, "'", `'\''`)+"'", "W=/work", "NOGO=1"); err != nil {
		t.Fatalf("workload on the second plain folder: %v\n%s", err, out)
	}
	want2 := manifest(t, 1001, plain2)
	if out, err := run(t, 1001, box(e.mnt)+" bash -c '"+strings.ReplaceAll(heldWorkload, "'", `'\''`)+"'", "W=/work/e", "NOGO=1"); err != nil {
		t.Fatalf("workload in the main mount: %v\n%s", err, out)
	}
	for _, at := range []string{e.m("e"), filepath.Join(view, "e")} {
		if got := manifest(t, 1001, at); got != want2 {
			t.Errorf("the agent's %s differs from the plain folder:\n--- mount\n%s\n--- plain\n%s", at, got, want2)
		}
	}
	for _, who := range []int{0, 1002} {
		if got := manifest(t, who, e.m("e")); got != beforeE {
			t.Errorf("uid %d sees the agent's held changes in e:\n%s", who, got)
		}
	}
	if got := manifest(t, 0, e.b("e")); got != beforeE {
		t.Errorf("the backing folder of e changed")
	}

	// Nobody else sees any of it: the backing folder, root on the mount
	// and alice (with the agent's lookups warm in the kernel).
	if got := manifest(t, 0, e.b("d")); got != before {
		t.Errorf("the backing folder changed:\n--- now\n%s\n--- before\n%s", got, before)
	}
	if got := manifest(t, 0, e.m("d")); got != before {
		t.Errorf("root sees held changes on the mount:\n--- mount\n%s\n--- backing\n%s", got, before)
	}
	if got := manifest(t, 1002, e.m("d")); got != before {
		t.Errorf("alice sees held changes on the mount:\n--- mount\n%s\n--- backing\n%s", got, before)
	}
	// The agent reads its own once more (alice's walk must not have
	// replaced what the kernel keeps for it).
	if got := manifest(t, 1001, e.m("d")); got != want {
		t.Errorf("the main mount differs for the agent after alice's walk:\n%s", got)
	}

	// review list shows the changes; the agent cannot approve them.
	list := reviewJSON(t, 0, e, "list")
	if len(list) == 0 {
		t.Fatal("review list shows no held changes")
	}
	ops := map[string]string{}
	for _, c := range list {
		ops[c.URI] = c.Op
	}
	for u, op := range map[string]string{"d://a.txt": "modify", "d://n.txt": "create", "d://gone.txt": "delete", "d://moved.txt": "rename", "d://dir2": "rename", "d://newdir": "mkdir", "d://emptydir": "rmdir", "d://tree": "rmdir", "d://link": "symlink"} {
		if ops[u] != op {
			t.Errorf("review list: %s is %q, want %q (all: %v)", u, ops[u], op, ops)
		}
	}
	if out, err := run(t, 1001, binPath+" review approve --all -c "+e.cfg); err == nil || !strings.Contains(out, "held for review") {
		t.Errorf("the agent approved its own changes: %v\n%s", err, out)
	}
	if got := manifest(t, 0, e.b("d")); got != before {
		t.Errorf("a refused approval changed the backing folder")
	}
	// alice may not see the agent's changes unless she could approve them
	// (she can: she may write d:// directly), but not with --principal of
	// a principal that does not exist.
	if out, err := run(t, 1002, binPath+" review list --principal nobody -c "+e.cfg); err == nil || !strings.Contains(out, `unknown principal "nobody"`) {
		t.Errorf("review list --principal nobody: %v\n%s", err, out)
	}

	// Approve everything: the backing folder becomes what the plain
	// folder is, byte for byte and mode for mode. --all leaves the new
	// repository held (git reads commands from its .git): it takes
	// approving by name.
	out, err := run(t, 0, binPath+" review approve --all -c "+e.cfg)
	if err != nil {
		t.Fatalf("review approve --all: %v\n%s", err, out)
	}
	for _, u := range []string{"d://repo", "e://repo"} {
		if !strings.Contains(out, "left held ") || !strings.Contains(out, " mkdir "+u+" (git runs commands from "+u+"/.git") {
			t.Errorf("review approve --all does not say it left %s held:\n%s", u, out)
		}
	}
	if out, err := run(t, 0, binPath+" review approve d://repo e://repo -c "+e.cfg); err != nil {
		t.Fatalf("review approve of the new repositories: %v\n%s", err, out)
	}
	if got := manifest(t, 0, e.b("d")); got != want {
		t.Errorf("after approval the backing folder differs from the plain folder:\n--- backing\n%s\n--- plain\n%s", got, want)
	}
	if left := reviewJSON(t, 0, e, "list"); len(left) != 0 {
		t.Errorf("held changes left after approve --all: %+v", left)
	}
	for _, who := range []int{0, 1001, 1002} {
		if got := manifest(t, who, e.m("d")); got != want {
			t.Errorf("uid %d on the mount after approval:\n%s", who, got)
		}
	}
	// The approval is journaled: revert brings a.txt back.
	if out, err := run(t, 0, binPath+" revert d://a.txt -c "+e.cfg); err != nil {
		t.Fatalf("revert of an approved change: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(e.b("d", "a.txt")); string(b) != "original\n" {
		t.Errorf("a.txt after revert = %q, want the content before the approval", b)
	}
	audit, _ := os.ReadFile(filepath.Join(e.state, "audit.log"))
	for _, want := range []string{`"outcome":"held"`, `"outcome":"approve"`} {
		if !strings.Contains(string(audit), want) {
			t.Errorf("audit log has no %s line", want)
		}
	}
}

type reviewItem struct {
	ID, URI, Op, Principal, From, Conflict string
	Links                                  []string
	Since                                  time.Time
}

func reviewJSON(tb testing.TB, uid int, e *env, args ...string) []reviewItem {
	tb.Helper()
	out, err := run(tb, uid, binPath+" review "+strings.Join(args, " ")+" --json -c "+e.cfg)
	if err != nil {
		tb.Fatalf("review %v: %v\n%s", args, err, out)
	}
	var items []reviewItem
	if err := json.Unmarshal([]byte(out), &items); err != nil {
		tb.Fatalf("review %v --json: %v\n%s", args, err, out)
	}
	return items
}

// Reject changes nothing on disk and the agent sees the backing file
// again; a base that moved is a conflict that approve refuses (and
// --force overrides); one agent cannot see another's held changes.
func TestHeldRejectConflictAndPrivacy(t *testing.T) {
	requireFUSE(t)
	base := sharedTempDir(t)
	view := filepath.Join(base, "view")
	must(t, os.Mkdir(view, 0o755))
	extra := heldConfig(view) + `
[[principal]]
name = "agent2"
uids = [1003]
roles = ["agent"]
`
	e := newEnv(t, extra, src{slug: "d"})
	writeFile(t, e.b("d", "x.txt"), "base\n", 0o666)
	writeFile(t, e.b("d", "y.txt"), "base\n", 0o666)
	for _, s := range []string{`echo agent > "$M/x.txt"; echo agent > "$M/y.txt"; echo secretname > "$M/only-agent.txt"`} {
		if out, err := run(t, 1001, s, "M="+e.m("d")); err != nil {
			t.Fatalf("agent: %v\n%s", err, out)
		}
	}
	// agent2 sees the backing files, and none of agent's held changes.
	out, err := run(t, 1003, `cat "$M/x.txt"; ls "$M"; `+binPath+` review list --json -c `+e.cfg, "M="+e.m("d"))
	if err != nil || strings.Contains(out, "agent\n") || strings.Contains(out, "only-agent") {
		t.Errorf("agent2 sees agent's held changes: %v\n%s", err, out)
	}
	if items := reviewJSON(t, 1001, e, "list"); len(items) != 3 {
		t.Errorf("the agent's own review list: %+v", items)
	}
	// Inside the mount: .neuralis/review/ shows the caller's own only.
	out, err = run(t, 1001, `cat "$M/.neuralis/review/list"; cat "$M/.neuralis/review/diff"`, "M="+e.mnt)
	if err != nil || !strings.Contains(out, "d://only-agent.txt") || !strings.Contains(out, "+secretname") || strings.Count(out, "\tmodify\t") != 2 {
		t.Errorf(".neuralis/review for the agent: %v\n%s", err, out)
	}
	out, err = run(t, 1003, `ls "$M/.neuralis/review"; cat "$M/.neuralis/review/list" "$M/.neuralis/review/diff"`, "M="+e.mnt)
	if err != nil || strings.Contains(out, "only-agent") || strings.Contains(out, "secretname") || !strings.Contains(out, "no held changes") {
		t.Errorf(".neuralis/review for agent2 shows agent's changes: %v\n%s", err, out)
	}
	// Reject x.txt: nothing changes on disk; the agent sees the base.
	if out, err := run(t, 0, binPath+" review reject d://x.txt -c "+e.cfg); err != nil {
		t.Fatalf("reject: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(e.b("d", "x.txt")); string(b) != "base\n" {
		t.Errorf("reject changed the backing file: %q", b)
	}
	if out, _ := run(t, 1001, `cat "$M/x.txt"`, "M="+e.m("d")); out != "base\n" {
		t.Errorf("after reject the agent reads %q, want the backing file", out)
	}
	// y.txt changes behind the agent: approving is a conflict.
	writeFile(t, e.b("d", "y.txt"), "moved on\n", 0o666)
	out, err = run(t, 0, binPath+" review approve d://y.txt -c "+e.cfg)
	if err == nil || !strings.Contains(out, "d://y.txt changed since") {
		t.Errorf("approve over a moved base: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(e.b("d", "y.txt")); string(b) != "moved on\n" {
		t.Errorf("a refused approval changed y.txt: %q", b)
	}
	if out, err := run(t, 0, binPath+" review approve --force d://y.txt -c "+e.cfg); err != nil {
		t.Fatalf("approve --force: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(e.b("d", "y.txt")); string(b) != "agent\n" {
		t.Errorf("approve --force left y.txt %q", b)
	}
	// alice (uid 1002, writes not held) may review, with her own file
	// permissions: not a file only its owner may write.
	writeFile(t, e.b("d", "owned.txt"), "base\n", 0o644)
	must(t, os.Chown(e.b("d", "owned.txt"), 1001, 1001))
	writeFile(t, e.b("d", "shared.txt"), "base\n", 0o666)
	if out, err := run(t, 1001, `echo agent > "$M/owned.txt"; echo agent > "$M/shared.txt"`, "M="+e.m("d")); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	if out, err := run(t, 1002, binPath+" review approve d://owned.txt -c "+e.cfg); err == nil || !strings.Contains(out, "file permissions") {
		t.Errorf("alice approved a change to a file she may not write: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(e.b("d", "owned.txt")); string(b) != "base\n" {
		t.Errorf("a refused approval changed owned.txt: %q", b)
	}
	if out, err := run(t, 1002, binPath+" review approve d://shared.txt -c "+e.cfg); err != nil {
		t.Errorf("alice could not approve a change she could make herself: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(e.b("d", "shared.txt")); string(b) != "agent\n" {
		t.Errorf("alice's approval left shared.txt %q", b)
	}
	// The agent may withdraw its own change.
	if out, err := run(t, 1001, binPath+" review reject d://only-agent.txt -c "+e.cfg); err != nil {
		t.Errorf("the agent could not withdraw its own change: %v\n%s", err, out)
	}
	if _, err := os.Stat(e.b("d", "only-agent.txt")); err == nil {
		t.Errorf("a rejected create reached the backing folder")
	}
}

// Held changes survive a restart and a SIGKILL in the middle of a burst:
// every file the agent finished writing is there, whole, after the
// daemon comes back.
func TestHeldSurviveKill(t *testing.T) {
	requireFUSE(t)
	base := sharedTempDir(t)
	view := filepath.Join(base, "view")
	must(t, os.Mkdir(view, 0o755))
	e := newEnv(t, heldConfig(view), src{slug: "d"})
	writeFile(t, e.b("d", "keep.txt"), "backing\n", 0o666)
	if out, err := run(t, 1001, `echo held > "$M/keep.txt"`, "M="+e.m("d")); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	// A burst, killed part way.
	cmd := exec.Command("bash", "-c", `for i in $(seq 1 2000); do echo "content $i" > "$M/f$i" || exit 1; echo "done $i"; done`)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "M="+e.m("d"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	var outBuf syncBuffer
	cmd.Stdout = &outBuf
	must(t, cmd.Start())
	eventually(t, 60*time.Second, "the burst to write 100 files", func() bool { return strings.Count(outBuf.String(), "done ") >= 100 })
	e.kill()
	cmd.Wait()
	doneCount := strings.Count(outBuf.String(), "done ")
	syscall.Unmount(view, syscall.MNT_DETACH)
	e.start()
	if out, _ := run(t, 1001, `cat "$M/keep.txt"`, "M="+e.m("d")); out != "held\n" {
		t.Errorf("after SIGKILL and restart the agent reads keep.txt %q, want its held content", out)
	}
	if b, _ := os.ReadFile(e.b("d", "keep.txt")); string(b) != "backing\n" {
		t.Errorf("the backing keep.txt is %q", b)
	}
	out, err := run(t, 1001, `for i in $(seq 1 `+strconv.Itoa(doneCount)+`); do c=$(cat "$M/f$i") || exit 1; test "$c" = "content $i" || { echo "f$i: $c"; exit 1; }; done`, "M="+e.m("d"))
	if err != nil {
		t.Errorf("files written before the kill: %v\n%s", err, out)
	}
	if items := reviewJSON(t, 0, e, "list"); len(items) < doneCount+1 {
		t.Errorf("review list after the restart has %d changes, want at least %d", len(items), doneCount+1)
	}
	ents, _ := os.ReadDir(e.b("d"))
	if len(ents) != 1 {
		t.Errorf("the backing folder holds %d names, want only keep.txt", len(ents))
	}
}

// Past [review] max_bytes a held write fails with EDQUOT, audited, and
// nothing already held is lost.
func TestHeldQuota(t *testing.T) {
	requireFUSE(t)
	base := sharedTempDir(t)
	view := filepath.Join(base, "view")
	must(t, os.Mkdir(view, 0o755))
	sock := filepath.Join(base, "metrics.sock")
	e := newEnv(t, heldConfig(view)+"\n[review]\nmax_bytes = 10000\n[metrics]\nlisten = \""+sock+"\"\n", src{slug: "d"})
	// A write that would pass the bound is refused, through a file
	// opened under it too (before, the bound was checked at open only
	// and these 12000 bytes were all held); what was written before it
	// is kept, and so is the bound.
	out, err := run(t, 1001, `head -c 12000 /dev/zero | tr '\0' a > "$M/big"`, "M="+e.m("d"))
	if err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("a held write past max_bytes: %v\n%s", err, out)
	}
	out, err = run(t, 1001, `wc -c < "$M/big"; tr -d a < "$M/big" | wc -c; head -c 4096 /dev/zero 2>/dev/null >> "$M/big" || echo refused; wc -c < "$M/big"`, "M="+e.m("d"))
	var held, other, after int
	var refused string
	if _, serr := fmt.Sscan(out, &held, &other, &refused, &after); err != nil || serr != nil || held <= 0 || held >= 10000 || other != 0 || refused != "refused" || after != held {
		t.Fatalf("what was held before the bound, and an append past it: %v\n%s", err, out)
	}
	// The metrics show what the agent holds.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	resp, err := c.Get("http://neuralisfs/metrics")
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if w := fmt.Sprintf(`neuralisfs_held_bytes{principal="agent",source="d"} %d`, held); !strings.Contains(string(body), w) {
		t.Errorf("metrics do not show the agent's %d held bytes:\n%s", held, grepLines(string(body), "neuralisfs_held"))
	}
	eventually(t, 5*time.Second, "a quota line in the audit log", func() bool {
		b, _ := os.ReadFile(filepath.Join(e.state, "audit.log"))
		return strings.Contains(string(b), `"outcome":"quota"`)
	})
}

// A file held open for reading (by the agent itself, or by the owner in
// the main mount) while the agent writes it: the write is held all the
// same — the backing file keeps its bytes — and the owner's open file
// keeps reading the backing content, never the agent's.
func TestHeldWriteWhileOpen(t *testing.T) {
	requireFUSE(t)
	base := sharedTempDir(t)
	view := filepath.Join(base, "view")
	must(t, os.Mkdir(view, 0o755))
	e := newEnv(t, heldConfig(view), src{slug: "d"})
	writeFile(t, e.b("d", "v.txt"), "backing v\n", 0o666)
	writeFile(t, e.b("d", "m.txt"), "backing m\n", 0o666)
	// In the view: the agent's own reader is open when it writes.
	out, err := run(t, 1001, `exec 3< "$V/v.txt"; read -r first <&3; echo "agent v" > "$V/v.txt"; cat "$V/v.txt"; echo "first=$first"`, "V="+filepath.Join(view, "d"))
	if err != nil || !strings.Contains(out, "agent v\n") || !strings.Contains(out, "first=backing v") {
		t.Errorf("agent writing a file it holds open: %v\n%s", err, out)
	}
	// In the main mount: root holds m.txt open while the agent writes it.
	f, err := os.Open(e.m("d", "m.txt"))
	must(t, err)
	defer f.Close()
	buf := make([]byte, 4)
	if _, err := f.Read(buf); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, 1001, `echo "agent m" > "$M/m.txt"; cat "$M/m.txt"`, "M="+e.m("d")); err != nil || out != "agent m\n" {
		t.Errorf("agent in the main mount: %v\n%q", err, out)
	}
	rest := make([]byte, 64)
	n, _ := f.ReadAt(rest, 0)
	if string(rest[:n]) != "backing m\n" {
		t.Errorf("root's open file reads %q after the agent's held write, want the backing content", rest[:n])
	}
	if b, _ := os.ReadFile(e.m("d", "m.txt")); string(b) != "backing m\n" {
		t.Errorf("root reads %q through the mount", b)
	}
	for _, name := range []string{"v.txt", "m.txt"} {
		b, _ := os.ReadFile(e.b("d", name))
		if want := "backing " + name[:1] + "\n"; string(b) != want {
			t.Errorf("backing %s = %q, want %q: a held write reached it", name, b, want)
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A reload that adds a review rule holds the agent's next write; one that
// removes it leaves the held change in review and the agent sees the
// backing files again.
func TestHeldAcrossReload(t *testing.T) {
	requireFUSE(t)
	base := sharedTempDir(t)
	view := filepath.Join(base, "view")
	must(t, os.Mkdir(view, 0o755))
	plain := "\n[[principal]]\nname = \"agent\"\nuids = [1001]\nroles = [\"agent\"]\n\n[[view]]\nprincipal = \"agent\"\nmountpoint = \"" + view + "\"\n"
	e := newEnv(t, plain, src{slug: "d"})
	cfg, err := os.ReadFile(e.cfg)
	must(t, err)
	write := func(name string) {
		t.Helper()
		if out, err := run(t, 1001, `echo agent > "$M/`+name+`"`, "M="+e.m("d")); err != nil {
			t.Fatalf("agent writing %s: %v\n%s", name, err, out)
		}
	}
	write("direct.txt")
	if _, err := os.Stat(e.b("d", "direct.txt")); err != nil {
		t.Fatalf("without a review rule the write did not land: %v", err)
	}
	e.rewrite(string(cfg) + "\n[[rule]]\nuri = \"d://**\"\nwho = [\"role:agent\"]\nreview = [\"write\"]\n")
	if out, err := e.reloadCLI(0); err != nil {
		t.Fatalf("reload adding a review rule: %v\n%s", err, out)
	}
	write("held.txt")
	if _, err := os.Stat(e.b("d", "held.txt")); err == nil {
		t.Fatal("after the reload the agent's write reached the backing folder")
	}
	for _, p := range []string{e.m("d", "held.txt"), filepath.Join(view, "d", "held.txt")} {
		if got := agentSees(t, p); !strings.Contains(got, "agent") {
			t.Errorf("the agent does not see its held file at %s:\n%s", p, got)
		}
	}
	e.rewrite(string(cfg))
	if out, err := e.reloadCLI(0); err != nil {
		t.Fatalf("reload removing the review rule: %v\n%s", err, out)
	}
	if got := agentSees(t, e.m("d", "held.txt")); strings.Contains(got, "agent") {
		t.Errorf("without the rule the agent still sees its held file:\n%s", got)
	}
	if items := reviewJSON(t, 0, e, "list"); len(items) != 1 || items[0].URI != "d://held.txt" {
		t.Fatalf("review list after the rule went: %+v", items)
	}
	if out, err := run(t, 0, binPath+" review approve d://held.txt -c "+e.cfg); err != nil {
		t.Fatalf("approve: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(e.b("d", "held.txt")); string(b) != "agent\n" {
		t.Errorf("approved held.txt = %q", b)
	}
}
