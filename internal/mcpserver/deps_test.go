package mcpserver

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoFUSE keeps the MCP side off the FUSE layer and the daemon: it
// asks the daemon over the control socket, and decides nothing itself.
func TestNoFUSE(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "hanwen/go-fuse") || strings.HasSuffix(p, "neuralisfs/fs") || strings.HasSuffix(p, "internal/daemon") || strings.HasSuffix(p, "neuralisfs/policy") {
			t.Errorf("mcpserver depends on %s", p)
		}
	}
}
