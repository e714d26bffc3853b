package mounts

import (
	"strings"
	"testing"
)

func TestParseFeedKinds(t *testing.T) {
	valid := `state_dir = "/var/lib/n"
[[source]]
slug = "motd"
kind = "file"
path = "/etc/motd"
[[source]]
slug = "notes"
kind = "inline"
name = "notes.md"
text = """
# Notes
[[source]]
slug = "not a source: this is text"
password reset: ask the desk
"""
[[source]]
slug = "feeds"
kind = "http"
refresh = "1m"
timeout = "5s"
max_bytes = 1024
[[source.file]]
path = "status.json"
url = "https://status.example.com/api"
[[source.file]]
path = "sub/b.txt"
url = "http://example.com/b"
`
	c, err := Parse("c.toml", []byte(valid))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(c.Sources) != 3 {
		t.Fatalf("%d sources, want 3 (text inside \"\"\" must not start a source)", len(c.Sources))
	}
	if got := c.Sources[2].Line; got != 16 {
		t.Errorf("http source at line %d, want 16", got)
	}
	if got := c.Sources[2].Files[1].Line; got != 25 {
		t.Errorf("second [[source.file]] at line %d, want 25", got)
	}
	if got, want := c.Sources[1].Cache, "/var/lib/n/sources/notes"; got != want {
		t.Errorf("cache %q, want %q", got, want)
	}
	if c.Sources[2].RefreshOrDefault().String() != "1m0s" || c.Sources[2].MaxBytesOrDefault() != 1024 {
		t.Errorf("refresh/max_bytes not read: %v %d", c.Sources[2].RefreshOrDefault(), c.Sources[2].MaxBytesOrDefault())
	}
	if !c.PolicyConfig(0).Sources[0].ReadOnly {
		t.Errorf("a file source is not read-only")
	}

	head := "[[source]]\nslug = \"s\"\n"
	for _, tt := range []struct {
		name string
		text string
		want []string
	}{
		{"unknown kind", head + "kind = \"ftp\"\npath = \"/x\"\n", []string{`c.toml:3: source[0].kind: "ftp" is not a kind of source; one of local, git, git-pinned, repos, file, inline, http, mcp`}},
		{"mcp without url", head + "kind = \"mcp\"\n", []string{`c.toml:1: source[0].url: missing; an mcp source needs url = "http(s)://…/mcp"`}},
		{"mcp with a stdio url", head + "kind = \"mcp\"\nurl = \"stdio:///usr/bin/server\"\n", []string{`c.toml:4: source[0].url: "stdio:///usr/bin/server" is not an http:// or https:// URL`}},
		{"mcp url without host", head + "kind = \"mcp\"\nurl = \"http:///mcp\"\n", []string{`c.toml:4: source[0].url: "http:///mcp" is not an http:// or https:// URL`}},
		{"mcp with a path", head + "kind = \"mcp\"\nurl = \"http://x/mcp\"\npath = \"/x\"\n", []string{"c.toml:5: source[0].path: an mcp source has no path"}},
		{"mcp with files", head + "kind = \"mcp\"\nurl = \"http://x/mcp\"\n[[source.file]]\npath = \"a\"\nurl = \"http://x/a\"\n", []string{"only an http source takes [[source.file]]"}},
		{"url on an http source", head + "kind = \"http\"\nurl = \"http://x/mcp\"\n[[source.file]]\npath = \"a\"\nurl = \"http://x/a\"\n", []string{"c.toml:4: source[0].url: only an mcp source (an http source names a url in each [[source.file]]) takes url"}},
		{"ftp url", head + "kind = \"http\"\n[[source.file]]\npath = \"a\"\nurl = \"ftp://example.com/a\"\n", []string{`c.toml:6: source[0].file[0].url: "ftp://example.com/a" is not an http:// or https:// URL`}},
		{"file url", head + "kind = \"http\"\n[[source.file]]\npath = \"a\"\nurl = \"file:///etc/passwd\"\n", []string{`c.toml:6: source[0].file[0].url:`}},
		{"url in second source's second file", "[[source]]\nslug = \"a\"\nkind = \"http\"\n[[source.file]]\npath = \"a\"\nurl = \"http://x/a\"\n" +
			"[[source]]\nslug = \"b\"\nkind = \"http\"\n[[source.file]]\npath = \"a\"\nurl = \"http://x/a\"\n[[source.file]]\npath = \"b\"\nurl = \"gopher://x\"\n",
			[]string{`c.toml:15: source[1].file[1].url: "gopher://x" is not an http`}},
		{"http without files", head + "kind = \"http\"\n", []string{"source[0].file: missing"}},
		{"http with a path", head + "kind = \"http\"\npath = \"/x\"\n[[source.file]]\npath = \"a\"\nurl = \"http://x/a\"\n", []string{"c.toml:4: source[0].path: an http source has no path"}},
		{"bad file path", head + "kind = \"http\"\n[[source.file]]\npath = \"../etc\"\nurl = \"http://x/a\"\n", []string{`c.toml:5: source[0].file[0].path: "../etc" is not a clean relative path`}},
		{"duplicate and nested file paths", head + "kind = \"http\"\n[[source.file]]\npath = \"a\"\nurl = \"http://x/a\"\n[[source.file]]\npath = \"a\"\nurl = \"http://x/a\"\n[[source.file]]\npath = \"a/b\"\nurl = \"http://x/a\"\n",
			[]string{`c.toml:8: source[0].file[1].path: "a" is already the path of file[0] at line 4`, `c.toml:11: source[0].file[2].path: "a/b" lies inside "a"`}},
		{"unknown key in a file", head + "kind = \"http\"\n[[source.file]]\npath = \"a\"\nurl = \"http://x/a\"\ncolour = 1\n", []string{"c.toml:7: source.file.colour: unknown key"}},
		{"inline without name or text", head + "kind = \"inline\"\n", []string{"source[0].name: missing", "source[0].text: missing"}},
		{"inline name with a slash", head + "kind = \"inline\"\nname = \"a/b\"\ntext = \"x\"\n", []string{`c.toml:4: source[0].name: "a/b" is not a file name`}},
		{"inline with an AWS key", head + "kind = \"inline\"\nname = \"n.md\"\ntext = \"\"\"\nhello\nid AKIAIOSFODNN7EXAMPLE\n\"\"\"\n", []string{"c.toml:5: source[0].text: line 2 of the text holds what looks like an AWS access key id"}},
		{"inline with a private key", head + "kind = \"inline\"\nname = \"n.md\"\ntext = '''\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n'''\n", []string{"c.toml:5: source[0].text: line 1 of the text holds what looks like a private key block"}},
		{"inline with a password", head + "kind = \"inline\"\nname = \"n.md\"\ntext = \"db:\\n  password: hunter2\\n\"\n", []string{"c.toml:5: source[0].text: line 2 of the text holds what looks like a password assignment"}},
		{"text on a local source", head + "kind = \"local\"\npath = \"/x\"\ntext = \"hi\"\n", []string{"c.toml:5: source[0].text: only an inline source takes text"}},
		{"files on a local source", head + "kind = \"local\"\npath = \"/x\"\n[[source.file]]\npath = \"a\"\nurl = \"http://x/a\"\n", []string{"only an http source takes [[source.file]]"}},
		{"file source without path", head + "kind = \"file\"\n", []string{"source[0].path: missing"}},
		{"refresh too short", head + "kind = \"file\"\npath = \"/x\"\nrefresh = \"1ms\"\n", []string{"c.toml:5: source[0].refresh: 1ms is shorter than 100ms"}},
		{"timeout on a file source", head + "kind = \"file\"\npath = \"/x\"\ntimeout = \"1s\"\n", []string{"c.toml:5: source[0].timeout: only an http or mcp source takes timeout"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("c.toml", []byte(tt.text))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tt.text)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestFindSecret(t *testing.T) {
	for _, tt := range []struct {
		text string
		what string // "" = nothing found
		line int
	}{
		{"-----BEGIN RSA PRIVATE KEY-----\nMIIE", "a private key block", 1},
		{"x\n-----BEGIN PRIVATE KEY-----", "a private key block", 2},
		{"-----BEGIN PGP PRIVATE KEY BLOCK-----", "a private key block", 1},
		{"-----BEGIN PUBLIC KEY-----\nMIIB", "", 0},
		{"aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "an AWS access key id", 1},
		{"token ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "a GitHub token", 1},
		{"github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "a GitHub token", 1},
		{"SLACK=xoxb-123456789012-abcdefABCDEF", "a Slack token", 1},
		{"password = hunter2", "a password assignment", 1},
		{"  passwd: s3cret", "a password assignment", 1},
		{`"db_password": "x"`, "a password assignment", 1},
		{"Forgot your password? Ask the desk.", "", 0},
		{"password reset: ask the desk", "", 0},
		{"api_key = 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b", "a high-entropy key value", 1},
		{"client_secret: Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZg", "a high-entropy secret value", 1},
		{"api_key = your-api-key-goes-here-please", "", 0},
		{"keyboard = us", "", 0},
		{"# Notes\nNothing secret here: see docs/keys.md for how keys are rotated.", "", 0},
	} {
		s, found := FindSecret(tt.text)
		if (tt.what != "") != found || (found && (s.What != tt.what || s.Line != tt.line)) {
			t.Errorf("FindSecret(%q) = %+v, %v; want %q at line %d", tt.text, s, found, tt.what, tt.line)
		}
	}
}
