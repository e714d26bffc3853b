package mounts

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Kinds of source.
const (
	KindLocal     = "local"
	KindGit       = "git"
	KindGitPinned = "git-pinned"
	KindRepos     = "repos"
	// Read-only kinds served from a cache under state_dir (feed.go).
	KindFile   = "file"
	KindInline = "inline"
	KindHTTP   = "http"
	KindMCP    = "mcp"
)

var kinds = []string{KindLocal, KindGit, KindGitPinned, KindRepos, KindFile, KindInline, KindHTTP, KindMCP}

// IsFeedKind reports whether kind is served from a cache folder that the
// daemon fills (file, inline, http, mcp) rather than from a folder on disk.
func IsFeedKind(kind string) bool {
	return kind == KindFile || kind == KindInline || kind == KindHTTP || kind == KindMCP
}

var slugRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// ValidSlug reports whether s is a well-formed source slug.
func ValidSlug(s string) bool { return slugRE.MatchString(s) && len(s) <= 64 }

// Duration is a time.Duration written as a string ("1s", "250ms") in TOML.
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"1s\" or \"250ms\"", b)
	}
	if v < 0 {
		return fmt.Errorf("%q is negative", b)
	}
	d.Duration = v
	return nil
}

// Config is the parsed and validated config.toml.
type Config struct {
	// File is the absolute path of the file the config was read from.
	File string `toml:"-"`

	StateDir   string            `toml:"state_dir"`
	Mount      MountConfig       `toml:"mount"`
	Policy     PolicyConfig      `toml:"policy"`
	Index      IndexConfig       `toml:"index"`
	Journal    JournalConfig     `toml:"journal"`
	Review     ReviewConfig      `toml:"review"`
	Metrics    MetricsConfig     `toml:"metrics"`
	Sources    []SourceConfig    `toml:"source"`
	Principals []PrincipalConfig `toml:"principal"`
	Rules      []RuleConfig      `toml:"rule"`
	Views      []ViewConfig      `toml:"view"`
	// Layers are the [[layer]] entries. Parse also appends each to Sources
	// as a source of its own (SourceConfig.Layer names the source it
	// shows part of), so everything that serves, watches and indexes
	// sources serves layers too.
	Layers []LayerConfig `toml:"layer"`

	// lines maps "table[i].key" (or "table.key", or "key") to its line in File.
	lines map[string]int
}

// MountConfig is the [mount] table.
type MountConfig struct {
	// Mountpoint is used when the command line names none.
	Mountpoint string `toml:"mountpoint"`
	// AllowOther lets other uids (agents in containers) enter the mount.
	// It defaults to true when the daemon runs as root.
	AllowOther *bool `toml:"allow_other"`
	// EntryTimeout and AttrTimeout bound how long the kernel may cache
	// names and attributes whose policy decision is the same for everyone.
	EntryTimeout *Duration `toml:"entry_timeout"`
	AttrTimeout  *Duration `toml:"attr_timeout"`
	// WatchedTimeout replaces both while every folder of a source is
	// watched, so that every change to it invalidates the kernel's caches
	// (default 60s; 0 keeps entry_timeout and attr_timeout).
	WatchedTimeout *Duration `toml:"watched_timeout"`
	// Passthrough hands regular-file I/O to the kernel (needs CAP_SYS_ADMIN).
	Passthrough *bool `toml:"passthrough"`
	// IOURing chooses the transport: "auto" (the default: FUSE over
	// io_uring where the kernel offers it, else /dev/fuse), "off"
	// (/dev/fuse) or "on" (refuse to mount without it).
	IOURing string `toml:"io_uring"`
}

// PolicyConfig is the [policy] table.
type PolicyConfig struct {
	Default string `toml:"default"`
}

// IndexConfig is the [index] table.
type IndexConfig struct {
	Enabled      *bool     `toml:"enabled"`
	BatchDelay   *Duration `toml:"batch_delay"`
	MaxFileBytes int64     `toml:"max_file_bytes"`
}

// JournalConfig is the [journal] table.
type JournalConfig struct {
	Enabled      *bool `toml:"enabled"`
	MaxBytes     int64 `toml:"max_bytes"`
	MaxFileBytes int64 `toml:"max_file_bytes"`
	// MaxRecords bounds the records kept (default 100,000): past it the
	// oldest are dropped, with the content only they used.
	MaxRecords int `toml:"max_records"`
	// Sync is "batch" (default: copies are made durable together within
	// 100 ms) or "each" (every copy is fsynced before the change proceeds).
	Sync string `toml:"sync"`
}

// ReviewConfig is the [review] table: held changes (rules with review).
type ReviewConfig struct {
	// MaxBytes bounds what one principal may hold (default 1 GiB); past
	// it further held writes fail with EDQUOT.
	MaxBytes int64 `toml:"max_bytes"`
}

// ReviewMaxBytes is [review] max_bytes with its default.
func (c *Config) ReviewMaxBytes() int64 {
	if c.Review.MaxBytes > 0 {
		return c.Review.MaxBytes
	}
	return 1 << 30
}

// JournalEnabled reports whether overwritten and deleted content is kept
// (default true).
func (c *Config) JournalEnabled() bool {
	return c.Journal.Enabled == nil || *c.Journal.Enabled
}

// MetricsConfig is the [metrics] table.
type MetricsConfig struct {
	// Listen is where the Prometheus endpoint is served: "host:port", or
	// the absolute path of a unix socket; "" (the default) serves none.
	Listen string `toml:"listen"`
}

// SourceConfig is one [[source]] entry.
type SourceConfig struct {
	Slug         string   `toml:"slug"`
	Kind         string   `toml:"kind"`
	Path         string   `toml:"path"`
	Rev          string   `toml:"rev"`
	ReadOnly     bool     `toml:"read_only"`
	VisibleTo    []string `toml:"visible_to"`
	Default      string   `toml:"default"`
	Include      []string `toml:"include"`
	Exclude      []string `toml:"exclude"`
	MaxFileBytes int64    `toml:"max_file_bytes"`
	// MaxBytes bounds a file or http source's content, per file (default
	// 16 MiB).
	MaxBytes int64 `toml:"max_bytes"`
	// Refresh is how often a file source's file is checked (default 1s)
	// and an http source's URLs are fetched again (default 5m).
	Refresh *Duration `toml:"refresh"`
	// Timeout bounds one fetch of an http source (default 30s).
	Timeout *Duration `toml:"timeout"`
	// Text and Name are an inline source's content and its file name.
	Text string `toml:"text"`
	Name string `toml:"name"`
	// Files are an http source's files.
	Files []FeedFileConfig `toml:"file"`
	// URL is an mcp source's streamable HTTP endpoint (feed_mcp.go).
	URL string `toml:"url"`
	// Cache is where a file, inline or http source's content is kept:
	// <state_dir>/sources/<slug>. Set by Parse.
	Cache string `toml:"-"`
	// Layer, for a source made from a [[layer]], is the slug of the
	// source it shows part of; Include and Exclude then say which part.
	Layer string `toml:"-"`
	// Line is the line of the [[source]] header.
	Line int `toml:"-"`
}

// LayerConfig is one [[layer]] entry: part of a source shown under a slug
// of its own, with its own rules, visibility and index admission.
type LayerConfig struct {
	Slug         string   `toml:"slug"`
	Source       string   `toml:"source"`
	Include      []string `toml:"include"`
	Exclude      []string `toml:"exclude"`
	ReadOnly     bool     `toml:"read_only"`
	VisibleTo    []string `toml:"visible_to"`
	Default      string   `toml:"default"`
	MaxFileBytes int64    `toml:"max_file_bytes"`
	Line         int      `toml:"-"`
}

// FeedFileConfig is one [[source.file]] of an http source.
type FeedFileConfig struct {
	Path string `toml:"path"`
	URL  string `toml:"url"`
	Line int    `toml:"-"`
}

// Defaults of the feed kinds.
const (
	DefaultMaxBytes    = 16 << 20
	DefaultFileRefresh = time.Second
	DefaultHTTPRefresh = 5 * time.Minute
	DefaultHTTPTimeout = 30 * time.Second
	minRefresh         = 100 * time.Millisecond
)

// MaxBytesOrDefault is max_bytes, or its default.
func (s SourceConfig) MaxBytesOrDefault() int64 {
	if s.MaxBytes > 0 {
		return s.MaxBytes
	}
	return DefaultMaxBytes
}

// RefreshOrDefault is refresh, or the kind's default.
func (s SourceConfig) RefreshOrDefault() time.Duration {
	if s.Refresh != nil {
		return s.Refresh.Duration
	}
	if s.Kind == KindHTTP || s.Kind == KindMCP {
		return DefaultHTTPRefresh
	}
	return DefaultFileRefresh
}

// TimeoutOrDefault is timeout, or its default.
func (s SourceConfig) TimeoutOrDefault() time.Duration {
	if s.Timeout != nil {
		return s.Timeout.Duration
	}
	return DefaultHTTPTimeout
}

// PrincipalConfig is one [[principal]] entry.
type PrincipalConfig struct {
	Name  string   `toml:"name"`
	UIDs  []uint32 `toml:"uids"`
	GIDs  []uint32 `toml:"gids"`
	Roles []string `toml:"roles"`
	Line  int      `toml:"-"`
}

// RuleConfig is one [[rule]] entry.
type RuleConfig struct {
	URI    string   `toml:"uri"`
	Who    []string `toml:"who"`
	Allow  []string `toml:"allow"`
	Deny   []string `toml:"deny"`
	Review []string `toml:"review"`
	Line   int      `toml:"-"`
}

// ViewConfig is one [[view]] entry: a second mount decided as one principal.
type ViewConfig struct {
	Principal  string `toml:"principal"`
	Mountpoint string `toml:"mountpoint"`
	// ReadOnly mounts the view read-only: the kernel refuses every write
	// in it with EROFS before the daemon hears of it, whatever the policy
	// lets the principal do elsewhere, and, the mount being read-only,
	// stops marking access times stale, so a file read through the view
	// is not asked about again at the next stat (README, "Views").
	ReadOnly bool `toml:"read_only"`
	Line     int  `toml:"-"`
}

// ConfigError is one problem in a config file, with its position.
type ConfigError struct {
	File string
	Line int // 0 when unknown
	Key  string
	Msg  string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": %s", e.Key)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// LineOf returns the line of key in the i-th entry of table ("source",
// "rule", ...), or of a top-level key when table is "". It returns 0 when
// the key was not written in the file.
func (c *Config) LineOf(table string, i int, key string) int {
	if table == "" {
		return c.lines[key]
	}
	if i < 0 {
		return c.lines[table+"."+key]
	}
	if key == "" {
		return c.lines[fmt.Sprintf("%s[%d]", table, i)]
	}
	return c.lines[fmt.Sprintf("%s[%d].%s", table, i, key)]
}

// Load reads and validates the config file at path. Every problem found is
// reported together, each as a *ConfigError naming the file, line and key.
func Load(path string) (*Config, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", abs, err)
	}
	return Parse(abs, data)
}

// Parse validates config text read from file.
func Parse(file string, data []byte) (*Config, error) {
	c := &Config{File: file, lines: scanLines(data)}
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(c)
	if err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) {
			return nil, &ConfigError{File: file, Line: perr.Position.Line, Msg: perr.Message}
		}
		return nil, c.decodeError(file, err)
	}
	var errs []error
	add := func(table string, i int, key, format string, args ...any) {
		line := c.LineOf(table, i, key)
		if line == 0 && table != "" {
			line = c.LineOf(table, i, "")
		}
		k := key
		if table != "" && i >= 0 {
			k = fmt.Sprintf("%s[%d].%s", table, i, key)
			if key == "" {
				k = fmt.Sprintf("%s[%d]", table, i)
			}
		} else if table != "" {
			k = table + "." + key
		}
		errs = append(errs, &ConfigError{File: file, Line: line, Key: k, Msg: fmt.Sprintf(format, args...)})
	}
	for _, k := range md.Undecoded() {
		key := k.String()
		errs = append(errs, &ConfigError{File: file, Line: c.undecodedLine(k), Key: key, Msg: "unknown key"})
	}
	for i := range c.Sources {
		c.Sources[i].Line = c.LineOf("source", i, "")
		for j := range c.Sources[i].Files {
			c.Sources[i].Files[j].Line = c.LineOf("source", i, fmt.Sprintf("file[%d]", j))
		}
		if IsFeedKind(c.Sources[i].Kind) && ValidSlug(c.Sources[i].Slug) {
			c.Sources[i].Cache = filepath.Join(c.StateDirPath(), "sources", c.Sources[i].Slug)
		}
	}
	for i := range c.Principals {
		c.Principals[i].Line = c.LineOf("principal", i, "")
	}
	for i := range c.Rules {
		c.Rules[i].Line = c.LineOf("rule", i, "")
	}
	for i := range c.Views {
		c.Views[i].Line = c.LineOf("view", i, "")
	}
	for i := range c.Layers {
		c.Layers[i].Line = c.LineOf("layer", i, "")
	}

	if c.StateDir != "" && !filepath.IsAbs(c.StateDir) {
		add("", -1, "state_dir", "path %q is relative; write an absolute path", c.StateDir)
	}
	if c.Mount.Mountpoint != "" && !filepath.IsAbs(c.Mount.Mountpoint) {
		add("mount", -1, "mountpoint", "path %q is relative; write an absolute path", c.Mount.Mountpoint)
	}
	switch c.Mount.IOURing {
	case "", "off", "auto", "on":
	default:
		add("mount", -1, "io_uring", "%q is none of \"off\", \"auto\", \"on\"", c.Mount.IOURing)
	}
	switch c.Policy.Default {
	case "", "allow", "deny":
	default:
		add("policy", -1, "default", "%q is neither \"allow\" nor \"deny\"", c.Policy.Default)
	}
	switch c.Journal.Sync {
	case "", "batch", "each":
	default:
		add("journal", -1, "sync", "%q is neither \"batch\" nor \"each\"", c.Journal.Sync)
	}
	if c.Journal.MaxBytes < 0 {
		add("journal", -1, "max_bytes", "must not be negative")
	}
	if c.Review.MaxBytes < 0 {
		add("review", -1, "max_bytes", "must not be negative")
	}
	if c.Journal.MaxFileBytes < 0 {
		add("journal", -1, "max_file_bytes", "must not be negative")
	}
	if c.Journal.MaxRecords < 0 {
		add("journal", -1, "max_records", "must not be negative")
	}
	if c.Index.MaxFileBytes < 0 {
		add("index", -1, "max_file_bytes", "must not be negative")
	}
	if l := c.Metrics.Listen; l != "" && !filepath.IsAbs(l) {
		host, port, err := net.SplitHostPort(l)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 || strings.ContainsAny(host, "/ ") {
			add("metrics", -1, "listen", "%q is neither host:port (\"127.0.0.1:9471\") nor an absolute unix socket path", l)
		}
	}

	seen := map[string]int{}
	for i, s := range c.Sources {
		switch {
		case s.Slug == "":
			add("source", i, "slug", "missing; every source needs a slug")
		case !ValidSlug(s.Slug):
			add("source", i, "slug", "%q is not a valid slug (lower-case letters, digits, '.', '_' and '-', starting with a letter or digit)", s.Slug)
		default:
			if j, dup := seen[s.Slug]; dup {
				add("source", i, "slug", "%q is already used by the source at line %d", s.Slug, c.Sources[j].Line)
			} else {
				seen[s.Slug] = i
			}
		}
		if s.Slug == ".neuralis" {
			add("source", i, "slug", "%q is reserved", s.Slug)
		}
		switch {
		case s.Kind == "":
			add("source", i, "kind", "missing; one of %s", strings.Join(kinds, ", "))
		case !slices.Contains(kinds, s.Kind):
			add("source", i, "kind", "%q is not a kind of source; one of %s", s.Kind, strings.Join(kinds, ", "))
		}
		switch {
		case s.Kind == KindInline || s.Kind == KindHTTP || s.Kind == KindMCP:
			if s.Path != "" {
				add("source", i, "path", "an %s source has no path (its files are %s)", s.Kind, map[string]string{KindInline: "name and text", KindHTTP: "the [[source.file]] entries", KindMCP: "the resources its server at url lists"}[s.Kind])
			}
		case s.Path == "":
			add("source", i, "path", "missing; every source needs an absolute path")
		case !filepath.IsAbs(s.Path):
			add("source", i, "path", "path %q is relative; write an absolute path", s.Path)
		}
		c.checkFeed(i, add)
		if s.Kind == KindGitPinned && s.Rev == "" {
			add("source", i, "rev", "missing; a git-pinned source needs rev = \"<branch|tag|sha>\"")
		}
		if s.Kind != KindGitPinned && s.Rev != "" {
			add("source", i, "rev", "only a git-pinned source takes a rev")
		}
		switch s.Default {
		case "", "allow", "deny":
		default:
			add("source", i, "default", "%q is neither \"allow\" nor \"deny\"", s.Default)
		}
		if s.MaxFileBytes < 0 {
			add("source", i, "max_file_bytes", "must not be negative")
		}
	}
	c.addLayers(seen, add)
	names := map[string]int{}
	for i, p := range c.Principals {
		if p.Name == "" {
			add("principal", i, "name", "missing; every principal needs a name")
			continue
		}
		if j, dup := names[p.Name]; dup {
			add("principal", i, "name", "%q is already defined at line %d", p.Name, c.Principals[j].Line)
		}
		names[p.Name] = i
	}
	caps := []string{"read", "write", "exec"}
	for i, r := range c.Rules {
		if r.URI == "" {
			add("rule", i, "uri", "missing; a rule needs uri = \"<slug>://<glob>\"")
		} else if slug, _, ok := strings.Cut(r.URI, "://"); !ok {
			add("rule", i, "uri", "%q is not of the form <slug>://<glob>", r.URI)
		} else if _, known := seen[slug]; !known && !strings.ContainsAny(slug, "*?[{") {
			add("rule", i, "uri", "%q names no configured source %q", r.URI, slug)
		}
		if len(r.Who) == 0 {
			add("rule", i, "who", "missing; name principals, \"role:<r>\" or \"*\"")
		}
		if len(r.Allow) == 0 && len(r.Deny) == 0 && len(r.Review) == 0 {
			add("rule", i, "allow", "a rule needs allow, deny or review")
		}
		for _, cp := range r.Review {
			if cp != "write" {
				add("rule", i, "review", "%q cannot be held for review; review takes only \"write\"", cp)
			}
		}
		for _, k := range []struct {
			key  string
			caps []string
		}{{"allow", r.Allow}, {"deny", r.Deny}} {
			for _, cp := range k.caps {
				if !slices.Contains(caps, cp) {
					add("rule", i, k.key, "%q is not a capability; one of read, write, exec", cp)
				}
			}
		}
	}
	for i, v := range c.Views {
		if v.Principal == "" {
			add("view", i, "principal", "missing; a view is decided as one principal")
		}
		if v.Mountpoint == "" {
			add("view", i, "mountpoint", "missing")
		} else if !filepath.IsAbs(v.Mountpoint) {
			add("view", i, "mountpoint", "path %q is relative; write an absolute path", v.Mountpoint)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// BurntSushi/toml reports a value of the wrong type as a plain error,
// "toml: line 3 (last key "mount.allow_other"): incompatible types: TOML
// value has type []any; destination has type boolean" (found by
// FuzzParse), not as a ParseError with a position.
var (
	decodeErrRE = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key "(.*)"\): (.*)$`)
	mismatchRE  = regexp.MustCompile(`^incompatible types: TOML value has type (\S+); destination has type (\S+)$`)
	notTableRE  = regexp.MustCompile(`^type mismatch for \S+: expected table but found (\S+)$`)
)

// decodeError turns such an error into a ConfigError naming the line and
// key, in the config's words ("is an array; want a boolean").
func (c *Config) decodeError(file string, err error) *ConfigError {
	text, _, _ := strings.Cut(err.Error(), "\n")
	m := decodeErrRE.FindStringSubmatch(text)
	if m == nil {
		return &ConfigError{File: file, Line: 1, Msg: strings.TrimSpace(strings.TrimPrefix(text, "toml: "))}
	}
	ce := &ConfigError{File: file, Key: m[2], Msg: m[3]}
	fmt.Sscan(m[1], &ce.Line)
	if ce.Line == 0 {
		ce.Line = c.undecodedLine(toml.Key(strings.Split(m[2], ".")))
	}
	if mm := mismatchRE.FindStringSubmatch(m[3]); mm != nil {
		ce.Msg = fmt.Sprintf("is %s; want %s", tomlKind(mm[1]), tomlKind(mm[2]))
	} else if mm := notTableRE.FindStringSubmatch(m[3]); mm != nil {
		ce.Msg = fmt.Sprintf("is %s; want a table", tomlKind(mm[1]))
	}
	return ce
}

// tomlKind names a Go type BurntSushi/toml reports as a TOML kind.
func tomlKind(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"), t == "slice", t == "array":
		return "an array"
	case strings.HasPrefix(t, "map["), t == "map", t == "struct":
		return "a table"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"), t == "integer":
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a float"
	case t == "bool", t == "boolean":
		return "a boolean"
	case t == "string":
		return "a string"
	case t == "time.Time":
		return "a date-time"
	}
	return "a " + t
}

var (
	headerRE = regexp.MustCompile(`^\s*(\[\[?)\s*([A-Za-z0-9_.-]+)\s*\]\]?`)
	keyRE    = regexp.MustCompile(`^\s*([A-Za-z0-9_-]+|"[^"]*")\s*=`)
)

// scanLines records the line of every table header and key, as
// "table[i].key" for arrays of tables, "table.key" for tables and "key" at
// the top; an array of tables inside one ([[source.file]]) is counted per
// entry of its parent, as "source[i].file[j].key". BurntSushi/toml keeps
// key positions private, and the config grammar is simple enough to find
// them again line by line. The lines inside a multi-line string (an
// inline source's text) are skipped: they are content, not keys.
func scanLines(data []byte) map[string]int {
	lines := map[string]int{}
	counts := map[string]int{}
	current := map[string]string{} // array table name → its entry being read ("source" → "source[2]")
	prefix := ""
	inString := "" // the closing delimiter of the multi-line string being read
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		if inString != "" {
			if strings.Contains(text, inString) {
				inString = ""
			}
			continue
		}
		if m := headerRE.FindStringSubmatch(text); m != nil {
			name := m[2]
			full := name
			if i := strings.LastIndex(name, "."); i > 0 {
				if p, ok := current[name[:i]]; ok {
					full = p + "." + name[i+1:]
				}
			}
			if m[1] == "[[" {
				i := counts[full]
				counts[full]++
				prefix = fmt.Sprintf("%s[%d]", full, i)
				current[name] = prefix
			} else {
				prefix = full
			}
			if _, ok := lines[prefix]; !ok {
				lines[prefix] = n
			}
			continue
		}
		if m := keyRE.FindStringSubmatch(text); m != nil {
			key := strings.Trim(m[1], `"`)
			if prefix != "" {
				key = prefix + "." + key
			}
			if _, ok := lines[key]; !ok {
				lines[key] = n
			}
			v := strings.TrimSpace(text[len(m[0]):])
			for _, d := range []string{`"""`, `'''`} {
				if strings.HasPrefix(v, d) && !strings.Contains(v[3:], d) {
					inString = d
				}
			}
		}
	}
	return lines
}

// undecodedLine finds the line of a key that decoded into nothing. Keys of
// arrays of tables come without an index, so the first line that has the
// key, in any entry, is named.
func (c *Config) undecodedLine(k toml.Key) int {
	if len(k) == 1 {
		return c.lines[k[0]]
	}
	parts := make([]string, len(k))
	for i, p := range k {
		parts[i] = regexp.QuoteMeta(p)
	}
	re := regexp.MustCompile(`^` + strings.Join(parts, `(?:\[\d+\])?\.`) + `$`)
	best := 0
	for key, n := range c.lines {
		if re.MatchString(key) && (best == 0 || n < best) {
			best = n
		}
	}
	if best == 0 {
		// The key's table, at least.
		tre := regexp.MustCompile(`^` + strings.Join(parts[:len(parts)-1], `(?:\[\d+\])?\.`) + `(?:\[\d+\])?$`)
		for key, n := range c.lines {
			if tre.MatchString(key) && (best == 0 || n < best) {
				best = n
			}
		}
	}
	return best
}

// AllowOther reports whether other uids may enter the mount.
func (c *Config) AllowOther() bool {
	if c.Mount.AllowOther != nil {
		return *c.Mount.AllowOther
	}
	return os.Geteuid() == 0
}

// StateDirPath is the state folder: state_dir, or $XDG_STATE_HOME/neuralisfs,
// or ~/.local/state/neuralisfs.
func (c *Config) StateDirPath() string {
	if c.StateDir != "" {
		return c.StateDir
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "neuralisfs")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "neuralisfs-state")
	}
	return filepath.Join(home, ".local", "state", "neuralisfs")
}

// Timeouts returns the entry and attribute cache timeouts (default 1s).
func (c *Config) Timeouts() (entry, attr time.Duration) {
	entry, attr = time.Second, time.Second
	if c.Mount.EntryTimeout != nil {
		entry = c.Mount.EntryTimeout.Duration
	}
	if c.Mount.AttrTimeout != nil {
		attr = c.Mount.AttrTimeout.Duration
	}
	return entry, attr
}

// WatchedTimeout returns the cache timeout for sources whose every folder
// is watched (default 60s; 0 means none).
func (c *Config) WatchedTimeout() time.Duration {
	if c.Mount.WatchedTimeout != nil {
		return c.Mount.WatchedTimeout.Duration
	}
	return time.Minute
}

// Passthrough reports whether FUSE passthrough should be tried (default true).
func (c *Config) Passthrough() bool {
	return c.Mount.Passthrough == nil || *c.Mount.Passthrough
}

// IOURing is [mount] io_uring: "auto" (default), "off" or "on".
func (c *Config) IOURing() string {
	if c.Mount.IOURing == "" {
		return "auto"
	}
	return c.Mount.IOURing
}

// IndexEnabled reports whether the full-text index runs (default true).
func (c *Config) IndexEnabled() bool {
	return c.Index.Enabled == nil || *c.Index.Enabled
}

// StateDirOf is the state folder of the config file at path, read
// leniently: only state_dir is looked at, so it is found even when the
// rest of the file has errors (`neuralisfs reload` must reach the daemon
// to have it refuse a broken file). A file that does not parse at all
// gives the default state folder.
func StateDirOf(path string) string {
	var c Config
	var head struct {
		StateDir string `toml:"state_dir"`
	}
	if _, err := toml.DecodeFile(path, &head); err == nil && filepath.IsAbs(head.StateDir) {
		c.StateDir = head.StateDir
	}
	return c.StateDirPath()
}
