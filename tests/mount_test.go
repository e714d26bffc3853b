package tests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestOtherUIDOwnsWhatItCreates(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	out, err := run(t, 1001, fmt.Sprintf(`set -e
cd %q
echo mine > mine.txt
mkdir mydir
ln -s mine.txt mylink
mkfifo myfifo
stat -c '%%u:%%g %%n' mine.txt mydir myfifo
stat -c '%%u:%%g %%n' -L mylink`, e.m("data")))
	if err != nil {
		t.Fatalf("uid 1001 could not write: %v\n%s", err, out)
	}
	for _, name := range []string{"mine.txt", "mydir", "mylink", "myfifo"} {
		var st syscall.Stat_t
		must(t, syscall.Lstat(e.b("data", name), &st))
		if st.Uid != 1001 || st.Gid != 1001 {
			t.Errorf("backing %s is owned by %d:%d; want 1001:1001", name, st.Uid, st.Gid)
		}
	}
	// The kernel checks mode bits against the caller (default_permissions).
	writeFile(t, e.b("data", "rootonly"), "root\n", 0o600)
	if out, err := run(t, 1001, "cat "+e.m("data", "rootonly")); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("uid 1001 read a 0600 root file: %v %s", err, out)
	}
}

func TestSetgidFolderGivesItsGroup(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	must(t, os.Mkdir(e.b("data", "shared"), 0o777))
	must(t, os.Chown(e.b("data", "shared"), 0, 4242))
	must(t, syscall.Chmod(e.b("data", "shared"), 0o2777))
	out, err := run(t, 1001, "echo x > "+e.m("data", "shared", "f")+" && mkdir "+e.m("data", "shared", "d"))
	if err != nil {
		t.Fatalf("%v %s", err, out)
	}
	for _, n := range []string{"f", "d"} {
		var st syscall.Stat_t
		must(t, syscall.Lstat(e.b("data", "shared", n), &st))
		if st.Uid != 1001 || st.Gid != 4242 {
			t.Errorf("%s: owned by %d:%d; want 1001:4242 (setgid folder's group)", n, st.Uid, st.Gid)
		}
	}
}

func TestExternalChangesShowAtOnce(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	writeFile(t, e.b("data", "f.txt"), "old\n", 0o644)
	must(t, os.MkdirAll(e.b("data", "dir"), 0o755))
	// Let the kernel cache the name, attributes and pages.
	for range 3 {
		if b, err := os.ReadFile(e.m("data", "f.txt")); err != nil || string(b) != "old\n" {
			t.Fatalf("read through mount: %q %v", b, err)
		}
		os.ReadDir(e.m("data", "dir"))
		os.Stat(e.m("data", "dir", "new.txt"))
	}
	start := time.Now()
	writeFile(t, e.b("data", "f.txt"), "a longer new content\n", 0o644)
	writeFile(t, e.b("data", "dir", "new.txt"), "new\n", 0o644)
	eventually(t, 2*time.Second, "changed content visible", func() bool {
		b, _ := os.ReadFile(e.m("data", "f.txt"))
		return string(b) == "a longer new content\n"
	})
	eventually(t, 2*time.Second, "new file visible", func() bool {
		_, err := os.Stat(e.m("data", "dir", "new.txt"))
		return err == nil
	})
	t.Logf("external change visible after %v", time.Since(start))
	must(t, os.Remove(e.b("data", "f.txt")))
	eventually(t, 2*time.Second, "removed file gone", func() bool {
		_, err := os.Stat(e.m("data", "f.txt"))
		return errors.Is(err, os.ErrNotExist)
	})
	// A folder moved in from outside is walked and watched.
	outside := filepath.Join(t.TempDir(), "tree")
	writeFile(t, filepath.Join(outside, "x", "y.txt"), "y\n", 0o644)
	must(t, os.Rename(outside, e.b("data", "moved")))
	eventually(t, 2*time.Second, "moved-in folder visible", func() bool {
		b, _ := os.ReadFile(e.m("data", "moved", "x", "y.txt"))
		return string(b) == "y\n"
	})
	os.ReadFile(e.m("data", "moved", "x", "y.txt"))
	writeFile(t, e.b("data", "moved", "x", "y.txt"), "yy\n", 0o644)
	eventually(t, 2*time.Second, "change inside moved-in folder visible", func() bool {
		b, _ := os.ReadFile(e.m("data", "moved", "x", "y.txt"))
		return string(b) == "yy\n"
	})
}

func TestMissingSourceIsAnErrorThenAppears(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"}, src{slug: "later", missing: true})
	writeFile(t, e.b("data", "ok.txt"), "ok\n", 0o644)
	_, err := os.ReadDir(e.m("later"))
	if !errors.Is(err, syscall.ENOMEDIUM) {
		t.Errorf("listing a missing source: %v; want ENOMEDIUM (an error, never an empty folder)", err)
	}
	if _, err := os.Stat(e.m("later", "x")); err == nil {
		t.Errorf("stat inside a missing source succeeded")
	}
	srcs, err := os.ReadFile(filepath.Join(e.mnt, ".neuralis", "sources"))
	must(t, err)
	if !strings.Contains(string(srcs), "later\tlocal\tUNAVAILABLE\tSOURCE_MISSING") {
		t.Errorf(".neuralis/sources does not say why:\n%s", srcs)
	}
	if b, err := os.ReadFile(e.m("data", "ok.txt")); err != nil || string(b) != "ok\n" {
		t.Errorf("the other source stopped serving: %q %v", b, err)
	}
	writeFile(t, e.b("later", "hello.txt"), "hello\n", 0o644)
	eventually(t, 5*time.Second, "the source is picked up once its folder appears", func() bool {
		b, err := os.ReadFile(e.m("later", "hello.txt"))
		return err == nil && string(b) == "hello\n"
	})
	eventually(t, 5*time.Second, "status AVAILABLE once indexed", func() bool {
		srcs, _ = os.ReadFile(filepath.Join(e.mnt, ".neuralis", "sources"))
		return strings.Contains(string(srcs), "later\tlocal\tAVAILABLE")
	})
	// And when it goes away again, it is an error again.
	must(t, os.RemoveAll(e.b("later")))
	eventually(t, 5*time.Second, "a removed source answers an error", func() bool {
		_, err := os.ReadDir(e.m("later"))
		return errors.Is(err, syscall.ENOMEDIUM)
	})
}

// A symlink swapped into the backing folder while the mount is used must
// never let an operation reach outside the source.
func TestSymlinkSwapCannotEscape(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "f"), "OUTSIDE-CANARY\n", 0o644)
	writeFile(t, e.b("data", "d", "f"), "inside\n", 0o644)
	real := e.b("data", "d.real")
	stop := make(chan struct{})
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d := e.b("data", "d")
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.Rename(d, real)
			os.Symlink(outside, d)
			time.Sleep(50 * time.Microsecond)
			os.Remove(d)
			os.Rename(real, d)
			swaps.Add(1)
			// Leave the real folder in place most of the time, so the
			// client also gets through (and the test is not vacuous).
			time.Sleep(5 * time.Millisecond)
		}
	}()
	// The reader runs in a sandbox that has only the mount: a symlink that
	// the caller's kernel resolves cannot reach the outside folder there, so
	// the canary can only come back if the daemon itself followed a link.
	script := `n=0; w=0
end=$((SECONDS+4))
while [ $SECONDS -lt $end ]; do
  if out=$(cat /m/data/d/f 2>/dev/null); then n=$((n+1)); case "$out" in *CANARY*) echo LEAK;; esac; fi
  echo w 2>/dev/null > /m/data/d/w && w=$((w+1))
  mkdir /m/data/d/newdir 2>/dev/null; chmod 600 /m/data/d/f 2>/dev/null; ls /m/data/d >/dev/null 2>&1
done
echo "reads=$n writes=$w"`
	out, _ := run(t, 0, sandbox(e.mnt, "/m")+" bash -c '"+script+"'")
	if strings.Contains(out, "LEAK") {
		t.Errorf("read the outside file through the mount")
	}
	if !strings.Contains(out, "reads=") || strings.Contains(out, "reads=0 ") {
		t.Errorf("the sandboxed client never read the file, so the test proves nothing: %s", out)
	}
	t.Logf("%d swaps; sandboxed client: %s", swaps.Load(), strings.TrimSpace(out))
	close(stop)
	wg.Wait()
	ents, _ := os.ReadDir(outside)
	for _, ent := range ents {
		if ent.Name() != "f" {
			t.Errorf("the mount created %s outside the source", ent.Name())
		}
	}
	fi, _ := os.Stat(filepath.Join(outside, "f"))
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("the mount changed the mode of a file outside the source: %v", fi.Mode())
	}
	// A symlink in the source is shown as a symlink: the caller's kernel
	// resolves it, with the caller's own rights (DESIGN.md §5).
	must(t, os.Symlink(outside, e.b("data", "out")))
	if target, err := os.Readlink(e.m("data", "out")); err != nil || target != outside {
		t.Errorf("readlink through mount = %q, %v", target, err)
	}
}

func TestStaleMountIsRecovered(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	writeFile(t, e.b("data", "f"), "f\n", 0o644)
	e.kill()
	// Over io_uring a request made while the kernel is still tearing the
	// dead daemon's rings down ends with ECONNABORTED instead (the daemon's
	// stale-mount check takes both).
	if _, err := os.ReadDir(e.mnt); !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ECONNABORTED) {
		t.Fatalf("after SIGKILL readdir = %v; want ENOTCONN or ECONNABORTED (a stale mount)", err)
	}
	e.start()
	if b, err := os.ReadFile(e.m("data", "f")); err != nil || string(b) != "f\n" {
		t.Fatalf("remount over a stale mount: %q %v", b, err)
	}
	// `neuralisfs unmount` clears a stale mount too.
	e.kill()
	out, err := exec.Command(binPath, "unmount", e.mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("unmount of a stale mount: %v %s", err, out)
	}
	if mounted(e.mnt) {
		t.Errorf("stale mount still there after neuralisfs unmount: %s", out)
	}
}

func TestUnmountWhenBusyIsLazy(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	writeFile(t, e.b("data", "f"), "f\n", 0o644)
	holder := exec.Command("sleep", "30")
	holder.Dir = e.m("data")
	must(t, holder.Start())
	defer holder.Process.Kill()
	out, err := exec.Command(binPath, "unmount", e.mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("unmount: %v %s", err, out)
	}
	if !strings.Contains(string(out), "busy") || !strings.Contains(string(out), "lazily") {
		t.Errorf("unmount of a busy mount did not say it was lazy: %s", out)
	}
	holder.Process.Kill()
	holder.Wait()
	select {
	case err := <-e.done:
		if err != nil {
			t.Errorf("daemon exit: %v", err)
		}
		e.cmd = nil
	case <-time.After(10 * time.Second):
		t.Errorf("daemon did not exit after its mount was detached")
	}
}

func TestParallelReadersAndWriters(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	const n = 8
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir := e.m("data", fmt.Sprintf("w%d", i))
			if err := os.Mkdir(dir, 0o755); err != nil {
				errs <- err
				return
			}
			for j := range 50 {
				p := filepath.Join(dir, fmt.Sprintf("f%d", j))
				want := strings.Repeat(fmt.Sprintf("%d-%d;", i, j), 100)
				if err := os.WriteFile(p, []byte(want), 0o644); err != nil {
					errs <- err
					return
				}
				got, err := os.ReadFile(p)
				if err != nil || string(got) != want {
					errs <- fmt.Errorf("%s: read back %d bytes, err %v", p, len(got), err)
					return
				}
				if j%10 == 0 {
					if err := os.Rename(p, p+".moved"); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if a, b := snapshot(t, e.b("data")), snapshot(t, e.m("data")); a != b {
		t.Errorf("mount and backing differ after parallel writes")
	}
}

// Paths near PATH_MAX work because the daemon resolves them relative to
// held folder descriptors (DESIGN.md §11).
func TestLongPaths(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	seg := strings.Repeat("d", 200)
	var parts []string
	total := len(e.m("data"))
	for total+len(seg)+1 < 4000 {
		parts = append(parts, seg)
		total += len(seg) + 1
	}
	script := fmt.Sprintf("set -e; cd %q; for i in $(seq 1 %d); do mkdir %s; cd %s; done; echo deep > file; cat file", e.m("data"), len(parts), seg, seg)
	if out := sh(t, script); strings.TrimSpace(out) != "deep" {
		t.Errorf("deep write/read: %q", out)
	}
	out := sh(t, fmt.Sprintf("cd %q && cd %s && cat file", e.b("data"), strings.Join(parts, "/")))
	if strings.TrimSpace(out) != "deep" {
		t.Errorf("backing file missing: %q", out)
	}
}

func TestReservedRootAndStatfs(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	ents, err := os.ReadDir(e.mnt)
	must(t, err)
	var names []string
	for _, ent := range ents {
		names = append(names, ent.Name())
	}
	if strings.Join(names, ",") != ".neuralis,data" {
		t.Errorf("root lists %v; want [.neuralis data]", names)
	}
	if err := os.WriteFile(filepath.Join(e.mnt, "x"), nil, 0o644); err == nil {
		t.Errorf("created a file in the virtual root")
	}
	if err := os.WriteFile(filepath.Join(e.mnt, ".neuralis", "whoami"), []byte("x"), 0o644); err == nil {
		t.Errorf("wrote to a control file")
	}
	var st syscall.Statfs_t
	must(t, syscall.Statfs(e.m("data"), &st))
	if st.Blocks == 0 {
		t.Errorf("statfs reports no blocks")
	}
	out := sh(t, "grep ' "+e.mnt+" ' /proc/mounts")
	if !strings.Contains(out, "fuse.neuralisfs") || !strings.Contains(out, "default_permissions") || !strings.Contains(out, "allow_other") {
		t.Errorf("mount options: %s", out)
	}
}

func TestConfigErrorsNameFileLineAndKey(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bad.toml")
	writeFile(t, cfg, `state_dir = "/tmp/x"
bogus = 1

[[source]]
slug = "ok"
kind = "local"
path = "/srv/ok"

[[source]]
slug = "ok"
kind = "nfs"
path = "relative/dir"
colour = "red"
`, 0o644)
	out, err := exec.Command(binPath, "config", "validate", "-c", cfg).CombinedOutput()
	if err == nil {
		t.Fatalf("config validate accepted a bad config:\n%s", out)
	}
	for _, want := range []string{
		cfg + ":2: bogus: unknown key",
		cfg + ":10: source[1].slug: \"ok\" is already used by the source at line 4",
		cfg + ":11: source[1].kind: \"nfs\" is not a kind of source",
		cfg + ":12: source[1].path: path \"relative/dir\" is relative",
		cfg + ":13: source.colour: unknown key",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("config validate output lacks %q:\n%s", want, out)
		}
	}
	// A bad config changes nothing: mount refuses before touching the mountpoint.
	mnt := filepath.Join(dir, "mnt")
	must(t, os.Mkdir(mnt, 0o755))
	out, err = exec.Command(binPath, "mount", "-c", cfg, mnt).CombinedOutput()
	if err == nil || mounted(mnt) {
		t.Errorf("mount with a bad config: %v %s", err, out)
	}
}

// A mountpoint or state_dir inside a source would make the daemon serve its
// own mount (or journal) through the mount: refused before anything is made.
func TestNestingIsRefused(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	must(t, os.MkdirAll(filepath.Join(src, "mnt"), 0o755))
	link := filepath.Join(dir, "alias")
	must(t, os.Symlink(src, link)) // the same folder under another name
	for _, tc := range []struct{ name, state, mnt string }{
		{"mountpoint inside a source", filepath.Join(dir, "state"), filepath.Join(link, "mnt")},
		{"state_dir inside a source", filepath.Join(link, "state"), filepath.Join(dir, "m2")},
	} {
		os.MkdirAll(tc.mnt, 0o755)
		cfg := filepath.Join(dir, "c.toml")
		writeFile(t, cfg, fmt.Sprintf("state_dir = %q\n[[source]]\nslug = \"s\"\nkind = \"local\"\npath = %q\n", tc.state, src), 0o644)
		out, err := exec.Command(binPath, "mount", "-c", cfg, tc.mnt).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "inside source") || mounted(tc.mnt) {
			t.Errorf("%s: %v %s", tc.name, err, out)
		}
		if _, err := os.Stat(filepath.Join(src, "state")); err == nil {
			t.Errorf("%s: the refused mount created its state inside the source", tc.name)
		}
	}
}

// `.neuralis/sources` and `neuralisfs status` say which transport serves
// the mount: io_uring in the run over it (make uring-test) and wherever
// "auto" finds the kernel's switch on, /dev/fuse otherwise.
func TestTransportIsShown(t *testing.T) {
	sw, _ := os.ReadFile("/sys/module/fuse/parameters/enable_uring")
	e := newEnv(t, "", src{slug: "data"})
	want := "/dev/fuse"
	switch os.Getenv("NEURALISFS_TEST_IO_URING") {
	case "on":
		want = "io_uring"
	case "", "auto":
		if strings.TrimSpace(string(sw)) == "Y" {
			want = "io_uring"
		}
	}
	b, err := os.ReadFile(filepath.Join(e.mnt, ".neuralis", "sources"))
	if err != nil || !strings.HasPrefix(string(b), "# transport: "+want+"\n") {
		t.Errorf(".neuralis/sources = %q, %v; want a first line naming %s", b, err, want)
	}
	out, err := exec.Command(binPath, "status", "-c", e.cfg).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "mount: "+e.mnt+" over "+want+"\n") {
		t.Errorf("neuralisfs status: %v\n%s", err, out)
	}
}
