package journal

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

func openTail(t *testing.T, path string, window int) *tailFile {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return newTailFile(f, st.Size(), window)
}

// checkTail reads path and wants content followed by nothing but NUL bytes
// (exact says: by nothing at all).
func checkTail(t *testing.T, path string, content []byte, exact bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < len(content) || !bytes.Equal(b[:len(content)], content) {
		t.Fatalf("file holds %d bytes that are not the %d appended", len(b), len(content))
	}
	if rest := b[len(content):]; exact && len(rest) != 0 || len(bytes.TrimRight(rest, "\x00")) != 0 {
		t.Fatalf("past the %d bytes appended the file holds %q (exact %v)", len(content), rest[:min(len(rest), 32)], exact)
	}
}

// Appends of every size, across windows and past them, read back exactly;
// while open the file is its content and then NUL bytes, after close only
// its content, and reopening appends after it.
func TestTailFileAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tail")
	window := 4 * os.Getpagesize()
	tf := openTail(t, path, window)
	var want []byte
	for i, n := range []int{1, 100, mapMax, mapMax + 1, 7, 4096, 3*4096 + 5, 1000, window, 7, 0, 2 * window, 33} {
		b := pattern(n, byte(i))
		if err := tf.write(b); err != nil {
			t.Fatal(err)
		}
		want = append(want, b...)
		checkTail(t, path, want, false)
	}
	if tf.direct {
		t.Error("the mapping faulted on a file nobody touched")
	}
	if err := tf.close(); err != nil {
		t.Fatal(err)
	}
	checkTail(t, path, want, true)

	// An append larger than mapMax is written, not mapped: no window.
	tf = openTail(t, path, window)
	big := pattern(mapMax+1, 77)
	if err := tf.write(big); err != nil {
		t.Fatal(err)
	}
	want = append(want, big...)
	if tf.win != nil {
		t.Errorf("an append of %d bytes mapped a window", len(big))
	}
	if err := tf.close(); err != nil {
		t.Fatal(err)
	}
	checkTail(t, path, want, true)

	tf = openTail(t, path, window)
	more := pattern(5000, 99)
	if err := tf.write(more); err != nil {
		t.Fatal(err)
	}
	want = append(want, more...)
	checkTail(t, path, want, false)
	if err := tf.truncate(int64(len(want) - 10)); err != nil {
		t.Fatal(err)
	}
	want = want[:len(want)-10]
	if err := tf.write([]byte("end")); err != nil {
		t.Fatal(err)
	}
	want = append(want, "end"...)
	if err := tf.close(); err != nil {
		t.Fatal(err)
	}
	checkTail(t, path, want, true)
}

// A file cut behind the appender's back makes the mapped copy fault: the
// append falls back to pwrite(2) instead of crashing the process, and
// nothing appended is lost.
func TestTailFileCutBehindItsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tail")
	tf := openTail(t, path, 4*os.Getpagesize())
	// Small appends, mapped, up to near the end of the first page.
	var first []byte
	for i := range 4 {
		b := pattern(1000, byte(i))
		if err := tf.write(b); err != nil {
			t.Fatal(err)
		}
		first = append(first, b...)
	}
	if tf.win == nil {
		t.Fatal("the small appends were not mapped")
	}
	// Someone else cuts the file to its content: the rest of the window
	// is now past the end of the file, and the next append crosses into
	// a page that is not there.
	if err := os.Truncate(path, int64(len(first))); err != nil {
		t.Fatal(err)
	}
	second := pattern(mapMax, 9)
	if err := tf.write(second); err != nil {
		t.Fatal(err)
	}
	if !tf.direct {
		t.Error("the append did not fault, so this test proves nothing")
	}
	third := []byte("third")
	if err := tf.write(third); err != nil {
		t.Fatal(err)
	}
	if err := tf.close(); err != nil {
		t.Fatal(err)
	}
	checkTail(t, path, append(append(first, second...), third...), true)
}

// A journal that is not closed (a killed daemon) leaves records.jsonl
// with the NUL tail of its window: Open reads every record, says nothing
// was torn, and appends after the last record, not after the NUL bytes.
func TestRecordsWindowAfterKill(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	j := openJournal(t, Options{Dir: dir})
	save(t, j, "open", "data://a", []byte("a1"))
	save(t, j, "unlink", "data://b", []byte("b1"))
	snap := snapshot(t, dir) // as a SIGKILL would leave it
	j.Close()
	if b, _ := os.ReadFile(filepath.Join(snap, recordsName)); !bytes.HasSuffix(b, []byte{0}) {
		t.Fatalf("a live records.jsonl (%d bytes) does not end in its window's NUL bytes, so this test proves nothing", len(b))
	}
	var logged bytes.Buffer
	j2 := openJournal(t, Options{Dir: snap, Log: slog.New(slog.NewTextHandler(&logged, nil))})
	save(t, j2, "open", "data://c", []byte("c1"))
	j2.Close()
	if bytes.Contains(logged.Bytes(), []byte("torn")) {
		t.Errorf("Open called the window's NUL bytes a torn line: %s", logged.String())
	}
	b, err := os.ReadFile(filepath.Join(snap, recordsName))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	for _, ln := range lines {
		if len(ln) == 0 || ln[0] != '{' {
			t.Errorf("records.jsonl holds a line that is not a record: %q", ln[:min(len(ln), 32)])
		}
	}
	j3 := openJournal(t, Options{Dir: snap})
	if all, _ := j3.History("data://", nil); len(all) != 3 {
		t.Errorf("records after reopening = %d; want 3", len(all))
	}
}
