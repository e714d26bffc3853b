package control

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
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

// The socket is open to every uid: no request may exhaust the daemon or
// take it down, and the peer's groups come from the kernel.
func TestHostileClients(t *testing.T) {
	path := filepath.Join(t.TempDir(), SocketName)
	release := make(chan struct{})
	srv, err := Listen(path, func(ctx context.Context, p Peer, req Request) (any, error) {
		switch req.Op {
		case "panic":
			panic("boom")
		case "block":
			<-release
		case "groups":
			return p.Groups, nil
		}
		return "ok", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	raw := func(send []byte) Response {
		t.Helper()
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() { c.Write(send); c.(*net.UnixConn).CloseWrite() }()
		var resp Response
		if err := json.NewDecoder(c).Decode(&resp); err != nil {
			t.Fatalf("no response to %.40q: %v", send, err)
		}
		return resp
	}
	if r := raw([]byte(`{"op": "search", "query": "` + strings.Repeat("x", MaxRequestBytes) + `"}`)); !strings.Contains(r.Error, "larger than") {
		t.Errorf("huge request: %+v", r)
	}
	for _, bad := range []string{"", "{", "not json", `{"op": 5}`, "\x00\x01\x02", `{"op": "search", "limit": "all"}`} {
		if r := raw([]byte(bad)); r.Error == "" {
			t.Errorf("malformed request %q was answered without an error: %+v", bad, r)
		}
	}
	if err := Call(path, Request{Op: "panic"}, nil); err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Errorf("a panicking handler: %v", err)
	}
	var groups []uint32
	if err := Call(path, Request{Op: "groups"}, &groups); err != nil {
		t.Fatal(err)
	}
	own, _ := os.Getgroups()
	if len(groups) != len(own) {
		t.Errorf("peer groups %v; this process has %v", groups, own)
	}
	// One uid holding many connections cannot take them all: past the
	// limit it is told to wait, and the server keeps answering. (This
	// process is the daemon's uid, trusted with up to the total: not here.)
	limit := maxPerUID
	srv.mu.Lock()
	srv.trusted = func(uint32) bool { return false }
	srv.mu.Unlock()
	var wg sync.WaitGroup
	for range limit {
		wg.Add(1)
		go func() { defer wg.Done(); Call(path, Request{Op: "block"}, nil) }()
	}
	eventuallyT(t, func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.total == limit
	})
	if err := Call(path, Request{Op: "status"}, nil); err == nil || !strings.Contains(err.Error(), "too many requests") {
		t.Errorf("request past the per-uid limit: %v", err)
	}
	close(release)
	wg.Wait()
	if err := Call(path, Request{Op: "status"}, nil); err != nil {
		t.Errorf("after the burst: %v", err)
	}
	// Clients that connect and send nothing are dropped after the request
	// timeout; meanwhile they hold no more than their uid's share.
	var idle []net.Conn
	for range maxPerUID + 4 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	for _, c := range idle {
		c.Close()
	}
}

func eventuallyT(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5s")
		}
	}
}

// TestNamesThatAreNotUTF8ReachTheDaemon: a uri, path or id that is not
// UTF-8 reaches the handler as the same bytes, not with U+FFFD in them.
func TestNamesThatAreNotUTF8ReachTheDaemon(t *testing.T) {
	path := filepath.Join(t.TempDir(), SocketName)
	got := make(chan Request, 1)
	srv, err := Listen(path, func(ctx context.Context, p Peer, req Request) (any, error) {
		got <- req
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	want := Request{Op: "revert", URI: "data://z\xff", Path: "d\xfe/*", IDs: []string{"data://a\xfd", "plain", "data://z\uFFFD"}}
	if err := Call(path, want, nil); err != nil {
		t.Fatal(err)
	}
	if req := <-got; !reflect.DeepEqual(req, want) {
		t.Errorf("the daemon read %+v; want %+v", req, want)
	}
}

// An approval or a rejection has longer than other requests to be
// answered: one of 184,000 held names outran the minute, and the CLI
// said "i/o timeout" while the daemon went on (a red-team pass).
func TestApprovalsHaveLongerToAnswer(t *testing.T) {
	was := [3]time.Duration{answerTimeout, longTimeout, slack}
	answerTimeout, longTimeout, slack = 200*time.Millisecond, 5*time.Second, 100*time.Millisecond
	t.Cleanup(func() { answerTimeout, longTimeout, slack = was[0], was[1], was[2] })
	path := filepath.Join(t.TempDir(), SocketName)
	srv, err := Listen(path, func(ctx context.Context, p Peer, req Request) (any, error) {
		time.Sleep(time.Second)
		return "done", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, op := range []string{"review-approve", "review-reject"} {
		var out string
		if err := Call(path, Request{Op: op}, &out); err != nil || out != "done" {
			t.Errorf("%s taking 1 s under a 200 ms answer bound: %q, %v", op, out, err)
		}
	}
	if err := Call(path, Request{Op: "search", Query: "x"}, nil); err == nil {
		t.Error("a search taking 1 s under a 200 ms answer bound was answered")
	}
}
