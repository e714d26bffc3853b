package collect

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/neuralis/neuralisfs/index"
)

func TestCollectClassify(t *testing.T) {
	for _, tt := range []struct {
		path, class string
	}{
		{"README.md", "readme"},
		{"sub/readme", "readme"},
		{"docs/guide.go", "docs"},
		{"notes.txt", "docs"},
		{"go.mod", "manifest"},
		{"CMakeLists.txt", "manifest"},
		{"requirements-dev.txt", "manifest"},
		{"x.gemspec", "manifest"},
		{"conf/app.yaml", "config"},
		{"api.proto", "config"},
		{"main.go", "source"},
		{"LICENSE", "other"},
		{"main_test.go", "test"},
		{"tests/helper.py", "test"},
		{"test_x.py", "test"},
		{"a.spec.ts", "test"},
		{"docs/testdata/x.md", "test"},
	} {
		if got := ClassName(Classify(tt.path)); got != tt.class {
			t.Errorf("Classify(%q) = %s; want %s", tt.path, got, tt.class)
		}
	}
}

func digestOf(b string) string {
	s := sha256.Sum256([]byte(b))
	return "sha256:" + hex.EncodeToString(s[:])
}

func collectionDigest(uris, contents []string) string {
	h := sha256.New()
	for i := range uris {
		fmt.Fprintf(h, "%s\x00%s\n", uris[i], digestOf(contents[i]))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func TestCollectRankBudgetsReasons(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md":         {Data: []byte("readme\n")},
		"docs/guide.md":     {Data: []byte("guide\n")},
		"go.mod":            {Data: []byte("module x\n")},
		"app.toml":          {Data: []byte("a = 1\n")},
		"main.go":           {Data: []byte("package main\n")},
		"LICENSE":           {Data: []byte("MIT\n")},
		"main_test.go":      {Data: []byte("package main // test\n")},
		"big.go":            {Data: bytes.Repeat([]byte("x"), 100)},
		"bin.dat":           {Data: []byte("a\x00b")},
		"latin1.txt":        {Data: []byte("caf\xe9")},
		".env":              {Data: []byte("TOKEN=1")},
		"id_rsa":            {Data: []byte("key")},
		"cert.pem":          {Data: []byte("cert")},
		"secret/plan.md":    {Data: []byte("hidden\n")},
		"node_modules/a.js": {Data: []byte("x")},
	}
	canRead := func(u string) bool { return !strings.HasPrefix(u, "s://secret") }
	src := []Source{{Slug: "s", FS: fsys}}

	// Unbounded: every admitted visible file, ranked.
	c, err := Collect(context.Background(), src, canRead, Budget{MaxFileBytes: 50})
	if err != nil {
		t.Fatal(err)
	}
	uris := []string{"s://README.md", "s://docs/guide.md", "s://go.mod", "s://app.toml", "s://main.go", "s://LICENSE", "s://main_test.go"}
	contents := []string{"readme\n", "guide\n", "module x\n", "a = 1\n", "package main\n", "MIT\n", "package main // test\n"}
	var got []string
	for _, f := range c.Files {
		got = append(got, f.URI)
	}
	if fmt.Sprint(got) != fmt.Sprint(uris) {
		t.Errorf("files = %v; want %v", got, uris)
	}
	if want := collectionDigest(uris, contents); c.Digest != want {
		t.Errorf("digest = %s; want %s", c.Digest, want)
	}
	if !c.Complete {
		t.Errorf("complete = false; incomplete %v", c.Incomplete)
	}
	wantEx := map[string]string{
		"s://.env":          index.ReasonSecret,
		"s://big.go":        "larger than 50 bytes",
		"s://bin.dat":       index.ReasonBinary,
		"s://cert.pem":      index.ReasonSecret,
		"s://id_rsa":        index.ReasonSecret,
		"s://latin1.txt":    index.ReasonNotUTF8,
		"s://node_modules/": index.ReasonGenerated,
	}
	gotEx := map[string]string{}
	for _, e := range c.Excluded {
		gotEx[e.URI] = e.Reason
	}
	if fmt.Sprint(gotEx) != fmt.Sprint(wantEx) {
		t.Errorf("excluded = %v; want %v", gotEx, wantEx)
	}

	// max files: a prefix of the ranking.
	c, _ = Collect(context.Background(), src, canRead, Budget{MaxFileBytes: 50, MaxFiles: 2})
	if len(c.Files) != 2 || c.Files[1].URI != "s://docs/guide.md" || c.Complete ||
		len(c.Incomplete) != 1 || !strings.Contains(c.Incomplete[0].Reason, "max files (2) reached: 5 admitted files left out") {
		t.Errorf("max files 2: files %v, incomplete %v", c.Files, c.Incomplete)
	}
	// max bytes: README (7) + guide (6) = 13 fit in 15, go.mod (9) does not.
	c, _ = Collect(context.Background(), src, canRead, Budget{MaxFileBytes: 50, MaxBytes: 15})
	if len(c.Files) != 2 || c.Bytes != 13 || c.Complete || !strings.Contains(c.Incomplete[0].Reason, "max bytes (15)") {
		t.Errorf("max bytes 15: files %v, incomplete %v", c.Files, c.Incomplete)
	}
	n := 0
	for _, e := range c.Excluded {
		if e.Reason == ReasonBudget {
			n++
		}
	}
	if n != 5 {
		t.Errorf("max bytes 15: %d files budget reached; want 5", n)
	}
	for _, e := range c.Excluded {
		if strings.Contains(e.URI, "secret") {
			t.Errorf("hidden file listed: %v", e)
		}
	}
}

func TestCollectFrameRoundTrip(t *testing.T) {
	tricky := "BEGIN \"s://x\" 3 sha256:00\nEND \"s://README.md\"\nEND COLLECTION sha256:0\n"
	fsys := fstest.MapFS{
		"README.md":          {Data: []byte(tricky)},
		"no-newline.go":      {Data: []byte("package x")},
		"empty.txt":          {Data: []byte{}},
		"we\"ird name\n.txt": {Data: []byte("odd\n")},
	}
	fsys["z.txt"] = &fstest.MapFile{Data: []byte("cut by the budget\n")}
	c, err := Collect(context.Background(), []Source{{Slug: "s", FS: fsys}}, func(string) bool { return true }, Budget{MaxFiles: 4})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Frame(&buf, c); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "\nINCOMPLETE \"s\" \"max files (4) reached: 1 admitted files left out\"\n") {
		t.Errorf("framed output does not say why it is incomplete:\n%s", buf.String())
	}
	files, digest, err := Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if digest != c.Digest || len(files) != len(c.Files) {
		t.Fatalf("parsed %d files digest %s; want %d, %s", len(files), digest, len(c.Files), c.Digest)
	}
	for i, f := range files {
		want := fsys[strings.TrimPrefix(c.Files[i].URI, "s://")].Data
		if f.URI != c.Files[i].URI || !bytes.Equal(f.Content, want) {
			t.Errorf("file %d = %q %q; want %q %q", i, f.URI, f.Content, c.Files[i].URI, want)
		}
	}
}

func TestCollectUnavailableSource(t *testing.T) {
	c, err := Collect(context.Background(), []Source{{Slug: "gone", FS: nil}}, func(string) bool { return true }, Budget{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Complete || len(c.Incomplete) != 1 || c.Incomplete[0].Source != "gone" {
		t.Errorf("incomplete = %v", c.Incomplete)
	}
}
