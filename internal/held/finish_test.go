package held

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
)

// killedChild, set in the environment, makes TestApprovalKilledAfterLanding
// the process that approves and dies: its folder and the unit to approve.
const killedChild = "NEURALISFS_HELD_KILLED_CHILD"

// A daemon killed after an approval landed a unit in the backing files
// and before the layer forgot it left the unit landed and held at once;
// its backing files had moved from its base, so the next approval
// refused it as a conflict. The next start now finds that it landed and
// forgets it, as the approval would have; a unit killed before it landed
// stays held and approves as before. The kill is real: a child process
// approves and exits (no deferred function runs) from inside the
// approval, at its first folder fsync, which comes after the landing
// and before the forgetting.
func TestApprovalKilledAfterLanding(t *testing.T) {
	if v := os.Getenv(killedChild); v != "" {
		dir, path, _ := strings.Cut(v, ":")
		s, err := Open(filepath.Join(dir, "held"), 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		lower, err := mounts.OpenRoot(filepath.Join(dir, "back"))
		if err != nil {
			t.Fatal(err)
		}
		l, _ := s.Ensure("agent", "d")
		fsyncDir = func(int) error { os.Exit(3); return nil }
		for _, c := range l.Changes(lower) {
			if c.Path == path {
				l.Apply(lower, c, Hooks{}, false)
			}
		}
		t.Fatalf("%s was not approved", path)
	}

	for _, tc := range []struct {
		name, path string
		landed     map[string]string // backing files after the kill ("" absent)
	}{
		{"a file replaced", "a.txt", map[string]string{"a.txt": "new a\n"}},
		{"a file made", "d/e/new.txt", map[string]string{"d/e/new.txt": "new\n"}},
		{"a file removed", "gone.txt", map[string]string{"gone.txt": ""}},
		{"a file renamed", "d/b2.txt", map[string]string{"d/b2.txt": "b\n", "d/b.txt": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, lower, back := setup(t)
			l, _ := s.Ensure("agent", "d")
			write(t, l, lower, "a.txt", "new a\n")
			write(t, l, lower, "d/e/new.txt", "new\n")
			if err := l.Remove(lower, "gone.txt", false); err != nil {
				t.Fatal(err)
			}
			if err := l.Rename(lower, "d/b.txt", "d/b2.txt", 0); err != nil {
				t.Fatal(err)
			}
			before := ops(l.Changes(lower))
			s.Close()

			cmd := exec.Command(os.Args[0], "-test.run=^TestApprovalKilledAfterLanding$")
			cmd.Env = append(os.Environ(), killedChild+"="+filepath.Dir(back)+":"+tc.path)
			out, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
				t.Fatalf("the approving child did not die in the approval: %v\n%s", err, out)
			}
			for p, want := range tc.landed {
				b, err := os.ReadFile(filepath.Join(back, p))
				if got := string(b); want == "" && err == nil || want != "" && got != want {
					t.Fatalf("after the kill the backing %s is %q (%v): the unit had not landed", p, got, err)
				}
			}

			s2, err := Open(filepath.Join(filepath.Dir(back), "held"), 1<<20, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			l2, _ := s2.Ensure("agent", "d")
			if len(l2.approving) != 1 {
				t.Fatalf("the killed approval left %v recorded; want %s", l2.approving, tc.path)
			}
			if err := l2.RecoverAside(lower); err != nil {
				t.Fatal(err)
			}
			want := maps.Clone(before)
			maps.DeleteFunc(want, func(k, _ string) bool { return k == tc.path || strings.HasSuffix(k, "->"+tc.path) })
			if got := ops(l2.Changes(lower)); len(want) != len(before)-1 || !maps.Equal(got, want) {
				t.Errorf("held after the start: %v; want %v (before the approval: %v)", got, want, before)
			}
			if len(l2.approving) != 0 {
				t.Errorf("still recorded after the start: %v", l2.approving)
			}
			// The rest approves without a conflict, and every file is
			// as the agent left it.
			staged, _, err := l2.Stage(lower, l2.Changes(lower), false)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range staged {
				if err := l2.Apply(lower, c, Hooks{}, false); err != nil {
					t.Errorf("approving %s after the start: %v", c.Path, err)
				}
			}
			for p, want := range map[string]string{"a.txt": "new a\n", "d/e/new.txt": "new\n", "gone.txt": "", "d/b.txt": "", "d/b2.txt": "b\n", "d/e/c.txt": "c\n"} {
				b, err := os.ReadFile(filepath.Join(back, p))
				if got := string(b); want == "" && err == nil || want != "" && got != want {
					t.Errorf("backing %s = %q (%v); want %q", p, got, err, want)
				}
			}
		})
	}
}

// A unit whose approval was killed before it landed stays held: the
// record alone forgets nothing.
func TestApprovalRecordedButNotLandedStaysHeld(t *testing.T) {
	s, lower, back := setup(t)
	l, _ := s.Ensure("agent", "d")
	write(t, l, lower, "a.txt", "new a\n")
	l.mu.Lock()
	l.log(record{K: "approving", P: "a.txt"})
	l.mu.Unlock()
	s.Close()
	s2, err := Open(filepath.Join(filepath.Dir(back), "held"), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	l2, _ := s2.Ensure("agent", "d")
	if err := l2.RecoverAside(lower); err != nil {
		t.Fatal(err)
	}
	if got := ops(l2.Changes(lower)); len(got) != 1 || got["a.txt"] == "" {
		t.Errorf("held after the start: %v", got)
	}
	if len(l2.approving) != 0 {
		t.Errorf("still recorded: %v", l2.approving)
	}
	if b, _ := os.ReadFile(filepath.Join(back, "a.txt")); string(b) != "a\n" {
		t.Errorf("backing a.txt = %q", b)
	}
}

// BenchmarkApplyFile: approving one held file unit — landing it (a
// write beside its name, fsync, rename), syncing its folder, recording
// it as being approved and forgetting it — among 1,000 held files.
func BenchmarkApplyFile(b *testing.B) {
	s, lower, _ := setupTB(b)
	l, err := s.Ensure("agent", "d")
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	add := func() {
		rel := fmt.Sprintf("d/f%06d", i)
		i++
		if err := makeFile(l, lower, rel); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(l.dir, "tree", rel), []byte("held content\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		l.Wrote(rel)
	}
	for range 1000 {
		add()
	}
	for b.Loop() {
		b.StopTimer()
		add()
		var c Change
		for _, x := range l.Changes(lower) {
			if x.Path == fmt.Sprintf("d/f%06d", i-1) {
				c = x
			}
		}
		b.StartTimer()
		if err := l.Apply(lower, c, Hooks{}, false); err != nil {
			b.Fatal(err)
		}
	}
}

// A diff shows what its unit's id names, or says it may not: the
// principal rewrote a file between two contents of one length in a loop,
// and a diff printed the harmless one under the id of the other, whose
// approval landed the other (a red-team pass). StillShows is false when
// a name moved while its diff was read, also when it moved back (the
// id then matches again, but what was shown is not what it names), and
// true for a unit left alone, special files included.
func TestStillShowsWhatTheDiffShowed(t *testing.T) {
	s, lower, _ := setupTB(t)
	l, err := s.Ensure("agent", "d")
	if err != nil {
		t.Fatal(err)
	}
	write(t, l, lower, "run.sh", "rm -rf /\n\n")
	if err := l.Make(lower, "pipe", func(up *mounts.Root) error {
		_, err := up.Mknod("pipe", unix.S_IFIFO|0o644, 0, -1, -1)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	byPath := func() map[string]Change {
		m := map[string]Change{}
		for _, c := range l.Changes(lower) {
			m[c.Path] = c
		}
		return m
	}
	cs := byPath()
	bad, pipe := cs["run.sh"], cs["pipe"]
	for _, c := range []Change{bad, pipe} {
		if _, sh := l.DiffShown(lower, c, nil, nil); !l.StillShows(c, sh) {
			t.Errorf("%s, left alone: StillShows false", c.Path)
		}
	}
	// The diff names the kind of special file that lands.
	if text := l.Diff(lower, pipe, nil, nil); !strings.Contains(text, "absent -> fifo") {
		t.Errorf("a held FIFO's diff:\n%s", text)
	}
	held := filepath.Join(l.dir, "tree", "run.sh")
	if err := os.WriteFile(held, []byte("echo good\n"), 0o644); err != nil { // what the reviewer reads
		t.Fatal(err)
	}
	text, sh := l.DiffShown(lower, bad, nil, nil)
	if !strings.Contains(text, "+echo good") {
		t.Fatalf("diff:\n%s", text)
	}
	if err := os.WriteFile(held, []byte("rm -rf /\n\n"), 0o644); err != nil { // and back
		t.Fatal(err)
	}
	if l.StillShows(bad, sh) {
		t.Error("the diff showed echo good under the id of rm -rf /, and StillShows said it still shows it")
	}
	if _, sh := l.DiffShown(lower, bad, nil, nil); !l.StillShows(bad, sh) {
		t.Error("read again with the id's content: StillShows false")
	}
}
