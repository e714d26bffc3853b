package mounts

import (
	"strings"
	"testing"
)

func TestMCPPath(t *testing.T) {
	for _, tt := range []struct {
		uri, path, err string
	}{
		{"test://files/a.md", "files/a.md", ""},
		{"scheme://host/a/b.md", "host/a/b.md", ""},
		{"file:///etc/motd", "etc/motd", ""},
		{"demo://resource/static/document/a%20b.md", "resource/static/document/a b.md", ""},
		{"https://example.com/docs/x.md?lang=en#top", "example.com/docs/x.md", ""},
		{"urn:isbn:0451450523", "isbn:0451450523", ""},
		{"test://h/a%2Fb", "h/a/b", ""},
		{"test://h/a/../b", "", `a ".." segment`},
		{"test://h/a/%2E%2E/b", "", `a ".." segment`},
		{"test://h/a//b", "", "an empty segment"},
		{"test://h/dir/", "", "an empty segment"},
		{"test://h/./b", "", `a "." segment`},
		{"test://h/a%0Ab", "", "control character"},
		{"test:", "", "names no path"},
		{"test://h/" + strings.Repeat("x", 256), "", "longer than 255 bytes"},
	} {
		p, err := MCPPath(tt.uri)
		if tt.err == "" && (err != nil || p != tt.path) {
			t.Errorf("MCPPath(%q) = %q, %v; want %q", tt.uri, p, err, tt.path)
		}
		if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("MCPPath(%q) = %q, %v; want an error with %q", tt.uri, p, err, tt.err)
		}
	}
}
