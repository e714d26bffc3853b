package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHeldChangesOfAnUnavailableSourceAreNotListedAsNone: when the
// source of a layer cannot be opened, its held changes cannot be listed;
// review says so (to root, and to the agent of its own) instead of "no
// held changes", approve --all leaves them held, and they are listed
// again once the source is back.
func TestHeldChangesOfAnUnavailableSourceAreNotListedAsNone(t *testing.T) {
	e, vd := heldEdgeEnv(t, "echo base > keep.txt")
	if out, err := run(t, 1001, `echo agent > "$V/new.txt"`, "V="+vd); err != nil {
		t.Fatalf("agent write: %v %s", err, out)
	}
	review := func(uid int, args ...string) (stdout, stderr string) {
		t.Helper()
		cmd := exec.Command("setpriv", append([]string{"--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(uid), "--clear-groups", binPath, "review"}, append(args, "-c", e.cfg)...)...)
		cmd.Dir = "/"
		var o, s strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &s
		if err := cmd.Run(); err != nil {
			t.Fatalf("review %v as %d: %v\n%s%s", args, uid, err, o.String(), s.String())
		}
		return o.String(), s.String()
	}
	if out, _ := review(0, "list"); !strings.Contains(out, "new.txt") {
		t.Fatalf("review list before: %s", out)
	}
	aside := e.b("d") + ".aside"
	must(t, os.Rename(e.b("d"), aside))
	eventually(t, 10*time.Second, "the source is unavailable", func() bool {
		_, errs := review(0, "list")
		return strings.Contains(errs, "cannot be opened")
	})
	for _, uid := range []int{0, 1001} {
		out, errs := review(uid, "list")
		if strings.Contains(out, "no held changes\n") || !strings.Contains(out, "no held changes listed") ||
			!strings.Contains(errs, "agent's held changes in d, if any, are not listed") {
			t.Errorf("review list as %d with the source gone:\n%s%s", uid, out, errs)
		}
		// Why, which names the backing folder, is told to root only.
		if named := strings.Contains(errs, e.b("d")); named != (uid == 0) {
			t.Errorf("review list as %d names the backing folder: %v\n%s", uid, named, errs)
		}
	}
	// Inside the mount, the agent's own list says so in a comment line.
	if out, err := run(t, 1001, `cat "$V/.neuralis/review/list"`, "V="+filepath.Dir(vd)); err != nil ||
		out != "# agent's held changes in d, if any, are not listed: the source cannot be opened\n" {
		t.Errorf(".neuralis/review/list with the source gone: %v\n%s", err, out)
	}
	// alice may approve nothing of the agent's: she learns nothing of it.
	if out, errs := review(1002, "list"); out != "no held changes\n" || errs != "" {
		t.Errorf("review list as alice with the source gone:\n%s%s", out, errs)
	}
	out, errs := review(0, "approve", "--all")
	if strings.Contains(out, "approved") || !strings.Contains(errs, "not listed") {
		t.Errorf("approve --all with the source gone:\n%s%s", out, errs)
	}
	must(t, os.Rename(aside, e.b("d")))
	eventually(t, 10*time.Second, "the source is back", func() bool {
		out, errs := review(0, "list")
		return strings.Contains(out, "new.txt") && errs == ""
	})
	if out, _ := review(0, "approve", "--all"); !strings.Contains(out, "approved") {
		t.Errorf("approve --all once the source is back: %s", out)
	}
	if b, err := os.ReadFile(e.b("d", "new.txt")); err != nil || string(b) != "agent\n" {
		t.Errorf("new.txt after approval: %q %v", b, err)
	}
}
