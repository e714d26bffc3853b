package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// When the kernel's inotify event queue overflows, the watcher rescans
// every source, and the search index is brought up to date with each
// as at start: before, the index kept missing the files whose events were
// lost until the daemon restarted. The daemon's inotify instance is made
// with a queue of 16 events (fs.inotify.max_queued_events, read when an
// instance is made, put back at once), and 300 files written behind the
// mount's back overflow it.
func TestIndexCatchesUpAfterTheWatcherRescans(t *testing.T) {
	requireFUSE(t)
	const knob = "/proc/sys/fs/inotify/max_queued_events"
	old, err := os.ReadFile(knob)
	if err != nil {
		skipOutsideCI(t, "%s: %v", knob, err)
	}
	restore := func() { os.WriteFile(knob, old, 0o644) }
	defer restore()
	if err := os.WriteFile(knob, []byte("16\n"), 0o644); err != nil {
		skipOutsideCI(t, "cannot lower %s: %v", knob, err)
	}
	e := newEnv(t, "", src{slug: "data"})
	restore()
	must(t, os.WriteFile(e.b("data", "seed.txt"), []byte("seedword\n"), 0o644))
	e.found(t, "seedword", "data://seed.txt")
	for i := range 300 {
		must(t, os.WriteFile(filepath.Join(e.b("data"), fmt.Sprintf("f%03d.txt", i)), []byte("overflowword\n"), 0o644))
	}
	var got map[string]bool
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if got, err = e.searchSet(t, "overflowword", "**"); err == nil && len(got) == 300 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(got) != 300 {
		t.Errorf("the index found %d of the 300 files written while the event queue overflowed (%v)", len(got), err)
	}
	// Without an overflow the files would have been seen one by one, and
	// the test would pass whatever a rescan does.
	if log := e.stderr.String(); !strings.Contains(log, "overflowed") {
		t.Errorf("the watcher's queue of 16 events did not overflow under 300 files:\n%s", log)
	}
}
