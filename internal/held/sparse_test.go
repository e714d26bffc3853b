package held

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// copySparse copies content exactly, gives the hash all of it, and
// writes no hole: data at the start, in the middle and at the end, holes
// between and after, a file that is all hole, an empty one, a dense one.
func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	const mib = 1 << 20
	cases := []struct {
		name string
		size int64
		data map[int64]string // offset → bytes written there
	}{
		{"empty", 0, nil},
		{"dense", 3*mib + 5, map[int64]string{0: string(bytes.Repeat([]byte("d"), 3*mib+5))}},
		{"all hole", 64 * mib, nil},
		{"holes between and after", 64 * mib, map[int64]string{0: "head", 8 * mib: "middle", 20*mib + 3: "unaligned"}},
		{"data at the end", 32*mib + 4, map[int64]string{32 * mib: "tail"}},
	}
	for i, c := range cases {
		src := filepath.Join(dir, "src"+string(rune('a'+i)))
		f, err := os.Create(src)
		if err != nil {
			t.Fatal(err)
		}
		for off, d := range c.data {
			if _, err := f.WriteAt([]byte(d), off); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Truncate(c.size); err != nil {
			t.Fatal(err)
		}
		f.Close()
		in, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dir, "dst"+string(rune('a'+i))))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		n, err := copySparse(out, in, h)
		in.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want, _ := os.ReadFile(src)
		got, _ := os.ReadFile(out.Name())
		sum := sha256.Sum256(want)
		if n != c.size || !bytes.Equal(got, want) || !bytes.Equal(h.Sum(nil), sum[:]) {
			t.Errorf("%s: copied %d bytes of %d, content equal %v, digest equal %v", c.name, n, c.size, bytes.Equal(got, want), bytes.Equal(h.Sum(nil), sum[:]))
		}
		var st, sst unix.Stat_t
		if err := unix.Fstat(int(out.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		unix.Stat(src, &sst)
		// Blocks are 512 bytes; allow the copy a little more than the
		// source (a filesystem may round extents up).
		if st.Blocks > sst.Blocks+16 {
			t.Errorf("%s: the copy takes %d blocks, the source %d", c.name, st.Blocks, sst.Blocks)
		}
		// The descriptor ends where the file does (a writer after it
		// appends).
		if off, _ := out.Seek(0, 1); off != c.size {
			t.Errorf("%s: the copy's offset is %d, want %d", c.name, off, c.size)
		}
		out.Close()
	}
}

// Changes reads the digests of large held files before it takes the
// layer's lock (warmDigests), so that a review list holds up the
// principal's writes for its small files only: a large file's digest is
// remembered once the file is quiet, a small file's is left for Changes,
// and the ids are the same as when every digest is read under the lock.
func TestWarmDigestsBeforeTheLock(t *testing.T) {
	s, lower, _ := setup(t)
	l, err := s.Ensure("agent", "d")
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), 2<<20)
	write(t, l, lower, "a.txt", "changed\n")
	write(t, l, lower, "big.bin", string(big)) // past the store's bound of 1 MiB: last
	l.warmDigests()
	l.memoMu.Lock()
	_, early := l.memo["big.bin"]
	l.memoMu.Unlock()
	if early {
		t.Error("a digest read within memoQuiet of the file's change was remembered")
	}
	time.Sleep(memoQuiet + 100*time.Millisecond)
	l.warmDigests()
	l.memoMu.Lock()
	m, ok := l.memo["big.bin"]
	_, small := l.memo["a.txt"]
	l.memoMu.Unlock()
	sum := sha256.Sum256(big)
	if !ok || m.digest != "sha256:"+hex.EncodeToString(sum[:]) || small {
		t.Errorf("remembered: big.bin %v (%s), a.txt %v; want big.bin's digest alone", ok, m.digest, small)
	}
	ids := func() []string {
		var out []string
		for _, c := range l.Changes(lower) {
			out = append(out, c.ID)
		}
		return out
	}
	warm := ids()
	l.memoMu.Lock()
	clear(l.memo)
	l.memoMu.Unlock()
	if cold := ids(); !slices.Equal(warm, cold) || len(warm) != 2 {
		t.Errorf("ids with remembered digests %v, read afresh %v", warm, cold)
	}
}
