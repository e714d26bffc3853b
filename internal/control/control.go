// Package control is the daemon's control socket: one JSON request and one
// JSON response per connection over a unix socket in state_dir. The daemon
// identifies the caller by SO_PEERCRED, so the CLI sees exactly what its uid
// could see on the mount.
package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SocketName is the control socket's name in state_dir.
const SocketName = "control.sock"

// ErrNoDaemon means nothing answers on the socket.
var ErrNoDaemon = errors.New("no neuralisfs daemon is running")

// Request is what the CLI asks.
type Request struct {
	Op     string `json:"op"` // "search", "status", "history", "revert"
	Query  string `json:"query,omitempty"`
	Source string `json:"source,omitempty"`
	Path   string `json:"path,omitempty"`
	Ext    string `json:"ext,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	URI    string `json:"uri,omitempty"` // history, revert
	ID     string `json:"id,omitempty"`  // revert --to
}

// Response carries a result or an error sentence.
type Response struct {
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Peer is who is on the other end of a connection.
type Peer struct {
	UID, GID uint32
	PID      int32
}

// Handler answers one request from peer.
type Handler func(ctx context.Context, peer Peer, req Request) (any, error)

// Server is a listening control socket.
type Server struct {
	ln   *net.UnixListener
	path string
	done chan struct{}
}

// Listen serves h on the socket at path until Close. A stale socket file
// left by a daemon that died is replaced; a live one is an error.
func Listen(path string, h Handler) (*Server, error) {
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return nil, fmt.Errorf("control socket %s: another daemon is serving it", path)
	}
	os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	// Anyone may ask; the answer is decided for their uid.
	os.Chmod(path, 0o666)
	s := &Server{ln: ln, path: path, done: make(chan struct{})}
	go s.serve(h)
	return s, nil
}

// Close stops serving and removes the socket.
func (s *Server) Close() error {
	err := s.ln.Close()
	<-s.done
	os.Remove(s.path)
	return err
}

func (s *Server) serve(h Handler) {
	defer close(s.done)
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		go handle(c, h)
	}
}

func handle(c *net.UnixConn, h Handler) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	peer, err := peerOf(c)
	var resp Response
	if err != nil {
		resp.Error = "cannot identify the caller: " + err.Error()
	} else {
		var req Request
		if err := json.NewDecoder(bufio.NewReader(c)).Decode(&req); err != nil {
			resp.Error = "bad request: " + err.Error()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
			out, err := h(ctx, peer, req)
			cancel()
			if err != nil {
				resp.Error = err.Error()
			} else if b, err := json.Marshal(out); err != nil {
				resp.Error = err.Error()
			} else {
				resp.Result = b
			}
		}
	}
	json.NewEncoder(c).Encode(resp)
}

func peerOf(c *net.UnixConn) (Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cerr != nil {
		return Peer{}, cerr
	}
	return Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}, nil
}

// Call sends req to the daemon at path and decodes its result into out.
// An error from the daemon is returned as one sentence.
func Call(path string, req Request, out any) error {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%w (no control socket at %s)", ErrNoDaemon, path)
		}
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(65 * time.Second))
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return err
	}
	var resp Response
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	if resp.Error != "" {
		return errors.New(resp.Error)
	}
	if out != nil {
		return json.Unmarshal(resp.Result, out)
	}
	return nil
}
