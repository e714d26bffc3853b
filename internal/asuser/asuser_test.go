package asuser

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// dirRoot opens paths below a folder (as mounts.Root does, without its
// confinement, which is not what is tested here).
type dirRoot string

func (d dirRoot) Open(rel string, flags int, mode uint32) (int, error) {
	return unix.Open(filepath.Join(string(d), rel), flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
}

func TestWorkerChecksAsTheUser(t *testing.T) {
	if os.Geteuid() != 0 {
		if _, err := Start(Cred{UID: 1001, GID: 1001}); !errors.Is(err, ErrNotRoot) {
			t.Errorf("Start without root: %v", err)
		}
		t.Skip("taking another user's identity needs root")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	write := func(name string, mode os.FileMode, uid, gid int) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		os.Chown(p, uid, gid)
	}
	write("private", 0o600, 0, 0)
	write("public", 0o644, 0, 0)
	write("group", 0o640, 0, 4242)
	if err := os.Mkdir(filepath.Join(dir, "closed"), 0o700); err != nil {
		t.Fatal(err)
	}
	write("closed/inside", 0o644, 0, 0)
	w, err := Start(Cred{UID: 1001, GID: 1001})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r := dirRoot(dir)
	for name, want := range map[string]bool{"private": false, "public": true, "group": false, "closed/inside": false} {
		if got := w.CanRead(r, name); got != want {
			t.Errorf("uid 1001 CanRead %s = %v; want %v", name, got, want)
		}
	}
	// The batch answers as one call each.
	names := []string{"private", "public", "group", "closed/inside", "absent"}
	if got := w.CanReadEach(r, names); fmt.Sprint(got) != "[false true false false false]" {
		t.Errorf("uid 1001 CanReadEach %v = %v", names, got)
	}
	if w.CanList(r, "closed") || !w.CanList(r, "") {
		t.Errorf("CanList: closed %v, top %v", w.CanList(r, "closed"), w.CanList(r, ""))
	}
	for name, want := range map[string]bool{"private": true, "closed": true, "closed/inside": false, "closed/gone/x": false, "gone/deeper/x": true} {
		if got := w.CanSee(r, name); got != want {
			t.Errorf("uid 1001 CanSee %s = %v; want %v", name, got, want)
		}
	}
	// Supplementary groups count, as for the real user.
	g, err := Start(Cred{UID: 1001, GID: 1001, Groups: []uint32{4242}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if !g.CanRead(r, "group") {
		t.Errorf("a member of group 4242 cannot read a 0640 file of that group")
	}
	// Creating as the user makes the user's file; the daemon's own threads
	// keep root's identity throughout.
	if err := Run(Cred{UID: 1001, GID: 1001}, func() error {
		return os.WriteFile(filepath.Join(dir, "made"), nil, 0o644)
	}); !errors.Is(err, syscall.EACCES) {
		t.Errorf("uid 1001 wrote into a 0755 root folder: %v", err)
	}
	os.Chmod(dir, 0o777)
	if err := Run(Cred{UID: 1001, GID: 1001}, func() error {
		return os.WriteFile(filepath.Join(dir, "made"), nil, 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	syscall.Stat(filepath.Join(dir, "made"), &st)
	if st.Uid != 1001 || st.Gid != 1001 {
		t.Errorf("a file made as uid 1001 belongs to %d:%d", st.Uid, st.Gid)
	}
	if u, _ := unix.SetfsuidRetUid(-1); u != 0 {
		t.Errorf("the test's own thread has fsuid %d", u)
	}
	if !(Cred{UID: 0}).Exempt() || (Cred{UID: 1001}).Exempt() {
		t.Errorf("Exempt")
	}
	own, _ := os.Getgroups()
	for _, gid := range Groups(uint32(os.Getpid())) {
		if !slices.Contains(own, int(gid)) {
			t.Errorf("Groups(self) has %d; os.Getgroups says %v", gid, own)
		}
	}
}
