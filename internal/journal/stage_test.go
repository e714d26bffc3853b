package journal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// keepFile writes data to path and calls Keep on it as the daemon does
// (O_PATH descriptor, fstat); when leaving, it then removes the name, as
// the unlink that follows would.
func keepFile(tb testing.TB, j *Journal, e Event, path string, data []byte, leaving bool) error {
	tb.Helper()
	if data != nil {
		if err := os.WriteFile(path, data, 0o640); err != nil {
			tb.Fatal(err)
		}
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		tb.Fatal(err)
	}
	stamp := fmt.Sprintf("%d:%d:%d:%d:%d", st.Dev, st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano())
	err = j.Keep(e, File{FD: fd, Mode: st.Mode, UID: st.Uid, GID: st.Gid, Size: st.Size, Links: uint64(st.Nlink), Stamp: stamp}, leaving)
	if err == nil && leaving {
		os.Remove(path)
	}
	return err
}

// Keep in batched mode returns before the content is published; History,
// Plan and Content asked at once still see exactly the prior bytes and mode,
// for a linked (leaving) and a copied file, and the staging area is empty
// once they are published.
func TestKeepImmediateRevert(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j := openJournal(t, Options{Dir: dir, Batched: true})
	src := t.TempDir()
	for i, leaving := range []bool{true, false, true} {
		data := pattern(3000+i*5000, byte(i))
		uri := fmt.Sprintf("data://f%d", i)
		e := ev("open", uri)
		if leaving {
			e.Op = "unlink"
		}
		if err := keepFile(t, j, e, filepath.Join(src, strconv.Itoa(i)), data, leaving); err != nil {
			t.Fatal(err)
		}
		p, err := j.Plan(uri, "")
		if err != nil {
			t.Fatalf("Plan right after Keep: %v", err)
		}
		if p.Digest != digest(data) || p.Mode != 0o640 || p.Size != int64(len(data)) {
			t.Errorf("plan %+v; want %s 0640 %d", p, digest(data), len(data))
		}
		got, err := content(j, p.Record)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("content: %d bytes, %v", len(got), err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if left := names(t, filepath.Join(dir, stagedName)); len(left) > 0 {
		t.Errorf("staged copies left after Close: %v", left)
	}
}

// An O_TRUNC open reaches the daemon as an open and a truncate of the same
// unchanged file: one record, not two. A change in between is recorded.
func TestKeepSkipsRepeat(t *testing.T) {
	for _, batched := range []bool{false, true} {
		// A clock that stands still: the two Keeps of the unchanged file
		// are within sameWindow however slow the machine is.
		at := time.Now()
		j := openJournal(t, Options{Batched: batched, Now: func() time.Time { return at }})
		p := filepath.Join(t.TempDir(), "f")
		if err := keepFile(t, j, ev("open", "data://f"), p, []byte("one"), false); err != nil {
			t.Fatal(err)
		}
		if err := keepFile(t, j, ev("truncate", "data://f"), p, nil, false); err != nil {
			t.Fatal(err)
		}
		if n := len(mustHistory(t, j, "data://f")); n != 1 {
			t.Errorf("batched=%v: %d records after open+truncate of an unchanged file; want 1", batched, n)
		}
		time.Sleep(20 * time.Millisecond) // a new mtime, whatever the clock's grain
		if err := keepFile(t, j, ev("truncate", "data://f"), p, []byte("two!"), false); err != nil {
			t.Fatal(err)
		}
		if n := len(mustHistory(t, j, "data://f")); n != 2 {
			t.Errorf("batched=%v: %d records after a changed file's truncate; want 2", batched, n)
		}
	}
}

// keepChildEnv makes TestKeepCrashChild the child of TestKeepCrashRecovery.
const keepChildEnv = "JOURNAL_KEEP_CRASH_DIR"

// TestKeepCrashChild keeps files in batched mode until it is killed,
// printing "SAVED <id> <digest>" once Keep has returned (from then on the
// change may happen: the record and its content must survive the kill).
func TestKeepCrashChild(t *testing.T) {
	dir := os.Getenv(keepChildEnv)
	if dir == "" {
		t.Skip("run by TestKeepCrashRecovery")
	}
	round, _ := strconv.Atoi(os.Getenv(keepChildEnv + "_ROUND"))
	killAt := os.Getenv(keepChildEnv + "_KILL_AT")
	// Publish often, so that every step comes round soon (this child
	// process is the only one that runs with it).
	gatherMax = 20 * time.Millisecond
	j, err := Open(Options{Dir: filepath.Join(dir, "journal"), Batched: true})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	// A small staging log, so it fills (and Keep copies to staged/) and
	// is cut back while the child runs.
	j.smu.Lock()
	j.slTruncAt, j.slMax = 32<<10, 128<<10
	if killAt == "rewind staged log" {
		// A log that stays under twice slTruncAt is rewound, not cut.
		j.slMax = 48 << 10
	}
	if killAt == "read staged log" {
		// The publisher reads copies back from the log only when Keep
		// did not hand them over in memory.
		j.slInflightMax = 0
	}
	j.smu.Unlock()
	var mu sync.Mutex
	seen := 0
	j.trace = func(s string) {
		mu.Lock()
		defer mu.Unlock()
		if s == killAt {
			if seen++; seen == 3 {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
	}
	src := filepath.Join(dir, "src")
	os.MkdirAll(src, 0o755)
	var outMu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				uri := fmt.Sprintf("data://r%d/w%d/f%d", round, w, i%5)
				n := (i*7919)%(24<<10) + 1
				if i%4 >= 2 {
					// Larger than Keep hashes: linked when leaving,
					// read back from the staging log otherwise. Few
					// sizes, so that retention evicts nothing.
					n = hashBytes + 1 + (i/4)%5*1000
				}
				data := pattern(n, byte(i%3+round*3+w))
				leaving := i%2 == 0
				op := "open"
				if leaving {
					op = "unlink"
				}
				e := ev(op, uri)
				e.PID = uint32(1000*round + w)
				err := keepFile(t, j, e, filepath.Join(src, fmt.Sprintf("r%dw%df%d", round, w, i)), data, leaving)
				j.mu.Lock()
				id := shownID(j.ids, j.lastLocked(uri).ID)
				j.mu.Unlock()
				outMu.Lock()
				if err != nil {
					fmt.Fprintln(out, "ERROR", err)
					out.Flush()
					os.Exit(1)
				}
				fmt.Fprintln(out, "SAVED", id, digest(data))
				out.Flush()
				outMu.Unlock()
			}
		})
	}
	wg.Wait()
}

// TestKeepCrashRecovery SIGKILLs a process that keeps files in batched
// mode at every step of staging and publishing, and checks that Open
// finishes what was staged: every record whose Keep returned is there,
// kept, and restores exactly the bytes it was given; no temporary or
// staged copy is left or adopted; every object holds its digest.
func TestKeepCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := t.TempDir()
	want := map[string]string{} // record id → digest of the content before
	for round, killAt := range []string{
		"link staged", "create staged O_EXCL", "write staged log", "append records",
		"re-hash", "read staged log", "store staged copy", "truncate staged log", "rewind staged log",
		"create tmp O_EXCL", "fsync tmp", "link", "remove tmp",
		"fsync objects", "fsync records", "remove staged",
		"hash staged copy", "fsync staged", "link staged object",
		"write pack", "link pack", "fsync packs", "remove pack tmp", "", "", "",
	} {
		var delay time.Duration
		if killAt == "" {
			delay = time.Duration(15+round*23) * time.Millisecond
		}
		out := runKilled(t, round, "TestKeepCrashChild", []string{keepChildEnv + "=" + dir,
			fmt.Sprintf("%s_ROUND=%d", keepChildEnv, round), keepChildEnv + "_KILL_AT=" + killAt}, delay)
		n := 0
		for _, ln := range out {
			f := strings.Fields(ln)
			if len(f) != 3 || f[0] != "SAVED" {
				t.Fatalf("round %d: child said %q", round, ln)
			}
			want[f[1]] = f[2]
			n++
		}
		staged := len(names(t, filepath.Join(dir, "journal", stagedName)))
		t.Logf("round %d: killed at %q after %d records, %d staged copies left", round, killAt, n, staged)
		checkKeepRecovered(t, filepath.Join(dir, "journal"), want)
	}
}

func checkKeepRecovered(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	j, err := Open(Options{Dir: dir, Batched: true})
	if err != nil {
		t.Fatalf("Open after SIGKILL: %v", err)
	}
	defer j.Close()
	if left := names(t, filepath.Join(dir, stagedName)); len(left) > 0 {
		t.Errorf("staged copies left after Open: %v", left)
	}
	if st, err := os.Stat(filepath.Join(dir, stagedLogName)); err != nil || st.Size() != logHeaderLen {
		t.Errorf("staging log after Open: %v, %v; want just its header", st, err)
	}
	for _, name := range names(t, dir) {
		if strings.HasPrefix(name, tmpPrefix) {
			t.Errorf("temporary copy %s left after Open", name)
		}
	}
	for _, name := range names(t, filepath.Join(dir, objectsName)) {
		b, _ := os.ReadFile(filepath.Join(dir, objectsName, name))
		if hexOf(b) != name {
			t.Errorf("object %s does not hold its digest", name)
		}
	}
	checkPacks(t, dir)
	have := map[string]Record{}
	for _, r := range mustHistory(t, j, "data://") {
		have[r.ID] = r
	}
	for id, d := range want {
		r, ok := have[id]
		switch {
		case !ok:
			t.Errorf("record %s was lost: its Keep had returned", id)
		case !r.Kept || r.Before != d:
			t.Errorf("record %s: before %q kept %v; want %s kept", id, r.Before, r.Kept, d)
		default:
			if b, err := content(j, r); err != nil || digest(b) != d {
				t.Errorf("record %s: content %s, %v; want %s", id, digest(b), err, d)
			}
		}
	}
}

// snapshot copies the files of journal dir to a new directory, as a crash
// at this moment would leave them (the copy has no LOCK held).
func snapshot(tb testing.TB, dir string) string {
	tb.Helper()
	dst := filepath.Join(tb.TempDir(), "j")
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		tb.Fatal(err)
	}
	return dst
}

// stopPublisher stops j's publisher where it would store or read back a
// staged copy, so nothing gets published: held gets a value once it has
// stopped, and release lets it go on.
func stopPublisher(j *Journal) (held chan struct{}, release func()) {
	stop := make(chan struct{})
	held = make(chan struct{}, 1)
	j.trace = func(s string) {
		if s == "read staged log" || s == "store staged copy" {
			select {
			case held <- struct{}{}:
			default:
			}
			<-stop
		}
	}
	return held, func() { close(stop) }
}

// Copies staged in the log and not yet published when the process died
// are published by Open when they are intact; a copy whose bytes changed
// (a power cut), that the log no longer holds, or that sits in a log whose
// header is unreadable is reported not kept, never adopted.
func TestKeepLogRecovery(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j := openJournal(t, Options{Dir: dir, Batched: true})
	held, release := stopPublisher(j)
	defer func() { release(); j.Close() }()
	src := t.TempDir()
	datas := [][]byte{pattern(3000, 1), pattern(5000, 2), pattern(7000, 3)}
	for i, data := range datas {
		if err := keepFile(t, j, ev("open", fmt.Sprintf("data://f%d", i)), filepath.Join(src, strconv.Itoa(i)), data, false); err != nil {
			t.Fatal(err)
		}
	}
	<-held
	logLen := logHeaderLen + int64(3000+5000+7000)
	for _, tt := range []struct {
		name   string
		damage func(t *testing.T, log string)
		kept   []bool
	}{
		{"intact", func(*testing.T, string) {}, []bool{true, true, true}},
		{"byte flipped", func(t *testing.T, log string) {
			f, err := os.OpenFile(log, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b := make([]byte, 1)
			f.ReadAt(b, logHeaderLen+3000+10)
			b[0] ^= 0xff
			f.WriteAt(b, logHeaderLen+3000+10)
		}, []bool{true, false, true}},
		{"cut short", func(t *testing.T, log string) {
			if err := os.Truncate(log, logLen-1); err != nil {
				t.Fatal(err)
			}
		}, []bool{true, true, false}},
		{"header unreadable", func(t *testing.T, log string) {
			f, err := os.OpenFile(log, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			f.WriteAt([]byte("garbage"), 0)
		}, []bool{false, false, false}},
		{"log gone", func(t *testing.T, log string) {
			if err := os.Remove(log); err != nil {
				t.Fatal(err)
			}
		}, []bool{false, false, false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			snap := snapshot(t, dir)
			log := filepath.Join(snap, stagedLogName)
			if st, err := os.Stat(log); err != nil || st.Size() != logLen {
				t.Fatalf("staging log %v, %v; want %d bytes", st, err, logLen)
			}
			tt.damage(t, log)
			k, err := Open(Options{Dir: snap, Batched: true})
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			for i, data := range datas {
				r := newest(t, k, fmt.Sprintf("data://f%d", i))
				if r.Kept != tt.kept[i] {
					t.Errorf("f%d: kept %v; want %v", i, r.Kept, tt.kept[i])
					continue
				}
				if !r.Kept {
					if _, err := k.Content(r); err == nil {
						t.Errorf("f%d: Content of a record not kept succeeded", i)
					}
					continue
				}
				if b, err := content(k, r); err != nil || !bytes.Equal(b, data) {
					t.Errorf("f%d: content %d bytes, %v; want the %d bytes kept", i, len(b), err, len(data))
				}
			}
			if st, err := os.Stat(log); err != nil || st.Size() != logHeaderLen {
				t.Errorf("staging log after Open: %v, %v; want just its header", st, err)
			}
			// New copies go on at offsets no earlier line used.
			k.smu.Lock()
			base := k.slBase
			k.smu.Unlock()
			if base < int64(3000+5000+7000) {
				t.Errorf("base %d after recovery: offsets of the old copies could be reused", base)
			}
		})
	}
}

// The staging log is cut back once everything in it is published and
// enough has gone through it; a full log sends copies to staged/. Every
// copy restores exactly, before and after a reopen.
func TestKeepLogCutBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j := openJournal(t, Options{Dir: dir, Batched: true})
	j.smu.Lock()
	j.slTruncAt, j.slMax = 16<<10, 20<<10
	j.smu.Unlock()
	src := t.TempDir()
	want := map[string][]byte{}
	cuts, rewinds := 0, 0
	j.trace = func(s string) {
		// publisher goroutine only; read after Close
		switch s {
		case "truncate staged log":
			cuts++
		case "rewind staged log":
			rewinds++
		}
	}
	for i := range 40 {
		uri := fmt.Sprintf("data://f%d", i)
		data := pattern(3000+i*100, byte(i))
		want[uri] = data
		if err := keepFile(t, j, ev("open", uri), filepath.Join(src, strconv.Itoa(i)), data, false); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			mustHistory(t, j, uri) // wait for it to be published
		}
	}
	check := func(j *Journal) {
		t.Helper()
		for uri, data := range want {
			r := newest(t, j, uri)
			if b, err := content(j, r); err != nil || !bytes.Equal(b, data) {
				t.Errorf("%s: %d bytes, %v; want %d bytes", uri, len(b), err, len(data))
			}
		}
	}
	check(j)
	// Everything is published: a rewound log keeps the length it reached
	// (at least slTruncAt), where a cut one would be shorter.
	if st, err := os.Stat(filepath.Join(dir, stagedLogName)); err != nil {
		t.Error(err)
	} else if st.Size() < 16<<10 {
		t.Errorf("staging log of %d bytes while open; want it rewound, still at least %d bytes long", st.Size(), 16<<10)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// The log never goes past twice slTruncAt here (slMax), so emptying
	// it keeps its length: it is rewound, and only Close may cut it.
	if rewinds < 2 || cuts > 1 {
		t.Errorf("staging log rewound %d times and cut %d; want at least 2 rewinds and at most Close's cut", rewinds, cuts)
	}
	if st, err := os.Stat(filepath.Join(dir, stagedLogName)); err != nil || st.Size() != logHeaderLen {
		t.Errorf("staging log after Close: %v, %v; want just its header", st, err)
	}
	k := openJournal(t, Options{Dir: dir, Batched: true})
	check(k)
}

// A reused object is re-hashed until a re-hash has proved it once its
// ctime has settled; then it is reused on its stat alone, until anything
// changes the file: a change that keeps its size and mtime still moves
// its ctime, and the next reuse re-hashes and finds the conflict. Reading
// for a revert always re-hashes.
func TestReuseProvedUnchanged(t *testing.T) {
	defer func(d time.Duration) { settleTime = d }(settleTime)
	settleTime = 30 * time.Millisecond
	dir := filepath.Join(t.TempDir(), "j")
	j := openJournal(t, Options{Dir: dir})
	var mu sync.Mutex
	rehashes := 0
	j.trace = func(s string) {
		if s == "re-hash" {
			mu.Lock()
			rehashes++
			mu.Unlock()
		}
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := rehashes
		rehashes = 0
		return n
	}
	data := pattern(4096, 5)
	save(t, j, "open", "data://a", data)
	save(t, j, "open", "data://a", data) // ctime not settled: re-hashed, not remembered
	if n := count(); n != 1 {
		t.Fatalf("%d re-hashes for a reuse; want 1", n)
	}
	time.Sleep(2 * settleTime)
	for range 3 {
		save(t, j, "open", "data://a", data)
	}
	if n := count(); n != 1 {
		t.Errorf("%d re-hashes for 3 reuses of a settled object; want 1 (then its stat)", n)
	}
	r := newest(t, j, "data://a")
	if _, err := j.Plan("data://a", ""); err != nil {
		t.Fatal(err)
	}
	if got, err := content(j, r); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("content %d bytes, %v", len(got), err)
	}
	if n := count(); n != 1 {
		t.Errorf("Plan re-hashed %d times; want 1", n)
	}

	// Other bytes of the same size, the mtime put back.
	obj := filepath.Join(dir, objectsName, hexOf(data))
	st, err := os.Stat(obj)
	if err != nil {
		t.Fatal(err)
	}
	other := pattern(4096, 6)
	if err := os.WriteFile(obj, other, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(obj, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := j.Save(ev("open", "data://a"), 0o644, int64(len(data)), source(data, nil)); !errors.Is(err, ErrConflict) {
		t.Errorf("Save over a changed object = %v; want ErrConflict", err)
	}
	if _, err := j.Plan("data://a", ""); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Plan = %v; want ErrCorrupt", err)
	}
	if got, _ := os.ReadFile(obj); !bytes.Equal(got, other) {
		t.Errorf("the changed entry was changed again")
	}
}

// Keep of a small file whose content the journal holds already writes its
// record at once, with the digest: nothing is staged (no staged line, no
// copy in the log, no link), for an overwrite and for an unlink. A stored
// entry that is corrupt is not adopted: the record says not kept.
func TestKeepStoredContent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j := openJournal(t, Options{Dir: dir, Batched: true})
	src := t.TempDir()
	data := pattern(4000, 7)
	if err := keepFile(t, j, ev("open", "data://first"), filepath.Join(src, "first"), data, false); err != nil {
		t.Fatal(err)
	}
	mustHistory(t, j, "data://first") // published
	logEnd := func() int64 {
		j.smu.Lock()
		defer j.smu.Unlock()
		return j.sl.end
	}
	end := logEnd()
	for i, leaving := range []bool{false, true, false} {
		uri := fmt.Sprintf("data://f%d", i)
		e := ev("open", uri)
		if leaving {
			e.Op = "unlink"
		}
		if err := keepFile(t, j, e, filepath.Join(src, strconv.Itoa(i)), data, leaving); err != nil {
			t.Fatal(err)
		}
		j.mu.Lock()
		r := *j.lastLocked(uri)
		j.mu.Unlock()
		if r.pend != nil || r.staged != "" || r.Before != digest(data) || !r.Kept || r.Size != int64(len(data)) {
			t.Errorf("%s: record %+v; want it kept with its digest at once, nothing staged", uri, r)
		}
	}
	if end != logEnd() {
		t.Errorf("the staging log grew from %d to %d bytes for content already stored", end, logEnd())
	}
	if left := names(t, filepath.Join(dir, stagedName)); len(left) > 0 {
		t.Errorf("staged: %v", left)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := os.ReadFile(filepath.Join(dir, recordsName))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(recs, []byte(`"staged"`)); n != 1 {
		t.Errorf("%d staged lines; want 1 (the first, new content)", n)
	}
	k := openJournal(t, Options{Dir: dir, Batched: true})
	for i := range 3 {
		r := newest(t, k, fmt.Sprintf("data://f%d", i))
		if got, err := content(k, r); err != nil || !bytes.Equal(got, data) {
			t.Errorf("f%d after reopen: %d bytes, %v", i, len(got), err)
		}
	}

	// The stored entry goes bad: a Keep of that content does not adopt it.
	obj := filepath.Join(dir, objectsName, hexOf(data))
	bad := append([]byte(nil), data...)
	bad[10] ^= 1
	if err := os.WriteFile(obj, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := keepFile(t, k, ev("open", "data://g"), filepath.Join(src, "g"), data, false); err != nil {
		t.Fatal(err)
	}
	if r := newest(t, k, "data://g"); r.Kept {
		t.Errorf("record over a corrupt entry: %+v; want not kept", r)
	}
	if got, _ := os.ReadFile(obj); !bytes.Equal(got, bad) {
		t.Errorf("the corrupt entry was changed")
	}
}

// SetBatched switches modes while the journal runs (a reload of [journal]
// sync): strict Keeps are settled when they return (nothing staged),
// batched ones may be staged and are published, and every record's
// content is exact across the switches and after Close and Open.
func TestSetBatchedWhileRunning(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "j")
	j := openJournal(t, Options{Dir: dir})
	// The publisher's batches, counted: only batched Keeps make any. (Set
	// before the first Keep, which hands the publisher its first job.)
	var gathered atomic.Int64
	j.trace = func(step string) {
		if step == "gather" {
			gathered.Add(1)
		}
	}
	src := t.TempDir()
	saved := map[string][]byte{}
	keep := func(i int) {
		t.Helper()
		data := pattern(2000+i*700, byte(i))
		uri := fmt.Sprintf("data://s%d", i)
		if err := keepFile(t, j, ev("open", uri), filepath.Join(src, strconv.Itoa(i)), data, false); err != nil {
			t.Fatal(err)
		}
		saved[uri] = data
	}
	staged := func() int {
		j.mu.Lock()
		defer j.mu.Unlock()
		n := 0
		for _, r := range j.recs {
			if r.pend != nil {
				n++
			}
		}
		return n
	}
	for i := range 5 {
		keep(i)
		if n := staged(); n != 0 {
			t.Fatalf("strict mode: %d records staged after Keep", n)
		}
	}
	if n := gathered.Load(); n != 0 {
		t.Fatalf("strict mode: the publisher gathered %d batches", n)
	}
	if err := j.SetBatched(true); err != nil {
		t.Fatal(err)
	}
	for i := 5; i < 40; i++ {
		keep(i)
	}
	mustHistory(t, j, "data://") // waits for what is being published
	batched := gathered.Load()
	if batched == 0 {
		t.Fatal("after SetBatched(true) no Keep went through the publisher")
	}
	if err := j.SetBatched(false); err != nil {
		t.Fatal(err)
	}
	for i := 40; i < 45; i++ {
		keep(i)
		if n := staged(); n != 0 {
			t.Fatalf("strict again: %d records staged after Keep", n)
		}
	}
	if n := gathered.Load(); n != batched {
		t.Errorf("strict again: the publisher gathered %d more batches", n-batched)
	}
	check := func(j *Journal) {
		t.Helper()
		for uri, data := range saved {
			p, err := j.Plan(uri, "")
			if err != nil {
				t.Fatalf("Plan(%s): %v", uri, err)
			}
			if got, err := content(j, p.Record); err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s: %d bytes, %v; want %d", uri, len(got), err, len(data))
			}
		}
	}
	check(j)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.SetBatched(false); !errors.Is(err, ErrClosed) {
		t.Errorf("SetBatched after Close: %v; want ErrClosed", err)
	}
	check(openJournal(t, Options{Dir: dir}))
}

// A record keeps the file's owner and group, through a restart, in
// batched and strict mode; ReadableBy decides by them and the mode as
// the kernel would (owner bits for the owner, group bits for the group).
func TestRecordKeepsTheOwner(t *testing.T) {
	for _, batched := range []bool{true, false} {
		dir := filepath.Join(t.TempDir(), "j")
		j := openJournal(t, Options{Dir: dir, Batched: batched})
		p := filepath.Join(t.TempDir(), "f")
		if err := keepFile(t, j, ev("open", "data://f"), p, []byte("secret"), false); err != nil {
			t.Fatal(err)
		}
		j.Close()
		j = openJournal(t, Options{Dir: dir, Batched: batched})
		plan, err := j.Plan("data://f", "")
		if err != nil {
			t.Fatal(err)
		}
		if o := plan.Record.Owner; o == nil || o.UID != uint32(os.Getuid()) || o.GID != uint32(os.Getgid()) {
			t.Errorf("batched %v: the record's owner after a restart: %+v, want %d:%d", batched, o, os.Getuid(), os.Getgid())
		}
	}
	for _, tt := range []struct {
		mode     uint32
		owner    *Owner
		uid, gid uint32
		groups   []uint32
		want     bool
	}{
		{0o600, &Owner{0, 0}, 1001, 1001, nil, false},
		{0o600, &Owner{1001, 1001}, 1001, 1001, nil, true},
		{0o640, &Owner{0, 50}, 1001, 1001, []uint32{50}, true},
		{0o640, &Owner{0, 50}, 1001, 50, nil, true},
		{0o604, &Owner{0, 50}, 1001, 50, nil, false},  // the group's bits, not others'
		{0o044, &Owner{1001, 0}, 1001, 0, nil, false}, // the owner's bits
		{0o644, nil, 1001, 1001, nil, true},
		{0o640, nil, 1001, 1001, nil, false}, // no owner recorded: others' bits alone
	} {
		r := Record{Mode: tt.mode, Owner: tt.owner}
		if got := r.ReadableBy(tt.uid, tt.gid, tt.groups); got != tt.want {
			t.Errorf("mode %04o owner %+v: ReadableBy(%d, %d, %v) = %v, want %v", tt.mode, tt.owner, tt.uid, tt.gid, tt.groups, got, tt.want)
		}
	}
}
