package mounts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"
)

// CodeMCPError is an mcp source whose server answered, but not with a
// resource list (a JSON-RPC error, a failed handshake).
const CodeMCPError = "MCP_ERROR"

// mcpMaxResources bounds one snapshot, so a server that pages forever
// cannot hold the feed.
const mcpMaxResources = 10000

// mcpState is what an mcp feed knows beyond its entries (under feed.mu).
type mcpState struct {
	have         bool      // a snapshot was taken (now or by an earlier run)
	code, reason string    // the last round's failure; "" after a success
	failedAt     time.Time // when it first failed in a row
	skipped      []string  // "<uri>: <reason>" of the last good snapshot
	taken        time.Time // when the last good snapshot was taken
}

// mcpSaved is an mcp feed's state.json.
type mcpSaved struct {
	Entries []*feedEntry `json:"entries"`
	Skipped []string     `json:"skipped,omitempty"`
	Taken   time.Time    `json:"taken"`
}

// MCPPath is the path in the tree of the resource at uri: the URI's host
// (if any) followed by its percent-decoded path, or its percent-decoded
// opaque part for a URI without "//" ("urn:a:b" → "a:b"); the query and
// fragment are dropped. "scheme://host/a/b.md" is "host/a/b.md" and
// "file:///etc/x" is "etc/x". A path with an empty, "." or ".." segment,
// a control character or a segment longer than 255 bytes is refused.
func MCPPath(uri string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", fmt.Errorf("not a URI")
	}
	var p string
	if u.Opaque != "" {
		o, err := url.PathUnescape(u.Opaque)
		if err != nil {
			return "", fmt.Errorf("not a URI")
		}
		p = o
	} else {
		p = u.Host
		if u.Path != "" {
			if p != "" {
				p += "/"
			}
			p += strings.TrimPrefix(u.Path, "/")
		}
	}
	if p == "" {
		return "", errors.New("the URI names no path")
	}
	for _, seg := range strings.Split(p, "/") {
		switch {
		case seg == "":
			return "", fmt.Errorf("the path %q has an empty segment", p)
		case seg == "." || seg == "..":
			return "", fmt.Errorf("the path %q has a %q segment", p, seg)
		case strings.ContainsFunc(seg, isControl):
			return "", errors.New("the path holds a control character")
		case len(seg) > 255:
			return "", errors.New("a segment of the path is longer than 255 bytes")
		}
	}
	return p, nil
}

// loadMCP takes an earlier run's snapshot from state.json, keeping the
// entries whose file is still in the tree with the size it had.
func (f *feed) loadMCP() {
	data, err := os.ReadFile(filepath.Join(f.dir, "state.json"))
	if err != nil {
		return
	}
	var saved mcpSaved
	if json.Unmarshal(data, &saved) != nil || saved.Taken.IsZero() {
		return
	}
	for _, e := range saved.Entries {
		var st unix.Stat_t
		if e.Digest == "" || checkRel(e.Path) != nil || unix.Lstat(filepath.Join(f.tree, e.Path), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != e.Size {
			continue
		}
		f.entries = append(f.entries, e)
	}
	f.mcp.have, f.mcp.skipped, f.mcp.taken = true, saved.Skipped, saved.Taken
}

// saveMCP writes state.json (under f.mu).
func (f *feed) saveMCP() error {
	data, err := json.MarshalIndent(mcpSaved{Entries: f.entries, Skipped: f.mcp.skipped, Taken: f.mcp.taken}, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(f.dir, "tmp"), filepath.Join(f.dir, "state.json"), data, 0o600, -1, -1)
}

// mcpStatus is an mcp feed's status (under f.mu): UNAVAILABLE until a
// snapshot was taken, DEGRADED while the last round failed after a good
// one; the resources skipped are named in the reason.
func (f *feed) mcpStatus() Status {
	m := &f.mcp
	if !m.have {
		code, reason := m.code, m.reason
		if code == "" {
			code, reason = CodeNotFetchedYet, f.cfg.URL+" not read yet"
		}
		return Status{State: Unavailable, Code: code, Reason: reason}
	}
	var parts []string
	if m.code != "" {
		parts = append(parts, fmt.Sprintf("%s (since %s); serving the resources read at %s",
			m.reason, m.failedAt.UTC().Format(time.RFC3339), m.taken.UTC().Format(time.RFC3339)))
	}
	if len(m.skipped) > 0 {
		parts = append(parts, "skipped "+strings.Join(m.skipped, "; "))
	}
	if m.code != "" {
		return Status{State: Degraded, Reason: strings.Join(parts, "; ")}
	}
	return Status{State: Available, Reason: strings.Join(parts, "; ")}
}

// mcpIdentity is the digest over (path, content digest) of the snapshot's
// files canRead allows, sorted by path (under f.mu).
func (f *feed) mcpIdentity(canRead func(rel string) bool) string {
	if !f.mcp.have {
		return ""
	}
	es := append([]*feedEntry(nil), f.entries...)
	sort.Slice(es, func(i, j int) bool { return es[i].Path < es[j].Path })
	h := sha256.New()
	for _, e := range es {
		if canRead != nil && !canRead(e.Path) {
			continue
		}
		d, err := hex.DecodeString(e.Digest)
		if err != nil {
			continue
		}
		h.Write([]byte(e.Path))
		h.Write([]byte{0})
		h.Write(d)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// runMCP takes a snapshot at once and then every refresh.
func (f *feed) runMCP(ctx context.Context, log *slog.Logger, first func()) {
	f.snapshotMCP(ctx, log)
	first()
	for sleep(ctx, f.cfg.RefreshOrDefault()) {
		f.snapshotMCP(ctx, log)
	}
}

// mcpFile is one resource of a snapshot that became a file.
type mcpFile struct {
	path, uri string
	data      []byte
}

// snapshotMCP lists and reads the server's resources and makes the tree
// hold exactly the text ones; a failure keeps the last snapshot.
func (f *feed) snapshotMCP(ctx context.Context, log *slog.Logger) {
	files, skipped, code, err := f.readMCP(ctx)
	if ctx.Err() != nil {
		return // shutting down
	}
	if err != nil {
		reason := cleanHeader(err.Error())
		f.mu.Lock()
		if f.mcp.code == "" {
			f.mcp.failedAt = time.Now()
		}
		if f.mcp.code != code || f.mcp.reason != reason {
			log.Warn("mcp source read failed", "source", f.cfg.Slug, "url", f.cfg.URL, "code", code, "reason", reason, "serving_last_good", f.mcp.have)
		}
		f.mcp.code, f.mcp.reason = code, reason
		f.unlock()
		return
	}
	f.mu.Lock()
	defer f.unlock()
	old := map[string]*feedEntry{}
	for _, e := range f.entries {
		old[e.Path] = e
	}
	var entries []*feedEntry
	now := time.Now()
	for _, fl := range files {
		d := digest(fl.data)
		if e, ok := old[fl.path]; !ok || e.Digest != d {
			if err := f.put(fl.path, fl.data, 0o444, -1, -1); err != nil {
				if f.mcp.code == "" {
					f.mcp.failedAt = now
				}
				f.mcp.code, f.mcp.reason = CodeCacheUnwritable, "the resources read cannot be written: "+err.Error()
				return
			}
		}
		entries = append(entries, &feedEntry{Path: fl.path, Origin: fl.uri, Digest: d, Size: int64(len(fl.data)), Fetched: now})
	}
	keep := map[string]bool{}
	for _, e := range entries {
		keep[e.Path] = true
	}
	for p := range old {
		if !keep[p] {
			os.Remove(filepath.Join(f.tree, filepath.FromSlash(p)))
			for d := path.Dir(p); d != "."; d = path.Dir(d) {
				if os.Remove(filepath.Join(f.tree, filepath.FromSlash(d))) != nil {
					break // not empty: a file of this snapshot is in it
				}
			}
		}
	}
	f.entries = entries
	f.mcp.have, f.mcp.code, f.mcp.reason, f.mcp.skipped, f.mcp.taken = true, "", "", skipped, now
	f.saveMCP()
}

// readMCP connects to the server, follows resources/list's cursors and
// reads each resource. Resources are taken in URI order, so of two that
// come to the same path (or where one's path is a folder of the other's)
// the first URI wins and the other is skipped, naming it.
func (f *feed) readMCP(ctx context.Context) (files []mcpFile, skipped []string, code string, err error) {
	timeout := f.cfg.TimeoutOrDefault()
	max := f.cfg.MaxBytesOrDefault()
	client := mcp.NewClient(&mcp.Implementation{Name: "neuralisfs", Version: "1"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: f.cfg.URL, MaxRetries: -1, DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Timeout: timeout}}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	session, err := client.Connect(cctx, tr, nil)
	cancel()
	if err != nil {
		return nil, nil, mcpCode(err), fmt.Errorf("%s: %v", f.cfg.URL, mcpError(err, timeout))
	}
	defer session.Close()
	var res []*mcp.Resource
	seen := map[string]bool{}
	params := &mcp.ListResourcesParams{}
	for {
		lctx, cancel := context.WithTimeout(ctx, timeout)
		page, err := session.ListResources(lctx, params)
		cancel()
		if err != nil {
			return nil, nil, mcpCode(err), fmt.Errorf("%s resources/list: %v", f.cfg.URL, mcpError(err, timeout))
		}
		res = append(res, page.Resources...)
		if page.NextCursor == "" {
			break
		}
		if seen[page.NextCursor] || len(res) > mcpMaxResources {
			return nil, nil, CodeMCPError, fmt.Errorf("%s resources/list: more than %d resources, or a cursor that repeats", f.cfg.URL, mcpMaxResources)
		}
		seen[page.NextCursor] = true
		params = &mcp.ListResourcesParams{Cursor: page.NextCursor}
	}
	sort.Slice(res, func(i, j int) bool { return res[i].URI < res[j].URI })
	taken := map[string]string{} // path → URI; folders → ""
	skip := func(uri, format string, args ...any) {
		skipped = append(skipped, cleanHeader(uri+": "+fmt.Sprintf(format, args...)))
	}
	for _, r := range res {
		if r == nil || (len(files) > 0 && files[len(files)-1].uri == r.URI) {
			continue
		}
		p, err := MCPPath(r.URI)
		if err != nil {
			skip(r.URI, "%v", err)
			continue
		}
		if u, ok := taken[p]; ok {
			if u == "" {
				skip(r.URI, "its path %q is a folder of other resources", p)
			} else {
				skip(r.URI, "its path %q is already %s's", p, u)
			}
			continue
		}
		clash := ""
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if u := taken[d]; u != "" {
				clash = fmt.Sprintf("its folder %q is already the file of %s", d, u)
				break
			}
		}
		if clash != "" {
			skip(r.URI, "%s", clash)
			continue
		}
		if r.Size > max {
			skip(r.URI, "larger than max_bytes (%d bytes)", max)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		rr, err := session.ReadResource(rctx, &mcp.ReadResourceParams{URI: r.URI})
		cancel()
		if err != nil {
			return nil, nil, mcpCode(err), fmt.Errorf("%s resources/read %s: %v", f.cfg.URL, r.URI, mcpError(err, timeout))
		}
		var data []byte
		binary := false
		for _, c := range rr.Contents {
			if c == nil || (c.URI != "" && c.URI != r.URI) {
				continue
			}
			if c.Blob != nil {
				binary = true
				break
			}
			data = append(data, c.Text...)
		}
		switch {
		case binary:
			skip(r.URI, "binary (blob) resource")
			continue
		case int64(len(data)) > max:
			skip(r.URI, "larger than max_bytes (%d bytes)", max)
			continue
		case bytes.IndexByte(data, 0) >= 0:
			skip(r.URI, "binary content (a NUL byte)")
			continue
		case !utf8.Valid(data):
			skip(r.URI, "not valid UTF-8 text")
			continue
		}
		taken[p] = r.URI
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			taken[d] = ""
		}
		files = append(files, mcpFile{path: p, uri: r.URI, data: data})
	}
	return files, skipped, "", nil
}

// mcpCode is UNREACHABLE for an error of the connection, MCP_ERROR for
// one the server answered.
func mcpCode(err error) string {
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		return CodeUnreachable
	}
	return CodeMCPError
}

// mcpError says a timeout in words.
func mcpError(err error, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err) {
		return fmt.Errorf("did not answer within %v (timeout)", timeout)
	}
	return err
}
