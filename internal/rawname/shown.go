package rawname

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Hidden reports whether r is written escaped where a person reads a
// name or a file's content (review lists and diffs, search results,
// history): a C0 or C1 control or DEL, and every character that changes
// or hides what is around it, or shows as nothing or as a plain space,
// so that a name holding one reads as another name: Unicode format
// characters (bidirectional controls, the zero-width space and joiners,
// the byte order mark, the soft hyphen), spaces other than ASCII's, line
// and paragraph separators, the Hangul fillers, the combining grapheme
// joiner, variation selectors and the Braille blank. Before, only
// controls and bidirectional controls were escaped, and an agent's
// "a.txt\u200b" showed in review list and review diff exactly as the
// a.txt it also changed (found by a red-team pass). Newline and tab are
// controls here: callers that keep them say so.
func Hidden(r rune) bool {
	if r < 0x80 {
		return r < 0x20 || r == 0x7f
	}
	switch {
	case r < 0xa0:
		return true
	case r == 0x034f, r == 0x115f, r == 0x1160, r == 0x2800, r == 0x3164, r == 0xffa0,
		r >= 0x180b && r <= 0x180f, r >= 0xfe00 && r <= 0xfe0f, r >= 0xe0100 && r <= 0xe01ef:
		return true
	}
	return unicode.In(r, unicode.Cf, unicode.Zs, unicode.Zl, unicode.Zp)
}

// Quote returns s in double quotes, as strconv.Quote does, with every
// Hidden character escaped too (\u200b), bytes that are not UTF-8 as
// \xNN.
func Quote(s string) string {
	q := strconv.Quote(s)
	if !strings.ContainsFunc(q, func(r rune) bool { return r >= 0x80 && Hidden(r) }) {
		return q
	}
	var b strings.Builder
	for _, r := range q {
		if r >= 0x80 && Hidden(r) {
			if r > 0xffff {
				b.WriteString(`\U` + strconv.FormatInt(int64(r)|1<<32, 16)[1:])
			} else {
				b.WriteString(`\u` + strconv.FormatInt(int64(r)|1<<16, 16)[1:])
			}
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// HasHidden reports whether s holds a Hidden character (newline and tab
// included) or a byte that is not UTF-8.
func HasHidden(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || Hidden(r) {
			return true
		}
	}
	return false
}
