package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/internal/daemon"
)

const reviewUsage = `usage: neuralisfs review list [--principal P] [--json] [-c FILE]
       neuralisfs review diff [ID|URI ...] [--principal P] [-c FILE]
       neuralisfs review approve ID|URI ... | --all [--principal P] [--force] [-c FILE]
       neuralisfs review reject ID|URI ... | --all [--principal P] [-c FILE]`

func cmdReview(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, reviewUsage)
		return exitUsage
	}
	sub := args[0]
	switch sub {
	case "list", "diff", "approve", "reject":
	default:
		fmt.Fprintf(stderr, "neuralisfs review: unknown command %q\n%s\n", sub, reviewUsage)
		return exitUsage
	}
	fl := flag.NewFlagSet("review "+sub, flag.ContinueOnError)
	fl.SetOutput(stderr)
	cfgPath := fl.String("c", defaultConfig(), "config file")
	principal := fl.String("principal", "", "only this principal's held changes")
	asJSON := fl.Bool("json", false, "print JSON")
	all := fl.Bool("all", false, "every held change listed (approve, reject)")
	force := fl.Bool("force", false, "approve even where the backing file changed since (approve)")
	if err := fl.Parse(interleaveTaking(args[1:], "c", "principal")); err != nil {
		return exitUsage
	}
	if (sub == "approve" || sub == "reject") && fl.NArg() == 0 && !*all {
		fmt.Fprintln(stderr, reviewUsage)
		return exitUsage
	}
	if sub == "list" && fl.NArg() > 0 {
		fmt.Fprintln(stderr, reviewUsage)
		return exitUsage
	}
	cfg, ok := loadConfig(*cfgPath, stderr)
	if !ok {
		return exitError
	}
	req := control.Request{Op: "review-" + sub, Principal: *principal, IDs: fl.Args(), All: *all || sub == "diff" && fl.NArg() == 0, Force: *force}
	var rep daemon.ReviewReply
	if err := control.Call(socketPath(cfg), req, &rep); err != nil {
		fmt.Fprintf(stderr, "neuralisfs review %s: %v\n", sub, err)
		return exitError
	}
	if *asJSON {
		if sub == "diff" {
			return printJSON(stdout, rep)
		}
		return printJSON(stdout, rep.Changes)
	}
	switch sub {
	case "list":
		if len(rep.Changes) == 0 {
			fmt.Fprintln(stdout, "no held changes")
			return exitOK
		}
		printChanges(stdout, rep.Changes)
	case "diff":
		io.WriteString(stdout, rep.Diff)
	case "approve", "reject":
		verb := map[string]string{"approve": "approved", "reject": "rejected"}[sub]
		for _, c := range rep.Changes {
			fmt.Fprintf(stdout, "%s %s %s %s\n", verb, c.ID, c.Op, describeURI(c))
		}
	}
	return exitOK
}

// printChanges prints held changes grouped by principal.
func printChanges(w io.Writer, cs []daemon.ReviewItem) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	last := ""
	for _, c := range cs {
		if c.Principal != last {
			if last != "" {
				fmt.Fprintln(tw)
			}
			fmt.Fprintf(tw, "%s:\n", c.Principal)
			last = c.Principal
		}
		note := ""
		if len(c.Inside) > 0 {
			note = fmt.Sprintf(" (+%d inside)", len(c.Inside))
		}
		if c.Conflict != "" {
			note += "  CONFLICT: backing file changed"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s%s\t%d\t%s ago\n", c.ID, c.Op, describeURI(c), note, c.Size, c.Age)
	}
	tw.Flush()
}

func describeURI(c daemon.ReviewItem) string {
	if c.Op == "rename" {
		return c.Slug + "://" + c.From + " -> " + quoteCtl(c.URI)
	}
	return quoteCtl(c.URI)
}

// quoteCtl quotes a uri with control characters so a file name cannot
// forge a line.
func quoteCtl(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// interleaveTaking moves flags before positional arguments (the flag
// package stops at the first positional one); the flags named in takes
// take a value.
func interleaveTaking(args []string, takes ...string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) > 1 && a[0] == '-' {
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			for _, t := range takes {
				if name == t && !strings.Contains(a, "=") && i+1 < len(args) {
					flags = append(flags, args[i+1])
					i++
					break
				}
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}
