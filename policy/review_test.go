package policy

import (
	"strings"
	"testing"
)

func reviewSet(t *testing.T) *Set {
	t.Helper()
	s, err := New(Config{
		Principals: []Principal{{Name: "agent", UIDs: []uint32{1001}, Roles: []string{"agent"}}},
		Rules: []Rule{
			{URI: "d://**", Who: []string{"role:agent"}, Review: []Cap{Write}, Line: 1},
			{URI: "d://scratch/**", Who: []string{"agent"}, Allow: []Cap{Write}, Line: 2},
			{URI: "d://locked/**", Who: []string{"*"}, Deny: []Cap{Write}, Line: 3},
			{URI: "d://locked/review/**", Who: []string{"agent"}, Review: []Cap{Write}, Line: 4},
		},
		Sources: []Source{{Slug: "d"}, {Slug: "e"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The last rule that mentions write decides it, review rules included.
func TestReviewDecides(t *testing.T) {
	s := reviewSet(t)
	agent, _ := s.PrincipalByName("agent")
	owner, _ := s.PrincipalByName(Owner)
	for _, tt := range []struct {
		p             *Principal
		path          string
		allowed, held bool
	}{
		{agent, "a.txt", true, true},
		{agent, "scratch/x", true, false},      // a later allow undoes the hold
		{agent, "locked/x", false, false},      // a later deny too
		{agent, "locked/review/x", true, true}, // and a later review the deny
		{owner, "a.txt", true, false},
		{owner, "locked/review/x", false, false},
	} {
		d := s.Decide(tt.p, "d", tt.path, Write)
		if d.Allowed != tt.allowed || d.Held != tt.held {
			t.Errorf("%s write d://%s = allowed %v held %v, want %v %v", tt.p.Name, tt.path, d.Allowed, d.Held, tt.allowed, tt.held)
		}
		if r := s.Decide(tt.p, "d", tt.path, Read); !r.Allowed || r.Held {
			t.Errorf("%s read d://%s = %+v: a review rule must not touch read", tt.p.Name, tt.path, r)
		}
	}
	if !s.Holds(agent, "d") || s.Holds(owner, "d") || s.Holds(agent, "e") {
		t.Errorf("Holds: agent d %v, owner d %v, agent e %v", s.Holds(agent, "d"), s.Holds(owner, "d"), s.Holds(agent, "e"))
	}
	if s.Uniform("d", "a.txt") {
		t.Error("a source with review rules must not be uniform (each holder sees its own layer)")
	}
	if !s.Uniform("e", "a.txt") {
		t.Error("a source without review rules stays uniform")
	}
	e, err := s.Explain("d://a.txt", "agent")
	if err != nil || !strings.Contains(e.String(), "write  hold") {
		t.Errorf("explain: %v\n%s", err, e)
	}
}

func TestReviewOnlyWrite(t *testing.T) {
	_, err := New(Config{Rules: []Rule{{URI: "d://**", Who: []string{"*"}, Review: []Cap{Read}, Line: 7}}})
	if err == nil || !strings.Contains(err.Error(), "line 7") || !strings.Contains(err.Error(), "review takes only write") {
		t.Errorf("review = [read]: %v", err)
	}
	_, err = New(Config{Rules: []Rule{{URI: "d://**", Who: []string{"*"}, Allow: []Cap{Write}, Review: []Cap{Write}, Line: 8}}})
	if err == nil || !strings.Contains(err.Error(), "both held for review and allowed") {
		t.Errorf("allow and review write: %v", err)
	}
}
