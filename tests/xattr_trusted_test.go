package tests

import (
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTrustedXattrsAreListedToRootOnly: a trusted.* extended attribute
// is listed to root and to no other uid, on the mount as on the backing
// ext4 folder (the kernel lists them only to CAP_SYS_ADMIN). The daemon
// reads the list as root and passed them on to every caller until a
// red-team pass saw the agent list them. The sizes listxattr(2) answers
// for an empty buffer agree with the lists.
func TestTrustedXattrsAreListedToRootOnly(t *testing.T) {
	e := newEnv(t, agentTOML, src{slug: "data"})
	f := e.b("data", "f.txt")
	writeFile(t, f, "x\n", 0o644)
	must(t, unix.Setxattr(f, "trusted.secretlabel", []byte("v"), 0))
	must(t, unix.Setxattr(f, "user.plain", []byte("v"), 0))
	lister := `/usr/bin/python3 -c '
import os, sys
for p in sys.argv[1:]:
    print(sorted(os.listxattr(p)), len(os.listxattr(p)))' `
	for _, uid := range []int{0, 1001} {
		out, err := run(t, uid, lister+f+" "+e.m("data", "f.txt"))
		if err != nil {
			t.Fatalf("listxattr as uid %d: %v\n%s", uid, err, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || lines[0] != lines[1] {
			t.Errorf("as uid %d the backing file and the mount list differently:\n%s", uid, out)
		}
		if has := strings.Contains(out, "trusted.secretlabel"); has != (uid == 0) {
			t.Errorf("as uid %d the lists:\n%s", uid, out)
		}
	}
	// An empty buffer asks for the size, which must fit the list.
	out, err := run(t, 1001, `/usr/bin/python3 -c '
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
n = libc.listxattr(sys.argv[1].encode(), None, 0)
buf = ctypes.create_string_buffer(n)
m = libc.listxattr(sys.argv[1].encode(), buf, n)
print(n, m, buf.raw[:m])' `+filepath.Join(e.m("data"), "f.txt"))
	if err != nil || !strings.HasPrefix(out, "11 11 b'user.plain") {
		t.Errorf("the agent's listxattr size and list: %v %q", err, out)
	}
}
