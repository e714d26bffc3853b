package gitfs

import (
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// writeLoose writes a loose object into the repository wt whose header
// says typ and size and whose content is prefix and then zero bytes, n in
// all, and returns its id (the hash git would give it when n == size).
func writeLoose(t *testing.T, wt string, typ plumbing.ObjectType, size int64, prefix string, n int64) plumbing.Hash {
	t.Helper()
	zeros := make([]byte, 1<<20)
	content := func(w interface{ Write([]byte) (int, error) }) {
		w.Write([]byte(prefix))
		for left := n - int64(len(prefix)); left > 0; {
			k := min(left, int64(len(zeros)))
			w.Write(zeros[:k])
			left -= k
		}
	}
	hs := plumbing.NewHasher(typ, size)
	content(&hs)
	h := hs.Sum()
	p := filepath.Join(wt, ".git", "objects", h.String()[:2], h.String()[2:])
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw, _ := zlib.NewWriterLevel(f, zlib.BestSpeed)
	fmt.Fprintf(zw, "%s %d\x00", typ, size)
	content(zw)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return h
}

// A commit or tree that inflates to far more than any real one (a
// compressed "zip bomb" an agent can make in its own repository) is
// refused from its header, before its content is inflated, and so is one
// whose content runs past what its header says; .status answers with an
// error instead of reading hundreds of MiB. Before, a 400 MB commit of
// zeros, 1.7 MB on disk, cost one .status 1.9 GB.
func TestStatusRefusesObjectsPastTheBound(t *testing.T) {
	const big = 64 << 20 // past maxObject, under the old 512 MiB bound
	for _, tt := range []struct {
		name   string
		head   func(t *testing.T, wt string) plumbing.Hash
		tooBig bool
	}{
		{"commit", func(t *testing.T, wt string) plumbing.Hash {
			return writeLoose(t, wt, plumbing.CommitObject, big, "", big)
		}, true},
		{"packed commit", func(t *testing.T, wt string) plumbing.Hash {
			h := writeLoose(t, wt, plumbing.CommitObject, big, "", big)
			cmd := exec.Command("git", "pack-objects", "-q", ".git/objects/pack/pack")
			cmd.Dir, cmd.Stdin = wt, strings.NewReader(h.String()+"\n")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git pack-objects: %v\n%s", err, out)
			}
			os.Remove(filepath.Join(wt, ".git", "objects", h.String()[:2], h.String()[2:]))
			return h
		}, true},
		{"commit in an alternate", func(t *testing.T, wt string) plumbing.Hash {
			h := writeLoose(t, wt, plumbing.CommitObject, big, "", big)
			// go-git reads a relative alternate from the top of
			// Options.Within, and Open checks it where git would have it.
			rel := filepath.Join(h.String()[:2], h.String()[2:])
			for _, d := range []string{"alt/objects/" + h.String()[:2], ".git/objects/alt/objects"} {
				if err := os.MkdirAll(filepath.Join(wt, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Rename(filepath.Join(wt, ".git", "objects", rel), filepath.Join(wt, "alt", "objects", rel)); err != nil {
				t.Fatal(err)
			}
			write(t, wt, ".git/objects/info/alternates", "alt/objects\n")
			return h
		}, true},
		{"header that lies", func(t *testing.T, wt string) plumbing.Hash {
			return writeLoose(t, wt, plumbing.CommitObject, 100, "", big)
		}, false},
		{"tree of a commit", func(t *testing.T, wt string) plumbing.Hash {
			tree := writeLoose(t, wt, plumbing.TreeObject, big, "", big)
			c := fmt.Sprintf("tree %s\nauthor a <a@b> 1 +0000\ncommitter a <a@b> 1 +0000\n\nm\n", tree)
			return writeLoose(t, wt, plumbing.CommitObject, int64(len(c)), c, int64(len(c)))
		}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wt := newRepo(t)
			write(t, wt, "a.txt", "a\n")
			h := tt.head(t, wt)
			write(t, wt, ".git/refs/heads/main", h.String()+"\n")
			r, err := Open(wt, Options{Within: []string{wt}})
			if err != nil {
				t.Fatal(err)
			}
			out, alloc, err := statusAlloc(r)
			if err == nil {
				t.Fatalf("Status = %q, nil; want an error", out)
			}
			if tt.tooBig && !errors.Is(err, ErrObjectTooLarge) {
				t.Errorf("Status: %v; want ErrObjectTooLarge", err)
			}
			if alloc > 8<<20 {
				t.Errorf("Status allocated %d MiB to refuse it (%v)", alloc>>20, err)
			}
		})
	}
}

// readLoose checks the type and size from the header: an object of
// another type is not found (as go-git answers), a blob may be as large
// as maxLooseObject, anything else maxObject.
func TestReadLooseBounds(t *testing.T) {
	wt := newRepo(t)
	blob := writeLoose(t, wt, plumbing.BlobObject, 20<<20, "", 20<<20)
	open := func() *os.File {
		f, err := os.Open(filepath.Join(wt, ".git", "objects", blob.String()[:2], blob.String()[2:]))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	if o, err := readLoose(open(), blob, plumbing.BlobObject); err != nil || o.Size() != 20<<20 {
		t.Errorf("a 20 MiB blob asked for as a blob: %v", err)
	}
	if _, err := readLoose(open(), blob, plumbing.CommitObject); !errors.Is(err, plumbing.ErrObjectNotFound) {
		t.Errorf("a blob asked for as a commit: %v; want not found", err)
	}
	if _, err := readLoose(open(), blob, plumbing.AnyObject); !errors.Is(err, ErrObjectTooLarge) || !strings.Contains(err.Error(), "blob") {
		t.Errorf("a 20 MiB blob asked for as any object: %v; want ErrObjectTooLarge", err)
	}
}

// statusAlloc returns r's Status of its top, and the bytes allocated
// while it ran.
func statusAlloc(r *Repo) (out []byte, alloc uint64, err error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	out, err = r.Status(context.Background(), "", nil)
	runtime.ReadMemStats(&after)
	return out, after.TotalAlloc - before.TotalAlloc, err
}
