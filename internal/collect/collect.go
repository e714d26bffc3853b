package collect

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/neuralis/neuralisfs/index"
)

// Default budgets (issue 18).
const (
	DefaultMaxFileBytes int64 = 512 << 10
	DefaultMaxBytes     int64 = 32 << 20
	DefaultMaxFiles           = 2000
)

// ReasonBudget excludes a file the ranking put after the cut.
const ReasonBudget = "budget reached"

// Budget bounds a collection; a zero field takes its default.
type Budget struct {
	MaxFileBytes int64 `json:"max_file_bytes"`
	MaxBytes     int64 `json:"max_bytes"`
	MaxFiles     int   `json:"max_files"`
}

// WithDefaults fills the zero fields of b.
func (b Budget) WithDefaults() Budget {
	if b.MaxFileBytes <= 0 {
		b.MaxFileBytes = DefaultMaxFileBytes
	}
	if b.MaxBytes <= 0 {
		b.MaxBytes = DefaultMaxBytes
	}
	if b.MaxFiles <= 0 {
		b.MaxFiles = DefaultMaxFiles
	}
	return b
}

// Source is one source to collect from: its slug, its files confined to
// its root, and its admission settings.
type Source struct {
	Slug  string
	FS    iofs.FS
	Rules index.SourceRules
}

// File is one collected file.
type File struct {
	URI    string `json:"uri"`
	Class  string `json:"class"`
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
	// Content is the file's bytes; left out of JSON (see JSON).
	Content []byte `json:"content,omitempty"`
}

// Excluded is a file (or, with a trailing slash, a folder) considered and
// left out, with the reason.
type Excluded struct {
	URI    string `json:"uri"`
	Reason string `json:"reason"`
}

// Incomplete says why a source was cut short.
type Incomplete struct {
	Source string `json:"source"`
	Reason string `json:"reason"`
}

// Collection is what a principal would be given.
type Collection struct {
	Principal  string       `json:"principal"`
	Sources    []string     `json:"sources"`
	Budget     Budget       `json:"budget"`
	Complete   bool         `json:"complete"`
	Incomplete []Incomplete `json:"incomplete"`
	Digest     string       `json:"digest"`
	Bytes      int64        `json:"bytes"`
	Files      []File       `json:"files"`
	Excluded   []Excluded   `json:"excluded"`
}

type candidate struct {
	slug, rel string
	class     int
	content   []byte
}

// Collect builds the collection of srcs for a reader: canRead(uri) says
// whether the principal may read uri (a folder's uri has no trailing
// slash); what it refuses is absent. A source that cannot be scanned makes
// the collection incomplete, with the error as the reason.
func Collect(ctx context.Context, srcs []Source, canRead func(uri string) bool, b Budget) (*Collection, error) {
	b = b.WithDefaults()
	c := &Collection{Budget: b, Sources: []string{}, Files: []File{}, Excluded: []Excluded{}, Incomplete: []Incomplete{}}
	var cands []candidate
	for _, s := range srcs {
		c.Sources = append(c.Sources, s.Slug)
		rules := s.Rules
		if rules.MaxFileBytes == 0 {
			rules.MaxFileBytes = index.DefaultMaxFileBytes
		}
		if rules.MaxFileBytes < 0 || rules.MaxFileBytes > b.MaxFileBytes {
			rules.MaxFileBytes = b.MaxFileBytes
		}
		rep, err := index.Scan(ctx, index.Source{Slug: s.Slug, FS: s.FS, Include: rules.Include, Exclude: rules.Exclude, MaxFileBytes: rules.MaxFileBytes})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			c.Incomplete = append(c.Incomplete, Incomplete{Source: s.Slug, Reason: err.Error()})
			continue
		}
		for _, sk := range rep.Skipped {
			if canRead(index.URI(s.Slug, strings.TrimSuffix(sk.Path, "/"))) {
				c.Excluded = append(c.Excluded, Excluded{URI: index.URI(s.Slug, sk.Path), Reason: sk.Reason})
			}
		}
		for _, f := range rep.Admitted {
			u := index.URI(s.Slug, f.Path)
			if !canRead(u) {
				continue
			}
			content, err := iofs.ReadFile(s.FS, f.Path)
			switch {
			case errors.Is(err, iofs.ErrNotExist):
				continue // removed since the scan
			case err != nil:
				c.Excluded = append(c.Excluded, Excluded{URI: u, Reason: "unreadable: " + err.Error()})
				continue
			}
			// Changed since the scan: decide again on what was read.
			if ok, reason := index.Admit(f.Path, int64(len(content)), content, rules); !ok {
				c.Excluded = append(c.Excluded, Excluded{URI: u, Reason: reason})
				continue
			}
			cands = append(cands, candidate{slug: s.Slug, rel: f.Path, class: Classify(f.Path), content: content})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		ri, rj := rank[cands[i].class], rank[cands[j].class]
		if ri != rj {
			return ri < rj
		}
		return index.URI(cands[i].slug, cands[i].rel) < index.URI(cands[j].slug, cands[j].rel)
	})
	h := sha256.New()
	cut := "" // the bound that ended the collection
	cutBy := map[string]int{}
	var cutOrder []string
	for _, k := range cands {
		u := index.URI(k.slug, k.rel)
		size := int64(len(k.content))
		if cut == "" {
			switch {
			case len(c.Files) >= b.MaxFiles:
				cut = fmt.Sprintf("max files (%d)", b.MaxFiles)
			case c.Bytes+size > b.MaxBytes:
				cut = fmt.Sprintf("max bytes (%d)", b.MaxBytes)
			}
		}
		if cut != "" {
			c.Excluded = append(c.Excluded, Excluded{URI: u, Reason: ReasonBudget})
			if cutBy[k.slug] == 0 {
				cutOrder = append(cutOrder, k.slug)
			}
			cutBy[k.slug]++
			continue
		}
		sum := sha256.Sum256(k.content)
		d := "sha256:" + hex.EncodeToString(sum[:])
		fmt.Fprintf(h, "%s\x00%s\n", u, d)
		c.Files = append(c.Files, File{URI: u, Class: classNames[k.class], Size: size, Digest: d, Content: k.content})
		c.Bytes += size
	}
	for _, slug := range cutOrder {
		c.Incomplete = append(c.Incomplete, Incomplete{Source: slug,
			Reason: fmt.Sprintf("%s reached: %d admitted files left out", cut, cutBy[slug])})
	}
	sort.Slice(c.Excluded, func(i, j int) bool { return c.Excluded[i].URI < c.Excluded[j].URI })
	c.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	c.Complete = len(c.Incomplete) == 0
	return c, nil
}

// JSON is the collection as `neuralisfs collect --json` prints it and
// <mount>/.neuralis/collection reads: indented, without content.
func JSON(c *Collection) []byte {
	cp := *c
	cp.Files = make([]File, len(c.Files))
	for i, f := range c.Files {
		f.Content = nil
		cp.Files[i] = f
	}
	b, _ := json.MarshalIndent(cp, "", "  ")
	return append(b, '\n')
}

// Frame writes c with its content in the framing of the package doc.
func Frame(w io.Writer, c *Collection) error {
	bw := bufio.NewWriter(w)
	state := "complete"
	if !c.Complete {
		state = "incomplete"
	}
	fmt.Fprintf(bw, "COLLECTION %s files=%d bytes=%d %s\n", c.Digest, len(c.Files), c.Bytes, state)
	for _, in := range c.Incomplete {
		fmt.Fprintf(bw, "INCOMPLETE %s %s\n", strconv.Quote(in.Source), strconv.Quote(in.Reason))
	}
	for _, f := range c.Files {
		fmt.Fprintf(bw, "BEGIN %s %d %s\n", strconv.Quote(f.URI), len(f.Content), f.Digest)
		bw.Write(f.Content)
		fmt.Fprintf(bw, "\nEND %s\n", strconv.Quote(f.URI))
	}
	fmt.Fprintf(bw, "END COLLECTION %s\n", c.Digest)
	return bw.Flush()
}

// Framed is one file read back by Parse.
type Framed struct {
	URI     string
	Content []byte
}

// Parse reads framed output back into its files and digest, checking
// every length, digest and END line.
func Parse(r io.Reader) (files []Framed, digest string, err error) {
	br := bufio.NewReader(r)
	line := func() (string, error) {
		s, err := br.ReadString('\n')
		if err != nil {
			return "", fmt.Errorf("framed collection: unexpected end: %w", err)
		}
		return strings.TrimSuffix(s, "\n"), nil
	}
	head, err := line()
	if err != nil {
		return nil, "", err
	}
	f := strings.Fields(head)
	if len(f) != 5 || f[0] != "COLLECTION" {
		return nil, "", fmt.Errorf("framed collection: first line %q is not a COLLECTION header", head)
	}
	digest = f[1]
	h := sha256.New()
	for {
		l, err := line()
		if err != nil {
			return nil, "", err
		}
		if l == "END COLLECTION "+digest {
			break
		}
		if strings.HasPrefix(l, "INCOMPLETE ") && len(files) == 0 {
			continue
		}
		rest, ok := strings.CutPrefix(l, "BEGIN ")
		if !ok {
			return nil, "", fmt.Errorf("framed collection: %q is not a BEGIN line", l)
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return nil, "", fmt.Errorf("framed collection: BEGIN line %q: %v", l, err)
		}
		uri, _ := strconv.Unquote(q)
		var size int64
		var d string
		if _, err := fmt.Sscanf(rest[len(q):], " %d %s", &size, &d); err != nil || size < 0 {
			return nil, "", fmt.Errorf("framed collection: BEGIN line %q has no size and digest", l)
		}
		content := make([]byte, size)
		if _, err := io.ReadFull(br, content); err != nil {
			return nil, "", fmt.Errorf("framed collection: %s: content cut short: %w", uri, err)
		}
		if sum := sha256.Sum256(content); "sha256:"+hex.EncodeToString(sum[:]) != d {
			return nil, "", fmt.Errorf("framed collection: %s: content does not match its digest", uri)
		}
		if end, err := line(); err != nil || end != "" {
			return nil, "", fmt.Errorf("framed collection: %s: no newline after the content", uri)
		}
		if end, err := line(); err != nil || end != "END "+q {
			return nil, "", fmt.Errorf("framed collection: %s: no END line after the content", uri)
		}
		fmt.Fprintf(h, "%s\x00%s\n", uri, d)
		files = append(files, Framed{URI: uri, Content: content})
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
		return nil, "", fmt.Errorf("framed collection: digest %s does not match its files (%s)", digest, got)
	}
	return files, digest, nil
}

// Classes, in the order they are decided (see the package doc).
const (
	classReadme = iota
	classTest
	classDocs
	classManifest
	classConfig
	classSource
	classOther
)

var classNames = []string{"readme", "test", "docs", "manifest", "config", "source", "other"}

// rank is the position of each class in the collection.
var rank = []int{classReadme: 0, classDocs: 1, classManifest: 2, classConfig: 3, classSource: 4, classOther: 5, classTest: 6}

var testDirs = map[string]bool{"test": true, "tests": true, "__tests__": true, "testdata": true, "spec": true, "specs": true}
var docDirs = map[string]bool{"docs": true, "doc": true, "documentation": true}
var docExts = map[string]bool{".md": true, ".markdown": true, ".rst": true, ".adoc": true, ".txt": true, ".org": true}
var manifests = map[string]bool{"go.mod": true, "go.work": true, "package.json": true, "Cargo.toml": true, "pyproject.toml": true,
	"setup.py": true, "setup.cfg": true, "Gemfile": true, "pom.xml": true, "build.gradle": true, "build.gradle.kts": true,
	"composer.json": true, "Makefile": true, "CMakeLists.txt": true, "Dockerfile": true, "flake.nix": true}
var configExts = map[string]bool{".toml": true, ".yaml": true, ".yml": true, ".json": true, ".ini": true, ".cfg": true, ".conf": true,
	".xml": true, ".proto": true, ".graphql": true, ".gql": true, ".xsd": true, ".avsc": true, ".sql": true}
var sourceExts = map[string]bool{".go": true, ".py": true, ".js": true, ".mjs": true, ".cjs": true, ".ts": true, ".jsx": true, ".tsx": true,
	".rs": true, ".c": true, ".h": true, ".cc": true, ".cpp": true, ".hpp": true, ".java": true, ".kt": true, ".rb": true, ".php": true,
	".swift": true, ".cs": true, ".scala": true, ".sh": true, ".bash": true, ".zsh": true, ".lua": true, ".pl": true, ".r": true,
	".m": true, ".ex": true, ".exs": true, ".erl": true, ".hs": true, ".ml": true, ".clj": true, ".dart": true, ".vue": true,
	".svelte": true, ".zig": true, ".nim": true}

// Classify returns the class number of the slash path p (see the package doc).
func Classify(p string) int {
	base := path.Base(p)
	lower := strings.ToLower(base)
	ext := strings.ToLower(path.Ext(base))
	dirs := strings.Split(path.Dir(p), "/")
	has := func(set map[string]bool) bool {
		for _, d := range dirs {
			if set[d] {
				return true
			}
		}
		return false
	}
	stem := strings.TrimSuffix(base, path.Ext(base))
	manifest := manifests[base] || strings.HasSuffix(base, ".gemspec") || strings.HasPrefix(lower, "requirements") && ext == ".txt"
	switch {
	case strings.HasPrefix(lower, "readme"):
		return classReadme
	case has(testDirs), strings.HasSuffix(stem, "_test"), strings.HasPrefix(base, "test_") && ext == ".py",
		strings.HasSuffix(stem, ".test"), strings.HasSuffix(stem, ".spec"):
		return classTest
	case has(docDirs), docExts[ext] && !manifest:
		return classDocs
	case manifest:
		return classManifest
	case configExts[ext]:
		return classConfig
	case sourceExts[ext]:
		return classSource
	}
	return classOther
}

// ClassName names class c.
func ClassName(c int) string { return classNames[c] }
