package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/neuralis/neuralisfs/internal/collect"
	"github.com/neuralis/neuralisfs/internal/control"
)

// listFlag is a flag that may be given more than once.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// cmdCollect is `collect`: what a principal would be given (internal/collect).
func cmdCollect(fl *flag.FlagSet) runner {
	cfgPath := configFlag(fl)
	as := fl.String("as", "", "the `PRINCIPAL` whose collection it is (default: yours; another's needs root or the daemon's uid)")
	var sources listFlag
	fl.Var(&sources, "source", "only source `SLUG` (repeatable)")
	maxFile := fl.Int64("max-file-bytes", collect.DefaultMaxFileBytes, "largest file collected, in `BYTES`")
	maxBytes := fl.Int64("max-bytes", collect.DefaultMaxBytes, "total content bound, in `BYTES`")
	maxFiles := fl.Int("max-files", collect.DefaultMaxFiles, "most files collected (`N`)")
	asJSON := jsonFlag(fl)
	framed := fl.Bool("framed", false, "print the content, each file framed by BEGIN/END lines (for a model)")
	return func(args []string, stdout, stderr io.Writer) int {
		if len(args) > 0 || *asJSON && *framed || *maxFile <= 0 || *maxBytes <= 0 || *maxFiles <= 0 {
			fmt.Fprintln(stderr, "usage: neuralisfs collect [--as PRINCIPAL] [--source S ...] [--max-file-bytes N] [--max-bytes N] [--max-files N] [--json | --framed] [-c FILE] (bounds are positive)")
			return exitUsage
		}
		cfg, ok := loadConfig(*cfgPath, stderr)
		if !ok {
			return exitError
		}
		req := control.Request{Op: "collect", Principal: *as, Sources: sources, MaxFileBytes: *maxFile, MaxBytes: *maxBytes, MaxFiles: *maxFiles}
		var c collect.Collection
		if err := control.Call(socketPath(cfg), req, &c); err != nil {
			fmt.Fprintf(stderr, "neuralisfs collect: %v\n", err)
			return exitError
		}
		switch {
		case *asJSON:
			stdout.Write(collect.JSON(&c))
		case *framed:
			if err := collect.Frame(stdout, &c); err != nil {
				fmt.Fprintf(stderr, "neuralisfs collect: %v\n", err)
				return exitError
			}
		default:
			printCollection(stdout, &c)
		}
		return exitOK
	}
}

func printCollection(w io.Writer, c *collect.Collection) {
	state := "complete"
	if !c.Complete {
		state = "INCOMPLETE"
	}
	fmt.Fprintf(w, "collection of %s: %d files, %d bytes, %s, %s\n", c.Principal, len(c.Files), c.Bytes, c.Digest, state)
	for _, in := range c.Incomplete {
		fmt.Fprintf(w, "incomplete: %s: %s\n", in.Source, in.Reason)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range c.Files {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", f.Class, f.Size, quoteIfOdd(f.URI))
	}
	tw.Flush()
	if len(c.Excluded) > 0 {
		fmt.Fprintln(w, "excluded:")
		for _, e := range c.Excluded {
			fmt.Fprintf(w, "  %s: %s\n", quoteIfOdd(e.URI), e.Reason)
		}
	}
}

// quoteIfOdd quotes a uri holding a control character, so one line stays one.
func quoteIfOdd(u string) string {
	if strings.ContainsAny(u, "\n\r\t") {
		return fmt.Sprintf("%q", u)
	}
	return u
}
