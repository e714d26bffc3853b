package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ioctlPy issues FS_IOC_GETFSLABEL, an ioctl no filesystem without ioctls
// answers: through the mount it used to run with the daemon's privileges
// on the backing file, the same way EXT4_IOC_SHUTDOWN would have shut the
// backing filesystem down for any caller with a read-only descriptor.
const ioctlPy = `
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
FS_IOC_GETFSLABEL = (2 << 30) | (256 << 16) | (0x94 << 8) | 49
try:
    fcntl.ioctl(fd, FS_IOC_GETFSLABEL, bytearray(256))
    print("passed through")
except OSError as e:
    print(e.strerror)
`

func TestIoctlsDoNotReachTheBackingFilesystem(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	writeFile(t, e.b("data", "f"), "x\n", 0o644)
	writeFile(t, filepath.Join(e.dir, "plain"), "x\n", 0o644)
	// The plain file answers (so the ioctl is a real one here), the mount
	// does not, for root and for another uid.
	if out := sh(t, "/usr/bin/python3 -c \"$P\" \"$F\"", "P="+ioctlPy, "F="+filepath.Join(e.dir, "plain")); !strings.Contains(out, "passed through") {
		t.Skipf("FS_IOC_GETFSLABEL does not work on the backing filesystem here: %s", out)
	}
	for _, uid := range []int{0, 1001} {
		out, _ := run(t, uid, "/usr/bin/python3 -c \"$P\" \"$F\"", "P="+ioctlPy, "F="+e.m("data", "f"))
		if strings.TrimSpace(out) != "Inappropriate ioctl for device" {
			t.Errorf("uid %d: FS_IOC_GETFSLABEL through the mount: %q, want ENOTTY", uid, out)
		}
	}
}

// lsattr and chattr work as on the backing folder, and the kernel's checks
// hold: another uid cannot make its own file immutable through the mount,
// though the daemon that would set the flag is root.
func TestInodeFlagsAgainstBackingFolder(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	writeFile(t, e.b("data", "f"), "x\n", 0o644)
	writeFile(t, e.b("data", "mine"), "x\n", 0o644)
	must(t, os.Chown(e.b("data", "mine"), 1001, 1001))
	if out, err := exec.Command("lsattr", e.b("data", "f")).CombinedOutput(); err != nil {
		t.Skipf("the backing filesystem has no inode flags: %s", out)
	}
	sh(t, `set -e
chattr +A "$M/f"
lsattr "$B/f" | grep -q '^-------A'
lsattr "$M/f" | grep -q '^-------A'
chattr -A "$M/f"
lsattr "$B/f" | grep -q '^--------'
chattr +i "$M/f"
! echo more >> "$M/f"
chattr -i "$M/f"
echo more >> "$M/f"
lsattr -d "$M" >/dev/null
`, "M="+e.m("data"), "B="+e.b("data"))
	out, err := run(t, 1001, `chattr +i "$M/mine" 2>&1; chattr +A "$M/mine" && lsattr "$M/mine"; chattr +A "$M/f"`, "M="+e.m("data"))
	if err == nil {
		t.Errorf("uid 1001 set a flag on root's file:\n%s", out)
	}
	if !strings.Contains(out, "Operation not permitted while setting flags on "+e.m("data", "mine")) {
		t.Errorf("uid 1001 was not refused +i on its own file:\n%s", out)
	}
	if !strings.Contains(out, "-------A") {
		t.Errorf("uid 1001 could not set +A on its own file (allowed natively):\n%s", out)
	}
	b, _ := exec.Command("lsattr", e.b("data", "mine")).CombinedOutput()
	if strings.Contains(strings.Fields(string(b))[0], "i") {
		t.Fatalf("the backing file became immutable: %s", b)
	}
}
