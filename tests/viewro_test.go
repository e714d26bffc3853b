package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A [[view]] with read_only = true: every write in it is refused with
// EROFS by the kernel, whatever the policy would let the principal do,
// and nothing reaches the backing folder; reads, hidden names and changes
// behind the mount behave as in any view; and a warm `grep -r` sends
// nothing at all: no OPEN or RELEASE (the view is served without them,
// fs/noopen.go), no READ (the kernel keeps the pages), and, the mount
// being read-only, no GETATTR (the kernel stops marking access times
// stale after reads) nor, for a caller that does not own the files, the
// GETXATTR of the ACL that each GETATTR dropped. A reload that flips
// read_only mounts the view again.
func TestReadOnlyViewRefusesWritesAndSkipsAtimeRoundTrips(t *testing.T) {
	view, data := agentViewData(t)
	for i := range 40 {
		writeFile(t, filepath.Join(data, "public", "tree", fmt.Sprintf("d%d", i%4), fmt.Sprintf("f%02d.txt", i)), fmt.Sprintf("line %d func main\n", i), 0o644)
	}
	e := newDebugEnv(t, policyTOML+viewTOML("agent", view)+"read_only = true\n", src{slug: "data", path: data})
	v := filepath.Join(view, "data")
	if mounts, _ := os.ReadFile("/proc/mounts"); !strings.Contains(string(mounts), " "+view+" fuse.neuralisfs ro,") {
		t.Errorf("the view is not mounted read-only:\n%s", mounts)
	}
	before := sh(t, "cd "+data+" && find . -printf '%p %M %s %T@\\n' | sort && cat public/p.txt")
	// Writes the policy allows the agent in public/ are refused all the
	// same, each with EROFS.
	for _, w := range []string{
		"echo x > $V/public/new.txt",
		"echo x >> $V/public/p.txt",
		": > $V/public/p.txt",
		"mkdir $V/public/dir",
		"rm $V/public/p.txt",
		"mv $V/public/p.txt $V/public/q.txt",
		"chmod 600 $V/public/p.txt",
		"touch $V/public/p.txt",
		"ln $V/public/p.txt $V/public/l.txt",
		"ln -s p.txt $V/public/s.txt",
		"truncate -s 0 $V/public/p.txt",
		`/usr/bin/python3 -c 'import os,sys; os.setxattr(sys.argv[1], "user.x", b"1")' $V/public/p.txt`,
		`/usr/bin/python3 -c 'import os,sys; os.open(sys.argv[1], os.O_TMPFILE|os.O_WRONLY)' $V/public`,
	} {
		out, err := run(t, 1001, w+" 2>&1", "V="+v)
		if err == nil || !strings.Contains(out, "Read-only file system") {
			t.Errorf("%s: %v %q; want EROFS", w, err, out)
		}
	}
	// Under a hidden folder a write answers as for a free name: the
	// folder is absent (ENOENT), whether or not the name exists in it.
	for _, w := range [][2]string{{"secrets/k", "secrets/free"}, {"mixed/hidden/h.txt", "mixed/hidden/free"}, {"secrets/sub", "secrets/nosub"}} {
		var outs [2]string
		for i, p := range w {
			out, _ := run(t, 1001, "echo x > $V/"+p+" 2>&1; mkdir $V/"+p+" 2>&1; rm $V/"+p+" 2>&1", "V="+v)
			outs[i] = strings.ReplaceAll(out, p, "NAME")
			if strings.Count(out, "No such file") != 3 {
				t.Errorf("write, mkdir and rm at hidden %s: %q; want ENOENT from each", p, out)
			}
		}
		if outs[0] != outs[1] {
			t.Errorf("a hidden name and a free one answer differently:\n%s\n%s", outs[0], outs[1])
		}
	}
	if after := sh(t, "cd "+data+" && find . -printf '%p %M %s %T@\\n' | sort && cat public/p.txt"); after != before {
		t.Errorf("the backing folder changed:\n%s\nwas\n%s", after, before)
	}
	// Reads: what the agent may see, and nothing hidden.
	if out := agent(t, "cat "+v+"/public/p.txt "+v+"/ro/r.txt"); out != "public text\nread only\n" {
		t.Errorf("reads in the read-only view: %q", out)
	}
	for _, p := range []string{"secrets", "secrets/k", "mixed/hidden", "mixed/hidden/h.txt"} {
		if out, err := run(t, 1001, "stat "+filepath.Join(v, p)+" 2>&1"); err == nil || !strings.Contains(out, "No such file") {
			t.Errorf("stat %s in the read-only view: %v %q; want ENOENT", p, err, out)
		}
	}
	// A change behind the mount shows.
	writeFile(t, filepath.Join(data, "public", "p.txt"), "public text, changed\n", 0o666)
	eventually(t, 5*time.Second, "a change behind the mount to show in the read-only view", func() bool {
		return agent(t, "cat "+v+"/public/p.txt") == "public text, changed\n"
	})
	// Warm grep -r, twice: no request per file (the agent owns none of
	// them, so a GETATTR would also cost a GETXATTR of the ACL).
	grep := "grep -r -c 'func main' " + v + "/public/tree > /dev/null"
	agent(t, grep)
	agent(t, grep)
	c := keptRequests(t, e, v+"/public", 1001, grep+"; "+grep)
	if c["OPEN"]+c["RELEASE"]+c["READ"] > 0 || c["GETATTR"] > 4 || c["GETXATTR"] > 4 {
		t.Errorf("two warm greps of 40 files in the read-only view sent %v; want no OPEN, RELEASE or READ and almost no GETATTR or GETXATTR", c)
	}
	if out := agent(t, "grep -r -c 'func main' "+v+"/public/tree | sort"); strings.Count(out, ":1\n") != 40 {
		t.Errorf("grep -r in the read-only view counted:\n%s\nwant 40 files with one match each", out)
	}

	// A reload that makes the view writable mounts it again: the agent
	// writes in public/ (its rules allow it), not in ro/.
	cfg, err := os.ReadFile(e.cfg)
	must(t, err)
	e.rewrite(strings.Replace(string(cfg), "read_only = true\n", "read_only = false\n", 1))
	if line := e.hup(); !strings.Contains(line, "msg=reloaded") {
		t.Fatalf("reload: %s", line)
	}
	eventually(t, 10*time.Second, "the view to be mounted writable again", func() bool {
		mounts, _ := os.ReadFile("/proc/mounts")
		return strings.Contains(string(mounts), " "+view+" fuse.neuralisfs rw,")
	})
	if out, err := run(t, 1001, "echo new > "+v+"/public/new.txt && cat "+filepath.Join(data, "public", "new.txt")); err != nil || out != "new\n" {
		t.Errorf("write in the view made writable: %v %q", err, out)
	}
	if out, err := run(t, 1001, "echo x > "+v+"/ro/new.txt 2>&1"); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("write the policy denies, in the view made writable: %v %q; want EACCES", err, out)
	}
}
