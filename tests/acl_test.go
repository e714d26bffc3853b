package tests

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func requireACL(t *testing.T) {
	t.Helper()
	requireTool(t, "setfacl", "acl")
}

// aclScript makes names under folders with and without a default ACL, with
// odd umasks, and prints their modes and ACLs. On a filesystem with POSIX
// ACLs a folder's default ACL replaces the umask; elsewhere the umask
// applies. The mount must do exactly what the plain folder does.
const aclScript = `
set -e
cd "$ROOT"
mkdir plain inherit
setfacl -d -m u::rwx,g::rwx,o::r-x,u:1001:rwx inherit
for d in plain inherit; do
  for m in 022 077 002 027; do
    (umask $m
     touch $d/f$m
     mkdir $d/d$m
     mkfifo $d/p$m
     python3 -c 'import os,sys; os.close(os.open(sys.argv[1], os.O_CREAT|os.O_WRONLY, 0o640))' $d/o$m)
  done
done
setfacl -m u:1001:r-- plain/f022
setfacl -x u:1001 inherit/f027 || true
chmod 0600 inherit/f002
for f in $(find plain inherit -mindepth 1 | sort); do
  echo "$f $(stat -c %a $f)"
  getfacl -cp "$f" 2>/dev/null | grep -v '^$' | sed "s|^|  |"
done
`

func TestACLsAndUmaskLikePlainFolder(t *testing.T) {
	requireFUSE(t)
	requireACL(t)
	e := newEnv(t, "", src{slug: "data"})
	native := t.TempDir()
	want := sh(t, aclScript, "ROOT="+native)
	got := sh(t, aclScript, "ROOT="+e.m("data"))
	if got != want {
		t.Errorf("modes and ACLs differ\n--- plain folder\n%s\n--- mount\n%s", want, got)
	}
	if !strings.Contains(want, "user:1001:rwx") {
		t.Fatalf("the plain folder shows no inherited ACL; the test proves nothing:\n%s", want)
	}
	// What the mount shows is what the backing folder has.
	back := sh(t, "cd "+e.b("data")+" && getfacl -Rcp plain inherit | sort")
	mnt := sh(t, "cd "+e.m("data")+" && getfacl -Rcp plain inherit | sort")
	if back != mnt {
		t.Errorf("ACLs on the mount differ from the backing folder\n--- backing\n%s\n--- mount\n%s", back, mnt)
	}
}

// The kernel checks access against the backing files' ACLs, not just their
// mode bits: an ACL entry that denies a uid holds on the mount, and one
// that grants a uid works there.
func TestACLDecidesAccessLikeTheDisk(t *testing.T) {
	requireFUSE(t)
	requireACL(t)
	e := newEnv(t, "", src{slug: "data"})
	writeFile(t, e.b("data", "open.txt"), "open to all but 1001\n", 0o644)
	writeFile(t, e.b("data", "granted.txt"), "for 1001 only\n", 0o600)
	sh(t, "setfacl -m u:1001:--- "+e.b("data", "open.txt")+" && setfacl -m u:1001:r-- "+e.b("data", "granted.txt"))
	// The same checks on the backing folder first: the reference.
	for _, root := range []string{e.b("data"), e.m("data")} {
		out, err := run(t, 1001, "cat "+filepath.Join(root, "open.txt"))
		if err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("%s: uid 1001 read a file its ACL denies: %v %q", root, err, out)
		}
		out, err = run(t, 1001, "cat "+filepath.Join(root, "granted.txt"))
		if err != nil || out != "for 1001 only\n" {
			t.Errorf("%s: uid 1001 could not read a file its ACL grants: %v %q", root, err, out)
		}
		out, err = run(t, 1002, "cat "+filepath.Join(root, "open.txt"))
		if err != nil {
			t.Errorf("%s: uid 1002 could not read a world-readable file: %v %q", root, err, out)
		}
	}
	// An ACL changed behind the mount's back is seen at once (the kernel's
	// cached ACL is dropped with the rest of the inode's cache).
	sh(t, "setfacl -m u:1001:r-- "+e.b("data", "open.txt"))
	eventually(t, 5*time.Second, "the new ACL to be seen on the mount", func() bool {
		out, err := run(t, 1001, "cat "+e.m("data", "open.txt"))
		return err == nil && out == "open to all but 1001\n"
	})
}
