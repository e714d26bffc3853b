package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// TestRevertRestoresOnlyWhatTheCallerCouldRead: a record keeps its file's
// owner and mode, and a caller other than root gets back, or sees the
// digest of, only content it could read then, whatever the file is now.
// Before, the check held only for a file that was gone: an agent that
// may write a name made it anew, empty, and reverted it to root's 0600
// content, or reverted a file root had sanitized and made writable to
// the secret it held before, and read it (found by a red-team pass).
// The caller's own private file still comes back.
func TestRevertRestoresOnlyWhatTheCallerCouldRead(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	must(t, os.Chmod(e.b("data"), 0o777))
	sh(t, `set -e; cd "$M"
echo TOKEN=hunter2 > sanitized; chmod 600 sanitized; echo clean > sanitized; chmod 666 sanitized
echo ROOT-ONLY > gone; chmod 600 gone; rm gone`, "M="+e.m("data"))
	if out, err := run(t, 1001, `set -e; cd "$M"; echo mine > own; chmod 600 own; echo changed > own; touch gone`, "M="+e.m("data")); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	secret := "sha256:" + sha256hex("TOKEN=hunter2\n")
	// The record that kept content, as root lists it.
	keptAt := func(name, content string) string {
		out := sh(t, binPath+" history --json -c "+e.cfg+" data://"+name)
		var recs []struct{ ID, Before string }
		if err := json.Unmarshal([]byte(out), &recs); err != nil {
			t.Fatalf("history of %s: %v\n%s", name, err, out)
		}
		for _, r := range recs {
			if r.Before == "sha256:"+sha256hex(content) {
				return r.ID
			}
		}
		t.Fatalf("no record of %s kept %q:\n%s", name, content, out)
		return ""
	}
	if out, err := run(t, 1001, binPath+" history --json -c "+e.cfg+" data://sanitized"); err != nil || strings.Contains(out, secret) {
		t.Errorf("the agent's history of a file it may read now shows the digest of the 0600 content before: %v\n%s", err, out)
	}
	if out := sh(t, binPath+" history --json -c "+e.cfg+" data://sanitized"); !strings.Contains(out, secret) {
		t.Errorf("root's history lacks the digest:\n%s", out)
	}
	for name, was := range map[string]string{"sanitized": "TOKEN=hunter2\n", "gone": "ROOT-ONLY\n"} {
		want := map[string]string{"sanitized": "clean\n", "gone": ""}[name]
		out, err := run(t, 1001, binPath+" revert --to "+keptAt(name, was)+" -c "+e.cfg+" data://"+name)
		if err == nil || !strings.Contains(out, "only they, or root, can bring it back") {
			t.Errorf("the agent's revert of %s to root's 0600 content: %v\n%s", name, err, out)
		}
		if b, err := os.ReadFile(e.b("data", name)); err != nil || string(b) != want {
			t.Errorf("%s after the refused revert: %q, %v; want %q", name, b, err, want)
		}
	}
	if out, err := run(t, 1001, binPath+" revert --to "+keptAt("own", "mine\n")+" -c "+e.cfg+" data://own"); err != nil {
		t.Errorf("the agent's revert of its own 0600 file: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(e.b("data", "own")); err != nil || string(b) != "mine\n" {
		t.Errorf("own after the revert: %q, %v; want mine", b, err)
	}
}

func sha256hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}
