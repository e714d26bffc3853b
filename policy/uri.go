package policy

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadURI is wrapped by every error ParseURI returns.
var ErrBadURI = errors.New("bad uri")

// ParseURI splits a uri "<slug>://<path>" into its slug and path. It is strict:
// the slug must match [a-z0-9][a-z0-9._-]*, and the path must be relative
// (no leading slash), have no empty, "." or ".." segments, no trailing slash
// and no NUL byte. The source root is "<slug>://" with an empty path. Nothing
// is normalised: a uri that is not already canonical is an error, so a check
// can never be steered onto a different path than the one named.
func ParseURI(uri string) (slug, path string, err error) {
	i := strings.Index(uri, "://")
	if i < 0 {
		return "", "", fmt.Errorf("%w %q: want <slug>://<path>", ErrBadURI, uri)
	}
	slug, path = uri[:i], uri[i+3:]
	if !validSlug(slug) {
		return "", "", fmt.Errorf("%w %q: source slug %q must match [a-z0-9][a-z0-9._-]*", ErrBadURI, uri, slug)
	}
	if msg := pathProblem(path); msg != "" {
		return "", "", fmt.Errorf("%w %q: path %s", ErrBadURI, uri, msg)
	}
	return slug, path, nil
}

// validSlug reports whether s matches [a-z0-9][a-z0-9._-]*.
func validSlug(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// validPath reports whether p is a canonical source-relative path (see ParseURI).
// It allocates nothing: Decide calls it on every request.
func validPath(p string) bool {
	_, ok := segments(p)
	return ok
}

// segments counts p's segments ("" has none) and checks p as validPath does.
func segments(p string) (n int, ok bool) {
	if p == "" {
		return 0, true
	}
	start := 0
	for i := 0; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			if p[i] == 0 {
				return 0, false
			}
			continue
		}
		seg := p[start:i]
		if seg == "" || seg == "." || seg == ".." {
			return 0, false
		}
		start = i + 1
		n++
	}
	return n, true
}

// pathProblem explains why p is not valid, or returns "".
func pathProblem(p string) string {
	if validPath(p) {
		return ""
	}
	switch {
	case strings.HasPrefix(p, "/"):
		return "must not start with a slash"
	case strings.HasSuffix(p, "/"):
		return "must not end with a slash"
	case strings.IndexByte(p, 0) >= 0:
		return "must not contain a NUL byte"
	case strings.Contains(p, "//"):
		return "must not contain an empty segment"
	}
	return `must not contain "." or ".." segments`
}

// hasMeta reports whether s contains a glob meta character.
func hasMeta(s string) bool {
	return strings.ContainsAny(s, `*?[{\`)
}
