// Command neuralisfs mounts configured sources under one tree, decides every
// syscall against a per-path policy, and keeps a full-text index fresh.
//
// It is thin: it parses flags, loads the config and calls the packages.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"

	"github.com/neuralis/neuralisfs/internal/daemon"
	"github.com/neuralis/neuralisfs/mounts"
)

const usage = `usage: neuralisfs <command> [flags] [args]

commands:
  mount [-c FILE] [-debug] [MOUNTPOINT]   mount the sources and serve until SIGINT/SIGTERM
  unmount MOUNTPOINT                      unmount (lazily when busy, saying so)
  reload [-c FILE]                        re-read the config in the running daemon (as SIGHUP does)
  config validate [-c FILE]               check a config file and print every problem
  policy explain URI --as PRINCIPAL [-c FILE]
                                          print the read/write/exec decisions and the deciding rules
  policy check [-c FILE]                  lint the rules (unknown slugs or principals, shadowed rules)
  audit [--follow] [-c FILE]              print the audit log of denied operations
  search [--source S] [--path GLOB] [--ext E] [--limit N] [--json] [-c FILE] QUERY
                                          search the running daemon's index (decided for your uid)
  status [--json] [-c FILE]               sources, index size, queue, freshness of the running daemon
  sources [--json] [-c FILE]              what the index admits and skips in each source (no daemon needed)
  history URI [--json] [-c FILE]          journaled versions of a file (or of a folder's files: URI ends in /)
  revert URI [--to ID] [-c FILE]          restore a file to its state before a journal record

The config file defaults to ./config.toml, then $XDG_CONFIG_HOME/neuralisfs/config.toml.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// exit codes
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "mount":
		return cmdMount(rest, stdout, stderr)
	case "unmount", "umount":
		return cmdUnmount(rest, stdout, stderr)
	case "reload":
		return cmdReload(rest, stdout, stderr)
	case "search":
		return cmdSearch(rest, stdout, stderr)
	case "status":
		return cmdStatus(rest, stdout, stderr)
	case "sources":
		return cmdSources(rest, stdout, stderr)
	case "history":
		return cmdHistory(rest, stdout, stderr)
	case "revert":
		return cmdRevert(rest, stdout, stderr)
	case "policy":
		return cmdPolicy(rest, stdout, stderr)
	case "audit":
		return cmdAudit(rest, stdout, stderr)
	case "config":
		if len(rest) == 0 || rest[0] != "validate" {
			fmt.Fprintln(stderr, "neuralisfs config: the only subcommand is \"validate\"")
			return exitUsage
		}
		return cmdValidate(rest[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "neuralisfs: unknown command %q\n\n%s", cmd, usage)
	return exitUsage
}

func defaultConfig() string {
	if _, err := os.Stat("config.toml"); err == nil {
		return "config.toml"
	}
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "neuralisfs", "config.toml")
}

func loadConfig(path string, stderr io.Writer) (*mounts.Config, bool) {
	cfg, err := mounts.Load(path)
	if err != nil {
		printErrors(stderr, err)
		return nil, false
	}
	return cfg, true
}

// printErrors prints each joined error on its own line.
func printErrors(w io.Writer, err error) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			fmt.Fprintln(w, e)
		}
		return
	}
	fmt.Fprintln(w, err)
}

func cmdValidate(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("config validate", flag.ContinueOnError)
	fl.SetOutput(stderr)
	cfgPath := fl.String("c", defaultConfig(), "config file")
	if err := fl.Parse(args); err != nil {
		return exitUsage
	}
	cfg, ok := loadConfig(*cfgPath, stderr)
	if !ok {
		return exitError
	}
	fmt.Fprintf(stdout, "%s: ok (%d sources, %d principals, %d rules, %d views)\n", cfg.File, len(cfg.Sources), len(cfg.Principals), len(cfg.Rules), len(cfg.Views))
	return exitOK
}

func cmdMount(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("mount", flag.ContinueOnError)
	fl.SetOutput(stderr)
	cfgPath := fl.String("c", defaultConfig(), "config file")
	debug := fl.Bool("debug", false, "log every FUSE request")
	cpuprofile := fl.String("cpuprofile", "", "write a CPU profile of the daemon to this file")
	if err := fl.Parse(args); err != nil {
		return exitUsage
	}
	if fl.NArg() > 1 {
		fmt.Fprintln(stderr, "neuralisfs mount: takes one MOUNTPOINT")
		return exitUsage
	}
	cfg, ok := loadConfig(*cfgPath, stderr)
	if !ok {
		return exitError
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	mp := fl.Arg(0)
	if mp != "" {
		if abs, err := filepath.Abs(mp); err == nil {
			mp = abs
		}
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintf(stderr, "neuralisfs mount: %v\n", err)
			return exitError
		}
		pprof.StartCPUProfile(f)
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := daemon.Run(ctx, daemon.Options{
		Config: cfg, Mountpoint: mp, Debug: *debug, Log: log,
		Ready: func(mps []string) {
			for _, m := range mps {
				fmt.Fprintf(stdout, "neuralisfs: mounted at %s\n", m)
			}
		},
	})
	if err != nil {
		fmt.Fprintf(stderr, "neuralisfs mount: %v\n", err)
		return exitError
	}
	return exitOK
}

func cmdUnmount(args []string, stdout, stderr io.Writer) int {
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

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return exitError
	}
	return exitOK
}
