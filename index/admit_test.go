package index

import (
	"strings"
	"testing"
)

func TestAdmit(t *testing.T) {
	text := []byte("hello\n")
	for _, tt := range []struct {
		name   string
		path   string
		size   int64
		head   []byte
		rules  SourceRules
		reason string // "" means admitted
	}{
		{"plain text", "src/main.go", 6, text, SourceRules{}, ""},
		{"empty file", "empty.txt", 0, nil, SourceRules{}, ""},
		{"binary", "a.bin", 4, []byte("ab\x00c"), SourceRules{}, ReasonBinary},
		{"latin-1", "a.txt", 3, []byte("caf\xe9"), SourceRules{}, ReasonNotUTF8},
		{"rune cut by a truncated head", "a.txt", 100, []byte("caf\xc3"), SourceRules{}, ""},
		{"bad byte in a truncated head", "a.txt", 100, []byte("c\xffaf"), SourceRules{}, ReasonNotUTF8},
		{"default bound", "big.txt", DefaultMaxFileBytes + 1, text, SourceRules{}, "larger than 1048576 bytes"},
		{"at the default bound", "big.txt", DefaultMaxFileBytes, text, SourceRules{}, ""},
		{"per-source bound", "a.txt", 11, text, SourceRules{MaxFileBytes: 10}, "larger than 10 bytes"},
		{"no bound", "a.txt", 1 << 40, text, SourceRules{MaxFileBytes: -1}, ""},
		{".git at the root", ".git/config", 6, text, SourceRules{}, ReasonVCS},
		{".git deep", "sub/mod/.git/HEAD", 6, text, SourceRules{}, ReasonVCS},
		{".gitignore is fine", ".gitignore", 6, text, SourceRules{}, ""},
		{"node_modules", "web/node_modules/x/index.js", 6, text, SourceRules{}, ReasonGenerated},
		{"dist", "dist/app.js", 6, text, SourceRules{}, ReasonGenerated},
		{"build", "build/out.txt", 6, text, SourceRules{}, ReasonGenerated},
		{"target", "target/debug/x.d", 6, text, SourceRules{}, ReasonGenerated},
		{"out", "out/x", 6, text, SourceRules{}, ReasonGenerated},
		{".next", ".next/x.js", 6, text, SourceRules{}, ReasonGenerated},
		{"__pycache__", "pkg/__pycache__/m.pyc", 6, text, SourceRules{}, ReasonGenerated},
		{"vendor", "vendor/github.com/x/y.go", 6, text, SourceRules{}, ReasonGenerated},
		{"a file named build", "cmd/build", 6, text, SourceRules{}, ""},
		{".env", ".env", 6, text, SourceRules{}, ReasonSecret},
		{".env.local", "app/.env.local", 6, text, SourceRules{}, ReasonSecret},
		{".envrc is not .env.*", ".envrc", 6, text, SourceRules{}, ""},
		{"pem", "certs/server.pem", 6, text, SourceRules{}, ReasonSecret},
		{"key", "certs/server.KEY", 6, text, SourceRules{}, ReasonSecret},
		{"p12", "a.p12", 6, text, SourceRules{}, ReasonSecret},
		{"pfx", "a.pfx", 6, text, SourceRules{}, ReasonSecret},
		{"id_rsa", "home/.ssh/id_rsa", 6, text, SourceRules{}, ReasonSecret},
		{"id_rsa.pub", "id_rsa.pub", 6, text, SourceRules{}, ReasonSecret},
		{"id_ed25519", "id_ed25519", 6, text, SourceRules{}, ReasonSecret},
		{"id_ecdsa", "id_ecdsa", 6, text, SourceRules{}, ReasonSecret},
		{"credentials.json", "gcp/credentials.json", 6, text, SourceRules{}, ReasonSecret},
		{".npmrc", ".npmrc", 6, text, SourceRules{}, ReasonSecret},
		{".netrc", ".netrc", 6, text, SourceRules{}, ReasonSecret},
		{"package-lock.json", "package-lock.json", 6, text, SourceRules{}, ReasonLockFile},
		{"yarn.lock", "yarn.lock", 6, text, SourceRules{}, ReasonLockFile},
		{"pnpm-lock.yaml", "pnpm-lock.yaml", 6, text, SourceRules{}, ReasonLockFile},
		{"go.sum", "go.sum", 6, text, SourceRules{}, ReasonLockFile},
		{"Cargo.lock", "Cargo.lock", 6, text, SourceRules{}, ReasonLockFile},
		{"poetry.lock", "poetry.lock", 6, text, SourceRules{}, ReasonLockFile},
		{"composer.lock", "composer.lock", 6, text, SourceRules{}, ReasonLockFile},
		{"Gemfile.lock", "Gemfile.lock", 6, text, SourceRules{}, ReasonLockFile},
		{"minified js", "static/app.min.js", 6, text, SourceRules{}, ReasonMinified},
		{"excluded", "docs/a.md", 6, text, SourceRules{Exclude: []string{"docs/**"}}, `excluded by pattern "docs/**"`},
		{"excluded folder prunes", "docs/x/a.md", 6, text, SourceRules{Exclude: []string{"docs"}}, `excluded by pattern "docs"`},
		{"included", "src/a.go", 6, text, SourceRules{Include: []string{"**/*.go"}}, ""},
		{"not included", "README.md", 6, text, SourceRules{Include: []string{"**/*.go"}}, ReasonNotIncluded},
		{"exclude wins", "src/a_test.go", 6, text, SourceRules{Include: []string{"**/*.go"}, Exclude: []string{"**/*_test.go"}}, `excluded by pattern "**/*_test.go"`},
		{"names before content", ".env", 6, []byte("\x00"), SourceRules{}, ReasonSecret},
		{"size before content", "a", 2 << 20, []byte("\x00"), SourceRules{}, "larger than 1048576 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ok, reason := Admit(tt.path, tt.size, tt.head, tt.rules)
			if ok != (tt.reason == "") || reason != tt.reason {
				t.Errorf("Admit(%q, %d) = %v, %q; want reason %q", tt.path, tt.size, ok, reason, tt.reason)
			}
		})
	}
}

func TestAdmitDir(t *testing.T) {
	for _, tt := range []struct {
		path, reason string
		rules        SourceRules
	}{
		{"src", "", SourceRules{}},
		{"a/.git", ReasonVCS, SourceRules{}},
		{"node_modules", ReasonGenerated, SourceRules{}},
		{"docs", `excluded by pattern "docs/**"`, SourceRules{Exclude: []string{"docs/**"}}},
		{"src", "", SourceRules{Include: []string{"**/*.go"}}},
	} {
		ok, reason := AdmitDir(tt.path, tt.rules)
		if ok != (tt.reason == "") || reason != tt.reason {
			t.Errorf("AdmitDir(%q) = %v, %q; want %q", tt.path, ok, reason, tt.reason)
		}
	}
}

func TestValidateRules(t *testing.T) {
	err := SourceRules{Exclude: []string{"a[b"}}.Validate()
	if err == nil || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Validate bad pattern = %v; want one sentence", err)
	}
}

func TestTokenize(t *testing.T) {
	got := tokens("fmt.Println(x_y, Çava) 3.14 a-b")
	want := []string{"fmt", "println", "x_y", "çava", "3", "14", "a", "b"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("tokens = %q; want %q", got, want)
	}
}
