package tests

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Layers ([[layer]]): part of a source under a slug of its own. The
// kernel caches names and attributes for a minute here, so what one slug
// shows after a change through the other is what the daemon invalidated.

const layerCaching = `
[mount]
entry_timeout = "60s"
attr_timeout = "60s"
watched_timeout = "60s"
`

const docsLayer = `
[[layer]]
slug = "docs"
source = "support"
include = ["docs/**"]
exclude = ["docs/drafts/**"]
`

// layerTree fills a support folder: docs (in the layer, but for drafts)
// and what lies outside it.
func layerTree(t *testing.T) string {
	dir := sharedTempDir(t)
	os.Chmod(dir, 0o777)
	for p, c := range map[string]string{
		"docs/a.md":          "alpha layered document\n",
		"docs/sub/b.md":      "beta\n",
		"docs/drafts/d.md":   "draft\n",
		"docs/private/p.md":  "private\n",
		"src/main.go":        "package main\n",
		"README.md":          "readme\n",
		"docsish/not-in.txt": "no\n",
	} {
		writeFile(t, filepath.Join(dir, p), c, 0o666)
	}
	for _, d := range []string{"docs", "docs/sub", "docs/drafts", "docs/private", "src", "docsish"} {
		os.Chmod(filepath.Join(dir, d), 0o777)
	}
	return dir
}

func catOf(t *testing.T, uid int, p string) string {
	t.Helper()
	out, _ := run(t, uid, fmt.Sprintf("cat %q 2>&1", p))
	return out
}

func TestLayerChangesAreSeenThroughEverySlug(t *testing.T) {
	e := newEnv(t, layerCaching+docsLayer, src{slug: "support", path: layerTree(t)})
	viaSrc, viaLayer := e.m("support", "docs", "a.md"), e.m("docs", "docs", "a.md")
	newSrc, newLayer := e.m("support", "docs", "new.md"), e.m("docs", "docs", "new.md")
	warm := func() {
		t.Helper()
		// Names, attributes, pages and listings, on both sides; and the
		// absence of new.md on both sides.
		sh(t, fmt.Sprintf("cat %q %q >/dev/null; stat %q %q >/dev/null; ls -l %q %q >/dev/null; stat %q %q 2>/dev/null || true",
			viaSrc, viaLayer, viaSrc, viaLayer, e.m("support", "docs"), e.m("docs", "docs"), newSrc, newLayer))
	}
	for _, dir := range []struct{ name, from, to, newFrom, newTo string }{
		{"source to layer", viaSrc, viaLayer, newSrc, newLayer},
		{"layer to source", viaLayer, viaSrc, newLayer, newSrc},
	} {
		t.Run(dir.name, func(t *testing.T) {
			warm()
			body := "written " + dir.name
			sh(t, fmt.Sprintf("printf %%s %q > %q", body, dir.from))
			last := ""
			eventually(t, 10*time.Second, dir.to+" shows the write", func() bool {
				last = catOf(t, 0, dir.to)
				if last != body {
					t.Logf("%s: %q", dir.to, last)
				}
				return last == body
			})
			if got, _ := os.ReadFile(e.b("support", "docs", "a.md")); string(got) != body {
				t.Errorf("the backing file holds %q, want %q", got, body)
			}
			sh(t, fmt.Sprintf("printf new > %q", dir.newFrom))
			eventually(t, 10*time.Second, dir.newTo+" appears", func() bool { return catOf(t, 0, dir.newTo) == "new" })
			eventually(t, 10*time.Second, "the listing shows new.md", func() bool {
				out, _ := run(t, 0, "ls "+filepath.Dir(dir.newTo))
				return strings.Contains(out, "new.md")
			})
			sh(t, "rm "+dir.newFrom)
			eventually(t, 10*time.Second, dir.newTo+" is gone", func() bool {
				_, err := os.Lstat(dir.newTo)
				return os.IsNotExist(err)
			})
		})
	}
	// Renamed through the layer: the old name goes and the new one comes
	// in the source.
	warm()
	sh(t, fmt.Sprintf("mv %q %q", viaLayer, e.m("docs", "docs", "moved.md")))
	eventually(t, 10*time.Second, "the rename is seen through the source", func() bool {
		_, errOld := os.Lstat(viaSrc)
		_, errNew := os.Lstat(e.m("support", "docs", "moved.md"))
		return os.IsNotExist(errOld) && errNew == nil
	})
	// A change made on the backing folder is seen through both slugs.
	sh(t, fmt.Sprintf("cat %q %q >/dev/null", e.m("support", "docs", "sub", "b.md"), e.m("docs", "docs", "sub", "b.md")))
	writeFile(t, e.b("support", "docs", "sub", "b.md"), "changed on disk\n", 0o666)
	for _, p := range []string{e.m("support", "docs", "sub", "b.md"), e.m("docs", "docs", "sub", "b.md")} {
		eventually(t, 10*time.Second, p+" shows the change on disk", func() bool { return catOf(t, 0, p) == "changed on disk\n" })
	}
}

// layerMember is what the layer docsLayer shows of the source, by path
// relative to it ("" is the top).
func layerMember(rel string) bool {
	return rel == "" || rel == "docs" || (strings.HasPrefix(rel, "docs/") && rel != "docs/drafts" && !strings.HasPrefix(rel, "docs/drafts/"))
}

func TestLayerShowsOnlyWhatItIncludes(t *testing.T) {
	e := newEnv(t, layerCaching+docsLayer, src{slug: "support", path: layerTree(t)})
	// Differential: the layer's tree is the backing tree's included part.
	var want []string
	filepath.WalkDir(e.b("support"), func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(e.b("support"), p)
		if rel == "." {
			rel = ""
		}
		if layerMember(rel) {
			want = append(want, "./"+rel)
		}
		return nil
	})
	want[0] = "."
	slices.Sort(want)
	got := strings.Fields(sh(t, "cd "+e.m("docs")+" && find . | LC_ALL=C sort"))
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("find in the layer:\n%q\nwant (the backing folder's included part):\n%q", got, want)
	}
	// Outside the layer is absent, not refused; and nothing can be made
	// there through the layer.
	for _, p := range []string{"src", "src/main.go", "README.md", "docsish", "docs/drafts", "docs/drafts/d.md"} {
		out, err := run(t, 0, "stat "+e.m("docs", p)+" 2>&1")
		if err == nil || !strings.Contains(out, "No such file or directory") {
			t.Errorf("stat docs://%s: %v %s; want ENOENT", p, err, out)
		}
	}
	for _, p := range []string{"top.txt", "docs/drafts/new.md", "src/x.go"} {
		out, err := run(t, 0, "echo x > "+e.m("docs", p)+" 2>&1")
		if err == nil || !(strings.Contains(out, "Permission denied") || strings.Contains(out, "No such file")) {
			t.Errorf("create docs://%s: %v %s; want EACCES (or ENOENT where its folder is absent)", p, err, out)
		}
		if _, err := os.Lstat(e.b("support", p)); err == nil {
			t.Errorf("create docs://%s made %s on the backing folder", p, e.b("support", p))
		}
	}
	if out, err := run(t, 0, "echo x > "+e.m("docs", "top.txt")+" 2>&1"); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("create at the layer's top: %v %s; want EACCES", err, out)
	}
	if out, err := run(t, 0, "mv "+e.m("docs", "docs", "a.md")+" "+e.m("docs", "a.md")+" 2>&1"); err == nil {
		t.Errorf("a rename out of the layer's include succeeded: %s", out)
	}
	// The source still shows everything.
	if out := sh(t, "ls "+e.m("support")); !strings.Contains(out, "src") || !strings.Contains(out, "README.md") {
		t.Errorf("ls of the source: %s", out)
	}
	// Inode numbers of their own (one file, two nodes).
	var a, b os.FileInfo
	a, _ = os.Stat(e.m("support", "docs", "a.md"))
	b, _ = os.Stat(e.m("docs", "docs", "a.md"))
	if a == nil || b == nil || os.SameFile(a, b) {
		t.Errorf("the layer's file and the source's share one inode in the mount")
	}
}

const layerRules = `
[[principal]]
name = "agent"
uids = [1001]
roles = ["agent"]

[[rule]]
uri = "support://**"
who = ["role:agent"]
deny = ["read", "write"]

[[rule]]
uri = "docs://docs/private/**"
who = ["role:agent"]
deny = ["read"]
`

func TestLayerHasItsOwnRulesAndSearch(t *testing.T) {
	e := newEnv(t, docsLayer+layerRules, src{slug: "support", path: layerTree(t)})
	if got := catOf(t, 1001, e.m("docs", "docs", "a.md")); got != "alpha layered document\n" {
		t.Errorf("agent reads the layer: %q", got)
	}
	if got := catOf(t, 1001, e.m("support", "docs", "a.md")); !strings.Contains(got, "No such file") {
		t.Errorf("agent reads the source it may not see: %q", got)
	}
	if out, _ := run(t, 1001, "ls "+e.mnt); strings.Contains(out, "support") || !strings.Contains(out, "docs") {
		t.Errorf("agent's listing of the mount: %q", out)
	}
	if out, _ := run(t, 1001, "ls "+e.m("docs", "docs")); strings.Contains(out, "private") || !strings.Contains(out, "a.md") {
		t.Errorf("agent's listing of docs://docs: %q", out)
	}
	// Hidden names answer by rule: a create at a hidden name is EACCES,
	// and touches nothing.
	for _, p := range []string{"docs/private", "docs/private/p.md", "docs/private/new.md"} {
		// The folder's name is refused by rule; inside it, the hidden
		// folder itself is absent.
		out, err := run(t, 1001, "echo x > "+e.m("docs", p)+" 2>&1")
		if err == nil || !(strings.Contains(out, "Permission denied") || (p != "docs/private" && strings.Contains(out, "No such file"))) {
			t.Errorf("agent creates docs://%s: %v %s", p, err, out)
		}
	}
	if b, _ := os.ReadFile(e.b("support", "docs", "private", "p.md")); string(b) != "private\n" {
		t.Errorf("the hidden file changed: %q", b)
	}
	// The agent writes through the layer; the owner sees it in the source.
	if out, err := run(t, 1001, "echo from-agent > "+e.m("docs", "docs", "agent.md")+" 2>&1"); err != nil {
		t.Fatalf("agent writes in the layer: %v %s", err, out)
	}
	if got := catOf(t, 0, e.m("support", "docs", "agent.md")); got != "from-agent\n" {
		t.Errorf("the agent's write through the source: %q", got)
	}
	// Search: documents under both uris; the agent finds only the layer's.
	e.found(t, "alpha", "docs://docs/a.md")
	e.found(t, "alpha", "support://docs/a.md")
	out, _ := e.search(t, 1001, "alpha")
	if !strings.Contains(out, "docs://docs/a.md") || strings.Contains(out, "support://") {
		t.Errorf("agent's search: %s", out)
	}
	if out, _ := e.search(t, 0, "readme"); strings.Contains(out, "docs://") {
		t.Errorf("a file outside the layer is indexed under the layer: %s", out)
	}
	e.found(t, "agent", "docs://docs/agent.md")
	e.found(t, "agent", "support://docs/agent.md")
}

func TestLayerReloadAddsAndRemovesALayer(t *testing.T) {
	e := newEnv(t, layerCaching, src{slug: "support", path: layerTree(t)})
	cfg, err := os.ReadFile(e.cfg)
	must(t, err)
	base := string(cfg)
	if _, err := os.Lstat(e.m("docs")); !os.IsNotExist(err) {
		t.Fatalf("the layer is there before it is configured: %v", err)
	}
	e.rewrite(base + docsLayer)
	if out, err := e.reloadCLI(0); err != nil || !strings.Contains(out, "source docs added") {
		t.Fatalf("reload adding a layer: %v\n%s", err, out)
	}
	if got := catOf(t, 0, e.m("docs", "docs", "a.md")); got != "alpha layered document\n" {
		t.Errorf("the added layer: %q", got)
	}
	if _, err := os.Lstat(e.m("docs", "src")); !os.IsNotExist(err) {
		t.Errorf("the added layer shows what it does not include: %v", err)
	}
	e.rewrite(base)
	if out, err := e.reloadCLI(0); err != nil || !strings.Contains(out, "source docs removed") {
		t.Fatalf("reload removing a layer: %v\n%s", err, out)
	}
	if _, err := os.Lstat(e.m("docs", "docs", "a.md")); !os.IsNotExist(err) {
		t.Errorf("the removed layer is still served: %v", err)
	}
	if got := catOf(t, 0, e.m("support", "docs", "a.md")); got != "alpha layered document\n" {
		t.Errorf("the source after removing its layer: %q", got)
	}
}

func TestLayerConfigErrorsNameFileLineAndKey(t *testing.T) {
	dir := sharedTempDir(t)
	head := fmt.Sprintf("[[source]]\nslug = \"support\"\nkind = \"local\"\npath = %q\n\n", dir)
	for _, tc := range []struct{ body, want string }{
		{"[[layer]]\nslug = \"docs\"\nsource = \"nope\"\ninclude = [\"docs/**\"]\n", `:8: layer[0].source: "nope" names no configured source`},
		{"[[layer]]\nslug = \"support\"\nsource = \"support\"\ninclude = [\"docs/**\"]\n", `:7: layer[0].slug: "support" is already used by the source at line 1`},
		{"[[layer]]\nslug = \"docs\"\nsource = \"support\"\ninclude = [\"docs/[**\"]\n", `:9: layer[0].include: "docs/[**" is not a valid glob`},
		{"[[layer]]\nslug = \"docs\"\nsource = \"support\"\ninclude = [\"docs/**\"]\n\n[[layer]]\nslug = \"deeper\"\nsource = \"docs\"\ninclude = [\"docs/sub/**\"]\n", `:13: layer[1].source: "docs" is a layer (line 6)`},
	} {
		cfg := filepath.Join(dir, "config.toml")
		must(t, os.WriteFile(cfg, []byte(head+tc.body), 0o644))
		out, err := run(t, 0, binPath+" config validate -c "+cfg+" 2>&1")
		if err == nil || !strings.Contains(out, cfg+tc.want) {
			t.Errorf("config validate of\n%s\n= %v %s\nwant %s", tc.body, err, out, cfg+tc.want)
		}
	}
}
