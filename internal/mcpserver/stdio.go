package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxLine bounds one inbound JSON-RPC line.
const maxLine = 4 << 20

// Serve runs s on in and out (stdin and stdout), one JSON-RPC message a
// line, until in ends or ctx is done.
//
// The SDK's transport ends the session on a line it cannot decode; a
// client's one bad line must not end it, so lines are checked first: a
// line that is not a JSON-RPC 2.0 message is answered with a JSON-RPC
// error (parse error, or invalid request with its id) and dropped, and the
// session goes on.
func Serve(ctx context.Context, s *mcp.Server, in io.Reader, out io.Writer) error {
	w := &lockedWriter{w: out}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(filter(in, pw, w)) }()
	return s.Run(ctx, &mcp.IOTransport{Reader: pr, Writer: nopCloser{w}, MaxLineLength: maxLine})
}

// lockedWriter writes whole messages from the SDK and from filter.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// filter copies the well-formed lines of in to pw and answers the others
// on out. It returns nil when in ends.
func filter(in io.Reader, pw io.Writer, out io.Writer) error {
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		line, tooLong, err := readLine(br)
		if len(line) > 0 || tooLong {
			if msg := check(line, tooLong); msg != nil {
				out.Write(msg)
			} else if _, werr := pw.Write(append(line, '\n')); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// readLine reads one line without its newline; past maxLine bytes it
// drops the rest of the line and reports tooLong.
func readLine(br *bufio.Reader) ([]byte, bool, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		if len(line)+len(part) <= maxLine {
			line = append(line, part...)
		} else {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			return nil, true, err
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSpace(line), false, err
	}
}

// check returns the JSON-RPC error answering a line that is not one
// JSON-RPC 2.0 request, notification or response, or nil.
func check(line []byte, tooLong bool) []byte {
	if tooLong {
		return rpcError(nil, -32700, fmt.Sprintf("parse error: a message is longer than %d bytes", maxLine))
	}
	if !json.Valid(line) {
		return rpcError(nil, -32700, "parse error: the line is not JSON")
	}
	if line[0] != '{' {
		return rpcError(nil, -32600, "invalid request: one JSON-RPC 2.0 object a line (batches are not served)")
	}
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  *string         `json:"method"`
		Result  json.RawMessage `json:"result"`
		Error   json.RawMessage `json:"error"`
		Params  json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return rpcError(nil, -32600, "invalid request: "+err.Error())
	}
	id := m.ID
	if len(id) > 0 && id[0] != '"' && (id[0] < '0' || id[0] > '9') && id[0] != '-' {
		return rpcError(nil, -32600, "invalid request: the id must be a string or a number")
	}
	switch {
	case m.JSONRPC != "2.0":
		return rpcError(id, -32600, `invalid request: "jsonrpc" must be "2.0"`)
	case m.Method != nil && *m.Method == "":
		return rpcError(id, -32600, "invalid request: the method is empty")
	case m.Method == nil && (len(id) == 0 || (m.Result == nil && m.Error == nil)):
		return rpcError(id, -32600, "invalid request: no method")
	case len(m.Params) > 0 && m.Params[0] != '{' && m.Params[0] != '[' && string(m.Params) != "null":
		return rpcError(id, -32602, "invalid params: params must be an object")
	}
	return nil
}

func rpcError(id json.RawMessage, code int, msg string) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   any             `json:"error"`
	}{"2.0", id, map[string]any{"code": code, "message": msg}})
	return append(b, '\n')
}
