package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/neuralis/neuralisfs/internal/audit"
	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/internal/held"
	"github.com/neuralis/neuralisfs/policy"
)

// A reviewer's decisions on an agent's changes are never rate limited;
// the agent withdrawing its own held changes is, or holding and
// withdrawing would write lines without bound.
func TestReviewLinesOfAWithdrawalAreRateLimited(t *testing.T) {
	const agentUID = 54321
	if os.Geteuid() == agentUID {
		t.Skip("the test's agent uid is the daemon's")
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	al, err := audit.Open(path, audit.Options{Rate: 1, Burst: 5})
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{audit: al}
	agent, owner := &policy.Principal{Name: "agent"}, &policy.Principal{Name: "owner"}
	for i := range 50 {
		it := ReviewItem{Change: held.Change{Principal: "agent", URI: fmt.Sprintf("data://f%d", i)}}
		d.auditReview(agent, control.Peer{UID: agentUID}, "review-reject", it)
		d.auditReview(owner, control.Peer{UID: uint32(os.Geteuid())}, "review-reject", it)
	}
	if err := al.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	if n := strings.Count(log, `"principal":"owner","uid"`); n != 50 {
		t.Errorf("%d of the owner's 50 rejections in the audit log:\n%s", n, log)
	}
	if n := strings.Count(log, `"principal":"agent","uid"`); n != 5 {
		t.Errorf("%d of the agent's 50 withdrawals in the audit log; want its burst of 5:\n%s", n, log)
	}
}
