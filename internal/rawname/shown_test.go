package rawname

import (
	"strconv"
	"testing"
)

// Names that read as other names are escaped; ordinary names of any
// script are not.
func TestQuoteEscapesWhatReadsAsAnotherName(t *testing.T) {
	for in, want := range map[string]string{
		"a.txt\u200b":      `"a.txt\u200b"`,
		"a\u00a0b":         `"a\u00a0b"`,
		"x\u2028y":         `"x\u2028y"`,
		"\u3164.txt":       `"\u3164.txt"`,
		"v\ufe0f":          `"v\ufe0f"`,
		"\U000e0101":       `"\U000e0101"`,
		"\ufeffbom":        `"\ufeffbom"`,
		"soft\u00adhyphen": `"soft\u00adhyphen"`,
		"a\u202eb":         `"a\u202eb"`,
		"t\x1bq\n":         `"t\x1bq\n"`,
		"z\xff":            `"z\xff"`,
	} {
		if !HasHidden(in) {
			t.Errorf("HasHidden(%q) = false", in)
		}
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
		if back, err := strconv.Unquote(Quote(in)); err != nil || back != in {
			t.Errorf("Unquote(Quote(%q)) = %q, %v", in, back, err)
		}
	}
	for _, ok := range []string{"a.txt", "ünïcode/ü.txt", "日本語.md", "файл", "with space", "emoji😀", "ä\u0301"} {
		if HasHidden(ok) {
			t.Errorf("HasHidden(%q) = true", ok)
		}
	}
}
