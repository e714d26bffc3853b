package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/neuralis/neuralisfs/internal/collect"
)

const collectTOML = `
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
uri = "d://secret/**"
who = ["role:agent"]
deny = ["read"]
`

// collectTree is the small tree of TestCollect: path → content.
var collectTree = map[string]string{
	"README.md":      "hello readme\n",
	"docs/guide.md":  "guide\n",
	"go.mod":         "module x\n",
	"app.toml":       "a = 1\n",
	"main.go":        "package main\n",
	"LICENSE":        "MIT\n",
	"main_test.go":   "package main\n// t\n",
	"big.go":         strings.Repeat("x", 200),
	"bin.dat":        "a\x00b",
	"latin1.txt":     "caf\xe9",
	".env":           "TOKEN=1\n",
	"id_rsa":         "key\n",
	"cert.pem":       "cert\n",
	"secret/plan.md": "hidden\n",
	"secret/.env":    "HIDDEN=1\n",
}

// collectCLI runs neuralisfs collect as uid (0: root) and returns stdout,
// stderr and the error.
func collectCLI(t *testing.T, uid int, e *env, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"collect", "-c", e.cfg}, args...)...)
	cmd.Dir = "/"
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func collectJSON(t *testing.T, e *env, args ...string) collect.Collection {
	t.Helper()
	out, stderr, err := collectCLI(t, 0, e, append(args, "--json")...)
	if err != nil {
		t.Fatalf("collect %v: %v\n%s", args, err, stderr)
	}
	var c collect.Collection
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("collect %v --json: %v\n%s", args, err, out)
	}
	return c
}

// expectedDigest is the collection digest by its definition: sha256 over
// uri NUL sha256:hex(content) LF, in order.
func expectedDigest(paths []string) string {
	h := sha256.New()
	for _, p := range paths {
		s := sha256.Sum256([]byte(collectTree[p]))
		fmt.Fprintf(h, "d://%s\x00sha256:%s\n", p, hex.EncodeToString(s[:]))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func TestCollect(t *testing.T) {
	e := newEnv(t, collectTOML, src{slug: "d"})
	for p, c := range collectTree {
		writeFile(t, e.b("d", p), c, 0o644)
	}
	ranked := []string{"README.md", "docs/guide.md", "go.mod", "app.toml", "main.go", "LICENSE", "main_test.go"}
	classes := []string{"readme", "docs", "manifest", "config", "source", "other", "test"}
	reasons := map[string]string{
		"d://.env":       "secret-prone name",
		"d://big.go":     "larger than 100 bytes",
		"d://bin.dat":    "binary content",
		"d://cert.pem":   "secret-prone name",
		"d://id_rsa":     "secret-prone name",
		"d://latin1.txt": "not valid UTF-8 text",
	}
	check := func(name string, c collect.Collection, n int, cut string) {
		t.Helper()
		if c.Principal != "agent" {
			t.Errorf("%s: principal %q", name, c.Principal)
		}
		var got []string
		for i, f := range c.Files {
			got = append(got, strings.TrimPrefix(f.URI, "d://"))
			if i < len(classes) && (f.Class != classes[i] || f.Size != int64(len(collectTree[ranked[i]]))) {
				t.Errorf("%s: file %d = %+v; want class %s size %d", name, i, f, classes[i], len(collectTree[ranked[i]]))
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(ranked[:n]) {
			t.Errorf("%s: files %v; want %v", name, got, ranked[:n])
		}
		if want := expectedDigest(ranked[:n]); c.Digest != want {
			t.Errorf("%s: digest %s; want %s", name, c.Digest, want)
		}
		want := map[string]string{}
		for u, r := range reasons {
			want[u] = r
		}
		for _, p := range ranked[n:] {
			want["d://"+p] = "budget reached"
		}
		gotEx := map[string]string{}
		for _, x := range c.Excluded {
			gotEx[x.URI] = x.Reason
			if strings.Contains(x.URI, "secret") {
				t.Errorf("%s: a hidden file is listed as excluded: %+v", name, x)
			}
		}
		if fmt.Sprint(gotEx) != fmt.Sprint(want) {
			t.Errorf("%s: excluded\n %v\nwant\n %v", name, gotEx, want)
		}
		if cut == "" {
			if !c.Complete || len(c.Incomplete) != 0 {
				t.Errorf("%s: not complete: %+v", name, c.Incomplete)
			}
		} else if c.Complete || len(c.Incomplete) != 1 || c.Incomplete[0].Source != "d" || !strings.Contains(c.Incomplete[0].Reason, cut) {
			t.Errorf("%s: incomplete = %+v; want d cut by %q", name, c.Incomplete, cut)
		}
	}
	check("unbounded", collectJSON(t, e, "--as", "agent", "--max-file-bytes", "100"), 7, "")
	// 13+6+9+6 = 34 bytes fit in 40; main.go (13) would make 47.
	check("max-bytes 40", collectJSON(t, e, "--as", "agent", "--max-file-bytes", "100", "--max-bytes", "40"), 4, "max bytes (40) reached: 3 admitted files left out")
	check("max-files 3", collectJSON(t, e, "--as", "agent", "--max-file-bytes", "100", "--max-files", "3"), 3, "max files (3) reached: 4 admitted files left out")

	// The framed output reads back into the same files, byte for byte.
	out, stderr, err := collectCLI(t, 0, e, "--as", "agent", "--max-file-bytes", "100", "--framed")
	if err != nil {
		t.Fatalf("collect --framed: %v\n%s", err, stderr)
	}
	files, digest, err := collect.Parse(strings.NewReader(out))
	if err != nil {
		t.Fatalf("reading back the framed collection: %v\n%s", err, out)
	}
	if digest != expectedDigest(ranked) || len(files) != len(ranked) {
		t.Fatalf("framed: %d files, digest %s", len(files), digest)
	}
	for i, f := range files {
		if f.URI != "d://"+ranked[i] || string(f.Content) != collectTree[ranked[i]] {
			t.Errorf("framed file %d = %q %q; want d://%s %q", i, f.URI, f.Content, ranked[i], collectTree[ranked[i]])
		}
	}

	// .neuralis/collection read by the agent equals collect --as agent --json,
	// and so does the agent's own collect --json.
	want, stderr, err := collectCLI(t, 0, e, "--as", "agent", "--json")
	if err != nil {
		t.Fatalf("collect --as agent --json: %v\n%s", err, stderr)
	}
	got, err := run(t, 1001, "cat "+filepath.Join(e.mnt, ".neuralis", "collection"))
	if err != nil || got != want {
		t.Errorf(".neuralis/collection as the agent: %v\n%s\nwant (collect --as agent --json)\n%s", err, got, want)
	}
	if own, stderr, err := collectCLI(t, 1001, e, "--json"); err != nil || own != want {
		t.Errorf("collect --json as the agent: %v %s\n%s\nwant\n%s", err, stderr, own, want)
	}
	if !strings.Contains(want, `"uri": "d://main.go"`) || strings.Contains(want, "d://secret") || strings.Contains(want, `"content":`) {
		t.Errorf("the agent's collection JSON lists the wrong things:\n%s", want)
	}

	// A uid no principal names (other, denied everything) sees no source: an empty
	// collection, with empty lists, never null.
	if out, stderr, err := collectCLI(t, 1003, e, "--json"); err != nil || strings.Contains(out, "null") ||
		strings.Contains(out, "d://") || !strings.Contains(out, `"files": []`) || !strings.Contains(out, `"principal": "other"`) || !strings.Contains(out, `"sources": []`) {
		t.Errorf("collect --json as uid 1003: %v %s\n%s", err, stderr, out)
	}

	// Refusals: one sentence each.
	for _, tt := range []struct {
		uid  int
		args []string
		want string
	}{
		{1002, []string{"--as", "agent"}, "only root or the daemon's own uid"},
		{1001, []string{"--as", "owner"}, "only root or the daemon's own uid"},
		{0, []string{"--as", "nobody"}, `unknown principal "nobody"`},
		{0, []string{"--source", "nope"}, `unknown source "nope"`},
	} {
		_, stderr, err := collectCLI(t, tt.uid, e, tt.args...)
		if err == nil || !strings.Contains(stderr, tt.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("collect %v as uid %d: %v, stderr %q; want one line with %q", tt.args, tt.uid, err, stderr, tt.want)
		}
	}
}

// TestCollectCompletionAndMan: the command table generates collect's
// completion and its man page entry.
func TestCollectCompletionAndMan(t *testing.T) {
	src := "source <(" + binPath + " completion bash)"
	if got := completeBash(t, src, "neuralisfs", "col"); !containsWord(got, "collect") {
		t.Errorf("completing col: %q", got)
	}
	got := completeBash(t, src, "neuralisfs", "collect", "--")
	for _, w := range []string{"--as", "--source", "--max-file-bytes", "--max-bytes", "--max-files", "--json", "--framed"} {
		if !containsWord(got, w) {
			t.Errorf("completing collect --: %q lacks %q", got, w)
		}
	}
	page, err := exec.Command(binPath, "man").Output()
	must(t, err)
	text := strings.NewReplacer(`\-`, "-", `\fB`, "", `\fI`, "", `\fR`, "").Replace(string(page))
	for _, w := range []string{"neuralisfs collect", "--framed", "--max-file-bytes"} {
		if !strings.Contains(text, w) {
			t.Errorf("the man page lacks %q", w)
		}
	}
}
