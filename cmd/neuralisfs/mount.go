package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"

	"github.com/neuralis/neuralisfs/internal/daemon"
	"github.com/neuralis/neuralisfs/internal/watchdog"
)

func cmdMount(fl *flag.FlagSet) runner {
	cfgPath := configFlag(fl)
	opts := fl.String("o", "", "mount `OPTIONS`, comma-separated, over the config's keys (see MOUNT OPTIONS)")
	debug := fl.Bool("debug", false, "log every FUSE request")
	cpuprofile := fl.String("cpuprofile", "", "write a CPU profile of the daemon to `FILE`")
	memprofile := fl.String("memprofile", "", "write a heap profile of the daemon to `FILE` when it stops")
	return func(args []string, stdout, stderr io.Writer) int {
		// Started by the mount(8) helper: say READY or why not on the pipe
		// it waits on (helper.go).
		rd := readinessFromEnv()
		defer rd.close()
		errw := io.MultiWriter(stderr, rd)
		if len(args) > 1 {
			fmt.Fprintln(errw, "neuralisfs mount: takes one MOUNTPOINT")
			return exitUsage
		}
		cfg, ok := loadConfig(*cfgPath, errw)
		if !ok {
			return exitError
		}
		if err := cfg.ApplyMountOptions(*opts); err != nil {
			fmt.Fprintf(errw, "neuralisfs mount -o %s: %v\n", *opts, err)
			return exitUsage
		}
		level := slog.LevelInfo
		if *debug {
			level = slog.LevelDebug
		}
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
		slog.SetDefault(log)
		mp := ""
		if len(args) == 1 {
			mp = args[0]
			if abs, err := filepath.Abs(mp); err == nil {
				mp = abs
			}
		}
		if *cpuprofile != "" {
			f, err := os.Create(*cpuprofile)
			if err != nil {
				fmt.Fprintf(errw, "neuralisfs mount: %v\n", err)
				return exitError
			}
			pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
		var stopping func()
		if *memprofile != "" {
			f, err := os.Create(*memprofile)
			if err != nil {
				fmt.Fprintf(errw, "neuralisfs mount: %v\n", err)
				return exitError
			}
			defer f.Close()
			// When the daemon begins to stop, not after: by then what it
			// held is garbage and the profile would show none of it.
			stopping = func() {
				runtime.GC()
				if err := pprof.WriteHeapProfile(f); err != nil {
					log.Warn("writing the heap profile", "file", *memprofile, "err", err)
				}
			}
		}
		// Before anything is mounted (watchdog.Start says why): it
		// aborts the daemon's connections if a kill leaves a thread of it
		// stuck in the kernel (issue 16).
		if err := watchdog.Start(log); err != nil {
			log.Warn("running without a watchdog: a SIGKILL that finds a thread waiting in the kernel on a mount can leave the daemon hung (README \"Limits\")", "err", err)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		err := daemon.Run(ctx, daemon.Options{
			Config: cfg, Mountpoint: mp, Debug: *debug, Log: log, Stopping: stopping,
			Ready: func(mps []string) {
				for _, m := range mps {
					fmt.Fprintf(stdout, "neuralisfs: mounted at %s\n", m)
				}
				rd.ready()
			},
		})
		if err != nil {
			fmt.Fprintf(errw, "neuralisfs mount: %v\n", err)
			return exitError
		}
		return exitOK
	}
}

// readyFDEnv names the pipe a background daemon reports readiness on.
const readyFDEnv = "NEURALISFS_READY_FD"

// readiness is the write end of the mount helper's pipe: the daemon writes
// "READY" on it once every mount serves, or the error that stopped it, and
// closes it. Without the pipe it does nothing.
type readiness struct {
	mu sync.Mutex
	f  *os.File
}

func readinessFromEnv() *readiness {
	n, err := strconv.Atoi(os.Getenv(readyFDEnv))
	os.Unsetenv(readyFDEnv)
	if err != nil || n < 3 {
		return &readiness{}
	}
	// Keep the pipe out of every process the daemon starts (fusermount3,
	// git), or the helper would wait for them too.
	syscall.CloseOnExec(n)
	return &readiness{f: os.NewFile(uintptr(n), "ready")}
}

// Write passes error text on to the helper until the mount is ready.
func (r *readiness) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		r.f.Write(p)
	}
	return len(p), nil
}

func (r *readiness) ready() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		r.f.WriteString(readyWord)
		r.f.Close()
		r.f = nil
	}
}

func (r *readiness) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

func cmdUnmount(fl *flag.FlagSet) runner {
	return func(args []string, stdout, stderr io.Writer) int {
		if len(args) != 1 {
			fmt.Fprintln(stderr, "usage: neuralisfs unmount MOUNTPOINT")
			return exitUsage
		}
		mp, _ := filepath.Abs(args[0])
		if cleared, err := daemon.ClearStale(mp); err != nil {
			fmt.Fprintf(stderr, "neuralisfs unmount: %v\n", err)
			return exitError
		} else if cleared {
			fmt.Fprintf(stdout, "unmounted %s (a stale mount left by a daemon that died)\n", mp)
			return exitOK
		}
		err := daemon.Unmount(mp)
		switch {
		case errors.Is(err, daemon.ErrBusyDetached):
			fmt.Fprintf(stdout, "%s: %v\n", mp, err)
			return exitOK
		case err != nil:
			fmt.Fprintf(stderr, "neuralisfs unmount %s: %v\n", mp, err)
			return exitError
		}
		fmt.Fprintf(stdout, "unmounted %s\n", mp)
		return exitOK
	}
}
