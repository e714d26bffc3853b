package tests

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// A file unlinked (or renamed over) while it is open through the mount
// keeps changing through its descriptors: the journal must keep the bytes
// it had when its name went, and the holders must see a link count of 0,
// as on disk (pjdfstest unlink/14). Keeping it by a hard link did neither.
func TestJournalKeepsOpenFilesAsTheyWere(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	orig := strings.Repeat("original bytes\n", 20000) // 300 KB: past any small-file path
	for _, how := range []string{"unlink", "rename"} {
		name := "open-" + how
		writeFile(t, e.b("data", name), orig, 0o644)
		f, err := os.OpenFile(e.m("data", name), os.O_RDWR, 0)
		must(t, err)
		if how == "unlink" {
			must(t, os.Remove(e.m("data", name)))
		} else {
			writeFile(t, e.m("data", "other"), "replacement\n", 0o644)
			must(t, os.Rename(e.m("data", "other"), e.m("data", name)))
		}
		var st syscall.Stat_t
		must(t, syscall.Fstat(int(f.Fd()), &st))
		if st.Nlink != 0 {
			t.Errorf("%s: the open file shows %d links after its name went, want 0", how, st.Nlink)
		}
		_, err = f.WriteAt([]byte("WRITTEN AFTER THE NAME WENT"), 0)
		must(t, err)
		must(t, f.Close())
		if how == "unlink" {
			must(t, exec.Command(binPath, "revert", "-c", e.cfg, "data://"+name).Run())
		} else {
			recs := e.history(t, "data://"+name)
			if len(recs) == 0 {
				t.Fatalf("no history for the renamed-over file")
			}
			var id string
			for _, r := range recs {
				if r.Op == "rename" {
					id = r.ID
				}
			}
			out, err := exec.Command(binPath, "revert", "-c", e.cfg, "--to", id, "data://"+name).CombinedOutput()
			if err != nil {
				t.Fatalf("revert --to %s: %v %s", id, err, out)
			}
		}
		if b, err := os.ReadFile(e.b("data", name)); err != nil || string(b) != orig {
			t.Errorf("%s: revert restored %d bytes starting %q, not the %d bytes the file had when its name went (%v)", how, len(b), b[:min(len(b), 40)], len(orig), err)
		}
	}
}
