package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/neuralis/neuralisfs/internal/doctor"
	"github.com/neuralis/neuralisfs/mounts"
)

func cmdDoctor(fl *flag.FlagSet) runner {
	cfgPath := configFlag(fl)
	asJSON := jsonFlag(fl)
	return func(args []string, stdout, stderr io.Writer) int {
		if len(args) != 0 {
			fmt.Fprintln(stderr, "usage: neuralisfs doctor [--json] [-c FILE]")
			return exitUsage
		}
		path := *cfgPath
		if path == "" {
			path = defaultConfig()
		}
		cfg, err := mounts.Load(path)
		checks := doctor.Run(doctor.Host(), cfg, path, err)
		if *asJSON {
			printJSON(stdout, checks)
		} else {
			for _, c := range checks {
				fmt.Fprintln(stdout, c)
			}
		}
		if doctor.Failed(checks) {
			return exitError
		}
		return exitOK
	}
}
