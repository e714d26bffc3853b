package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"os/signal"
	"syscall"

	"github.com/neuralis/neuralisfs/internal/audit"
	"github.com/neuralis/neuralisfs/internal/daemon"
	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// policySet loads the config and compiles its policy.
func policySet(cfgPath string, stderr io.Writer) (*mounts.Config, *policy.Set, bool) {
	cfg, ok := loadConfig(cfgPath, stderr)
	if !ok {
		return nil, nil, false
	}
	set, err := policy.New(cfg.PolicyConfig(uint32(os.Geteuid())))
	if err != nil {
		printErrors(stderr, err)
		return nil, nil, false
	}
	return cfg, set, true
}

func cmdPolicyExplain(fl *flag.FlagSet) runner {
	cfgPath := configFlag(fl)
	as := fl.String("as", "", "`PRINCIPAL` to decide for")
	return func(args []string, stdout, stderr io.Writer) int {
		if len(args) != 1 || *as == "" {
			fmt.Fprintln(stderr, "usage: neuralisfs policy explain URI --as PRINCIPAL [-c FILE]")
			return exitUsage
		}
		_, set, ok := policySet(*cfgPath, stderr)
		if !ok {
			return exitError
		}
		e, err := set.Explain(args[0], *as)
		if err != nil {
			fmt.Fprintf(stderr, "neuralisfs policy explain: %v\n", err)
			return exitError
		}
		fmt.Fprint(stdout, e.String())
		return exitOK
	}
}

// finding is one lint finding in `policy check --json`.
type finding struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

func cmdPolicyCheck(fl *flag.FlagSet) runner {
	cfgPath := configFlag(fl)
	asJSON := jsonFlag(fl)
	return func(args []string, stdout, stderr io.Writer) int {
		if len(args) != 0 {
			fmt.Fprintln(stderr, "usage: neuralisfs policy check [--json] [-c FILE]")
			return exitUsage
		}
		cfg, set, ok := policySet(*cfgPath, stderr)
		if !ok {
			return exitError
		}
		findings := set.Lint()
		if *asJSON {
			out := []finding{}
			for _, f := range findings {
				out = append(out, finding{File: f.File, Line: f.Line, Message: f.Msg})
			}
			if code := printJSON(stdout, out); code != exitOK || len(findings) == 0 {
				return code
			}
			return exitError
		}
		for _, f := range findings {
			fmt.Fprintln(stdout, f.String())
		}
		if len(findings) > 0 {
			fmt.Fprintf(stderr, "neuralisfs policy check: %d finding(s)\n", len(findings))
			return exitError
		}
		fmt.Fprintf(stdout, "%s: %d rules, no findings\n", cfg.File, len(cfg.Rules))
		return exitOK
	}
}

func cmdAudit(fl *flag.FlagSet) runner {
	cfgPath := configFlag(fl)
	follow := fl.Bool("follow", false, "keep printing new lines")
	asJSON := fl.Bool("json", false, "print one JSON array of the records ([] when none); with --follow, the log's JSON lines as they come")
	decisions := fl.Bool("decisions", false, "print audit.decisions.log instead: review decisions and reloads, kept apart from the denials an agent can flood")
	return func(args []string, stdout, stderr io.Writer) int {
		if len(args) != 0 {
			fmt.Fprintln(stderr, "usage: neuralisfs audit [--follow] [--json] [--decisions] [-c FILE]")
			return exitUsage
		}
		cfg, ok := loadConfig(*cfgPath, stderr)
		if !ok {
			return exitError
		}
		path := daemon.AuditPath(cfg)
		if *decisions {
			path = audit.DecisionsPath(path)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		if *asJSON && !*follow {
			var buf bytes.Buffer
			if err := audit.Follow(ctx, path, &buf, false); err != nil && !errors.Is(err, iofs.ErrNotExist) {
				fmt.Fprintf(stderr, "neuralisfs audit: %v\n", err)
				return exitError
			}
			stdout.Write(jsonLinesArray(buf.Bytes()))
			return exitOK
		}
		if err := audit.Follow(ctx, path, stdout, *follow); err != nil {
			fmt.Fprintf(stderr, "neuralisfs audit: %v\n", err)
			return exitError
		}
		return exitOK
	}
}

// jsonLinesArray turns JSON lines into one JSON array, one element a line.
func jsonLinesArray(lines []byte) []byte {
	var b bytes.Buffer
	b.WriteString("[")
	n := 0
	for _, l := range bytes.Split(lines, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) == 0 {
			continue
		}
		if n > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n  ")
		b.Write(l)
		n++
	}
	if n > 0 {
		b.WriteString("\n")
	}
	b.WriteString("]\n")
	return b.Bytes()
}
