package index

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoFUSE keeps the layering of DESIGN §2: index must not import go-fuse.
func TestNoFUSE(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/hanwen/go-fuse") {
			t.Errorf("index depends on %s", dep)
		}
	}
}
