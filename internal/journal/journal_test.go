package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSaveContentRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	j := openJournal(t, Options{Dir: dir})
	sizes := []int{0, 1, 1000, smallBytes - 1, smallBytes, smallBytes + 17, 3 << 20}
	for i, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			data := pattern(n, byte(i))
			uri := fmt.Sprintf("data://f%d", n)
			r := save(t, j, "open", uri, data)
			if r.Before != digest(data) || !r.Kept || r.Size != int64(n) || r.Mode != 0o640 ||
				r.Op != "open" || r.Principal != "agent" || r.UID != 1001 || r.PID != 42 || r.ID == "" {
				t.Errorf("record = %+v", r)
			}
			got, err := content(j, r)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Content = %d bytes, %v; want %d bytes back", len(got), err, n)
			}
			fi, err := os.Stat(filepath.Join(dir, "objects", hexOf(data)))
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("object: %v, %v; want mode 0600", fi, err)
			}
		})
	}
	for _, d := range []string{dir, filepath.Join(dir, "objects")} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want mode 0700", d, fi, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, recordsName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("records: %v, %v; want mode 0600", fi, err)
	}
	// Everything survives a reopen.
	j.Close()
	j2 := openJournal(t, Options{Dir: dir})
	for i, n := range sizes {
		r := newest(t, j2, fmt.Sprintf("data://f%d", n))
		if got, err := content(j2, r); err != nil || !bytes.Equal(got, pattern(n, byte(i))) {
			t.Errorf("after reopen %d: %d bytes, %v", n, len(got), err)
		}
	}
}

func TestOpenNarrowsAndLocks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	openJournal(t, Options{Dir: dir})
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("existing dir mode %v; want 0700", fi.Mode().Perm())
	}
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrLocked) {
		t.Errorf("second Open = %v; want ErrLocked", err)
	}
}

func TestDedupe(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	j := openJournal(t, Options{Dir: dir})
	for _, n := range []int{10, smallBytes + 5} { // in memory, and streamed
		data := pattern(n, 9)
		var steps []string
		j.trace = func(s string) { steps = append(steps, s) }
		for i := range 3 {
			steps = nil
			r := save(t, j, "open", fmt.Sprintf("data://d%d/%d", n, i), data)
			if !r.Kept || r.Before != digest(data) {
				t.Errorf("record %+v", r)
			}
			if i > 0 && n <= smallBytes && slices.Contains(steps, "create tmp O_EXCL") {
				t.Errorf("a known small content was written again: %v", steps)
			}
			if i > 0 && slices.Contains(steps, "link") {
				t.Errorf("a known content was linked again: %v", steps)
			}
		}
		j.trace = nil
	}
	if got := names(t, filepath.Join(dir, "objects")); len(got) != 2 {
		t.Errorf("objects = %v; want 2 (one per content)", got)
	}
	if got := names(t, dir); slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, tmpPrefix) }) {
		t.Errorf("temporary names left: %v", got)
	}
	// Also after a reopen, where the object is found on disk.
	j.Close()
	j2 := openJournal(t, Options{Dir: dir})
	save(t, j2, "open", "data://again", pattern(10, 9))
	if got := names(t, filepath.Join(dir, "objects")); len(got) != 2 {
		t.Errorf("objects = %v; want 2", got)
	}
}

func TestStoreSteps(t *testing.T) {
	j := openJournal(t, Options{})
	var mu sync.Mutex
	var steps []string
	synced := make(chan struct{}, 10)
	j.trace = func(s string) {
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, s)
		if s == "fsync records" {
			synced <- struct{}{}
		}
	}
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		s := steps
		steps = nil
		return s
	}
	save(t, j, "open", "data://a", []byte("one"))
	<-synced
	want := []string{"create tmp O_EXCL", "fsync tmp", "link", "remove tmp", "fsync objects", "append records", "fsync records"}
	if got := take(); !slices.Equal(got, want) {
		t.Errorf("publishing steps = %q; want %q", got, want)
	}
	save(t, j, "unlink", "data://b", []byte("one"))
	<-synced
	if got, want := take(), []string{"re-hash", "append records", "fsync records"}; !slices.Equal(got, want) {
		t.Errorf("steps for a stored content = %q; want %q", got, want)
	}

	// Created returns after the write; the fsync follows within flushDelay.
	if err := j.Created(ev("create", "data://c")); err != nil {
		t.Fatal(err)
	}
	if got, want := take(), []string{"append records"}; !slices.Equal(got, want) {
		t.Errorf("Created steps = %q; want %q", got, want)
	}
	select {
	case <-synced:
	case <-time.After(10 * flushDelay):
		t.Fatalf("no fsync within %v of Created", 10*flushDelay)
	}
	take()
	// Close fsyncs what is still waiting.
	if err := j.Created(ev("create", "data://d")); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if got, want := take(), []string{"append records", "fsync records"}; !slices.Equal(got, want) {
		t.Errorf("Created+Close steps = %q; want %q", got, want)
	}
}

func TestTempNameIsExclusive(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	j := openJournal(t, Options{Dir: dir})
	taken := filepath.Join(dir, tmpPrefix+"taken")
	if err := os.WriteFile(taken, []byte("someone else's"), 0o600); err != nil {
		t.Fatal(err)
	}
	first := true
	j.tempName = func(name string) string {
		if first {
			first = false
			return taken
		}
		return name
	}
	r := save(t, j, "open", "data://a", []byte("mine"))
	if got, err := content(j, r); err != nil || string(got) != "mine" {
		t.Errorf("Content = %q, %v", got, err)
	}
	if got, _ := os.ReadFile(taken); string(got) != "someone else's" {
		t.Errorf("an existing temporary name was written: %q", got)
	}
}

func TestConflictNeverOverwrites(t *testing.T) {
	for _, tt := range []struct {
		name  string
		known bool // the journal stored the object before it was changed
		n     int
	}{
		{"unknown file under the name", false, 100},
		{"unknown file under the name, streamed", false, smallBytes + 100},
		{"known object changed on disk", true, 100},
		{"known object changed on disk, streamed", true, smallBytes + 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "journal")
			j := openJournal(t, Options{Dir: dir})
			data := pattern(tt.n, 3)
			obj := filepath.Join(dir, "objects", hexOf(data))
			if tt.known {
				save(t, j, "open", "data://first", data)
			}
			other := pattern(tt.n, 4)
			if err := os.WriteFile(obj, other, 0o600); err != nil {
				t.Fatal(err)
			}
			err := j.Save(ev("open", "data://x"), 0o644, int64(len(data)), source(data, nil))
			if !errors.Is(err, ErrConflict) {
				t.Fatalf("Save = %v; want ErrConflict", err)
			}
			if got, _ := os.ReadFile(obj); !bytes.Equal(got, other) {
				t.Errorf("the existing entry was overwritten")
			}
			if h, _ := j.History("data://x", nil); len(h) != 0 {
				t.Errorf("a failed Save left records %+v", h)
			}
			if got := names(t, dir); slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, tmpPrefix) }) {
				t.Errorf("temporary names left: %v", got)
			}
		})
	}
}

func TestCorruptEntryRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	j := openJournal(t, Options{Dir: dir})
	data := pattern(4096, 1)
	r := save(t, j, "open", "data://notes.txt", data)
	obj := filepath.Join(dir, "objects", hexOf(data))
	b, _ := os.ReadFile(obj)
	b[100] ^= 0x01
	if err := os.WriteFile(obj, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := content(j, r)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Content read = %v; want ErrCorrupt", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "data://notes.txt") || !strings.Contains(msg, r.ID) || strings.Count(msg, ":") > 3 {
		t.Errorf("message %q: want one sentence naming the uri and record", msg)
	}
	if _, err := j.Plan("data://notes.txt", ""); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Plan = %v; want ErrCorrupt", err)
	}
	if got, _ := os.ReadFile(obj); !bytes.Equal(got, b) {
		t.Errorf("the corrupt entry was changed (repaired?)")
	}
	// Saving the same content again does not adopt or replace the entry.
	if err := j.Save(ev("open", "data://notes.txt"), 0o644, int64(len(data)), source(data, nil)); !errors.Is(err, ErrConflict) {
		t.Errorf("Save over a corrupt entry = %v; want ErrConflict", err)
	}
}

func TestOpenRemovesLeftovers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	j := openJournal(t, Options{Dir: dir})
	kept := save(t, j, "open", "data://kept", []byte("kept"))
	j.Close()

	// A complete copy under a temporary name (interrupted before link), and
	// an object published by a Save whose record never became durable.
	tmpData, orphan := []byte("interrupted"), []byte("published, no record")
	tmp := filepath.Join(dir, tmpPrefix+"0123456789abcdef")
	if err := os.WriteFile(tmp, tmpData, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "objects", hexOf(orphan)), orphan, 0o600); err != nil {
		t.Fatal(err)
	}
	j2 := openJournal(t, Options{Dir: dir})
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover temporary still there: %v", err)
	}
	if got, want := names(t, filepath.Join(dir, "objects")), []string{hexOf([]byte("kept"))}; !slices.Equal(got, want) {
		t.Errorf("objects = %v; want only %v", got, want)
	}
	if got, err := content(j2, kept); err != nil || string(got) != "kept" {
		t.Errorf("Content(kept) = %q, %v", got, err)
	}
	// The interrupted content is written afresh when saved, not adopted.
	var steps []string
	j2.trace = func(s string) { steps = append(steps, s) }
	save(t, j2, "open", "data://tmp", tmpData)
	if !slices.Contains(steps, "link") {
		t.Errorf("steps %v: want a fresh copy published", steps)
	}
}

func TestTornLastLineIgnored(t *testing.T) {
	for _, torn := range []string{`{"id":"9-abcd","ti`, `{`, "\x00\x00\x00", `{"evicted":"sha256:`} {
		t.Run(fmt.Sprintf("%q", torn), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "journal")
			j := openJournal(t, Options{Dir: dir})
			save(t, j, "open", "data://a", []byte("a1"))
			save(t, j, "unlink", "data://b", []byte("b1"))
			j.Close()
			f, err := os.OpenFile(filepath.Join(dir, recordsName), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(torn)
			f.Close()

			j2 := openJournal(t, Options{Dir: dir})
			all, _ := j2.History("data://", nil)
			if len(all) != 2 {
				t.Fatalf("records after a torn line = %+v; want the 2 before it", all)
			}
			save(t, j2, "open", "data://c", []byte("c1"))
			j2.Close()
			j3 := openJournal(t, Options{Dir: dir})
			if all, _ := j3.History("data://", nil); len(all) != 3 {
				t.Errorf("records after appending past a torn line = %d; want 3", len(all))
			}
			b, _ := os.ReadFile(filepath.Join(dir, recordsName))
			for _, ln := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
				if !json.Valid(ln) {
					t.Errorf("records.jsonl keeps a bad line %q", ln)
				}
			}
		})
	}
}

func TestRetentionEvictsOldestAsNotKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	opts := Options{Dir: dir, MaxBytes: 3000, MaxFileBytes: 2000}
	j := openJournal(t, opts)
	a, b, c := pattern(1200, 1), pattern(1200, 2), pattern(1200, 3)
	save(t, j, "open", "data://a", a)
	save(t, j, "unlink", "data://a2", a) // same object, two records
	save(t, j, "open", "data://b", b)
	save(t, j, "open", "data://c", c) // 3600 > 3000: evicts a, used least recently

	check := func(j *Journal) {
		t.Helper()
		for _, u := range []string{"data://a", "data://a2"} {
			r := newest(t, j, u)
			if r.Kept {
				t.Errorf("%s: Kept after eviction: %+v", u, r)
			}
			_, err := content(j, r)
			if !errors.Is(err, ErrNotKept) || !strings.Contains(err.Error(), "not kept") || !strings.Contains(err.Error(), u) {
				t.Errorf("Content(%s) = %v; want a clear ErrNotKept", u, err)
			}
			if _, err := j.Plan(u, ""); !errors.Is(err, ErrNotKept) {
				t.Errorf("Plan(%s) = %v; want ErrNotKept", u, err)
			}
		}
		for u, d := range map[string][]byte{"data://b": b, "data://c": c} {
			r := newest(t, j, u)
			if got, err := content(j, r); !r.Kept || err != nil || !bytes.Equal(got, d) {
				t.Errorf("%s: kept=%v, %v", u, r.Kept, err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "objects", hexOf(a))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("evicted object still on disk: %v", err)
		}
	}
	check(j)
	j.Close()
	check(openJournal(t, opts)) // eviction is durable

	// Lowering MaxBytes evicts at Open.
	j2 := openJournal(t, Options{Dir: filepath.Join(t.TempDir(), "j2")})
	save(t, j2, "open", "data://x", pattern(1000, 5))
	save(t, j2, "open", "data://y", pattern(1000, 6))
	j2.Close()
	j3 := openJournal(t, Options{Dir: j2.dir, MaxBytes: 1500})
	if x, y := newest(t, j3, "data://x"), newest(t, j3, "data://y"); x.Kept || !y.Kept {
		t.Errorf("after lowering MaxBytes: x kept=%v y kept=%v; want false, true", x.Kept, y.Kept)
	}
}

func TestTooLargeNotKept(t *testing.T) {
	for _, tt := range []struct {
		name     string
		declared int64 // the size the caller stat'ed
		actual   int   // the bytes read returns
		wantRead bool
	}{
		{"declared too large: never read", 101, 101, false},
		{"grew while being read", 50, 150, true},
		{"grew past the in-memory part", 50, smallBytes + 200, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "journal")
			max := int64(100)
			if tt.actual > smallBytes {
				max = smallBytes + 100
				tt.declared = 50
			}
			j := openJournal(t, Options{Dir: dir, MaxFileBytes: max})
			calls := 0
			if err := j.Save(ev("open", "data://big"), 0o600, tt.declared, source(pattern(tt.actual, 1), &calls)); err != nil {
				t.Fatal(err)
			}
			if (calls == 1) != tt.wantRead || calls > 1 {
				t.Errorf("read called %d times", calls)
			}
			r := newest(t, j, "data://big")
			if r.Kept || r.Before != Unknown || r.Size <= max {
				t.Errorf("record %+v; want not kept, Before unknown, Size > %d", r, max)
			}
			if _, err := content(j, r); !errors.Is(err, ErrNotKept) || !strings.Contains(err.Error(), "per-file limit") {
				t.Errorf("Content = %v; want ErrNotKept naming the per-file limit", err)
			}
			if got := names(t, filepath.Join(dir, "objects")); len(got) != 0 {
				t.Errorf("objects %v; want none", got)
			}
			if got := names(t, dir); slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, tmpPrefix) }) {
				t.Errorf("temporary names left: %v", got)
			}
		})
	}
}

// apply carries out p on files the way the daemon does, journaling the
// change first, and returns the new content (nil: absent).
func apply(t *testing.T, j *Journal, p Plan, cur []byte) []byte {
	t.Helper()
	e := ev("revert", p.URI)
	if p.Absent {
		if err := j.Save(e, 0o644, int64(len(cur)), source(cur, nil)); err != nil {
			t.Fatal(err)
		}
		return nil
	}
	if cur == nil {
		if err := j.Created(e); err != nil {
			t.Fatal(err)
		}
	} else if err := j.Save(e, 0o644, int64(len(cur)), source(cur, nil)); err != nil {
		t.Fatal(err)
	}
	b, err := content(j, p.Record)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPlan(t *testing.T) {
	const u = "data://doc.txt"
	v1, v2 := []byte("version one\n"), []byte("version two\n")
	type want struct {
		absent bool
		data   []byte
		err    error
	}
	for _, tt := range []struct {
		name string
		// run journals changes and returns the uri and record id to plan.
		run  func(t *testing.T, j *Journal) (string, string)
		want want
	}{
		{"overwrite restores the old bytes", func(t *testing.T, j *Journal) (string, string) {
			save(t, j, "open", u, v1)
			return u, ""
		}, want{data: v1}},
		{"truncate restores the old bytes", func(t *testing.T, j *Journal) (string, string) {
			save(t, j, "truncate", u, v1)
			return u, ""
		}, want{data: v1}},
		{"delete restores the file", func(t *testing.T, j *Journal) (string, string) {
			save(t, j, "unlink", u, v1)
			return u, ""
		}, want{data: v1}},
		{"create removes the file", func(t *testing.T, j *Journal) (string, string) {
			j.Created(ev("create", u))
			return u, ""
		}, want{absent: true}},
		{"to a given record", func(t *testing.T, j *Journal) (string, string) {
			r := save(t, j, "open", u, v1)
			save(t, j, "open", u, v2)
			return u, r.ID
		}, want{data: v1}},
		{"rename over an existing file restores the target", func(t *testing.T, j *Journal) (string, string) {
			save(t, j, "rename", u, v1)
			if err := j.Renamed(ev("rename", u), "data://.doc.txt.swp"); err != nil {
				t.Fatal(err)
			}
			if h, _ := j.History(u, nil); len(h) != 1 || h[0].From != "data://.doc.txt.swp" {
				t.Errorf("history %+v; want one rename record with From", h)
			}
			return u, ""
		}, want{data: v1}},
		{"rename over, old name given to Save", func(t *testing.T, j *Journal) (string, string) {
			e := ev("rename", u)
			e.From = "data://new.txt"
			if err := j.Save(e, 0o640, int64(len(v1)), source(v1, nil)); err != nil {
				t.Fatal(err)
			}
			if err := j.Renamed(ev("rename", u), "data://new.txt"); err != nil {
				t.Fatal(err)
			}
			if h, _ := j.History("data://new.txt", nil); len(h) != 1 || h[0].URI != u {
				t.Errorf("history of the old name %+v; want the one rename record", h)
			}
			return u, ""
		}, want{data: v1}},
		{"rename onto a new name removes it", func(t *testing.T, j *Journal) (string, string) {
			j.Renamed(ev("rename", u), "data://old.txt")
			return u, ""
		}, want{absent: true}},
		{"the old name of a rename points at the new one", func(t *testing.T, j *Journal) (string, string) {
			j.Renamed(ev("rename", u), "data://old.txt")
			return "data://old.txt", newest(t, j, u).ID
		}, want{err: ErrNoRecord}},
		{"revert of an overwrite's revert", func(t *testing.T, j *Journal) (string, string) {
			save(t, j, "open", u, v1) // the file is now v2
			p, err := j.Plan(u, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := apply(t, j, p, v2); !bytes.Equal(got, v1) {
				t.Fatalf("revert gave %q", got)
			}
			return u, "" // the newest record is the revert
		}, want{data: v2}},
		{"revert of a delete's revert", func(t *testing.T, j *Journal) (string, string) {
			save(t, j, "unlink", u, v1)
			p, _ := j.Plan(u, "")
			apply(t, j, p, nil) // recreates it
			return u, ""
		}, want{absent: true}},
		{"revert of a create's revert", func(t *testing.T, j *Journal) (string, string) {
			j.Created(ev("create", u))
			p, _ := j.Plan(u, "")
			apply(t, j, p, v2) // removes it, saving v2
			return u, ""
		}, want{data: v2}},
		{"no history", func(t *testing.T, j *Journal) (string, string) { return u, "" }, want{err: ErrNoRecord}},
		{"unknown id", func(t *testing.T, j *Journal) (string, string) { return u, "99-ffff" }, want{err: ErrNoRecord}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := openJournal(t, Options{})
			uri, id := tt.run(t, j)
			p, err := j.Plan(uri, id)
			if tt.want.err != nil {
				if !errors.Is(err, tt.want.err) {
					t.Fatalf("Plan = %+v, %v; want %v", p, err, tt.want.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			if p.URI != uri || p.Absent != tt.want.absent || (id != "" && p.Record.ID != id) {
				t.Errorf("Plan = %+v; want absent=%v", p, tt.want.absent)
			}
			if !p.Absent {
				got, err := content(j, p.Record)
				if err != nil || !bytes.Equal(got, tt.want.data) || p.Digest != digest(tt.want.data) || p.Mode != 0o640 && p.Mode != 0o644 {
					t.Errorf("plan content %q, %v, %+v; want %q", got, err, p, tt.want.data)
				}
			}
		})
	}
}

func TestHistoryFilters(t *testing.T) {
	j := openJournal(t, Options{})
	save(t, j, "open", "data://a/x", []byte("1"))
	save(t, j, "open", "data://a/y", []byte("2"))
	save(t, j, "open", "data://ab", []byte("3"))
	save(t, j, "unlink", "data://b/z", []byte("4"))
	save(t, j, "open", "other://a/x", []byte("5"))
	j.Renamed(ev("rename", "data://a/w"), "data://secret/s")
	save(t, j, "truncate", "data://a/x", []byte("6"))
	canRead := func(u string) bool { return u != "data://a/y" && !strings.HasPrefix(u, "data://secret/") }
	uris := func(h []Record) []string {
		var out []string
		for _, r := range h {
			out = append(out, r.URI+"<"+r.From)
		}
		return out
	}
	for _, tt := range []struct {
		query   string
		canRead func(string) bool
		want    []string
	}{
		{"data://a/x", nil, []string{"data://a/x<", "data://a/x<"}},
		{"data://a/", nil, []string{"data://a/x<", "data://a/w<data://secret/s", "data://a/y<", "data://a/x<"}},
		{"data://a/", canRead, []string{"data://a/x<", "data://a/w<", "data://a/x<"}},
		{"data://a/y", canRead, nil},
		{"data://", canRead, []string{"data://a/x<", "data://a/w<", "data://b/z<", "data://ab<", "data://a/x<"}},
		{"data://secret/s", nil, []string{"data://a/w<data://secret/s"}},
		{"data://secret/", canRead, nil}, // the new name is readable, but the query is about the hidden one
		{"other://", nil, []string{"other://a/x<"}},
	} {
		h, err := j.History(tt.query, tt.canRead)
		if err != nil {
			t.Fatal(err)
		}
		// "data://secret/" matches the record only through its From, which
		// canRead blanks; what matters is that no secret uri is shown.
		got := uris(h)
		if tt.query == "data://secret/" {
			for _, s := range got {
				if strings.Contains(s, "secret") {
					t.Errorf("History(%s) shows %v", tt.query, got)
				}
			}
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("History(%s) = %q; want %q", tt.query, got, tt.want)
		}
	}
	for i, h := 1, mustHistory(t, j, "data://"); i < len(h); i++ {
		if h[i-1].Time.Before(h[i].Time) {
			t.Errorf("not newest first: %v before %v", h[i-1].Time, h[i].Time)
		}
	}
	if _, err := j.History("not-a-uri", nil); err == nil {
		t.Error("History of a non-uri succeeded")
	}
}

func mustHistory(t *testing.T, j *Journal, q string) []Record {
	t.Helper()
	h, err := j.History(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestConcurrentSaves(t *testing.T) {
	for _, maxBytes := range []int64{0, 64 << 10} { // no eviction, and eviction racing Saves
		t.Run(fmt.Sprint(maxBytes), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "journal")
			j := openJournal(t, Options{Dir: dir, MaxBytes: maxBytes})
			const workers, each = 12, 25
			errs := make(chan error, workers*each*2)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range each {
						uri := fmt.Sprintf("data://w%d/f%d", w, i%5)
						data := pattern(1000+i*100, byte(i%7)) // shared between workers: dedupe races
						if err := j.Save(ev("open", uri), 0o644, int64(len(data)), source(data, nil)); err != nil {
							errs <- err
						}
						if i%5 == 0 {
							if err := j.Created(ev("create", uri+".new")); err != nil {
								errs <- err
							}
						}
						if _, err := j.History(fmt.Sprintf("data://w%d/", w), nil); err != nil {
							errs <- err
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			all := mustHistory(t, j, "data://")
			if want := workers * (each + each/5); len(all) != want {
				t.Errorf("%d records; want %d", len(all), want)
			}
			ids := map[string]bool{}
			for _, r := range all {
				if ids[r.ID] {
					t.Errorf("duplicate id %s", r.ID)
				}
				ids[r.ID] = true
				if r.Before == Absent || !r.Kept {
					continue
				}
				if _, err := content(j, r); err != nil {
					t.Errorf("Content(%s): %v", r.ID, err)
				}
			}
			if maxBytes > 0 && j.total > maxBytes {
				t.Errorf("kept %d bytes; bound %d", j.total, maxBytes)
			}
		})
	}
}

func TestClosed(t *testing.T) {
	j := openJournal(t, Options{})
	j.Close()
	if err := j.Save(ev("open", "data://a"), 0, 1, source([]byte("a"), nil)); !errors.Is(err, ErrClosed) {
		t.Errorf("Save after Close = %v", err)
	}
	if err := j.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestBadEvent(t *testing.T) {
	j := openJournal(t, Options{Now: func() time.Time { return time.Unix(0, 0) }})
	for _, u := range []string{"", "data", "://x", "/abs/path"} {
		if err := j.Created(ev("create", u)); err == nil {
			t.Errorf("Created(%q) succeeded", u)
		}
	}
	if err := j.Save(ev("open", "data://x"), 0, 1, func() (io.ReadCloser, error) { return nil, os.ErrNotExist }); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Save with a failing read = %v", err)
	}
	if h := mustHistory(t, j, "data://"); len(h) != 0 {
		t.Errorf("records %+v", h)
	}
}
