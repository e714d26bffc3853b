package gitfs

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// writeDeltaPack writes into the object store objects a pack of a commit of
// baseSize bytes (a tree line, then zeros) and, made from it by a delta,
// the commit target (an offset delta, or a reference delta when ref),
// indexes it with git index-pack, and returns target's id.
func writeDeltaPack(t *testing.T, objects string, baseSize int64, target string, ref bool) plumbing.Hash {
	t.Helper()
	var pack bytes.Buffer
	pack.WriteString("PACK\x00\x00\x00\x02\x00\x00\x00\x02")
	header := func(typ byte, size int64) {
		c := typ<<4 | byte(size&15)
		size >>= 4
		for size > 0 {
			pack.WriteByte(c | 0x80)
			c = byte(size & 0x7f)
			size >>= 7
		}
		pack.WriteByte(c)
	}
	deflate := func(write func(w *zlib.Writer)) {
		zw, _ := zlib.NewWriterLevel(&pack, zlib.BestSpeed)
		write(zw)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The base.
	baseAt := int64(pack.Len())
	header(1, baseSize)
	zeros := make([]byte, 1<<20)
	prefix := "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n"
	hs := plumbing.NewHasher(plumbing.CommitObject, baseSize)
	deflate(func(w *zlib.Writer) {
		for _, out := range []interface{ Write([]byte) (int, error) }{w, &hs} {
			out.Write([]byte(prefix))
			for left := baseSize - int64(len(prefix)); left > 0; left -= min(left, int64(len(zeros))) {
				out.Write(zeros[:min(left, int64(len(zeros)))])
			}
		}
	})
	baseID := hs.Sum()
	// The delta: sizes, then target inserted 127 bytes at a time.
	var delta bytes.Buffer
	varint := func(v int64) {
		for v >= 0x80 {
			delta.WriteByte(byte(v) | 0x80)
			v >>= 7
		}
		delta.WriteByte(byte(v))
	}
	varint(baseSize)
	varint(int64(len(target)))
	for s := target; s != ""; {
		k := min(len(s), 127)
		delta.WriteByte(byte(k))
		delta.WriteString(s[:k])
		s = s[k:]
	}
	at := int64(pack.Len())
	if ref {
		header(7, int64(delta.Len()))
		pack.Write(baseID[:])
	} else {
		header(6, int64(delta.Len()))
		rel := at - baseAt
		b := []byte{byte(rel & 0x7f)}
		for rel >>= 7; rel > 0; rel >>= 7 {
			rel--
			b = append([]byte{byte(0x80 | rel&0x7f)}, b...)
		}
		pack.Write(b)
	}
	deflate(func(w *zlib.Writer) { w.Write(delta.Bytes()) })
	sum := sha1.Sum(pack.Bytes())
	pack.Write(sum[:])
	path := filepath.Join(objects, "pack", "pack-"+hex.EncodeToString(sum[:])+".pack")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pack.Bytes(), 0o444); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "index-pack", path).CombinedOutput(); err != nil {
		t.Fatalf("git index-pack: %v\n%s", err, out)
	}
	return plumbing.ComputeHash(plumbing.CommitObject, []byte(target))
}

// A packed commit made by a delta from a base far larger than any real
// commit (a few hundred KiB in the pack) is refused before go-git
// inflates the base: the pack's size of the commit itself is small, so
// the check of that size alone let .status read the whole base, every
// time. The same commit made from a base of a real size reads.
func TestStatusRefusesADeltaOfAHugeBase(t *testing.T) {
	target := "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a <a@b> 1 +0000\ncommitter a <a@b> 1 +0000\n\nmade from a base\n"
	for _, tt := range []struct {
		name   string
		base   int64
		ref    bool
		alt    bool // the pack in an alternate object store
		tooBig bool
	}{
		{"offset delta of a huge base", 64 << 20, false, false, true},
		{"reference delta of a huge base", 64 << 20, true, false, true},
		{"offset delta of a huge base in an alternate", 64 << 20, false, true, true},
		{"offset delta of a small base", 4 << 10, false, false, false},
		{"reference delta of a small base", 4 << 10, true, false, false},
		{"offset delta of a small base in an alternate", 4 << 10, false, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wt := newRepo(t)
			writeLoose(t, wt, plumbing.TreeObject, 0, "", 0) // the empty tree
			objects := filepath.Join(wt, ".git", "objects")
			if tt.alt {
				// As in TestStatusRefusesObjectsPastTheBound: go-git
				// reads a relative alternate from the top of
				// Options.Within, and Open checks it where git would.
				objects = filepath.Join(wt, "alt", "objects")
				if err := os.MkdirAll(filepath.Join(wt, ".git/objects/alt/objects"), 0o755); err != nil {
					t.Fatal(err)
				}
				write(t, wt, ".git/objects/info/alternates", "alt/objects\n")
			}
			h := writeDeltaPack(t, objects, tt.base, target, tt.ref)
			write(t, wt, ".git/refs/heads/main", h.String()+"\n")
			if out, err := exec.Command("git", "--git-dir", filepath.Join(objects, ".."), "cat-file", "-p", h.String()).CombinedOutput(); !tt.alt && (err != nil || !strings.Contains(string(out), "made from a base")) {
				t.Fatalf("git reads the commit as %q (%v)", out, err)
			}
			r, err := Open(wt, Options{Within: []string{wt}})
			if err != nil {
				t.Fatal(err)
			}
			out, alloc, err := statusAlloc(r)
			if !tt.tooBig {
				if err != nil {
					t.Fatalf("Status of a commit made from a small base: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrObjectTooLarge) {
				t.Fatalf("Status = %q, %v; want ErrObjectTooLarge", out, err)
			}
			if alloc > 8<<20 {
				t.Errorf("Status allocated %d MiB to refuse it (%v)", alloc>>20, err)
			}
			// Asked again, from what the first walk kept.
			if _, _, err := statusAlloc(r); !errors.Is(err, ErrObjectTooLarge) {
				t.Errorf("Status again: %v; want ErrObjectTooLarge", err)
			}
		})
	}
}

// An index entry past 2 GiB (the large-offset table) and an index cut
// short are read as git writes them, or not at all.
func TestPackIdxLargeOffsets(t *testing.T) {
	h := plumbing.NewHash("0123456789abcdef0123456789abcdef01234567")
	var b bytes.Buffer
	b.Write([]byte{0xff, 't', 'O', 'c', 0, 0, 0, 2})
	for i := 0; i < 256; i++ {
		n := uint32(0)
		if i >= int(h[0]) {
			n = 1
		}
		b.Write([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	}
	b.Write(h[:])
	b.Write(make([]byte, 4))                // crc
	b.Write([]byte{0x80, 0, 0, 0})          // large offset 0
	b.Write([]byte{0, 0, 0, 1, 0, 0, 0, 5}) // 4 GiB + 5
	b.Write(make([]byte, 40))               // trailing hashes
	dir := t.TempDir()
	idx := filepath.Join(dir, "pack-x.idx")
	if err := os.WriteFile(idx, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	p := mapIdx(idx, filepath.Join(dir, "pack-x.pack"))
	if p == nil {
		t.Fatal("the index was not mapped")
	}
	if off, ok := p.find(h); !ok || off != 4<<30+5 {
		t.Errorf("find = %d, %v; want %d", off, ok, int64(4<<30+5))
	}
	if _, ok := p.find(plumbing.NewHash("0123456789abcdef0123456789abcdef01234568")); ok {
		t.Error("find of another id found it")
	}
	if err := os.WriteFile(idx, b.Bytes()[:8+256*4+10], 0o644); err != nil {
		t.Fatal(err)
	}
	if p := mapIdx(idx, ""); p != nil {
		t.Errorf("an index cut short was mapped (%d objects)", p.n)
	}
}
