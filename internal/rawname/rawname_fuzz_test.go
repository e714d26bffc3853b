package rawname

import (
	"encoding/json"
	"testing"
)

// FuzzEncDec: every string comes back whole through JSON.
func FuzzEncDec(f *testing.F) {
	f.Add("z\xff")
	f.Add("plain")
	f.Add("\x00aGk")
	f.Fuzz(func(t *testing.T, name string) {
		b, err := json.Marshal(Enc(name))
		if err != nil {
			t.Fatal(err)
		}
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if Dec(back) != name {
			t.Errorf("%q came back as %q", name, Dec(back))
		}
	})
}
