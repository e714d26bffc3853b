package held

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/neuralis/neuralisfs/mounts"
)

// A held change's id is keyed with a secret of the store: the same
// change held in another store has another id, so an id says nothing a
// guess of the held content could be tested against (an append to a
// write-only file copies up content the principal could not read, and
// the plain hash it was let it recover a PIN offline). The key is kept:
// the store opened again gives the same id.
func TestChangeIDsAreKeyed(t *testing.T) {
	ids := func(s *Store, lower string) string {
		t.Helper()
		r, err := mounts.OpenRoot(lower)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		l, err := s.Ensure("agent", "d")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := l.upper.m["a.txt"]; !ok {
			write(t, l, r, "a.txt", "4821\nx\n")
		}
		cs := l.Changes(r)
		if len(cs) != 1 {
			t.Fatalf("changes: %+v", cs)
		}
		return cs[0].ID
	}
	s1, _, back1 := setup(t)
	s2, _, back2 := setup(t)
	id1, id2 := ids(s1, back1), ids(s2, back2)
	if id1 == id2 {
		t.Errorf("the same change has the same id %s in two stores", id1)
	}
	dir := s1.dir
	s1.Close()
	s1again, err := Open(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s1again.Close()
	if again := ids(s1again, back1); again != id1 {
		t.Errorf("after the store is opened again the id is %s; it was %s", again, id1)
	}
	if st, err := os.Stat(filepath.Join(dir, idKeyName)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the key: %v, %v", st, err)
	}
	s1again.Close()
	if err := os.WriteFile(filepath.Join(dir, idKeyName), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, 1<<20, nil); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, idKeyName)) {
		t.Errorf("Open with a damaged key: %v; want an error naming it", err)
	}
}

// Names that are not UTF-8 are bytes in the records too: after the
// store is opened again a held delete of z\xff is a delete of z\xff,
// not of z\uFFFD (a file beside it the principal never touched, which
// approving it removed), and a held file n\xfe is itself.
func TestNamesThatAreNotUTF8SurviveAReopen(t *testing.T) {
	s, r, back := setup(t)
	for _, n := range []string{"z\xff", "z\uFFFD"} {
		if err := os.WriteFile(filepath.Join(back, n), []byte("same\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := s.Ensure("agent", "d")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Remove(r, "z\xff", false); err != nil {
		t.Fatal(err)
	}
	write(t, l, r, "n\xfe", "held\n")
	before := l.Changes(r)
	s2 := reopen(t, s)
	l2 := s2.Get("agent", "d")
	if l2 == nil {
		t.Fatal("the layer is gone after the reopen")
	}
	after := l2.Changes(r)
	got := map[string]string{}
	for _, c := range after {
		got[c.Path] = c.Op
	}
	if len(after) != 2 || got["z\xff"] != "delete" || got["n\xfe"] != "create" {
		t.Fatalf("after the reopen: %q; before: %+v", got, before)
	}
	for i := range after {
		if after[i].ID != before[i].ID || after[i].Path != before[i].Path {
			t.Errorf("change %d was %s %q, is %s %q", i, before[i].ID, before[i].Path, after[i].ID, after[i].Path)
		}
	}
	for _, c := range after {
		if c.Path == "z\xff" {
			if err := l2.Apply(r, c, Hooks{}, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(back, "z\uFFFD")); err != nil {
		t.Errorf("approving the delete of z\\xff removed z\\uFFFD: %v", err)
	}
	if _, err := os.Stat(filepath.Join(back, "z\xff")); err == nil {
		t.Errorf("approving the delete of z\\xff left it")
	}
}

// A principal at its bound through records alone (many empty files)
// gets its room back when its changes are rejected (or approved), not
// only at a restart.
func TestRejectGivesRecordsRoomBack(t *testing.T) {
	s, r, _ := setup(t)
	s.SetMaxBytes(64 << 10)
	l, err := s.Ensure("agent", "d")
	if err != nil {
		t.Fatal(err)
	}
	// In one folder: rejecting it is one record.
	if err := makeDir(l, r, "fill"); err != nil {
		t.Fatal(err)
	}
	n := 0
	for ; n < 100000; n++ {
		if err := makeFile(l, r, fmt.Sprintf("fill/f%06d-%s", n, strings.Repeat("x", 100))); err != nil {
			if !errors.Is(err, ErrQuota) {
				t.Fatal(err)
			}
			break
		}
	}
	if s.CheckQuota("agent") == nil {
		t.Fatalf("%d files made and the bound is not reached", n)
	}
	for _, c := range l.Changes(r) {
		if err := l.Discard(r, c); err != nil {
			t.Fatal(err)
		}
	}
	l.PruneUntouched()
	if err := s.CheckQuota("agent"); err != nil {
		t.Errorf("after rejecting all %d files the principal is still at its bound: %v", n, err)
	}
	if err := makeFile(l, r, "again"); err != nil {
		t.Errorf("a new held file after the rejection: %v", err)
	}
}

// A POSIX ACL shows in a diff as getfacl's short form, so a reviewer
// reads whom it grants what (an agent's default ACL on a folder made
// every file the owner later wrote there world-writable, and the diff
// said "44 bytes sha256:…").
func TestACLsShowAsText(t *testing.T) {
	acl := []byte{2, 0, 0, 0}
	for _, e := range [][3]uint32{{1, 7, 0xffffffff}, {2, 6, 1001}, {4, 5, 0xffffffff}, {0x10, 7, 0xffffffff}, {0x20, 4, 0xffffffff}} {
		acl = binary.LittleEndian.AppendUint16(acl, uint16(e[0]))
		acl = binary.LittleEndian.AppendUint16(acl, uint16(e[1]))
		acl = binary.LittleEndian.AppendUint32(acl, e[2])
	}
	got, ok := aclText("system.posix_acl_default", acl)
	if want := `"user::rwx,user:1001:rw-,group::r-x,mask::rwx,other::r--"`; !ok || got != want {
		t.Errorf("aclText = %s, %v; want %s", got, ok, want)
	}
	if _, ok := aclText("user.x", acl); ok {
		t.Errorf("an attribute that is no ACL shown as one")
	}
	if _, ok := aclText("system.posix_acl_access", acl[:7]); ok {
		t.Errorf("a torn ACL shown as one")
	}
}

// A held removal of a backing name is its records: when they cannot be
// written (state_dir full) the removal fails and changes nothing, and no
// torn line is left. Before, rm answered success, the name vanished from
// the principal's view, and a restart brought the file back.
func TestRemoveFailsWhenItsRecordCannotBeWritten(t *testing.T) {
	s, r, _ := setup(t)
	l, err := s.Ensure("agent", "d")
	if err != nil {
		t.Fatal(err)
	}
	meta := l.meta
	ro, err := os.Open(meta.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	l.mu.Lock()
	l.meta = ro // every write fails, as on a full file system
	l.mu.Unlock()
	if err := l.Remove(r, "a.txt", false); err == nil {
		t.Errorf("a removal whose records could not be written succeeded")
	}
	if w := l.Where("a.txt"); w != Lower {
		t.Errorf("after the failed removal a.txt is %v, want the backing file", w)
	}
	l.mu.Lock()
	l.meta = meta
	l.mu.Unlock()
	if err := l.Remove(r, "a.txt", false); err != nil {
		t.Fatalf("the removal once records can be written: %v", err)
	}
	s2 := reopen(t, s)
	if w := s2.Get("agent", "d").Where("a.txt"); w != Absent {
		t.Errorf("after a reopen a.txt is %v, want removed", w)
	}
}

// reopen closes s and opens its folder again, as a restart does; the
// store is closed when the test ends.
func reopen(t *testing.T, s *Store) *Store {
	t.Helper()
	s.Close()
	s2, err := Open(s.dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Close)
	return s2
}
