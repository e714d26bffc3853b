package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/neuralis/neuralisfs/internal/audit"
	"github.com/neuralis/neuralisfs/internal/daemon"
	"github.com/neuralis/neuralisfs/policy"
)

func cmdPolicy(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "explain" && args[0] != "check") {
		fmt.Fprintln(stderr, "usage: neuralisfs policy explain URI --as PRINCIPAL [-c FILE] | neuralisfs policy check [-c FILE]")
		return exitUsage
	}
	sub := args[0]
	fl := flag.NewFlagSet("policy "+sub, flag.ContinueOnError)
	fl.SetOutput(stderr)
	cfgPath := fl.String("c", defaultConfig(), "config file")
	as := fl.String("as", "", "principal to decide for")
	if err := fl.Parse(interleave(args[1:])); err != nil {
		return exitUsage
	}
	cfg, ok := loadConfig(*cfgPath, stderr)
	if !ok {
		return exitError
	}
	set, err := policy.New(cfg.PolicyConfig(uint32(os.Geteuid())))
	if err != nil {
		printErrors(stderr, err)
		return exitError
	}
	switch sub {
	case "explain":
		if fl.NArg() != 1 || *as == "" {
			fmt.Fprintln(stderr, "usage: neuralisfs policy explain URI --as PRINCIPAL [-c FILE]")
			return exitUsage
		}
		e, err := set.Explain(fl.Arg(0), *as)
		if err != nil {
			fmt.Fprintf(stderr, "neuralisfs policy explain: %v\n", err)
			return exitError
		}
		fmt.Fprint(stdout, e.String())
		return exitOK
	default:
		findings := set.Lint()
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

// interleave moves flags after positional arguments to the front, so
// `explain URI --as agent` parses like `explain --as agent URI`.
func interleave(args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) > 1 && a[0] == '-' {
			flags = append(flags, a)
			if (a == "--as" || a == "-as" || a == "-c" || a == "--c" || a == "--to" || a == "-to") && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

func cmdAudit(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("audit", flag.ContinueOnError)
	fl.SetOutput(stderr)
	cfgPath := fl.String("c", defaultConfig(), "config file")
	follow := fl.Bool("follow", false, "keep printing new lines")
	if err := fl.Parse(args); err != nil {
		return exitUsage
	}
	cfg, ok := loadConfig(*cfgPath, stderr)
	if !ok {
		return exitError
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := audit.Follow(ctx, daemon.AuditPath(cfg), stdout, *follow); err != nil {
		fmt.Fprintf(stderr, "neuralisfs audit: %v\n", err)
		return exitError
	}
	return exitOK
}
