package mounts

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// ChmodFd and UtimesFd change the inode an O_PATH descriptor names, with
// the kernel's AT_EMPTY_PATH forms and with the /proc path a kernel
// without them falls back to.
func TestAttrChangesOnAnOPathDescriptor(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, fallback := range []bool{false, true} {
		noEmptyChmod.Store(fallback)
		noEmptyUtimes.Store(fallback)
		fd, err := unix.Open(f, unix.O_PATH, 0)
		if err != nil {
			t.Fatal(err)
		}
		mode := uint32(0o640)
		if fallback {
			mode = 0o4751
		}
		if err := ChmodFd(fd, mode); err != nil {
			t.Fatalf("fallback %v: ChmodFd: %v", fallback, err)
		}
		mtime := unix.Timespec{Sec: 1_000_000_000 + int64(mode), Nsec: 5}
		if err := UtimesFd(fd, []unix.Timespec{{Nsec: unix.UTIME_OMIT}, mtime}); err != nil {
			t.Fatalf("fallback %v: UtimesFd: %v", fallback, err)
		}
		unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Lstat(f, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o7777 != mode || st.Mtim != mtime {
			t.Errorf("fallback %v: mode %o mtime %v, want %o %v", fallback, st.Mode&0o7777, st.Mtim, mode, mtime)
		}
		if !fallback && (noEmptyChmod.Load() || noEmptyUtimes.Load()) {
			t.Logf("this kernel has no fchmodat2 or utimensat(AT_EMPTY_PATH): the /proc path served")
		}
	}
	noEmptyChmod.Store(false)
	noEmptyUtimes.Store(false)

	// An error is the kernel's, and does not switch to the /proc path.
	if err := ChmodFd(-1, 0o600); err != unix.EBADF {
		t.Errorf("ChmodFd of a closed descriptor: %v, want EBADF", err)
	}
	if err := UtimesFd(-1, []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}); err != unix.EBADF {
		t.Errorf("UtimesFd of a closed descriptor: %v, want EBADF", err)
	}
	if noEmptyChmod.Load() || noEmptyUtimes.Load() {
		t.Errorf("an EBADF switched to the /proc path")
	}
}
