package mounts

import (
	"strings"
	"testing"

	"github.com/neuralis/neuralisfs/policy"
)

func TestConfigLayer(t *testing.T) {
	cfg, err := Parse("/etc/n.toml", []byte(`
[[source]]
slug = "support"
kind = "local"
path = "/srv/support"

[[layer]]
slug = "docs"
source = "support"
include = ["docs/**", "guides", "**/*.md"]
exclude = ["docs/drafts/**"]

[[rule]]
uri = "docs://docs/private/**"
who = ["*"]
deny = ["read"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Sources) != 2 {
		t.Fatalf("sources %+v; want the source and its layer", cfg.Sources)
	}
	l := cfg.Sources[1]
	if l.Slug != "docs" || l.Layer != "support" || l.Path != "/srv/support" || l.Kind != KindLocal || l.Line != 7 {
		t.Errorf("layer source %+v", l)
	}
	set, err := policy.New(cfg.PolicyConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path         string
		member, file bool
	}{
		{"", true, true},
		{"docs", true, true},
		{"docs/a.txt", true, true},
		{"docs/x/y/z", true, true},
		{"docs/drafts", false, false},
		{"docs/drafts/d.md", false, false},
		{"guides", true, true},
		{"guides/deep/g.txt", true, true}, // below an included path
		{"src", true, false},              // a folder on the way to **/*.md, not a file
		{"src/main.go", true, false},      // could be a folder holding a .md
		{"src/notes.md", true, true},
		{"README.md", true, true},
		{"docsish", true, false}, // **/*.md could match below it
		{"docsish/x.txt", true, false},
	} {
		if got := set.LayerMember("docs", tt.path); got != tt.member {
			t.Errorf("LayerMember(docs, %q) = %v; want %v", tt.path, got, tt.member)
		}
		if got := set.LayerFile("docs", tt.path); got != tt.file {
			t.Errorf("LayerFile(docs, %q) = %v; want %v", tt.path, got, tt.file)
		}
		if !set.LayerMember("support", tt.path) {
			t.Errorf("the source itself does not show %q", tt.path)
		}
	}
	owner, _ := set.PrincipalByName("owner")
	if d := set.Decide(owner, "docs", "docs/drafts/d.md", policy.Write); d.Allowed || d.Reason != policy.ReasonOutsideLayer {
		t.Errorf("write outside the layer: %+v", d)
	}
	if set.Trivial() {
		t.Error("a policy with a layer is trivial: the mount would skip the layer's gate")
	}
}

func TestConfigLayerErrors(t *testing.T) {
	head := "[[source]]\nslug = \"support\"\nkind = \"local\"\npath = \"/srv/s\"\n\n[[source]]\nslug = \"pinned\"\nkind = \"git-pinned\"\npath = \"/srv/p\"\nrev = \"main\"\n\n"
	for _, tt := range []struct{ body, want string }{
		{"[[layer]]\nslug = \"docs\"\nsource = \"nope\"\ninclude = [\"a\"]\n", `/c.toml:14: layer[0].source: "nope" names no configured source`},
		{"[[layer]]\nslug = \"pinned\"\nsource = \"support\"\ninclude = [\"a\"]\n", `/c.toml:13: layer[0].slug: "pinned" is already used by the source at line 6`},
		{"[[layer]]\nslug = \"docs\"\nsource = \"support\"\ninclude = [\"a/[\"]\n", `/c.toml:15: layer[0].include: "a/[" is not a valid glob`},
		{"[[layer]]\nslug = \"docs\"\nsource = \"support\"\ninclude = [\"a\"]\nexclude = [\"/abs\"]\n", `/c.toml:16: layer[0].exclude: "/abs" is not a valid glob`},
		{"[[layer]]\nslug = \"docs\"\nsource = \"support\"\n", `/c.toml:12: layer[0].include: missing`},
		{"[[layer]]\nslug = \"docs\"\nsource = \"pinned\"\ninclude = [\"a\"]\n", `/c.toml:14: layer[0].source: "pinned" is a git-pinned source`},
		{"[[layer]]\nslug = \"docs\"\nsource = \"support\"\ninclude = [\"a\"]\n[[layer]]\nslug = \"d2\"\nsource = \"docs\"\ninclude = [\"a\"]\n", `/c.toml:18: layer[1].source: "docs" is a layer (line 12)`},
		{"[[layer]]\nslug = \"docs\"\nsource = \"support\"\ninclude = [\"a\"]\n[[layer]]\nslug = \"docs\"\nsource = \"support\"\ninclude = [\"b\"]\n", `/c.toml:17: layer[1].slug: "docs" is already used by the layer at line 12`},
		{"[[layer]]\nslug = \"docs\"\nsource = \"support\"\ninclude = [\"a\"]\nbogus = 1\n", `/c.toml:16: layer.bogus: unknown key`},
	} {
		_, err := Parse("/c.toml", []byte(head+tt.body))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v; want %q", tt.body, err, tt.want)
		}
	}
}
