package journal

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// crashDirEnv makes TestCrashChild the child of TestCrashRecovery.
const crashDirEnv = "JOURNAL_CRASH_CHILD_DIR"

// TestCrashChild saves in a loop until it is killed, printing the id of
// every record once Save has returned (so it is durable). With a kill step
// set it kills itself when the journal reaches that step for the third
// time; otherwise four goroutines save until the parent kills it.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("run by TestCrashRecovery")
	}
	round, _ := strconv.Atoi(os.Getenv(crashDirEnv + "_ROUND"))
	killAt := os.Getenv(crashDirEnv + "_KILL_AT")
	j, err := Open(Options{Dir: dir, MaxBytes: 8 << 20})
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
	workers := 4
	if killAt != "" {
		workers = 1
	}
	var outMu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				uri := fmt.Sprintf("data://r%d/w%d/f%d", round, w, i%13)
				// Sizes up to 700 KiB keep a write in flight most of the
				// time; every third content repeats, so dedupe runs too.
				data := pattern((i*37919)%(700<<10), byte(i%3+round*3))
				var err error
				if i%11 == 5 {
					err = j.Created(ev("create", uri))
				} else {
					err = j.Save(ev("open", uri), 0o644, int64(len(data)), source(data, nil))
				}
				outMu.Lock()
				if err != nil {
					fmt.Fprintln(out, "ERROR", err)
					out.Flush()
					os.Exit(1)
				}
				fmt.Fprintln(out, "SAVED", newest(t, j, uri).ID)
				out.Flush()
				outMu.Unlock()
			}
		})
	}
	wg.Wait()
}

// TestCrashRecovery SIGKILLs a process in the middle of journaling, again
// and again in the same journal, and checks that Open recovers: no record
// whose Save returned is lost, every kept record's content verifies, no
// temporary copy is adopted or left, and every object is what its name says.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := filepath.Join(t.TempDir(), "journal")
	saved := map[string]bool{}
	for round, tt := range []struct {
		killAt  string // a step of Save; "" kills from outside at a time
		tmpLeft bool   // a temporary copy is left for Open to remove
		orphan  bool   // an object without a record is left for Open to remove
	}{
		{killAt: "create tmp O_EXCL"},
		{killAt: "fsync tmp", tmpLeft: true},
		{killAt: "link", tmpLeft: true},
		{killAt: "remove tmp", tmpLeft: true, orphan: true},
		{killAt: "fsync objects", orphan: true},
		{killAt: "append records", orphan: true},
		{killAt: "fsync records"},
		{}, {}, {}, {},
	} {
		var delay time.Duration
		if tt.killAt == "" {
			// Kill at a different point each round, after one Save.
			delay = time.Duration(20+round*37) * time.Millisecond
		}
		out := runKilled(t, round, "TestCrashChild", []string{crashDirEnv + "=" + dir,
			fmt.Sprintf("%s_ROUND=%d", crashDirEnv, round), crashDirEnv + "_KILL_AT=" + tt.killAt}, delay)
		n := 0
		for _, ln := range out {
			id, ok := strings.CutPrefix(ln, "SAVED ")
			if !ok {
				t.Fatalf("round %d: child said %q", round, ln)
			}
			saved[id] = true
			n++
		}
		tmps, orphans := leftovers(t, dir)
		t.Logf("round %d: killed at %q after %d records: %d temporary copies, %d unrecorded objects left", round, tt.killAt, n, tmps, orphans)
		if stepped := tt.killAt != ""; stepped && ((tmps > 0) != tt.tmpLeft || (orphans > 0) != tt.orphan) {
			t.Errorf("round %d: killed at %q: left %d temporary copies, %d unrecorded objects; want tmp=%v orphan=%v",
				round, tt.killAt, tmps, orphans, tt.tmpLeft, tt.orphan)
		}
		checkRecovered(t, dir, saved)
	}
}

// runKilled runs the test named child in a child process with env, kills
// it with SIGKILL after delay unless it kills itself at a step, and returns
// the lines it printed before it died.
func runKilled(t *testing.T, round int, child string, env []string, delay time.Duration) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
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
	var out []string
	if first, ok := <-lines; ok {
		out = append(out, first)
	}
	if delay > 0 {
		time.Sleep(delay)
		cmd.Process.Signal(syscall.SIGKILL)
	}
	err = cmd.Wait()
	if ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("round %d: child ended with %v, not SIGKILL", round, err)
	}
	for ln := range lines {
		out = append(out, ln)
	}
	return out
}

// leftovers counts temporary copies and objects that no record names,
// before Open cleans them up.
func leftovers(t *testing.T, dir string) (tmps, orphans int) {
	t.Helper()
	for _, name := range names(t, dir) {
		if strings.HasPrefix(name, tmpPrefix) {
			tmps++
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, recordsName))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names(t, filepath.Join(dir, "objects")) {
		if !strings.Contains(string(b), "sha256:"+name) {
			orphans++
		}
	}
	return tmps, orphans
}

func checkRecovered(t *testing.T, dir string, saved map[string]bool) {
	t.Helper()
	j, err := Open(Options{Dir: dir, MaxBytes: 8 << 20})
	if err != nil {
		t.Fatalf("Open after SIGKILL: %v", err)
	}
	defer j.Close()
	for _, name := range names(t, dir) {
		if strings.HasPrefix(name, tmpPrefix) {
			t.Errorf("temporary copy %s left after Open", name)
		}
	}
	for _, name := range names(t, filepath.Join(dir, "objects")) {
		f, err := os.Open(filepath.Join(dir, "objects", name))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		io.Copy(h, f)
		f.Close()
		if hex.EncodeToString(h.Sum(nil)) != name {
			t.Errorf("object %s does not hold its digest", name)
		}
	}
	all := mustHistory(t, j, "data://")
	have := map[string]bool{}
	for _, r := range all {
		have[r.ID] = true
		switch {
		case r.Before == Absent:
		case r.Kept:
			if _, err := content(j, r); err != nil {
				t.Errorf("record %s: Content: %v", r.ID, err)
			}
		default:
			if _, err := content(j, r); err == nil {
				t.Errorf("record %s: not kept, yet Content succeeded", r.ID)
			}
		}
	}
	for id := range saved {
		if !have[id] {
			t.Errorf("record %s was lost: its Save had returned", id)
		}
	}
}
