package fs

import (
	"runtime"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// newServer is fuse.NewServer with fewer idle readers of /dev/fuse than
// go-fuse would keep (issue 15). The caller holds devFuseMu, which also
// keeps two mounts from lowering and restoring GOMAXPROCS over each other.
//
// go-fuse keeps up to maxReaders+1 goroutines blocked in read(2) on
// /dev/fuse, and takes maxReaders from GOMAXPROCS when NewServer runs
// (at least 2, at most 16). It caps only the readers that wait: whenever
// none is left waiting, the one that took the last request starts
// another, so requests are still answered in parallel, however many.
//
// A goroutine blocked in a system call keeps its P until the runtime's
// sysmon takes it back, and sysmon takes it back after 20 µs — not after
// 10 ms, as while some P is idle — once no P is idle. The daemon runs with
// spare Ps (daemon.spareProcs: 8 on a 2-CPU machine) so that the readers
// leave some idle, but with maxReaders = GOMAXPROCS the waiting readers
// alone can hold all of them: sysmon then takes a P back from a reader
// every few tens of microseconds, and every time it does it sleeps again
// for only 20 µs, so on a busy mount it wakes some 50,000 times a second.
// On the 2-CPU development VM that thread took a fifth of the daemon's
// CPU during 3,000 creates (perf record). With maxReaders a quarter of
// GOMAXPROCS (go-fuse's minimum, 2, there) its share fell by a third,
// and the daemon's CPU per create and the creates' wall time by a fifth
// to a third, as the VM's speed of the hour went (README "Benchmarks").
//
// go-fuse has no option for maxReaders, so GOMAXPROCS is lowered while
// NewServer runs and put back after: a stop of the world at mount time,
// and nothing else in the daemon sizes itself by GOMAXPROCS in that
// instant but a git walk's pool, which takes at least 16 workers anyway.
func newServer(rfs fuse.RawFileSystem, dir string, mo *fuse.MountOptions) (*fuse.Server, error) {
	procs := runtime.GOMAXPROCS(0)
	if r := fuseReaders(procs); r < procs {
		runtime.GOMAXPROCS(r)
		defer runtime.GOMAXPROCS(procs)
	}
	return fuse.NewServer(rfs, dir, mo)
}

// fuseReaders is the maxReaders go-fuse is given with procs Ps: a quarter
// of them, but go-fuse's minimum of 2 at least.
func fuseReaders(procs int) int { return max(2, procs/4) }
