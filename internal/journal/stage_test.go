package journal

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
	err = j.Keep(e, File{FD: fd, Mode: st.Mode, Size: st.Size, Links: uint64(st.Nlink), Stamp: stamp}, leaving)
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
		j := openJournal(t, Options{Batched: batched})
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
	j, err := Open(Options{Dir: filepath.Join(dir, "journal"), Batched: true})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
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
				data := pattern((i*7919)%(24<<10)+1, byte(i%3+round*3+w))
				leaving := i%2 == 0
				op := "open"
				if leaving {
					op = "unlink"
				}
				e := ev(op, uri)
				e.PID = uint32(1000*round + w)
				err := keepFile(t, j, e, filepath.Join(src, fmt.Sprintf("r%dw%df%d", round, w, i)), data, leaving)
				j.mu.Lock()
				id := j.lastLocked(uri).ID
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
		"link staged", "create staged O_EXCL", "append records",
		"create tmp O_EXCL", "fsync tmp", "link", "remove tmp",
		"fsync objects", "fsync records", "remove staged", "", "", "",
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKeepCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), keepChildEnv+"="+dir,
			fmt.Sprintf("%s_ROUND=%d", keepChildEnv, round), keepChildEnv+"_KILL_AT="+killAt)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1<<16)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		first, ok := <-lines
		if killAt == "" {
			time.Sleep(time.Duration(15+round*23) * time.Millisecond)
			cmd.Process.Signal(syscall.SIGKILL)
		}
		err = cmd.Wait()
		if ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child ended with %v, not SIGKILL", round, err)
		}
		n := 0
		record := func(ln string) {
			f := strings.Fields(ln)
			if len(f) != 3 || f[0] != "SAVED" {
				t.Fatalf("round %d: child said %q", round, ln)
			}
			want[f[1]] = f[2]
			n++
		}
		if ok {
			record(first)
		}
		for ln := range lines {
			record(ln)
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
