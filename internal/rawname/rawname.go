// Package rawname keeps a file name through JSON unchanged.
//
// A name is bytes, not text: encoding/json writes each byte that is not
// UTF-8 as U+FFFD, so a name read back from JSON can be another file's
// (z\xff comes back as z\uFFFD). Enc keeps such a name as a NUL, which
// no name or uri holds, followed by the base64 (standard alphabet, no
// padding) of its bytes; every other name it leaves as it is, so JSON
// written before stays readable and the common case costs one scan.
package rawname

import (
	"encoding/base64"
	"unicode/utf8"
)

// Enc returns s as it can go into JSON and come back whole.
func Enc(s string) string {
	if utf8.ValidString(s) && (s == "" || s[0] != 0) {
		return s
	}
	return "\x00" + base64.RawStdEncoding.EncodeToString([]byte(s))
}

// Dec undoes Enc. A string that is not Enc's form comes back as it is.
func Dec(s string) string {
	if len(s) > 0 && s[0] == 0 {
		if b, err := base64.RawStdEncoding.DecodeString(s[1:]); err == nil {
			return string(b)
		}
	}
	return s
}

// EncAll and DecAll apply Enc and Dec to each of names, in a new slice
// (nil for nil).
func EncAll(names []string) []string { return mapAll(names, Enc) }

// DecAll: see EncAll.
func DecAll(names []string) []string { return mapAll(names, Dec) }

func mapAll(names []string, f func(string) string) []string {
	if names == nil {
		return nil
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = f(n)
	}
	return out
}
