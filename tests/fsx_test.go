package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// fsxFile is one file under test: the same operations go to a file on the
// mount and to a reference file on a plain folder, fsx-style.
type fsxFile struct {
	t          *testing.T
	mnt, ref   string
	mfd, rfd   int // read-write handles
	mapp, rapp int // O_APPEND handles
}

func openFsx(t *testing.T, mnt, ref string) *fsxFile {
	f := &fsxFile{t: t, mnt: mnt, ref: ref}
	f.open()
	return f
}

func (f *fsxFile) open() {
	var err error
	if f.mfd, err = unix.Open(f.mnt, unix.O_RDWR|unix.O_CREAT, 0o644); err != nil {
		f.t.Fatal(err)
	}
	if f.rfd, err = unix.Open(f.ref, unix.O_RDWR|unix.O_CREAT, 0o644); err != nil {
		f.t.Fatal(err)
	}
	if f.mapp, err = unix.Open(f.mnt, unix.O_WRONLY|unix.O_APPEND, 0); err != nil {
		f.t.Fatal(err)
	}
	if f.rapp, err = unix.Open(f.ref, unix.O_WRONLY|unix.O_APPEND, 0); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fsxFile) close() {
	for _, fd := range []int{f.mfd, f.rfd, f.mapp, f.rapp} {
		if err := unix.Close(fd); err != nil {
			f.t.Fatalf("close: %v", err)
		}
	}
}

// both runs op on the mount's and the reference's descriptors and fails
// when the results differ.
func (f *fsxFile) both(what string, op func(fd, app int) (int, error)) {
	f.t.Helper()
	n1, e1 := op(f.mfd, f.mapp)
	n2, e2 := op(f.rfd, f.rapp)
	if n1 != n2 || (e1 == nil) != (e2 == nil) {
		f.t.Fatalf("%s: mount gave (%d, %v), plain folder (%d, %v)", what, n1, e1, n2, e2)
	}
}

func (f *fsxFile) check(step int, what string) {
	f.t.Helper()
	a, err := os.ReadFile(f.mnt)
	if err != nil {
		f.t.Fatal(err)
	}
	b, err := os.ReadFile(f.ref)
	if err != nil {
		f.t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		i := 0
		for i < len(a) && i < len(b) && a[i] == b[i] {
			i++
		}
		f.t.Fatalf("step %d (%s): contents differ: mount %d bytes, plain folder %d bytes, first difference at byte %d", step, what, len(a), len(b), i)
	}
	var s1, s2 unix.Stat_t
	must(f.t, unix.Fstat(f.mfd, &s1))
	must(f.t, unix.Fstat(f.rfd, &s2))
	if s1.Size != s2.Size {
		f.t.Fatalf("step %d (%s): fstat size %d on the mount, %d on the plain folder", step, what, s1.Size, s2.Size)
	}
}

// TestFsxAgainstPlainFolder is a small fsx: random writes, appends,
// truncates, shared writable mappings, fallocate, copy_file_range, fsyncs
// and reopens on a file on the mount and on a plain folder, comparing
// bytes after every step. NEURALIS_FSX_OPS sets the number of steps.
func TestFsxAgainstPlainFolder(t *testing.T) {
	requireFUSE(t)
	e := newEnv(t, "", src{slug: "data"})
	ops := 1500
	if s := os.Getenv("NEURALIS_FSX_OPS"); s != "" {
		ops, _ = strconv.Atoi(s)
	}
	refDir := t.TempDir()
	const maxLen = 300 << 10
	for _, seed := range []uint64{1, 2} {
		name := fmt.Sprintf("fsx%d.bin", seed)
		f := openFsx(t, e.m("data", name), filepath.Join(refDir, name))
		rng := rand.New(rand.NewPCG(seed, 42))
		buf := make([]byte, 70<<10)
		for step := 0; step < ops; step++ {
			var st unix.Stat_t
			must(t, unix.Fstat(f.rfd, &st))
			size := int(st.Size)
			off := rng.IntN(maxLen)
			n := 1 + rng.IntN(len(buf)-1)
			if off+n > maxLen {
				n = maxLen - off
			}
			for i := range buf[:n] {
				buf[i] = byte(rng.Uint32())
			}
			var what string
			switch op := rng.IntN(10); op {
			case 0, 1:
				what = fmt.Sprintf("pwrite %d@%d", n, off)
				f.both(what, func(fd, _ int) (int, error) { return unix.Pwrite(fd, buf[:n], int64(off)) })
			case 2:
				what = fmt.Sprintf("append %d", n)
				if size+n > maxLen {
					continue
				}
				f.both(what, func(_, app int) (int, error) { return unix.Write(app, buf[:n]) })
			case 3:
				l := rng.IntN(maxLen)
				what = fmt.Sprintf("ftruncate %d", l)
				f.both(what, func(fd, _ int) (int, error) { return 0, unix.Ftruncate(fd, int64(l)) })
			case 4:
				if size == 0 {
					continue
				}
				o := rng.IntN(size)
				l := 1 + rng.IntN(min(size-o, len(buf)))
				sync := rng.IntN(2) == 0
				what = fmt.Sprintf("mmap write %d@%d", l, o)
				f.both(what, func(fd, _ int) (int, error) {
					m, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
					if err != nil {
						return 0, err
					}
					copy(m[o:o+l], buf[:l])
					if sync {
						unix.Msync(m, unix.MS_SYNC)
					}
					return 0, unix.Munmap(m)
				})
			case 5:
				what = fmt.Sprintf("pread %d@%d", n, off)
				a, b := make([]byte, n), make([]byte, n)
				n1, _ := unix.Pread(f.mfd, a, int64(off))
				n2, _ := unix.Pread(f.rfd, b, int64(off))
				if n1 != n2 || !bytes.Equal(a[:max(n1, 0)], b[:max(n2, 0)]) {
					t.Fatalf("step %d: %s: mount read %d bytes, plain folder %d, or the bytes differ", step, what, n1, n2)
				}
			case 6:
				mode := uint32(0)
				if rng.IntN(2) == 0 {
					mode = unix.FALLOC_FL_KEEP_SIZE | unix.FALLOC_FL_PUNCH_HOLE
				}
				what = fmt.Sprintf("fallocate mode %#x %d@%d", mode, n, off)
				f.both(what, func(fd, _ int) (int, error) { return 0, unix.Fallocate(fd, mode, int64(off), int64(n)) })
			case 7:
				if size == 0 {
					continue
				}
				from := rng.IntN(size)
				l := min(n, size-from)
				to := rng.IntN(maxLen - l)
				if to < from+l && from < to+l { // copy_file_range refuses overlaps
					continue
				}
				what = fmt.Sprintf("copy_file_range %d from %d to %d", l, from, to)
				f.both(what, func(fd, _ int) (int, error) {
					fo, tt := int64(from), int64(to)
					done := 0
					for done < l {
						c, err := unix.CopyFileRange(fd, &fo, fd, &tt, l-done, 0)
						if err != nil {
							return done, err
						}
						if c == 0 {
							break
						}
						done += c
					}
					return done, nil
				})
			case 8:
				what = "fsync"
				f.both(what, func(fd, _ int) (int, error) { return 0, unix.Fsync(fd) })
			case 9:
				what = "close and reopen"
				f.close()
				f.open()
			}
			if step%5 == 0 || rng.IntN(4) == 0 {
				f.check(step, what)
			}
		}
		f.check(ops, "end")
		f.close()
		// What the mount wrote is what the disk has.
		a, _ := os.ReadFile(e.b("data", name))
		b, _ := os.ReadFile(filepath.Join(refDir, name))
		if !bytes.Equal(a, b) {
			t.Fatalf("seed %d: the backing file differs from the plain folder's after %d steps", seed, ops)
		}
	}
}
