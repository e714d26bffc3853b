package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/internal/mcpserver"
)

// cmdMCP serves MCP on stdin/stdout until the client closes stdin; every
// call is answered by the running daemon for this process's uid.
func cmdMCP(fl *flag.FlagSet) runner {
	cfgPath := configFlag(fl)
	return func(args []string, stdout, stderr io.Writer) int {
		if len(args) != 0 {
			fmt.Fprintln(stderr, "usage: neuralisfs mcp [-c FILE]   (an MCP server on stdin/stdout)")
			return exitUsage
		}
		cfg, ok := loadConfig(*cfgPath, stderr)
		if !ok {
			return exitError
		}
		sock := socketPath(cfg)
		call := func(req control.Request, out any) error { return control.Call(sock, req, out) }
		if err := call(control.Request{Op: "status"}, nil); err != nil {
			fmt.Fprintf(stderr, "neuralisfs mcp: %v\n", err)
			return exitError
		}
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		s := mcpserver.New("dev", call, log)
		if err := mcpserver.Serve(ctx, s, os.Stdin, os.Stdout); err != nil && ctx.Err() == nil {
			fmt.Fprintf(stderr, "neuralisfs mcp: %v\n", err)
			return exitError
		}
		return exitOK
	}
}
