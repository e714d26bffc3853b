package index

import (
	"bytes"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/neuralis/neuralisfs/internal/reserved"
)

// DefaultMaxFileBytes is the per-file bound used when a source sets none.
const DefaultMaxFileBytes int64 = 1 << 20

// Skip reasons that do not depend on a source's settings. They are part of the
// output of `neuralisfs sources`; scripts may match on them.
const (
	ReasonBinary      = "binary content"
	ReasonNotUTF8     = "not valid UTF-8 text"
	ReasonVCS         = "version control metadata"
	ReasonGenerated   = "generated or vendored folder"
	ReasonSecret      = "secret-prone name"
	ReasonLockFile    = "lock file"
	ReasonMinified    = "minified file"
	ReasonNotIncluded = "not included by any pattern"
	ReasonNotRegular  = "not a regular file"
	ReasonDaemon      = "the daemon's own name for a file it is landing"
)

// SourceRules are the per-source admission settings.
type SourceRules struct {
	// Include, when not empty, admits only paths matching at least one
	// doublestar pattern (matched against the slash path relative to the
	// source root).
	Include []string
	// Exclude skips paths matching any doublestar pattern. Exclude wins over
	// Include. A pattern matching a folder prunes the whole folder.
	Exclude []string
	// MaxFileBytes bounds the size of an admitted file; 0 means
	// DefaultMaxFileBytes, a negative value means no bound.
	MaxFileBytes int64
}

func (r SourceRules) maxBytes() int64 {
	if r.MaxFileBytes == 0 {
		return DefaultMaxFileBytes
	}
	return r.MaxFileBytes
}

// Validate reports the first malformed pattern as one sentence.
func (r SourceRules) Validate() error {
	for _, p := range append(append([]string(nil), r.Include...), r.Exclude...) {
		if !doublestar.ValidatePattern(p) {
			return fmt.Errorf("pattern %q is not a valid doublestar glob", p)
		}
	}
	return nil
}

// skippedDirs are folder names that are never walked, at any depth.
//
// vendor/ is skipped: it holds third-party code that floods search results
// (Go, PHP, Ruby all use the name). A source that wants it can not undo this
// with Include; it is a fixed rule like node_modules/.
var skippedDirs = map[string]string{
	".git":             ReasonVCS,
	".hg":              ReasonVCS,
	".svn":             ReasonVCS,
	"node_modules":     ReasonGenerated,
	"bower_components": ReasonGenerated,
	"vendor":           ReasonGenerated,
	"dist":             ReasonGenerated,
	"build":            ReasonGenerated,
	"target":           ReasonGenerated,
	"out":              ReasonGenerated,
	".next":            ReasonGenerated,
	".nuxt":            ReasonGenerated,
	"__pycache__":      ReasonGenerated,
	".venv":            ReasonGenerated,
	".tox":             ReasonGenerated,
	".mypy_cache":      ReasonGenerated,
	".pytest_cache":    ReasonGenerated,
	".gradle":          ReasonGenerated,
	".terraform":       ReasonGenerated,
}

// lockFiles are dependency lock files: generated, large and noisy.
var lockFiles = map[string]bool{
	"package-lock.json":   true,
	"npm-shrinkwrap.json": true,
	"yarn.lock":           true,
	"pnpm-lock.yaml":      true,
	"go.sum":              true,
	"Cargo.lock":          true,
	"poetry.lock":         true,
	"composer.lock":       true,
	"Gemfile.lock":        true,
	"Pipfile.lock":        true,
	"uv.lock":             true,
}

// secretNames are exact file names that usually hold credentials.
var secretNames = map[string]bool{
	".env":             true,
	"credentials.json": true,
	".npmrc":           true,
	".netrc":           true,
	".pypirc":          true,
	".pgpass":          true,
	".htpasswd":        true,
}

// secretPrefixes are file-name prefixes of private keys (id_rsa, id_rsa.pub…).
var secretPrefixes = []string{"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", ".env."}

// secretSuffixes are extensions of key and certificate stores.
var secretSuffixes = []string{".pem", ".key", ".p12", ".pfx", ".jks", ".keystore"}

// dirReason reports why a folder named name is never walked, or "".
func dirReason(name string) string {
	if strings.HasPrefix(name, reserved.DaemonPrefix) {
		return ReasonDaemon // a folder moved aside by an approval
	}
	return skippedDirs[name]
}

// nameReason reports why a file called name is skipped whatever its content, or "".
func nameReason(name string) string {
	switch {
	case strings.HasPrefix(name, reserved.DaemonPrefix):
		return ReasonDaemon // a file an approval or a revert is landing or moved aside
	case secretNames[name]:
		return ReasonSecret
	case lockFiles[name]:
		return ReasonLockFile
	}
	for _, p := range secretPrefixes {
		if strings.HasPrefix(name, p) {
			return ReasonSecret
		}
	}
	lower := strings.ToLower(name)
	for _, s := range secretSuffixes {
		if strings.HasSuffix(lower, s) {
			return ReasonSecret
		}
	}
	if strings.HasSuffix(lower, ".min.js") || strings.HasSuffix(lower, ".min.css") {
		return ReasonMinified
	}
	return ""
}

// excludedBy returns the first exclude pattern matching p, or "".
func (r SourceRules) excludedBy(p string) string {
	for _, pat := range r.Exclude {
		if ok, _ := doublestar.Match(pat, p); ok {
			return pat
		}
	}
	return ""
}

func (r SourceRules) included(p string) bool {
	if len(r.Include) == 0 {
		return true
	}
	for _, pat := range r.Include {
		if ok, _ := doublestar.Match(pat, p); ok {
			return true
		}
	}
	return false
}

func excludedReason(pat string) string {
	return fmt.Sprintf("excluded by pattern %q", pat)
}

// AdmitDir reports whether the walk should enter the folder at slash path p
// (relative to the source root). A refused folder is reported once and pruned.
// Include patterns never prune a folder: a file below it may still match.
func AdmitDir(p string, src SourceRules) (ok bool, reason string) {
	if r := dirReason(path.Base(p)); r != "" {
		return false, r
	}
	if pat := src.excludedBy(p); pat != "" {
		return false, excludedReason(pat)
	}
	return true, ""
}

// admitName applies every rule that needs only the path: folder names on the
// way, the file name, include and exclude patterns.
func admitName(p string, src SourceRules) (ok bool, reason string) {
	dir := p
	for {
		i := strings.LastIndexByte(dir, '/')
		if i < 0 {
			break
		}
		dir = dir[:i]
		if r := dirReason(path.Base(dir)); r != "" {
			return false, r
		}
	}
	if r := nameReason(path.Base(p)); r != "" {
		return false, r
	}
	if pat := src.excludedBy(p); pat != "" {
		return false, excludedReason(pat)
	}
	// A pattern over a parent folder ("docs/**" also matches "docs") prunes
	// the walk there; check the parents so Admit agrees with the walk.
	for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
		if pat := src.excludedBy(d); pat != "" {
			return false, excludedReason(pat)
		}
	}
	if !src.included(p) {
		return false, ReasonNotIncluded
	}
	return true, ""
}

// admitFileName is admitName for a file found by a walk, whose folders on
// the way were admitted by AdmitDir: only the file's own name and the
// patterns over its whole path are left to check.
func admitFileName(p string, src SourceRules) (ok bool, reason string) {
	if r := nameReason(path.Base(p)); r != "" {
		return false, r
	}
	if pat := src.excludedBy(p); pat != "" {
		return false, excludedReason(pat)
	}
	if !src.included(p) {
		return false, ReasonNotIncluded
	}
	return true, ""
}

func admitSize(size int64, src SourceRules) (ok bool, reason string) {
	if max := src.maxBytes(); max >= 0 && size > max {
		return false, fmt.Sprintf("larger than %d bytes", max)
	}
	return true, ""
}

// admitContent checks head, the first bytes of a file of the given size (or
// all of it), for text.
func admitContent(size int64, head []byte) (ok bool, reason string) {
	if bytes.IndexByte(head, 0) >= 0 {
		return false, ReasonBinary
	}
	if !validUTF8Prefix(head, int64(len(head)) < size) {
		return false, ReasonNotUTF8
	}
	return true, ""
}

// validUTF8Prefix is utf8.Valid, except that a rune cut by the end of a
// truncated head is not held against it.
func validUTF8Prefix(b []byte, truncated bool) bool {
	if utf8.Valid(b) {
		return true
	}
	if !truncated {
		return false
	}
	for cut := 1; cut < utf8.UTFMax && cut <= len(b); cut++ {
		if utf8.Valid(b[:len(b)-cut]) {
			// The cut bytes must start a rune that would need more bytes.
			return !utf8.FullRune(b[len(b)-cut:])
		}
	}
	return false
}

// Admit decides whether a file belongs in a collection (the index, a scan, a
// listing of what is searchable). p is the slash path relative to the source
// root, size the file's size and head its first bytes or its whole content.
// A refusal comes with a short reason meant for people; the same rules
// apply everywhere, so `neuralisfs sources` and the index always agree.
//
// Checks run cheapest first: names and patterns, then size, then content.
func Admit(p string, size int64, head []byte, src SourceRules) (ok bool, reason string) {
	if ok, reason := admitName(p, src); !ok {
		return false, reason
	}
	if ok, reason := admitSize(size, src); !ok {
		return false, reason
	}
	return admitContent(size, head)
}
