package fs

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/uring"
	"github.com/neuralis/neuralisfs/mounts"
)

// uringSwitchOn turns the kernel's FUSE over io_uring switch on for the test
// and puts back what it found when the test ends. It skips where the kernel
// has no switch or the test is not root (CI=true fails where FUSE or root is
// missing, and skips only a kernel without the feature).
func uringSwitchOn(t *testing.T) { uringSwitch(t, "Y") }

// uringSwitch sets the kernel's switch to v ("Y" or "N") for the test.
func uringSwitch(t *testing.T, v string) {
	t.Helper()
	needRootFUSE(t)
	was, err := os.ReadFile(uring.ParamPath)
	if err != nil {
		t.Skipf("kernel without FUSE over io_uring: %v", err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(uring.ParamPath, was, 0o644); err != nil {
			t.Errorf("putting %s back to %q: %v", uring.ParamPath, strings.TrimSpace(string(was)), err)
		}
	})
	if err := os.WriteFile(uring.ParamPath, []byte(v+"\n"), 0o644); err != nil {
		t.Fatalf("setting %s to %s: %v", uring.ParamPath, v, err)
	}
}

// needRootFUSE skips where FUSE or root is missing (CI=true fails).
func needRootFUSE(t *testing.T) {
	t.Helper()
	why := ""
	if _, err := os.Stat("/dev/fuse"); err != nil {
		why = "FUSE unavailable: " + err.Error()
	} else if os.Geteuid() != 0 {
		why = "direct mounts and the kernel's switch need root"
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
}

// loopbackOverUring mounts go-fuse's loopback filesystem of back through
// internal/uring until the test ends.
func loopbackOverUring(t *testing.T, back string) (string, *uring.Server) {
	t.Helper()
	root, err := fusefs.NewLoopbackRoot(back)
	if err != nil {
		t.Fatal(err)
	}
	mo := fuse.MountOptions{FsName: "uringtest", Name: "uringtest"}
	h := uringHandler(fusefs.NewNodeFS(root, &fusefs.Options{MountOptions: mo}), mo)
	mnt := t.TempDir()
	srv, err := uring.Mount(mnt, h, uring.Options{FsName: "uringtest", Subtype: "uringtest", Ring: true})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	pollHack(mnt) // this process reads the mount: see pollHack
	return mnt, srv
}

// TestUringFallback: with the kernel's switch off the same mount is served
// over /dev/fuse alone.
func TestUringFallback(t *testing.T) {
	uringSwitch(t, "N")
	back := t.TempDir()
	if err := os.WriteFile(filepath.Join(back, "hello"), []byte("hello, device\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mnt, srv := loopbackOverUring(t, back)
	if got := srv.Transport(); got != "/dev/fuse" {
		t.Fatalf("transport %q, want /dev/fuse", got)
	}
	b, err := os.ReadFile(filepath.Join(mnt, "hello"))
	if err != nil || string(b) != "hello, device\n" {
		t.Fatalf("read: %q, %v", b, err)
	}
	if ring, dev := srv.Counts(); ring != 0 || dev < 3 {
		t.Errorf("%d requests through the rings, %d through /dev/fuse; want 0 and at least 3", ring, dev)
	}
}

// TestUringLoopback serves go-fuse's loopback filesystem through
// internal/uring with FUSE_OVER_IO_URING negotiated, drives it with ls, cat
// and a shell redirection, and checks that the requests came through the
// rings.
func TestUringLoopback(t *testing.T) {
	uringSwitchOn(t)
	back := t.TempDir()
	if err := os.WriteFile(filepath.Join(back, "hello"), []byte("hello, ring\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mnt, srv := loopbackOverUring(t, back)
	if got := srv.Transport(); got != "io_uring" {
		t.Fatalf("transport %q, want io_uring", got)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mi), " "+mnt+" ") || !strings.Contains(string(mi), "fuse.uringtest uringtest") {
		t.Fatalf("%s is not a fuse.uringtest mount in /proc/self/mountinfo", mnt)
	}
	ring0, _ := srv.Counts()

	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	if got := run("ls", mnt); got != "hello\n" {
		t.Errorf("ls: %q, want %q", got, "hello\n")
	}
	if got := run("cat", filepath.Join(mnt, "hello")); got != "hello, ring\n" {
		t.Errorf("cat: %q", got)
	}
	run("sh", "-c", "echo written through the ring > "+filepath.Join(mnt, "new"))
	b, err := os.ReadFile(filepath.Join(back, "new"))
	if err != nil || string(b) != "written through the ring\n" {
		t.Errorf("backing file new: %q, %v", b, err)
	}
	if got := run("cat", filepath.Join(mnt, "new")); got != "written through the ring\n" {
		t.Errorf("cat new: %q", got)
	}
	if got := run("ls", mnt); got != "hello\nnew\n" {
		t.Errorf("ls after write: %q", got)
	}
	ring1, dev1 := srv.Counts()
	// ls, cat and the redirection need at least a LOOKUP, OPEN or
	// OPENDIR, READ or READDIR, CREATE and WRITE each.
	if ring1-ring0 < 8 {
		t.Errorf("%d requests came through the rings (%d through /dev/fuse), want at least 8", ring1-ring0, dev1)
	}
	t.Logf("requests: %d through io_uring, %d through /dev/fuse", ring1, dev1)
}

// mountTree mounts a neuralisfs tree of one local source at back with
// [mount] io_uring = mode until the test ends.
func mountTree(t *testing.T, back, mode string) (*FS, string, error) {
	t.Helper()
	return mountTreeWith(t, back, mode, nil)
}

// mountTreeWith is mountTree with Options changed by opt first.
func mountTreeWith(t *testing.T, back, mode string, opt func(*Options)) (*FS, string, error) {
	t.Helper()
	src := mounts.NewSource(mounts.SourceConfig{Slug: "d", Kind: mounts.KindLocal, Path: back})
	src.Refresh()
	t.Cleanup(src.Close)
	o := Options{Sources: []*mounts.Source{src}, EntryTimeout: time.Second, AttrTimeout: time.Second, Passthrough: true}
	if opt != nil {
		opt(&o)
	}
	f := New(o)
	mnt := t.TempDir()
	srv, err := f.Mount(mnt, MountOptions{IOURing: mode})
	if err != nil {
		return nil, "", err
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return f, mnt, nil
}

// TestUringTree: the neuralisfs tree with [mount] io_uring = "on" is served
// through the rings (ls, cat, a shell redirection, rm, with passthrough on),
// and the backing folder sees the changes.
func TestUringTree(t *testing.T) {
	uringSwitchOn(t)
	back := t.TempDir()
	if err := os.WriteFile(filepath.Join(back, "hello"), []byte("hello, tree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, mnt, err := mountTree(t, back, "on")
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	if got := f.Transport(mnt); got != "io_uring" {
		t.Fatalf("transport %q, want io_uring", got)
	}
	d := filepath.Join(mnt, "d")
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	before := f.RingRequests()
	if got := run("ls", d); got != "hello\n" {
		t.Errorf("ls: %q", got)
	}
	if got := run("cat", filepath.Join(d, "hello")); got != "hello, tree\n" {
		t.Errorf("cat: %q", got)
	}
	run("sh", "-c", "echo through the ring > "+filepath.Join(d, "new"))
	if b, err := os.ReadFile(filepath.Join(back, "new")); err != nil || string(b) != "through the ring\n" {
		t.Errorf("backing new: %q, %v", b, err)
	}
	if got := run("cat", filepath.Join(d, "new")); got != "through the ring\n" {
		t.Errorf("cat new: %q", got)
	}
	run("rm", filepath.Join(d, "hello"))
	if _, err := os.Stat(filepath.Join(back, "hello")); !os.IsNotExist(err) {
		t.Errorf("backing hello after rm: %v", err)
	}
	if got := run("ls", d); got != "new\n" {
		t.Errorf("ls after rm: %q", got)
	}
	n := f.RingRequests() - before
	if n < 8 {
		t.Errorf("%d requests came through the rings, want at least 8", n)
	}
	t.Logf("%d requests through io_uring", n)
}

// TestUringTreeSwitchOff: "on" refuses to mount while the kernel's switch
// is off, naming it; "auto" mounts over /dev/fuse.
func TestUringTreeSwitchOff(t *testing.T) {
	uringSwitch(t, "N")
	back := t.TempDir()
	if _, _, err := mountTree(t, back, "on"); err == nil || !strings.Contains(err.Error(), uring.ParamPath) {
		t.Errorf("io_uring = on with the switch off: %v, want an error naming %s", err, uring.ParamPath)
	}
	f, mnt, err := mountTree(t, back, "auto")
	if err != nil {
		t.Fatalf("mount auto: %v", err)
	}
	if got := f.Transport(mnt); got != "/dev/fuse" {
		t.Errorf("transport %q, want /dev/fuse", got)
	}
	if _, err := os.ReadDir(filepath.Join(mnt, "d")); err != nil {
		t.Errorf("readdir: %v", err)
	}
}

// TestUringTreeParallel: many callers at once, on every CPU, writing,
// reading back and listing through the rings.
func TestUringTreeParallel(t *testing.T) {
	uringSwitchOn(t)
	back := t.TempDir()
	f, mnt, err := mountTree(t, back, "on")
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	d := filepath.Join(mnt, "d")
	before := f.RingRequests()
	const workers, files = 16, 40
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			dir := filepath.Join(d, "w"+strconv.Itoa(w))
			if err := os.Mkdir(dir, 0o755); err != nil {
				errs <- err
				return
			}
			for i := range files {
				p := filepath.Join(dir, strconv.Itoa(i))
				want := strings.Repeat(strconv.Itoa(w*files+i), 1000)
				if err := os.WriteFile(p, []byte(want), 0o644); err != nil {
					errs <- err
					return
				}
				if got, err := os.ReadFile(p); err != nil || string(got) != want {
					errs <- fmt.Errorf("read back %s: %d bytes, %v", p, len(got), err)
					return
				}
			}
			if es, err := os.ReadDir(dir); err != nil || len(es) != files {
				errs <- fmt.Errorf("readdir %s: %d entries, %v", dir, len(es), err)
				return
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for w := range workers {
		es, err := os.ReadDir(filepath.Join(back, "w"+strconv.Itoa(w)))
		if err != nil || len(es) != files {
			t.Errorf("backing w%d: %d entries, %v", w, len(es), err)
		}
	}
	if n := f.RingRequests() - before; n < workers*files {
		t.Errorf("%d requests came through the rings, want at least %d", n, workers*files)
	}
}

// pollHack has the kernel learn at once that the filesystem does not poll,
// as go-fuse's WaitMount does for the mounts it makes (it cannot for a
// uring.Mount): a POLL for its magic file is answered ENOSYS, and the
// kernel sends no more. Otherwise the first epoll_ctl the Go runtime makes
// on one of the mount's files from this very process waits for a POLL
// answer while holding its P, which can starve the goroutines that would
// answer it.
func pollHack(dir string) {
	fd, err := unix.Open(filepath.Join(dir, ".go-fuse-epoll-hack"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	unix.Close(fd)
}

// TestUringUnmount: a mount served over io_uring unmounts through its
// go-fuse Server's Unmount, as one over /dev/fuse does, and three mounts
// and unmounts in a row leave no descriptor (the /dev/fuse ones, the
// rings') and no goroutine behind (the queues, the /dev/fuse readers, the
// go-fuse Server).
func TestUringUnmount(t *testing.T) {
	uringSwitchOn(t)
	back := t.TempDir()
	if err := os.WriteFile(filepath.Join(back, "f"), []byte("unmount me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	round := func() {
		t.Helper()
		src := mounts.NewSource(mounts.SourceConfig{Slug: "d", Kind: mounts.KindLocal, Path: back})
		src.Refresh()
		defer src.Close()
		f := New(Options{Sources: []*mounts.Source{src}, EntryTimeout: time.Second, AttrTimeout: time.Second, Passthrough: true})
		mnt := t.TempDir()
		srv, err := f.Mount(mnt, MountOptions{IOURing: "on"})
		if err != nil {
			t.Fatalf("mount: %v", err)
		}
		if got := f.Transport(mnt); got != "io_uring" {
			t.Errorf("transport %q, want io_uring", got)
		}
		if out, err := exec.Command("cat", filepath.Join(mnt, "d", "f")).CombinedOutput(); err != nil || string(out) != "unmount me\n" {
			t.Errorf("cat: %q, %v", out, err)
		}
		if f.RingRequests() == 0 {
			t.Errorf("no request came through the rings")
		}
		if err := srv.Unmount(); err != nil {
			t.Fatalf("Unmount: %v", err)
		}
		if isMount(t, mnt) {
			t.Errorf("%s is still mounted after Unmount", mnt)
		}
		done := make(chan struct{})
		go func() { srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Wait did not return after Unmount")
		}
	}
	round() // the first mount starts what stays for the process (signal handling, poller)
	fds, gos, ths := openFDs(t), runtime.NumGoroutine(), threads(t)
	for range 3 {
		round()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		// Each ring entry's thread ends with it (it stays locked): a
		// leak would add a queue's worth per round. The Go runtime may
		// keep a few idle threads it started meanwhile.
		nfds, ngos, nths := openFDs(t), runtime.NumGoroutine(), threads(t)
		if len(nfds) <= len(fds) && ngos <= gos && nths < ths+8 {
			t.Logf("descriptors %d, goroutines %d, threads %d before; %d, %d, %d after", len(fds), gos, ths, len(nfds), ngos, nths)
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("after three mounts and unmounts: %d descriptors (was %d: %v, now %v), %d threads (was %d), %d goroutines (was %d):\n%s",
				len(nfds), len(fds), fds, nfds, nths, ths, ngos, gos, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openFDs lists this process's descriptors with what they point at.
func openFDs(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		fds = append(fds, e.Name()+"="+l)
	}
	return fds
}

// threads counts this process's threads.
func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads: line in /proc/self/status")
	return 0
}

// isMount reports whether dir is a mountpoint in /proc/self/mountinfo.
func isMount(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// TestUringForgetsGather: once the rings serve, a reader of /dev/fuse
// waits uring.ForgetLinger after a FORGET before it reads again, so the
// FORGETs of an rm -rf (one per file) gather into BATCH_FORGETs instead
// of waking a reader each. Each of the two readers reads at most once per
// linger, so the reads of /dev/fuse while the rm runs are bounded by its
// time, whatever the machine's speed: before the linger there was one per
// file. Every name made again afterwards reads back (the forgotten nodes
// went cleanly).
func TestUringForgetsGather(t *testing.T) {
	uringSwitchOn(t)
	back := t.TempDir()
	mnt, srv := loopbackOverUring(t, back)
	d := filepath.Join(mnt, "d")
	const n = 2000
	fill := func(what string) {
		t.Helper()
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%04d", i)), []byte(what+strconv.Itoa(i)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill("first ")
	_, dev0 := srv.Counts()
	start := time.Now()
	if out, err := exec.Command("rm", "-rf", d).CombinedOutput(); err != nil {
		t.Fatalf("rm -rf: %v\n%s", err, out)
	}
	// The FORGETs are queued by the time rm is done (each unlinked
	// inode goes at its unlink); wait for the readers to take them.
	var dev1 uint64
	for last, still, end := dev0, 0, time.Now().Add(10*time.Second); still < 5; {
		if time.Now().After(end) {
			t.Fatalf("reads of /dev/fuse still coming 10 s after rm -rf: %d since it started", dev1-dev0)
		}
		time.Sleep(10 * time.Millisecond)
		_, dev1 = srv.Counts()
		if dev1 == last {
			still++
		} else {
			last, still = dev1, 0
		}
	}
	took := time.Since(start)
	reads := dev1 - dev0
	bound := 2 * (uint64(took/uring.ForgetLinger) + 1)
	if reads > bound {
		t.Errorf("rm -rf of %d files: %d reads of /dev/fuse in %v; want at most %d (two readers, one read each per %v)", n, reads, took, bound, uring.ForgetLinger)
	}
	if reads == 0 {
		t.Errorf("rm -rf of %d files: no read of /dev/fuse: the FORGETs did not come", n)
	}
	t.Logf("rm -rf of %d files: %d reads of /dev/fuse in %v", n, reads, took)
	if _, err := os.Stat(filepath.Join(back, "d")); !os.IsNotExist(err) {
		t.Fatalf("backing d after rm -rf: %v", err)
	}
	fill("again ")
	for i := range n {
		b, err := os.ReadFile(filepath.Join(d, fmt.Sprintf("f%04d", i)))
		if want := "again " + strconv.Itoa(i); err != nil || string(b) != want {
			t.Fatalf("f%04d made again reads %q, %v; want %q", i, b, err, want)
		}
	}
}

// TestUringSlowRequestsLeaveEntriesForOthers: requests that take long to
// answer (a .status of a large checkout, an agent's operation waiting for
// an approval's lock) hold their ring entries; once they held every entry
// of a CPU's queue, the kernel kept every other request of that CPU's
// callers waiting behind them, the owner's too, where over /dev/fuse
// go-fuse starts another reader. Twenty such requests per CPU, each held
// until the test lets them go and each sent once the one before reached
// the filesystem, must all reach it, and a stat from each CPU must then
// be answered while they wait. (Requests that arrive together while no
// entry is free wait for the queue's next reply: the kernel hands a new
// entry only requests that come after it; see internal/uring.)
func TestUringSlowRequestsLeaveEntriesForOthers(t *testing.T) {
	uringSwitchOn(t)
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("taskset (util-linux) is not installed")
	}
	back := t.TempDir()
	if err := os.WriteFile(filepath.Join(back, "fast"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := fusefs.NewLoopbackRoot(back)
	if err != nil {
		t.Fatal(err)
	}
	mo := fuse.MountOptions{FsName: "uringtest", Name: "uringtest"}
	h := uringHandler(fusefs.NewNodeFS(root, &fusefs.Options{MountOptions: mo}), mo)
	release := make(chan struct{})
	var held atomic.Int32
	slow := func(in, out [][]byte) (int, syscall.Errno) {
		if len(in[0]) >= 8 && binary.LittleEndian.Uint32(in[0][4:]) == 1 { // LOOKUP
			for _, b := range in[1:] {
				if bytes.Contains(b, []byte("slow-")) {
					held.Add(1)
					<-release
				}
			}
		}
		return h(in, out)
	}
	mnt := t.TempDir()
	srv, err := uring.Mount(mnt, slow, uring.Options{FsName: "uringtest", Subtype: "uringtest", Ring: true})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	var wg sync.WaitGroup
	once := sync.OnceFunc(func() { close(release); wg.Wait() })
	t.Cleanup(func() {
		once()
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	pollHack(mnt)
	if srv.Transport() != "io_uring" {
		t.Fatalf("transport %q, want io_uring", srv.Transport())
	}
	var cpus unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cpus); err != nil {
		t.Fatal(err)
	}
	const perCPU = 20
	for cpu := range 1024 {
		if !cpus.IsSet(cpu) {
			continue
		}
		for i := range perCPU {
			was := held.Load()
			wg.Go(func() {
				// Answered ENOENT once let go; only that it was asked counts.
				exec.Command("taskset", "-c", fmt.Sprint(cpu), "stat", filepath.Join(mnt, fmt.Sprintf("slow-%d-%d", cpu, i))).Run()
			})
			deadline := time.Now().Add(5 * time.Second)
			for held.Load() == was && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if held.Load() == was {
				t.Fatalf("slow request %d on CPU %d did not reach the filesystem in 5 s: it waits for a ring entry", i+1, cpu)
			}
		}
	}
	for cpu := range 1024 {
		if !cpus.IsSet(cpu) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, "taskset", "-c", fmt.Sprint(cpu), "stat", "-c", "%s", filepath.Join(mnt, "fast")).CombinedOutput()
		cancel()
		if err != nil || strings.TrimSpace(string(out)) != "1" {
			t.Errorf("stat on CPU %d while slow requests wait: %q, %v", cpu, out, err)
		}
	}
}
