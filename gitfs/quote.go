package gitfs

import (
	"fmt"
	"strings"
)

// quotePath renders a repository path the way git status --porcelain=v1
// does (quote.c quote_path with QUOTE_PATH_QUOTE_SP): a path holding a
// control character, '"', '\\', DEL, a space, or (with core.quotePath, the
// default) any byte >= 0x80 is written in double quotes with C escapes and
// octal escapes; any other path is written as is.
func quotePath(p string, quoteHigh bool) string {
	need := false
	for i := 0; i < len(p); i++ {
		if mustQuote(p[i], quoteHigh) || p[i] == ' ' {
			need = true
			break
		}
	}
	if !need {
		return p
	}
	var sb strings.Builder
	sb.WriteByte('"')
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !mustQuote(c, quoteHigh) {
			sb.WriteByte(c)
			continue
		}
		sb.WriteByte('\\')
		switch c {
		case '\a':
			sb.WriteByte('a')
		case '\b':
			sb.WriteByte('b')
		case '\t':
			sb.WriteByte('t')
		case '\n':
			sb.WriteByte('n')
		case '\v':
			sb.WriteByte('v')
		case '\f':
			sb.WriteByte('f')
		case '\r':
			sb.WriteByte('r')
		case '"':
			sb.WriteByte('"')
		case '\\':
			sb.WriteByte('\\')
		default:
			fmt.Fprintf(&sb, "%03o", c)
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

func mustQuote(c byte, quoteHigh bool) bool {
	switch {
	case c < 0x20, c == '"', c == '\\', c == 0x7f:
		return true
	case c >= 0x80:
		return quoteHigh
	}
	return false
}
