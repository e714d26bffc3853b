package journal

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// openJournal opens a journal under a fresh directory (unless o.Dir is set)
// and closes it when the test ends.
func openJournal(tb testing.TB, o Options) *Journal {
	tb.Helper()
	if o.Dir == "" {
		o.Dir = filepath.Join(tb.TempDir(), "journal")
	}
	j, err := Open(o)
	if err != nil {
		tb.Fatalf("Open(%+v): %v", o, err)
	}
	tb.Cleanup(func() { j.Close() })
	return j
}

// source returns a read func for Save that serves data and counts calls.
func source(data []byte, calls *int) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) {
		if calls != nil {
			*calls++
		}
		return io.NopCloser(bytes.NewReader(data)), nil
	}
}

func ev(op, uri string) Event {
	return Event{Principal: "agent", UID: 1001, PID: 42, Op: op, URI: uri}
}

// save journals data as the content of uri before op and returns the record.
func save(tb testing.TB, j *Journal, op, uri string, data []byte) Record {
	tb.Helper()
	if err := j.Save(ev(op, uri), 0o640, int64(len(data)), source(data, nil)); err != nil {
		tb.Fatalf("Save(%s %s): %v", op, uri, err)
	}
	return newest(tb, j, uri)
}

func newest(tb testing.TB, j *Journal, uri string) Record {
	tb.Helper()
	h, err := j.History(uri, nil)
	if err != nil || len(h) == 0 {
		tb.Fatalf("History(%s) = %v, %v; want records", uri, h, err)
	}
	return h[0]
}

func content(j *Journal, r Record) ([]byte, error) {
	rc, err := j.Content(r)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func hexOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// pattern returns n bytes that differ with seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	if n > 0 {
		b[0] = seed
	}
	return b
}

func names(tb testing.TB, dir string) []string {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
