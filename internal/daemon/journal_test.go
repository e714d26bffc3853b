package daemon

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStamp keeps stamp equal to the format it replaced: every field, in
// order, so two different states never share a stamp.
func TestStamp(t *testing.T) {
	for _, st := range []unix.Stat_t{
		{},
		{Dev: 2049, Ino: 123456789, Size: 4096, Mtim: unix.Timespec{Sec: 1764500000, Nsec: 999999999}, Ctim: unix.Timespec{Sec: 1764500001, Nsec: 5}},
		{Dev: 1, Ino: 12, Size: 3, Mtim: unix.Timespec{Sec: 4, Nsec: 5}, Ctim: unix.Timespec{Sec: 6, Nsec: 7}},
	} {
		want := fmt.Sprintf("%d:%d:%d:%d.%d:%d.%d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
		if got := stamp(&st); got != want {
			t.Errorf("stamp = %q; want %q", got, want)
		}
	}
}
