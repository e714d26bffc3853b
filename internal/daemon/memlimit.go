package daemon

import (
	"runtime/debug"
	"sync"
)

// buildMemoryLimit is the Go runtime's soft memory limit while an index
// build runs (issue 16: a first build of a 100,000-file tree peaked at
// 490 MB RSS, most of it garbage the collector had not yet reclaimed at
// its default pace). Under it the collector runs as often as it takes to
// keep the heap near the limit; it is soft, so a build whose live data
// needs more still gets it (the runtime caps the collector's CPU). Outside
// builds the limit goes back to what it was, so a daemon with a large
// working set never collects against it. A GOMEMLIMIT set by the user
// below it is kept.
const buildMemoryLimit = 160 << 20

var buildMem struct {
	sync.Mutex
	holds int
	saved int64
}

// holdBuildMemory lowers the soft memory limit for an index build until
// the returned release is called. Holds nest.
func holdBuildMemory() (release func()) {
	buildMem.Lock()
	if buildMem.holds == 0 {
		buildMem.saved = debug.SetMemoryLimit(-1)
		if buildMem.saved > buildMemoryLimit {
			debug.SetMemoryLimit(buildMemoryLimit)
		}
	}
	buildMem.holds++
	buildMem.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			buildMem.Lock()
			buildMem.holds--
			if buildMem.holds == 0 {
				debug.SetMemoryLimit(buildMem.saved)
			}
			buildMem.Unlock()
		})
	}
}
