package index

import (
	"sync"
	"time"

	"github.com/blevesearch/bleve/v2/index/scorch"
	zapx "github.com/blevesearch/zapx/v17"

	"github.com/neuralis/neuralisfs/internal/lowprio"
)

// scorch merges the segments of every batch in the background, and during a
// first build each merge rewrites text just indexed: on the Go tree, 14% of
// the CPU of a build whose CPU is the limit. So while a Reconcile has a
// large backlog the merger waits (holdMerges), and merges once the build is
// searchable. Past maxHeldBatches batches it merges anyway, so a very long
// build does not leave searches crossing too many segments.

// scorchEvents is the name of onScorchEvent in scorch's registry.
const scorchEvents = "neuralis"

// maxHeldBatches bounds the batches applied while merges wait. At 500,
// merges waited for the whole of a 100,000-file first build, and every
// segment it wrote stayed mapped until the end: 198 MB of file-backed RSS
// on top of the heap, a peak of 354 MB (issue 16's bound is 256 MiB). At
// 40 the merger folds them as the build goes, and the same build peaked
// at 255 MiB; the cost is CPU spent rewriting segments the final merges
// rewrite again (the build took 77 s against 55 s, both at load average
// 5 on two cores). At 80 the peak was 285 MiB.
const maxHeldBatches = 40

// mergeCheckEvery is how often a waiting merger checks again.
const mergeCheckEvery = 100 * time.Millisecond

// gates maps a *scorch.Scorch to its *Index, for onScorchEvent.
var gates sync.Map

func init() {
	// scorch reads the registry only when an index opens.
	scorch.RegistryEventCallbacks[scorchEvents] = onScorchEvent
	// zap sizes the buffer of each new segment up front, from the bytes
	// per document of the last segment it built (its scratch state comes
	// from a pool that batches of one file and of 500 share), and the
	// zeroing of that buffer was 8% of the CPU of a first build of the Go
	// tree. Without the estimate the buffer grows as the segment is
	// written. Only this package uses zap in the process.
	zapx.NewSegmentBufferAvgBytesPerDocFactor = 0
}

// onScorchEvent runs in scorch's goroutines. Before each merge it waits while
// merges are held; returning false makes the merger ask again.
func onScorchEvent(e scorch.Event) bool {
	if e.Kind != scorch.EventKindPreMergeCheck {
		return true
	}
	x, ok := gates.Load(e.Scorch)
	if !ok {
		return true
	}
	return x.(*Index).mergeAllowed()
}

// registerGate lets onScorchEvent find x. Merges are never held for an index
// whose bleve is not scorch.
func (x *Index) registerGate() {
	if bi, err := x.bleve.Advanced(); err == nil {
		if s, ok := bi.(*scorch.Scorch); ok {
			x.scorch = s
			gates.Store(s, x)
		}
	}
}

func (x *Index) unregisterGate() {
	if x.scorch != nil {
		gates.Delete(x.scorch)
	}
}

// holdMerges makes the merger wait until the returned release is called (or
// maxHeldBatches batches are applied). Holds nest.
func (x *Index) holdMerges() (release func()) {
	x.mergeMu.Lock()
	if x.mergeHolds == 0 {
		x.heldBatches = 0
		x.mergeFree = make(chan struct{})
	}
	x.mergeHolds++
	x.mergeMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			x.mergeMu.Lock()
			x.mergeHolds--
			if x.mergeHolds == 0 {
				close(x.mergeFree)
			}
			x.mergeMu.Unlock()
		})
	}
}

// countBatch notes a batch applied, for maxHeldBatches.
func (x *Index) countBatch() {
	x.mergeMu.Lock()
	x.heldBatches++
	x.busyBatches++
	x.mergeMu.Unlock()
}

// mergeWhenIdle lets a merge wait, up to mergeCheckEvery, while the mount
// serves requests (issue 15): a merge rewrites segments just written, CPU
// the requests in front of it need. Past maxHeldBatches batches applied
// since the last merge allowed, it merges anyway.
func (x *Index) mergeWhenIdle() bool {
	x.mergeMu.Lock()
	over := x.busyBatches >= maxHeldBatches
	x.mergeMu.Unlock()
	if !over && !lowprio.Idle(x.quitCtx, mergeCheckEvery) {
		return false
	}
	x.mergeMu.Lock()
	x.busyBatches = 0
	x.mergeMu.Unlock()
	return true
}

// mergeAllowed reports whether the merger may merge now, waiting up to
// mergeCheckEvery for holds to end.
func (x *Index) mergeAllowed() bool {
	x.mergeMu.Lock()
	held := x.mergeHolds > 0 && x.heldBatches < maxHeldBatches
	free := x.mergeFree
	x.mergeMu.Unlock()
	if !held {
		return x.mergeWhenIdle()
	}
	t := time.NewTimer(mergeCheckEvery)
	defer t.Stop()
	select {
	case <-free:
		return true
	case <-x.quit:
		return true // closing: let scorch's merger see its own close
	case <-t.C:
		return false
	}
}
