package mounts

import (
	"math"
	"regexp"
	"strings"
)

// A Secret is something in a text that looks like a credential: what it
// looks like and the line (1-based) of the text it is on. The value itself
// is never kept or reported.
type Secret struct {
	Line int
	What string
}

var secretPatterns = []struct {
	re   *regexp.Regexp
	what string
}{
	{regexp.MustCompile(`-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----`), "a private key block"},
	{regexp.MustCompile(`\b(AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b`), "an AWS access key id"},
	{regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{36,}\b`), "a GitHub token"},
	{regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{22,}\b`), "a GitHub token"},
	{regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}\b`), "a Slack token"},
	{regexp.MustCompile(`\bsk-(proj-|ant-)?[A-Za-z0-9_-]{32,}\b`), "an API key"},
	{regexp.MustCompile(`(?i)\b[a-z0-9_.-]*(password|passwd|passphrase)["']?\s*[:=]\s*["']?[^\s"',;]`), "a password assignment"},
}

// keyAssignRE finds `…key|token|secret = value` (or `:`) with a long value.
var keyAssignRE = regexp.MustCompile(`(?i)\b[a-z0-9_.-]*(key|token|secret)["']?\s*[:=]\s*["']?([A-Za-z0-9+/=_.~-]{20,})`)

// FindSecret reports the first credential-shaped thing in text: a PEM
// private key block, a token-shaped value (AWS, GitHub, Slack, API keys),
// a password assignment, or a long high-entropy value assigned to a name
// with key, token or secret in it.
func FindSecret(text string) (Secret, bool) {
	for n, line := range strings.Split(text, "\n") {
		for _, p := range secretPatterns {
			if p.re.MatchString(line) {
				return Secret{Line: n + 1, What: p.what}, true
			}
		}
		for _, m := range keyAssignRE.FindAllStringSubmatch(line, -1) {
			if v := m[2]; highEntropy(v) {
				return Secret{Line: n + 1, What: "a high-entropy " + strings.ToLower(m[1]) + " value"}, true
			}
		}
	}
	return Secret{}, false
}

// highEntropy reports whether v looks random rather than like words: at
// least 3.5 bits per character (Shannon, over its own characters) and at
// least two of lower case, upper case and digits. "your-api-key-goes-here"
// is not; a hex digest or a base64 token is.
func highEntropy(v string) bool {
	var lower, upper, digit bool
	counts := map[rune]int{}
	for _, r := range v {
		counts[r]++
		switch {
		case r >= 'a' && r <= 'z':
			lower = true
		case r >= 'A' && r <= 'Z':
			upper = true
		case r >= '0' && r <= '9':
			digit = true
		}
	}
	classes := 0
	for _, b := range []bool{lower, upper, digit} {
		if b {
			classes++
		}
	}
	if classes < 2 {
		return false
	}
	h := 0.0
	for _, c := range counts {
		p := float64(c) / float64(len(v))
		h -= p * math.Log2(p)
	}
	return h >= 3.5
}
