package mounts

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseReportsFileLineAndKey(t *testing.T) {
	for _, tt := range []struct {
		name string
		text string
		want []string // substrings of the error, each on its own error
	}{
		{"valid", `
state_dir = "/var/lib/n"
[mount]
allow_other = true
entry_timeout = "2s"
watched_timeout = "5m"
[[source]]
slug = "data"
kind = "local"
path = "/srv/data"
[[source]]
slug = "pin"
kind = "git-pinned"
path = "/srv/repo.git"
rev = "main"
[[principal]]
name = "agent"
uids = [1001]
[[rule]]
uri = "data://secrets/**"
who = ["agent"]
deny = ["read"]
`, nil},
		{"toml syntax", "[[source]\nslug = 1", []string{"c.toml:2:", "delimiter"}},
		{"unknown top key", "bogus = 1\n", []string{"c.toml:1: bogus: unknown key"}},
		{"review only write", "[[source]]\nslug = \"d\"\nkind = \"local\"\npath = \"/d\"\n[[rule]]\nuri = \"d://**\"\nwho = [\"*\"]\nreview = [\"read\"]\n", []string{`c.toml:8: rule[0].review: "read" cannot be held for review`}},
		{"review max_bytes", "[review]\nmax_bytes = -1\n", []string{"c.toml:2: review.max_bytes: must not be negative"}},
		{"journal max_records", "[journal]\nenabled = true\nmax_records = -5\n", []string{"c.toml:3: journal.max_records: must not be negative"}},
		{"journal max_records not a number", "[journal]\nmax_records = \"lots\"\n", []string{"c.toml:2: journal.max_records:"}},
		{"unknown key in second source", "[[source]]\nslug = \"a\"\nkind = \"local\"\npath = \"/a\"\n[[source]]\nslug = \"b\"\nkind = \"local\"\npath = \"/b\"\ncolor = 1\n", []string{"c.toml:9: source.color: unknown key"}},
		{"bad slug", "[[source]]\nslug = \"Bad Slug\"\nkind = \"local\"\npath = \"/a\"\n", []string{"c.toml:2: source[0].slug:"}},
		{"duplicate slug", "[[source]]\nslug = \"a\"\nkind = \"local\"\npath = \"/a\"\n[[source]]\nslug = \"a\"\nkind = \"local\"\npath = \"/b\"\n", []string{"c.toml:6: source[1].slug: \"a\" is already used by the source at line 1"}},
		{"relative path", "[[source]]\nslug = \"a\"\nkind = \"local\"\npath = \"rel\"\n", []string{"c.toml:4: source[0].path: path \"rel\" is relative"}},
		{"bad kind", "[[source]]\nslug = \"a\"\nkind = \"nfs\"\npath = \"/a\"\n", []string{"c.toml:3: source[0].kind:"}},
		{"pinned without rev", "[[source]]\nslug = \"a\"\nkind = \"git-pinned\"\npath = \"/a\"\n", []string{"source[0].rev: missing"}},
		{"bad duration", "[mount]\nentry_timeout = \"soon\"\n", []string{"c.toml"}},
		{"wrong type", "[mount]\nallow_other = [1]\n", []string{"c.toml:2: mount.allow_other: is an array; want a boolean"}},
		{"array for a table", "mount = []\n", []string{"c.toml:1: mount: is an array; want a table"}},
		{"rule with unknown slug and cap", "[[rule]]\nuri = \"nope://x\"\nwho = [\"*\"]\ndeny = [\"fly\"]\n", []string{"c.toml:2: rule[0].uri:", "c.toml:4: rule[0].deny: \"fly\" is not a capability"}},
		{"every error at once", "bogus = 1\n[[source]]\nslug = \"\"\nkind = \"x\"\npath = \"r\"\n", []string{"bogus", "source[0].slug", "source[0].kind", "source[0].path"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("c.toml", []byte(tt.text))
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse accepted a bad config")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("error is not a *ConfigError: %T", err)
			}
		})
	}
}

func TestWatchedTimeout(t *testing.T) {
	c, err := Parse("c.toml", []byte("[mount]\nwatched_timeout = \"5m\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.WatchedTimeout(); got != 5*time.Minute {
		t.Errorf("watched_timeout 5m read as %v", got)
	}
	c, err = Parse("c.toml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.WatchedTimeout(); got != time.Minute {
		t.Errorf("default watched timeout %v, want 1m", got)
	}
}

func TestMetricsListen(t *testing.T) {
	for _, tt := range []struct {
		listen string
		ok     bool
	}{
		{"127.0.0.1:9471", true},
		{":9471", true},
		{"[::1]:9471", true},
		{"localhost:9471", true},
		{"/run/neuralisfs/metrics.sock", true},
		{"127.0.0.1", false},
		{"127.0.0.1:http", false},
		{"127.0.0.1:70000", false},
		{"metrics.sock", false},
	} {
		_, err := Parse("/etc/c.toml", []byte("[metrics]\nlisten = \""+tt.listen+"\"\n"))
		if (err == nil) != tt.ok {
			t.Errorf("listen = %q: err %v, want ok=%v", tt.listen, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "/etc/c.toml:2: metrics.listen: ") {
			t.Errorf("listen = %q: error %q does not name file, line and key", tt.listen, err)
		}
	}
}

func TestIOURing(t *testing.T) {
	for _, tt := range []struct {
		value, want string
		ok          bool
	}{
		{"", "auto", true},
		{"off", "off", true},
		{"auto", "auto", true},
		{"on", "on", true},
		{"yes", "", false},
	} {
		src := "[mount]\n"
		if tt.value != "" {
			src += "io_uring = \"" + tt.value + "\"\n"
		}
		c, err := Parse("/etc/c.toml", []byte(src))
		if (err == nil) != tt.ok {
			t.Errorf("io_uring = %q: err %v, want ok=%v", tt.value, err, tt.ok)
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), "/etc/c.toml:2: mount.io_uring: ") {
				t.Errorf("io_uring = %q: error %q does not name file, line and key", tt.value, err)
			}
			continue
		}
		if got := c.IOURing(); got != tt.want {
			t.Errorf("io_uring = %q read as %q, want %q", tt.value, got, tt.want)
		}
	}
}
