package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// readLines returns the JSON objects in file, failing on any invalid line.
func readLines(t *testing.T, file string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: invalid JSON line %q: %v", file, sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func rec(i int) Record {
	return Record{Principal: "agent", UID: 1001, GID: 1001, PID: uint32(100 + i), Op: "open",
		URI: fmt.Sprintf("data://secrets/k%d", i), Rule: "policy.toml:12"}
}

func TestLinesHaveEveryField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	when := time.Date(2026, 11, 30, 3, 4, 5, 6000, time.FixedZone("x", 3600))
	r := rec(1)
	r.Time = when
	l.Denied(r)
	l.Denied(Record{Principal: "other", Op: "lookup", URI: "data://x", Rule: "default"})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 2 {
		t.Fatalf("got %d lines; want 2", len(lines))
	}
	want := map[string]any{"time": "2026-11-30T02:04:05.000006Z", "principal": "agent", "uid": 1001.0, "gid": 1001.0,
		"pid": 101.0, "op": "open", "uri": "data://secrets/k1", "rule": "policy.toml:12"}
	for k, v := range want {
		if lines[0][k] != v {
			t.Errorf("field %s = %#v; want %#v", k, lines[0][k], v)
		}
	}
	if len(lines[0]) != len(want) {
		t.Errorf("line has fields %v; want exactly %v", lines[0], want)
	}
	if _, err := time.Parse(time.RFC3339Nano, lines[1]["time"].(string)); err != nil {
		t.Errorf("default time: %v", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v; want 0600", st.Mode().Perm())
	}
	l.Denied(rec(3)) // after Close: dropped, no panic
}

func TestExistingFileMadePrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte("{\"old\":true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Denied(rec(1))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v; want 0600", st.Mode().Perm())
	}
	if n := len(readLines(t, path)); n != 2 {
		t.Errorf("got %d lines; want the old one and the new one", n)
	}
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestRateLimitDropsAndReports(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	l, err := Open(path, Options{Rate: 5, Burst: 5, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		l.Denied(rec(i)) // the clock stands still: only the burst passes
	}
	clock.Add(time.Second) // 5 more tokens
	l.Denied(rec(100))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	var got []string
	for _, m := range lines {
		if d, ok := m["dropped"]; ok {
			got = append(got, fmt.Sprintf("dropped=%v rate=%v queue=%v", d, m["rate_limited"], m["queue_full"]))
		} else {
			got = append(got, m["uri"].(string))
		}
	}
	want := []string{"data://secrets/k0", "data://secrets/k1", "data://secrets/k2", "data://secrets/k3", "data://secrets/k4",
		"dropped=15 rate=15 queue=0", "data://secrets/k100"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestDropsReportedOnClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	l, err := Open(path, Options{Rate: 1, Burst: 2, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		l.Denied(rec(i))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 3 || lines[2]["dropped"] != 8.0 {
		t.Errorf("lines %v; want 2 records and dropped=8", lines)
	}
}

func TestRotationBoundsSize(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	const max = 2000
	l, err := Open(path, Options{MaxSize: max, Rate: 1e6})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := 0; i < n; i++ {
		l.Denied(rec(i))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, path + ".1"} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > max {
			t.Errorf("%s is %d bytes; cap %d", f, st.Size(), max)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v", f, st.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("files %v; want audit.log and audit.log.1", entries)
	}
	last := readLines(t, path)
	if got := last[len(last)-1]["uri"]; got != fmt.Sprintf("data://secrets/k%d", n-1) {
		t.Errorf("last line uri %v", got)
	}
	if len(readLines(t, path+".1")) == 0 {
		t.Error("audit.log.1 is empty")
	}
}

func TestCloseFlushes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{Rate: 1e9, QueueLen: 10000})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5000; i++ {
		l.Denied(rec(i))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	records, dropped := 0, 0.0
	for _, m := range readLines(t, path) {
		if d, ok := m["dropped"]; ok {
			dropped += d.(float64)
		} else {
			records++
		}
	}
	if records+int(dropped) != 5000 || dropped != 0 {
		t.Errorf("records %d dropped %v; want 5000 and 0", records, dropped)
	}
}

func TestConcurrentDenied(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{Rate: 1e9, QueueLen: 4})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for i := 0; i < 500; i++ {
				l.Denied(rec(i))
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	records, dropped := 0, 0.0
	for _, m := range readLines(t, path) {
		if d, ok := m["dropped"]; ok {
			dropped += d.(float64)
		} else {
			records++
		}
	}
	if records+int(dropped) != 4000 {
		t.Errorf("records %d + dropped %v != 4000", records, dropped)
	}
}

// lineWriter collects Follow's output and signals each write.
type lineWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan struct{}
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	select {
	case w.ch <- struct{}{}:
	default:
	}
	return len(b), nil
}

func (w *lineWriter) count(sub string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(w.buf.String(), sub)
}

// waitFor waits until cond holds, woken by writes, failing at the deadline.
func waitFor(t *testing.T, w *lineWriter, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-w.ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; have:\n%s", what, w.buf.String())
		}
	}
}

func TestFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{MaxSize: 1500, Rate: 1e6})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		l.Denied(rec(i))
	}
	if err := l.Close(); err != nil { // flushed: the first lines exist before Follow starts
		t.Fatal(err)
	}

	// Not following: the existing lines, then return.
	var once bytes.Buffer
	if err := Follow(context.Background(), path, &once, false); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(once.String(), "\n"); n != 3 {
		t.Errorf("Follow(follow=false) printed %d lines; want 3", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	w := &lineWriter{ch: make(chan struct{}, 1)}
	errc := make(chan error, 1)
	go func() { errc <- Follow(ctx, path, w, true) }()
	waitFor(t, w, "existing lines", func() bool { return w.count(`"op":"open"`) >= 3 })

	// Append enough to rotate several times; every line must arrive once.
	l, err = Open(path, Options{MaxSize: 1500, Rate: 1e6})
	if err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 40; i++ {
		l.Denied(rec(i))
		if i%5 == 0 {
			// Let the writer and the follower catch up now and then, so no
			// line is rotated away twice before Follow reads it.
			want := i + 1
			waitFor(t, w, fmt.Sprintf("line %d", i), func() bool { return w.count(`"op":"open"`) >= want })
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, "all lines", func() bool { return w.count(`"op":"open"`) >= 40 })
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Follow returned %v", err)
	}
	for i := 0; i < 40; i++ {
		if n := w.count(fmt.Sprintf(`"data://secrets/k%d"`, i)); n != 1 {
			t.Errorf("line %d seen %d times", i, n)
		}
	}
}

func TestFollowMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := Follow(context.Background(), path, &bytes.Buffer{}, false); !errorsIsNotExist(err) {
		t.Errorf("Follow on a missing log = %v; want not-exist", err)
	}
	// Following waits for the file to appear.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &lineWriter{ch: make(chan struct{}, 1)}
	errc := make(chan error, 1)
	go func() { errc <- Follow(ctx, path, w, true) }()
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Denied(rec(7))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, "the first line", func() bool { return w.count("k7") == 1 })
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Follow returned %v", err)
	}
}

// kinds returns, per line of file, "principal op" for a record and
// "principal dropped=N" for a summary.
func kinds(t *testing.T, file string) []string {
	t.Helper()
	var out []string
	for _, m := range readLines(t, file) {
		if d, ok := m["dropped"]; ok {
			out = append(out, fmt.Sprintf("%v dropped=%v", m["principal"], d))
		} else {
			out = append(out, fmt.Sprintf("%v %v", m["principal"], m["op"]))
		}
	}
	return out
}

// A red-team agent's flood of denials used the one global bucket, and the
// owner's lines in that second were dropped too.
func TestFloodDropsOnlyItsOwnLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	l, err := Open(path, Options{Rate: 5, Burst: 5, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		l.Denied(rec(i)) // the clock stands still: the agent's burst passes
	}
	for i := 0; i < 3; i++ {
		l.Denied(Record{Principal: "owner", UID: 0, Op: "lookup", URI: "data://x", Rule: "default"})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got := kinds(t, path)
	want := []string{"agent open", "agent open", "agent open", "agent open", "agent open",
		"owner lookup", "owner lookup", "owner lookup", "agent dropped=95"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The summary says whose lines were dropped, and nothing of them.
	lines := readLines(t, path)
	sum := lines[len(lines)-1]
	for _, k := range []string{"time", "principal", "dropped", "rate_limited", "queue_full"} {
		if _, ok := sum[k]; !ok {
			t.Errorf("summary %v has no %s", sum, k)
		}
	}
	if len(sum) != 5 {
		t.Errorf("summary %v; want only time, principal and the counts", sum)
	}
}

// During the flood the owner's review approve and reject lines were
// dropped: decisions take no token, whoever makes them.
func TestDecisionsAreNotRateLimited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	l, err := Open(path, Options{Rate: 5, Burst: 5, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		l.Denied(rec(i))
		r := rec(i)
		r.Op, r.Rule, r.Outcome = "review-approve", "review", "approve"
		l.Decision(r) // the same principal, its bucket empty
	}
	l.Reload(Record{Principal: "agent", URI: "/etc/neuralisfs/config.toml", Rule: "applied", Detail: "no change"})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	approvals, reloads, denials := 0, 0, 0
	for _, k := range kinds(t, path) {
		switch k {
		case "agent review-approve":
			approvals++
		case "agent reload":
			reloads++
		case "agent open":
			denials++
		}
	}
	if approvals != 50 || reloads != 1 || denials != 5 {
		t.Errorf("%d approvals, %d reloads, %d denials; want 50, 1 and the burst of 5:\n%s",
			approvals, reloads, denials, strings.Join(kinds(t, path), "\n"))
	}
	dec := kinds(t, DecisionsPath(path))
	if len(dec) != 51 || dec[0] != "agent review-approve" || dec[50] != "agent reload" {
		t.Errorf("decisions file:\n%s\nwant the 50 approvals and the reload", strings.Join(dec, "\n"))
	}
}

// Lines within a principal's rate rotated audit.log and audit.log.1 away,
// with every review-approve line in them: the decisions file keeps them.
func TestDecisionsOutliveRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l, err := Open(path, Options{MaxSize: 2000, Rate: 1e6})
	if err != nil {
		t.Fatal(err)
	}
	l.Decision(Record{Principal: "owner", Op: "review-approve", URI: "data://a.txt", Rule: "review", Outcome: "approve"})
	for i := 0; i < 200; i++ {
		l.Denied(rec(i))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, path + ".1"} {
		if b, _ := os.ReadFile(f); strings.Contains(string(b), "review-approve") {
			t.Fatalf("%s still has the approval: the test rotates too little", f)
		}
	}
	if got := kinds(t, filepath.Join(dir, "audit.decisions.log")); len(got) != 1 || got[0] != "owner review-approve" {
		t.Errorf("audit.decisions.log: %v; want the approval", got)
	}
	if st, err := os.Stat(DecisionsPath(path)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("decisions file: %v, %v; want mode 0600", st, err)
	}
}

// 15 nested 250-byte folder names made a denial a 3.9 KB line.
func TestLongStringsAreCut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	uris := []string{
		"data://" + strings.Repeat(strings.Repeat("a", 250)+"/", 15),
		"data://" + strings.Repeat("é", 2000),         // cut between bytes of a character
		"data://" + strings.Repeat("<\x01\"", 1000),   // each escaped to 6 or 2 bytes
		"data://" + strings.Repeat("\xff\xfe€", 1000), // invalid UTF-8 mixed in
	}
	for _, u := range uris {
		l.Denied(Record{Principal: "agent", Op: "open", URI: u, Rule: "default"})
	}
	l.Reload(Record{Principal: "owner", URI: "c.toml", Rule: "applied", Detail: strings.Repeat("d", 100<<10)})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != len(uris)+1 {
		t.Fatalf("%d lines; want %d", len(lines), len(uris)+1)
	}
	for i, m := range readLines(t, path) {
		field, limit := "uri", MaxField
		if i == len(uris) {
			field, limit = "detail", MaxDetail
		}
		if len(lines[i]) > limit+300 {
			t.Errorf("line %d is %d bytes", i, len(lines[i]))
		}
		v := m[field].(string)
		if !utf8.ValidString(v) {
			t.Errorf("line %d: %s is not valid UTF-8", i, field)
		}
		cut := strings.LastIndex(v, "…(+")
		if cut < 0 || !strings.HasSuffix(v, " bytes)") {
			t.Errorf("line %d: %s %.40q… has no cut marker", i, field, v)
			continue
		}
		var n int
		fmt.Sscanf(v[cut:], "…(+%d bytes)", &n)
		if i < 3 { // the fourth has its invalid bytes read back as U+FFFD
			if kept := v[:cut]; len(kept)+n != len(uris[i]) || !strings.HasPrefix(uris[i], kept) {
				t.Errorf("line %d: kept %d bytes and says %d cut, of %d", i, len(kept), n, len(uris[i]))
			}
		}
	}
}
