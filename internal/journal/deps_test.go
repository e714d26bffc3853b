package journal

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoFUSE keeps the journal below the FUSE layer (DESIGN.md §2).
func TestNoFUSE(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "hanwen/go-fuse") {
			t.Errorf("journal depends on %s", p)
		}
	}
}
