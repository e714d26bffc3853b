package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// oneSentence reports what is wrong with msg as an error message shown to
// a person: it must be one non-empty line.
func oneSentence(msg string) string {
	switch {
	case strings.TrimSpace(msg) == "":
		return "is empty"
	case strings.ContainsAny(msg, "\n\r"):
		return "spans several lines"
	case msg != strings.TrimSpace(msg):
		return "has leading or trailing space"
	}
	return ""
}

// badRequest checks the daemon's answer to a request it could not read:
// one sentence that says more than a bare I/O error ("EOF").
func badRequest(t *testing.T, msg string) {
	t.Helper()
	if why := oneSentence(msg); why != "" {
		t.Errorf("answer %q %s", msg, why)
	}
	rest, ok := strings.CutPrefix(msg, "bad request: ")
	if !ok {
		t.Errorf("answer %q does not say the request was bad", msg)
	}
	if rest == io.EOF.Error() || rest == io.ErrUnexpectedEOF.Error() {
		t.Errorf("answer %q does not say what is wrong", msg)
	}
}

// FuzzReadRequest decodes fuzzed bytes as a request. It never panics;
// what it refuses it says in one sentence; what it reads encodes and
// reads back to the same request.
func FuzzReadRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := readRequest(bytes.NewReader(data))
		if err != nil {
			badRequest(t, "bad request: "+err.Error())
			return
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", req, err)
		}
		again, err := readRequest(bytes.NewReader(b))
		if err != nil || !reflect.DeepEqual(again, req) {
			t.Errorf("request %+v encoded as %s reads back as %+v, %v", req, b, again, err)
		}
	})
}

// FuzzServe sends fuzzed bytes to a real control socket whose handler
// echoes the request (op "fail" fails with the query as the error, op
// "panic" panics). Every connection gets exactly one line of JSON back:
// an error sentence for bytes that are no request, the handler's error
// unchanged, or the request itself as the result, as readRequest reads
// it. The daemon survives every input.
func FuzzServe(f *testing.F) {
	path := filepath.Join(f.TempDir(), SocketName)
	srv, err := Listen(path, func(ctx context.Context, p Peer, req Request) (any, error) {
		switch req.Op {
		case "fail":
			return nil, errors.New(req.Query)
		case "panic":
			panic(req.Query)
		}
		return req, nil
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(data); err != nil && len(data) <= MaxRequestBytes {
			t.Fatalf("write: %v", err)
		}
		c.CloseWrite()
		answer, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if bytes.Count(answer, []byte("\n")) != 1 || !bytes.HasSuffix(answer, []byte("\n")) {
			t.Fatalf("answer is not one line: %q", answer)
		}
		var resp Response
		if err := json.Unmarshal(answer, &resp); err != nil {
			t.Fatalf("answer %q is not a Response: %v", answer, err)
		}
		if (resp.Error == "") == (resp.Result == nil) {
			t.Errorf("answer %q has both or neither of error and result", answer)
		}
		req, rerr := readRequest(bytes.NewReader(data))
		switch {
		case rerr != nil:
			badRequest(t, resp.Error)
		case req.Op == "fail":
			if resp.Error != req.Query && !(req.Query == "" && resp.Error != "") {
				t.Errorf("handler error %q came back as %q", req.Query, resp.Error)
			}
		case req.Op == "panic":
			if why := oneSentence(resp.Error); why != "" || !strings.HasPrefix(resp.Error, "internal error answering") {
				t.Errorf("a panicking handler answered %q", resp.Error)
			}
		default:
			var got Request
			if err := json.Unmarshal(resp.Result, &got); err != nil || !reflect.DeepEqual(got, req) {
				t.Errorf("request %+v came back as %+v (%v)", req, got, err)
			}
		}
	})
}
