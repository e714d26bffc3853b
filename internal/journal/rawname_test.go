package journal

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"
)

// TestURIsThatAreNotUTF8SurviveAReopen: a record of z\xff is one of
// z\xff after a reopen, not of z\uFFFD, and so is a rename's from (both
// the from of a new record and the from line added to a saved one).
func TestURIsThatAreNotUTF8SurviveAReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	j := openJournal(t, Options{Dir: dir})
	bad, lookalike := "data://z\xff", "data://z\uFFFD"
	save(t, j, "open", bad, []byte("one"))
	save(t, j, "open", lookalike, []byte("two"))
	save(t, j, "rename", "data://t\xfe", []byte("target"))
	if err := j.Renamed(ev("rename", "data://t\xfe"), "data://s\xfd"); err != nil {
		t.Fatal(err)
	}
	if err := j.Renamed(ev("rename", "data://n\xfc"), "data://m\xfb"); err != nil {
		t.Fatal(err)
	}
	check := func(j *Journal, when string) {
		t.Helper()
		if r := newest(t, j, bad); r.URI != bad || r.Size != 3 {
			t.Errorf("%s: %q's newest record is %+v", when, bad, r)
		}
		if h, _ := j.History(lookalike, nil); len(h) != 1 || h[0].Size != 3 {
			t.Errorf("%s: %q's history is %+v", when, lookalike, h)
		}
		if r := newest(t, j, "data://t\xfe"); r.From != "data://s\xfd" {
			t.Errorf("%s: rename onto t\\xfe is from %q", when, r.From)
		}
		if r := newest(t, j, "data://n\xfc"); r.From != "data://m\xfb" {
			t.Errorf("%s: rename to n\\xfc is from %q", when, r.From)
		}
	}
	check(j, "before the reopen")
	j.Close()
	j2 := openJournal(t, Options{Dir: dir})
	check(j2, "after the reopen")
	// The control socket carries records as JSON the same way.
	r := newest(t, j2, bad)
	b, err := json.Marshal([]Record{r})
	if err != nil || !bytes.Contains(b, []byte(`"uri":"\u0000`)) {
		t.Fatalf("json of a record of %q: %s, %v", bad, b, err)
	}
	var back []Record
	if err := json.Unmarshal(b, &back); err != nil || len(back) != 1 || back[0].URI != bad {
		t.Errorf("json of a record of %q came back as %+v, %v", bad, back, err)
	}
}
