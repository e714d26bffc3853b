package control

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestRoundTripIdentifiesPeer(t *testing.T) {
	path := filepath.Join(t.TempDir(), SocketName)
	srv, err := Listen(path, func(ctx context.Context, p Peer, req Request) (any, error) {
		if req.Op == "fail" {
			return nil, errors.New("that query is bad.")
		}
		return map[string]any{"uid": p.UID, "pid": p.PID, "q": req.Query}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var out struct {
		UID uint32 `json:"uid"`
		PID int32  `json:"pid"`
		Q   string `json:"q"`
	}
	if err := Call(path, Request{Op: "search", Query: "x"}, &out); err != nil {
		t.Fatal(err)
	}
	if out.UID != uint32(os.Getuid()) || out.PID != int32(os.Getpid()) || out.Q != "x" {
		t.Errorf("peer = %+v; want uid %d pid %d", out, os.Getuid(), os.Getpid())
	}
	if err := Call(path, Request{Op: "fail"}, nil); err == nil || err.Error() != "that query is bad." {
		t.Errorf("error = %v", err)
	}
	if _, err := Listen(path, nil); err == nil {
		t.Errorf("a second daemon could take a live socket")
	}
}

func TestNoDaemon(t *testing.T) {
	err := Call(filepath.Join(t.TempDir(), SocketName), Request{Op: "status"}, nil)
	if !errors.Is(err, ErrNoDaemon) {
		t.Errorf("Call with no daemon = %v; want ErrNoDaemon", err)
	}
}
