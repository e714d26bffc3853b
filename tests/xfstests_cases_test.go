package tests

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// xfstestsCases holds, as one script, what xfstests' generic group found
// the mount doing differently from a plain folder (session 29: 035, 079,
// 080, 215, 277, 375); each line it prints must be the same on the mount as
// on the backing filesystem itself. It runs as root in $ROOT; uid 100 sets
// the ACLs.
const xfstestsCases = `
set -e
cd "$ROOT"

# generic/080, 215: a store into a shared writable mapping moves the
# file's mtime and ctime, and stat shows it once the writer is done. Over
# the mount the kernel hears of it when the file is released, which
# close(2) and exit do not wait for: poll a little (the attributes
# otherwise stay cached for a minute). The writer is a process of its
# own, as xfs_io is in those tests.
python3 -c 'open("mapped", "wb").write(b"x" * 8192)'
sleep 1.1
read m0 c0 <<< "$(stat -c '%.9Y %.9Z' mapped)"
python3 - <<'EOF'
import mmap, os
fd = os.open("mapped", os.O_RDWR)
m = mmap.mmap(fd, 8192, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[4096:4100] = b"mmap"
EOF
for i in $(seq 1 40); do
  read m1 c1 <<< "$(stat -c '%.9Y %.9Z' mapped)"
  [ "$m1" != "$m0" ] && [ "$c1" != "$c0" ] && break
  sleep 0.05
done
[ "$m1" != "$m0" ] && echo "mapped write: mtime moved" || echo "mapped write: mtime stayed"
[ "$c1" != "$c0" ] && echo "mapped write: ctime moved" || echo "mapped write: ctime stayed"
od -An -c -j 4096 -N 4 mapped

# generic/277: chattr moves the ctime, at once.
touch flagged
python3 - <<'EOF'
import os, subprocess, time
c0 = os.stat("flagged").st_ctime_ns
time.sleep(0.05)
subprocess.run(["chattr", "+A", "flagged"], check=True)
print("chattr: ctime moved", os.stat("flagged").st_ctime_ns != c0)
EOF
lsattr -d flagged | cut -c1-22

# generic/079: an append-only file opens for writing with O_APPEND only,
# and every write lands at its end.
echo a > appendonly
chattr +a appendonly
if echo b >> appendonly; then echo "append-only: >> appends"; else echo "append-only: >> is refused"; fi
(echo c > appendonly) 2>/dev/null || echo "append-only: > is refused"
python3 - <<'EOF'
import os
for fl in (os.O_RDWR | os.O_APPEND, os.O_WRONLY | os.O_APPEND):
    try:
        fd = os.open("appendonly", fl)
        os.pwrite(fd, b"d\n", 0)
        os.close(fd)
    except OSError as e:
        print("append-only: append-open refused", e.strerror)
for fl in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_APPEND | os.O_TRUNC):
    try:
        os.close(os.open("appendonly", fl))
        print("append-only: opened", fl)
    except OSError as e:
        print("append-only: refused", e.strerror)
EOF
cat appendonly
chattr -a appendonly

# generic/035: a folder replaced by a rename stays open, its link count 0.
mkdir d1 d2
touch d1/f
python3 - <<'EOF'
import os
fd = os.open("d2", os.O_RDONLY | os.O_DIRECTORY)
os.rename("d1", "d2")
st = os.fstat(fd)
print("replaced folder: fstat ok, nlink", st.st_nlink)
os.fchmod(fd, 0o700)
print("replaced folder: fchmod ok, mode", oct(os.fstat(fd).st_mode & 0o7777))
os.close(fd)
EOF

# generic/375: an access ACL set by an owner outside the file's group
# clears the set-group-id bit; set by one in the group, it stays.
for g in 100 101; do
  for kind in file dir; do
    if [ $kind = file ]; then touch s$g$kind; else mkdir s$g$kind; fi
    chown 100:100 s$g$kind
    chmod 2755 s$g$kind
    setpriv --reuid=100 --regid=$g --clear-groups setfacl -m u::rwx,g::rwx,o::rwx s$g$kind
    echo "setfacl as gid $g on a $kind: $(stat -c %A s$g$kind)"
  done
done
`

func TestXfstestsCasesLikePlainFolder(t *testing.T) {
	requireFUSE(t)
	requireACL(t)
	requireTool(t, "chattr", "e2fsprogs")
	requireTool(t, "lsattr", "e2fsprogs")
	requireTool(t, "setpriv", "util-linux")
	e := newEnv(t, "", src{slug: "data"})
	native := sharedTempDir(t)
	t.Cleanup(func() {
		// An append-only file left behind (a failed run) would keep the
		// temporary folders from being removed.
		exec.Command("chattr", "-a", native+"/appendonly", e.b("data", "appendonly")).Run()
	})
	want := sh(t, xfstestsCases, "ROOT="+native)
	for _, line := range []string{
		"mapped write: mtime moved",
		"mapped write: ctime moved",
		"chattr: ctime moved True",
		"append-only: >> appends",
		"replaced folder: fstat ok, nlink 0",
		"setfacl as gid 101 on a file: -rwxrwxrwx",
		"setfacl as gid 100 on a dir: drwxrwsrwx",
	} {
		if !strings.Contains(want, line) {
			// The backing filesystem lacks inode flags or ACLs: the
			// comparison would prove nothing.
			skipOutsideCI(t, "the plain folder does not show %q; the cases need ext4, xfs or btrfs:\n%s", line, want)
		}
	}
	got := sh(t, xfstestsCases, "ROOT="+e.m("data"))
	if got != want {
		t.Errorf("the mount differs from a plain folder\n--- plain folder\n%s\n--- mount\n%s", want, got)
	}
}

// TestRecreateANameRemovedBehindWithAttributesDropped makes the kernel
// drop a file's attributes (chattr through the mount, which xfstests
// generic/277 needs), removes the file behind the mount within the
// watcher's window for the mount's own changes, and writes the name
// again through the mount. The open's permission check then asks for the
// attributes of a node whose backing file is gone: answered ENOENT, that
// ended the open ("No such file or directory"); answered ESTALE, the
// kernel looks the name up afresh and creates the file, as on a plain
// folder. Five rounds, each must make the file again.
func TestRecreateANameRemovedBehindWithAttributesDropped(t *testing.T) {
	requireFUSE(t)
	requireTool(t, "chattr", "e2fsprogs")
	e := newEnv(t, "", src{slug: "data"})
	probe := e.b("data", "probe")
	must(t, os.WriteFile(probe, nil, 0o644))
	if out, err := exec.Command("chattr", "+A", probe).CombinedOutput(); err != nil {
		skipOutsideCI(t, "the backing filesystem has no inode flags: %s", out)
	}
	must(t, os.Remove(probe))
	const script = `
for i in 1 2 3 4 5; do
  echo one > "$M/f" && stat -c %s "$M/f" > /dev/null && chattr +A "$M/f" || echo "round $i: could not make the file"
  rm -f "$B/f"
  if echo "again $i" > "$M/f"; then cat "$B/f"; else echo "round $i: open failed"; fi
done 2>&1
`
	got := sh(t, script, "M="+e.m("data"), "B="+e.b("data"))
	want := "again 1\nagain 2\nagain 3\nagain 4\nagain 5\n"
	if got != want {
		t.Errorf("writing a name removed behind the mount again:\n%s\nwant:\n%s", got, want)
	}
}
