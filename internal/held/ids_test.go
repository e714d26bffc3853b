package held

import (
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
