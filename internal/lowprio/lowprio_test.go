package lowprio

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nice reads the nice value of thread tid of this process from /proc
// (field 19 of stat; the command name before it may hold spaces).
func nice(t *testing.T, tid string) (int, bool) {
	b, err := os.ReadFile(filepath.Join("/proc/self/task", tid, "stat"))
	if err != nil {
		return 0, false // the thread ended meanwhile
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	n, err := strconv.Atoi(f[16])
	if err != nil {
		t.Fatalf("stat of thread %s: %q", tid, s)
	}
	return n, true
}

// wedged: Go never ends the process's main thread. A background goroutine
// that ran there leaves it parked for good, running no goroutine again
// (runtime mexit, "Just wedge it"), at nice 19.

func TestLowerSetsTheThreadAloneAndEndsWithIt(t *testing.T) {
	if n, _ := nice(t, strconv.Itoa(unix.Gettid())); n != 0 {
		t.Skipf("the test runs at nice %d already", n)
	}
	tids := make(chan int)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		Go(func() {
			defer wg.Done()
			tids <- unix.Gettid()
			<-release
		})
	}
	low := map[string]bool{}
	for range 4 {
		tid := strconv.Itoa(<-tids)
		low[tid] = true
		if n, ok := nice(t, tid); !ok || n != Nice {
			t.Errorf("thread %s of a background goroutine: nice %d, %v; want %d", tid, n, ok, Nice)
		}
	}
	// Every other thread of the process keeps its priority, also threads
	// started while the background ones run.
	var more sync.WaitGroup
	for range 8 {
		more.Add(1)
		go func() { defer more.Done(); unix.Getpid() }()
	}
	more.Wait()
	check := func(when string) {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if low[e.Name()] || e.Name() == strconv.Itoa(os.Getpid()) {
				continue // see wedged
			}
			if n, ok := nice(t, e.Name()); ok && n != 0 {
				t.Errorf("%s: thread %s has nice %d; want 0", when, e.Name(), n)
			}
		}
	}
	check("while background goroutines run")
	close(release)
	wg.Wait()
	// The locked threads end with their goroutines (runtime.LockOSThread),
	// so their priority cannot pass to other goroutines.
	deadline := time.Now().Add(10 * time.Second)
	for tid := range low {
		if tid == strconv.Itoa(os.Getpid()) {
			continue // see wedged
		}
		for {
			if _, ok := nice(t, tid); !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("thread %s of a background goroutine outlived it", tid)
			}
			time.Sleep(time.Millisecond)
		}
	}
	check("after they returned")
}

// burst marks a burst of requests.
func burst() {
	slotStart.Store(now())
	slotCount.Store(0)
	for range busyCount {
		Foreground()
	}
}

func TestBusyFollowsRequests(t *testing.T) {
	time.Sleep(Quiet + 5*time.Millisecond)
	Foreground() // one request is no burst
	if Busy() {
		t.Fatal("Busy after a single request: true")
	}
	burst()
	if !Busy() {
		t.Fatal("Busy right after a burst of requests: false")
	}
	time.Sleep(Quiet + 5*time.Millisecond) // nothing marks a request meanwhile
	if Busy() {
		t.Fatal("Busy after Quiet without requests: true")
	}
	if !Idle(context.Background(), time.Hour) {
		t.Fatal("Idle on an idle daemon: false")
	}
}

func TestPaceChargesUnitsWhileBusy(t *testing.T) {
	var p Pacer
	p.Pace(context.Background()) // the first call charges nothing
	start := p.start
	time.Sleep(2 * time.Millisecond) // a unit of work
	burst()
	before := nextUnit.Load()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // charge, but do not wait
	p.Pace(ctx)
	unit := p.start - start // at least the unit's length
	if got := nextUnit.Load(); got < before || got < start+int64(Yield)*int64(2*time.Millisecond) {
		t.Fatalf("after a %v unit while busy the next unit may start at %v; want ≥ %v after the unit began",
			time.Duration(unit), time.Duration(got-start), Yield*2*time.Millisecond)
	}

	// On an idle daemon nothing is charged and Pace does not wait.
	time.Sleep(Quiet + 5*time.Millisecond)
	before = nextUnit.Load()
	p.Pace(context.Background())
	time.Sleep(time.Millisecond)
	p.Pace(context.Background())
	if nextUnit.Load() != before {
		t.Fatal("a unit run on an idle daemon was charged")
	}
}

// ioprioClass reads the I/O class of thread tid (ioprio_get(2)).
func ioprioClass(t *testing.T, tid int) int {
	t.Helper()
	v, _, errno := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(tid), 0)
	if errno != 0 {
		t.Fatalf("ioprio_get of thread %d: %v", tid, errno)
	}
	return int(v) >> ioprioClassShift
}

func TestLowerIOPutsTheThreadAloneInTheIdleClass(t *testing.T) {
	low := make(chan int)
	other := make(chan int)
	release := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		LowerIO()
		low <- unix.Gettid()
		<-release
	}()
	go func() {
		defer wg.Done()
		Lower()
		other <- unix.Gettid()
		<-release
	}()
	lt, ot := <-low, <-other
	if c := ioprioClass(t, lt); c != ioprioClassIdle {
		t.Errorf("thread of LowerIO: I/O class %d, want %d (idle)", c, ioprioClassIdle)
	}
	if c := ioprioClass(t, ot); c == ioprioClassIdle {
		t.Errorf("thread of Lower: I/O class idle, want it unchanged")
	}
	if n, ok := nice(t, strconv.Itoa(lt)); !ok || n != Nice {
		t.Errorf("thread of LowerIO: nice %d, %v; want %d", n, ok, Nice)
	}
	// A goroutine started afterwards runs on a thread of the default class.
	fresh := make(chan int)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		fresh <- ioprioClass(t, unix.Gettid())
	}()
	if c := <-fresh; c == ioprioClassIdle {
		t.Errorf("a goroutine started later runs in the idle class")
	}
	close(release)
	wg.Wait()
}
