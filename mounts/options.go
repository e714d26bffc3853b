package mounts

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// MountOption is one option of `neuralisfs mount -o` and of mount(8) and
// fstab lines (`-o allow_other,entry_timeout=2`), each the same as a key of
// the config file.
type MountOption struct {
	Name string
	// Value names the option's value ("SECONDS"); "" for a plain flag.
	Value string
	// Key is the config key the option sets.
	Key  string
	Help string
	set  func(c *Config, v string) error
}

// MountOptions are the options ApplyMountOptions understands, in the order
// the man page lists them.
var MountOptions = []MountOption{
	{Name: "allow_other", Key: "[mount] allow_other = true", Help: "let other uids (agents in containers) enter the mount",
		set: func(c *Config, _ string) error { c.Mount.AllowOther = ptr(true); return nil }},
	{Name: "noallow_other", Key: "[mount] allow_other = false", Help: "only the daemon's uid may enter the mount",
		set: func(c *Config, _ string) error { c.Mount.AllowOther = ptr(false); return nil }},
	{Name: "passthrough", Key: "[mount] passthrough = true", Help: "hand regular-file I/O to the kernel (needs CAP_SYS_ADMIN)",
		set: func(c *Config, _ string) error { c.Mount.Passthrough = ptr(true); return nil }},
	{Name: "nopassthrough", Key: "[mount] passthrough = false", Help: "serve every read and write through the daemon",
		set: func(c *Config, _ string) error { c.Mount.Passthrough = ptr(false); return nil }},
	{Name: "entry_timeout", Value: "SECONDS", Key: "[mount] entry_timeout", Help: "kernel cache timeout for names (seconds, or a duration such as 250ms)",
		set: func(c *Config, v string) error { return setDuration(&c.Mount.EntryTimeout, v) }},
	{Name: "attr_timeout", Value: "SECONDS", Key: "[mount] attr_timeout", Help: "kernel cache timeout for attributes",
		set: func(c *Config, v string) error { return setDuration(&c.Mount.AttrTimeout, v) }},
	{Name: "watched_timeout", Value: "SECONDS", Key: "[mount] watched_timeout", Help: "both timeouts while every folder of a source is watched",
		set: func(c *Config, v string) error { return setDuration(&c.Mount.WatchedTimeout, v) }},
	{Name: "ro", Key: "read_only = true in every [[source]]", Help: "mount every source read-only (writes fail with EROFS)",
		set: func(c *Config, _ string) error {
			for i := range c.Sources {
				c.Sources[i].ReadOnly = true
			}
			return nil
		}},
}

// IgnoredMountOptions are the options mount(8), fstab and fuse3's
// mount.fuse3 pass along that mean nothing to the daemon: they are
// accepted and dropped. Options starting with "x-" (x-systemd.*) and
// "comment=" are dropped too. The mount is always nodev and nosuid.
var IgnoredMountOptions = []string{
	"defaults", "rw", "auto", "noauto", "user", "users", "nouser", "owner", "group",
	"_netdev", "nofail", "dev", "nodev", "suid", "nosuid", "exec", "async", "default_permissions",
}

// ApplyMountOptions sets what a comma-separated -o list says on c, later
// options winning over earlier ones and over the file. Bad options are
// reported together, each in one sentence naming the option.
func (c *Config) ApplyMountOptions(list string) error {
	var errs []string
	for _, o := range strings.Split(list, ",") {
		o = strings.TrimSpace(o)
		if o == "" || strings.HasPrefix(o, "x-") || strings.HasPrefix(o, "comment=") || ignoredOption(o) {
			continue
		}
		name, val, hasVal := strings.Cut(o, "=")
		mo, ok := findMountOption(name)
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("mount option %q is not one neuralisfs knows (it takes %s)", o, optionNames()))
		case mo.Value == "" && hasVal:
			errs = append(errs, fmt.Sprintf("mount option %q takes no value; write %s", o, name))
		case mo.Value != "" && !hasVal:
			errs = append(errs, fmt.Sprintf("mount option %q needs a value: %s=%s", o, name, mo.Value))
		default:
			if err := mo.set(c, val); err != nil {
				errs = append(errs, fmt.Sprintf("mount option %q: %v", o, err))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func ignoredOption(o string) bool {
	for _, i := range IgnoredMountOptions {
		if o == i {
			return true
		}
	}
	return false
}

func findMountOption(name string) (MountOption, bool) {
	for _, mo := range MountOptions {
		if mo.Name == name {
			return mo, true
		}
	}
	return MountOption{}, false
}

func optionNames() string {
	var names []string
	for _, mo := range MountOptions {
		n := mo.Name
		if mo.Value != "" {
			n += "=" + mo.Value
		}
		names = append(names, n)
	}
	return strings.Join(names, ", ")
}

// setDuration parses seconds ("1.5", as libfuse's entry_timeout takes) or
// a Go duration ("250ms").
func setDuration(dst **Duration, v string) error {
	var d time.Duration
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 1e6 {
			return fmt.Errorf("%q is not a number of seconds", v)
		}
		d = time.Duration(f * float64(time.Second))
	} else if d, err = time.ParseDuration(v); err != nil {
		return fmt.Errorf("%q is neither seconds (1.5) nor a duration (250ms)", v)
	}
	if d < 0 {
		return fmt.Errorf("%q is negative", v)
	}
	*dst = &Duration{d}
	return nil
}

func ptr[T any](v T) *T { return &v }
