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
	"syscall"
	"testing"
	"time"
)

// crashDirEnv makes TestCrashChild the child of TestCrashRecovery.
const crashDirEnv = "JOURNAL_CRASH_CHILD_DIR"

// TestCrashChild saves in a loop until it is killed, printing the id of
// every record once Save has returned (so it is durable).
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("run by TestCrashRecovery")
	}
	round, _ := strconv.Atoi(os.Getenv(crashDirEnv + "_ROUND"))
	j, err := Open(Options{Dir: dir, MaxBytes: 8 << 20})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	out := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		uri := fmt.Sprintf("data://r%d/f%d", round, i%13)
		// Sizes up to 700 KiB keep a write in flight most of the time;
		// every third content repeats, so dedupe runs too.
		data := pattern((i*37919)%(700<<10), byte(i%3+round*3))
		var err error
		if i%11 == 0 {
			err = j.Created(ev("create", uri))
		} else {
			err = j.Save(ev("open", uri), 0o644, int64(len(data)), source(data, nil))
		}
		if err != nil {
			fmt.Fprintln(out, "ERROR", err)
			out.Flush()
			os.Exit(1)
		}
		fmt.Fprintln(out, "SAVED", newest(t, j, uri).ID)
		out.Flush()
	}
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
	for round := range 6 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, fmt.Sprintf("%s_ROUND=%d", crashDirEnv, round))
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
		// Kill at a different point each round, after at least one Save.
		first := <-lines
		time.Sleep(time.Duration(20+round*37) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		n := 0
		record := func(ln string) {
			id, ok := strings.CutPrefix(ln, "SAVED ")
			if !ok {
				t.Fatalf("round %d: child said %q", round, ln)
			}
			saved[id] = true
			n++
		}
		record(first)
		for ln := range lines {
			record(ln)
		}
		t.Logf("round %d: %d records before SIGKILL", round, n)
		checkRecovered(t, dir, saved)
	}
}

func checkRecovered(t *testing.T, dir string, saved map[string]bool) {
	t.Helper()
	left := 0
	for _, name := range names(t, dir) {
		if strings.HasPrefix(name, tmpPrefix) {
			left++
		}
	}
	t.Logf("temporary copies left by the kill: %d", left)
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
