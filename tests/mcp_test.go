package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpCanary is in every file the agent may not read; no answer to the
// agent may hold it.
const mcpCanary = "MCPCANARYXYZZY"

// mcpTOML: the agent (uid 1001) may not read d://secret* (names in a
// secret* folder included) and has its writes to h:// held for review.
const mcpTOML = `
[[principal]]
name = "agent"
uids = [1001]
roles = ["agent"]

[[rule]]
uri = "*://secret*"
who = ["role:agent"]
deny = ["read"]

[[rule]]
uri = "h://**"
who = ["role:agent"]
review = ["write"]
`

// mcpSession starts `neuralisfs mcp -c CFG` as uid (0: root) and connects
// the SDK's client to it over its stdin and stdout.
func mcpSession(t *testing.T, e *env, uid int) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(binPath, "mcp", "-c", e.cfg)
	cmd.Dir = "/"
	cmd.Stderr = os.Stderr
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		cmd.Env = append(os.Environ(), "HOME=/tmp")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		// Seen once in a full make test (30 s with no answer, session
		// 38): what the daemon was doing is the evidence, so have it
		// print its goroutines (SIGQUIT) before the test ends it.
		if e.cmd != nil && e.cmd.Process != nil {
			e.cmd.Process.Signal(syscall.SIGQUIT)
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && !strings.Contains(e.stderr.String(), "goroutine "); {
				time.Sleep(50 * time.Millisecond)
			}
		}
		t.Fatalf("connecting to neuralisfs mcp as uid %d: %v\ndaemon's log:\n%s", uid, err, e.stderr)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// callTool calls a tool and returns its text and whether it is an error.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tool %s %v: %v", name, args, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

// mcpList is the list tool's answer for uri, all pages, as lines
// "type size path" (path relative to the source, as find %P prints it).
func mcpList(t *testing.T, cs *mcp.ClientSession, uri string) []string {
	t.Helper()
	var lines []string
	offset := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list", Arguments: map[string]any{"uri": uri, "depth": 16, "offset": offset}})
		cancel()
		if err != nil || res.IsError {
			t.Fatalf("list %s: %v %v", uri, err, res)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var out struct {
			Entries []struct {
				URI, Type string
				Size      int64
			}
			Next int
		}
		must(t, json.Unmarshal(b, &out))
		for _, en := range out.Entries {
			rel := strings.TrimPrefix(en.URI, uri)
			size := fmt.Sprint(en.Size)
			if en.Type != "file" {
				size = "-"
			}
			letter := map[string]string{"file": "f", "folder": "d", "symlink": "l"}[en.Type]
			if letter == "" {
				letter = "o"
			}
			lines = append(lines, fmt.Sprintf("%s %s %s", letter, size, rel))
		}
		if out.Next == 0 {
			break
		}
		offset = out.Next
	}
	sort.Strings(lines)
	return lines
}

// mountList is what uid sees of a source's tree on the mount, as lines
// "type size path" (size "-" but for files).
func mountList(t *testing.T, e *env, uid int, slug string) []string {
	t.Helper()
	out, err := run(t, uid, `cd "$M" && find . -mindepth 1 \( -name .status -o -name .revs \) -prune -o -printf '%y %s %P\n'`, "M="+e.m(slug))
	if err != nil {
		t.Fatalf("find on the mount as uid %d: %v\n%s", uid, err, out)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.SplitN(l, " ", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] != "f" {
			f[1] = "-"
		}
		if f[0] != "f" && f[0] != "d" && f[0] != "l" {
			f[0] = "o"
		}
		lines = append(lines, strings.Join(f, " "))
	}
	sort.Strings(lines)
	return lines
}

func TestMCPServerDecidesAsTheMount(t *testing.T) {
	requireFUSE(t)
	requireTool(t, "git", "git")
	base := sharedTempDir(t)
	repo := filepath.Join(base, "repo")
	must(t, os.Mkdir(repo, 0o755))
	cmd := exec.Command("bash", "-c", `set -e; cd "$R"; git init -q; echo one > tracked.txt; mkdir sub; echo two > sub/s.txt
echo `+mcpCanary+` > secret.txt; git add -A; git commit -qm init; echo changed >> tracked.txt; echo new > untracked.txt
echo changed >> secret.txt; echo fresh > secretnew.txt; chmod -R a+rwX .`)
	cmd.Env = append(os.Environ(), append(gitEnv(), "R="+repo)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("making the repo: %v\n%s", err, out)
	}
	e := newEnv(t, mcpTOML, src{slug: "d"}, src{slug: "ro", extra: "read_only = true"}, src{slug: "h"}, src{slug: "g", kind: "git", path: repo})
	writeFile(t, e.b("d", "pub.txt"), "alpha line one\nbeta line two\ngamma mcpword three\n", 0o644)
	writeFile(t, e.b("d", "sub", "deep", "x.txt"), "deep mcpword\n", 0o644)
	writeFile(t, e.b("d", "rootonly.txt"), "only root reads this mcpword\n", 0o600)
	writeFile(t, e.b("d", "big.txt"), strings.Repeat("0123456789abcdef", 8<<10)+"end\n", 0o644) // 128 KiB + 4
	writeFile(t, e.b("d", "utf8.txt"), strings.Repeat("a", 65535)+"é and more\nsecond line\n", 0o644)
	writeFile(t, e.b("d", "bin.dat"), "\xff\xfe\x00binary", 0o644)
	writeFile(t, e.b("d", "secret.txt"), mcpCanary+" mcpword\n", 0o666)
	writeFile(t, e.b("d", "secretdir", "in.txt"), mcpCanary+" inside mcpword\n", 0o666)
	writeFile(t, e.b("ro", "r.txt"), "read only mcpword\n", 0o666)
	writeFile(t, e.b("h", "hfile.txt"), "held original\n", 0o666)
	must(t, os.Mkdir(e.b("h", "closed"), 0o755)) // only root makes names here
	os.Chmod(e.b("h"), 0o777)
	eventually(t, 10*time.Second, "the index has the files", func() bool {
		b, _ := os.ReadFile(filepath.Join(e.mnt, ".neuralis", "search", "mcpword"))
		return strings.Contains(string(b), "d://secretdir/in.txt") && strings.Contains(string(b), "ro://r.txt")
	})

	for _, uid := range []int{0, 1001} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			cs := mcpSession(t, e, uid)
			var answers strings.Builder // everything the server told this uid
			tool := func(name string, args map[string]any) (string, bool) {
				t.Helper()
				out, isErr := callTool(t, cs, name, args)
				answers.WriteString(out + "\n")
				return out, isErr
			}
			// list: the same tree as find on the mount, as this uid.
			// (A git source's virtual .status and .revs are the mount's own
			// names, not files: left out.)
			for _, slug := range []string{"d", "ro", "h", "g"} {
				got := mcpList(t, cs, slug+"://")
				want := mountList(t, e, uid, slug)
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("list %s:// as uid %d:\n%s\nthe mount shows:\n%s", slug, uid, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
				answers.WriteString(strings.Join(got, "\n"))
			}
			// read: every file and name, the same bytes as cat on the
			// mount, or an error where cat fails.
			for _, rel := range []string{"pub.txt", "sub/deep/x.txt", "rootonly.txt", "secret.txt", "secretdir/in.txt", "nosuch.txt", "secretfree.txt"} {
				got, isErr := tool("read", map[string]any{"uri": "d://" + rel})
				want, err := run(t, uid, `cat "$F"`, "F="+e.m("d", rel))
				switch {
				case err != nil && !isErr:
					t.Errorf("read d://%s as uid %d: %q, but cat on the mount fails: %s", rel, uid, got, want)
				case err == nil && (isErr || got != want):
					t.Errorf("read d://%s as uid %d: %q (error %v), the mount: %q", rel, uid, got, isErr, want)
				}
			}
			// A hidden name and a free one get the same answer.
			hidden, _ := tool("read", map[string]any{"uri": "d://secret.txt"})
			free, _ := tool("read", map[string]any{"uri": "d://secretfree.txt"})
			if uid != 0 && strings.ReplaceAll(hidden, "secret.txt", "X") != strings.ReplaceAll(free, "secretfree.txt", "X") {
				t.Errorf("a hidden name and a free one are told apart: %q vs %q", hidden, free)
			}
			// A line range, and a file past one answer read in parts.
			if got, _ := tool("read", map[string]any{"uri": "d://pub.txt", "from": 2, "to": 3}); got != "beta line two\ngamma mcpword three\n" {
				t.Errorf("read lines 2-3: %q", got)
			}
			// Files past one answer are read in parts, which never split
			// a character.
			for _, rel := range []string{"big.txt", "utf8.txt"} {
				var all strings.Builder
				offset := 0
				for range 5 {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"uri": "d://" + rel, "offset": offset}})
					cancel()
					if err != nil || res.IsError {
						t.Fatalf("read %s at %d: %v %v", rel, offset, err, res)
					}
					text := res.Content[0].(*mcp.TextContent).Text
					if len(text) > 64<<10 || !utf8.ValidString(text) {
						t.Errorf("one read of %s answered %d bytes (valid UTF-8: %v)", rel, len(text), utf8.ValidString(text))
					}
					all.WriteString(text)
					var out struct{ Next int }
					b, _ := json.Marshal(res.StructuredContent)
					json.Unmarshal(b, &out)
					if out.Next == 0 {
						break
					}
					offset = out.Next
				}
				if want, _ := os.ReadFile(e.b("d", rel)); all.String() != string(want) {
					t.Errorf("%s read in parts: %d bytes, want %d", rel, all.Len(), len(want))
				}
			}
			if got, _ := tool("read", map[string]any{"uri": "d://utf8.txt", "from": 2}); got != "second line\n" {
				t.Errorf("read from line 2 of a file with a 64 KiB first line: %q", got)
			}
			if out, isErr := tool("read", map[string]any{"uri": "d://bin.dat"}); !isErr || !strings.Contains(out, "not UTF-8 text") {
				t.Errorf("read of a binary file: %q (error %v)", out, isErr)
			}
			// search: the same text as .neuralis/search/<query> as this uid.
			for _, q := range []string{"mcpword", mcpCanary, "beta"} {
				got, isErr := tool("search", map[string]any{"query": q})
				want, err := run(t, uid, `cat "$F"`, "F="+filepath.Join(e.mnt, ".neuralis", "search", url.PathEscape(q)))
				if isErr || err != nil || got != want {
					t.Errorf("search %q as uid %d (error %v):\n%s\n.neuralis/search (%v):\n%s", q, uid, isErr, got, err, want)
				}
			}
			if got, _ := tool("search", map[string]any{"query": "mcpword", "source": "ro"}); !strings.Contains(got, "ro://r.txt:1:") || strings.Contains(got, "d://") {
				t.Errorf("search with source ro: %s", got)
			}
			// status: the .status of the git source's top folder.
			got, isErr := tool("status", map[string]any{"uri": "g://"})
			want, err := run(t, uid, `cat "$F"`, "F="+e.m("g", ".status"))
			if isErr || err != nil || got != want {
				t.Errorf("status g:// as uid %d (error %v):\n%s\n.status on the mount (%v):\n%s", uid, isErr, got, err, want)
			}
			if !strings.Contains(got, "tracked.txt") {
				t.Errorf("status g:// does not show the changed file:\n%s", got)
			}
			if _, isErr := tool("status", map[string]any{"uri": "d://"}); !isErr {
				t.Error("status of a folder that is not in a checkout is not an error")
			}
			// resources: one per source, each a listing.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rl, err := cs.ListResources(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var uris []string
			for _, r := range rl.Resources {
				uris = append(uris, r.URI)
				rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: r.URI})
				if err != nil {
					t.Errorf("read resource %s: %v", r.URI, err)
					continue
				}
				for _, c := range rr.Contents {
					answers.WriteString(c.Text)
				}
			}
			sort.Strings(uris)
			if strings.Join(uris, " ") != "d:// g:// h:// ro://" {
				t.Errorf("resources: %v", uris)
			}
			// write: refused on a read-only source, held under a review
			// rule, direct otherwise.
			if out, isErr := tool("write", map[string]any{"uri": "ro://r.txt", "content": "x"}); !isErr || !strings.Contains(out, "read-only") {
				t.Errorf("write to a read-only source as uid %d: %q (error %v)", uid, out, isErr)
			}
			if b, _ := os.ReadFile(e.b("ro", "r.txt")); string(b) != "read only mcpword\n" {
				t.Errorf("the read-only file changed: %q", b)
			}
			name := fmt.Sprintf("made-by-%d.txt", uid)
			if out, isErr := tool("write", map[string]any{"uri": "d://" + name, "content": "made\n"}); isErr {
				t.Errorf("write d://%s: %s", name, out)
			}
			if b, err := os.ReadFile(e.b("d", name)); err != nil || string(b) != "made\n" {
				t.Errorf("the direct write: %q %v", b, err)
			}
			if fi, err := os.Stat(e.b("d", name)); err == nil && fi.Sys().(*syscall.Stat_t).Uid != uint32(uid) {
				t.Errorf("d://%s is owned by uid %d, want %d", name, fi.Sys().(*syscall.Stat_t).Uid, uid)
			}
			// Replacing it: in place, as this uid, journaled.
			if out, isErr := tool("write", map[string]any{"uri": "d://" + name, "content": "made again\n"}); isErr || !strings.Contains(out, "wrote 11 bytes") {
				t.Errorf("rewrite d://%s: %s", name, out)
			}
			if b, err := run(t, uid, `cat "$F"`, "F="+e.m("d", name)); err != nil || b != "made again\n" {
				t.Errorf("the mount shows d://%s as %q %v", name, b, err)
			}
			if uid != 0 {
				if out, isErr := tool("write", map[string]any{"uri": "d://rootonly.txt", "content": "x"}); !isErr || !strings.Contains(out, "permission denied") {
					t.Errorf("write over a file only root may write: %q (error %v)", out, isErr)
				}
				// A hidden name is refused as on the mount (EACCES), the
				// same whether a file is there or not.
				hid, isErr := tool("write", map[string]any{"uri": "d://secret.txt", "content": "x"})
				free, isErr2 := tool("write", map[string]any{"uri": "d://secretfree.txt", "content": "x"})
				if !isErr || !isErr2 || !strings.Contains(hid, "permission denied") || strings.ReplaceAll(hid, "secret.txt", "X") != strings.ReplaceAll(free, "secretfree.txt", "X") {
					t.Errorf("write to a hidden name: %q (error %v), to a free hidden name: %q (error %v)", hid, isErr, free, isErr2)
				}
				if _, err := os.Stat(e.b("d", "secretfree.txt")); err == nil {
					t.Error("a write to a hidden free name made it")
				}
				out, isErr := tool("write", map[string]any{"uri": "h://hfile.txt", "content": "held by the agent\n"})
				if isErr || !strings.Contains(out, "held") {
					t.Errorf("write under a review rule: %q (error %v)", out, isErr)
				}
				if b, _ := os.ReadFile(e.b("h", "hfile.txt")); string(b) != "held original\n" {
					t.Errorf("a held write changed the backing file: %q", b)
				}
				if got, _ := tool("read", map[string]any{"uri": "h://hfile.txt"}); got != "held by the agent\n" {
					t.Errorf("the agent reads back %q", got)
				}
				if got, err := run(t, uid, `cat "$F"`, "F="+e.m("h", "hfile.txt")); err != nil || got != "held by the agent\n" {
					t.Errorf("the mount shows the agent %q %v", got, err)
				}
				items := reviewJSON(t, 0, e, "list")
				found := false
				for _, it := range items {
					found = found || (it.URI == "h://hfile.txt" && it.Principal == "agent")
				}
				if !found {
					t.Errorf("review list does not show the held write: %+v", items)
				}
				// Held or not, a name is made only where the mount would let
				// this uid make it: not in a folder only root may write.
				if out, err := run(t, uid, `echo x > "$F"`, "F="+e.m("h", "closed", "onmount.txt")); err == nil {
					t.Errorf("the mount let uid %d make a file in a 0755 folder of root's: %s", uid, out)
				}
				if out, isErr := tool("write", map[string]any{"uri": "h://closed/new.txt", "content": "x"}); !isErr || !strings.Contains(out, "permission denied") {
					t.Errorf("held write in a folder only root may write: %q (error %v)", out, isErr)
				}
				// ... and where it would: a new file in a folder anyone may
				// write, and again over its own held copy.
				for _, c := range []string{"new held\n", "new held, again\n"} {
					if out, isErr := tool("write", map[string]any{"uri": "h://newheld.txt", "content": c}); isErr || !strings.Contains(out, "held") {
						t.Errorf("held write of a new file: %q (error %v)", out, isErr)
					}
				}
				if got, err := run(t, uid, `cat "$F"`, "F="+e.m("h", "newheld.txt")); err != nil || got != "new held, again\n" {
					t.Errorf("the mount shows the agent's new held file as %q %v", got, err)
				}
				if _, err := os.Stat(e.b("h", "newheld.txt")); err == nil {
					t.Error("a held write of a new file made it on disk")
				}
				for _, it := range reviewJSON(t, 0, e, "list") {
					if strings.HasPrefix(it.URI, "h://closed/") {
						t.Errorf("a held change the mount would have refused: %+v", it)
					}
				}
				if strings.Contains(answers.String(), mcpCanary) {
					t.Errorf("an answer to uid %d holds the canary:\n%s", uid, answers.String())
				}
			}
			// history: the journal's records of the file written.
			// The same records as .neuralis/history on the mount.
			for _, hu := range []string{"d://" + name} {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "history", Arguments: map[string]any{"uri": hu}})
				cancel()
				if err != nil || res.IsError {
					t.Fatalf("history %s: %v %v", hu, err, res)
				}
				answers.WriteString(res.Content[0].(*mcp.TextContent).Text)
				var out struct{ Records []struct{ ID, URI string } }
				b, _ := json.Marshal(res.StructuredContent)
				json.Unmarshal(b, &out)
				var got []string
				for _, r := range out.Records {
					got = append(got, r.ID+" "+r.URI)
				}
				text, err := run(t, uid, `cat "$F"`, "F="+filepath.Join(e.mnt, ".neuralis", "history", "d", strings.TrimPrefix(hu, "d://")))
				if err != nil {
					t.Fatalf(".neuralis/history for %s as uid %d: %v %s", hu, uid, err, text)
				}
				var want []string
				for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
					if f := strings.Split(l, "\t"); len(f) > 4 {
						want = append(want, f[0]+" "+strings.Fields(f[4])[0])
					}
				}
				if strings.Join(got, "\n") != strings.Join(want, "\n") || len(got) != 2 {
					t.Errorf("history %s as uid %d:\n%s\nthe mount:\n%s", hu, uid, strings.Join(got, "\n"), text)
				}
			}
			// Bad input is a tool error of one sentence.
			for _, args := range []map[string]any{{"uri": "nonsense"}, {"uri": "d://pub.txt", "from": 3, "to": 1}, {"uri": "nosuchsource://x"},
				{"uri": "d://../../../../etc/passwd"}, {"uri": "d://sub/../../../etc/passwd"}, {"uri": "d:///etc/passwd"}, {"uri": "d://pub.txt", "offset": -1}} {
				if out, isErr := tool("read", args); !isErr || strings.Count(strings.TrimSpace(out), "\n") > 0 || strings.Contains(out, "root:") {
					t.Errorf("read %v: %q (error %v)", args, out, isErr)
				}
			}
			if out, isErr := tool("list", map[string]any{"uri": "d://", "depth": 99}); !isErr {
				t.Errorf("list with depth 99: %q", out)
			}
			// A hidden folder and a free name get the same answers.
			for _, name := range []string{"list", "status"} {
				hid, e1 := tool(name, map[string]any{"uri": "d://secretdir"})
				free, e2 := tool(name, map[string]any{"uri": "d://secretfreedir"})
				if uid != 0 && (!e1 || !e2 || strings.ReplaceAll(hid, "secretdir", "X") != strings.ReplaceAll(free, "secretfreedir", "X")) {
					t.Errorf("%s of a hidden folder: %q, of a free name: %q", name, hid, free)
				}
			}
		})
	}

	// The audit log has the agent's calls with its principal: the reads
	// it was refused (no outcome, the deciding rule), those it made, the
	// held write.
	want := map[string]bool{"mcp-read d://secret.txt ": false, "mcp-read d://pub.txt read": false,
		"mcp-list d:// list": false, "mcp-status g:// status": false, "mcp-write h://hfile.txt held": false, "mcp-write ro://r.txt ": false}
	eventually(t, 5*time.Second, "audit lines of the agent's mcp calls", func() bool {
		b, _ := os.ReadFile(filepath.Join(e.state, "audit.log"))
		for _, l := range strings.Split(string(b), "\n") {
			var r struct{ Principal, Op, URI, Outcome, Rule string }
			if json.Unmarshal([]byte(l), &r) == nil && r.Principal == "agent" {
				k := r.Op + " " + r.URI + " " + r.Outcome
				if _, ok := want[k]; ok && (r.Outcome != "" || r.Rule != "") {
					want[k] = true
				}
			}
		}
		for _, ok := range want {
			if !ok {
				return false
			}
		}
		return true
	})

	// A malformed line gets a JSON-RPC error and the session goes on; a
	// malformed control request gets an error; the daemon serves on.
	raw := exec.Command(binPath, "mcp", "-c", e.cfg)
	raw.Dir = "/"
	raw.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	in, err := raw.StdinPipe()
	must(t, err)
	stdout, err := raw.StdoutPipe()
	must(t, err)
	must(t, raw.Start())
	defer raw.Wait()
	rd := bufio.NewReader(stdout)
	answer := func(line string) map[string]any {
		t.Helper()
		fmt.Fprintln(in, line)
		l, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("no answer to %s: %v", line, err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("answer to %s: %v: %s", line, err, l)
		}
		return m
	}
	for _, bad := range []string{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":`, `[1,2]`, `{"id":7}`, `"x"`} {
		if m := answer(bad); m["error"] == nil {
			t.Errorf("malformed %s: %v", bad, m)
		}
	}
	m := answer(`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m["result"] == nil {
		t.Errorf("initialize after malformed lines: %v", m)
	}
	in.Close()
	c, err := net.Dial("unix", filepath.Join(e.state, "control.sock"))
	must(t, err)
	fmt.Fprint(c, `{"op":"mcp-read","uri":`+"\x00\n")
	resp, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if !strings.Contains(resp, "bad request") {
		t.Errorf("malformed control request: %q", resp)
	}
	if out, err := run(t, 1001, binPath+" search mcpword -c "+e.cfg); err != nil || !strings.Contains(out, "d://pub.txt") {
		t.Errorf("the daemon after malformed requests: %v %s", err, out)
	}
	if b, err := os.ReadFile(e.m("d", "pub.txt")); err != nil || !strings.HasPrefix(string(b), "alpha") {
		t.Errorf("the mount after malformed requests: %q %v", b, err)
	}
}

// The MCP tools never follow a symbolic link, whoever made it and
// wherever it points (a hidden file, a folder, outside the source, the
// backing folder's own path), for read, list and write, direct or held:
// each says the name is a link, and nothing is read or written through
// it. (The mount's callers follow links in their own kernel, where each
// step is decided for them.)
func TestMCPDoesNotFollowSymlinks(t *testing.T) {
	requireFUSE(t)
	e := newEnv(t, mcpTOML, src{slug: "d"}, src{slug: "h"})
	writeFile(t, e.b("d", "secret.txt"), mcpCanary+"\n", 0o666)
	writeFile(t, e.b("d", "secretdir", "in.txt"), mcpCanary+"\n", 0o666)
	writeFile(t, e.b("d", "pub.txt"), "public\n", 0o666)
	outside := filepath.Join(sharedTempDir(t), "outside")
	writeFile(t, filepath.Join(outside, "o.txt"), "outside\n", 0o666)
	for _, dir := range []string{e.b("d"), e.b("h"), outside} {
		must(t, os.Chmod(dir, 0o777))
	}
	links := map[string]string{
		"l-secret": "secret.txt", "l-dir": "secretdir", "l-pub": "pub.txt",
		"l-out": outside, "l-outfile": filepath.Join(outside, "o.txt"), "l-backing": e.b("d", "secret.txt"), "l-new": filepath.Join(outside, "new.txt"),
	}
	var script strings.Builder
	for name, target := range links {
		fmt.Fprintf(&script, "ln -s %q %q/%s && ln -s %q %q/%s\n", target, e.m("d"), name, target, e.m("h"), name)
	}
	if out, err := run(t, 1001, "set -e\n"+script.String()); err != nil {
		t.Fatalf("the agent's symlinks: %v\n%s", err, out)
	}
	if l := sh(t, binPath+" review list -c "+e.cfg); !strings.Contains(l, "h://l-secret") {
		t.Fatalf("the agent's links in h:// are not held:\n%s", l)
	}
	cs := mcpSession(t, e, 1001)
	for _, slug := range []string{"d", "h"} {
		for name := range links {
			u := slug + "://" + name
			for _, c := range []struct {
				tool string
				args map[string]any
				link bool // the uri is the link itself: the answer says so
			}{
				{"read", map[string]any{"uri": u}, true},
				{"list", map[string]any{"uri": u}, true},
				{"write", map[string]any{"uri": u, "content": "PWNED\n"}, true},
				{"read", map[string]any{"uri": u + "/in.txt"}, false},
				{"write", map[string]any{"uri": u + "/x.txt", "content": "PWNED\n"}, false},
			} {
				got, isErr := callTool(t, cs, c.tool, c.args)
				if !isErr || strings.Contains(got, mcpCanary) || strings.Contains(got, "outside") {
					t.Errorf("%s %v: %q (error %v)", c.tool, c.args, got, isErr)
				}
				if c.link && !strings.Contains(got, "is a symbolic link") {
					t.Errorf("%s %s does not say it is a link: %q", c.tool, u, got)
				}
			}
		}
	}
	for path, want := range map[string]string{e.b("d", "secret.txt"): mcpCanary + "\n", e.b("d", "pub.txt"): "public\n", filepath.Join(outside, "o.txt"): "outside\n"} {
		if b, err := os.ReadFile(path); err != nil || string(b) != want {
			t.Errorf("%s after the tools: %q, %v", path, b, err)
		}
	}
	for _, p := range []string{filepath.Join(outside, "new.txt"), filepath.Join(outside, "x.txt"), e.b("d", "secretdir", "x.txt")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("a write through a link made %s", p)
		}
	}
}

// In a source where the agent's writes are held, list shows its merged
// view, but a folder its file permissions do not let it list stays
// closed, as on the mount: before, the daemon listed the merged folder as
// root and named what was in a root-only folder.
func TestMCPListOfAHeldSourceKeepsFilePermissions(t *testing.T) {
	requireFUSE(t)
	e := newEnv(t, mcpTOML, src{slug: "h"})
	writeFile(t, e.b("h", "closed", "hiddenname-"+mcpCanary+".txt"), "x\n", 0o600)
	writeFile(t, e.b("h", "open", "o.txt"), "o\n", 0o666)
	must(t, os.Chmod(e.b("h", "closed"), 0o700))
	must(t, os.Chmod(e.b("h", "open"), 0o777))
	must(t, os.Chmod(e.b("h"), 0o777))
	if out, err := run(t, 1001, "set -e; echo mine > "+e.m("h", "open", "new.txt")+"; ls "+e.m("h", "closed")+" 2>&1 || true"); err != nil || !strings.Contains(out, "Permission denied") {
		t.Fatalf("the agent's held write, and ls of the closed folder on the mount: %v\n%s", err, out)
	}
	cs := mcpSession(t, e, 1001)
	for _, u := range []string{"h://closed", "h://"} {
		got, _ := callTool(t, cs, "list", map[string]any{"uri": u, "depth": 3})
		if strings.Contains(got, mcpCanary) {
			t.Errorf("list %s names what is in a folder the agent may not list:\n%s", u, got)
		}
	}
	got := strings.Join(mcpList(t, cs, "h://open"), "\n")
	if !strings.Contains(got, "new.txt") || !strings.Contains(got, "o.txt") {
		t.Errorf("list of the open folder lacks the agent's held file or the backing one:\n%s", got)
	}
	if got, isErr := callTool(t, cs, "list", map[string]any{"uri": "h://closed"}); !isErr || !strings.Contains(got, "permission denied") {
		t.Errorf("list of the closed folder: %q (error %v); want permission denied", got, isErr)
	}
}

// An MCP write held for review is checked by what it adds, as a write
// through the mount is: before, only "does the agent hold the bound
// already?" was asked, and one call could pass max_bytes by its
// content's length. A refused write holds nothing; one that keeps within
// the bound, or makes a held file shorter, passes.
func TestMCPHeldWriteStaysWithinMaxBytes(t *testing.T) {
	e, v := heldEdgeEnvWith(t, "\n[review]\nmax_bytes = 100000\n", `echo seed > seed.txt; chmod -R a+rwX .`)
	cs := mcpSession(t, e, 1001)
	write := func(uri string, n int, ok bool) {
		t.Helper()
		out, isErr := callTool(t, cs, "write", map[string]any{"uri": uri, "content": strings.Repeat("x", n)})
		if ok && isErr {
			t.Errorf("an MCP write of %d bytes to %s: %s", n, uri, out)
		}
		if !ok && (!isErr || !strings.Contains(out, "review bound")) {
			t.Errorf("an MCP write of %d bytes to %s past a bound of 100000: %q (error %v)", n, uri, out, isErr)
		}
	}
	// One call writes at most 61440 bytes (mcp.go), which is how far
	// past the bound it could go.
	write("d://big.txt", 60000, true)
	write("d://seed.txt", 50000, false) // 60000 + 50000
	write("d://big.txt", 30000, true)   // shorter
	write("d://seed.txt", 60000, true)  // 30000 + 60000
	write("d://third.txt", 20000, false)
	if out, err := run(t, 1001, `cd "$V"; ls; wc -c < big.txt; wc -c < seed.txt`, "V="+v); err != nil || out != "big.txt\nseed.txt\n30000\n60000\n" {
		t.Errorf("the held files: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(e.b("d", "seed.txt")); err != nil || string(b) != "seed\n" {
		t.Errorf("the backing seed.txt: %q %v", b, err)
	}
	eventually(t, 5*time.Second, "a quota line for d://big.txt in the audit log", func() bool {
		b, _ := os.ReadFile(filepath.Join(e.state, "audit.log"))
		return strings.Contains(string(b), `"outcome":"quota"`) && strings.Contains(string(b), "d://big.txt")
	})
}

// An MCP list gives a folder the size the mount shows its caller: a
// fixed 4096 where the policy hides names, not the backing folder's
// size, which grows with every name in it, hidden ones too (a red-team
// pass: 300 hidden files made a listed folder 28672 bytes, where stat on
// the mount said 4096).
func TestMCPListShowsFolderSizesAsTheMount(t *testing.T) {
	requireFUSE(t)
	e := newEnv(t, mcpTOML+"\n[[rule]]\nuri = \"*://**/*.secret\"\nwho = [\"role:agent\"]\ndeny = [\"read\"]\n", src{slug: "d"}, src{slug: "h"})
	for i := range 300 {
		writeFile(t, e.b("d", "pub", "big", fmt.Sprintf("hidden-name-%03d.secret", i)), "x\n", 0o644)
	}
	writeFile(t, e.b("d", "pub", "big", "seen.txt"), "x\n", 0o644)
	sh(t, `chmod -R a+rX "$D"`, "D="+e.b("d"))
	st, err := os.Stat(e.b("d", "pub", "big"))
	must(t, err)
	if st.Size() == 4096 {
		t.Fatalf("the backing folder is %d bytes: the test needs a larger one", st.Size())
	}
	out, err := run(t, 1001, `stat -c %s "$F"`, "F="+e.m("d", "pub", "big"))
	if err != nil || strings.TrimSpace(out) != "4096" {
		t.Fatalf("stat on the mount as the agent: %v %q", err, out)
	}
	cs := mcpSession(t, e, 1001)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list", Arguments: map[string]any{"uri": "d://pub"}})
	if err != nil || res.IsError {
		t.Fatalf("list d://pub: %v %v", err, res)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(b), `{"size":4096,"type":"folder","uri":"d://pub/big"}`) {
		t.Errorf("list d://pub as the agent: %s; want d://pub/big of size 4096, as stat on the mount", b)
	}
}
