package mounts

import (
	"strings"
	"testing"
	"time"
)

func TestApplyMountOptions(t *testing.T) {
	const base = `
[mount]
allow_other = false
entry_timeout = "1s"
[[source]]
slug = "data"
kind = "local"
path = "/srv/data"
[[source]]
slug = "notes"
kind = "local"
path = "/srv/notes"
`
	for _, tt := range []struct {
		name  string
		opts  string
		check func(t *testing.T, c *Config)
		err   []string // substrings of the error; nil when none is expected
	}{
		{"what mount(8) and fstab pass is dropped", "rw,defaults,_netdev,nofail,noauto,user,dev,suid,nodev,nosuid,x-systemd.automount,x-systemd.requires=a.mount,comment=x", func(t *testing.T, c *Config) {
			if c.AllowOther() || c.Sources[0].ReadOnly {
				t.Errorf("generic options changed the config: %+v", c.Mount)
			}
		}, nil},
		{"allow_other", "allow_other", func(t *testing.T, c *Config) {
			if !c.AllowOther() {
				t.Error("allow_other not set")
			}
		}, nil},
		{"the last word wins", "allow_other,noallow_other,nopassthrough,passthrough", func(t *testing.T, c *Config) {
			if c.AllowOther() || !c.Passthrough() {
				t.Errorf("allow_other %v passthrough %v; want false, true", c.AllowOther(), c.Passthrough())
			}
		}, nil},
		{"seconds as libfuse writes them, and durations", "entry_timeout=2.5,attr_timeout=250ms,watched_timeout=0", func(t *testing.T, c *Config) {
			e, a := c.Timeouts()
			if e != 2500*time.Millisecond || a != 250*time.Millisecond || c.WatchedTimeout() != 0 {
				t.Errorf("timeouts %v %v %v", e, a, c.WatchedTimeout())
			}
		}, nil},
		{"ro makes every source read-only", "ro", func(t *testing.T, c *Config) {
			for _, s := range c.Sources {
				if !s.ReadOnly {
					t.Errorf("source %s is not read-only", s.Slug)
				}
			}
		}, nil},
		{"unknown options are refused together", "noexec,colour=red", nil, []string{`mount option "noexec" is not one neuralisfs knows (it takes allow_other`, `"colour=red"`}},
		{"a flag with a value", "allow_other=1", nil, []string{`"allow_other=1" takes no value`}},
		{"a value missing", "entry_timeout", nil, []string{`"entry_timeout" needs a value: entry_timeout=SECONDS`}},
		{"a bad duration", "attr_timeout=soon", nil, []string{`"attr_timeout=soon": "soon" is neither seconds`}},
		{"a negative one", "attr_timeout=-1", nil, []string{`is negative`}},
		{"not a number", "attr_timeout=NaN", nil, []string{`is not a number of seconds`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("c.toml", []byte(base))
			if err != nil {
				t.Fatal(err)
			}
			err = c.ApplyMountOptions(tt.opts)
			if tt.err == nil {
				if err != nil {
					t.Fatalf("ApplyMountOptions(%q) = %v", tt.opts, err)
				}
				tt.check(t, c)
				return
			}
			if err == nil {
				t.Fatalf("ApplyMountOptions(%q) = nil; want an error", tt.opts)
			}
			for _, w := range tt.err {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ApplyMountOptions(%q) = %q; want it to contain %q", tt.opts, err, w)
				}
			}
		})
	}
}
