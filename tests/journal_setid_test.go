package tests

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRevertBringsBackNoSetIDFile: a file a revert brings back belongs
// to whoever reverts (the journal does not record its owner), so it
// comes back without its set-id bits. Before, root's revert of a file an
// agent had made set-uid and removed made a root-owned set-uid file of
// the agent's bytes (found by a red-team pass).
func TestRevertBringsBackNoSetIDFile(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	must(t, os.Chmod(e.b("data"), 0o777))
	if out, err := run(t, 1001, `set -e; cd "$D"; cp /bin/true x; chmod 6755 x; stat -c %a x; rm x`, "D="+e.m("data")); err != nil || out != "6755\n" {
		t.Fatalf("agent: %v %q", err, out)
	}
	e.revert(t, "data://x")
	var st syscall.Stat_t
	must(t, syscall.Stat(e.b("data", "x"), &st))
	if st.Mode&0o7777 != 0o755 || st.Uid != 0 {
		t.Errorf("revert brought x back as mode %04o, uid %d; want 0755 and root's", st.Mode&0o7777, st.Uid)
	}
}

// TestHistoryShowsNoDigestOfUnreadableContent: history shows a record's
// digest of the content before it only to a reader who may read the file
// (its own file permissions); others see "kept". A SHA-256 of a 0600
// file of root's let the agent test guesses of it offline, a PIN say
// (found by a red-team pass).
func TestHistoryShowsNoDigestOfUnreadableContent(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	sh(t, `set -e; cd "$M"
echo 1234 > pin; chmod 600 pin; echo 5678 > pin
echo one > pub; chmod 644 pub; echo two > pub`, "M="+e.m("data"))
	pinDigest := "sha256:a883dafc480d466ee04e0d6da986bd78eb1fdd2178d04693723da3a8f95d42f4"
	for _, uid := range []int{0, 1001} {
		out, err := run(t, uid, binPath+" history --json -c "+e.cfg+" data://")
		if err != nil {
			t.Fatalf("history as %d: %v\n%s", uid, err, out)
		}
		shown := strings.Contains(out, pinDigest)
		if shown != (uid == 0) || !strings.Contains(out, `"before": "sha256:`) {
			t.Errorf("history --json as %d shows the pin's digest: %v\n%s", uid, shown, out)
		}
		if uid != 0 && !strings.Contains(out, `"before": "kept"`) {
			t.Errorf("history --json as %d does not say the pin's content is kept:\n%s", uid, out)
		}
		in, err := run(t, uid, `cat "$F"`, "F="+filepath.Join(e.mnt, ".neuralis", "history", "data", "pin"))
		if err != nil || strings.Contains(in, pinDigest[:19]) != (uid == 0) || !strings.Contains(in, "data://pin") {
			t.Errorf(".neuralis/history/data/pin as %d: %v\n%s", uid, err, in)
		}
	}
}
