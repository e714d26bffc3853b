package rawname

import "testing"

// FuzzEncDec: every string comes back whole through JSON.
func FuzzEncDec(f *testing.F) {
	f.Add("z\xff")
	f.Add("plain")
	f.Add("\x00aGk")
	f.Fuzz(func(t *testing.T, name string) {
		if got := throughJSON(t, name); got != name {
			t.Errorf("%q came back as %q", name, got)
		}
	})
}
