package journal

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"
	"time"
)

// Batched mode writes copies and records without waiting for fsync; they
// must read back the same, survive a reopen, and be synced within the
// flush delay.
func TestBatchedSaveRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j, err := Open(Options{Dir: dir, Batched: true})
	if err != nil {
		t.Fatal(err)
	}
	content := bytes.Repeat([]byte("batched "), 1000)
	ev := Event{Principal: "p", Op: "open", URI: "d://f"}
	read := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(content)), nil }
	if err := j.Save(ev, 0o640, int64(len(content)), read); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		j.wmu.Lock()
		pending := j.unsynced
		j.wmu.Unlock()
		if !pending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("batched records were not synced within 2s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, tmpPrefix+"*")); len(tmps) > 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
	j, err = Open(Options{Dir: dir, Batched: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	recs, err := j.History("d://f", nil)
	if err != nil || len(recs) != 1 || !recs[0].Kept {
		t.Fatalf("history after reopen: %+v %v", recs, err)
	}
	rc, err := j.Content(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, content) {
		t.Errorf("content after reopen: %d bytes, %v", len(got), err)
	}
}
