package journal

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestRecoveryPacksLoggedCopies: small copies a crash left in the
// staging log are published at the next Open as packs, a file and an
// fsync for many, not as an object each: the mount waits for this
// before it is served again.
func TestRecoveryPacksLoggedCopies(t *testing.T) {
	const n = 300
	dir := filepath.Join(t.TempDir(), "j")
	j := openJournal(t, Options{Dir: dir, Batched: true})
	held, release := stopPublisher(j)
	defer func() { release(); j.Close() }()
	src := t.TempDir()
	datas := make([][]byte, n)
	for i := range datas {
		datas[i] = pattern(1000+i*37, byte(i))
		if err := keepFile(t, j, ev("open", fmt.Sprintf("data://f%d", i)), filepath.Join(src, strconv.Itoa(i)), datas[i], false); err != nil {
			t.Fatal(err)
		}
	}
	<-held
	snap := snapshot(t, dir)
	start := time.Now()
	k, err := Open(Options{Dir: snap, Batched: true})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	t.Logf("Open published %d staged copies in %v", n, time.Since(start))
	for i, data := range datas {
		r := newest(t, k, fmt.Sprintf("data://f%d", i))
		if b, err := content(k, r); err != nil || !bytes.Equal(b, data) {
			t.Fatalf("f%d: content %d bytes, %v; want the %d bytes kept", i, len(b), err, len(data))
		}
	}
	objs, packs := names(t, filepath.Join(snap, objectsName)), names(t, filepath.Join(snap, packsName))
	if len(packs) == 0 || len(objs) > n/10 {
		t.Errorf("recovery stored %d objects and %d packs for %d small copies; want them packed", len(objs), len(packs), n)
	}
}
