package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// helperPath is where mount(8) looks for the helper of fuse.neuralisfs.
// (fuse3's mount.fuse3 would run "neuralisfs" too, but with no PATH set,
// so only from /usr/local/bin, /usr/bin, ...: the helper names the binary.)
const helperPath = "/sbin/mount.fuse.neuralisfs"

// installHelper installs packaging/mount.fuse.neuralisfs as mount(8)
// expects it, pointing at the test binary, until the test ends.
func installHelper(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("mount"); err != nil {
		t.Skip("mount(8) is not installed")
	}
	if _, err := os.Lstat(helperPath); err == nil {
		t.Skipf("%s is installed already; not replacing it for a test", helperPath)
	}
	data, err := os.ReadFile(repoFile(t, "packaging/mount.fuse.neuralisfs"))
	must(t, err)
	text := strings.ReplaceAll(string(data), "@BINDIR@", filepath.Dir(binPath))
	must(t, os.WriteFile(helperPath, []byte(text), 0o755))
	t.Cleanup(func() { os.Remove(helperPath) })
}

// daemonsOf lists the pids of neuralisfs daemons serving cfg.
func daemonsOf(cfg string) []int {
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		args := strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00")
		if len(args) > 3 && args[0] == binPath && args[1] == "mount" && args[3] == cfg {
			pids = append(pids, pid)
		}
	}
	return pids
}

// helperEnv is a config with one local source holding hello.txt.
func helperEnv(t *testing.T) (cfg, mnt, data string) {
	t.Helper()
	dir := sharedTempDir(t)
	mnt, data = filepath.Join(dir, "mnt"), filepath.Join(dir, "data")
	must(t, os.Mkdir(mnt, 0o755))
	writeFile(t, filepath.Join(data, "hello.txt"), "hello\n", 0o644)
	cfg = filepath.Join(dir, "config.toml")
	writeFile(t, cfg, withTransport(fmt.Sprintf("state_dir = %q\n\n[[source]]\nslug = \"data\"\nkind = \"local\"\npath = %q\n", filepath.Join(dir, "state"), data)), 0o644)
	t.Cleanup(func() {
		// A failed test must not leave the daemon or the mount behind.
		for _, pid := range daemonsOf(cfg) {
			syscall.Kill(pid, syscall.SIGTERM)
		}
		if mounted(mnt) {
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	return cfg, mnt, data
}

// mountedAs returns the filesystem type of the mount at dir.
func mountedAs(dir string) string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			for i, x := range f {
				if x == "-" && i+1 < len(f) {
					return f[i+1]
				}
			}
		}
	}
	return ""
}

// unmountAndWait runs umount(8) on mnt and waits for cfg's daemon to exit.
func unmountAndWait(t *testing.T, cfg, mnt string) {
	t.Helper()
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v\n%s", mnt, err, out)
	}
	eventually(t, 15*time.Second, "the daemon exits after umount", func() bool { return len(daemonsOf(cfg)) == 0 })
	if mounted(mnt) {
		t.Fatalf("%s is still mounted after umount", mnt)
	}
}

// TestMountTypeFuseNeuralisfs mounts with mount(8) through the helper:
// mount returns once the files are there, in the background daemon's mount
// of type fuse.neuralisfs, and umount unmounts it and ends the daemon.
func TestMountTypeFuseNeuralisfs(t *testing.T) {
	requireFUSE(t)
	installHelper(t)
	cfg, mnt, _ := helperEnv(t)
	out, err := exec.Command("mount", "-t", "fuse.neuralisfs", cfg, mnt, "-o", "allow_other,entry_timeout=0.5").CombinedOutput()
	if err != nil {
		t.Fatalf("mount -t fuse.neuralisfs: %v\n%s", err, out)
	}
	// No waiting: mount(8) returned, so the mount serves.
	got, err := os.ReadFile(filepath.Join(mnt, "data", "hello.txt"))
	if err != nil || string(got) != "hello\n" {
		t.Fatalf("reading through the mount right after mount(8) returned: %q, %v", got, err)
	}
	if typ := mountedAs(mnt); typ != "fuse.neuralisfs" {
		t.Errorf("%s is mounted as %q; want fuse.neuralisfs", mnt, typ)
	}
	pids := daemonsOf(cfg)
	if len(pids) != 1 {
		t.Fatalf("%d daemons serve %s; want 1", len(pids), cfg)
	}
	if sid, _ := unix.Getsid(pids[0]); sid != pids[0] {
		t.Errorf("the daemon (pid %d) is in session %d, not a session of its own", pids[0], sid)
	}
	unmountAndWait(t, cfg, mnt)
	log, _ := os.ReadFile(filepath.Join(filepath.Dir(cfg), "state", "mount.log"))
	if !strings.Contains(string(log), "unmounted from outside") {
		t.Errorf("state/mount.log does not say the daemon saw the umount:\n%s", log)
	}
}

// TestFstabLine mounts a line of a temporary fstab (mount -T FSTAB DIR, as
// `mount DIR` reads /etc/fstab), with the options an fstab line carries
// and ro, which makes every source read-only.
func TestFstabLine(t *testing.T) {
	requireFUSE(t)
	installHelper(t)
	cfg, mnt, data := helperEnv(t)
	fstab := filepath.Join(t.TempDir(), "fstab")
	writeFile(t, fstab, fmt.Sprintf("# a test fstab\n%s %s fuse.neuralisfs defaults,_netdev,nofail,ro,x-systemd.automount 0 0\n", cfg, mnt), 0o644)
	if out, err := exec.Command("mount", "-T", fstab, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount -T %s %s: %v\n%s", fstab, mnt, err, out)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "data", "hello.txt")); err != nil || string(got) != "hello\n" {
		t.Fatalf("reading through the fstab mount: %q, %v", got, err)
	}
	err := os.WriteFile(filepath.Join(mnt, "data", "new.txt"), []byte("x"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing on a mount with -o ro: %v; want EROFS", err)
	}
	if _, err := os.Stat(filepath.Join(data, "new.txt")); err == nil {
		t.Errorf("the write reached the backing folder")
	}
	unmountAndWait(t, cfg, mnt)
}

// TestMountHelperFails: mount(8) fails with the daemon's own sentence when
// an option is unknown or the mount cannot be made, and leaves nothing.
func TestMountHelperFails(t *testing.T) {
	requireFUSE(t)
	installHelper(t)
	cfg, mnt, _ := helperEnv(t)
	out, err := exec.Command("mount", "-t", "fuse.neuralisfs", cfg, mnt, "-o", "noexec").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `mount option "noexec" is not one neuralisfs knows`) {
		t.Errorf("mount -o noexec: %v\n%s\nwant a failure naming the option", err, out)
	}
	// The daemon itself fails: the mountpoint is already mounted by
	// another neuralisfs.
	e := newEnv(t, "", src{slug: "x"})
	out, err = exec.Command("mount", "-t", "fuse.neuralisfs", cfg, e.mnt).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already mounted") {
		t.Errorf("mount over a serving mount: %v\n%s\nwant the daemon's error", err, out)
	}
	if mounted(mnt) || len(daemonsOf(cfg)) != 0 {
		t.Errorf("a failed mount left a mount or a daemon behind")
	}
}
