package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/neuralis/neuralisfs/index"
	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/internal/journal"
)

// MaxBytes bounds the text of one tool result; the rest is asked for with
// the offset a result names.
const MaxBytes = 64 << 10

// Caller sends one control request to the daemon and decodes its result
// into out (control.Call on the daemon's socket).
type Caller func(req control.Request, out any) error

// New returns the server: its tools, and one resource for each source the
// daemon shows the caller now (a listing of the source's top folder).
func New(version string, call Caller, log *slog.Logger) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "neuralisfs", Version: version}, &mcp.ServerOptions{
		Instructions: "Files of the neuralisfs sources, named by uris <source>://<path>, decided for your uid by the daemon's policy exactly as on the mount. Hidden files are absent.",
		Logger:       log,
	})
	h := handlers{call: call}
	mcp.AddTool(s, &mcp.Tool{Name: "read", Description: "Read a file (uri <source>://<path>), optionally only lines from..to (1-based). At most 64 KiB per call: when the result names a next offset, call again with it."}, h.read)
	mcp.AddTool(s, &mcp.Tool{Name: "list", Description: "List a folder (uri <source>://<path>, or <source>:// for its top) to a depth (default 1), one entry a line: uri, type, size."}, h.list)
	mcp.AddTool(s, &mcp.Tool{Name: "search", Description: "Search the index: hits as uri:line: text, the same as .neuralis/search/<query> on the mount. Filters: source, path (a glob), ext, limit (default 20)."}, h.search)
	mcp.AddTool(s, &mcp.Tool{Name: "status", Description: "The .status of a folder of a git source (uri <source>://<folder>): the working-tree changes you may see."}, h.status)
	mcp.AddTool(s, &mcp.Tool{Name: "history", Description: "The journal records of a file (or of a folder's files: the uri ends in /), newest first."}, h.history)
	mcp.AddTool(s, &mcp.Tool{Name: "write", Description: "Create or replace a file's content. Held for review when a review rule says so (neuralisfs review list shows it); refused with the policy's answer otherwise."}, h.write)
	var st struct {
		Sources []struct {
			Slug string `json:"slug"`
			Kind string `json:"kind"`
		} `json:"sources"`
	}
	if err := call(control.Request{Op: "status"}, &st); err != nil {
		log.Warn("cannot list the sources for resources", "err", err)
	}
	for _, src := range st.Sources {
		u := src.Slug + "://"
		if _, err := url.Parse(u); err != nil {
			continue
		}
		s.AddResource(&mcp.Resource{URI: u, Name: src.Slug, MIMEType: "text/plain",
			Description: fmt.Sprintf("the %s source %s: its top folder, one entry a line", src.Kind, src.Slug)}, h.resource)
	}
	return s
}

type handlers struct{ call Caller }

// ReadIn is the read tool's input.
type ReadIn struct {
	URI    string `json:"uri" jsonschema:"the file, <source>://<path>"`
	From   int    `json:"from,omitempty" jsonschema:"first line (1-based)"`
	To     int    `json:"to,omitempty" jsonschema:"last line (1-based; 0 for the end)"`
	Offset int64  `json:"offset,omitempty" jsonschema:"byte offset to continue from (the next of a previous result)"`
}

// ReadOut is the read tool's structured result; the text is the content.
type ReadOut struct {
	URI    string `json:"uri"`
	Offset int64  `json:"offset"`
	Next   int64  `json:"next,omitempty" jsonschema:"offset of the rest; absent when there is none"`
	Size   int64  `json:"size" jsonschema:"bytes of the file, or of the lines asked for"`
}

func (h handlers) read(ctx context.Context, _ *mcp.CallToolRequest, in ReadIn) (*mcp.CallToolResult, ReadOut, error) {
	var r struct {
		ReadOut
		Content string `json:"content"`
	}
	if err := h.call(control.Request{Op: "mcp-read", URI: in.URI, From: in.From, To: in.To, Offset: in.Offset}, &r); err != nil {
		return nil, ReadOut{}, err
	}
	return text(r.Content), r.ReadOut, nil
}

// ListIn is the list tool's input.
type ListIn struct {
	URI    string `json:"uri" jsonschema:"the folder, <source>://<path> (<source>:// for its top)"`
	Depth  int    `json:"depth,omitempty" jsonschema:"how deep to list (default 1, at most 16)"`
	Offset int64  `json:"offset,omitempty" jsonschema:"entry to continue from (the next of a previous result)"`
}

// Entry is one listed name.
type Entry struct {
	URI  string `json:"uri"`
	Type string `json:"type" jsonschema:"file, folder, symlink or other"`
	Size int64  `json:"size"`
}

// ListOut is the list tool's structured result.
type ListOut struct {
	URI     string  `json:"uri"`
	Entries []Entry `json:"entries"`
	Next    int64   `json:"next,omitempty" jsonschema:"offset of the rest; absent when there is none"`
}

func (h handlers) list(ctx context.Context, _ *mcp.CallToolRequest, in ListIn) (*mcp.CallToolResult, ListOut, error) {
	var out ListOut
	if err := h.call(control.Request{Op: "mcp-list", URI: in.URI, Depth: in.Depth, Offset: in.Offset}, &out); err != nil {
		return nil, ListOut{}, err
	}
	return text(formatList(out)), out, nil
}

func formatList(l ListOut) string {
	var b strings.Builder
	for _, e := range l.Entries {
		fmt.Fprintf(&b, "%s\t%s\t%d\n", index.QuoteURI(e.URI), e.Type, e.Size)
	}
	if l.Next > 0 {
		fmt.Fprintf(&b, "# more: list again with offset %d\n", l.Next)
	}
	return b.String()
}

// SearchIn is the search tool's input: the CLI's query and filters.
type SearchIn struct {
	Query  string `json:"query" jsonschema:"the query, as for neuralisfs search"`
	Source string `json:"source,omitempty" jsonschema:"only this source"`
	Path   string `json:"path,omitempty" jsonschema:"only paths matching this glob"`
	Ext    string `json:"ext,omitempty" jsonschema:"only files with this extension"`
	Limit  int    `json:"limit,omitempty" jsonschema:"at most this many files (default 20)"`
}

// SearchOut is the search tool's structured result.
type SearchOut struct {
	Hits  []Hit `json:"hits"`
	Total int   `json:"total"`
}

// Hit is one matching file and its matching lines.
type Hit struct {
	URI   string `json:"uri"`
	Lines []Line `json:"lines,omitempty"`
}

// Line is one matching line.
type Line struct {
	N    int    `json:"n"`
	Text string `json:"text"`
}

func (h handlers) search(ctx context.Context, _ *mcp.CallToolRequest, in SearchIn) (*mcp.CallToolResult, SearchOut, error) {
	if strings.TrimSpace(in.Query) == "" {
		return nil, SearchOut{}, fmt.Errorf("the query is empty")
	}
	limit := in.Limit
	if limit <= 0 {
		limit = 20 // as .neuralis/search
	}
	var res index.Result
	if err := h.call(control.Request{Op: "search", Query: in.Query, Source: in.Source, Path: in.Path, Ext: in.Ext, Limit: limit}, &res); err != nil {
		return nil, SearchOut{}, err
	}
	out := SearchOut{Hits: []Hit{}, Total: res.Total}
	size := 0
	for i, hit := range res.Hits {
		oh := Hit{URI: hit.URI}
		for _, l := range hit.Lines {
			oh.Lines = append(oh.Lines, Line{N: l.N, Text: l.Raw})
			size += len(hit.URI) + len(l.Raw) + 16
		}
		if size > MaxBytes {
			res.Hits = res.Hits[:i]
			break
		}
		out.Hits = append(out.Hits, oh)
	}
	return text(string(index.FormatText(res))), out, nil
}

// StatusIn is the status tool's input.
type StatusIn struct {
	URI    string `json:"uri" jsonschema:"a folder of a git source, <source>://<folder> (<source>:// for its top)"`
	Offset int64  `json:"offset,omitempty" jsonschema:"byte offset to continue from"`
}

// TextOut is a rendered text's structured result.
type TextOut struct {
	URI    string `json:"uri"`
	Offset int64  `json:"offset"`
	Next   int64  `json:"next,omitempty" jsonschema:"offset of the rest; absent when there is none"`
}

func (h handlers) status(ctx context.Context, _ *mcp.CallToolRequest, in StatusIn) (*mcp.CallToolResult, TextOut, error) {
	var r struct {
		TextOut
		Text string `json:"text"`
	}
	if err := h.call(control.Request{Op: "mcp-status", URI: in.URI, Offset: in.Offset}, &r); err != nil {
		return nil, TextOut{}, err
	}
	return text(r.Text), r.TextOut, nil
}

// HistoryIn is the history tool's input.
type HistoryIn struct {
	URI string `json:"uri" jsonschema:"a file, or a folder ending in /"`
}

// HistoryOut is the history tool's structured result: the journal's
// records, newest first, at most MaxBytes of them.
type HistoryOut struct {
	Records []journal.Record `json:"records"`
	More    bool             `json:"more,omitempty" jsonschema:"older records were left out"`
	Dropped *journal.Dropped `json:"dropped,omitempty" jsonschema:"the journal dropped its oldest records (it keeps max_records): none older than until is left"`
}

func (h handlers) history(ctx context.Context, _ *mcp.CallToolRequest, in HistoryIn) (*mcp.CallToolResult, HistoryOut, error) {
	var rep struct {
		Records []journal.Record `json:"records"`
		Dropped *journal.Dropped `json:"dropped"`
	}
	if err := h.call(control.Request{Op: "history", URI: in.URI}, &rep); err != nil {
		return nil, HistoryOut{}, err
	}
	recs := rep.Records
	out := HistoryOut{Records: []journal.Record{}, Dropped: rep.Dropped}
	size := 0
	var b strings.Builder
	for _, r := range recs {
		line, _ := json.Marshal(r)
		if size += len(line) + 1; size > MaxBytes {
			out.More = true
			break
		}
		out.Records = append(out.Records, r)
		b.Write(line)
		b.WriteByte('\n')
	}
	if len(out.Records) == 0 {
		b.WriteString("# no history\n")
	}
	if rep.Dropped != nil {
		b.WriteString(rep.Dropped.Note() + "\n")
	}
	return text(b.String()), out, nil
}

// WriteIn is the write tool's input.
type WriteIn struct {
	URI     string `json:"uri" jsonschema:"the file, <source>://<path>"`
	Content string `json:"content" jsonschema:"the file's whole new content (less than 64 KiB)"`
}

// WriteOut is the write tool's structured result.
type WriteOut struct {
	URI     string `json:"uri"`
	Bytes   int    `json:"bytes"`
	Created bool   `json:"created"`
	Held    bool   `json:"held" jsonschema:"the write is held for review (neuralisfs review list); the backing file is unchanged"`
}

func (h handlers) write(ctx context.Context, _ *mcp.CallToolRequest, in WriteIn) (*mcp.CallToolResult, WriteOut, error) {
	if len(in.Content) > control.MaxRequestBytes-4096 {
		return nil, WriteOut{}, fmt.Errorf("the content of %s is %d bytes; at most %d can be written in one call", in.URI, len(in.Content), control.MaxRequestBytes-4096)
	}
	var out WriteOut
	if err := h.call(control.Request{Op: "mcp-write", URI: in.URI, Content: in.Content}, &out); err != nil {
		return nil, WriteOut{}, err
	}
	msg := fmt.Sprintf("wrote %d bytes to %s", out.Bytes, out.URI)
	if out.Held {
		msg = fmt.Sprintf("held %d bytes for %s for review (neuralisfs review list); the file itself is unchanged", out.Bytes, out.URI)
	}
	return text(msg), out, nil
}

// resource reads a source's resource: its top folder's listing.
func (h handlers) resource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	var out ListOut
	if err := h.call(control.Request{Op: "mcp-list", URI: req.Params.URI, Depth: 1}, &out); err != nil {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: formatList(out)}}}, nil
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}
