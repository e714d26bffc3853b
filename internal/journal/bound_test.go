package journal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// boundLoad makes n changes on a few uris, as the mount would: creates,
// overwrites (some of the same content, so objects are shared between
// records) and renames over an existing file. It returns every record id
// in the order made and the content each saved.
func boundLoad(tb testing.TB, j *Journal, tag string, n int) (ids []string, saved map[string][]byte) {
	tb.Helper()
	saved = map[string][]byte{}
	for i := range n {
		uri := fmt.Sprintf("data://%s/f%d", tag, i%13)
		var data []byte
		switch {
		case i%5 == 0:
			if err := j.Created(ev("create", uri)); err != nil {
				tb.Fatal(err)
			}
		case i%7 == 3:
			data = pattern(200+i, byte(i))
			if err := j.Save(ev("rename", uri), 0o600, int64(len(data)), source(data, nil)); err != nil {
				tb.Fatal(err)
			}
			if err := j.Renamed(ev("rename", uri), fmt.Sprintf("data://%s/tmp%d", tag, i)); err != nil {
				tb.Fatal(err)
			}
		case i%4 == 1:
			data = []byte("the same content, again and again\n")
			fallthrough
		default:
			if data == nil {
				data = pattern(100+i, byte(i))
			}
			if err := j.Save(ev("open", uri), 0o644, int64(len(data)), source(data, nil)); err != nil {
				tb.Fatal(err)
			}
		}
		r := newestAny(tb, j, uri)
		if len(ids) > 0 && ids[len(ids)-1] == r.ID {
			tb.Fatalf("change %d made no record", i)
		}
		ids = append(ids, r.ID)
		if data != nil {
			saved[r.ID] = data
		}
		j.mu.Lock()
		if len(j.recs) > int(j.maxRecs.Load()) {
			tb.Errorf("after change %d the journal holds %d records; the bound is %d", i, len(j.recs), int(j.maxRecs.Load()))
		}
		j.mu.Unlock()
	}
	return ids, saved
}

// newestAny is newest without History's wait, for a journal whose
// records are all settled (strict mode).
func newestAny(tb testing.TB, j *Journal, uri string) Record {
	tb.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.lastLocked(uri)
	if r == nil {
		tb.Fatalf("no record of %s", uri)
	}
	return j.shown(*r)
}

// checkBound checks what the journal holds against the ids made in
// order: exactly the newest of them (at most the bound, and no fewer
// than a drop leaves), its maps agree with its list, every object is
// used by a kept record and every kept record's content is exact.
func checkBound(t *testing.T, j *Journal, ids []string, saved map[string][]byte) []Record {
	t.Helper()
	all := mustHistory(t, j, "data://")
	if len(all) > int(j.maxRecs.Load()) || len(all) < min(len(ids), int(j.maxRecs.Load())-int(j.maxRecs.Load())/dropChunkDiv-1) {
		t.Errorf("%d records kept of %d made; the bound is %d", len(all), len(ids), int(j.maxRecs.Load()))
	}
	var got []string
	for _, r := range slices.Backward(all) {
		got = append(got, r.ID)
	}
	if want := ids[len(ids)-len(all):]; !slices.Equal(got, want) {
		t.Errorf("kept records %v; want the newest %v", got, want)
	}
	d := j.Dropped()
	if d.Records != int64(len(ids)-len(all)) || d.Max != int(j.maxRecs.Load()) {
		t.Errorf("Dropped() = %+v; want %d records, max %d", d, len(ids)-len(all), int(j.maxRecs.Load()))
	}
	if len(ids) > len(all) && !d.Until.Before(all[len(all)-1].Time.Add(1)) {
		t.Errorf("Dropped().Until %v is after the oldest kept record (%v)", d.Until, all[len(all)-1].Time)
	}
	j.mu.Lock()
	n := 0
	for u, rs := range j.byURI {
		if len(rs) == 0 {
			t.Errorf("byURI[%s] is empty, not deleted", u)
		}
		n += len(rs)
	}
	if n != len(j.recs) {
		t.Errorf("recs %d, byURI %d: the maps disagree", len(j.recs), n)
	}
	for _, r := range j.recs {
		if j.byID(r.ID) != r {
			t.Errorf("byID(%s) does not find it", r.ID)
		}
	}
	used := map[string]bool{}
	for _, r := range j.recs {
		if hx, ok := digestHex(r.Before); ok && r.Kept {
			used[hx] = true
			if j.objects[hx] == nil {
				t.Errorf("record %s is kept but its object %s is gone", r.ID, hx)
			}
		}
	}
	for hx := range j.objects {
		if !used[hx] {
			t.Errorf("object %s is kept but no kept record uses it", hx)
		}
	}
	objs := len(j.objects)
	j.mu.Unlock()
	if files := len(names(t, filepath.Join(j.dir, objectsName))); files != objs {
		t.Errorf("objects/ holds %d files; the journal knows %d", files, objs)
	}
	for _, r := range all {
		want, ok := saved[r.ID]
		switch {
		case r.Before == Absent:
		case !ok:
			t.Errorf("record %s claims content nobody saved", r.ID)
		case !r.Kept:
			t.Errorf("record %s is not kept", r.ID)
		default:
			b, err := content(j, r)
			if err != nil || !bytes.Equal(b, want) {
				t.Errorf("Content(%s) = %d bytes, %v; want the %d bytes saved", r.ID, len(b), err, len(want))
			}
		}
	}
	return all
}

// fileLines counts the lines of records.jsonl (without the NUL bytes of
// its append window).
func fileLines(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, recordsName))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(bytes.TrimRight(b, "\x00"), []byte{'\n'})
}

func sameHistory(t *testing.T, what string, got, want []Record) {
	t.Helper()
	strip := func(rs []Record) []string {
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%s %s %s %s %s %s %s %v %d %o %s", r.ID, r.Time.Format("15:04:05.000000000"), r.Principal, r.Op, r.URI, r.From, r.Before, r.Kept, r.Size, r.Mode, r.Time))
		}
		return out
	}
	if g, w := strip(got), strip(want); !slices.Equal(g, w) {
		t.Errorf("%s: history differs:\n%s\nwant:\n%s", what, strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
}

// The journal keeps at most MaxRecords records: past the bound the
// oldest go, with the objects only they used, and records.jsonl is
// compacted. What is kept reads back exactly, after Open too, and a
// revert of a kept record restores its bytes.
func TestRecordBound(t *testing.T) {
	for _, compact := range []bool{true, false} {
		t.Run(fmt.Sprintf("compact=%v", compact), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "journal")
			j, err := Open(Options{Dir: dir, MaxRecords: 128})
			if err != nil {
				t.Fatal(err)
			}
			j.compactMin = 64
			if !compact {
				j.compactMin = 1 << 30
			}
			ids, saved := boundLoad(t, j, "b", 700)
			j.compactWG.Wait()
			before := checkBound(t, j, ids, saved)
			lines := fileLines(t, dir)
			if compact && lines > 2*128+64 {
				t.Errorf("records.jsonl has %d lines for %d records: not compacted", lines, len(before))
			}
			if !compact && lines < len(ids) {
				t.Errorf("records.jsonl has %d lines for %d changes, yet it was not to be compacted", lines, len(ids))
			}
			drop := j.Dropped()
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}

			j = openJournal(t, Options{Dir: dir, MaxRecords: 128})
			sameHistory(t, "after Open", mustHistory(t, j, "data://"), before)
			if d := j.Dropped(); d.Records != drop.Records || !d.Until.Equal(drop.Until) {
				t.Errorf("Dropped() after Open = %+v; before %+v", d, drop)
			}
			// New records follow the old ones, and the bound holds on.
			more, moreSaved := boundLoad(t, j, "b", 150)
			for id, b := range moreSaved {
				saved[id] = b
			}
			j.compactWG.Wait()
			checkBound(t, j, append(ids, more...), saved)
			// A revert of the newest change of a uri restores its bytes.
			for i := range 13 {
				uri := fmt.Sprintf("data://b/f%d", i)
				p, err := j.Plan(uri, "")
				if err != nil {
					t.Fatalf("Plan(%s): %v", uri, err)
				}
				if p.Absent {
					continue
				}
				if got := apply(t, j, p, []byte("now")); !bytes.Equal(got, saved[p.Record.ID]) {
					t.Errorf("revert of %s restored %d bytes; want %d", uri, len(got), len(saved[p.Record.ID]))
				}
			}
		})
	}
}

// Lowering max_records drops the oldest records at Open, durably: the
// next Open finds the same.
func TestRecordBoundLowered(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	j := openJournal(t, Options{Dir: dir, MaxRecords: 1000})
	ids, saved := boundLoad(t, j, "l", 200)
	if d := j.Dropped(); d.Records != 0 {
		t.Fatalf("dropped %+v under the bound", d)
	}
	j.Close()
	j = openJournal(t, Options{Dir: dir, MaxRecords: 50})
	low := checkBound(t, j, ids, saved)
	if len(low) > 50 {
		t.Fatalf("%d records after Open with max 50", len(low))
	}
	j.Close()
	j = openJournal(t, Options{Dir: dir, MaxRecords: 1000})
	sameHistory(t, "raised again", mustHistory(t, j, "data://"), low)
}

// A record still being published (Keep, batched) is never dropped, even
// past the bound: its staged copy and line must stay until its record
// line is written. Once published it goes with the next drop, and Open
// agrees with what the journal held.
func TestRecordBoundSparesPublishing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	j, g := openGated(t, Options{Dir: dir, MaxRecords: 16})
	release := make(chan struct{})
	g.mu.Lock()
	g.wait = release
	g.mu.Unlock()
	src := t.TempDir()
	data := pattern(3000, 7)
	if err := keepFile(t, j, ev("open", "data://p/held"), filepath.Join(src, "held"), data, false); err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	held := j.lastLocked("data://p/held")
	j.mu.Unlock()
	for i := range 60 {
		if err := j.Created(ev("create", fmt.Sprintf("data://p/c%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	j.mu.Lock()
	n, still := len(j.recs), j.byID(held.ID) == held
	j.mu.Unlock()
	if !still {
		t.Fatal("a record being published was dropped")
	}
	if n > 16 {
		t.Errorf("%d records held past the bound of 16 (one of them being published)", n)
	}
	g.mu.Lock()
	g.wait = nil
	g.mu.Unlock()
	close(release)
	r := newest(t, j, "data://p/held")
	if b, err := content(j, r); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("Content of the published record: %d bytes, %v", len(b), err)
	}
	for i := range 40 {
		if err := j.Created(ev("create", fmt.Sprintf("data://p/d%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	all := mustHistory(t, j, "data://")
	if len(all) > 16 || slices.ContainsFunc(all, func(x Record) bool { return x.ID == r.ID }) {
		t.Errorf("after publishing: %d records, the published one still kept: %v", len(all), slices.ContainsFunc(all, func(x Record) bool { return x.ID == r.ID }))
	}
	j.Close()
	j = openJournal(t, Options{Dir: dir, MaxRecords: 16, Batched: true})
	sameHistory(t, "after Open", mustHistory(t, j, "data://"), all)
	if left := append(names(t, filepath.Join(dir, objectsName)), names(t, filepath.Join(dir, packsName))...); len(left) != 0 {
		t.Errorf("objects/ and packs/ hold %v; no kept record uses any", left)
	}
}

// boundCrashEnv makes TestBoundCrashChild the child of TestBoundCrash.
const boundCrashEnv = "JOURNAL_BOUND_CRASH_DIR"

// TestBoundCrashChild makes changes past a small bound, so that records
// are dropped and records.jsonl is compacted again and again, printing
// each record's id once it is durable (Save returned, or a Created
// record's fsync passed) and what has been dropped once that is durable.
// It kills itself the third time the journal reaches the step named.
func TestBoundCrashChild(t *testing.T) {
	dir := os.Getenv(boundCrashEnv)
	if dir == "" {
		t.Skip("run by TestBoundCrash")
	}
	killAt := os.Getenv(boundCrashEnv + "_KILL_AT")
	round := os.Getenv(boundCrashEnv + "_ROUND")
	j, err := Open(Options{Dir: dir, MaxRecords: 40})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	j.compactMin = 32
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	seen := 0
	j.trace = func(s string) {
		if s != killAt {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if seen++; seen == 3 {
			out.Flush()
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	for i := range 2000 {
		uri := fmt.Sprintf("data://k%s/f%d", round, i%7)
		data := pattern(50+i%300, byte(i))
		if i%6 == 0 {
			err = j.Created(ev("create", uri))
		} else {
			err = j.Save(ev("open", uri), 0o644, int64(len(data)), source(data, nil))
		}
		if err != nil {
			fmt.Fprintln(out, "ERROR", err)
			out.Flush()
			os.Exit(1)
		}
		id := storedID(j.ids, newestAny(t, j, uri).ID) // it says the seq
		if i%6 == 0 {
			// A Created record is durable once fsynced (within 100 ms,
			// or with the next Save): print it after the next one.
			j.wmu.Lock()
			err = j.syncLocked()
			j.wmu.Unlock()
			if err != nil {
				fmt.Fprintln(out, "ERROR", err)
				out.Flush()
				os.Exit(1)
			}
		}
		mu.Lock()
		fmt.Fprintln(out, "SAVED", id)
		fmt.Fprintln(out, "DROPPED", j.Dropped().through)
		out.Flush()
		mu.Unlock()
	}
	fmt.Fprintln(out, "DONE without reaching", killAt)
	out.Flush()
	os.Exit(3)
}

// TestBoundCrash SIGKILLs a journal at each step of dropping records and
// compacting records.jsonl, again and again in the same folder, and
// checks after each that Open loses no record it should keep (every
// durable record newer than what was dropped), brings back none that was
// dropped, keeps the bound, and that every kept record's content is
// exact and every object is used.
func TestBoundCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := filepath.Join(t.TempDir(), "journal")
	saved := map[string]uint64{} // id → seq
	var dropped uint64
	for round, step := range []string{
		"append dropped", "fsync records", "release object",
		"compact create", "compact write", "compact fsync", "compact tail",
		"compact fsync tail", "compact rename", "compact fsync dir",
	} {
		out := runKilled(t, round, "TestBoundCrashChild", []string{boundCrashEnv + "=" + dir,
			boundCrashEnv + "_KILL_AT=" + step, fmt.Sprintf("%s_ROUND=%d", boundCrashEnv, round)}, 0)
		n := 0
		for _, ln := range out {
			switch k, v, _ := strings.Cut(ln, " "); k {
			case "SAVED":
				seq, err := parseID(v)
				if err != nil {
					t.Fatal(err)
				}
				saved[v] = seq
				n++
			case "DROPPED":
				d, _ := strconv.ParseUint(v, 10, 64)
				dropped = max(dropped, d)
			default:
				t.Fatalf("round %d: child said %q", round, ln)
			}
		}
		t.Logf("round %d: killed at %q after %d records (%d in all), dropped through seq %d", round, step, n, len(saved), dropped)

		j, err := Open(Options{Dir: dir, MaxRecords: 40})
		if err != nil {
			t.Fatalf("round %d: Open after SIGKILL at %q: %v", round, step, err)
		}
		for _, name := range names(t, dir) {
			if strings.HasPrefix(name, tmpPrefix) {
				t.Errorf("round %d: %s left after Open", round, name)
			}
		}
		d := j.Dropped()
		if d.through < dropped {
			t.Errorf("round %d: Open has dropped through seq %d; before the kill the journal had through %d", round, d.through, dropped)
		}
		dropped = d.through
		all := mustHistory(t, j, "data://")
		if len(all) > 40 {
			t.Errorf("round %d: %d records after Open; the bound is 40", round, len(all))
		}
		have := map[string]bool{}
		for _, r := range all {
			have[storedID(j.ids, r.ID)] = true
			if r.seq <= d.through {
				t.Errorf("round %d: record %s (seq %d) is back, though dropped through %d", round, r.ID, r.seq, d.through)
			}
			if r.Before != Absent {
				if !r.Kept {
					t.Errorf("round %d: record %s lost its content", round, r.ID)
				} else if _, err := content(j, r); err != nil {
					t.Errorf("round %d: record %s: %v", round, r.ID, err)
				}
			}
		}
		for id, seq := range saved {
			if seq > d.through && !have[id] {
				t.Errorf("round %d: record %s (seq %d) was lost; dropped only through %d", round, id, seq, d.through)
			}
		}
		j.mu.Lock()
		objs := len(j.objects)
		j.mu.Unlock()
		if files := len(names(t, filepath.Join(dir, objectsName))); files != objs {
			t.Errorf("round %d: objects/ holds %d files; the records use %d", round, files, objs)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A compacted records.jsonl is one line per record kept, behind one
// "dropped" line that carries what was dropped: Open reads back the same
// records and the same count, and new ids follow the old ones.
func TestCompactedFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	j, err := Open(Options{Dir: dir, MaxRecords: 64})
	if err != nil {
		t.Fatal(err)
	}
	j.compactMin = 1 << 30 // only when asked below
	ids, saved := boundLoad(t, j, "c", 300)
	if err := j.rewriteRecords(); err != nil {
		t.Fatal(err)
	}
	before := checkBound(t, j, ids, saved)
	drop := j.Dropped()
	b, err := os.ReadFile(filepath.Join(dir, recordsName))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\x00\n"), "\n")
	want := fmt.Sprintf(`{"dropped_through":%d,"dropped":%d,"until":"%s"}`, drop.through, drop.Records, drop.Until.Format("2006-01-02T15:04:05.999999999Z07:00"))
	if len(lines) != len(before)+1 || lines[0] != want {
		t.Errorf("compacted records.jsonl: %d lines, first %s; want %d, first %s", len(lines), lines[0], len(before)+1, want)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = openJournal(t, Options{Dir: dir, MaxRecords: 64})
	sameHistory(t, "after Open", mustHistory(t, j, "data://"), before)
	if d := j.Dropped(); d.Records != drop.Records || !d.Until.Equal(drop.Until) || d.through != drop.through {
		t.Errorf("Dropped() after Open = %+v; before %+v", d, drop)
	}
	r := save(t, j, "open", "data://c/new", []byte("new"))
	if r.seq <= before[0].seq {
		t.Errorf("new record %s after records up to %s", r.ID, before[0].ID)
	}
}

// BenchmarkRecordMemory reports what the journal holds in memory per
// record once it is full (heap after a collection, over the records
// kept), making three times the bound in records: overwrites of content
// it holds (a digest each) and creates, on a few hundred uris, as a long
// run through the mount makes them. The count it holds stays at the
// bound (asserted); the bytes per record are reported, not asserted.
func BenchmarkRecordMemory(b *testing.B) {
	const bound = 50000
	data := []byte("soakword written again\n")
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		j := openJournal(b, Options{MaxRecords: bound, Batched: true})
		b.StartTimer()
		for i := range 3 * bound {
			uri := fmt.Sprintf("repo://soak-w/w%d.txt", i%300)
			var err error
			if i%2 == 0 {
				err = j.Created(ev("create", uri))
			} else {
				err = j.Save(ev("open", uri), 0o644, int64(len(data)), source(data, nil))
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		runtime.GC()
		runtime.GC() // pooled buffers go with the second
		runtime.ReadMemStats(&m1)
		n := j.Stats().Records
		if n > bound {
			b.Fatalf("%d records held; the bound is %d", n, bound)
		}
		b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/float64(n), "heap-bytes/record")
		runtime.KeepAlive(j)
		j.Close()
		b.StartTimer()
	}
}

// A compaction that fails (here its rename: the new file was written on
// another filesystem) leaves records.jsonl as it was and no temporary
// behind; the journal goes on, tries again only once the file has grown
// by half, and then compacts.
func TestCompactionFailureLeavesRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	shm, err := os.MkdirTemp("/dev/shm", "journal-test-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	defer os.RemoveAll(shm)
	if statDev(t, filepath.Dir(dir)) == statDev(t, shm) {
		t.Skip("/dev/shm is on the same filesystem as the test's folder")
	}
	j, err := Open(Options{Dir: dir, MaxRecords: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	j.compactMin = 1 << 30
	ids, saved := boundLoad(t, j, "f", 300)
	more := func(n int) {
		m, ms := boundLoad(t, j, "f", n)
		ids = append(ids, m...)
		for id, b := range ms {
			saved[id] = b
		}
		j.compactWG.Wait()
	}
	// Set only while no compaction runs (after compactWG.Wait).
	var tries int
	j.tempName = func(name string) string {
		if !strings.Contains(name, "records-") {
			return name
		}
		tries++
		return filepath.Join(shm, filepath.Base(name))
	}
	j.compactMin = 32
	more(1)
	lines := fileLines(t, dir)
	if tries != 1 || lines < 300 {
		t.Fatalf("%d compactions tried, %d lines left in records.jsonl; want 1 tried and failed", tries, lines)
	}
	if left := names(t, shm); len(left) != 0 {
		t.Errorf("a failed compaction left %v", left)
	}
	checkBound(t, j, ids, saved)
	// No new try while the file grows by less than half; then one, which
	// (the fault gone) compacts it.
	for n := fileLines(t, dir); n < lines+lines/2-8; n = fileLines(t, dir) {
		more(1)
	}
	if tries != 1 {
		t.Errorf("%d compactions tried before records.jsonl grew by half again", tries)
	}
	j.tempName = nil
	for n := fileLines(t, dir); n > 2*64+32; n = fileLines(t, dir) {
		if n > 2*lines {
			t.Fatalf("records.jsonl has %d lines, and no compaction was tried again", n)
		}
		more(1)
	}
	checkBound(t, j, ids, saved)
}

func statDev(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Dev
}

// SetLimits applies lowered bounds while the journal runs, as Open
// applies bounds lowered since the last run (a reload of the config):
// the oldest records past MaxRecords are dropped and the oldest kept
// content past MaxBytes is evicted, durably; a lower MaxFileBytes keeps
// the next larger file out; raised bounds drop nothing.
func TestSetLimitsWhileRunning(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "journal")
			j := openJournal(t, Options{Dir: dir, MaxRecords: 1000, Batched: batched})
			ids, saved := boundLoad(t, j, "s", 200)
			if err := j.SetLimits(0, 0, 2000); err != nil {
				t.Fatal(err)
			}
			if got := mustHistory(t, j, "data://"); len(got) != 200 {
				t.Fatalf("raising max_records left %d of 200 records", len(got))
			}
			if err := j.SetLimits(0, 0, 50); err != nil {
				t.Fatal(err)
			}
			low := checkBound(t, j, ids, saved)
			if len(low) > 50 {
				t.Fatalf("%d records after SetLimits with max 50", len(low))
			}
			// Content: two kept files of 1,000 bytes, then a bound of 1,500.
			save(t, j, "open", "data://x", pattern(1000, 5))
			save(t, j, "open", "data://y", pattern(1000, 6))
			if err := j.SetLimits(1500, 0, 50); err != nil {
				t.Fatal(err)
			}
			if x, y := newest(t, j, "data://x"), newest(t, j, "data://y"); x.Kept || !y.Kept {
				t.Errorf("after lowering MaxBytes: x kept=%v y kept=%v; want false, true", x.Kept, y.Kept)
			}
			if err := j.SetLimits(1500, 500, 50); err != nil {
				t.Fatal(err)
			}
			save(t, j, "open", "data://z", pattern(800, 7))
			if z := newest(t, j, "data://z"); z.Kept {
				t.Errorf("a file of 800 bytes is kept under max_file_bytes 500: %+v", z)
			}
			after := mustHistory(t, j, "data://")
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			if err := j.SetLimits(0, 0, 0); !errors.Is(err, ErrClosed) {
				t.Errorf("SetLimits after Close: %v; want ErrClosed", err)
			}
			j = openJournal(t, Options{Dir: dir, MaxRecords: 1000, Batched: batched})
			sameHistory(t, "after Open", mustHistory(t, j, "data://"), after)
		})
	}
}
