package rawname

import (
	"encoding/json"
	"testing"
)

// throughJSON is name written as JSON by Enc and read back by Dec.
func throughJSON(t *testing.T, name string) string {
	t.Helper()
	b, err := json.Marshal(Enc(name))
	if err != nil {
		t.Fatal(err)
	}
	var back string
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return Dec(back)
}

func TestNamesComeBackWhole(t *testing.T) {
	for _, name := range []string{"", "a.txt", "z\xff", "z\uFFFD", "\xfe\xff", "dir/ü/\x80x", "x\u2028y"} {
		if got := throughJSON(t, name); got != name {
			t.Errorf("%q came back as %q", name, got)
		}
	}
	// Text is left as it is; a name that is not UTF-8 is not left as its
	// lookalike.
	if Enc("z\uFFFD") != "z\uFFFD" || Enc("z\xff") == Enc("z\uFFFD") {
		t.Errorf("Enc(z\\uFFFD) = %q, Enc(z\\xff) = %q", Enc("z\uFFFD"), Enc("z\xff"))
	}
	if got := DecAll(EncAll([]string{"a", "b\xff"})); len(got) != 2 || got[1] != "b\xff" {
		t.Errorf("DecAll(EncAll) = %q", got)
	}
	if EncAll(nil) != nil {
		t.Errorf("EncAll(nil) is not nil")
	}
}
