package journal

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkSave journals a new content each time (the common case: a file
// changed since it was last saved), and a content already stored.
func BenchmarkSave(b *testing.B) {
	for _, n := range []int{1 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("new/%dKiB", n>>10), func(b *testing.B) {
			j := openJournal(b, Options{MaxBytes: 64 << 20})
			data := pattern(n, 1)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				binary.LittleEndian.PutUint64(data, uint64(i))
				if err := j.Save(ev("open", "data://bench"), 0o644, int64(n), source(data, nil)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("same/%dKiB", n>>10), func(b *testing.B) {
			j := openJournal(b, Options{})
			data := pattern(n, 2)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if err := j.Save(ev("open", "data://bench"), 0o644, int64(n), source(data, nil)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkContent reads a saved 1 MiB file back, re-hashing it.
func BenchmarkContent(b *testing.B) {
	j := openJournal(b, Options{})
	data := pattern(1<<20, 3)
	r := save(b, j, "open", "data://bench", data)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		rc, err := j.Content(r)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			b.Fatal(err)
		}
		rc.Close()
	}
}

// BenchmarkRevert is the journal's part of reverting a 1 MiB file: Plan
// (which re-hashes the entry) and reading the content.
func BenchmarkRevert(b *testing.B) {
	j := openJournal(b, Options{})
	data := pattern(1<<20, 4)
	save(b, j, "open", "data://bench", data)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		p, err := j.Plan("data://bench", "")
		if err != nil {
			b.Fatal(err)
		}
		rc, err := j.Content(p.Record)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			b.Fatal(err)
		}
		rc.Close()
	}
}

// BenchmarkBaselineWriteFsync is the reference for Save: what writing the
// file itself costs (create, write, fsync, close) on the same disk.
func BenchmarkBaselineWriteFsync(b *testing.B) {
	for _, n := range []int{1 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
			dir := b.TempDir()
			data := pattern(n, 5)
			b.SetBytes(int64(n))
			for i := 0; b.Loop(); i++ {
				f, err := os.Create(filepath.Join(dir, strconv.Itoa(i%64)))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := f.Write(data); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}

// BenchmarkCreated journals file creations, as an untar through the mount
// does: the record is written at once and fsynced within flushDelay.
func BenchmarkCreated(b *testing.B) {
	j := openJournal(b, Options{})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := j.Created(ev("create", "data://untar/f"+strconv.Itoa(i))); err != nil {
			b.Fatal(err)
		}
	}
}
