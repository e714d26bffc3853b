package tests

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// forgottenPy makes a hard-linked file whose newest name is in folder B,
// makes the kernel forget B while it still holds the file (an O_PATH
// descriptor of its other name pins it), looks B up again, exchanges B
// with C (which holds a different file under the same name) and then
// changes the file through its first name: owner, mode, times, content.
// It prints what it sees; the test compares with the same script on a
// plain folder.
const forgottenPy = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def exchange(a, b):
    if libc.renameat2(-100, a.encode(), -100, b.encode(), 2) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), a)
def t(what, f):
    try:
        r = f()
        print(what, "ok" if r is None else r)
    except OSError as e:
        print(what, e.strerror)
os.chdir(sys.argv[1])
kind = sys.argv[2]
for d in ("A", "B", "C"):
    os.mkdir(d)
if kind == "symlink":
    os.symlink("target", "A/f")
else:
    with open("A/f", "w") as f:
        f.write("the linked file\n")
with open("C/f", "w") as f:
    f.write("another file\n")
os.link("A/f", "B/f", follow_symlinks=False)
os.lstat("B/f")
pin = os.open("A/f", os.O_PATH | os.O_NOFOLLOW)
with open("/proc/sys/vm/drop_caches", "w") as f:
    f.write("2") # unused names and inodes: B, B/f and C, not A/f
print("dropped", flush=True)
sys.stdin.readline() # the daemon has had the FORGETs
os.stat("B")
exchange("B", "C")
t("lchown", lambda: os.lchown("A/f", 1234, 5678))
t("utime", lambda: os.utime("A/f", ns=(10**9, 2 * 10**9), follow_symlinks=False))
t("mtime", lambda: os.lstat("A/f").st_mtime_ns)
if kind == "file":
    t("chmod", lambda: os.chmod("A/f", 0o600))
    def append():
        with open("A/f", "a") as f:
            f.write("appended\n")
    t("append", append)
    t("truncate", lambda: os.truncate("A/f", 5))
for p in ("A/f", "C/f", "B/f"):
    st = os.lstat(p)
    print(p, st.st_uid, st.st_gid, st.st_nlink, st.st_size, oct(st.st_mode))
    if kind == "file":
        print(p, repr(open(p).read()))
os.close(pin)
`

// TestForgottenFolderKeepsItsPlace: go-fuse keeps a folder the kernel
// forgot while it holds a child (a hard-linked file held through its
// other name); looking the folder up again must not put a second inode
// under its name, or a rename of that one leaves the file's path
// pointing at the folder's old place: a change to the file through its
// other name answered ENOENT there, or landed on whatever file now has
// that name.
func TestForgottenFolderKeepsItsPlace(t *testing.T) {
	plain := t.TempDir()
	for _, kind := range []string{"symlink", "file"} {
		// A daemon for each: after the drop, B and C are the only inodes
		// of its mount the kernel forgets, so two FORGETs counted mean
		// it has had B's.
		e := newEnv(t, "\n[metrics]\nlisten = \"127.0.0.1:0\"\n", src{slug: "data"})
		var addr []string
		eventually(t, 10*time.Second, "the daemon logs the metrics address", func() bool {
			addr = regexp.MustCompile(`msg="serving metrics" listen=(\S+)`).FindStringSubmatch(e.stderr.String())
			return addr != nil
		})
		forgets := func() uint64 { return requests(scrape(t, "http://"+addr[1]+"/metrics"), "FORGET") }
		mnt, ref := e.m("data", kind), plain+"/"+kind
		must(t, os.Mkdir(mnt, 0o755))
		must(t, os.Mkdir(ref, 0o755))
		want := runForgotten(t, ref, kind, func() {})
		if strings.Contains(want, "No such file") {
			t.Fatalf("%s: the script fails on a plain folder too:\n%s", kind, want)
		}
		before := forgets()
		got := runForgotten(t, mnt, kind, func() {
			eventually(t, 10*time.Second, "the daemon counts the FORGETs of B and C", func() bool {
				return forgets() >= before+2
			})
		})
		if got != want {
			t.Errorf("%s: on the mount:\n%s\nwant, as on a plain folder:\n%s", kind, got, want)
		}
		// Nothing but the linked file changed on the backing folder.
		if b, err := os.ReadFile(e.b("data", kind, "B", "f")); kind == "file" && (err != nil || string(b) != "another file\n") {
			t.Errorf("%s: the other file, now B/f: %q, %v; want it untouched", kind, b, err)
		}
	}
}

// runForgotten runs forgottenPy in dir; once it has dropped the kernel's
// caches, dropped runs before the script goes on. It returns the script's
// output without its "dropped" line.
func runForgotten(t *testing.T, dir, kind string, dropped func()) string {
	t.Helper()
	cmd := exec.Command("python3", "-c", forgottenPy, dir, kind)
	in, err := cmd.StdinPipe()
	must(t, err)
	outPipe, err := cmd.StdoutPipe()
	must(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	must(t, cmd.Start())
	var out strings.Builder
	sc := bufio.NewScanner(outPipe)
	for sc.Scan() {
		if sc.Text() == "dropped" {
			dropped()
			in.Write([]byte("\n"))
			continue
		}
		out.WriteString(sc.Text() + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s in %s: %v\n%s%s", kind, dir, err, out.String(), stderr.String())
	}
	return out.String()
}
