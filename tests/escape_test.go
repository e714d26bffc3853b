package tests

// The hostile agent: uid 1001, alone or in a bubblewrap sandbox, tries
// every way around the policy it can think of — names moved, linked and
// symlinked across rule boundaries, handles held across moves, kernel
// caches filled by others, descriptors opened by root, xattrs, set-id bits
// and special files, O_CREAT over a hidden file, search (terms, patterns,
// paths, counts, scores), .status, .git, identities and document counts,
// history and revert over the control socket, hostile file names, the
// control socket itself, the daemon's state folder — and each test
// compares what happened with what DESIGN.md §4 says must: denied read is
// absent everywhere, denied write is refused and changes nothing, and
// what the daemon answers as root reaches no further than the caller's
// own file permissions do on the mount.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

const py = "/usr/bin/python3"

// escapeTOML: the agent (uid 1001) may not read or write secrets/ and
// mixed/hidden/ of data, nor secrets/ of repo, may read but not write ro/,
// nor make or remove the folder public/locked (what is in it is its own);
// alice (uid 1002) may do anything; anyone else ("other") nothing.
const escapeTOML = agentTOML + `

[[rule]]
uri = "data://public/locked"
who = ["role:agent"]
deny = ["write"]

[[rule]]
uri = "repo://secrets/**"
who = ["role:agent"]
deny = ["read", "write"]
`

// escapeEnv mounts data (a local folder) and repo (a git checkout with a
// committed secret, a modified one and an untracked one) under escapeTOML,
// plus a view for the agent. Every folder is 0777 and every file 0666, so
// only the policy stands between the agent and the secrets.
func escapeEnv(t *testing.T) (*env, string) {
	t.Helper()
	requireFUSE(t)
	base := sharedTempDir(t)
	view := filepath.Join(base, "agentview")
	must(t, os.Mkdir(view, 0o755))
	data := filepath.Join(base, "data")
	agentData(t, data)
	repo := filepath.Join(base, "repo")
	must(t, os.MkdirAll(filepath.Join(repo, "secrets"), 0o777))
	must(t, os.MkdirAll(filepath.Join(repo, "pub"), 0o777))
	writeFile(t, filepath.Join(repo, "secrets", "g.txt"), canary+" committed secret\n", 0o666)
	writeFile(t, filepath.Join(repo, "pub", "a.txt"), "pub\n", 0o666)
	sh(t, "cd "+repo+" && git init -q -b main && git add -A && git -c user.name=t -c user.email=t@x commit -q -m init")
	writeFile(t, filepath.Join(repo, "secrets", "g.txt"), canary+" committed secret, modified\n", 0o666)
	writeFile(t, filepath.Join(repo, "secrets", "untracked-secret-name.txt"), "x\n", 0o666)
	sh(t, "chmod -R a+rwX "+data+" "+repo)
	e := newEnv(t, escapeTOML+viewTOML("agent", view),
		src{slug: "data", path: data}, src{slug: "repo", kind: "git", path: repo})
	// The first index build is done once the owner finds a public file.
	eventually(t, 10*time.Second, "the first index build", func() bool {
		out, _ := e.search(t, 0, "public")
		return strings.Contains(out, "data://public/p.txt")
	})
	return e, view
}

// hidden are names the agent must never see, in any output.
var hidden = []string{canary, "secrets", "hidden/h.txt", "h.txt", "k2", "untracked-secret-name", "g.txt"}

// noLeak fails the test when out shows anything hidden from the agent,
// once the echoes (what the agent itself asked for, repeated back in an
// error) are taken out.
func noLeak(t *testing.T, what, out string, echoes ...string) {
	t.Helper()
	for _, e := range echoes {
		if e != "" {
			out = strings.ReplaceAll(out, e, "<asked>")
		}
	}
	for _, h := range hidden {
		if strings.Contains(out, h) {
			t.Errorf("%s shows %q to the agent:\n%s", what, h, out)
			return
		}
	}
}

// cli runs `neuralisfs <sub> -c <config> args...` as uid and returns its
// combined output.
func (e *env) cli(t *testing.T, uid int, sub string, args ...string) (string, error) {
	t.Helper()
	q := []string{binPath, sub, "-c", e.cfg}
	for _, a := range args {
		q = append(q, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	return run(t, uid, strings.Join(q, " "))
}

// Names moved or linked across a rule boundary, in either direction, and
// through descriptors held across a move: none of it may carry a hidden
// file into sight or a refused change through.
func TestEscapeMovesAndLinks(t *testing.T) {
	e, _ := escapeEnv(t)
	d := e.m("data")
	before := snapshot(t, e.b("data"))
	out := agent(t, fmt.Sprintf(`cd /
try() { if "$@" 2>/dev/null; then echo "ALLOWED: $*"; else echo "refused: $*"; fi; }
try mv %[1]s/secrets/k %[1]s/public/k
try mv %[1]s/secrets %[1]s/public/s
try ln %[1]s/secrets/k %[1]s/public/k
try ln %[1]s/mixed/hidden/h.txt %[1]s/mixed/h.txt
try mv %[1]s/mixed %[1]s/public/mixed
try mv %[1]s/mixed %[1]s/mixed2
try mv %[1]s/public/p.txt %[1]s/secrets/p.txt
try mv %[1]s/public %[1]s/secrets/public
try mv %[1]s/public %[1]s/mixed/hidden/public
try ln %[1]s/public/p.txt %[1]s/secrets/p.txt
try mv %[1]s/ro/r.txt %[1]s/public/r.txt
try ln %[1]s/ro/r.txt %[1]s/public/r.txt
try mv %[1]s/public/p.txt %[1]s/ro/r.txt
%[2]s - <<'EOF'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
d = %[1]q
def t(name, fn):
    try:
        fn(); print("ALLOWED:", name)
    except OSError as e:
        print("refused:", name, e.strerror)
def rename2(a, b, flags):
    if libc.renameat2(-100, a.encode(), -100, b.encode(), flags) != 0:
        err = ctypes.get_errno(); raise OSError(err, os.strerror(err))
t("exchange public/p.txt ro/r.txt", lambda: rename2(d+"/public/p.txt", d+"/ro/r.txt", 2))
t("exchange mixed public", lambda: rename2(d+"/mixed", d+"/public", 2))
t("noreplace ro/r.txt", lambda: rename2(d+"/ro/r.txt", d+"/public/new", 1))
pub = os.open(d+"/public", os.O_RDONLY|os.O_DIRECTORY)
mixed = os.open(d+"/mixed", os.O_RDONLY|os.O_DIRECTORY)
t("renameat hidden/h.txt from mixed fd", lambda: os.rename("hidden/h.txt", "h.txt", src_dir_fd=mixed, dst_dir_fd=pub))
t("linkat ../secrets/k", lambda: os.link("../secrets/k", "k", src_dir_fd=pub, dst_dir_fd=pub))
t("openat ../secrets/k", lambda: os.open("../secrets/k", os.O_RDONLY, dir_fd=pub))
t("openat hidden/h.txt", lambda: os.open("hidden/h.txt", os.O_RDONLY, dir_fd=mixed))
t("statat hidden", lambda: os.stat("hidden", dir_fd=mixed))
EOF
`, d, py))
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "ALLOWED") {
			t.Errorf("%s", line)
		}
	}
	if after := snapshot(t, e.b("data")); after != before {
		t.Errorf("refused moves changed the backing folder:\n--- before\n%s\n--- after\n%s", before, after)
	}
	noLeak(t, "ls after the attempts", agent(t, "ls -laR "+d))
}

// A descriptor or working folder the agent holds on an allowed folder that
// is then moved under a hidden one (on the backing folder, as the mount
// refuses to carry a folder across a rule boundary): opening, listing and
// stat'ing through it must not reach what is now hidden. (What the agent
// had open before the move stays readable, as on any filesystem; FUSE has
// no way to revoke an open file.)
func TestEscapeHandleAcrossAMove(t *testing.T) {
	e, _ := escapeEnv(t)
	writeFile(t, e.b("data", "public", "d", "f.txt"), "soon secret\n", 0o666)
	sh(t, "chmod 777 "+e.b("data", "public", "d"))
	ready := filepath.Join(t.TempDir(), "ready")
	moved := ready + ".moved"
	os.Chmod(filepath.Dir(ready), 0o777)
	done := make(chan string, 1)
	go func() {
		out, _ := run(t, 1001, fmt.Sprintf(`%s - <<'EOF'
import os, time
d = os.open(%q, os.O_RDONLY|os.O_DIRECTORY)
os.chdir(%q)
open(%q, "w").close()
while not os.path.exists(%q):
    time.sleep(0.02)
def t(name, fn):
    try:
        r = fn(); print("GOT", name, repr(r)[:80])
    except OSError as e:
        print("refused", name, e.strerror)
t("openat f.txt", lambda: os.read(os.open("f.txt", os.O_RDONLY, dir_fd=d), 100))
t("open ./f.txt", lambda: open("f.txt").read())
t("stat new.txt", lambda: os.stat("new.txt", dir_fd=d).st_size)
t("listdir .", lambda: os.listdir("."))
t("create in moved folder", lambda: os.open("planted", os.O_CREAT|os.O_WRONLY, 0o644, dir_fd=d))
EOF`, py, e.m("data", "public", "d"), e.m("data", "public", "d"), ready, moved))
		done <- out
	}()
	eventually(t, 10*time.Second, "the agent to hold the folder", func() bool { _, err := os.Stat(ready); return err == nil })
	must(t, os.Rename(e.b("data", "public", "d"), e.b("data", "secrets", "d")))
	writeFile(t, e.b("data", "secrets", "d", "new.txt"), canary+" written after the move\n", 0o666)
	// Once the owner no longer finds the folder where it was, the watcher
	// has told the kernel about the move.
	eventually(t, 10*time.Second, "the move to show on the mount", func() bool {
		_, err := os.Stat(e.m("data", "public", "d"))
		return errors.Is(err, os.ErrNotExist)
	})
	must(t, os.WriteFile(moved, nil, 0o666))
	out := <-done
	if strings.Contains(out, "GOT") || strings.Contains(out, canary) {
		t.Errorf("the agent reached a folder moved under secrets/ through a handle:\n%s", out)
	}
	if _, err := os.Stat(e.b("data", "secrets", "d", "planted")); err == nil {
		t.Errorf("the agent created a file in a folder now under secrets/")
	}
}

// Symlinks are resolved by the caller's kernel: a link in an allowed
// folder to a hidden one (relative, absolute through the mount, to the
// backing path from inside a sandbox) leads nowhere; links swapped during
// a walk don't either; and the daemon (index, snippets) never follows one.
func TestEscapeSymlinks(t *testing.T) {
	e, _ := escapeEnv(t)
	d := e.m("data")
	out := agent(t, fmt.Sprintf(`cd /
ln -s ../secrets/k %[1]s/public/rel
ln -s %[1]s/secrets/k %[1]s/public/abs
ln -s ../mixed/hidden %[1]s/public/dirlink
ln -s %[2]s %[1]s/public/backing
ln -s %[2]s %[1]s/public/backing.txt
for l in rel abs dirlink/h.txt; do cat %[1]s/public/$l 2>&1 | head -1; done
cat %[1]s/public/../secrets/k 2>&1
ls %[1]s/public/dirlink/ 2>&1
# Swap a folder and a link to the hidden folder while reading through it.
mkdir -p %[1]s/public/sw && echo decoy > %[1]s/public/sw/h.txt
( for i in $(seq 300); do mv %[1]s/public/sw %[1]s/public/sw.d 2>/dev/null; ln -s ../mixed/hidden %[1]s/public/sw 2>/dev/null; rm -f %[1]s/public/sw; mv %[1]s/public/sw.d %[1]s/public/sw 2>/dev/null; done ) &
for i in $(seq 300); do cat %[1]s/public/sw/h.txt 2>/dev/null; done | sort | uniq -c
wait
`, d, e.b("data", "secrets", "k")))
	// (agent fails the test if the canary shows up.) uid 1001 on the host
	// may read the backing folder itself — its mode is 0666 here, the
	// host's permission, not the mount's — so the backing link is read
	// only inside the agent's container, where that path does not exist.
	if !strings.Contains(out, "decoy") {
		t.Errorf("the swap loop never read the decoy; the test did not run:\n%s", out)
	}
	box, _ := run(t, 1001, sandbox(e.mnt, "/work")+" sh -c 'cat /work/data/public/backing /work/data/public/rel /work/data/public/abs /work/data/public/dirlink/h.txt 2>&1; ls -la /work/data/public/ 2>&1'")
	if strings.Contains(box, canary) {
		t.Errorf("inside the sandbox a symlink reached a secret:\n%s", box)
	}
	// The index and snippets read through the confined root: a link is not
	// followed, so no public uri carries the secret's content.
	writeFile(t, e.b("data", "public", "swapped.txt"), "zebrafinch public\n", 0o666)
	e.found(t, "zebrafinch", "data://public/swapped.txt")
	must(t, os.Remove(e.b("data", "public", "swapped.txt")))
	must(t, os.Symlink(e.b("data", "secrets", "k"), e.b("data", "public", "swapped.txt")))
	// The indexer has seen the swap once the public file's document is gone.
	eventually(t, 10*time.Second, "the swapped file to leave the index", func() bool {
		out, _ := e.search(t, 0, "zebrafinch")
		return !strings.Contains(out, "data://public/swapped.txt")
	})
	for _, q := range []string{"canary", "CANARY*", "secret", "zebrafinch"} {
		s, _ := e.search(t, 1001, q)
		noLeak(t, "search "+q+" after a swap", s, q)
		s, _ = e.search(t, 0, q)
		if q != "zebrafinch" && strings.Contains(s, "data://public/swapped.txt") {
			t.Errorf("the indexer or a snippet followed a symlink swapped in for a public file:\n%s", s)
		}
	}
}

// Kernel caches are shared: whatever root and alice looked up, read,
// listed and asked xattrs of first must not answer the agent.
func TestEscapeCachedByOthers(t *testing.T) {
	e, _ := escapeEnv(t)
	d := e.m("data")
	warm := fmt.Sprintf(`ls -laR %[1]s >/dev/null; cat %[1]s/secrets/k %[1]s/secrets/sub/k2 %[1]s/mixed/hidden/h.txt >/dev/null
stat %[1]s/secrets %[1]s/secrets/k %[1]s/mixed/hidden >/dev/null
%[2]s -c 'import os; [os.listxattr(p) for p in ("%[1]s/secrets/k", "%[1]s/mixed/hidden")]'
find %[1]s >/dev/null`, d, py)
	for round := range 5 {
		sh(t, warm)
		if out, err := run(t, 1002, warm); err != nil {
			t.Fatalf("alice may read everything: %v\n%s", err, out)
		}
		out := agent(t, fmt.Sprintf(`%[2]s - <<'EOF'
import os, mmap
d = %[1]q
def t(name, fn):
    try:
        r = fn(); print("GOT", name, repr(r)[:80])
    except OSError as e:
        print("refused", name, e.strerror)
for p in ["secrets", "secrets/k", "secrets/sub/k2", "mixed/hidden", "mixed/hidden/h.txt"]:
    f = d + "/" + p
    t("stat " + p, lambda: os.stat(f).st_size)
    t("lstat " + p, lambda: os.lstat(f).st_ino)
    t("open " + p, lambda: os.read(os.open(f, os.O_RDONLY), 100))
    t("O_PATH " + p, lambda: os.open(f, os.O_PATH))
    t("listdir " + p, lambda: os.listdir(f))
    t("listxattr " + p, lambda: os.listxattr(f))
    for x in ["user.x", "security.selinux", "system.posix_acl_access", "trusted.x"]:
        t("getxattr " + x + " " + p, lambda: os.getxattr(f, x))
    t("readlink " + p, lambda: os.readlink(f))
    t("access " + p, lambda: os.access(f, os.F_OK) or (_ for _ in ()).throw(OSError(2, "absent")))
    t("mmap " + p, lambda: mmap.mmap(os.open(f, os.O_RDONLY), 0, prot=mmap.PROT_READ)[:10])
t("listdir mixed", lambda: [n for n in os.listdir(d + "/mixed") if n == "hidden"] or (_ for _ in ()).throw(OSError(2, "not listed")))
t("listdir data", lambda: [n for n in os.listdir(d) if n == "secrets"] or (_ for _ in ()).throw(OSError(2, "not listed")))
EOF
echo "== listings"
ls -la %[1]s %[1]s/mixed; find %[1]s`, d, py))
		if strings.Contains(out, "GOT") {
			t.Fatalf("round %d: the agent got through caches warmed by others:\n%s", round, out)
		}
		_, listings, _ := strings.Cut(out, "== listings")
		noLeak(t, "listings", listings)
	}
	// And the agent's refusals are not cached as "absent" for the others.
	for _, uid := range []int{0, 1002} {
		if out, err := run(t, uid, "cat "+e.m("data", "secrets", "k")); err != nil || !strings.Contains(out, canary) {
			t.Errorf("uid %d lost the secret after the agent was refused: %v %q", uid, err, out)
		}
	}
}

// A process that opens as root and then drops to uid 1001 keeps what it
// opened (FUSE sees the opener, and a read of an open file never reaches
// the daemon with passthrough); but every new lookup, open, link or
// listing through those descriptors is decided for uid 1001.
func TestEscapeDescriptorsFromRoot(t *testing.T) {
	e, _ := escapeEnv(t)
	d := e.m("data")
	out := sh(t, fmt.Sprintf(`%[2]s - <<'EOF'
import os
d = %[1]q
sec = os.open(d + "/secrets", os.O_RDONLY|os.O_DIRECTORY)
mixed = os.open(d + "/mixed", os.O_RDONLY|os.O_DIRECTORY)
f = os.open(d + "/secrets/k", os.O_RDONLY)
p = os.open(d + "/secrets/sub/k2", os.O_PATH)
pd = os.open(d + "/secrets/sub", os.O_PATH|os.O_DIRECTORY)
os.setgroups([]); os.setresgid(1001, 1001, 1001); os.setresuid(1001, 1001, 1001)
def t(name, fn):
    try:
        r = fn(); print("GOT", name, repr(r)[:80])
    except OSError as e:
        print("refused", name, e.strerror)
print("opened-as-root fd reads:", b"CANARY" in os.pread(f, 100, 0))
t("openat secrets fd k", lambda: os.read(os.open("k", os.O_RDONLY, dir_fd=sec), 100))
t("openat secrets fd sub/k2", lambda: os.read(os.open("sub/k2", os.O_RDONLY, dir_fd=sec), 100))
t("statat secrets fd sub", lambda: os.stat("sub", dir_fd=sec).st_ino)
t("openat mixed fd hidden/h.txt", lambda: os.read(os.open("hidden/h.txt", os.O_RDONLY, dir_fd=mixed), 100))
t("openat O_PATH dir k2", lambda: os.read(os.open("k2", os.O_RDONLY, dir_fd=pd), 100))
t("reopen O_PATH via /proc", lambda: os.read(os.open("/proc/self/fd/%%d" %% p, os.O_RDONLY), 100))
t("listxattr via /proc", lambda: os.listxattr("/proc/self/fd/%%d" %% p))
t("link O_PATH into public", lambda: os.link("/proc/self/fd/%%d" %% p, d + "/public/stolen", follow_symlinks=True))
t("link fd into public", lambda: os.link("/proc/self/fd/%%d" %% f, d + "/public/stolen2", follow_symlinks=True))
def cd_open():
    os.fchdir(sec)
    return open("k").read()
t("fchdir and open", cd_open)
t("write through fchdir", lambda: os.open("planted", os.O_CREAT|os.O_WRONLY, 0o644))
EOF`, d, py))
	t.Logf("descriptors opened as root, used as uid 1001:\n%s", out)
	if strings.Contains(out, "GOT") {
		t.Errorf("a descriptor opened by root let uid 1001 reach something new:\n%s", out)
	}
	for _, p := range []string{"public/stolen", "public/stolen2", "secrets/planted"} {
		if _, err := os.Lstat(e.b("data", p)); err == nil {
			t.Errorf("%s was made by uid 1001", p)
		}
	}
}

// Read-only access is read-only for every way of changing a file; special
// files are what the kernel would allow; set-id bits behave as on disk;
// xattrs of hidden files don't exist, and the mount is nosuid,nodev.
func TestEscapeAttributesAndSpecialFiles(t *testing.T) {
	e, _ := escapeEnv(t)
	d := e.m("data")
	native := t.TempDir()
	os.Chmod(native, 0o777)
	writeFile(t, e.b("data", "public", "suid"), "#!/bin/sh\nid\n", 0o777)
	writeFile(t, filepath.Join(native, "suid"), "#!/bin/sh\nid\n", 0o777)
	must(t, os.Mkdir(e.b("data", "sgid"), 0o777))
	must(t, os.Mkdir(filepath.Join(native, "sgid"), 0o777))
	// (os.Chmod takes Go's ModeSetuid, not 04000: chmod(1) says what it means.)
	sh(t, "chmod 4777 "+e.b("data", "public", "suid")+" "+filepath.Join(native, "suid")+" && chmod 2777 "+e.b("data", "sgid")+" "+filepath.Join(native, "sgid"))
	before := snapshot(t, e.b("data", "ro"))
	out := agent(t, fmt.Sprintf(`cd /
try() { if "$@" 2>/dev/null; then echo "ALLOWED: $*"; else echo "refused: $*"; fi; }
R=%[1]s/ro/r.txt
try chmod 600 $R
try chown 1001 $R
try chgrp 1001 $R
try truncate -s 0 $R
try touch -m -d 2001-01-01 $R
try touch -a $R
try touch $R
try touch %[1]s/ro/new
try mkfifo %[1]s/ro/fifo
try mkdir %[1]s/ro/dir
try ln -s x %[1]s/ro/link
try setfacl -m u:1001:rwx $R
try setfacl -m u:1001:rwx %[1]s/public/p.txt
try setfacl -d -m u:1001:rwx %[1]s/public
try mknod %[1]s/public/null c 1 3
try mknod %[1]s/public/blk b 7 0
try cp --reflink=always %[1]s/public/p.txt $R
%[2]s - <<'EOF'
import os, fcntl, socket
d = %[1]q
R = d + "/ro/r.txt"
def t(name, fn):
    try:
        fn(); print("ALLOWED:", name)
    except OSError as e:
        print("refused:", name, e.strerror)
for x in ["user.x", "trusted.x", "security.x", "security.capability", "system.posix_acl_access"]:
    t("setxattr " + x, lambda: os.setxattr(R, x, b"\x02\x00\x00\x00"))
t("removexattr", lambda: os.removexattr(R, "user.x"))
t("O_RDONLY|O_TRUNC", lambda: os.open(R, os.O_RDONLY|os.O_TRUNC))
t("O_WRONLY", lambda: os.open(R, os.O_WRONLY))
t("O_RDWR", lambda: os.open(R, os.O_RDWR))
t("O_APPEND", lambda: os.open(R, os.O_WRONLY|os.O_APPEND))
t("O_PATH reopened for writing", lambda: os.open("/proc/self/fd/%%d" %% os.open(R, os.O_PATH), os.O_WRONLY))
t("read fd reopened for writing", lambda: os.open("/proc/self/fd/%%d" %% os.open(R, os.O_RDONLY), os.O_RDWR))
t("O_CREAT|O_EXCL in ro", lambda: os.open(d + "/ro/x", os.O_CREAT|os.O_EXCL|os.O_WRONLY))
def cfr():
    src = os.open(d + "/public/p.txt", os.O_RDONLY)
    dst = os.open(R, os.O_WRONLY)
    os.copy_file_range(src, dst, 5)
t("copy_file_range into ro", cfr)
def clone():
    src = os.open(d + "/public/p.txt", os.O_RDONLY)
    fcntl.ioctl(os.open(R, os.O_WRONLY), 0x40049409, src)
t("FICLONE into ro", clone)
def fall():
    os.posix_fallocate(os.open(R, os.O_RDONLY), 0, 4096)
t("fallocate through a read fd", fall)
def sock():
    s = socket.socket(socket.AF_UNIX); s.bind(d + "/ro/sock")
t("bind a socket in ro", sock)
for p in ["secrets/k", "secrets", "mixed/hidden/h.txt"]:
    t("setxattr hidden " + p, lambda: os.setxattr(d + "/" + p, "user.x", b"1"))
    t("flock hidden " + p, lambda: fcntl.flock(os.open(d + "/" + p, os.O_RDONLY), fcntl.LOCK_EX))
EOF
for f in %[1]s/public/suid %[3]s/suid; do echo "# appended" >> $f; stat -c 'suid-after-write %%a' $f; done
for dir in %[1]s/sgid %[3]s/sgid; do
  cp /usr/bin/true $dir/t && chmod 6755 $dir/t && stat -c 'sgid-file %%a %%g' $dir/t
  %[2]s -c "import os; os.close(os.open('$dir/c', os.O_CREAT|os.O_WRONLY, 0o6755))" && stat -c 'sgid-create %%a %%g' $dir/c
  mkdir -m 2775 $dir/sub && stat -c 'sgid-dir %%a %%g' $dir/sub
done
`, d, py, native))
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "ALLOWED") {
			t.Errorf("%s", line)
		}
	}
	if after := snapshot(t, e.b("data", "ro")); after != before {
		t.Errorf("ro/ changed:\n--- before\n%s\n--- after\n%s", before, after)
	}
	// Set-id bits: what the mount leaves is what a plain folder leaves.
	for _, kind := range []string{"suid-after-write", "sgid-file", "sgid-create", "sgid-dir"} {
		re := regexp.MustCompile(kind + ` (.*)`)
		m := re.FindAllStringSubmatch(out, -1)
		if len(m) != 2 || m[0][1] != m[1][1] {
			t.Errorf("%s: mount and plain folder differ: %v\n%s", kind, m, out)
		}
	}
	for _, p := range []string{"public/null", "public/blk"} {
		if _, err := os.Lstat(e.b("data", p)); err == nil {
			t.Errorf("uid 1001 made the device node %s", p)
		}
	}
	// The mount carries nosuid and nodev: a set-id file or device node on
	// a backing folder gives nobody anything through it.
	mi, _ := os.ReadFile("/proc/self/mounts")
	for line := range strings.SplitSeq(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 3 && (f[1] == e.mnt) {
			if !strings.Contains(f[3], "nosuid") || !strings.Contains(f[3], "nodev") {
				t.Errorf("the mount lacks nosuid or nodev: %s", line)
			}
		}
	}
}

// Search, from the CLI and from inside the mount, with every query form
// that could match hidden content or paths: no uri, name, snippet or count
// of a hidden file; and no score that depends on hidden files.
func TestEscapeSearch(t *testing.T) {
	e, _ := escapeEnv(t)
	queries := []string{canary, "canary", "CANARY*", "CAN?RY*", "/canary.*/", `"secret key"`, "secret", "deeper", "hidden",
		"+secret -public", "path:secrets*", "path:secrets/k", "name:k", "name:h.txt", "uri:data://secrets/k", "source:data",
		"ext:txt", "size:>0", "committed", "k", "*", ""}
	for _, q := range queries {
		for _, args := range [][]string{{q}, {"--json", q}, {"--path", "secrets/**", q}, {"--path", "**/hidden/**", q}, {"--source", "repo", q}, {"--limit", "1000", "--json", q}} {
			out, _ := e.search(t, 1001, args...)
			noLeak(t, fmt.Sprintf("search %q", args), out, fmt.Sprintf("%q", q), q)
		}
		b, _ := run(t, 1001, "cat "+filepath.Join(e.mnt, ".neuralis", "search", url.PathEscape(q))+" 2>/dev/null")
		noLeak(t, ".neuralis/search/"+q, b, fmt.Sprintf("%q", q), q)
	}
	// Counts: the total is what the agent can see.
	var res struct {
		Total int `json:"total"`
		Hits  []struct {
			URI   string  `json:"uri"`
			Score float64 `json:"score"`
		} `json:"hits"`
	}
	out, _ := e.search(t, 1001, "--json", "--limit", "1000", "")
	must(t, json.Unmarshal([]byte(out), &res))
	if res.Total != len(res.Hits) {
		t.Errorf("match-all total %d but %d hits shown: the total counts hidden files", res.Total, len(res.Hits))
	}
	// Scores: a term's weight depends on how many documents hold it, so a
	// score the agent sees must not move when hidden files gain the term.
	writeFile(t, e.b("data", "public", "q.txt"), "quokkaterm in public\n", 0o666)
	e.found(t, "quokkaterm", "data://public/q.txt")
	score := func() string {
		out, _ := e.search(t, 1001, "--json", "quokkaterm")
		var r struct {
			Total int `json:"total"`
			Hits  []struct {
				Score float64 `json:"score"`
			} `json:"hits"`
		}
		json.Unmarshal([]byte(out), &r)
		if len(r.Hits) != 1 || r.Total != 1 {
			t.Fatalf("quokkaterm as the agent: %s", out)
		}
		return fmt.Sprint(r.Hits[0].Score)
	}
	s1 := score()
	for i := range 3 {
		writeFile(t, e.b("data", "secrets", fmt.Sprintf("q%d.txt", i)), "quokkaterm hidden\n", 0o666)
	}
	eventually(t, 5*time.Second, "the hidden files to be indexed", func() bool {
		out, _ := e.search(t, 0, "--json", "quokkaterm")
		return strings.Count(out, `"uri"`) == 4
	})
	if s2 := score(); s1 != s2 {
		t.Errorf("the agent's score for quokkaterm moved from %s to %s when hidden files gained the term", s1, s2)
	}
}

// .status, .revs, .git, .neuralis/sources and `neuralisfs status`: no
// hidden path, and nothing that moves when only a hidden file changes.
func TestEscapeGitAndIdentity(t *testing.T) {
	e, _ := escapeEnv(t)
	r := e.m("repo")
	// Sanity: the owner sees the secret's state.
	if b, _ := os.ReadFile(filepath.Join(r, ".status")); !strings.Contains(string(b), "secrets/g.txt") {
		t.Fatalf("owner's .status lacks the modified secret:\n%s", b)
	}
	out := agent(t, fmt.Sprintf(`cd /
cat %[1]s/.status %[1]s/pub/.status 2>&1
ls -laR %[1]s/.revs/ 2>&1
cat %[1]s/.revs/main/secrets/g.txt 2>/dev/null
ls -la %[1]s/.revs/HEAD/ 2>&1
export HOME=/tmp
git -c safe.directory='*' -C %[1]s ls-files 2>/dev/null
git -c safe.directory='*' -C %[1]s show HEAD:secrets/g.txt 2>/dev/null
git -c safe.directory='*' -C %[1]s log --stat 2>/dev/null
git -c safe.directory='*' -C %[1]s status --porcelain 2>/dev/null
git -c safe.directory='*' -C %[1]s/pub grep -h committed HEAD -- .. 2>/dev/null
cat %[1]s/.git/index 2>/dev/null | tr -c '[:print:]' '\n' | grep -a . | head -50
ls -la %[1]s/.git/ 2>&1; find %[1]s/.git 2>/dev/null | head
grep -ra committed %[1]s 2>&1
cat %[2]s/.neuralis/sources
%[3]s status -c %[4]s 2>&1
%[3]s status --json -c %[4]s 2>&1
`, r, e.mnt, binPath, e.cfg))
	noLeak(t, "git state", out)
	// The owner still uses git on the mount.
	if got := sh(t, "git -c safe.directory='*' -C "+r+" ls-files"); !strings.Contains(got, "secrets/g.txt") {
		t.Errorf("owner's git ls-files on the mount: %s", got)
	}
	// Identities and counts are the agent's view: a change to a hidden
	// file does not move them.
	view := func() string {
		src, _ := run(t, 1001, "cat "+filepath.Join(e.mnt, ".neuralis", "sources"))
		st, _ := e.cli(t, 1001, "status", "--json")
		var rep struct {
			Sources []struct {
				Slug     string `json:"slug"`
				Identity string `json:"identity"`
				Index    *struct {
					Documents int   `json:"documents"`
					Bytes     int64 `json:"bytes"`
				}
			} `json:"sources"`
		}
		json.Unmarshal([]byte(st), &rep)
		var b strings.Builder
		b.WriteString(src)
		// The whole answer: the index's size, queue and batches, and a
		// source's last update and freshness, moved with hidden files.
		b.WriteString(st)
		for _, s := range rep.Sources {
			fmt.Fprintf(&b, "%s %s", s.Slug, s.Identity)
			if s.Index != nil {
				fmt.Fprintf(&b, " docs=%d bytes=%d", s.Index.Documents, s.Index.Bytes)
			}
			b.WriteByte('\n')
		}
		return b.String()
	}
	// Files the agent's file permissions hide, where no rule does: a
	// 0600 file of root's, a 0700 folder, a tracked file in one.
	sh(t, `set -e
mkdir -p "$D/public/locked" "$R/pub/locked"
echo 1111 > "$D/public/pin600" && chmod 0600 "$D/public/pin600"
echo a > "$D/public/locked/l.txt" && chmod 0700 "$D/public/locked"
echo a > "$R/pub/locked/tracked.txt"
git -C "$R" add pub/locked && git -C "$R" -c user.email=a@b -c user.name=a commit -qm locked
chmod 0700 "$R/pub/locked"`, append(gitEnv(), "D="+e.b("data"), "R="+e.b("repo"))...)
	eventually(t, 5*time.Second, "the index to take root's private files", func() bool {
		out, _ := e.search(t, 0, "1111")
		return strings.Contains(out, "pin600")
	})
	v1 := view()
	noLeak(t, "identities", v1)
	sh(t, `echo 2222 > "$D/public/pin600"; echo b > "$D/public/locked/new.txt"; echo b >> "$R/pub/locked/tracked.txt"`, "D="+e.b("data"), "R="+e.b("repo"))
	writeFile(t, e.b("data", "secrets", "k"), canary+" rotated key\n", 0o666)
	writeFile(t, e.b("data", "secrets", "new-secret.txt"), canary+" another one\n", 0o666)
	writeFile(t, e.b("repo", "secrets", "g.txt"), canary+" modified again, longer\n", 0o666)
	writeFile(t, e.b("repo", "secrets", "more-untracked.txt"), "y\n", 0o666)
	eventually(t, 5*time.Second, "the owner's view to change", func() bool {
		st, _ := e.cli(t, 0, "status")
		return strings.Contains(st, "more-untracked.txt")
	})
	eventually(t, 5*time.Second, "the index to take the new secret", func() bool {
		out, _ := e.search(t, 0, "another")
		return strings.Contains(out, "new-secret.txt")
	})
	eventually(t, 5*time.Second, "the index to take root's private changes", func() bool {
		out, _ := e.search(t, 0, "2222")
		return strings.Contains(out, "pin600")
	})
	if v2 := view(); v2 != v1 {
		t.Errorf("the agent's identities or counts moved when only hidden files changed:\n--- before\n%s--- after\n%s", v1, v2)
	}
}

// History and revert over the control socket (and .neuralis/history): no
// hidden uri in any answer or error, no record id of a hidden file usable,
// no revert where the agent may not write — by policy or by file
// permissions — and nothing a revert makes that the agent could not have
// made itself.
func TestEscapeHistoryAndRevert(t *testing.T) {
	e, _ := escapeEnv(t)
	d := e.m("data")
	// The owner changes secrets through the mount, so the journal has them.
	sh(t, fmt.Sprintf(`set -e; cd %s
echo "%s v2" > secrets/k
mv secrets/sub/k2 public/moved-here
mv public/moved-here secrets/sub/k2
echo "%s private" > public/private && chmod 600 public/private && rm public/private
echo "root v1" > public/rootfile && chmod 644 public/rootfile && echo "root v2" > public/rootfile
printf '#!/bin/sh\necho root tool\n' > public/tool && chmod 755 public/tool
`, d, canary, canary))
	var ids []string
	for _, u := range []string{"data://secrets/k", "data://secrets/sub/k2", "data://public/private"} {
		for _, r := range e.history(t, u) {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) < 3 {
		t.Fatalf("the journal lacks the owner's changes: %v", ids)
	}
	// History: hidden files have none, and renames do not name them.
	for _, u := range []string{"data://secrets/k", "data://secrets/sub/k2", "data://secrets/", "data://secrets/sub/", "data://", "data://public/", "data://public/moved-here", "data://mixed/"} {
		out, _ := e.cli(t, 1001, "history", u)
		noLeak(t, "history "+u, out, u)
		j, _ := e.cli(t, 1001, "history", "--json", u)
		noLeak(t, "history --json "+u, j, u)
		if strings.HasPrefix(u, "data://secrets") && strings.Contains(out, "data://") {
			t.Errorf("history of the hidden %s answers with records:\n%s", u, out)
		}
	}
	// Record ids are enciphered: sequential ids would count, by their
	// gaps, the changes to hidden files between the agent's records.
	pub, _ := e.cli(t, 1001, "history", "--json", "data://public/")
	var pubRecs []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(pub), &pubRecs); err != nil || len(pubRecs) < 2 {
		t.Fatalf("history --json data://public/ as the agent: %v\n%s", err, pub)
	}
	for _, r := range pubRecs {
		if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(r.ID) {
			t.Errorf("the agent is shown record id %q, not 16 hex digits", r.ID)
		}
	}
	for _, p := range []string{"data/secrets/k", "data/secrets/sub/k2", "data/secrets%2Fk", "data/public/moved-here", "data"} {
		out, _ := run(t, 1001, "cat "+filepath.Join(e.mnt, ".neuralis", "history", p)+" 2>/dev/null; ls -la "+filepath.Join(e.mnt, ".neuralis", "history", p)+" 2>/dev/null")
		noLeak(t, ".neuralis/history/"+p, out, filepath.Join(e.mnt, ".neuralis", "history", p))
	}
	// Revert: record ids of hidden files are unknown to the agent, and no
	// error names them; hidden and read-only files are not reverted.
	before := snapshot(t, e.b("data"))
	for _, id := range ids {
		out, err := e.cli(t, 1001, "revert", "data://public/p.txt", "--to", id)
		if err == nil {
			t.Errorf("revert public/p.txt --to %s (a hidden file's record) succeeded: %s", id, out)
		}
		noLeak(t, "revert --to "+id, out)
	}
	for _, u := range []string{"data://secrets/k", "data://secrets/sub/k2", "data://ro/r.txt", "data://public/../secrets/k", "data://public//p.txt",
		"data://secrets%2Fk", "data:///secrets/k", "data://./secrets/k", "data://secrets/k/", "data://SECRETS/k", "data://secrets/ｋ",
		"data://public/" + strings.Repeat("a", 5000), "repo://secrets/g.txt", "nosuch://x", "data:/secrets/k", "data://mixed/hidden/h.txt"} {
		out, err := e.cli(t, 1001, "revert", u)
		if err == nil {
			t.Errorf("revert %s succeeded for the agent: %s", u, out)
		}
		noLeak(t, "revert "+u, out, fmt.Sprintf("%q", u), u)
	}
	if after := snapshot(t, e.b("data")); after != before {
		t.Errorf("refused reverts changed the backing folder:\n--- before\n%s\n--- after\n%s", before, after)
	}
	// File permissions hold as on the mount: the agent cannot write root's
	// 0644 file there, so it cannot revert it either.
	if out, err := run(t, 1001, "echo agent > "+e.m("data", "public", "rootfile")); err == nil {
		t.Fatalf("uid 1001 wrote a 0644 root file on the mount: %s", out)
	}
	if out, err := e.cli(t, 1001, "revert", "data://public/rootfile"); err == nil {
		t.Errorf("the agent reverted root's 0644 file it may not write: %s", out)
	}
	same(t, e.b("data", "public", "rootfile"), "root v2\n", 0o644)
	// Nor bring back root's private (0600) file it could never read.
	out, err := e.cli(t, 1001, "revert", "data://public/private")
	if err == nil {
		t.Errorf("the agent brought back root's deleted 0600 file: %s", out)
	}
	if b, err := os.ReadFile(e.b("data", "public", "private")); err == nil {
		var st syscall.Stat_t
		syscall.Stat(e.b("data", "public", "private"), &st)
		if st.Uid == 1001 || st.Mode&0o004 != 0 {
			t.Errorf("root's private content came back readable by the agent: uid %d mode %o %q", st.Uid, st.Mode, b)
		}
	}
	// Nor turn its own content into a root-owned set-uid program: swap its
	// file in under root's name and back (the rename over it journals the
	// agent's content and mode), then revert to that record.
	if out, err := run(t, 1001, fmt.Sprintf(`set -e; cd %s
mv tool tool.orig
printf '#!/bin/sh\necho PWNED\n' > tool
chmod 4755 tool
mv tool.orig tool`, e.m("data", "public"))); err != nil {
		t.Fatalf("agent swap: %v\n%s", err, out)
	}
	// Each record in turn, newest first, looking after each. (Reverting
	// root's own creation removes the file, as the agent may in a folder
	// it can write; what matters is what any file there is.)
	for _, r := range e.history(t, "data://public/tool") {
		out, _ := e.cli(t, 1001, "revert", "data://public/tool", "--to", r.ID)
		var st syscall.Stat_t
		if syscall.Stat(e.b("data", "public", "tool"), &st) != nil {
			continue
		}
		b, _ := os.ReadFile(e.b("data", "public", "tool"))
		if strings.Contains(string(b), "PWNED") && st.Uid != 1001 {
			t.Errorf("revert --to %s (%s) put the agent's program in a file owned by uid %d, mode %o, that the agent may not write: %s", r.ID, r.Op, st.Uid, st.Mode&0o7777, out)
		}
	}
	// A revert recreates a deleted file's folders as the agent, so only
	// where the agent may make them: not the folder public/locked.
	sh(t, fmt.Sprintf(`set -e; cd %s
mkdir locked sub && echo one > locked/f.txt && echo two > locked/f.txt && echo one > sub/f.txt && echo two > sub/f.txt
chmod 777 locked sub locked/f.txt sub/f.txt
rm -rf locked`, e.m("data", "public")))
	if out, err := e.cli(t, 1001, "revert", "data://public/locked/f.txt"); err == nil {
		t.Errorf("the agent's revert recreated public/locked, a folder it may not create: %s", out)
	}
	if _, err := os.Lstat(e.b("data", "public", "locked")); err == nil {
		t.Errorf("public/locked was recreated")
	}
	// Nor does a revert follow a folder the agent swapped for a symlink to
	// secrets/, as the agent or as the owner.
	if out, err := run(t, 1001, "cd "+e.m("data", "public")+" && rm -rf sub && ln -s ../secrets sub"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	for _, uid := range []int{1001, 0} {
		if out, err := e.cli(t, uid, "revert", "data://public/sub/f.txt"); err == nil {
			t.Errorf("uid %d's revert through a symlinked folder succeeded: %s", uid, out)
		}
	}
	if _, err := os.Lstat(e.b("data", "secrets", "f.txt")); err == nil {
		t.Errorf("a revert wrote through public/sub -> ../secrets into secrets/")
	}
	// What the agent may do, it still can: revert its own file.
	pf := e.m("data", "public", "mine.txt")
	if out, err := run(t, 1001, "echo one > "+pf+" && echo two > "+pf); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if out, err := e.cli(t, 1001, "revert", "data://public/mine.txt"); err != nil {
		t.Errorf("the agent could not revert its own file: %v\n%s", err, out)
	}
	same(t, e.b("data", "public", "mine.txt"), "one\n", 0o644)
}

// The control socket is open to every uid: huge, malformed and endless
// requests, and a flood of connections, must leave the daemon (and the
// mount it serves) answering.
func TestEscapeControlSocket(t *testing.T) {
	e, _ := escapeEnv(t)
	sock := filepath.Join(e.state, "control.sock")
	out, _ := run(t, 1001, fmt.Sprintf(`%s - <<'EOF'
import socket, json, threading, time
path = %q
def ask(payload, read=True):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(path)
    try:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
    except OSError as e:
        pass
    data = b""
    if read:
        while True:
            try:
                chunk = s.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
    s.close()
    return data[:200]
print("huge", ask(b'{"op":"search","query":"' + b"x" * (8 << 20) + b'"}'))
for bad in [b"", b"{", b"null", b"[]", b'{"op":"revert","uri":"data://secrets/k\\u0000"}', b'{"op":"revert","uri":"data://public/p.txt","id":"' + b"9" * 100000 + b'"}',
            b'{"op":"history","uri":"data://secrets/\\u0000/"}', b'{"op":"search","query":"\\u0000(((("}', b'{"op":"search","query":"/((((((((((/"}',
            b'{"op":"search","limit":-5,"query":"x"}', b'{"op":"search","limit":99999999,"query":""}', b'{"op":"revert","uri":"","id":"../../etc/passwd"}',
            b'{"op":"status"}' * 1000, bytes(range(256))]:
    print("bad", bad[:30], ask(bad))
idle = []
for i in range(100):
    s = socket.socket(socket.AF_UNIX); s.connect(path); idle.append(s)
def flood():
    for i in range(20):
        try:
            ask(b'{"op":"search","query":"public"}')
        except OSError:
            pass
ts = [threading.Thread(target=flood) for _ in range(20)]
for t in ts: t.start()
for t in ts: t.join()
for s in idle: s.close()
print("flood done")
EOF`, py, sock))
	if strings.Contains(out, canary) {
		t.Errorf("an answer to a malformed request carries secret content:\n%s", out)
	}
	if !strings.Contains(out, "flood done") {
		t.Errorf("the abuse script did not finish:\n%s", out)
	}
	// Still serving: the mount, search and history.
	if b, err := os.ReadFile(e.m("data", "public", "p.txt")); err != nil || string(b) != "public text\n" {
		t.Errorf("the mount after the abuse: %v %q", err, b)
	}
	eventually(t, 30*time.Second, "search to answer again", func() bool {
		out, _ := e.search(t, 1001, "public")
		return strings.Contains(out, "data://public/p.txt")
	})
}

// File names are the agent's to choose: with newlines, tabs and escape
// sequences they must not forge lines of .status, search results, history
// or .neuralis/sources that someone else reads.
func TestEscapeHostileNames(t *testing.T) {
	e, _ := escapeEnv(t)
	names := []string{"zz\ndata:forged line", "tab\there", "esc\x1b[31mred", "cr\rback", "nl\n?? forged-untracked"}
	script := py + " - <<'EOF'\nimport os\n"
	for _, n := range names {
		for _, dir := range []string{e.m("data", "public"), e.m("repo", "pub")} {
			script += fmt.Sprintf("open(%q, 'w').write('zebrawolf here\\n')\n", filepath.Join(dir, n))
		}
	}
	script += "EOF"
	if out, err := run(t, 1001, script); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	eventually(t, 5*time.Second, "the names to be indexed", func() bool {
		out, _ := e.search(t, 0, "--json", "zebrawolf")
		return strings.Count(out, `"uri"`) == 2*len(names)
	})
	check := func(what, out string, ok func(line string) bool) {
		t.Helper()
		if strings.ContainsAny(out, "\x1b\r") {
			t.Errorf("%s passes a raw control character through:\n%q", what, out)
		}
		for line := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
			if !ok(line) {
				t.Errorf("%s has a forged line %q in:\n%s", what, line, out)
			}
		}
	}
	result := func(line string) bool {
		return strings.HasPrefix(line, "data://") || strings.HasPrefix(line, "repo://") || strings.HasPrefix(line, `"data://`) || strings.HasPrefix(line, `"repo://`) || strings.HasPrefix(line, "# ")
	}
	out, _ := e.search(t, 0, "zebrawolf")
	check("search", out, result)
	b, _ := os.ReadFile(filepath.Join(e.mnt, ".neuralis", "search", "zebrawolf"))
	check(".neuralis/search", string(b), result)
	hist, _ := e.cli(t, 0, "history", "data://public/")
	check("history", hist, func(line string) bool {
		return regexp.MustCompile(`^[0-9a-f]{16}\t`).MatchString(line) || line == "# no history"
	})
	b, _ = os.ReadFile(filepath.Join(e.m("repo"), ".status"))
	check(".status", string(b), func(line string) bool {
		return strings.HasPrefix(line, "## ") || regexp.MustCompile(`^[ MADRCU?!]{2} `).MatchString(line)
	})
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "?? forged") {
			t.Errorf(".status has a forged line %q:\n%s", line, b)
		}
	}
	b, _ = os.ReadFile(filepath.Join(e.mnt, ".neuralis", "sources"))
	check(".neuralis/sources", string(b), func(line string) bool {
		return strings.HasPrefix(line, "# ") || strings.HasPrefix(line, "data\t") || strings.HasPrefix(line, "repo\t")
	})
}

// A uid no [[principal]] names is "other": nothing at all, anywhere.
func TestEscapeUnnamedUID(t *testing.T) {
	e, _ := escapeEnv(t)
	out, _ := run(t, 1003, fmt.Sprintf(`cd /
ls -la %[1]s; cat %[1]s/.neuralis/sources %[1]s/.neuralis/whoami
ls %[1]s/data %[1]s/repo 2>&1; cat %[1]s/data/public/p.txt 2>&1
cat %[1]s/.neuralis/search/public 2>&1; ls %[1]s/.neuralis/history/ 2>&1; cat %[1]s/.neuralis/history/data/public/p.txt 2>&1
echo x > %[1]s/data/public/new 2>&1
%[2]s search -c %[3]s public 2>&1; %[2]s status -c %[3]s 2>&1; %[2]s history -c %[3]s data:// 2>&1
%[2]s revert -c %[3]s data://public/p.txt 2>&1
`, e.mnt, binPath, e.cfg))
	if !strings.Contains(out, "principal: other") {
		t.Errorf("uid 1003 is not other:\n%s", out)
	}
	out = strings.ReplaceAll(out, "revert: data://public/p.txt", "revert: <asked>")
	for _, leak := range []string{"public text", "data://", "repo://", "data\tlocal", "repo\tgit", canary} {
		if strings.Contains(out, leak) {
			t.Errorf("other (uid 1003) sees %q:\n%s", leak, out)
		}
	}
	if _, err := os.Stat(e.b("data", "public", "new")); err == nil {
		t.Errorf("other created a file")
	}
}

// The agent's container: bubblewrap as uid 1001 with only the mount (or
// its view) bound in. No way out through the backing path, /proc or the
// view's caches.
func TestEscapeSandbox(t *testing.T) {
	e, view := escapeEnv(t)
	inner := `cd /work
ls -laR /work 2>&1 | head -200
cat data/secrets/k data/mixed/hidden/h.txt repo/secrets/g.txt 2>/dev/null
ln -s ` + e.b("data", "secrets", "k") + ` data/public/host-link 2>&1; cat data/public/host-link 2>/dev/null
ln -s /proc/1/root/` + e.b("data", "secrets", "k") + ` data/public/proc-link 2>&1; cat data/public/proc-link 2>/dev/null
cat /proc/1/root` + e.b("data", "secrets", "k") + ` 2>/dev/null
python3 -c 'import os; print(os.listdir("/work/data"))' 2>&1
cat .neuralis/search/CANARY 2>&1
cat data/public/../secrets/k 2>/dev/null
git -c safe.directory=* -C repo show HEAD:secrets/g.txt 2>/dev/null
`
	for _, mnt := range []string{e.mnt, view} {
		out, err := run(t, 1001, sandbox(mnt, "/work")+" sh -c '"+strings.ReplaceAll(inner, "'", `'\''`)+"'")
		if err != nil && !strings.Contains(out, "No such file") {
			t.Logf("sandbox: %v", err)
		}
		noLeak(t, "sandbox on "+mnt, out, e.b("data", "secrets", "k")) // the agent's own links' targets
		if !strings.Contains(out, "p.txt") {
			t.Errorf("the sandbox does not see the allowed files on %s:\n%s", mnt, out)
		}
	}
	// The view's cached names belong to the agent alone.
	agent(t, "cat "+filepath.Join(view, "data", "public", "p.txt"))
	for _, uid := range []int{0, 1002, 1003} {
		if out, err := run(t, uid, "stat "+filepath.Join(view, "data", "public", "p.txt")+" 2>&1"); err == nil {
			t.Errorf("uid %d walked the agent's view:\n%s", uid, out)
		}
	}
}

// Names that are not the hidden name but might match it on another
// filesystem or after normalisation: case variants, trailing dots and
// slashes, doubled slashes. On a case-sensitive backing folder they are
// other names (absent); the policy never sees a path the kernel did not
// clean. (A case-insensitive backing folder — ext4 casefold, vfat — would
// need the policy to compare names case-insensitively; this kernel has
// neither, so that is not tested here.)
func TestEscapeNameVariants(t *testing.T) {
	e, _ := escapeEnv(t)
	d := e.m("data")
	out := agent(t, fmt.Sprintf(`cd /
for p in SECRETS/k Secrets/k secrets./k secrets/ secrets// secrets//k ./secrets/k public/./../secrets/k mixed/HIDDEN/h.txt mixed/hidden/ mixed//hidden//h.txt "secrets/k " secrets/k/; do
  cat "%[1]s/$p" 2>/dev/null && echo "READ $p"
  ls "%[1]s/$p" 2>/dev/null && echo "LISTED $p"
done
true`, d))
	if strings.Contains(out, "READ") || strings.Contains(out, "LISTED") {
		t.Errorf("a variant of a hidden name reached it:\n%s", out)
	}
}

// Folder sizes count entries on some filesystems (tmpfs: 20 bytes per
// name; btrfs: the names' lengths): a folder's size must not change for
// the agent when hidden files come and go, as its link count does not.
func TestEscapeFolderSizeCountsNoHiddenNames(t *testing.T) {
	requireFUSE(t)
	base := sharedTempDir(t)
	data := filepath.Join(base, "tmpfs")
	must(t, os.Mkdir(data, 0o777))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "mode=0777", "tmpfs", data).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { syscall.Unmount(data, syscall.MNT_DETACH) })
	writeFile(t, filepath.Join(data, "mixed", "open.txt"), "open\n", 0o666)
	writeFile(t, filepath.Join(data, "mixed", "hidden", "h.txt"), canary+"\n", 0o666)
	sh(t, "chmod -R a+rwX "+data)
	e := newEnv(t, strings.Replace(escapeTOML, "uri = \"repo://", "uri = \"data://repo/", 1), src{slug: "data", path: data})
	size := func() string {
		out, _ := run(t, 1001, "stat -c '%s %h' "+e.m("data", "mixed"))
		return strings.TrimSpace(out)
	}
	s1 := size()
	for i := range 5 {
		writeFile(t, filepath.Join(data, "mixed", fmt.Sprintf("hidden-%d", i), "x"), "x\n", 0o666)
	}
	// Once root lists the new folders, the watcher has dropped what the
	// kernel had cached of mixed/.
	eventually(t, 10*time.Second, "the new folders to show to root", func() bool {
		names, _ := os.ReadDir(e.m("data", "mixed"))
		return len(names) >= 6
	})
	s2 := size()
	if s1 != s2 {
		t.Errorf("the agent's size and link count of mixed/ went from %q to %q when hidden folders were added (the size counts them)", s1, s2)
	}
	// Cleanup order: the daemon stops (newEnv's cleanup, registered last,
	// runs first), then the tmpfs is unmounted.
}

// core.excludesFile in a checkout's config names a file the daemon reads
// as root to decide what .status shows as untracked: an agent that may
// write .git/config must not turn .status into an oracle on host files
// outside the source ("is this exact line in /etc/shadow?").
func TestEscapeGitExcludesFileOutsideTheSource(t *testing.T) {
	requireFUSE(t)
	base := sharedTempDir(t)
	secret := filepath.Join(base, "host-secret")
	writeFile(t, secret, "topsecret-line\n", 0o600)
	repo := filepath.Join(base, "repo")
	must(t, os.MkdirAll(repo, 0o777))
	sh(t, "cd "+repo+" && git init -q -b main && echo a > a.txt && git add -A && git -c user.name=t -c user.email=t@x commit -q -m a && chmod -R a+rwX .")
	// The agent may do anything in this source (so .git is its to write).
	e := newEnv(t, `
[[principal]]
name = "agent"
uids = [1001]
`, src{slug: "r", kind: "git", path: repo})
	if out, err := run(t, 1001, fmt.Sprintf(`set -e; cd %s
printf '[core]\n\texcludesFile = %s\n' >> .git/config
echo x > topsecret-line
echo y > not-in-secret`, e.m("r"), secret)); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	out, _ := run(t, 1001, "cat "+filepath.Join(e.m("r"), ".status"))
	if !strings.Contains(out, "?? not-in-secret") {
		t.Fatalf(".status: %s", out)
	}
	if !strings.Contains(out, "?? topsecret-line") {
		t.Errorf(".status hides a file named like a line of %s (mode 0600, outside the source): the daemon read it as root for the agent:\n%s", secret, out)
	}
}

// git shows no "?? dir/" line for a folder with nothing untracked in it,
// so a line for a folder the agent sees as empty would tell it that files
// hidden from it are there. .status and the source's identity describe
// an untracked folder to the agent only when it sees something untracked
// in it, and a folder whose tracked files are all hidden from it as git
// shows a folder with none, in the main mount and in its view, from the
// top and from inside.
func TestEscapeUntrackedFolderOfHiddenFiles(t *testing.T) {
	requireFUSE(t)
	base := sharedTempDir(t)
	repo := filepath.Join(base, "repo")
	view := filepath.Join(base, "agentview")
	must(t, os.Mkdir(view, 0o755))
	writeFile(t, filepath.Join(repo, "a.txt"), "a\n", 0o666)
	writeFile(t, filepath.Join(repo, "kept", "t.key"), "k\n", 0o666)
	sh(t, "cd "+repo+" && git init -q -b main && git add -A && git -c user.name=t -c user.email=t@x commit -q -m a")
	writeFile(t, filepath.Join(repo, "kept", "v.txt"), "v\n", 0o666)
	writeFile(t, filepath.Join(repo, "drop", "only.key"), "k\n", 0o666)
	writeFile(t, filepath.Join(repo, "deep", "er", "x.key"), "k\n", 0o666)
	writeFile(t, filepath.Join(repo, "mixed", "x.key"), "k\n", 0o666)
	writeFile(t, filepath.Join(repo, "mixed", "seen.txt"), "s\n", 0o666)
	sh(t, "chmod -R a+rwX "+repo)
	e := newEnv(t, `
[[principal]]
name = "agent"
uids = [1001]
roles = ["agent"]

[[rule]]
uri = "r://**/*.key"
who = ["role:agent"]
deny = ["read", "write"]
`+viewTOML("agent", view), src{slug: "r", kind: "git", path: repo})
	owner, _ := os.ReadFile(filepath.Join(e.m("r"), ".status"))
	for _, line := range []string{"?? deep/", "?? drop/", "?? mixed/", "?? kept/v.txt"} {
		if !strings.Contains(string(owner), line) {
			t.Fatalf("the owner's .status lacks %q:\n%s", line, owner)
		}
	}
	look := func() string {
		out, _ := run(t, 1001, fmt.Sprintf(`for r in %s %s; do cat $r/.status $r/drop/.status $r/deep/.status $r/deep/er/.status $r/mixed/.status $r/kept/.status; ls -A $r/drop; done; cat %s/.neuralis/sources`,
			e.m("r"), filepath.Join(view, "r"), e.mnt))
		return out
	}
	out := look()
	// (kept/ holds a tracked file hidden from the agent: listing its
	// untracked file alone, where git shows a folder with no tracked
	// files as "?? kept/", would tell that one is there.)
	for _, leak := range []string{"drop/", "deep/", ".key", "kept/v.txt"} {
		if strings.Contains(out, leak) {
			t.Errorf("the agent learns of an untracked folder whose files are hidden from it (%q):\n%s", leak, out)
		}
	}
	for _, line := range []string{"?? mixed/", "?? kept/"} {
		if n := strings.Count(out, line); n != 4 {
			t.Errorf("the agent sees %d %q lines, not 4 (top and inside, main mount and view):\n%s", n, line, out)
		}
	}
	// Once it holds a file the agent sees, the folder is untracked for it.
	writeFile(t, filepath.Join(repo, "drop", "seen.txt"), "s\n", 0o666)
	eventually(t, 5*time.Second, "the agent to see drop/ untracked", func() bool {
		return strings.Count(look(), "?? drop/") == 4
	})
}

// On the mount the kernel checks mode bits before the policy is asked: a
// root file of mode 0600, or anything in a 0700 root folder, is out of
// uid 1001's reach even where the policy allows read. What the daemon
// answers itself, as root — search hits and snippets, .status lines,
// history — must not reach further than the mount.
func TestEscapeFileModesHoldOutsideTheMount(t *testing.T) {
	e, _ := escapeEnv(t)
	writeFile(t, e.b("data", "public", "private.txt"), "zebrasecret private\n", 0o600)
	writeFile(t, e.b("data", "public", "closed", "notes.txt"), "zebrasecret closed\n", 0o644)
	writeFile(t, e.b("repo", "pub", "closed", "untracked-in-closed.txt"), "x\n", 0o644)
	must(t, os.Chmod(e.b("data", "public", "closed"), 0o700))
	must(t, os.Chmod(e.b("repo", "pub", "closed"), 0o700))
	// History: root changes the files through the mount.
	sh(t, "echo 'zebrasecret v2' > "+e.m("data", "public", "closed", "notes.txt")+" && echo 'zebrasecret v2' > "+e.m("data", "public", "private.txt"))
	eventually(t, 5*time.Second, "the owner to find both files", func() bool {
		out, _ := e.search(t, 0, "zebrasecret")
		return strings.Contains(out, "private.txt") && strings.Contains(out, "closed/notes.txt")
	})
	if b, _ := os.ReadFile(filepath.Join(e.m("repo"), ".status")); !strings.Contains(string(b), "pub/closed/") {
		t.Fatalf("owner's .status lacks the closed folder:\n%s", b)
	}
	for _, uid := range []int{1001, 1002} {
		if out, err := run(t, uid, "cat "+e.m("data", "public", "private.txt")+" "+e.m("data", "public", "closed", "notes.txt")); err == nil {
			t.Fatalf("uid %d read 0600/0700 files on the mount: %s", uid, out)
		}
		var outs []string
		for _, args := range [][]string{{"zebrasecret"}, {"--json", "zebrasecret"}, {`"zebrasecret v2"`}, {"--path", "public/**", ""}} {
			out, _ := e.search(t, uid, args...)
			outs = append(outs, out)
		}
		b, _ := run(t, uid, "cat "+filepath.Join(e.mnt, ".neuralis", "search", "zebrasecret"))
		outs = append(outs, b)
		for _, u := range []string{"data://public/", "data://public/closed/", "data://public/closed/notes.txt", "data://public/private.txt"} {
			out, _ := e.cli(t, uid, "history", u)
			outs = append(outs, out)
		}
		b, _ = run(t, uid, "cat "+filepath.Join(e.mnt, ".neuralis", "history", "data", "public", "closed", "notes.txt")+" 2>/dev/null")
		outs = append(outs, b)
		b, _ = run(t, uid, "cat "+filepath.Join(e.m("repo"), ".status")+" "+filepath.Join(e.m("repo"), "pub", ".status"))
		outs = append(outs, b)
		// The collection it is given: neither content nor names.
		col, _ := run(t, uid, binPath+" collect --framed -c "+e.cfg+"; "+binPath+" collect --json -c "+e.cfg+"; cat "+filepath.Join(e.mnt, ".neuralis", "collection"))
		if !strings.Contains(col, "data://public/p.txt") {
			t.Fatalf("uid %d's collection lacks a file it may read:\n%s", uid, col)
		}
		for _, leak := range []string{"private.txt", "public/closed/"} {
			if strings.Contains(col, leak) {
				t.Errorf("uid %d's collection holds %q, which the mount's file modes keep from it:\n%s", uid, leak, col)
			}
		}
		outs = append(outs, col)
		all := strings.Join(outs, "\n")
		// (The folder's own name shows — on the mount it is listed in pub/
		// — but not what is in it.)
		for _, leak := range []string{"zebrasecret", "notes.txt", "untracked-in-closed"} {
			if strings.Contains(strings.ReplaceAll(all, "data://public/closed/notes.txt", "<asked>"), leak) {
				t.Errorf("uid %d learns %q that the mount's file modes keep from it:\n%s", uid, leak, all)
				break
			}
		}
	}
	// What the agent may read, it still finds.
	writeFile(t, e.b("data", "public", "open.txt"), "zebrasecret open\n", 0o644)
	eventually(t, 5*time.Second, "the agent to find an open file", func() bool {
		out, _ := e.search(t, 1001, "zebrasecret")
		return strings.Contains(out, "data://public/open.txt:1:")
	})
}

// A read_only source refuses every change with EROFS, for everyone and
// every way of asking, revert included.
func TestEscapeReadOnlySource(t *testing.T) {
	requireFUSE(t)
	base := sharedTempDir(t)
	notes := filepath.Join(base, "notes")
	writeFile(t, filepath.Join(notes, "todo.txt"), "todo\n", 0o666)
	sh(t, "chmod -R a+rwX "+notes)
	e := newEnv(t, "[[principal]]\nname = \"agent\"\nuids = [1001]\n", src{slug: "notes", path: notes, extra: "read_only = true"})
	// The journal has a record only if something changed: nothing may.
	before := snapshot(t, notes)
	for _, uid := range []int{0, 1001} {
		out, _ := run(t, uid, fmt.Sprintf(`cd /
try() { if out=$("$@" 2>&1); then echo "ALLOWED: $*"; else echo "refused: $* (${out//$'\n'/ })"; fi; }
N=%[1]s
try sh -c "echo x > $N/todo.txt"
try sh -c "echo x >> $N/todo.txt"
try truncate -s 0 $N/todo.txt
try touch $N/todo.txt
try touch $N/new
try mkdir $N/dir
try mkfifo $N/fifo
try ln -s x $N/link
try ln $N/todo.txt $N/hard
try mv $N/todo.txt $N/moved
try rm $N/todo.txt
try chmod 600 $N/todo.txt
try %[2]s -c 'import os; os.setxattr("%[1]s/todo.txt", "user.x", b"1")'
try %[3]s revert -c %[4]s notes://todo.txt
`, e.m("notes"), py, binPath, e.cfg))
		for line := range strings.SplitSeq(out, "\n") {
			if strings.HasPrefix(line, "ALLOWED") {
				t.Errorf("uid %d on a read-only source: %s", uid, line)
			}
			// (chmod of root's file by uid 1001 is refused by the kernel
			// first: only the owner may.)
			if strings.HasPrefix(line, "refused") && !strings.Contains(line, "revert") && !strings.Contains(line, "Read-only file system") &&
				!(uid != 0 && strings.Contains(line, "chmod") && strings.Contains(line, "Operation not permitted")) {
				t.Errorf("uid %d: refused, but not with EROFS: %s", uid, line)
			}
		}
	}
	if after := snapshot(t, notes); after != before {
		t.Errorf("a read-only source changed:\n--- before\n%s\n--- after\n%s", before, after)
	}
}

// A file the agent has open (read, mapped) when the owner moves it under
// secrets/ stays readable through what the agent holds — FUSE cannot
// revoke an open file or a mapping, and with passthrough the reads never
// reach the daemon (as on any filesystem: permissions are checked at
// open) — but the agent cannot open it again, under either name.
func TestEscapeOpenFileAcrossAMove(t *testing.T) {
	e, _ := escapeEnv(t)
	writeFile(t, e.b("data", "public", "m.txt"), "before the move\n", 0o666)
	ready := filepath.Join(t.TempDir(), "ready")
	os.Chmod(filepath.Dir(ready), 0o777)
	done := make(chan string, 1)
	go func() {
		out, _ := run(t, 1001, fmt.Sprintf(`%s - <<'EOF'
import os, mmap, time
f = os.open(%q, os.O_RDONLY)
m = mmap.mmap(f, 0, prot=mmap.PROT_READ)
open(%q, "w").close()
while not os.path.exists(%q):
    time.sleep(0.02)
print("held fd:", os.pread(f, 100, 0))
print("held map:", m[:40])
for p in [%q, %q]:
    try:
        os.open(p, os.O_RDONLY); print("GOT reopen", p)
    except OSError as e:
        print("refused reopen", e.strerror)
EOF`, py, e.m("data", "public", "m.txt"), ready, ready+".moved", e.m("data", "public", "m.txt"), e.m("data", "secrets", "m.txt")))
		done <- out
	}()
	eventually(t, 10*time.Second, "the agent to map the file", func() bool { _, err := os.Stat(ready); return err == nil })
	sh(t, "mv "+e.m("data", "public", "m.txt")+" "+e.m("data", "secrets", "m.txt"))
	must(t, os.WriteFile(ready+".moved", nil, 0o666))
	out := <-done
	t.Logf("what the agent still holds after the move (not revocable):\n%s", out)
	if strings.Contains(out, "GOT") || strings.Count(out, "refused reopen") != 2 {
		t.Errorf("the agent opened the moved file again:\n%s", out)
	}
}

// The daemon's state (index, journal, audit log, control socket's folder)
// is not readable by other uids on the host: the index holds the terms of
// hidden files, the journal their old content, the audit log their names.
func TestEscapeStateDir(t *testing.T) {
	e, _ := escapeEnv(t)
	sh(t, "cat "+e.m("data", "secrets", "k")+" >/dev/null; echo 'x' >> "+e.m("data", "secrets", "k"))
	agent(t, "cat "+e.m("data", "secrets", "k")+" 2>/dev/null") // an audit line with the name
	out, _ := run(t, 1001, fmt.Sprintf(`cd %[1]s
ls -la . 2>&1; cat audit.log 2>&1; ls -laR index journal 2>&1 | head -30
grep -rl CANARY . 2>&1 | head; cat journal/* journal/*/* 2>&1 | head
find / -xdev -name '*.zap' -path '*%[2]s*' 2>/dev/null | head`, e.state, filepath.Base(filepath.Dir(e.state))))
	for _, leak := range []string{canary, "secrets/k", ".zap", "records"} {
		if strings.Contains(out, leak) {
			t.Errorf("uid 1001 reads the daemon's state (%q):\n%s", leak, out)
		}
	}
}

// A second name for a hidden file is a second uri: the policy decides by
// name (DESIGN.md §4), so the agent may not make one — ln needs write on
// both names, and the hidden one cannot even be looked up — and the mount
// does not follow one made on the host behind its back to refuse it (an
// administrator who links a secret into a readable folder publishes it).
func TestEscapeHardLinks(t *testing.T) {
	e, _ := escapeEnv(t)
	out := agent(t, fmt.Sprintf(`cd /
ln %[1]s/secrets/k %[1]s/public/k 2>/dev/null && echo LINKED-1
ln %[1]s/mixed/hidden/h.txt %[1]s/mixed/h 2>/dev/null && echo LINKED-2
ln -L %[1]s/public/sl %[1]s/public/k3 2>/dev/null && echo LINKED-3
true`, e.m("data")))
	if strings.Contains(out, "LINKED") {
		t.Errorf("the agent linked a hidden file into sight:\n%s", out)
	}
	for _, p := range []string{"public/k", "mixed/h", "public/k3"} {
		if _, err := os.Lstat(e.b("data", p)); err == nil {
			t.Errorf("%s exists", p)
		}
	}
	// A link the owner makes on the host is a readable uri, by name.
	must(t, os.Link(e.b("data", "public", "p.txt"), e.b("data", "public", "p-alias.txt")))
	var st syscall.Stat_t
	must(t, syscall.Stat(e.m("data", "public", "p-alias.txt"), &st))
	if st.Nlink != 2 {
		t.Errorf("a file's link count is %d; want the backing file's 2", st.Nlink)
	}
}

// A file the agent may write but not read (a rule denying only read, as
// for a write-only drop folder or a forgotten write) is absent to it, so
// open(O_CREAT) reaches the daemon as a CREATE. Creating may not open the
// existing hidden file for reading: the agent would read what it may not
// even see.
func TestEscapeCreateOverAHiddenFile(t *testing.T) {
	requireFUSE(t)
	base := sharedTempDir(t)
	data := filepath.Join(base, "data")
	writeFile(t, filepath.Join(data, "config", "secret.yml"), canary+" db password\n", 0o666)
	writeFile(t, filepath.Join(data, "config", "app.yml"), "app\n", 0o666)
	sh(t, "chmod -R a+rwX "+data)
	e := newEnv(t, `
[[principal]]
name = "agent"
uids = [1001]

[[rule]]
uri = "data://config/secret.yml"
who = ["agent"]
deny = ["read"]
`, src{slug: "data", path: data})
	out := agent(t, fmt.Sprintf(`%s - <<'EOF'
import os
p = %q
print(os.listdir(os.path.dirname(p)))
for name, flags in [("O_RDWR|O_CREAT", os.O_RDWR|os.O_CREAT), ("O_RDONLY|O_CREAT", os.O_RDONLY|os.O_CREAT), ("O_RDWR|O_CREAT|O_APPEND", os.O_RDWR|os.O_CREAT|os.O_APPEND)]:
    try:
        fd = os.open(p, flags, 0o644)
        print(name, "opened; reads", os.read(fd, 100))
        os.close(fd)
    except OSError as e:
        print(name, "refused:", e.strerror)
# Writing is allowed; a write-only descriptor reopened for reading is not.
try:
    w = os.open(p, os.O_WRONLY|os.O_CREAT|os.O_APPEND)
    print("O_WRONLY opened")
    r = os.open("/proc/self/fd/%%d" %% w, os.O_RDONLY)
    print("reopened for reading; reads", os.read(r, 100))
except OSError as e:
    print("reopen refused:", e.strerror)
EOF`, py, e.m("data", "config", "secret.yml")))
	t.Logf("%s", out)
	if b, _ := os.ReadFile(e.b("data", "config", "secret.yml")); !strings.Contains(string(b), canary) {
		t.Errorf("the hidden file lost its content: %q", b)
	}
}
