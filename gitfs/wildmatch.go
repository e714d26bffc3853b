package gitfs

// A port of git's wildmatch.c, which git uses for .gitignore,
// .gitattributes and sparse-checkout patterns: "*", "?", "[...]" with
// ranges, negation ("!" or "^") and POSIX classes, backslash escapes, and
// with wmPathname, "*" and "?" not matching "/" while "**" between slashes
// matches any number of directories. git's character classes are ASCII
// only; no locale applies.

const (
	wmPathname = 1 << iota // '/' is only matched by '/' and "**"
)

const (
	wmMatch = iota
	wmNoMatch
	wmAbortAll
	wmAbortToStarStar
)

// wildmatch reports whether text matches pattern.
func wildmatch(pattern, text string, flags int) bool {
	return dowild(pattern, 0, text, 0, flags) == wmMatch
}

func isGlobSpecial(c byte) bool {
	return c == '*' || c == '?' || c == '[' || c == '\\'
}

// at returns s[i], or 0 past its end (C's terminating NUL).
func at(s string, i int) byte {
	if i < len(s) {
		return s[i]
	}
	return 0
}

// dowild matches p[pi:] against text[ti:]; like the C code, which keeps
// a pointer to the start of the (sub)pattern it was called with, "**" is
// at a boundary when it begins the pattern of this call.
func dowild(p string, pi int, text string, ti int, flags int) int {
	start := pi
	for ; pi < len(p); ti, pi = ti+1, pi+1 {
		pCh := p[pi]
		tCh := at(text, ti)
		if ti >= len(text) && pCh != '*' {
			return wmAbortAll
		}
		switch pCh {
		case '\\':
			// Literal match with the following character.
			pi++
			pCh = at(p, pi)
			if tCh != pCh {
				return wmNoMatch
			}
			continue
		default:
			if tCh != pCh {
				return wmNoMatch
			}
			continue
		case '?':
			if flags&wmPathname != 0 && tCh == '/' {
				return wmNoMatch
			}
			continue
		case '*':
			var matchSlash bool
			pi++
			if at(p, pi) == '*' {
				prev := pi // the second star
				for pi++; at(p, pi) == '*'; pi++ {
				}
				if flags&wmPathname == 0 {
					matchSlash = true
				} else if (prev-start < 2 || p[prev-2] == '/') &&
					(pi >= len(p) || p[pi] == '/' || (p[pi] == '\\' && at(p, pi+1) == '/')) {
					// "**/" may match nothing: try the rest of the
					// pattern right here.
					if at(p, pi) == '/' && dowild(p, pi+1, text, ti, flags) == wmMatch {
						return wmMatch
					}
					matchSlash = true
				} else {
					matchSlash = false
				}
			} else {
				matchSlash = flags&wmPathname == 0
			}
			if pi >= len(p) {
				// A trailing "**" matches everything, a trailing "*"
				// everything up to the next slash.
				if !matchSlash && indexByteFrom(text, ti, '/') >= 0 {
					return wmNoMatch
				}
				return wmMatch
			} else if !matchSlash && p[pi] == '/' {
				// One star followed by a slash matches the rest of this
				// directory name.
				j := indexByteFrom(text, ti, '/')
				if j < 0 {
					return wmNoMatch
				}
				ti = j
				// the slash is consumed by the loop
				break
			}
			for {
				if tCh == 0 && ti >= len(text) {
					break
				}
				// Skip ahead to the next occurrence of a literal that
				// follows the star.
				if !isGlobSpecial(p[pi]) {
					pc := p[pi]
					for ti < len(text) && (matchSlash || text[ti] != '/') {
						if text[ti] == pc {
							break
						}
						ti++
					}
					tCh = at(text, ti)
					if ti >= len(text) || tCh != pc {
						return wmNoMatch
					}
				}
				if m := dowild(p, pi, text, ti, flags); m != wmNoMatch {
					if !matchSlash || m != wmAbortToStarStar {
						return m
					}
				} else if !matchSlash && tCh == '/' {
					return wmAbortToStarStar
				}
				ti++
				tCh = at(text, ti)
			}
			return wmAbortAll
		case '[':
			pi++
			pCh = at(p, pi)
			if pCh == '^' {
				pCh = '!'
			}
			negated := pCh == '!'
			if negated {
				pi++
				pCh = at(p, pi)
			}
			var prevCh byte
			matched := false
			for {
				if pi >= len(p) {
					return wmAbortAll
				}
				if pCh == '\\' {
					pi++
					if pi >= len(p) {
						return wmAbortAll
					}
					pCh = p[pi]
					if tCh == pCh {
						matched = true
					}
				} else if pCh == '-' && prevCh != 0 && pi+1 < len(p) && p[pi+1] != ']' {
					pi++
					pCh = p[pi]
					if pCh == '\\' {
						pi++
						if pi >= len(p) {
							return wmAbortAll
						}
						pCh = p[pi]
					}
					if tCh <= pCh && tCh >= prevCh {
						matched = true
					}
					pCh = 0 // prevCh becomes 0
				} else if pCh == '[' && at(p, pi+1) == ':' {
					pi += 2
					s := pi
					for pi < len(p) && p[pi] != ']' {
						pi++
					}
					if pi >= len(p) {
						return wmAbortAll
					}
					i := pi - s - 1
					if i < 0 || p[pi-1] != ':' {
						// No ":]": treat as a normal set.
						pi = s - 2
						pCh = '['
						if tCh == pCh {
							matched = true
						}
						prevCh = pCh
						pi++
						pCh = at(p, pi)
						if pCh == ']' {
							break
						}
						continue
					}
					if class, ok := charClass(p[s : s+i]); !ok {
						return wmAbortAll
					} else if class(tCh) {
						matched = true
					}
					pCh = 0
				} else if tCh == pCh {
					matched = true
				}
				prevCh = pCh
				pi++
				pCh = at(p, pi)
				if pi >= len(p) {
					return wmAbortAll
				}
				if pCh == ']' {
					break
				}
			}
			if matched == negated || (flags&wmPathname != 0 && tCh == '/') {
				return wmNoMatch
			}
			continue
		}
	}
	if ti < len(text) {
		return wmNoMatch
	}
	return wmMatch
}

func indexByteFrom(s string, from int, c byte) int {
	for i := from; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// charClass returns the test for a POSIX class name, with git's ASCII-only
// ctype (git-compat-util.h).
func charClass(name string) (func(byte) bool, bool) {
	isUpper := func(c byte) bool { return c >= 'A' && c <= 'Z' }
	isLower := func(c byte) bool { return c >= 'a' && c <= 'z' }
	isDigit := func(c byte) bool { return c >= '0' && c <= '9' }
	isAlpha := func(c byte) bool { return isUpper(c) || isLower(c) }
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	isPrint := func(c byte) bool { return c >= 0x20 && c <= 0x7e }
	switch name {
	case "alnum":
		return func(c byte) bool { return isAlpha(c) || isDigit(c) }, true
	case "alpha":
		return isAlpha, true
	case "blank":
		return func(c byte) bool { return c == ' ' || c == '\t' }, true
	case "cntrl":
		return func(c byte) bool { return c < 0x20 || c == 0x7f }, true
	case "digit":
		return isDigit, true
	case "graph":
		return func(c byte) bool { return isPrint(c) && !isSpace(c) }, true
	case "lower":
		return isLower, true
	case "print":
		return isPrint, true
	case "punct":
		return func(c byte) bool {
			return isPrint(c) && !isAlpha(c) && !isDigit(c) && c != ' '
		}, true
	case "space":
		return isSpace, true
	case "upper":
		return isUpper, true
	case "xdigit":
		return func(c byte) bool {
			return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
		}, true
	}
	return nil, false
}
