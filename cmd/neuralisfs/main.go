// Command neuralisfs mounts configured sources under one tree, decides every
// syscall against a per-path policy, and keeps a full-text index fresh.
//
// It is thin: it parses flags, loads the config and calls the packages.
// The command table below is the one description of the CLI: run
// dispatches on it, and the usage text, `neuralisfs completion` and
// `neuralisfs man` are generated from it and from each command's flags.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/neuralis/neuralisfs/internal/watchdog"
	"github.com/neuralis/neuralisfs/mounts"
)

// exit codes
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// runner runs a command with its positional arguments, once its flags
// are parsed.
type runner func(args []string, stdout, stderr io.Writer) int

// command is one subcommand.
type command struct {
	name    string // "mount", "policy explain"
	aliases []string
	// args is the synopsis of the positional arguments (and of flags that
	// are required, written as in "URI --as PRINCIPAL").
	args    string
	summary string
	// setup defines the command's flags on fl and returns the command,
	// which reads them once they are parsed. The generators call it on a
	// throwaway FlagSet to learn the flags.
	setup func(fl *flag.FlagSet) runner
	// raw, instead of setup, is a command that parses its own arguments.
	raw func(args []string, stdout, stderr io.Writer) int
	// complete says what positional arguments complete to: "dir", "file",
	// or words separated by spaces.
	complete string
}

// commands is the CLI. It is set in init because the generators, which
// some commands are, read it.
var commands []*command

func init() {
	commands = []*command{
		{name: "mount", args: "[MOUNTPOINT]", summary: "mount the sources and serve in the foreground until SIGINT/SIGTERM", setup: cmdMount, complete: "dir"},
		{name: "reload", summary: "re-read the config in the running daemon (as SIGHUP does)", raw: cmdReload},
		{name: "unmount", aliases: []string{"umount"}, args: "MOUNTPOINT", summary: "unmount (lazily when busy, saying so)", setup: cmdUnmount, complete: "dir"},
		{name: "config validate", summary: "check a config file and print every problem", setup: cmdValidate},
		{name: "policy explain", args: "URI --as PRINCIPAL", summary: "print the read/write/exec decisions and the deciding rules", setup: cmdPolicyExplain},
		{name: "policy check", summary: "lint the rules (unknown slugs or principals, shadowed rules)", setup: cmdPolicyCheck},
		{name: "audit", summary: "print the audit log of denied operations", setup: cmdAudit},
		{name: "search", args: "QUERY", summary: "search the running daemon's index (decided for your uid)", setup: cmdSearch},
		{name: "status", summary: "sources, index size, queue, freshness of the running daemon", setup: cmdStatus},
		{name: "sources", summary: "what the index admits and skips in each source (no daemon needed)", setup: cmdSources},
		{name: "collect", summary: "what a principal would be given: admitted files ranked within budgets, exclusions with reasons, a digest", setup: cmdCollect},
		{name: "history", args: "URI", summary: "journaled versions of a file (or of a folder's files: URI ends in /)", setup: cmdHistory},
		{name: "revert", args: "URI", summary: "restore a file to its state before a journal record", setup: cmdRevert},
		{name: "review list", summary: "held changes waiting for review, grouped by principal", setup: reviewCmd("list")},
		{name: "review diff", args: "[ID|URI ...]", summary: "the diffs of held changes (all of them when none is named)", setup: reviewCmd("diff")},
		{name: "review approve", args: "ID|URI ...", summary: "apply held changes to the backing files (journaled; --all for every one listed)", setup: reviewCmd("approve")},
		{name: "review reject", args: "ID|URI ...", summary: "drop held changes, leaving the backing files as they are", setup: reviewCmd("reject")},
		{name: "mcp", summary: "an MCP server on stdin/stdout, answered by the running daemon for your uid", setup: cmdMCP},
		{name: "doctor", summary: "check what makes mounts fail or slow, one line each with the fix", setup: cmdDoctor},
		{name: "completion", args: "bash|zsh|fish", summary: "print the shell completion script", setup: cmdCompletion, complete: "bash zsh fish"},
		{name: "man", summary: "print the man page (roff)", setup: cmdMan},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return exitUsage
	}
	if args[0] == watchdog.Command {
		// Hidden: the process `neuralisfs mount` starts to watch itself.
		return watchdog.Main(args[1:], stdout, stderr)
	}
	if a := args[0]; a == "-h" || a == "--help" || a == "help" {
		fmt.Fprint(stdout, usage())
		return exitOK
	}
	c, rest := findCommand(args)
	if c == nil {
		if group := groupOf(args[0]); len(group) > 0 {
			fmt.Fprintf(stderr, "usage:\n")
			for _, g := range group {
				fmt.Fprintf(stderr, "  neuralisfs %s\n", synopsis(g))
			}
			return exitUsage
		}
		if isHelperCall(args) {
			return mountHelper(args, stdout, stderr)
		}
		fmt.Fprintf(stderr, "neuralisfs: unknown command %q\n\n%s", args[0], usage())
		return exitUsage
	}
	if c.raw != nil {
		return c.raw(rest, stdout, stderr)
	}
	fl := newFlagSet(c)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: neuralisfs %s\n", synopsis(c))
		fl.PrintDefaults()
	}
	r := c.setup(fl)
	if err := fl.Parse(interleave(fl, rest)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	return r(fl.Args(), stdout, stderr)
}

func newFlagSet(c *command) *flag.FlagSet {
	return flag.NewFlagSet("neuralisfs "+c.name, flag.ContinueOnError)
}

// findCommand finds the command args start with: one word, or two for a
// group ("policy explain").
func findCommand(args []string) (*command, []string) {
	for _, c := range commands {
		words := strings.Fields(c.name)
		if len(args) < len(words) {
			continue
		}
		match := true
		for i, w := range words {
			if args[i] != w && !(i == 0 && len(words) == 1 && contains(c.aliases, args[i])) {
				match = false
				break
			}
		}
		if match {
			return c, args[len(words):]
		}
	}
	return nil, nil
}

// groupOf returns the commands named "<word> <sub>".
func groupOf(word string) []*command {
	var g []*command
	for _, c := range commands {
		if w := strings.Fields(c.name); len(w) == 2 && w[0] == word {
			g = append(g, c)
		}
	}
	return g
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// interleave moves flags after positional arguments to the front, so
// `explain URI --as agent` parses like `explain --as agent URI`. A flag
// takes the next argument as its value unless it is a bool flag or
// written as -flag=value; "--" ends the flags.
func interleave(fl *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fl.Lookup(name); f != nil && !isBool(f) && i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	return append(flags, pos...)
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// flagsOf returns c's flags in the order the generators print them.
func flagsOf(c *command) []*flag.Flag {
	if c.setup == nil {
		return nil
	}
	fl := newFlagSet(c)
	c.setup(fl)
	var out []*flag.Flag
	fl.VisitAll(func(f *flag.Flag) { out = append(out, f) })
	return out
}

// flagName is how the usage text writes a flag: -c, --json.
func flagName(f *flag.Flag) string {
	if len(f.Name) == 1 {
		return "-" + f.Name
	}
	return "--" + f.Name
}

// synopsis is "search [--ext E] ... QUERY".
func synopsis(c *command) string {
	parts := []string{c.name}
	for _, f := range flagsOf(c) {
		n := flagName(f)
		if strings.Contains(c.args, n+" ") {
			continue // required, written in args
		}
		if v, _ := flag.UnquoteUsage(f); v != "" && !isBool(f) {
			n += " " + v
		}
		parts = append(parts, "["+n+"]")
	}
	if c.args != "" {
		parts = append(parts, c.args)
	}
	return strings.Join(parts, " ")
}

func usage() string {
	var b strings.Builder
	b.WriteString("usage: neuralisfs <command> [flags] [args]\n\ncommands:\n")
	for _, c := range commands {
		s := synopsis(c)
		if len(s) > 40 {
			fmt.Fprintf(&b, "  %s\n  %40s %s\n", s, "", c.summary)
		} else {
			fmt.Fprintf(&b, "  %-40s %s\n", s, c.summary)
		}
	}
	b.WriteString(`
mount(8) and fstab: neuralisfs CONFIG MOUNTPOINT [-o OPTIONS] mounts in the
background and exits once the mount serves (see neuralisfs(1), MOUNT OPTIONS).

The config file defaults to ./config.toml, then $XDG_CONFIG_HOME/neuralisfs/config.toml.
`)
	return b.String()
}

// configFlag is the -c flag every command that reads the config takes.
func configFlag(fl *flag.FlagSet) *string {
	return fl.String("c", "", "config `FILE` (default ./config.toml, then $XDG_CONFIG_HOME/neuralisfs/config.toml)")
}

// jsonFlag is the --json flag of every listing command.
func jsonFlag(fl *flag.FlagSet) *bool {
	return fl.Bool("json", false, "print JSON (empty lists as [])")
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
	if path == "" {
		path = defaultConfig()
	}
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

func cmdValidate(fl *flag.FlagSet) runner {
	cfgPath := configFlag(fl)
	return func(args []string, stdout, stderr io.Writer) int {
		if len(args) != 0 {
			fmt.Fprintln(stderr, "usage: neuralisfs config validate [-c FILE]")
			return exitUsage
		}
		cfg, ok := loadConfig(*cfgPath, stderr)
		if !ok {
			return exitError
		}
		fmt.Fprintf(stdout, "%s: ok (%d sources, %d principals, %d rules, %d views)\n", cfg.File, len(cfg.Sources), len(cfg.Principals), len(cfg.Rules), len(cfg.Views))
		return exitOK
	}
}

// printJSON writes v as indented JSON, with every nil slice in it written
// as [] rather than null.
func printJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(emptyLists(v)); err != nil {
		return exitError
	}
	return exitOK
}
