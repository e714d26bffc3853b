package gitfs

import (
	"os"
	"path/filepath"
	"strings"

	formatcfg "github.com/go-git/go-git/v5/plumbing/format/config"
)

// gitConfig is the layered git configuration git itself would read for a
// repository: system, global, repository and (with extensions.worktreeConfig)
// per-worktree files, later layers winning. [include] directives are not
// followed.
type gitConfig struct {
	layers []*formatcfg.Config
	files  []string  // the files read, or that would have been
	keys   []fileKey // their stat data when read
}

// loadConfigFile decodes one git config file; a missing file is an empty layer.
func loadConfigFile(path string) (*formatcfg.Config, error) {
	return decodeConfig(openRegular(path, false))
}

// decodeConfig decodes the git config file f opened (the result of an
// open, passed as it came): a missing file is nil and no error.
func decodeConfig(f *os.File, err error) (*formatcfg.Config, error) {
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	c := formatcfg.New()
	if err := formatcfg.NewDecoder(f).Decode(c); err != nil {
		return nil, err
	}
	return c, nil
}

// userConfigPaths lists the system and global config files git reads, in
// order, following GIT_CONFIG_NOSYSTEM, GIT_CONFIG_SYSTEM, GIT_CONFIG_GLOBAL,
// XDG_CONFIG_HOME and HOME as git does.
func userConfigPaths() []string {
	var paths []string
	if os.Getenv("GIT_CONFIG_NOSYSTEM") == "" {
		if p := os.Getenv("GIT_CONFIG_SYSTEM"); p != "" {
			paths = append(paths, p)
		} else {
			paths = append(paths, "/etc/gitconfig")
		}
	}
	if p, ok := os.LookupEnv("GIT_CONFIG_GLOBAL"); ok {
		if p != "" {
			paths = append(paths, p)
		}
		return paths
	}
	if x := xdgConfigHome(); x != "" {
		paths = append(paths, filepath.Join(x, "git", "config"))
	}
	if h, err := os.UserHomeDir(); err == nil {
		paths = append(paths, filepath.Join(h, ".gitconfig"))
	}
	return paths
}

func xdgConfigHome() string {
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
		return x
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".config")
	}
	return ""
}

// get returns the last value of section[.subsection].key across all layers,
// and whether it was set. Section and key names are case-insensitive,
// subsection names are not (as in git).
func (c *gitConfig) get(section, subsection, key string) (string, bool) {
	for i := len(c.layers) - 1; i >= 0; i-- {
		l := c.layers[i]
		if l == nil {
			continue
		}
		// Later sections with the same name may repeat; scan them all, last wins.
		for j := len(l.Sections) - 1; j >= 0; j-- {
			s := l.Sections[j]
			if !s.IsName(section) {
				continue
			}
			opts := s.Options
			if subsection != "" {
				opts = nil
				for k := len(s.Subsections) - 1; k >= 0; k-- {
					if s.Subsections[k].IsName(subsection) {
						opts = s.Subsections[k].Options
						break
					}
				}
			}
			if opts.Has(key) {
				return opts.Get(key), true
			}
		}
	}
	return "", false
}

// getAll returns every value of section.subsection.key across layers in order.
func (c *gitConfig) getAll(section, subsection, key string) []string {
	var out []string
	for _, l := range c.layers {
		if l == nil {
			continue
		}
		for _, s := range l.Sections {
			if !s.IsName(section) {
				continue
			}
			if subsection == "" {
				out = append(out, s.Options.GetAll(key)...)
				continue
			}
			for _, ss := range s.Subsections {
				if ss.IsName(subsection) {
					out = append(out, ss.Options.GetAll(key)...)
				}
			}
		}
	}
	return out
}

// getBool interprets a git boolean; unset or unparsable gives def.
func (c *gitConfig) getBool(section, subsection, key string, def bool) bool {
	v, ok := c.get(section, subsection, key)
	if !ok {
		return def
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "true", "yes", "on", "1":
		// A bare "key" with no "=" is true in git.
		return true
	case "false", "no", "off", "0":
		return false
	}
	return def
}

// expandHome expands a leading "~/" as git does for path-valued settings.
func expandHome(p string) string {
	if strings.HasPrefix(p, "~/") {
		if h, err := os.UserHomeDir(); err == nil {
			return filepath.Join(h, p[2:])
		}
	}
	return p
}
