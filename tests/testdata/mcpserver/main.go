// Command mcpserver is the MCP server TestMCPSource runs: it serves, over
// streamable HTTP on 127.0.0.1, each file of the folder it is given as
// the text resource test://files/<name> (listed two to a page, re-read
// from disk on every read, added and removed as the folder changes), a
// blob resource, a text resource holding a NUL byte, one whose path is
// test://files/a.md's, one of 2 KiB and one with an empty path segment. It prints its
// address on the first line of its output.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	dir := os.Args[1]
	srv := mcp.NewServer(&mcp.Implementation{Name: "testdata", Version: "1"}, &mcp.ServerOptions{PageSize: 2})
	srv.AddResource(&mcp.Resource{URI: "test://bin/logo.png", Name: "logo", MIMEType: "image/png"},
		func(ctx context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: r.Params.URI, MIMEType: "image/png", Blob: []byte{0x89, 'P', 'N', 'G'}}}}, nil
		})
	srv.AddResource(&mcp.Resource{URI: "test://bin/nul.txt", Name: "nul"},
		func(ctx context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: r.Params.URI, Text: "a\x00b"}}}, nil
		})
	text := func(uri, body string) {
		srv.AddResource(&mcp.Resource{URI: uri, Name: uri},
			func(ctx context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: r.Params.URI, Text: body}}}, nil
			})
	}
	text("test://files/a.md?v=2", "same path as test://files/a.md\n")
	text("test://big/x.txt", strings.Repeat("x", 2048))
	text("test://bad//x.txt", "empty segment\n")
	have := map[string]bool{}
	sync := func() {
		ents, _ := os.ReadDir(dir)
		now := map[string]bool{}
		for _, e := range ents {
			uri := "test://files/" + e.Name()
			now[uri] = true
			if have[uri] {
				continue
			}
			p := filepath.Join(dir, e.Name())
			srv.AddResource(&mcp.Resource{URI: uri, Name: e.Name(), MIMEType: "text/plain"},
				func(ctx context.Context, r *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
					b, err := os.ReadFile(p)
					if err != nil {
						return nil, mcp.ResourceNotFoundError(r.Params.URI)
					}
					return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: r.Params.URI, Text: string(b)}}}, nil
				})
		}
		for uri := range have {
			if !now[uri] {
				srv.RemoveResources(uri)
			}
		}
		have = now
	}
	sync()
	go func() {
		for range time.Tick(50 * time.Millisecond) {
			sync()
		}
	}()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("http://%s/mcp\n", l.Addr())
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	log.Fatal(http.Serve(l, h))
}
