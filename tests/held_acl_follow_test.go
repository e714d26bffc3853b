package tests

import (
	"strings"
	"testing"
	"time"
)

// TestHeldCopiedFolderFollowsTheBackingACL is TestHeldCopiedFolderFollows
// TheBackingMode for an ACL: the owner shuts the agent out of a folder
// the layer copied up by an ACL entry, with the mode left open, though
// the agent set an attribute of the folder's copy before.
func TestHeldCopiedFolderFollowsTheBackingACL(t *testing.T) {
	requireTool(t, "setfacl", "acl")
	e, view := heldEdgeEnv(t, `mkdir -p shared && chmod -R 0777 .`)
	for _, at := range []string{view, e.m("d")} {
		// The agent sets an attribute of its own on the folder first:
		// its ACLs still follow the owner's (it may not change those).
		if out, err := run(t, 1001, `set -e; echo mine > "$A/shared/mine-$$.txt"; /usr/bin/python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.pin", b"1")' "$A/shared"`, "A="+at); err != nil {
			t.Fatalf("agent: %v\n%s", err, out)
		}
	}
	sh(t, `set -e; cd "$D"; setfacl -m u:1001:--- shared; echo secret > shared/secret.txt; chmod 0644 shared/secret.txt`, "D="+e.b("d"))
	if out, err := run(t, 1001, `ls "$D/shared" 2>&1`, "D="+e.b("d")); err == nil {
		t.Fatalf("the ACL does not shut the agent out of the backing folder:\n%s", out)
	}
	for _, at := range []string{view, e.m("d")} {
		eventually(t, 5*time.Second, "the owner's ACL to show in "+at, func() bool {
			out, _ := run(t, 1001, `getfacl -cp "$A/shared" 2>&1`, "A="+at)
			return strings.Contains(out, "user:1001:---")
		})
		out, _ := run(t, 1001, `cd "$A"
ls shared 2>&1
cat shared/secret.txt 2>&1`, "A="+at)
		if strings.Contains(out, "secret\n") || strings.Contains(out, "mine") || strings.Count(out, "Permission denied") != 2 {
			t.Errorf("in %s the agent still gets into a folder the owner's ACL closed:\n%s", at, out)
		}
	}
	// Opened again, the agent sees its changes, which stay held; the
	// owner's ACL is not the agent's change.
	sh(t, `setfacl -b "$D/shared"`, "D="+e.b("d"))
	eventually(t, 5*time.Second, "the owner's ACL to go", func() bool {
		out, err := run(t, 1001, `ls "$A/shared"`, "A="+view)
		return err == nil && strings.Contains(out, "mine-") && strings.Contains(out, "secret.txt")
	})
	// The agent's change of the folder is its attribute, not the owner's
	// ACL.
	if d := sh(t, binPath+" review diff -c "+e.cfg); !strings.Contains(d, `xattr shared user.pin: absent -> "1"`) || strings.Contains(d, "acl") {
		t.Errorf("the agent's change of shared/ is not its attribute alone:\n%s", d)
	}
}
