package journal

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// tailFile appends to a file through a shared mapping of a window at its
// end, so an append is a copy into the page cache instead of a write(2).
// On this kind of machine a small buffered write costs 10-20 µs (the
// syscall, and ext4 updating the file's mtime on every call), and every
// change through the mount appends a line to records.jsonl. A page of the
// mapping faults in once for a dozen lines or more. (Faulting a page in
// costs more than a write(2) of it, so the staging log, whose copies fill
// a page or more each, is written with pwrite(2) only: a window of 0.)
//
// What is copied into the mapping is in the page cache as soon as the copy
// returns, exactly as after a write(2): a killed process loses none of it,
// and fsync(2) on the file writes it out. The window is allocated on disk
// (fallocate) before it is mapped, so filling it cannot fail for want of
// space. The file is therefore longer than its content while it is open:
// the rest of the window reads as NUL bytes. Close cuts the file back to
// its content; after a crash, whoever opens it again finds the content's
// end (records.jsonl: the last newline before the NUL bytes).
//
// A fault while copying (the file was cut behind the daemon's back, an I/O
// error) does not crash the daemon: the append falls back to pwrite(2),
// and so do all later ones. A file whose filesystem cannot allocate ahead
// is written with pwrite(2) too.
//
// Only appends of up to mapMax bytes go through the mapping. A larger one
// (the publisher's lines for a whole batch) would fault in fresh pages one
// by one, which costs more than the write(2): it is written with pwrite(2).
//
// A tailFile is not safe for concurrent use; its owner serializes writes
// (and may fsync concurrently with them).
type tailFile struct {
	f      *os.File
	end    int64  // length of the content: the next append goes here
	off    int64  // file offset of win[0], a multiple of the page size
	win    []byte // shared mapping of [off, off+len(win)); the file is at least that long
	window int    // size of a mapping; 0: never map
	direct bool   // the mapping faulted once: pwrite(2) from now on
}

// mapMax is the largest append copied into the mapping.
const mapMax = 1 << 10

// newTailFile appends to f (opened read-write, without O_APPEND) after its
// first end bytes, through windows of the given size (a multiple of the
// page size).
func newTailFile(f *os.File, end int64, window int) *tailFile {
	return &tailFile{f: f, end: end, window: window}
}

// write appends b. A failed write leaves the content as it was.
func (t *tailFile) write(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if t.mapped(len(b)) {
		if err := copyIn(t.win[t.end-t.off:], b); err == nil {
			t.end += int64(len(b))
			return nil
		}
		// Nothing past t.end counts, so what the fault left there is
		// overwritten below.
		t.unmap()
		t.direct = true
	}
	fd := int(t.f.Fd())
	for done := 0; done < len(b); {
		n, err := unix.Pwrite(fd, b[done:], t.end+int64(done))
		if err == unix.EINTR {
			continue
		}
		if err == nil && n == 0 {
			err = unix.EIO
		}
		if err != nil {
			if done > 0 {
				// Cut the half-written bytes back off, so the file
				// never keeps a partial append past a clean close.
				t.unmap()
				_ = unix.Ftruncate(fd, t.end)
			}
			return err
		}
		done += n
	}
	t.end += int64(len(b))
	return nil
}

// mapped reports whether the mapping holds room for n more bytes at the
// end of the content, mapping the next window if need be.
func (t *tailFile) mapped(n int) bool {
	if n > mapMax {
		return false
	}
	if t.win != nil && t.end+int64(n) <= t.off+int64(len(t.win)) {
		return true
	}
	if t.direct || t.window == 0 {
		return false
	}
	t.unmap()
	off := t.end &^ int64(os.Getpagesize()-1)
	fd := int(t.f.Fd())
	// Allocate first, so that no page of the window can fault for want
	// of space. (A full disk fails here, and this append and later ones
	// are plain writes that report it.)
	if err := unix.Fallocate(fd, 0, off, int64(t.window)); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) {
			return false
		}
		t.window = 0 // cannot allocate ahead: never map
		return false
	}
	win, err := unix.Mmap(fd, off, t.window, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.window = 0
		return false
	}
	t.win, t.off = win, off
	return t.end+int64(n) <= t.off+int64(len(t.win))
}

func (t *tailFile) unmap() {
	if t.win != nil {
		_ = unix.Munmap(t.win)
		t.win = nil
	}
}

// truncate cuts the content (and the file) back to n bytes.
func (t *tailFile) truncate(n int64) error {
	t.unmap()
	if err := t.f.Truncate(n); err != nil {
		return err
	}
	t.end = n
	return nil
}

// rewind moves the end of the content back to n, keeping the file's
// length: later appends overwrite what was there. Nothing past the end
// counts as content, and close cuts it off.
func (t *tailFile) rewind(n int64) {
	t.end = n
}

// close unmaps the window, cuts the file back to its content and closes it.
func (t *tailFile) close() error {
	t.unmap()
	err := t.f.Truncate(t.end)
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// copyIn copies src to the front of dst, a shared file mapping, and
// reports a fault (SIGBUS: the file was cut behind us, or an I/O error)
// as an error instead of crashing the process.
func copyIn(dst, src []byte) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			err = fmt.Errorf("write through a file mapping: %v", r)
		}
	}()
	copy(dst, src)
	return nil
}
