package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/internal/daemon"
	"github.com/neuralis/neuralisfs/internal/journal"
)

func cmdHistory(fl *flag.FlagSet) runner {
	cfgPath := configFlag(fl)
	asJSON := jsonFlag(fl)
	return func(args []string, stdout, stderr io.Writer) int {
		if len(args) != 1 {
			fmt.Fprintln(stderr, "usage: neuralisfs history URI [--json] [-c FILE]   (a folder's uri ends in /)")
			return exitUsage
		}
		cfg, ok := loadConfig(*cfgPath, stderr)
		if !ok {
			return exitError
		}
		var rep daemon.HistoryReply
		if err := control.Call(socketPath(cfg), control.Request{Op: "history", URI: args[0]}, &rep); err != nil {
			fmt.Fprintf(stderr, "neuralisfs history: %v\n", err)
			return exitError
		}
		var dropped journal.Dropped
		if rep.Dropped != nil {
			dropped = *rep.Dropped
		}
		if *asJSON {
			// stdout stays the records alone, as ever; the note that the
			// history is incomplete goes beside it.
			if note := dropped.Note(); note != "" {
				fmt.Fprintln(stderr, note)
			}
			return printJSON(stdout, rep.Records)
		}
		stdout.Write(daemon.FormatHistory(rep.Records, dropped))
		return exitOK
	}
}

func cmdRevert(fl *flag.FlagSet) runner {
	cfgPath := configFlag(fl)
	to := fl.String("to", "", "the record `ID` to revert (default: the newest)")
	return func(args []string, stdout, stderr io.Writer) int {
		if len(args) != 1 {
			fmt.Fprintln(stderr, "usage: neuralisfs revert URI [--to ID] [-c FILE]")
			return exitUsage
		}
		cfg, ok := loadConfig(*cfgPath, stderr)
		if !ok {
			return exitError
		}
		var rep daemon.RevertReply
		if err := control.Call(socketPath(cfg), control.Request{Op: "revert", URI: args[0], ID: *to}, &rep); err != nil {
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
}
