package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/neuralis/neuralisfs/index"
	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/internal/daemon"
	"github.com/neuralis/neuralisfs/mounts"
)

func socketPath(cfg *mounts.Config) string {
	return filepath.Join(cfg.StateDirPath(), control.SocketName)
}

func cmdSearch(fl *flag.FlagSet) runner {
	cfgPath := configFlag(fl)
	source := fl.String("source", "", "only this source (`SLUG`)")
	path := fl.String("path", "", "only paths matching this `GLOB` (doublestar)")
	ext := fl.String("ext", "", "only files with this extension (`EXT`)")
	limit := fl.Int("limit", 20, "at most `N` files")
	asJSON := jsonFlag(fl)
	return func(args []string, stdout, stderr io.Writer) int {
		if len(args) == 0 {
			fmt.Fprintln(stderr, "usage: neuralisfs search [--source S] [--path GLOB] [--ext E] [--limit N] [--json] QUERY")
			return exitUsage
		}
		q := strings.Join(args, " ")
		cfg, ok := loadConfig(*cfgPath, stderr)
		if !ok {
			return exitError
		}
		var res index.Result
		err := control.Call(socketPath(cfg), control.Request{Op: "search", Query: q, Source: *source, Path: *path, Ext: *ext, Limit: *limit}, &res)
		if err != nil {
			fmt.Fprintf(stderr, "neuralisfs search: %v\n", err)
			return exitError
		}
		if *asJSON {
			return printJSON(stdout, res)
		}
		stdout.Write(index.FormatText(res))
		return exitOK
	}
}

func cmdStatus(fl *flag.FlagSet) runner {
	cfgPath := configFlag(fl)
	asJSON := jsonFlag(fl)
	return func(args []string, stdout, stderr io.Writer) int {
		if len(args) != 0 {
			fmt.Fprintln(stderr, "usage: neuralisfs status [--json] [-c FILE]")
			return exitUsage
		}
		cfg, ok := loadConfig(*cfgPath, stderr)
		if !ok {
			return exitError
		}
		var rep daemon.StatusReply
		if err := control.Call(socketPath(cfg), control.Request{Op: "status"}, &rep); err != nil {
			fmt.Fprintf(stderr, "neuralisfs status: %v\n", err)
			return exitError
		}
		if *asJSON {
			return printJSON(stdout, rep)
		}
		for _, m := range rep.Mounts {
			fmt.Fprintf(stdout, "mount: %s over %s\n", m.Mountpoint, m.Transport)
		}
		for _, mp := range rep.Unmounted {
			fmt.Fprintf(stdout, "view: %s is not mounted (neuralisfs reload mounts it again)\n", mp)
		}
		switch {
		case rep.IndexOn && rep.Partial:
			fmt.Fprintf(stdout, "index: in %s (its size and queue count files hidden from you, so they are not shown)\n", rep.IndexDir)
		case rep.IndexOn:
			fmt.Fprintf(stdout, "index: %.1f MB in %s, %d queued, %d batches\n", rep.IndexMB, rep.IndexDir, rep.Queued, rep.Batches)
		default:
			fmt.Fprintln(stdout, "index: off ([index] enabled = false)")
		}
		if !rep.JournalOn {
			fmt.Fprintln(stdout, "journal: off ([journal] enabled = false)")
		}
		fmt.Fprintf(stdout, "%-12s %-10s %-12s %8s %10s %6s %-20s %s\n", "SOURCE", "KIND", "STATUS", "DOCS", "BYTES", "QUEUE", "LAST INDEXED", "FRESHNESS (median/worst of last 100)")
		for _, s := range rep.Sources {
			st := s.Status.State
			if s.Status.Code != "" {
				st += " " + s.Status.Code
			}
			docs, bytes, queued, last, fresh := "-", "-", "-", "-", "-"
			if s.Index != nil {
				docs, bytes = fmt.Sprint(s.Index.Documents), fmt.Sprint(s.Index.Bytes)
				if !s.Partial {
					queued = fmt.Sprint(s.Index.Queued)
				}
				if !s.Index.LastIndexed.IsZero() {
					last = s.Index.LastIndexed.Format(time.DateTime)
				}
				if s.Index.FreshnessWorst > 0 {
					fresh = fmt.Sprintf("%v / %v", s.Index.FreshnessMedian.Round(time.Millisecond), s.Index.FreshnessWorst.Round(time.Millisecond))
				}
			}
			fmt.Fprintf(stdout, "%-12s %-10s %-12s %8s %10s %6s %-20s %s\n", s.Slug, s.Kind, st, docs, bytes, queued, last, fresh)
			if s.Status.Reason != "" {
				fmt.Fprintf(stdout, "  reason: %s\n", s.Status.Reason)
			}
			if s.Identity != "" {
				fmt.Fprintf(stdout, "  identity: %s\n", s.Identity)
			}
		}
		return exitOK
	}
}

// sourcesReport is one source in `neuralisfs sources`.
type sourcesReport struct {
	Slug     string        `json:"slug"`
	Kind     string        `json:"kind"`
	Status   mounts.Status `json:"status"`
	Identity string        `json:"identity,omitempty"`
	Admitted []index.File  `json:"admitted"`
	Skipped  []index.Skip  `json:"skipped"`
}

// cmdSources prints, without a daemon and without reading content into
// anything but a hash, what the index admits and skips in each source.
func cmdSources(fl *flag.FlagSet) runner {
	cfgPath := configFlag(fl)
	asJSON := jsonFlag(fl)
	return func(args []string, stdout, stderr io.Writer) int {
		if len(args) != 0 {
			fmt.Fprintln(stderr, "usage: neuralisfs sources [--json] [-c FILE]")
			return exitUsage
		}
		cfg, ok := loadConfig(*cfgPath, stderr)
		if !ok {
			return exitError
		}
		var out []sourcesReport
		for _, sc := range cfg.Sources {
			s := mounts.NewSource(sc)
			s.Refresh()
			rep := sourcesReport{Slug: sc.Slug, Kind: sc.Kind, Status: s.Status()}
			if is, ok := daemon.IndexSource(s, cfg); ok && rep.Status.State != mounts.Unavailable {
				r, err := index.Scan(context.Background(), is)
				if err != nil {
					rep.Status = mounts.Status{State: mounts.Degraded, Reason: "scan: " + err.Error()}
				} else {
					rep.Admitted, rep.Skipped = r.Admitted, r.Skipped
					if sc.Kind == mounts.KindLocal {
						rep.Identity = r.Identity
					}
				}
			}
			if id := gitIdentity(s); id != "" {
				rep.Identity = id
			}
			s.Close()
			out = append(out, rep)
		}
		if *asJSON {
			return printJSON(stdout, out)
		}
		for _, r := range out {
			st := r.Status.State
			if r.Status.Code != "" {
				st += " " + r.Status.Code
			}
			fmt.Fprintf(stdout, "%s (%s) %s", r.Slug, r.Kind, st)
			if r.Status.Reason != "" {
				fmt.Fprintf(stdout, ": %s", r.Status.Reason)
			}
			fmt.Fprintln(stdout)
			if r.Identity != "" {
				fmt.Fprintf(stdout, "  identity: %s\n", r.Identity)
			}
			var total int64
			for _, f := range r.Admitted {
				total += f.Size
			}
			fmt.Fprintf(stdout, "  admitted: %d files, %d bytes\n", len(r.Admitted), total)
			for _, f := range r.Admitted {
				fmt.Fprintf(stdout, "    %s\t%d\n", f.Path, f.Size)
			}
			sort.Slice(r.Skipped, func(i, j int) bool { return r.Skipped[i].Path < r.Skipped[j].Path })
			fmt.Fprintf(stdout, "  skipped: %d\n", len(r.Skipped))
			for _, s := range r.Skipped {
				fmt.Fprintf(stdout, "    %s\t%s\n", s.Path, s.Reason)
			}
		}
		return exitOK
	}
}

func gitIdentity(s *mounts.Source) string {
	return daemon.GitIdentity(s)
}
