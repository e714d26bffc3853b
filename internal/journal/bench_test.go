package journal

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// BenchmarkKeep is the daemon's hook in batched mode for a 4 KiB file: an
// overwrite (open with O_TRUNC) of a content stored a while ago, the same
// on a descriptor open for reading (File.Readable), an overwrite of a
// content not stored yet, and an unlink of a stored content. Keep gets an
// O_PATH descriptor, as from the daemon, and the publisher's work is
// waited for at the end. cpu-µs/op is the process's CPU time (every
// goroutine, the publisher's included) per Keep: what the daemon pays on a
// machine whose cores are all busy, as they are during `make bench` on 2.
func BenchmarkKeep(b *testing.B) {
	const n = 4 << 10
	run := func(b *testing.B, leaving, readable bool, prep func(i int) string) {
		j := openJournal(b, Options{Batched: true})
		// The content as stored a while ago (the steady state of a file
		// overwritten again and again: see settleTime).
		if err := j.Save(ev("open", "data://bench/old"), 0o644, n, source(pattern(n, 6), nil)); err != nil {
			b.Fatal(err)
		}
		j.Plan("data://bench/old", "")
		time.Sleep(settleTime + 50*time.Millisecond)
		paths := make([]string, b.N)
		for i := range paths {
			paths[i] = prep(i)
		}
		op := "open"
		if leaving {
			op = "unlink"
		}
		b.ReportAllocs()
		b.SetBytes(n)
		b.ResetTimer()
		c0 := cpuTime(b)
		for i := 0; i < b.N; i++ {
			e := ev(op, "data://bench/f")
			e.PID = uint32(i) // not a repeat of the last open
			err := keepPath(j, e, paths[i], readable, leaving)
			if err == nil && leaving {
				err = unix.Unlink(paths[i])
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if _, err := j.History("data://bench/f", nil); err != nil { // waits for the publisher
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(float64((cpuTime(b)-c0).Microseconds())/float64(b.N), "cpu-µs/op")
	}
	b.Run("overwrite-same/4KiB", func(b *testing.B) {
		p := filepath.Join(b.TempDir(), "f")
		if err := os.WriteFile(p, pattern(n, 6), 0o644); err != nil {
			b.Fatal(err)
		}
		run(b, false, false, func(int) string { return p })
	})
	b.Run("overwrite-same-readable/4KiB", func(b *testing.B) {
		p := filepath.Join(b.TempDir(), "f")
		if err := os.WriteFile(p, pattern(n, 6), 0o644); err != nil {
			b.Fatal(err)
		}
		run(b, false, true, func(int) string { return p })
	})
	b.Run("overwrite-new/4KiB", func(b *testing.B) {
		dir := b.TempDir()
		run(b, false, false, func(i int) string {
			p := filepath.Join(dir, strconv.Itoa(i))
			data := pattern(n, 7)
			binary.LittleEndian.PutUint64(data, uint64(i))
			if err := os.WriteFile(p, data, 0o644); err != nil {
				b.Fatal(err)
			}
			return p
		})
	})
	for _, readable := range []bool{false, true} {
		name := "unlink/4KiB"
		if readable {
			name = "unlink-readable/4KiB"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			data := pattern(n, 8)
			run(b, true, readable, func(i int) string {
				p := filepath.Join(dir, strconv.Itoa(i))
				if err := os.WriteFile(p, data, 0o644); err != nil {
					b.Fatal(err)
				}
				return p
			})
		})
	}
}

// keepPath keeps the file at path for e as the daemon does: through an
// O_PATH descriptor, or a readable one, and its fstat.
func keepPath(j *Journal, e Event, path string, readable, leaving bool) error {
	flags := unix.O_PATH
	if readable {
		flags = unix.O_RDONLY | unix.O_NONBLOCK
	}
	fd, err := unix.Open(path, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	return j.Keep(e, File{FD: fd, Readable: readable, Mode: st.Mode, Size: st.Size, Links: uint64(st.Nlink)}, leaving)
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkKeepEvicting is Keep of files no one stored before, by two
// goroutines at once, each a 256 KiB file (as write-opens of existing
// files through the mount), the publisher waited for only at the end:
// at-bound with the journal at MaxBytes (4 MiB), so that publishing each
// evicts the oldest objects, under-bound with room for everything.
// p50-µs, p99-µs and max-µs are the latencies of single Keeps — what a
// write-open waits for on a FUSE request.
func BenchmarkKeepEvicting(b *testing.B) {
	b.Run("at-bound", func(b *testing.B) { benchKeepEvicting(b, 4<<20) })
	b.Run("under-bound", func(b *testing.B) { benchKeepEvicting(b, 4<<30) })
}

func benchKeepEvicting(b *testing.B, maxBytes int64) {
	const n = 256 << 10
	j := openJournal(b, Options{Batched: true, MaxBytes: maxBytes})
	dir := b.TempDir()
	paths := make([]string, b.N)
	for i := range paths {
		paths[i] = filepath.Join(dir, strconv.Itoa(i))
		data := pattern(n, 9)
		binary.LittleEndian.PutUint64(data, uint64(i))
		binary.LittleEndian.PutUint64(data[n/2:], uint64(i))
		if err := os.WriteFile(paths[i], data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	b.SetBytes(n)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				t0 := time.Now()
				e := ev("open", "data://bench/f"+strconv.Itoa(i%64))
				e.PID = uint32(i)
				err := keepPath(j, e, paths[i], false, false)
				lat[i] = time.Since(t0)
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if _, err := j.History("data://bench/f0", nil); err != nil { // waits for the publisher
		b.Fatal(err)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
}
