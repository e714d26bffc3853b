package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/internal/daemon"
	"github.com/neuralis/neuralisfs/internal/rawname"
)

// reviewCmd is `review list|diff|approve|reject`.
func reviewCmd(sub string) func(fl *flag.FlagSet) runner {
	return func(fl *flag.FlagSet) runner {
		cfgPath := configFlag(fl)
		principal := fl.String("principal", "", "only this `PRINCIPAL`'s held changes")
		var asJSON, all, force *bool
		asJSON = jsonFlag(fl)
		if sub == "approve" || sub == "reject" {
			all = fl.Bool("all", false, "every held change listed")
		}
		if sub == "approve" {
			force = fl.Bool("force", false, "approve even where the backing file changed since")
		}
		return func(args []string, stdout, stderr io.Writer) int {
			usage := "usage: neuralisfs review " + sub
			switch {
			case sub == "list" && len(args) > 0:
				fmt.Fprintln(stderr, usage+" [--principal P] [--json] [-c FILE]")
				return exitUsage
			case (sub == "approve" || sub == "reject") && len(args) == 0 && !*all:
				fmt.Fprintln(stderr, usage+" ID|URI ... | --all [--principal P] [-c FILE]")
				return exitUsage
			}
			cfg, ok := loadConfig(*cfgPath, stderr)
			if !ok {
				return exitError
			}
			req := control.Request{Op: "review-" + sub, Principal: *principal, IDs: args, All: sub == "diff" && len(args) == 0}
			if all != nil {
				req.All = *all
			}
			if force != nil {
				req.Force = *force
			}
			var rep daemon.ReviewReply
			if err := control.Call(socketPath(cfg), req, &rep); err != nil {
				fmt.Fprintf(stderr, "neuralisfs review %s: %v\n", sub, err)
				return exitError
			}
			// A layer whose source cannot be opened is in no list: say
			// so, beside what is printed, so that an empty list is not
			// read as nothing held.
			for _, u := range rep.Unlisted {
				fmt.Fprintf(stderr, "neuralisfs review %s: %s\n", sub, u)
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
					if len(rep.Unlisted) > 0 {
						fmt.Fprintln(stdout, "no held changes listed")
						return exitOK
					}
					fmt.Fprintln(stdout, "no held changes")
					return exitOK
				}
				printChanges(stdout, rep.Changes)
			case "diff":
				io.WriteString(stdout, rep.Diff)
				if len(rep.Changes) > 0 {
					// An id names the content shown; --all and a uri take
					// what is held when approve runs, which the principal
					// may have changed since this diff.
					// Not those this reader may not approve, or that moved
					// while read, nor those that go with one (rep.Exact).
					if len(rep.Exact) > 0 {
						fmt.Fprintf(stdout, "# to approve exactly what is shown above: neuralisfs review approve %s\n", strings.Join(rep.Exact, " "))
					}
				}
			default:
				verb := map[string]string{"approve": "approved", "reject": "rejected"}[sub]
				for _, c := range rep.Changes {
					fmt.Fprintf(stdout, "%s %s %s %s\n", verb, c.ID, c.Op, describeURI(c))
				}
				for _, c := range rep.Left {
					if c.Busy != "" {
						fmt.Fprintf(stdout, "left held %s %s %s (%s; %s it once it is closed)\n", c.ID, c.Op, describeURI(c), c.Busy, sub)
						continue
					}
					if c.Unseen {
						fmt.Fprintf(stdout, "left held %s %s %s (it holds names or content not shown to you: reject it, or have a reviewer who can see them approve it)\n", c.ID, c.Op, describeURI(c))
						continue
					}
					if strings.Contains(c.Why, "not shown to you") {
						fmt.Fprintf(stdout, "left held %s %s %s (%s: reject it, or have a reviewer who can see them approve them together)\n", c.ID, c.Op, describeURI(c), c.Why)
						continue
					}
					if c.Why != "" {
						fmt.Fprintf(stdout, "left held %s %s %s (%s; read review diff, then approve it by id with --force, or reject it)\n", c.ID, c.Op, describeURI(c), c.Why)
						continue
					}
					why := "approved with one git runs commands from"
					if len(c.GitRuns) > 0 {
						why = "git runs commands from " + strings.Join(quoteAll(c.GitRuns), ", ")
					}
					fmt.Fprintf(stdout, "left held %s %s %s (%s: read review diff, then approve it by id or uri)\n", c.ID, c.Op, describeURI(c), why)
				}
			}
			return exitOK
		}
	}
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
		if c.Unseen {
			note += " (holds names or content not shown to you)"
		}
		if len(c.Links) > 0 {
			note += fmt.Sprintf(" (hard link: +%d names, approved together)", len(c.Links))
		}
		if c.Conflict != "" {
			note += "  CONFLICT: backing file changed"
		}
		if len(c.GitRuns) > 0 {
			note += "  GIT RUNS IT: approve by id or uri"
		}
		age := "-" // no time recorded
		if c.Age != "" {
			age = c.Age + " ago"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s%s\t%d\t%s\n", c.ID, c.Op, describeURI(c), note, c.Size, age)
	}
	tw.Flush()
}

func quoteAll(uris []string) []string {
	out := make([]string, len(uris))
	for i, u := range uris {
		out[i] = quoteCtl(u)
	}
	return out
}

func describeURI(c daemon.ReviewItem) string {
	if c.Op == "rename" {
		return quoteCtl(c.Slug+"://"+c.From) + " -> " + quoteCtl(c.URI)
	}
	return quoteCtl(c.URI)
}

// quoteCtl quotes a uri with control characters (or bidirectional
// controls, characters that show as nothing or as a space, or bytes that
// are not UTF-8: rawname.Hidden) so a file name cannot forge a line,
// reorder one or read as another name.
func quoteCtl(s string) string {
	if rawname.HasHidden(s) {
		return rawname.Quote(s)
	}
	return s
}
