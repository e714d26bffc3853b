package mounts

import (
	"fmt"
	"net/url"
	"strings"
)

// checkFeed validates the keys of the file, inline and http kinds for
// source i, and refuses them on the other kinds.
func (c *Config) checkFeed(i int, add func(table string, i int, key, format string, args ...any)) {
	s := c.Sources[i]
	written := func(key string) bool { return c.LineOf("source", i, key) != 0 }
	only := func(key string, ok bool, kinds string) {
		if written(key) && !ok {
			add("source", i, key, "only %s takes %s", kinds, key)
		}
	}
	only("text", s.Kind == KindInline, "an inline source")
	only("name", s.Kind == KindInline, "an inline source")
	only("timeout", s.Kind == KindHTTP || s.Kind == KindMCP, "an http or mcp source")
	only("refresh", s.Kind == KindHTTP || s.Kind == KindFile || s.Kind == KindMCP, "a file, http or mcp source")
	only("max_bytes", s.Kind == KindHTTP || s.Kind == KindFile || s.Kind == KindMCP, "a file, http or mcp source")
	only("url", s.Kind == KindMCP, "an mcp source (an http source names a url in each [[source.file]])")
	if len(s.Files) > 0 && s.Kind != KindHTTP {
		add("source", i, "file[0]", "only an http source takes [[source.file]] entries")
	}
	if s.MaxBytes < 0 {
		add("source", i, "max_bytes", "must not be negative")
	}
	if s.Refresh != nil && s.Refresh.Duration < minRefresh {
		add("source", i, "refresh", "%v is shorter than %v", s.Refresh.Duration, minRefresh)
	}
	if s.Timeout != nil && s.Timeout.Duration <= 0 {
		add("source", i, "timeout", "must be longer than 0s")
	}
	switch s.Kind {
	case KindInline:
		switch {
		case !written("name"):
			add("source", i, "name", "missing; an inline source needs name = \"<file name>\"")
		case !validFileName(s.Name):
			add("source", i, "name", "%q is not a file name (no '/', not \".\" or \"..\", no control characters)", s.Name)
		}
		if !written("text") {
			add("source", i, "text", "missing; an inline source needs text = \"\"\"…\"\"\"")
		} else if sec, found := FindSecret(s.Text); found {
			add("source", i, "text", "line %d of the text holds what looks like %s; inline text is shown to every reader of the source, so keep credentials out of it", sec.Line, sec.What)
		}
	case KindMCP:
		if !written("url") {
			add("source", i, "url", "missing; an mcp source needs url = \"http(s)://…/mcp\", its server's streamable HTTP endpoint")
		} else if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("source", i, "url", "%q is not an http:// or https:// URL", s.URL)
		}
	case KindHTTP:
		if len(s.Files) == 0 {
			add("source", i, "file", "missing; an http source needs at least one [[source.file]] with path and url")
		}
		paths := map[string]int{}
		for j, f := range s.Files {
			key := fmt.Sprintf("file[%d]", j)
			switch {
			case f.Path == "":
				add("source", i, key+".path", "missing; name the file, as path = \"status.json\"")
			case checkRel(f.Path) != nil || strings.ContainsFunc(f.Path, isControl):
				add("source", i, key+".path", "%q is not a clean relative path (no leading '/', no '.' or '..' segments)", f.Path)
			default:
				if k, dup := paths[f.Path]; dup {
					add("source", i, key+".path", "%q is already the path of file[%d] at line %d", f.Path, k, s.Files[k].Line)
				}
				paths[f.Path] = j
			}
			if f.URL == "" {
				add("source", i, key+".url", "missing; an http file needs url = \"http(s)://…\"")
			} else if u, err := url.Parse(f.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				add("source", i, key+".url", "%q is not an http:// or https:// URL", f.URL)
			}
		}
		for p, j := range paths {
			for dir := p; strings.Contains(dir, "/"); {
				dir = dir[:strings.LastIndex(dir, "/")]
				if k, clash := paths[dir]; clash {
					add("source", i, fmt.Sprintf("file[%d].path", j), "%q lies inside %q, the path of file[%d]: a path cannot be both a file and a folder", p, dir, k)
				}
			}
		}
	}
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func validFileName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.Contains(name, "/") && !strings.ContainsFunc(name, isControl) && len(name) <= 255
}
