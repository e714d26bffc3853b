package fs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
)

// The marks of the mount's own changes are bounded: once there are
// ownPruneAt of them, those past the window go. A burst whose marks are
// all within the window keeps them, and is not looked through again until
// it has doubled.
func TestOwnMarksDropThoseOutsideTheWindow(t *testing.T) {
	var o ownChanges
	o.m = map[string]ownMark{}
	old := time.Now().Add(-2 * ownWindow)
	for i := range ownPruneAt {
		o.m[ownKey("s", fmt.Sprint("old", i))] = ownMark{when: old}
	}
	o.mark("s", "new", nil, nil)
	if len(o.m) != 1 || !o.recent("s", "new") {
		t.Fatalf("after a mark with %d marks past the window: %d kept; want only the new one", ownPruneAt, len(o.m))
	}
	for i := range 3 * ownPruneAt {
		o.mark("s", fmt.Sprint("burst", i), nil, nil)
	}
	if len(o.m) != 3*ownPruneAt+1 {
		t.Errorf("a burst within the window kept %d marks; want all %d", len(o.m), 3*ownPruneAt+1)
	}
	if o.prune <= ownPruneAt*2 {
		t.Errorf("the next look through the marks is at %d; want past twice the burst seen at the last one", o.prune)
	}
}

// BenchmarkOwnMarkBurst is the cost of a mark in a burst of 200,000
// changes within the window (an untar or rm -rf faster than 25,000
// requests a second): every mark looked through every other one before.
func BenchmarkOwnMarkBurst(b *testing.B) {
	keys := make([]string, 200000)
	for i := range keys {
		keys[i] = fmt.Sprint("f", i)
	}
	for b.Loop() {
		var o ownChanges
		for _, k := range keys {
			o.mark("s", k, nil, nil)
		}
	}
}

// A watcher report of a rename made through the mount that comes in
// between the backing folder's rename and go-fuse's move of the node
// leaves the node at its new name, and the file's next requests find it.
// Before, the report that the old name was gone, with the node still
// there, was taken for an external removal and dropped the node's only
// name; go-fuse then had nothing to move, and a link of the renamed file
// answered ENOENT (TestLongPathsAgainstPlainFolder failed so once, under
// load, in CI).
func TestWatcherReportDuringRenameKeepsTheNode(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, f := mountFS(t, dir, Options{})
	p, q := filepath.Join(root, "p"), filepath.Join(root, "q")
	// A change through the mount first, as in the failing run: the
	// report of p then finds it among the mount's own recent changes.
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	reported := make(chan struct{})
	hook := func(slug, oldRel, newRel string) {
		go func() {
			f.Changed([]mounts.Change{{Slug: slug, Rel: oldRel, Gone: true}})
			close(reported)
		}()
		// Without the hold, the report waits for the kernel, which holds
		// the folder until the rename is answered.
		select {
		case <-reported:
		case <-time.After(500 * time.Millisecond):
		}
	}
	afterBackingRename.Store(&hook)
	err := os.Rename(p, q)
	afterBackingRename.Store(nil)
	if err != nil {
		t.Fatal(err)
	}
	<-reported
	if err := os.Link(q, p); err != nil {
		t.Fatalf("link of the renamed file after a watcher report of its old name: %v", err)
	}
	if err := os.Chmod(q, 0o600); err != nil {
		t.Errorf("chmod of the renamed file: %v", err)
	}
	var sp, sq, sb unix.Stat_t
	if err := errors.Join(unix.Lstat(p, &sp), unix.Lstat(q, &sq), unix.Lstat(filepath.Join(dir, "q"), &sb)); err != nil {
		t.Fatal(err)
	}
	if sp.Ino != sq.Ino || sq.Nlink != 2 || sb.Nlink != 2 || sb.Mode&0o777 != 0o600 {
		t.Errorf("after the link: p ino %d, q ino %d nlink %d; backing nlink %d mode %o; want one file with two names, mode 600",
			sp.Ino, sq.Ino, sq.Nlink, sb.Nlink, sb.Mode&0o777)
	}
}

// A watcher report of a folder the kernel holds no node for, answered
// while a process looks the folder up (it starts working in it), leaves
// the process its working folder: the report expires the name instead of
// dropping it. Before, the report dropped the name the lookup had just
// given the kernel, and the process's getcwd answered ENOENT
// (TestHeldGitRunsIsLeftForAReviewer failed so, under load, in CI). A
// "no such file" the kernel keeps for a name that appears behind the
// mount still goes at the report.
func TestWatcherReportRacingALookupKeepsTheWorkingFolder(t *testing.T) {
	t.Run("dev-fuse", func(t *testing.T) {
		dir := t.TempDir()
		root, f := mountFS(t, dir, Options{})
		reportRacingALookup(t, f, dir, root)
	})
	t.Run("io_uring", func(t *testing.T) {
		uringSwitchOn(t)
		dir := t.TempDir()
		f, mnt, err := mountTree(t, dir, "on")
		if err != nil {
			t.Fatal(err)
		}
		reportRacingALookup(t, f, dir, filepath.Join(mnt, "d"))
	})
}

// reportRacingALookup is TestWatcherReportRacingALookupKeepsTheWorkingFolder
// on f, which mounts the source d of dir at root.
func reportRacingALookup(t *testing.T, f *FS, dir, root string) {
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	var (
		cmd     *exec.Cmd
		stdin   io.WriteCloser
		out     bytes.Buffer
		started error
	)
	hook := func(slug, rel string) {
		if rel != "sub" {
			return
		}
		// The lookup the report races: a process starts in the folder.
		cmd = exec.Command(os.Args[0], "-test.run=^TestGetcwdProcess$")
		cmd.Env = append(os.Environ(), "NEURALISFS_GETCWD=1")
		cmd.Dir = filepath.Join(root, "sub")
		cmd.Stdout, cmd.Stderr = &out, &out
		if stdin, started = cmd.StdinPipe(); started == nil {
			started = cmd.Start()
		}
	}
	afterInvalidateLooked.Store(&hook)
	f.Changed([]mounts.Change{{Slug: "d", Rel: "sub"}})
	afterInvalidateLooked.Store(nil)
	if started != nil || cmd == nil {
		t.Fatalf("the racing process did not start (ran: %v): %v", cmd != nil, started)
	}
	stdin.Write([]byte("\n"))
	stdin.Close()
	err := cmd.Wait()
	if got, want := strings.TrimSpace(out.String()), filepath.Join(root, "sub"); err != nil || got != want {
		t.Errorf("getcwd in a folder a watcher report raced the lookup of: %v, %q, want %q", err, got, want)
	}

	// A negative entry the kernel keeps goes at the report.
	nw := filepath.Join(root, "new")
	if _, err := os.Lstat(nw); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lstat of a name not made yet: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "new"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(nw); err == nil {
		t.Log("the kernel kept no negative entry for the name (its timeout passed): the report's part is not shown")
	}
	f.Changed([]mounts.Change{{Slug: "d", Rel: "new"}})
	if _, err := os.Lstat(nw); err != nil {
		t.Errorf("a name made behind the mount after the kernel cached its absence, once reported: %v", err)
	}
}

// TestGetcwdProcess is the process TestWatcherReportRacingALookupKeepsTheWorkingFolder
// starts: once a line comes on its stdin it prints what getcwd(2) answers
// (not $PWD, which os.Getwd trusts, nor a walk up "..", which coreutils'
// pwd falls back to). Run by itself it does nothing.
func TestGetcwdProcess(t *testing.T) {
	if os.Getenv("NEURALISFS_GETCWD") != "1" {
		return
	}
	io.ReadAll(io.LimitReader(os.Stdin, 1))
	buf := make([]byte, unix.PathMax)
	n, err := unix.Getcwd(buf)
	if err != nil {
		fmt.Println("getcwd:", err)
		os.Exit(1)
	}
	fmt.Println(string(buf[:n-1]))
	os.Exit(0)
}
