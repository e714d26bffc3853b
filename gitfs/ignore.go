package gitfs

import (
	"bytes"
	"strings"
)

// Exclude patterns as git's dir.c parses and matches them, for
// .gitignore, info/exclude, core.excludesFile and, with the same matching,
// .gitattributes.

const (
	patNegative  = 1 << iota // "!pattern"
	patMustBeDir             // "pattern/"
	patNoDir                 // no slash but a trailing one: matched against the base name
	patEndsWith              // "*literal"
)

// ignorePattern is one parsed pattern (dir.c struct path_pattern).
type ignorePattern struct {
	pattern string // without a leading "!" or a trailing "/"
	nowild  int    // length of the leading part without glob characters
	flags   int
	base    string // the directory of the file it came from: "" or "a/b/"
}

// simpleLength is dir.c simple_length: the length of the leading part
// without glob special characters.
func simpleLength(s string) int {
	for i := 0; i < len(s); i++ {
		if isGlobSpecial(s[i]) {
			return i
		}
	}
	return len(s)
}

// parsePattern is dir.c parse_path_pattern.
func parsePattern(s, base string) *ignorePattern {
	p := &ignorePattern{base: base}
	if strings.HasPrefix(s, "!") {
		p.flags |= patNegative
		s = s[1:]
	}
	n := len(s)
	if n > 0 && s[n-1] == '/' {
		n--
		p.flags |= patMustBeDir
	}
	if strings.IndexByte(s[:n], '/') < 0 {
		p.flags |= patNoDir
	}
	p.nowild = min(simpleLength(s), n)
	if strings.HasPrefix(s, "*") && simpleLength(s[1:]) == len(s)-1 {
		p.flags |= patEndsWith
	}
	p.pattern = s[:n]
	return p
}

// parseIgnore parses a file of exclude patterns (dir.c
// add_patterns_from_buffer) whose patterns apply below the slash
// directory domain ("" for the root): a UTF-8 BOM is skipped, lines
// starting with "#" and empty lines are comments, a CR before the newline
// and unescaped trailing spaces are dropped.
func parseIgnore(b []byte, domain string) []*ignorePattern {
	base := ""
	if domain != "" {
		base = domain + "/"
	}
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	var ps []*ignorePattern
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		s := trimTrailingSpaces(string(line))
		if s == "" {
			continue // matches nothing
		}
		ps = append(ps, parsePattern(s, base))
	}
	return ps
}

// trimTrailingSpaces is dir.c trim_trailing_spaces: trailing spaces go
// unless escaped with a backslash.
func trimTrailingSpaces(s string) string {
	lastSpace := -1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ':
			if lastSpace < 0 {
				lastSpace = i
			}
		case '\\':
			i++
			if i >= len(s) {
				return s
			}
			lastSpace = -1
		default:
			lastSpace = -1
		}
	}
	if lastSpace >= 0 {
		return s[:lastSpace]
	}
	return s
}

// matches reports whether p matches the slash path pathname (isDir for a
// directory), as dir.c last_matching_pattern_from_list tests one pattern.
func (p *ignorePattern) matches(pathname string, isDir bool) bool {
	if p.flags&patMustBeDir != 0 && !isDir {
		return false
	}
	basename := pathname
	if i := strings.LastIndexByte(pathname, '/'); i >= 0 {
		basename = pathname[i+1:]
	}
	if p.flags&patNoDir != 0 {
		return matchBasename(basename, p.pattern, p.nowild, p.flags)
	}
	return matchPathname(pathname, strings.TrimSuffix(p.base, "/"), p.pattern, p.nowild)
}

// matchBasename is dir.c match_basename.
func matchBasename(basename, pattern string, prefix, flags int) bool {
	switch {
	case prefix == len(pattern):
		return basename == pattern
	case flags&patEndsWith != 0:
		return strings.HasSuffix(basename, pattern[1:])
	}
	return wildmatch(pattern, basename, 0)
}

// matchPathname is dir.c match_pathname: pattern is relative to base (a
// directory without its trailing slash, "" for the root).
func matchPathname(pathname, base, pattern string, prefix int) bool {
	if strings.HasPrefix(pattern, "/") {
		pattern = pattern[1:]
		prefix--
	}
	if len(pathname) < len(base)+1 ||
		(base != "" && pathname[len(base)] != '/') ||
		pathname[:len(base)] != base {
		return false
	}
	name := pathname
	if base != "" {
		name = pathname[len(base)+1:]
	}
	if prefix > 0 {
		if prefix > len(name) || pattern[:prefix] != name[:prefix] {
			return false
		}
		pattern, name = pattern[prefix:], name[prefix:]
		if pattern == "" && name == "" {
			return true
		}
	}
	return wildmatch(pattern, name, wmPathname)
}
