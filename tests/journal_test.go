package tests

import (
	"bytes"
	"crypto/des"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// revert runs `neuralisfs revert` and fails the test when it fails.
func (e *env) revert(t *testing.T, uri string, args ...string) string {
	t.Helper()
	out, err := exec.Command(binPath, append([]string{"revert", "-c", e.cfg, uri}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("revert %s: %v\n%s", uri, err, out)
	}
	return string(out)
}

type record struct {
	ID     string `json:"id"`
	Op     string `json:"op"`
	URI    string `json:"uri"`
	From   string `json:"from"`
	Before string `json:"before"`
	Kept   bool   `json:"kept"`
}

func (e *env) history(t *testing.T, uri string) []record {
	t.Helper()
	out, err := exec.Command(binPath, "history", "--json", "-c", e.cfg, uri).Output()
	if err != nil {
		t.Fatalf("history %s: %v", uri, err)
	}
	var recs []record
	if err := json.Unmarshal(out, &recs); err != nil {
		t.Fatalf("history --json: %v\n%s", err, out)
	}
	return recs
}

// same asserts the backing file has exactly content and mode.
func same(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if string(b) != content {
		t.Errorf("%s = %q; want %q", path, b, content)
	}
	var st syscall.Stat_t
	syscall.Stat(path, &st)
	if os.FileMode(st.Mode&0o7777) != mode {
		t.Errorf("%s mode %o; want %o", path, st.Mode&0o7777, mode)
	}
}

func TestRevertEveryKindOfChange(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB
	files := map[string]string{"over.txt": "original over\n", "trunc.txt": "original trunc\n", "del.txt": "original del\n",
		"doc.txt": "original doc\n", "target.txt": "original target\n", "dir/a.txt": "a\n", "dir/sub/b.txt": "b\n", "big.bin": big}
	for name, content := range files {
		writeFile(t, e.b("data", name), content, 0o640)
	}
	d := e.m("data")
	sh(t, `set -e; cd `+d+`
echo overwritten > over.txt
truncate -s 2 trunc.txt
rm del.txt
printf 'new doc\n' > .doc.txt.swp && mv .doc.txt.swp doc.txt
echo mover > mover.txt && mv mover.txt target.txt
rm -rf dir
echo changed > big.bin
echo brand new > created.txt`)
	for _, name := range []string{"over.txt", "trunc.txt", "del.txt", "doc.txt", "target.txt", "dir/a.txt", "dir/sub/b.txt", "big.bin"} {
		e.revert(t, "data://"+name)
		same(t, e.b("data", name), files[name], 0o640)
	}
	out := e.revert(t, "data://created.txt")
	if _, err := os.Stat(e.b("data", "created.txt")); err == nil || !strings.Contains(out, "removed") {
		t.Errorf("revert of a created file did not remove it: %s", out)
	}
	// A revert is journaled: reverting it brings back what it replaced.
	e.revert(t, "data://over.txt")
	same(t, e.b("data", "over.txt"), "overwritten\n", 0o640)
	e.revert(t, "data://over.txt")
	same(t, e.b("data", "over.txt"), files["over.txt"], 0o640)
	// --to a record further back: over.txt's oldest record is the first
	// overwrite, so reverting it brings back the original bytes even though
	// two reverts came after it.
	writeFile(t, e.b("data", "over.txt"), "drifted\n", 0o640)
	recs := e.history(t, "data://over.txt")
	if len(recs) < 3 {
		t.Fatalf("history of over.txt: %+v", recs)
	}
	e.revert(t, "data://over.txt", "--to", recs[len(recs)-1].ID)
	same(t, e.b("data", "over.txt"), files["over.txt"], 0o640)
	// The mount shows the history too, to anyone who may read the file.
	b, err := os.ReadFile(filepath.Join(e.mnt, ".neuralis", "history", "data", "over.txt"))
	if err != nil || !strings.Contains(string(b), "data://over.txt") || !strings.Contains(string(b), "revert") {
		t.Errorf(".neuralis/history/data/over.txt: %v\n%s", err, b)
	}
	if folder := e.history(t, "data://dir/"); len(folder) < 2 {
		t.Errorf("history of a folder: %+v", folder)
	}
	// What revert wrote is visible through the mount at once.
	if b, _ := os.ReadFile(e.m("data", "doc.txt")); string(b) != files["doc.txt"] {
		t.Errorf("mount shows %q after revert", b)
	}
}

func TestJournalRetentionAndCorruption(t *testing.T) {
	e := newEnv(t, "[journal]\nmax_bytes = 200000\nmax_file_bytes = 150000\n", src{slug: "data"})
	// Too large to keep.
	writeFile(t, e.b("data", "huge.bin"), strings.Repeat("h", 160000), 0o644)
	must(t, os.WriteFile(e.m("data", "huge.bin"), []byte("small"), 0o644))
	recs := e.history(t, "data://huge.bin")
	if len(recs) == 0 || recs[0].Kept {
		t.Errorf("a file over max_file_bytes is recorded as kept: %+v", recs)
	}
	out, err := exec.Command(binPath, "revert", "-c", e.cfg, "data://huge.bin").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not kept") && !strings.Contains(string(out), "larger") {
		t.Errorf("revert of a file that was not kept: %v %s", err, out)
	}
	// Eviction: later copies push the oldest out; history says "not kept".
	for i, c := range []string{"a", "b", "c"} {
		writeFile(t, e.b("data", "f"+c), strings.Repeat(c, 90000), 0o644)
		must(t, os.WriteFile(e.m("data", "f"+c), []byte{byte('0' + i)}, 0o644))
	}
	// The history of the whole source waits for every copy to be
	// published, and the last one's record is what evicts the oldest.
	e.history(t, "data://")
	if recs := e.history(t, "data://fa"); len(recs) == 0 || recs[len(recs)-1].Kept && recs[0].Kept {
		t.Errorf("the oldest copy is still claimed as kept past max_bytes: %+v", recs)
	}
	// Corruption: flip a byte of a kept entry; revert refuses, changes nothing.
	writeFile(t, e.b("data", "c.txt"), "precious bytes\n", 0o644)
	must(t, os.WriteFile(e.m("data", "c.txt"), []byte("overwritten\n"), 0o644))
	recs = e.history(t, "data://c.txt")
	obj := filepath.Join(e.state, "journal", "objects", strings.TrimPrefix(recs[0].Before, "sha256:"))
	data, err := os.ReadFile(obj)
	if err != nil {
		t.Fatalf("journal object: %v", err)
	}
	must(t, os.Chmod(obj, 0o600))
	must(t, os.WriteFile(obj, bytes.Replace(data, []byte("precious"), []byte("PRECIOUS"), 1), 0o600))
	out, err = exec.Command(binPath, "revert", "-c", e.cfg, "data://c.txt").CombinedOutput()
	if err == nil || !strings.Contains(strings.ToLower(string(out)), "corrupt") || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Errorf("revert from a corrupt entry: %v %q", err, out)
	}
	same(t, e.b("data", "c.txt"), "overwritten\n", 0o644)
	// An unknown slug is one sentence, not an empty history.
	for _, sub := range []string{"history", "revert"} {
		out, err := exec.Command(binPath, sub, "-c", e.cfg, "nosuch://x").CombinedOutput()
		if want := "neuralisfs " + sub + ": unknown source \"nosuch\""; err == nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("%s of an unknown slug: %v %q, want %q", sub, err, out, want)
		}
	}
	// The journal folder is private.
	var st syscall.Stat_t
	must(t, syscall.Stat(filepath.Join(e.state, "journal"), &st))
	if st.Mode&0o077 != 0 {
		t.Errorf("journal folder mode %o; want private", st.Mode&0o777)
	}
}

func TestJournalSurvivesSIGKILL(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	for i := range 20 {
		writeFile(t, e.b("data", "k"+string(rune('a'+i))), strings.Repeat(string(rune('a'+i)), 4096), 0o644)
	}
	// Overwrite files through the mount while the daemon is killed.
	writer := exec.Command("bash", "-c", "cd "+e.m("data")+" && for r in $(seq 1 50); do for f in k*; do echo $r > $f 2>/dev/null; done; done")
	writer.Dir = "/"
	must(t, writer.Start())
	eventually(t, 20*time.Second, "journaling under way", func() bool {
		b, _ := os.ReadFile(filepath.Join(e.state, "journal", "records.jsonl"))
		return bytes.Count(b, []byte("\n")) > 30
	})
	e.kill()
	writer.Wait()
	// What the killed daemon had written is in the page cache: every
	// record line in it (a staged line or a record's own; past the last
	// line, the NUL bytes of its append window and perhaps a torn line)
	// must be in the history after the restart.
	written := map[string]bool{}
	b, err := os.ReadFile(filepath.Join(e.state, "journal", "records.jsonl"))
	must(t, err)
	for _, ln := range bytes.Split(b, []byte("\n")) {
		var l struct {
			ID     string `json:"id"`
			Record *struct {
				ID string `json:"id"`
			} `json:"record"`
		}
		if json.Unmarshal(ln, &l) != nil {
			continue // the tail
		}
		if l.Record != nil {
			l.ID = l.Record.ID
		}
		if l.ID != "" {
			written[l.ID] = true
		}
	}
	// (A staged line and the record's own line share an id: 30 lines
	// are at least 15 records.)
	if len(written) < 15 {
		t.Fatalf("records.jsonl of the killed daemon holds %d records; want at least 15", len(written))
	}
	e.start()
	// Every record either restores exactly what it claims or says not kept.
	recs := e.history(t, "data://")
	if len(recs) == 0 {
		t.Fatalf("no history after restart")
	}
	// History shows ids enciphered.
	shown := shownJournalIDs(t, filepath.Join(e.state, "journal"))
	have := map[string]bool{}
	for _, r := range recs {
		have[r.ID] = true
	}
	lost := 0
	for id := range written {
		if !have[shown(id)] {
			lost++
		}
	}
	if lost > 0 || len(have) < len(written) {
		t.Errorf("%d records the killed daemon had written are lost after the restart (history shows %d of %d)", lost, len(have), len(written))
	}
	tmps, _ := filepath.Glob(filepath.Join(e.state, "journal", "*tmp*"))
	if len(tmps) > 0 {
		t.Errorf("temporary files adopted or left after restart: %v", tmps)
	}
	for _, r := range recs {
		if r.Op != "open" || !r.Kept || r.Before == "absent" {
			continue
		}
		out, err := exec.Command(binPath, "revert", "-c", e.cfg, r.URI, "--to", r.ID).CombinedOutput()
		if err != nil {
			t.Errorf("revert %s --to %s after SIGKILL: %v %s", r.URI, r.ID, err, out)
			break
		}
		name := strings.TrimPrefix(r.URI, "data://")
		b, _ := os.ReadFile(e.b("data", name))
		if !strings.HasSuffix(string(b), "\n") && len(b) != 4096 {
			t.Errorf("restored %s is not a whole earlier version: %q", name, b)
		}
		break
	}
}

// TestJournalOpensOnlyRegularFilesForReading covers the journal's direct
// read-open of a file the kernel knows as regular (fs.JournalEvent.Regular):
// an unlink and an overwrite through the mount are kept and reverted
// exactly, and a FIFO swapped in behind the mount while the kernel still
// holds the name as a regular file neither blocks the unlink nor is kept.
func TestJournalOpensOnlyRegularFilesForReading(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	writeFile(t, e.b("data", "gone.txt"), "kept by unlink\n", 0o640)
	writeFile(t, e.b("data", "over.txt"), "kept by overwrite\n", 0o600)
	must(t, os.Remove(e.m("data", "gone.txt")))
	must(t, os.WriteFile(e.m("data", "over.txt"), []byte("new\n"), 0o600))
	e.revert(t, "data://gone.txt")
	e.revert(t, "data://over.txt")
	same(t, e.b("data", "gone.txt"), "kept by unlink\n", 0o640)
	same(t, e.b("data", "over.txt"), "kept by overwrite\n", 0o600)

	// The kernel learns "pipe" as a regular file, then it becomes a FIFO
	// behind the mount's back.
	writeFile(t, e.b("data", "pipe"), "x", 0o644)
	if _, err := os.Stat(e.m("data", "pipe")); err != nil {
		t.Fatal(err)
	}
	must(t, os.Remove(e.b("data", "pipe")))
	must(t, syscall.Mkfifo(e.b("data", "pipe"), 0o644))
	done := make(chan error, 1)
	go func() { done <- os.Remove(e.m("data", "pipe")) }()
	select {
	case err := <-done:
		if err != nil && !os.IsNotExist(err) {
			t.Errorf("unlink of a FIFO through the mount: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("unlink of a FIFO through the mount hangs (the journal blocked opening it?)")
	}
	for _, r := range e.history(t, "data://pipe") {
		if r.Kept && r.Before != "absent" {
			t.Errorf("a FIFO's content was recorded as kept: %+v", r)
		}
	}
}

// TestJournalBurstIsPackedAndReverts removes a folder of 300 files with
// different content through the mount: the journal keeps them in packs
// (not a file each), every file reverts to its exact bytes and mode, and
// a byte flipped inside a pack makes only that file's revert refuse, with
// one sentence, leaving the backing folder as it was.
func TestJournalBurstIsPackedAndReverts(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	want := map[string]string{}
	for i := range 300 {
		name := fmt.Sprintf("burst/d%d/f%03d.txt", i%7, i)
		want[name] = strings.Repeat(fmt.Sprintf("file %d line\n", i), 20+i%50)
		writeFile(t, e.b("data", name), want[name], 0o640)
	}
	sh(t, "rm -rf "+e.m("data", "burst"))
	// One history of the folder (it waits for the publisher): every file
	// has its unlink record, kept.
	unlinked := map[string]bool{}
	for _, r := range e.history(t, "data://burst/") {
		if r.Op == "unlink" && r.Kept {
			unlinked[strings.TrimPrefix(r.URI, "data://")] = true
		}
	}
	packs, _ := filepath.Glob(filepath.Join(e.state, "journal", "packs", "*"))
	objs, _ := filepath.Glob(filepath.Join(e.state, "journal", "objects", "*"))
	if len(packs) == 0 || len(objs) > 100 {
		t.Errorf("rm -rf of 300 different files: %d packs, %d object files; want packs doing most of it", len(packs), len(objs))
	}
	var damaged string
	for i := range 300 {
		name := fmt.Sprintf("burst/d%d/f%03d.txt", i%7, i)
		content := want[name]
		if !unlinked[name] {
			t.Errorf("%s has no kept unlink record", name)
		}
		if damaged == "" && len(packs) > 0 {
			// Flip a byte of this file's copy inside its pack.
			pack, err := os.ReadFile(packs[0])
			must(t, err)
			if k := bytes.Index(pack, []byte(content)); k >= 0 {
				pack[k+len(content)/2] ^= 0x20
				must(t, os.WriteFile(packs[0], pack, 0o600))
				damaged = name
				out, err := exec.Command(binPath, "revert", "-c", e.cfg, "data://"+name).CombinedOutput()
				if err == nil || !strings.Contains(string(out), "corrupt") || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
					t.Errorf("revert from a damaged pack: %v %q", err, out)
				}
				if _, err := os.Stat(e.b("data", name)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a refused revert changed the backing folder: %v", err)
				}
				continue
			}
		}
		if i%6 != 0 {
			continue // a revert is a process each: every sixth file
		}
		e.revert(t, "data://"+name)
		same(t, e.b("data", name), content, 0o640)
	}
	if damaged == "" {
		t.Error("no copy found inside a pack to damage")
	}
}

// TestJournalWriteOpens covers every way a write-open reaches the journal.
// The mount opens the file once, read-write and untruncated, lets the
// journal read it through that descriptor, and truncates after. Each open
// kind must be reverted to the exact bytes and mode. The caller's
// descriptor must keep the access mode it asked for. An O_DIRECT open
// takes the ordinary way (the journal opens the file itself) and is kept
// too.
func TestJournalWriteOpens(t *testing.T) {
	e := newEnv(t, "", src{slug: "data"})
	orig := map[string]string{}
	for _, name := range []string{"trunc", "inplace", "append", "rdonly-trunc", "direct"} {
		orig[name] = strings.Repeat("original "+name+" ", 600)[:4096]
		writeFile(t, e.b("data", name), orig[name], 0o640)
	}
	open := func(name string, flags int) *os.File {
		t.Helper()
		f, err := os.OpenFile(e.m("data", name), flags, 0)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		return f
	}

	f := open("trunc", os.O_WRONLY|os.O_TRUNC)
	if _, err := f.Read(make([]byte, 16)); !errors.Is(err, syscall.EBADF) {
		t.Errorf("read from a write-only descriptor: %v; want EBADF", err)
	}
	if _, err := f.WriteString("new\n"); err != nil {
		t.Fatal(err)
	}
	must(t, f.Close())
	if b, _ := os.ReadFile(e.b("data", "trunc")); string(b) != "new\n" {
		t.Errorf("O_TRUNC open left %q", b)
	}

	f = open("inplace", os.O_WRONLY)
	if _, err := f.WriteAt([]byte("XXXX"), 100); err != nil {
		t.Fatal(err)
	}
	must(t, f.Close())

	f = open("append", os.O_RDWR|os.O_APPEND)
	if _, err := f.WriteString("tail\n"); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 9)
	if _, err := f.ReadAt(b, 0); err != nil || string(b) != "original " {
		t.Errorf("read back from an O_RDWR descriptor: %q, %v", b, err)
	}
	must(t, f.Close())
	if b, _ := os.ReadFile(e.b("data", "append")); string(b) != orig["append"]+"tail\n" {
		t.Errorf("O_APPEND open wrote %q at the end; want the original and \"tail\\n\"", b[max(0, len(b)-16):])
	}

	f = open("rdonly-trunc", os.O_RDONLY|os.O_TRUNC)
	if _, err := f.Write([]byte("x")); !errors.Is(err, syscall.EBADF) {
		t.Errorf("write to a read-only descriptor: %v; want EBADF", err)
	}
	must(t, f.Close())
	if st, err := os.Stat(e.b("data", "rdonly-trunc")); err != nil || st.Size() != 0 {
		t.Errorf("O_RDONLY|O_TRUNC open: %v, %v; want it empty", st, err)
	}

	sh(t, `printf 'direct!' | dd of=`+e.m("data", "direct")+` bs=4096 conv=sync,notrunc oflag=direct status=none`)
	if b, _ := os.ReadFile(e.b("data", "direct")); !strings.HasPrefix(string(b), "direct!") {
		t.Errorf("O_DIRECT write left %q", b[:16])
	}

	for name, content := range orig {
		e.revert(t, "data://"+name)
		same(t, e.b("data", name), content, 0o640)
	}
}

// TestJournalKeepsAccessTimes: keeping a file is not a read of it, and
// neither is indexing it. An overwrite, a truncate and an unlink through
// the mount leave the access time of the backing file (or of its other
// name) as the same change on the backing folder leaves it, while the
// caller's own reads through a read-write open still stamp it, with
// passthrough and without; a file the index has read keeps its access
// time too. The access times start equal to the modification times, so
// relatime would stamp any read.
func TestJournalKeepsAccessTimes(t *testing.T) {
	for _, pass := range []bool{true, false} {
		t.Run(fmt.Sprintf("passthrough=%v", pass), func(t *testing.T) {
			e := newEnv(t, fmt.Sprintf("[mount]\npassthrough = %v\n", pass), src{slug: "data"})
			old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
			atime := func(p string) time.Time {
				var st syscall.Stat_t
				must(t, syscall.Stat(p, &st))
				return time.Unix(st.Atim.Unix())
			}
			for _, base := range []string{e.b("data"), t.TempDir()} {
				for _, name := range []string{"over", "trunc", "linked", "rw"} {
					writeFile(t, filepath.Join(base, name), strings.Repeat(name, 1000), 0o644)
				}
				must(t, os.Link(filepath.Join(base, "linked"), filepath.Join(base, "other-name")))
				for _, name := range []string{"over", "trunc", "other-name", "rw"} {
					must(t, os.Chtimes(filepath.Join(base, name), old, old))
				}
				dir := base
				if base == e.b("data") {
					dir = e.m("data")
				}
				must(t, os.WriteFile(filepath.Join(dir, "over"), []byte("new"), 0o644))
				must(t, os.Truncate(filepath.Join(dir, "trunc"), 2))
				must(t, os.Remove(filepath.Join(dir, "linked")))
				f, err := os.OpenFile(filepath.Join(dir, "rw"), os.O_RDWR, 0)
				must(t, err)
				if _, err := f.Read(make([]byte, 10)); err != nil {
					t.Fatal(err)
				}
				must(t, f.Close())
				where := "through the mount"
				if dir == base {
					where = "on a plain folder"
				}
				for _, name := range []string{"over", "trunc", "other-name"} {
					if a := atime(filepath.Join(base, name)); !a.Equal(old) {
						t.Errorf("%s %s: access time %v; want it left at %v", where, name, a, old)
					}
				}
				if a := atime(filepath.Join(base, "rw")); a.Equal(old) {
					t.Errorf("%s: a read through a read-write open left the access time at %v", where, a)
				}
			}
			for _, name := range []string{"over", "trunc", "linked"} {
				if len(e.history(t, "data://"+name)) == 0 {
					t.Errorf("data://%s: no record", name)
				}
			}
			// The index reads what changes (here, written behind the
			// mount) and must not stamp it either.
			idx := e.b("data", "indexed.txt")
			writeFile(t, idx, "the zebrafinch atime canary\n", 0o644)
			must(t, os.Chtimes(idx, old, old))
			e.found(t, "zebrafinch", "data://indexed.txt:1:")
			for _, name := range []string{"over", "trunc", "other-name", "indexed.txt"} {
				if a := atime(e.b("data", name)); !a.Equal(old) {
					t.Errorf("%s: access time %v once indexed; want it left at %v", name, a, old)
				}
			}
		})
	}
}

// [journal] max_records bounds the records kept: past it the oldest go,
// history says so in one line (the text, .neuralis/history, and beside
// --json, whose output stays the records alone), and revert of what is
// kept works as before, across a restart too.
func TestJournalRecordBound(t *testing.T) {
	e := newEnv(t, "[journal]\nmax_records = 20\n", src{slug: "data"})
	writeFile(t, e.b("data", "keep.txt"), "v0\n", 0o644)
	for i := 1; i <= 60; i++ {
		must(t, os.WriteFile(e.m("data", "keep.txt"), fmt.Appendf(nil, "v%d\n", i), 0o644))
	}
	check := func(when string) []record {
		cmd := exec.Command(binPath, "history", "--json", "-c", e.cfg, "data://keep.txt")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: history --json: %v %s", when, err, stderr.String())
		}
		var recs []record
		if err := json.Unmarshal(out, &recs); err != nil {
			t.Fatalf("%s: history --json is not the records alone: %v\n%s", when, err, out)
		}
		if len(recs) == 0 || len(recs) > 20 {
			t.Errorf("%s: %d records of 60 changes kept; the bound is 20", when, len(recs))
		}
		const note = "# older records were dropped: the journal keeps its newest 20 (max_records); "
		if !strings.HasPrefix(stderr.String(), note) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%s: history --json said %q beside the records; want one line %q…", when, stderr.String(), note)
		}
		text, err := exec.Command(binPath, "history", "-c", e.cfg, "data://keep.txt").Output()
		lines := strings.Split(strings.TrimSpace(string(text)), "\n")
		if err != nil || len(lines) != len(recs)+1 || !strings.HasPrefix(lines[len(lines)-1], note) {
			t.Errorf("%s: history: %v\n%s", when, err, text)
		}
		mnt, err := os.ReadFile(filepath.Join(e.mnt, ".neuralis", "history", "data", "keep.txt"))
		if err != nil || string(mnt) != string(text) {
			t.Errorf("%s: .neuralis/history: %v\n%s\nwant what history printed:\n%s", when, err, mnt, text)
		}
		return recs
	}
	recs := check("running")
	// Another uid learns that records were dropped, not how many or up
	// to when: the count moved with changes to files hidden from it (a
	// red-team pass).
	if out, err := run(t, 1001, binPath+" history -c "+e.cfg+" data://keep.txt"); err != nil ||
		!strings.Contains(out, "# older records were dropped: the journal keeps its newest 20 (max_records)\n") || strings.Contains(out, "are gone") {
		t.Errorf("history as uid 1001: %v\n%s", err, out)
	}
	// The oldest record kept (of the 41st write) restores what was there
	// before it, and a revert of that revert brings v60 back.
	if len(recs) == 20 {
		e.revert(t, "data://keep.txt", "--to", recs[19].ID)
		same(t, e.b("data", "keep.txt"), "v40\n", 0o644)
		e.revert(t, "data://keep.txt")
		same(t, e.b("data", "keep.txt"), "v60\n", 0o644)
	}
	recs = check("before a restart")
	e.stop()
	e.start()
	again := check("after a restart")
	if fmt.Sprint(again) != fmt.Sprint(recs) {
		t.Errorf("history after a restart:\n%v\nbefore:\n%v", again, recs)
	}
	e.revert(t, "data://keep.txt")
	same(t, e.b("data", "keep.txt"), "v40\n", 0o644)
}

// shownJournalIDs returns how history shows a record id stored in the
// journal in dir: its 64 bits (the sequence number in 48, the hex suffix
// in 16) enciphered with triple DES under the key in dir/idkey, as 16 hex
// digits (internal/journal/ids.go).
func shownJournalIDs(t *testing.T, dir string) func(string) string {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(dir, "idkey"))
	must(t, err)
	c, err := des.NewTripleDESCipher(key)
	must(t, err)
	return func(id string) string {
		seq, suffix, _ := strings.Cut(id, "-")
		n, err1 := strconv.ParseUint(seq, 10, 48)
		s, err2 := strconv.ParseUint(suffix, 16, 16)
		if err1 != nil || err2 != nil {
			t.Fatalf("stored id %q", id)
		}
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], n<<16|s)
		c.Encrypt(b[:], b[:])
		return hex.EncodeToString(b[:])
	}
}
