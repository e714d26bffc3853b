package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/internal/daemon"
	"github.com/neuralis/neuralisfs/internal/journal"
)

func cmdHistory(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("history", flag.ContinueOnError)
	fl.SetOutput(stderr)
	cfgPath := fl.String("c", defaultConfig(), "config file")
	asJSON := fl.Bool("json", false, "print JSON")
	if err := fl.Parse(interleave(args)); err != nil {
		return exitUsage
	}
	if fl.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: neuralisfs history URI [--json] [-c FILE]   (a folder's uri ends in /)")
		return exitUsage
	}
	cfg, ok := loadConfig(*cfgPath, stderr)
	if !ok {
		return exitError
	}
	var recs []journal.Record
	if err := control.Call(socketPath(cfg), control.Request{Op: "history", URI: fl.Arg(0)}, &recs); err != nil {
		fmt.Fprintf(stderr, "neuralisfs history: %v\n", err)
		return exitError
	}
	if *asJSON {
		return printJSON(stdout, recs)
	}
	stdout.Write(daemon.FormatHistory(recs))
	return exitOK
}

func cmdRevert(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("revert", flag.ContinueOnError)
	fl.SetOutput(stderr)
	cfgPath := fl.String("c", defaultConfig(), "config file")
	to := fl.String("to", "", "the record to revert (default: the newest)")
	if err := fl.Parse(interleave(args)); err != nil {
		return exitUsage
	}
	if fl.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: neuralisfs revert URI [--to ID] [-c FILE]")
		return exitUsage
	}
	cfg, ok := loadConfig(*cfgPath, stderr)
	if !ok {
		return exitError
	}
	var rep daemon.RevertReply
	if err := control.Call(socketPath(cfg), control.Request{Op: "revert", URI: fl.Arg(0), ID: *to}, &rep); err != nil {
		fmt.Fprintf(stderr, "neuralisfs revert: %v\n", err)
		return exitError
	}
	if rep.Removed {
		fmt.Fprintf(stdout, "%s: removed (it did not exist before record %s)\n", rep.URI, rep.Record)
	} else {
		fmt.Fprintf(stdout, "%s: restored %d bytes from before record %s\n", rep.URI, rep.Bytes, rep.Record)
	}
	return exitOK
}
