package daemon

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
)

type devIno struct{ dev, ino uint64 }

// ancestry is the (device, inode) of dir and every folder above it, so
// "is X inside Y" is decided by identity, not by text (DESIGN.md §5): a
// symlinked or bind-mounted path cannot hide the nesting.
func ancestry(dir string) map[devIno]string {
	out := map[devIno]string{}
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			out[devIno{st.Dev, st.Ino}] = p
		}
		if p == "/" || p == "." {
			return out
		}
	}
}

// checkNesting refuses a mountpoint or state_dir inside a source (the
// daemon would serve its own mount or its own journal and index through
// the mount), and a source inside a mountpoint.
func checkNesting(cfg *mounts.Config, mountpoints []string) error {
	type place struct{ what, path string }
	var places []place
	for _, mp := range mountpoints {
		places = append(places, place{"mountpoint", mp})
	}
	places = append(places, place{"state_dir", cfg.StateDirPath()})
	for _, s := range cfg.Sources {
		var st unix.Stat_t
		if unix.Stat(s.Path, &st) != nil {
			continue // a missing source is checked when it appears
		}
		src := devIno{st.Dev, st.Ino}
		for _, pl := range places {
			if _, inside := ancestry(pl.path)[src]; inside {
				return fmt.Errorf("%s:%d: %s %s is inside source %q (%s); move it out of the source", cfg.File, s.Line, pl.what, pl.path, s.Slug, s.Path)
			}
		}
		for _, mp := range mountpoints {
			var mst unix.Stat_t
			if unix.Stat(mp, &mst) != nil {
				continue
			}
			if _, inside := ancestry(s.Path)[devIno{mst.Dev, mst.Ino}]; inside {
				return fmt.Errorf("%s:%d: source %q (%s) is inside the mountpoint %s", cfg.File, s.Line, s.Slug, s.Path, mp)
			}
		}
	}
	return nil
}
