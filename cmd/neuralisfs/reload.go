package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/internal/daemon"
	"github.com/neuralis/neuralisfs/mounts"
)

// cmdReload asks the running daemon to read its config again and apply
// it without unmounting. With -c the daemon reads that file instead of the
// one it runs with. A file with errors is refused whole: the daemon's
// errors (file, line and key) are printed and the exit code is 1.
func cmdReload(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("reload", flag.ContinueOnError)
	fl.SetOutput(stderr)
	cfgPath := fl.String("c", defaultConfig(), "config file (default: the one the daemon runs with)")
	if err := fl.Parse(args); err != nil {
		return exitUsage
	}
	if fl.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: neuralisfs reload [-c FILE]")
		return exitUsage
	}
	explicit := false
	fl.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "c" })
	path, err := filepath.Abs(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "neuralisfs reload: %v\n", err)
		return exitError
	}
	// The socket is found from the file's state_dir even when the file
	// has errors: the daemon is the one to refuse it (and log why).
	sock := filepath.Join(mounts.StateDirOf(path), control.SocketName)
	if cfg, err := mounts.Load(path); err == nil {
		sock = socketPath(cfg)
	}
	req := control.Request{Op: "reload"}
	if explicit {
		req.Config = path
	}
	var rep daemon.ReloadReply
	if err := control.Call(sock, req, &rep); err != nil {
		fmt.Fprintf(stderr, "neuralisfs reload: %v\n", err)
		return exitError
	}
	switch {
	case len(rep.Changes) == 0:
		fmt.Fprintf(stdout, "reloaded %s: no change\n", rep.File)
	default:
		fmt.Fprintf(stdout, "reloaded %s:\n", rep.File)
		for _, c := range rep.Changes {
			fmt.Fprintf(stdout, "  %s\n", c)
		}
	}
	for _, k := range rep.Restart {
		fmt.Fprintf(stdout, "  %s changed: takes effect when the daemon is restarted\n", k)
	}
	if len(rep.StillOpen) > 0 {
		fmt.Fprintf(stdout, "open before the reload, not cut off (an open file cannot be revoked; end these processes to apply the new rules to them):\n")
		for _, l := range rep.StillOpen {
			fmt.Fprintf(stdout, "  %s\n", l)
		}
	}
	return exitOK
}
