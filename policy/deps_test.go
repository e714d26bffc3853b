package policy

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the package pure (DESIGN.md §2): the standard library and
// doublestar only, so no FUSE, index or git code can creep in.
func TestDeps(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not found: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch dep {
		case "github.com/neuralis/neuralisfs/policy", "github.com/bmatcuk/doublestar/v4":
		default:
			t.Errorf("policy depends on %s", dep)
		}
	}
}
