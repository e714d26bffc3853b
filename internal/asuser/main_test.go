package asuser

import (
	"os"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary's main goroutine keeps the main thread (locked in init,
// as the runtime documents), so TestMain can hand a worker the main
// thread on purpose and TestWorkerLeavesTheMainThread can judge the result.
func init() { runtime.LockOSThread() }

var mainThread struct {
	ran            bool
	onMain         bool  // TestMain really ran on the main thread
	err            error // from starting the worker there
	leaderGroups   []uint32
	workerTid      int
	workerGroups   []int
	workerFsuid    int
	leaderFsuidNow int
}

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		mainThread.ran = true
		mainThread.onMain = unix.Gettid() == unix.Getpid()
		w := &Worker{jobs: make(chan func()), done: make(chan struct{}), lists: map[listKey]error{}}
		errc := make(chan error, 1)
		// Called on this (main) thread, as a scheduler might have placed it.
		w.serve(Cred{UID: 1001, GID: 1001, Groups: []uint32{4242}}, errc, nil)
		mainThread.err = <-errc
		if mainThread.err == nil {
			w.Do(func() error {
				mainThread.workerTid = unix.Gettid()
				mainThread.workerGroups, _ = unix.Getgroups()
				mainThread.workerFsuid, _ = unix.SetfsuidRetUid(-1)
				return nil
			})
			w.Close()
		}
		mainThread.leaderGroups = Groups(uint32(os.Getpid()))
		mainThread.leaderFsuidNow, _ = unix.SetfsuidRetUid(-1)
	}
	os.Exit(m.Run())
}

func TestWorkerLeavesTheMainThread(t *testing.T) {
	if !mainThread.ran {
		t.Skip("taking another user's identity needs root")
	}
	if !mainThread.onMain {
		t.Fatal("TestMain did not run on the main thread; the test proves nothing")
	}
	if mainThread.err != nil {
		t.Fatal(mainThread.err)
	}
	if mainThread.workerTid == os.Getpid() {
		t.Errorf("the worker ran on the main thread")
	}
	if !slices.Equal(mainThread.workerGroups, []int{4242}) || mainThread.workerFsuid != 1001 {
		t.Errorf("the worker has groups %v, fsuid %d", mainThread.workerGroups, mainThread.workerFsuid)
	}
	if slices.Contains(mainThread.leaderGroups, 4242) || mainThread.leaderFsuidNow != 0 {
		t.Errorf("the main thread kept borrowed credentials: groups %v, fsuid %d", mainThread.leaderGroups, mainThread.leaderFsuidNow)
	}
}
