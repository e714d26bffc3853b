package doctor

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// Levels of a check.
const (
	OK   = "OK"
	Warn = "WARN"
	Fail = "FAIL"
)

// Check is one line of the report.
type Check struct {
	Level  string `json:"level"`
	Name   string `json:"check"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

func (c Check) String() string {
	s := fmt.Sprintf("%-4s %-18s %s", c.Level, c.Name, c.Detail)
	if c.Fix != "" {
		s += "; fix: " + c.Fix
	}
	return s
}

// Env is the host the checks look at.
type Env struct {
	// Root is prefixed to /dev, /proc, /sys and /etc paths ("" or "/" for
	// the real ones).
	Root string
	EUID int
	// LookPath finds a program (exec.LookPath by default).
	LookPath func(string) (string, error)
	// Kernel is the kernel release (uname -r; read from the host when "").
	Kernel string
}

// Host is the Env of the running process.
func Host() Env {
	return Env{EUID: os.Geteuid(), LookPath: exec.LookPath}
}

func (e Env) path(p string) string { return filepath.Join(e.Root, p) }

// Failed reports whether any check failed.
func Failed(cs []Check) bool {
	for _, c := range cs {
		if c.Level == Fail {
			return true
		}
	}
	return false
}

// Run runs every check for the config at cfgPath (cfgErr is why it did
// not load; cfg is nil then, and the host checks assume the defaults).
func Run(e Env, cfg *mounts.Config, cfgPath string, cfgErr error) []Check {
	if e.LookPath == nil {
		e.LookPath = exec.LookPath
	}
	var out []Check
	out = append(out, e.fuseDevice(), e.fusermount())
	out = append(out, e.allowOther(cfg), e.passthrough(cfg))
	if cfg != nil {
		out = append(out, e.inotify(cfg))
	}
	out = append(out, e.ioURing())
	if c, ok := e.haltPoll(); ok {
		out = append(out, c)
	}
	if cfg != nil {
		out = append(out, stateDir(cfg.StateDirPath())...)
	}
	out = append(out, configChecks(e, cfg, cfgPath, cfgErr)...)
	return out
}

func (e Env) fuseDevice() Check {
	c := Check{Name: "/dev/fuse"}
	p := e.path("/dev/fuse")
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		c.Level, c.Detail = Fail, fmt.Sprintf("%s is missing", p)
		c.Fix = "modprobe fuse; in a container, pass the device (docker run --device /dev/fuse --cap-add SYS_ADMIN)"
		return c
	case fi.Mode()&fs.ModeCharDevice == 0:
		c.Level, c.Detail = Fail, fmt.Sprintf("%s is not a character device", p)
		c.Fix = "remove it and mknod /dev/fuse c 10 229 (or modprobe fuse)"
		return c
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		c.Level, c.Detail = Fail, fmt.Sprintf("%s cannot be opened: %v", p, err)
		c.Fix = "run as root, or chmod 0666 /dev/fuse as most distributions ship it"
		return c
	}
	f.Close()
	st := fi.Sys().(*syscall.Stat_t)
	c.Level, c.Detail = OK, fmt.Sprintf("character device %d,%d, opens read-write", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	return c
}

func (e Env) fusermount() Check {
	c := Check{Name: "fusermount3"}
	p, err := e.LookPath("fusermount3")
	if err != nil {
		if e.EUID == 0 {
			c.Level, c.Detail = Warn, "not found: root mounts without it, but users unmounting with fusermount3 -u (and neuralisfs run as a user) need it"
		} else {
			c.Level, c.Detail = Fail, "not found: a daemon that is not root mounts through it"
		}
		c.Fix = "apt-get install fuse3 (dnf install fuse3)"
		return c
	}
	fi, err := os.Stat(p)
	if err == nil && e.EUID != 0 {
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode()&fs.ModeSetuid == 0 || st.Uid != 0 {
			c.Level, c.Detail = Fail, fmt.Sprintf("%s is not setuid root, so users cannot mount with it", p)
			c.Fix = "chown root " + p + " && chmod u+s " + p
			return c
		}
	}
	c.Level, c.Detail = OK, p
	return c
}

func (e Env) allowOther(cfg *mounts.Config) Check {
	c := Check{Name: "user_allow_other"}
	want := e.EUID == 0
	if cfg != nil {
		want = cfg.AllowOther()
	}
	switch {
	case e.EUID == 0:
		c.Level, c.Detail = OK, "not needed: the daemon runs as root"
		return c
	case !want:
		c.Level, c.Detail = OK, "not needed: allow_other is off, only your uid enters the mount"
		return c
	}
	conf := e.path("/etc/fuse.conf")
	if fuseConfHas(conf, "user_allow_other") {
		c.Level, c.Detail = OK, conf+" allows allow_other for users"
		return c
	}
	c.Level = Fail
	c.Detail = fmt.Sprintf("allow_other is on and the daemon is not root, but %s does not say user_allow_other: the mount would fail", conf)
	c.Fix = "echo user_allow_other >> /etc/fuse.conf (as root), or set [mount] allow_other = false"
	return c
}

// fuseConfHas reports whether an uncommented line of fuse.conf is word.
func fuseConfHas(path, word string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == word {
			return true
		}
	}
	return false
}

// capSysAdmin is CAP_SYS_ADMIN's bit in CapEff.
const capSysAdmin = 21

func (e Env) passthrough(cfg *mounts.Config) Check {
	c := Check{Name: "passthrough"}
	if cfg != nil && !cfg.Passthrough() {
		c.Level, c.Detail = OK, "off in the config ([mount] passthrough = false): reads and writes go through the daemon"
		return c
	}
	if maj, min, ok := e.kernelVersion(); ok && (maj < 6 || maj == 6 && min < 9) {
		c.Level = Warn
		c.Detail = fmt.Sprintf("kernel %d.%d has no FUSE passthrough (Linux 6.9 and later): reads and writes go through the daemon", maj, min)
		c.Fix = "a newer kernel, or [mount] passthrough = false to say so"
		return c
	}
	capEff, err := e.capEff()
	if err != nil {
		c.Level, c.Detail = Warn, "cannot read the capabilities: "+err.Error()
		return c
	}
	if capEff&(1<<capSysAdmin) == 0 {
		c.Level = Warn
		c.Detail = "passthrough is on but the daemon lacks CAP_SYS_ADMIN: go-fuse falls back to plain FUSE I/O, every read and write a round trip"
		c.Fix = "run the daemon as root (the unit does), or set [mount] passthrough = false"
		return c
	}
	c.Level, c.Detail = OK, "CAP_SYS_ADMIN held: regular-file I/O is handed to the kernel"
	return c
}

func (e Env) capEff() (uint64, error) {
	data, err := os.ReadFile(e.path("/proc/self/status"))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff line in /proc/self/status")
}

func (e Env) kernelVersion() (major, minor int, ok bool) {
	rel := e.Kernel
	if rel == "" {
		var u unix.Utsname
		if unix.Uname(&u) != nil {
			return 0, 0, false
		}
		rel = unix.ByteSliceToString(u.Release[:])
	}
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return major, minor, err1 == nil && err2 == nil
}

func (e Env) readInt(p string) (int64, error) {
	data, err := os.ReadFile(e.path(p))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
}

func (e Env) inotify(cfg *mounts.Config) Check {
	c := Check{Name: "inotify watches"}
	limit, err := e.readInt("/proc/sys/fs/inotify/max_user_watches")
	if err != nil {
		c.Level, c.Detail = Warn, "cannot read fs.inotify.max_user_watches: "+err.Error()
		return c
	}
	// Stop counting well past the limit: a huge tree is a warning either way.
	stop := 2*limit + 1
	var folders int64
	for _, s := range cfg.Sources {
		folders += countFolders(s.Path, stop-folders)
		if folders >= stop {
			break
		}
	}
	// The daemon keeps to half of the limit (mounts' watch cap), the
	// other half left to this uid's other watchers.
	want := roundUp(4 * folders)
	fix := fmt.Sprintf("sysctl -w fs.inotify.max_user_watches=%d, and for every boot: echo fs.inotify.max_user_watches=%d > /etc/sysctl.d/90-neuralisfs.conf", want, want)
	switch {
	case folders > limit:
		c.Level = Warn
		c.Detail = fmt.Sprintf("the sources have %d folders or more but max_user_watches is %d: some go unwatched, their sources DEGRADED, and changes behind the mount's back show only after a reconcile scan", folders, limit)
		c.Fix = fix
	case folders > limit/2:
		c.Level = Warn
		c.Detail = fmt.Sprintf("the sources have %d folders or more but the daemon keeps to half of max_user_watches (%d of %d): some go unwatched, their sources DEGRADED, and changes behind the mount's back show only after a reconcile scan", folders, limit/2, limit)
		c.Fix = fix
	case folders*10 > limit/2*8:
		c.Level = Warn
		c.Detail = fmt.Sprintf("the sources have %d folders, %d%% of the half of max_user_watches (%d) the daemon keeps to", folders, folders*100/max(limit/2, 1), limit)
		c.Fix = fix
	default:
		c.Level, c.Detail = OK, fmt.Sprintf("%d folders in the sources, max_user_watches %d", folders, limit)
	}
	return c
}

// roundUp rounds n up to a tidy limit: at least 65536, a multiple of 65536.
func roundUp(n int64) int64 {
	const step = 65536
	if n < step {
		return step
	}
	return (n + step - 1) / step * step
}

// countFolders counts the folders under root the watcher would watch (it
// leaves git's object store, logs and LFS store alone), stopping at stop.
func countFolders(root string, stop int64) int64 {
	var n int64
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if b := filepath.Base(p); filepath.Base(filepath.Dir(p)) == ".git" && (b == "objects" || b == "logs" || b == "lfs") {
			return filepath.SkipDir
		}
		n++
		if n >= stop {
			return filepath.SkipAll
		}
		return nil
	})
	return n
}

func (e Env) ioURing() Check {
	c := Check{Name: "io_uring"}
	if v, err := e.readInt("/proc/sys/kernel/io_uring_disabled"); err == nil && v == 2 {
		c.Level, c.Detail = Warn, "io_uring is disabled for every process (kernel.io_uring_disabled = 2): FUSE requests go over /dev/fuse reads and writes"
		c.Fix = "sysctl -w kernel.io_uring_disabled=0"
		return c
	}
	p := e.path("/sys/module/fuse/parameters/enable_uring")
	data, err := os.ReadFile(p)
	if err != nil {
		c.Level = Warn
		c.Detail = "this kernel has no FUSE over io_uring (Linux 6.14 and later, CONFIG_FUSE_IO_URING): FUSE requests go over /dev/fuse reads and writes"
		c.Fix = "a kernel built with CONFIG_FUSE_IO_URING=y"
		return c
	}
	if v := strings.TrimSpace(string(data)); v == "Y" || v == "1" {
		c.Level, c.Detail = OK, "FUSE over io_uring is on ("+p+" = Y)"
		return c
	}
	c.Level = Warn
	c.Detail = "FUSE over io_uring is off (" + p + " = N): each request costs more round-trip time than it has to"
	c.Fix = "echo Y > /sys/module/fuse/parameters/enable_uring (as root, takes effect for new mounts); for every boot add fuse.enable_uring=1 to the kernel command line, or options fuse enable_uring=1 in /etc/modprobe.d/fuse.conf where fuse is a module"
	return c
}

// haltPollNs is the guest halt polling the haltpoll check advises: the
// kernel's own default for guest_halt_poll_ns.
const haltPollNs = 200000

// haltPoll looks at a virtual machine's idle loop. A KVM guest whose
// cpuidle driver is haltpoll polls for a while before it halts an idle
// vCPU; with guest_halt_poll_ns = 0 it halts at once, and every FUSE
// request and every reply that finds its thread's vCPU halted waits for the
// hypervisor to run that vCPU again. On the project's 2-vCPU VM, which boots
// with haltpoll.guest_halt_poll_ns=0, turning it to 200000 took a warm
// grep -r of 11,478 files in a view from 0.95 s to 0.44 s over /dev/fuse
// (native: 0.16 s; README "Benchmarks"). ok is false where there is no
// haltpoll driver (bare metal, other hypervisors): nothing to say then.
func (e Env) haltPoll() (c Check, ok bool) {
	c.Name = "halt polling"
	drv, err := os.ReadFile(e.path("/sys/devices/system/cpu/cpuidle/current_driver"))
	if err != nil || strings.TrimSpace(string(drv)) != "haltpoll" {
		return c, false
	}
	p := "/sys/module/haltpoll/parameters/guest_halt_poll_ns"
	ns, err := e.readInt(p)
	if err != nil {
		c.Level, c.Detail = Warn, "the cpuidle driver is haltpoll but "+p+" cannot be read: "+err.Error()
		c.Fix = fmt.Sprintf("echo %d > %s (as root)", haltPollNs, p)
		return c, true
	}
	if ns > 0 {
		c.Level, c.Detail = OK, fmt.Sprintf("idle vCPUs poll up to %d ns before they halt (%s)", ns, p)
		return c, true
	}
	c.Level = Warn
	c.Detail = "idle vCPUs halt at once (" + p + " = 0): every FUSE request and reply that finds its thread's vCPU idle waits for the hypervisor to wake it, which can double the time of a metadata workload"
	c.Fix = fmt.Sprintf("echo %d > %s (as root, takes effect at once; an idle vCPU then spins up to 200 µs before it halts, host CPU time spent for latency); for every boot put haltpoll.guest_halt_poll_ns=%d on the kernel command line instead of =0", haltPollNs, p, haltPollNs)
	return c, true
}

// minFree and lowFree bound the state folder's free space: below minFree
// the index and journal cannot work, below lowFree they soon will not.
const (
	minFree = 64 << 20
	lowFree = 1 << 30
)

func stateDir(dir string) []Check {
	c := Check{Name: "state_dir"}
	fi, err := os.Stat(dir)
	existing := dir
	switch {
	case errors.Is(err, fs.ErrNotExist):
		for existing = filepath.Dir(dir); ; existing = filepath.Dir(existing) {
			if _, err := os.Stat(existing); err == nil || existing == "/" {
				break
			}
		}
		if unix.Access(existing, unix.W_OK|unix.X_OK) != nil {
			c.Level, c.Detail = Fail, fmt.Sprintf("%s does not exist and cannot be created: %s is not writable", dir, existing)
			c.Fix = fmt.Sprintf("mkdir -p -m 0711 %s as a user who may, and chown it to the daemon's user", dir)
			return []Check{c}
		}
		c.Level, c.Detail = OK, fmt.Sprintf("%s will be created at the first mount", dir)
	case err != nil:
		c.Level, c.Detail = Fail, err.Error()
		return []Check{c}
	case !fi.IsDir():
		c.Level, c.Detail = Fail, fmt.Sprintf("%s is not a directory", dir)
		c.Fix = "set state_dir to a folder"
		return []Check{c}
	case unix.Access(dir, unix.W_OK|unix.X_OK) != nil:
		c.Level, c.Detail = Fail, fmt.Sprintf("%s is not writable by uid %d", dir, os.Geteuid())
		c.Fix = fmt.Sprintf("chown %d %s", os.Geteuid(), dir)
		return []Check{c}
	case fi.Mode().Perm()&0o022 != 0:
		c.Level = Warn
		c.Detail = fmt.Sprintf("%s is mode %04o: other users can replace the control socket and the audit log", dir, fi.Mode().Perm())
		c.Fix = "chmod 0711 " + dir
	default:
		c.Level, c.Detail = OK, fmt.Sprintf("%s, mode %04o", dir, fi.Mode().Perm())
	}
	out := []Check{c}
	var st unix.Statfs_t
	if err := unix.Statfs(existing, &st); err == nil {
		free := int64(st.Bavail) * st.Bsize
		s := Check{Name: "state_dir space"}
		detail := fmt.Sprintf("%s free on the filesystem of %s (index, journal, audit log)", human(free), dir)
		switch {
		case free < minFree:
			s.Level, s.Detail, s.Fix = Fail, detail, "free space there, or move state_dir to a filesystem with room"
		case free < lowFree:
			s.Level, s.Detail, s.Fix = Warn, detail, "free space there, or lower [journal] max_bytes"
		default:
			s.Level, s.Detail = OK, detail
		}
		out = append(out, s)
	}
	return out
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

func configChecks(e Env, cfg *mounts.Config, cfgPath string, cfgErr error) []Check {
	if cfg == nil {
		var msgs []string
		if j, ok := cfgErr.(interface{ Unwrap() []error }); ok {
			for _, err := range j.Unwrap() {
				msgs = append(msgs, err.Error())
			}
		} else if cfgErr != nil {
			msgs = append(msgs, cfgErr.Error())
		}
		return []Check{{Level: Fail, Name: "config", Detail: strings.Join(msgs, "; "), Fix: "correct it (neuralisfs config validate -c " + cfgPath + ")"}}
	}
	out := []Check{{Level: OK, Name: "config", Detail: fmt.Sprintf("%s: %d sources, %d principals, %d rules, %d views", cfg.File, len(cfg.Sources), len(cfg.Principals), len(cfg.Rules), len(cfg.Views))}}
	set, err := policy.New(cfg.PolicyConfig(uint32(e.EUID)))
	if err != nil {
		var msgs []string
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, err := range j.Unwrap() {
				msgs = append(msgs, err.Error())
			}
		} else {
			msgs = append(msgs, err.Error())
		}
		out = append(out, Check{Level: Fail, Name: "policy", Detail: strings.Join(msgs, "; "), Fix: "correct the rules and principals"})
	} else if findings := set.Lint(); len(findings) > 0 {
		for _, f := range findings {
			out = append(out, Check{Level: Warn, Name: "policy", Detail: f.String(), Fix: "see neuralisfs policy check -c " + cfg.File})
		}
	} else {
		out = append(out, Check{Level: OK, Name: "policy", Detail: fmt.Sprintf("%d rules, no lint findings", len(cfg.Rules))})
	}
	for _, sc := range cfg.Sources {
		s := mounts.NewSource(sc)
		s.Refresh()
		st := s.Status()
		s.Close()
		c := Check{Name: "source " + sc.Slug, Detail: fmt.Sprintf("%s (%s): %s", sc.Path, sc.Kind, st.String())}
		switch st.State {
		case mounts.Available, mounts.Empty:
			c.Level = OK
		default:
			c.Level = Warn
			c.Fix = "the daemon serves the other sources and picks this one up when it is fixed"
		}
		out = append(out, c)
	}
	mps := []string{}
	if cfg.Mount.Mountpoint != "" {
		mps = append(mps, cfg.Mount.Mountpoint)
	}
	for _, v := range cfg.Views {
		mps = append(mps, v.Mountpoint)
	}
	for _, mp := range mps {
		out = append(out, mountpoint(mp))
	}
	return out
}

func mountpoint(mp string) Check {
	c := Check{Name: "mountpoint"}
	var st unix.Statfs_t
	if err := unix.Statfs(mp, &st); err == unix.ENOTCONN || err == unix.ECONNABORTED {
		c.Level, c.Detail = Warn, mp+" is a stale mount left by a daemon that died (mount clears it)"
		c.Fix = "neuralisfs unmount " + mp
		return c
	}
	fi, err := os.Stat(mp)
	switch {
	case err != nil:
		c.Level, c.Detail, c.Fix = Fail, err.Error(), "mkdir -p "+mp
	case !fi.IsDir():
		c.Level, c.Detail = Fail, mp+" is not a directory"
	default:
		c.Level, c.Detail = OK, mp
	}
	return c
}
