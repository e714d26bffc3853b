package mounts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// States of a source (DESIGN.md §3).
const (
	Available   = "AVAILABLE"
	Empty       = "EMPTY"
	Degraded    = "DEGRADED"
	Unavailable = "UNAVAILABLE"
)

// Codes of an unavailable source.
const (
	CodeSourceMissing        = "SOURCE_MISSING"
	CodeNotADirectory        = "NOT_A_DIRECTORY"
	CodeNotAGitRepository    = "NOT_A_GIT_REPOSITORY"
	CodePermissionDenied     = "PERMISSION_DENIED"
	CodeGitFormatUnsupported = "GIT_FORMAT_UNSUPPORTED"
	CodeUnreadable           = "UNREADABLE"
)

// ErrUnavailable is wrapped by errors about a source that cannot be served.
var ErrUnavailable = errors.New("source unavailable")

// Status is what is known about a source right now.
type Status struct {
	State  string `json:"state"`
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
}

func (s Status) String() string {
	out := s.State
	if s.Code != "" {
		out += " " + s.Code
	}
	if s.Reason != "" {
		out += ": " + s.Reason
	}
	return out
}

// Source is one configured source and its backing root, which comes and
// goes as the folder appears and disappears.
type Source struct {
	Config SourceConfig

	mu       sync.RWMutex // guards root, status, degraded
	root     *Root
	status   Status
	degraded string // reason the source is degraded although reachable
	retired  []*Root
	// feed fills the cache folder of a file, inline, http or mcp source
	// (feed.go); nil for the other kinds.
	feed *feed
}

// Close closes the source's roots. Nothing may use the source afterwards.
func (s *Source) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range append(s.retired, s.root) {
		if r != nil {
			r.Close()
		}
	}
	s.root, s.retired = nil, nil
}

// NewSource makes a source for cfg; call Refresh to open it.
func NewSource(cfg SourceConfig) *Source {
	s := &Source{Config: cfg, status: Status{State: Unavailable, Code: CodeSourceMissing, Reason: "not opened yet"}}
	if IsFeedKind(cfg.Kind) && cfg.Cache != "" {
		s.feed = newFeed(cfg)
	}
	return s
}

// Slug is the source's slug.
func (s *Source) Slug() string { return s.Config.Slug }

// Root returns the open root, or nil and an error wrapping ErrUnavailable.
func (s *Source) Root() (*Root, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.root == nil || s.status.State == Unavailable {
		return nil, fmt.Errorf("source %s: %w: %s", s.Config.Slug, ErrUnavailable, s.status)
	}
	if s.feed != nil {
		// The feed's own status, not the last Refresh's: a file that went
		// missing is never served from its stale copy.
		if st := s.feed.status(); st.State == Unavailable {
			return nil, fmt.Errorf("source %s: %w: %s", s.Config.Slug, ErrUnavailable, st)
		}
	}
	return s.root, nil
}

// Status reports the source's current status.
func (s *Source) Status() Status {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := s.status
	if s.feed != nil && s.root != nil {
		st = s.feed.status()
	}
	if st.State != Unavailable && s.degraded != "" {
		if st.State == Degraded {
			st.Reason += "; " + s.degraded
		} else {
			st.State, st.Reason = Degraded, s.degraded
		}
	}
	return st
}

// SetDegraded marks a reachable source as degraded with a reason ("" clears).
func (s *Source) SetDegraded(reason string) {
	s.mu.Lock()
	s.degraded = reason
	s.mu.Unlock()
}

// SetUnavailable marks the source unavailable with a code and reason,
// closing its root (used by the git kinds when the checkout cannot be read).
func (s *Source) SetUnavailable(code, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = Status{State: Unavailable, Code: code, Reason: reason}
}

// Refresh opens the source if it is closed and checks an open one is still
// the folder at its path. It reports whether the root changed (opened,
// closed or replaced), so callers can drop what they cached.
func (s *Source) Refresh() (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != nil && s.root.Alive() {
		before := s.status
		s.status = s.probe(s.root)
		// Becoming (un)available counts as a change; EMPTY ↔ AVAILABLE does not.
		return (before.State == Unavailable) != (s.status.State == Unavailable) || before.Code != s.status.Code
	}
	old := s.root
	s.root = nil
	oc := s.Config
	if s.feed != nil {
		oc.Path = s.feed.tree
	}
	r, st := open(oc)
	if s.feed != nil && r == nil {
		if fst := s.feed.status(); fst.State == Unavailable {
			st = fst // why there is no content, rather than where the cache is
		}
	}
	s.status = st
	if r != nil {
		s.root = r
		s.status = s.probe(r)
	}
	if old != nil {
		// In-flight operations may still hold old. Closing it now would let
		// its descriptor number be reused by an unrelated open, and an
		// openat2 relative to that number could land outside the source; so
		// a replaced root stays open until Close. Replacements are rare
		// (the folder vanished and came back).
		s.retired = append(s.retired, old)
	}
	return old != nil || r != nil
}

// probe checks what an open root holds: empty, or not a checkout for the git kinds.
func (s *Source) probe(r *Root) Status {
	if s.feed != nil {
		return s.feed.status()
	}
	switch s.Config.Kind {
	case KindGit:
		if _, err := r.Lstat(".git"); err != nil {
			if _, ok := CheckoutAbove(s.Config.Path); !ok {
				return Status{State: Unavailable, Code: CodeNotAGitRepository, Reason: fmt.Sprintf("%s has no .git and is not inside a checkout", s.Config.Path)}
			}
		}
	}
	fd, err := r.Open("", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return Status{State: Unavailable, Code: CodeUnreadable, Reason: err.Error()}
	}
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	n, err := unix.ReadDirent(fd, buf)
	if err != nil {
		return Status{State: Unavailable, Code: CodePermissionDenied, Reason: err.Error()}
	}
	names := 0
	_, _, entries := unix.ParseDirent(buf[:n], -1, nil)
	for _, e := range entries {
		if e != ".git" {
			names++
		}
	}
	if names == 0 {
		return Status{State: Empty, Reason: "the folder has no files"}
	}
	return Status{State: Available}
}

func open(cfg SourceConfig) (*Root, Status) {
	fi, err := os.Stat(cfg.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, Status{State: Unavailable, Code: CodeSourceMissing, Reason: fmt.Sprintf("%s does not exist", cfg.Path)}
	case errors.Is(err, os.ErrPermission):
		return nil, Status{State: Unavailable, Code: CodePermissionDenied, Reason: fmt.Sprintf("%s cannot be reached: permission denied", cfg.Path)}
	case err != nil:
		return nil, Status{State: Unavailable, Code: CodeSourceMissing, Reason: err.Error()}
	case !fi.IsDir():
		return nil, Status{State: Unavailable, Code: CodeNotADirectory, Reason: fmt.Sprintf("%s is not a directory", cfg.Path)}
	}
	r, err := OpenRoot(cfg.Path)
	if err != nil {
		code := CodeSourceMissing
		if errors.Is(err, os.ErrPermission) {
			code = CodePermissionDenied
		}
		return nil, Status{State: Unavailable, Code: code, Reason: err.Error()}
	}
	return r, Status{State: Available}
}

// Identity is the identity of a file, inline, http or mcp source (feed.go)
// over the files canRead allows (nil: all), and ok=false for the other
// kinds, whose identity comes from git or the index.
func (s *Source) Identity(canRead func(rel string) bool) (id string, ok bool) {
	if s.feed == nil {
		return "", false
	}
	return s.feed.identity(canRead), true
}

// RunFeed keeps a file, inline, http or mcp source's cache folder up to date
// until ctx is done, calling first once every file has been tried once
// (at once for the other kinds). Only the daemon runs it: the CLI reads
// what the daemon cached.
func (s *Source) RunFeed(ctx context.Context, log *slog.Logger, first func()) {
	if s.feed == nil {
		first()
		return
	}
	s.feed.run(ctx, log, first)
}

// CheckoutAbove finds the checkout that holds dir, a folder without a .git
// of its own: the nearest folder above it with a .git (a folder or a
// "gitdir:" file), as git finds it. A git source whose path is such a
// sub-folder shows that folder of the checkout.
func CheckoutAbove(dir string) (top string, ok bool) {
	for p := filepath.Dir(filepath.Clean(dir)); ; p = filepath.Dir(p) {
		if fi, err := os.Lstat(filepath.Join(p, ".git")); err == nil && (fi.IsDir() || fi.Mode().IsRegular()) {
			return p, true
		}
		if p == "/" || p == "." {
			return "", false
		}
	}
}
