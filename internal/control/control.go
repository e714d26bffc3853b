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
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/rawname"
)

// SocketName is the control socket's name in state_dir.
const SocketName = "control.sock"

// ErrNoDaemon means nothing answers on the socket.
var ErrNoDaemon = errors.New("no neuralisfs daemon is running")

// Request is what the CLI asks.
type Request struct {
	Op     string `json:"op"` // "search", "status", "history", "revert", "reload"
	Query  string `json:"query,omitempty"`
	Source string `json:"source,omitempty"`
	Path   string `json:"path,omitempty"`
	Ext    string `json:"ext,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	URI    string `json:"uri,omitempty"` // history, revert
	ID     string `json:"id,omitempty"`  // revert --to
	// Review requests: the changes named (ids or uris), or all of them,
	// of one principal, and whether a conflict is overridden.
	IDs       []string `json:"ids,omitempty"`
	All       bool     `json:"all,omitempty"`
	Principal string   `json:"principal,omitempty"`
	Force     bool     `json:"force,omitempty"`
	// Config is the config file a reload reads ("" for the one the
	// daemon runs with); only root and the daemon's own uid may reload.
	Config string `json:"config,omitempty"`
	// MCP requests (mcp-read, mcp-list, mcp-status, mcp-write): where an
	// answer continues, lines From to To of a read (1-based, 0 for none),
	// a listing's depth, and the content a write puts in a file.
	Offset  int64  `json:"offset,omitempty"`
	From    int    `json:"from,omitempty"`
	To      int    `json:"to,omitempty"`
	Depth   int    `json:"depth,omitempty"`
	Content string `json:"content,omitempty"`
	// Collect requests: the sources asked for (none: every one the
	// principal can see) and the budgets (0: the defaults).
	Sources      []string `json:"sources,omitempty"`
	MaxFileBytes int64    `json:"max_file_bytes,omitempty"`
	MaxBytes     int64    `json:"max_bytes,omitempty"`
	MaxFiles     int      `json:"max_files,omitempty"`
}

// A name is bytes, not text: encoding/json writes each byte that is not
// UTF-8 as U+FFFD, so `neuralisfs revert data://z\xff` asked for
// data://z\uFFFD, another file's history. A request carries its uri,
// path and ids as rawname.Enc keeps them.

// MarshalJSON writes req with its names as rawname.Enc keeps them.
func (req Request) MarshalJSON() ([]byte, error) {
	type plain Request
	req.URI, req.Path, req.IDs = rawname.Enc(req.URI), rawname.Enc(req.Path), rawname.EncAll(req.IDs)
	return json.Marshal(plain(req))
}

// UnmarshalJSON reads req back, names as they were.
func (req *Request) UnmarshalJSON(b []byte) error {
	type plain Request
	if err := json.Unmarshal(b, (*plain)(req)); err != nil {
		return err
	}
	req.URI, req.Path, req.IDs = rawname.Dec(req.URI), rawname.Dec(req.Path), rawname.DecAll(req.IDs)
	return nil
}

// Response carries a result or an error sentence.
type Response struct {
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Peer is who is on the other end of a connection: SO_PEERCRED and
// SO_PEERGROUPS, as the kernel recorded them when the peer connected.
type Peer struct {
	UID, GID uint32
	PID      int32
	// Groups are the peer's supplementary groups (nil when the kernel
	// cannot say), so the daemon can check file permissions as the
	// peer's own would be checked.
	Groups []uint32
}

// Handler answers one request from peer.
type Handler func(ctx context.Context, peer Peer, req Request) (any, error)

// Limits on what one connection, and one uid, may cost the daemon: the
// socket is open to every uid (0666), and the daemon serving it also
// serves the mount, so no caller may exhaust its memory, descriptors or
// goroutines, or crash it.
const (
	// MaxRequestBytes bounds one request (a query, a uri, an id).
	MaxRequestBytes = 64 << 10
	// requestTimeout is how long a client has to send its request.
	requestTimeout = 10 * time.Second
	// maxPerUID and maxTotal bound the connections being served at once,
	// per peer uid (root and the daemon's own uid are trusted with more)
	// and in all; past them a connection is answered with an error at once
	// and closed.
	maxPerUID = 8
	maxTotal  = 64
)

// Server is a listening control socket.
type Server struct {
	ln   *net.UnixListener
	path string
	done chan struct{}

	mu     sync.Mutex
	active map[uint32]int // peer uid → connections being served
	total  int
	wg     sync.WaitGroup
	// trusted uids are held to maxTotal only: root and the daemon's own.
	trusted func(uid uint32) bool
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
	s := &Server{ln: ln, path: path, done: make(chan struct{}), active: map[uint32]int{},
		trusted: func(uid uint32) bool { return uid == 0 || uid == uint32(os.Geteuid()) }}
	go s.serve(h)
	return s, nil
}

// Close stops serving and removes the socket. Requests being answered
// run to their end (each is bounded by its deadline).
func (s *Server) Close() error {
	err := s.ln.Close()
	<-s.done
	s.wg.Wait()
	os.Remove(s.path)
	return err
}

func (s *Server) serve(h Handler) {
	defer close(s.done)
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors: wait for some to be released
				// instead of giving up on the socket.
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(c, h)
		}()
	}
}

// admit counts a connection from uid, or refuses it past the limits.
func (s *Server) admit(uid uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.total >= maxTotal || (!s.trusted(uid) && s.active[uid] >= maxPerUID) {
		return false
	}
	s.total++
	s.active[uid]++
	return true
}

func (s *Server) leave(uid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.active[uid]--; s.active[uid] <= 0 {
		delete(s.active, uid)
	}
}

// answerTimeout is how long the daemon takes to answer op, and
// longTimeout that of an approval or a rejection, which lands or drops
// every file of the units named: one of 184,000 held names outran the
// minute every other request has, and the CLI said "i/o timeout" while
// the daemon went on and did it (a red-team pass). Variables for tests.
// slack is what the connection's deadline adds to it, for the answer to
// be written (and, at the client, read).
var (
	answerTimeout = 55 * time.Second
	longTimeout   = 30 * time.Minute
	slack         = 5 * time.Second
)

// timeoutOf is how long the daemon has to answer op.
func timeoutOf(op string) time.Duration {
	if op == "review-approve" || op == "review-reject" {
		return longTimeout
	}
	return answerTimeout
}

func (s *Server) handle(c *net.UnixConn, h Handler) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(answerTimeout + slack))
	var resp Response
	defer func() { json.NewEncoder(c).Encode(resp) }()
	peer, err := peerOf(c)
	if err != nil {
		resp.Error = "cannot identify the caller: " + err.Error()
		return
	}
	if !s.admit(peer.UID) {
		resp.Error = fmt.Sprintf("too many requests from uid %d at once; try again when one has finished", peer.UID)
		return
	}
	defer s.leave(peer.UID)
	c.SetReadDeadline(time.Now().Add(requestTimeout))
	req, err := readRequest(c)
	if err != nil {
		resp.Error = "bad request: " + err.Error()
		return
	}
	c.SetDeadline(time.Now().Add(timeoutOf(req.Op) + slack))
	ctx, cancel := context.WithTimeout(context.Background(), timeoutOf(req.Op))
	defer cancel()
	out, err := serveOne(ctx, h, peer, req)
	if err != nil {
		resp.Error = err.Error()
		if resp.Error == "" {
			// An empty error would read as success with no result
			// (found by FuzzServe).
			resp.Error = fmt.Sprintf("answering %q failed without saying why", req.Op)
		}
	} else if b, err := json.Marshal(out); err != nil {
		resp.Error = err.Error()
	} else {
		resp.Result = b
	}
}

// readRequest decodes one request of at most MaxRequestBytes.
func readRequest(c io.Reader) (Request, error) {
	lr := &io.LimitedReader{R: c, N: MaxRequestBytes + 1}
	var req Request
	err := json.NewDecoder(bufio.NewReader(lr)).Decode(&req)
	if lr.N <= 0 {
		return Request{}, fmt.Errorf("larger than %d bytes", MaxRequestBytes)
	}
	// A bare "EOF" says nothing to whoever reads it (found by FuzzServe).
	switch {
	case errors.Is(err, io.EOF):
		return Request{}, errors.New("nothing was sent; send one JSON request")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Request{}, errors.New("the JSON request ends before it is complete")
	}
	return req, err
}

// serveOne runs the handler; a panic in it answers this request with an
// error instead of taking the daemon, and the mount it serves, down.
func serveOne(ctx context.Context, h Handler, peer Peer, req Request) (out any, err error) {
	defer func() {
		if r := recover(); r != nil {
			// One line, whatever the panic's value holds (FuzzServe).
			msg, _, _ := strings.Cut(fmt.Sprint(r), "\n")
			if msg = strings.TrimSpace(msg); msg == "" {
				msg = "the handler panicked"
			}
			out, err = nil, fmt.Errorf("internal error answering %q: %s", req.Op, msg)
		}
	}()
	return h(ctx, peer, req)
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
	p := Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}
	raw.Control(func(fd uintptr) { p.Groups = peerGroups(int(fd)) })
	return p, nil
}

// peerGroups reads SO_PEERGROUPS: the supplementary groups the peer had
// when it connected (nil when the kernel cannot say).
func peerGroups(fd int) []uint32 {
	buf := make([]uint32, 64)
	for range 2 {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch e {
		case 0:
			return buf[:n/4]
		case unix.ERANGE:
			buf = make([]uint32, n/4+1)
		default:
			return nil
		}
	}
	return nil
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
	c.SetDeadline(time.Now().Add(timeoutOf(req.Op) + 2*slack))
	werr := json.NewEncoder(c).Encode(req)
	var resp Response
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		if werr != nil {
			return fmt.Errorf("control socket %s: %w", path, werr)
		}
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	// A daemon refusing the connection (too many at once) answers before
	// reading the request, so the write may have failed: its answer counts.
	if resp.Error != "" {
		return errors.New(resp.Error)
	}
	if out != nil {
		return json.Unmarshal(resp.Result, out)
	}
	return nil
}
