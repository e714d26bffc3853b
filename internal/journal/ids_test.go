package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The ids History gives are enciphered: they do not show the records'
// order (so a caller shown some records cannot count the others between
// them), they stay the same across an Open, and Plan and Content take
// them back.
func TestShownIDsDoNotCountRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	j := openJournal(t, Options{Dir: dir})
	var shown []string
	for i := range 40 {
		r := save(t, j, "open", fmt.Sprintf("data://f%d", i%3), []byte(fmt.Sprintf("version %d\n", i)))
		shown = append(shown, r.ID)
	}
	hex16 := regexp.MustCompile(`^[0-9a-f]{16}$`)
	seen := map[string]bool{}
	for i, id := range shown {
		if !hex16.MatchString(id) {
			t.Errorf("record %d is shown as %q, not 16 hex digits", i, id)
		}
		if seen[id] {
			t.Errorf("two records are shown as %s", id)
		}
		seen[id] = true
		stored := storedID(j.ids, id)
		if seq, err := parseID(stored); err != nil || seq != uint64(i+1) {
			t.Errorf("record %d: %s is stored as %q (seq %d, %v)", i, id, stored, seq, err)
		}
		if strings.Contains(id, fmt.Sprint(i+1)+"-") {
			t.Errorf("record %d is shown with its sequence number: %s", i, id)
		}
	}
	// Consecutive records do not share a prefix more than chance would.
	same := 0
	for i := 1; i < len(shown); i++ {
		if shown[i][:2] == shown[i-1][:2] {
			same++
		}
	}
	if same > 3 {
		t.Errorf("%d of %d consecutive ids share their first byte: %v", same, len(shown)-1, shown)
	}
	old := shown[5] // data://f2, version 5
	p, err := j.Plan("data://f2", old)
	if err != nil || p.Record.ID != old {
		t.Fatalf("Plan(data://f2, %s) = %+v, %v", old, p.Record, err)
	}
	if _, err := j.Plan("data://f1", old); err == nil || !strings.Contains(err.Error(), old) || strings.Contains(err.Error(), "6-") {
		t.Errorf("Plan of another uri's record: %v; want an error naming %s as shown", err, old)
	}
	if b, err := content(j, p.Record); err != nil || string(b) != "version 5\n" {
		t.Errorf("Content(%s) = %q, %v", old, b, err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, idKeyName)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the key: %v, %v", st, err)
	}
	j2 := openJournal(t, Options{Dir: dir})
	if got := newest(t, j2, "data://f0").ID; got != shown[39] {
		t.Errorf("after Open data://f0's newest record is shown as %s; it was %s", got, shown[39])
	}
	if _, err := j2.Plan("data://f2", old); err != nil {
		t.Errorf("Plan(%s) after Open: %v", old, err)
	}
	j2.Close()
	// A damaged key is a clear error, and nothing is changed.
	if err := os.WriteFile(filepath.Join(dir, idKeyName), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, idKeyName)) {
		t.Errorf("Open with a damaged key: %v; want an error naming it", err)
	}
}
