package rawname

import (
	"encoding/json"
	"testing"
)

func TestNamesComeBackWhole(t *testing.T) {
	for _, name := range []string{"", "a.txt", "z\xff", "z\uFFFD", "\xfe\xff", "dir/ü/\x80x", "x\u2028y"} {
		b, err := json.Marshal(Enc(name))
		if err != nil {
			t.Fatal(err)
		}
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got := Dec(back); got != name {
			t.Errorf("%q came back as %q (through %s)", name, got, b)
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
