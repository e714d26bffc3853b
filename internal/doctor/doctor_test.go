package doctor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/neuralis/neuralisfs/mounts"
)

// fakeHost is a Root with the /proc, /sys and /etc files the checks read.
func fakeHost(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func find(cs []Check, name string) Check {
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	return Check{}
}

func config(t *testing.T, text string) *mounts.Config {
	t.Helper()
	c, err := mounts.Parse("/etc/neuralisfs/config.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestChecks(t *testing.T) {
	src := t.TempDir()
	for i := range 30 {
		os.MkdirAll(filepath.Join(src, fmt.Sprint("d", i), ".git", "objects", "ab"), 0o755)
	}
	state := t.TempDir()
	base := fmt.Sprintf("state_dir = %q\n[[source]]\nslug = \"s\"\nkind = \"local\"\npath = %q\n", state, src)
	noPath := func(string) (string, error) { return "", errors.New("not found") }
	for _, tt := range []struct {
		name   string
		env    Env
		files  map[string]string
		cfg    string
		check  string
		level  string
		detail string // substring of Detail and Fix
	}{
		{"no /dev/fuse", Env{EUID: 0}, nil, base, "/dev/fuse", Fail, "modprobe fuse"},
		{"/dev/fuse a plain file", Env{EUID: 0}, map[string]string{"/dev/fuse": ""}, base, "/dev/fuse", Fail, "not a character device"},
		{"no fusermount3 as root", Env{EUID: 0, LookPath: noPath}, nil, base, "fusermount3", Warn, "apt-get install fuse3"},
		{"no fusermount3 as a user", Env{EUID: 1000, LookPath: noPath}, nil, base, "fusermount3", Fail, "apt-get install fuse3"},
		{"allow_other without user_allow_other", Env{EUID: 1000}, map[string]string{"/etc/fuse.conf": "#user_allow_other\n"}, base + "[mount]\nallow_other = true\n", "user_allow_other", Fail, "echo user_allow_other >> /etc/fuse.conf"},
		{"allow_other with user_allow_other", Env{EUID: 1000}, map[string]string{"/etc/fuse.conf": "# comment\n user_allow_other \n"}, base + "[mount]\nallow_other = true\n", "user_allow_other", OK, "allows"},
		{"allow_other off", Env{EUID: 1000}, nil, base + "[mount]\nallow_other = false\n", "user_allow_other", OK, "not needed"},
		{"passthrough without CAP_SYS_ADMIN", Env{EUID: 1000, Kernel: "6.18.1"}, map[string]string{"/proc/self/status": "Name:\tx\nCapEff:\t0000000000000000\n"}, base, "passthrough", Warn, "passthrough = false"},
		{"passthrough with CAP_SYS_ADMIN", Env{EUID: 0, Kernel: "6.18.1"}, map[string]string{"/proc/self/status": "CapEff:\t000001ffffffffff\n"}, base, "passthrough", OK, "CAP_SYS_ADMIN held"},
		{"passthrough on an old kernel", Env{EUID: 0, Kernel: "6.1.0-18-amd64"}, nil, base, "passthrough", Warn, "Linux 6.9"},
		{"passthrough off", Env{EUID: 1000}, nil, base + "[mount]\npassthrough = false\n", "passthrough", OK, "off in the config"},
		{"too few watches", Env{}, map[string]string{"/proc/sys/fs/inotify/max_user_watches": "20\n"}, base, "inotify watches", Warn, "sysctl -w fs.inotify.max_user_watches=65536"},
		{"past the daemon's half of the watch limit", Env{}, map[string]string{"/proc/sys/fs/inotify/max_user_watches": "70\n"}, base, "inotify watches", Warn, "keeps to half of max_user_watches"},
		{"close to the daemon's half of the watch limit", Env{}, map[string]string{"/proc/sys/fs/inotify/max_user_watches": "140\n"}, base, "inotify watches", Warn, "of the half of max_user_watches"},
		// 1 root + 30 folders with .git, .git/objects skipped: 61 folders.
		{"enough watches", Env{}, map[string]string{"/proc/sys/fs/inotify/max_user_watches": "8192\n"}, base, "inotify watches", OK, "61 folders"},
		{"io_uring off", Env{}, map[string]string{"/sys/module/fuse/parameters/enable_uring": "N\n"}, base, "io_uring", Warn, "echo Y > /sys/module/fuse/parameters/enable_uring"},
		{"io_uring on", Env{}, map[string]string{"/sys/module/fuse/parameters/enable_uring": "Y\n"}, base, "io_uring", OK, "is on"},
		{"no io_uring in the kernel", Env{}, nil, base, "io_uring", Warn, "CONFIG_FUSE_IO_URING"},
		{"io_uring disabled", Env{}, map[string]string{"/sys/module/fuse/parameters/enable_uring": "Y\n", "/proc/sys/kernel/io_uring_disabled": "2\n"}, base, "io_uring", Warn, "kernel.io_uring_disabled=0"},
		{"halt polling off", Env{}, map[string]string{"/sys/devices/system/cpu/cpuidle/current_driver": "haltpoll\n", "/sys/module/haltpoll/parameters/guest_halt_poll_ns": "0\n"}, base, "halt polling", Warn, "echo 200000 > /sys/module/haltpoll/parameters/guest_halt_poll_ns"},
		{"halt polling on", Env{}, map[string]string{"/sys/devices/system/cpu/cpuidle/current_driver": "haltpoll\n", "/sys/module/haltpoll/parameters/guest_halt_poll_ns": "200000\n"}, base, "halt polling", OK, "up to 200000 ns"},
		{"halt polling unreadable", Env{}, map[string]string{"/sys/devices/system/cpu/cpuidle/current_driver": "haltpoll\n"}, base, "halt polling", Warn, "cannot be read"},
		{"lint findings", Env{}, nil, base + "[[rule]]\nuri = \"s://a/**\"\nwho = [\"*\"]\ndeny = [\"read\"]\n[[rule]]\nuri = \"s://a/**\"\nwho = [\"*\"]\nallow = [\"read\"]\n", "policy", Warn, "policy check"},
		{"a missing source", Env{}, nil, base + "[[source]]\nslug = \"gone\"\nkind = \"local\"\npath = \"/nonexistent/x\"\n", "source gone", Warn, "SOURCE_MISSING"},
		{"a missing mountpoint", Env{}, nil, base + "[mount]\nmountpoint = \"/nonexistent/mnt\"\n", "mountpoint", Fail, "mkdir -p /nonexistent/mnt"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := tt.env
			env.Root = fakeHost(t, tt.files)
			cs := Run(env, config(t, tt.cfg), "/etc/neuralisfs/config.toml", nil)
			c := find(cs, tt.check)
			if c.Level != tt.level || !strings.Contains(c.Detail+" "+c.Fix, tt.detail) {
				t.Errorf("%s check: %v; want %s with %q", tt.check, c, tt.level, tt.detail)
			}
			if c.Level != OK && c.Fix == "" && !strings.HasPrefix(c.Name, "source") {
				t.Errorf("%s is %s with no fix", c.Name, c.Level)
			}
			if tt.level == Fail && !Failed(cs) {
				t.Errorf("Failed = false with a FAIL line")
			}
		})
	}
}

// TestHaltPollOnlyWhereItApplies: a host whose vCPUs do not idle through
// the haltpoll driver (bare metal, another driver, no cpuidle in /sys) gets
// no halt polling line at all.
func TestHaltPollOnlyWhereItApplies(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"no cpuidle":  nil,
		"intel_idle":  {"/sys/devices/system/cpu/cpuidle/current_driver": "intel_idle\n", "/sys/module/haltpoll/parameters/guest_halt_poll_ns": "0\n"},
		"acpi_idle":   {"/sys/devices/system/cpu/cpuidle/current_driver": "acpi_idle\n"},
		"empty entry": {"/sys/devices/system/cpu/cpuidle/current_driver": ""},
	} {
		cs := Run(Env{Root: fakeHost(t, files)}, nil, "/c.toml", errors.New("no config"))
		if c := find(cs, "halt polling"); c.Name != "" {
			t.Errorf("%s: %v; want no halt polling line", name, c)
		}
	}
}

func TestStateDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	if c := stateDir(file)[0]; c.Level != Fail || !strings.Contains(c.Detail, "not a directory") {
		t.Errorf("a file as state_dir: %v", c)
	}
	loose := filepath.Join(dir, "loose")
	os.Mkdir(loose, 0o777)
	os.Chmod(loose, 0o777)
	if c := stateDir(loose)[0]; c.Level != Warn || !strings.Contains(c.Fix, "chmod 0711") {
		t.Errorf("a world-writable state_dir: %v", c)
	}
	cs := stateDir(filepath.Join(dir, "new", "state"))
	if cs[0].Level != OK || !strings.Contains(cs[0].Detail, "will be created") || len(cs) != 2 || cs[1].Name != "state_dir space" {
		t.Errorf("a state_dir to be created: %v", cs)
	}
}

func TestBrokenConfigFails(t *testing.T) {
	_, err := mounts.Parse("/c.toml", []byte("[[source]]\nslug = \"X\"\n"))
	cs := Run(Env{Root: t.TempDir()}, nil, "/c.toml", err)
	c := find(cs, "config")
	if c.Level != Fail || !strings.Contains(c.Detail, "/c.toml:") || !strings.Contains(c.Fix, "neuralisfs config validate -c /c.toml") || !Failed(cs) {
		t.Errorf("config check on a broken config: %v", c)
	}
}
