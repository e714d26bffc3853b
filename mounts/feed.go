package mounts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Codes of the file, inline and http kinds.
const (
	CodeNotARegularFile = "NOT_A_REGULAR_FILE"
	CodeSourceNotText   = "SOURCE_NOT_TEXT"
	CodeTooLarge        = "SOURCE_TOO_LARGE"
	CodeHTTPError       = "HTTP_ERROR"
	CodeUnreachable     = "UNREACHABLE"
	CodeNotFetchedYet   = "NOT_FETCHED_YET"
	CodeCacheUnwritable = "CACHE_UNWRITABLE"
)

// A feed fills the cache folder of a file, inline or http source: the
// source's root is <cache>/tree, which only the feed writes. Each file in
// it is replaced whole (written beside it under <cache>/tmp, fsynced,
// renamed over), so a reader sees the old content or the new, never a mix;
// the source's watcher sees the rename like any change made behind the
// mount's back. What was fetched (digests, ETags) is kept in
// <cache>/state.json, so a restarted daemon serves the last good content
// and asks with If-None-Match at once.
type feed struct {
	cfg    SourceConfig
	dir    string
	tree   string
	client *http.Client

	mu      sync.Mutex // guards entries and their fields, and mcp
	entries []*feedEntry
	mcp     mcpState               // an mcp source's snapshot (feed_mcp.go)
	cur     atomic.Pointer[Status] // status as of the last unlock
}

// feedEntry is one file of a feed.
type feedEntry struct {
	Path         string    `json:"path"`             // in the tree
	Origin       string    `json:"origin"`           // URL, host path, or "inline"
	Digest       string    `json:"digest,omitempty"` // hex SHA-256 of the content in the tree; "" none
	Size         int64     `json:"size"`
	ETag         string    `json:"etag,omitempty"`
	LastModified string    `json:"last_modified,omitempty"`
	Fetched      time.Time `json:"fetched,omitzero"` // last good fetch (or check of a file)

	code, reason string    // the last attempt's failure; "" after a success
	failedAt     time.Time // when it first failed in a row
	key          fileKey   // file: the original's stat data when last copied
}

// fileKey is what changes when a file does.
type fileKey struct {
	dev, ino, size          uint64
	mtime, ctime            unix.Timespec
	mode, uid, gid, present uint32
}

func newFeed(cfg SourceConfig) *feed {
	f := &feed{cfg: cfg, dir: cfg.Cache, tree: filepath.Join(cfg.Cache, "tree")}
	switch cfg.Kind {
	case KindFile:
		f.entries = []*feedEntry{{Path: filepath.Base(cfg.Path), Origin: cfg.Path}}
	case KindInline:
		f.entries = []*feedEntry{{Path: cfg.Name, Origin: "inline"}}
	case KindHTTP:
		for _, fc := range cfg.Files {
			f.entries = append(f.entries, &feedEntry{Path: fc.Path, Origin: fc.URL})
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = cfg.TimeoutOrDefault()
		f.client = &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("redirected to %q, which is not an http(s) URL", req.URL.Redacted())
			}
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return nil
		}}
	}
	f.mu.Lock()
	if cfg.Kind == KindMCP {
		f.loadMCP()
	} else {
		f.load()
	}
	f.unlock()
	return f
}

// load takes what an earlier run fetched from state.json, for entries
// whose file is still in the tree with the size it had.
func (f *feed) load() {
	data, err := os.ReadFile(filepath.Join(f.dir, "state.json"))
	if err != nil {
		return
	}
	var saved []feedEntry
	if json.Unmarshal(data, &saved) != nil {
		return
	}
	for _, e := range f.entries {
		for _, s := range saved {
			if s.Path != e.Path || s.Origin != e.Origin || s.Digest == "" {
				continue
			}
			var st unix.Stat_t
			if unix.Lstat(filepath.Join(f.tree, e.Path), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != s.Size {
				continue
			}
			e.Digest, e.Size, e.ETag, e.LastModified, e.Fetched = s.Digest, s.Size, s.ETag, s.LastModified, s.Fetched
		}
	}
}

// save writes state.json (under f.mu).
func (f *feed) save() error {
	data, err := json.MarshalIndent(f.entries, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(f.dir, "tmp"), filepath.Join(f.dir, "state.json"), data, 0o600, -1, -1)
}

// status is the feed's status: UNAVAILABLE while some file never had
// good content, DEGRADED while some file's last attempt failed after a
// good one (naming it, and what is served instead).
//
// It is read on every operation on the source (Source.Root), so it is
// computed when the feed changes (unlock) and read without the lock.
func (f *feed) status() Status {
	if p := f.cur.Load(); p != nil {
		return *p
	}
	f.mu.Lock()
	defer f.unlock()
	return f.computeStatus()
}

// unlock publishes the status and releases f.mu; every change to the
// entries ends with it.
func (f *feed) unlock() {
	st := f.computeStatus()
	f.cur.Store(&st)
	f.mu.Unlock()
}

// computeStatus is status, under f.mu.
func (f *feed) computeStatus() Status {
	if f.cfg.Kind == KindMCP {
		return f.mcpStatus()
	}
	var missing []*feedEntry
	var degraded []string
	for _, e := range f.entries {
		switch {
		case e.Digest == "":
			missing = append(missing, e)
		case e.code != "":
			degraded = append(degraded, fmt.Sprintf("%s: %s (since %s); serving the content fetched at %s",
				e.Path, e.reason, e.failedAt.UTC().Format(time.RFC3339), e.Fetched.UTC().Format(time.RFC3339)))
		}
	}
	if len(missing) > 0 {
		e := missing[0]
		code, reason := e.code, e.reason
		if code == "" {
			code, reason = CodeNotFetchedYet, "not read yet"
			if f.cfg.Kind == KindHTTP {
				reason = e.Origin + " not fetched yet"
			}
		}
		if f.cfg.Kind == KindHTTP {
			reason = e.Path + ": " + reason
			if len(missing) > 1 {
				reason += fmt.Sprintf(" (and %d more files without content)", len(missing)-1)
			}
		}
		return Status{State: Unavailable, Code: code, Reason: reason}
	}
	if len(degraded) > 0 {
		return Status{State: Degraded, Reason: strings.Join(degraded, "; ")}
	}
	return Status{State: Available}
}

// identity is "sha256:" and the content digest for a file or inline
// source; for an http source the digest over (path, content digest) of
// its files, as for folders, followed by the ETags seen. Only files
// canRead allows count (nil: all). It is "" while the feed is
// unavailable.
func (f *feed) identity(canRead func(rel string) bool) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cfg.Kind == KindMCP {
		return f.mcpIdentity(canRead)
	}
	var paths []string
	digests := map[string][]byte{}
	etags := map[string]string{}
	for _, e := range f.entries {
		if e.Digest == "" {
			return "" // UNAVAILABLE: nothing is served
		}
		if canRead != nil && !canRead(e.Path) {
			continue
		}
		d, err := hex.DecodeString(e.Digest)
		if err != nil {
			continue
		}
		paths = append(paths, e.Path)
		digests[e.Path] = d
		if e.ETag != "" {
			etags[e.Path] = e.ETag
		}
	}
	if len(paths) == 0 {
		return ""
	}
	if f.cfg.Kind != KindHTTP {
		return "sha256:" + hex.EncodeToString(digests[paths[0]])
	}
	sort.Strings(paths)
	h := sha256.New()
	var tags []string
	for _, p := range paths {
		h.Write([]byte(p))
		h.Write([]byte{0})
		h.Write(digests[p])
		if t, ok := etags[p]; ok {
			tags = append(tags, p+"="+t)
		}
	}
	id := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if len(tags) > 0 {
		id += " ETag " + strings.Join(tags, ", ")
	}
	return id
}

// run keeps the cache up to date until ctx is done; first is called once
// every file has been tried once.
func (f *feed) run(ctx context.Context, log *slog.Logger, first func()) {
	if err := f.prepare(); err != nil {
		f.mu.Lock()
		for _, e := range f.entries {
			e.Digest, e.code, e.reason = "", CodeCacheUnwritable, err.Error()
		}
		f.mcp = mcpState{code: CodeCacheUnwritable, reason: err.Error()}
		f.unlock()
		log.Warn("source cache cannot be written", "source", f.cfg.Slug, "err", err)
		first()
		return
	}
	switch f.cfg.Kind {
	case KindMCP:
		f.runMCP(ctx, log, first)
	case KindInline:
		f.putInline()
		first()
	case KindFile:
		every := f.cfg.RefreshOrDefault()
		f.pollFile()
		first()
		for sleep(ctx, every) {
			f.pollFile()
		}
	case KindHTTP:
		var wg, firstRound sync.WaitGroup
		for _, e := range f.entries {
			wg.Add(1)
			firstRound.Add(1)
			go func() {
				defer wg.Done()
				f.fetch(ctx, log, e)
				firstRound.Done()
				for sleep(ctx, f.cfg.RefreshOrDefault()) {
					f.fetch(ctx, log, e)
				}
			}()
		}
		firstRound.Wait()
		first()
		wg.Wait()
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// prepare makes the cache folders and removes from the tree whatever is
// not one of the feed's files (a file dropped from the config, a
// leftover temporary).
func (f *feed) prepare() error {
	if err := os.MkdirAll(filepath.Dir(f.dir), 0o700); err != nil {
		return err
	}
	for _, d := range []string{f.dir, filepath.Join(f.dir, "tmp")} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	if err := os.Mkdir(f.tree, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	os.RemoveAll(filepath.Join(f.dir, "tmp"))
	if err := os.Mkdir(filepath.Join(f.dir, "tmp"), 0o700); err != nil {
		return err
	}
	keep := map[string]bool{}
	f.mu.Lock()
	for _, e := range f.entries {
		for p := e.Path; p != "." && p != "/"; p = path.Dir(p) {
			keep[p] = true
		}
	}
	f.mu.Unlock()
	var stray []string
	filepath.WalkDir(f.tree, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == f.tree {
			return nil
		}
		rel, _ := filepath.Rel(f.tree, p)
		if !keep[filepath.ToSlash(rel)] {
			stray = append(stray, p)
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	for _, p := range stray {
		os.RemoveAll(p)
	}
	return nil
}

// put replaces the tree's file rel with data (mode and owner as given;
// uid -1 keeps the daemon's).
func (f *feed) put(rel string, data []byte, mode uint32, uid, gid int) error {
	dst := filepath.Join(f.tree, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(f.dir, "tmp"), dst, data, mode, uid, gid)
}

// writeAtomic writes data to a temporary file in tmp, fsyncs it and
// renames it over dst, so dst is always whole.
func writeAtomic(tmp, dst string, data []byte, mode uint32, uid, gid int) error {
	t, err := os.CreateTemp(tmp, "put-*")
	if err != nil {
		return err
	}
	name := t.Name()
	_, err = t.Write(data)
	if err == nil {
		err = t.Sync()
	}
	if err == nil {
		err = t.Chmod(os.FileMode(mode))
	}
	if err == nil && uid >= 0 && os.Geteuid() == 0 {
		err = t.Chown(uid, gid)
	}
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, dst)
	}
	if err != nil {
		os.Remove(name)
		return err
	}
	if d, err := os.Open(filepath.Dir(dst)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func digest(data []byte) string {
	d := sha256.Sum256(data)
	return hex.EncodeToString(d[:])
}

// putInline writes an inline source's text.
func (f *feed) putInline() {
	f.mu.Lock()
	defer f.unlock()
	e := f.entries[0]
	data := []byte(f.cfg.Text)
	d := digest(data)
	if e.Digest == d {
		return
	}
	if err := f.put(e.Path, data, 0o444, -1, -1); err != nil {
		e.Digest, e.code, e.reason = "", CodeCacheUnwritable, err.Error()
		return
	}
	e.Digest, e.Size, e.Fetched, e.code, e.reason = d, int64(len(data)), time.Now(), "", ""
	f.save()
}

// pollFile copies a file source's file into the tree when it changed,
// and makes the source unavailable (removing the copy) when it is
// missing, not a regular file or not UTF-8 text. A symlink at the path is
// not followed: the file's owner could point it anywhere the daemon can
// read. The copy keeps the file's owner and its read bits, so the kernel
// lets read it on the mount whoever may read it on disk.
func (f *feed) pollFile() {
	f.mu.Lock()
	defer f.unlock()
	e := f.entries[0]
	p := f.cfg.Path
	max := f.cfg.MaxBytesOrDefault()
	fail := func(code, format string, args ...any) {
		if e.Digest != "" {
			os.Remove(filepath.Join(f.tree, e.Path))
			e.Digest = ""
			f.save()
		}
		e.code, e.reason, e.key = code, fmt.Sprintf(format, args...), fileKey{}
	}
	var st unix.Stat_t
	err := unix.Lstat(p, &st)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		fail(CodeSourceMissing, "%s does not exist", p)
		return
	case errors.Is(err, unix.EACCES):
		fail(CodePermissionDenied, "%s cannot be reached: permission denied", p)
		return
	case err != nil:
		fail(CodeUnreadable, "%s: %v", p, err)
		return
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		fail(CodeNotARegularFile, "%s is a symlink; name the file it points to", p)
		return
	case unix.S_IFDIR:
		fail(CodeNotARegularFile, "%s is a folder, not a file (a local source serves folders)", p)
		return
	default:
		fail(CodeNotARegularFile, "%s is not a regular file", p)
		return
	}
	key := fileKey{uint64(st.Dev), st.Ino, uint64(st.Size), st.Mtim, st.Ctim, st.Mode, st.Uid, st.Gid, 1}
	if key == e.key && e.Digest != "" {
		return
	}
	if st.Size > max {
		fail(CodeTooLarge, "%s is %d bytes, more than max_bytes (%d)", p, st.Size, max)
		return
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EACCES) {
			fail(CodePermissionDenied, "%s cannot be read: permission denied", p)
		} else {
			fail(CodeUnreadable, "%s: %v", p, err)
		}
		return
	}
	file := os.NewFile(uintptr(fd), p)
	defer file.Close()
	var fst unix.Stat_t
	if unix.Fstat(fd, &fst) != nil || fst.Ino != st.Ino || fst.Mode&unix.S_IFMT != unix.S_IFREG {
		return // replaced between the two looks: the next poll sees what is there
	}
	data, err := io.ReadAll(io.LimitReader(file, max+1))
	switch {
	case err != nil:
		fail(CodeUnreadable, "%s: %v", p, err)
		return
	case int64(len(data)) > max:
		fail(CodeTooLarge, "%s is more than max_bytes (%d)", p, max)
		return
	case bytes.IndexByte(data, 0) >= 0:
		fail(CodeSourceNotText, "%s holds binary content (a NUL byte)", p)
		return
	case !utf8.Valid(data):
		fail(CodeSourceNotText, "%s is not valid UTF-8 text", p)
		return
	}
	d := digest(data)
	copyChanged := e.key.mode&0o7777 != st.Mode&0o7777 || e.key.uid != st.Uid || e.key.gid != st.Gid
	if d != e.Digest || copyChanged {
		if err := f.put(e.Path, data, st.Mode&0o444, int(st.Uid), int(st.Gid)); err != nil {
			fail(CodeCacheUnwritable, "the copy of %s cannot be written: %v", p, err)
			return
		}
	}
	e.Digest, e.Size, e.Fetched, e.key, e.code, e.reason = d, int64(len(data)), time.Now(), key, "", ""
	f.save()
}

// fetch gets one URL of an http source: with If-None-Match and
// If-Modified-Since once it has content, at most max_bytes, within
// timeout. A failure keeps the last good content.
func (f *feed) fetch(ctx context.Context, log *slog.Logger, e *feedEntry) {
	f.mu.Lock()
	url, have, etag, lastMod := e.Origin, e.Digest != "", e.ETag, e.LastModified
	f.mu.Unlock()
	timeout := f.cfg.TimeoutOrDefault()
	max := f.cfg.MaxBytesOrDefault()
	fail := func(code, reason string) {
		if ctx.Err() != nil {
			return // shutting down
		}
		f.mu.Lock()
		if e.code == "" {
			e.failedAt = time.Now()
		}
		if e.code != code || e.reason != reason {
			log.Warn("feed fetch failed", "source", f.cfg.Slug, "path", e.Path, "url", url, "code", code, "reason", reason, "serving_last_good", e.Digest != "")
		}
		e.code, e.reason = code, reason
		f.unlock()
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		fail(CodeUnreachable, err.Error())
		return
	}
	req.Header.Set("User-Agent", "neuralisfs")
	if have && etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	if have && lastMod != "" {
		req.Header.Set("If-Modified-Since", lastMod)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		fail(CodeUnreachable, fetchError(url, err, timeout))
		return
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified && have:
		f.mu.Lock()
		e.Fetched, e.code, e.reason = time.Now(), "", ""
		if t := cleanETag(resp.Header.Get("ETag")); t != "" {
			e.ETag = t
		}
		f.save()
		f.unlock()
		return
	case resp.StatusCode < 200 || resp.StatusCode > 299 || resp.StatusCode == http.StatusPartialContent:
		fail(CodeHTTPError, fmt.Sprintf("%s answered %d %s", url, resp.StatusCode, http.StatusText(resp.StatusCode)))
		return
	}
	if resp.ContentLength > max {
		fail(CodeTooLarge, fmt.Sprintf("%s sent %d bytes, more than max_bytes (%d)", url, resp.ContentLength, max))
		return
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		fail(CodeUnreachable, fetchError(url, err, timeout))
		return
	}
	if int64(len(data)) > max {
		fail(CodeTooLarge, fmt.Sprintf("%s sent more than max_bytes (%d)", url, max))
		return
	}
	d := digest(data)
	f.mu.Lock()
	same := d == e.Digest
	f.mu.Unlock()
	if !same {
		// Outside the lock: only this entry's goroutine writes its file.
		if err := f.put(e.Path, data, 0o444, -1, -1); err != nil {
			fail(CodeCacheUnwritable, "the fetched content cannot be written: "+err.Error())
			return
		}
	}
	f.mu.Lock()
	defer f.unlock()
	e.Digest, e.Size, e.Fetched, e.code, e.reason = d, int64(len(data)), time.Now(), "", ""
	e.ETag, e.LastModified = cleanETag(resp.Header.Get("ETag")), cleanHeader(resp.Header.Get("Last-Modified"))
	f.save()
}

// fetchError says in words why a fetch failed.
func fetchError(url string, err error, timeout time.Duration) string {
	if errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err) {
		return fmt.Sprintf("%s did not answer within %v (timeout)", url, timeout)
	}
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			err = inner
		}
	}
	return cleanHeader(fmt.Sprintf("%s: %v", url, err))
}

// cleanETag keeps an ETag only when it has the grammar of one (RFC 9110:
// an optional W/ and a quoted string of visible ASCII), so a server
// cannot put tabs or line breaks into listings.
func cleanETag(t string) string {
	v := strings.TrimPrefix(t, "W/")
	if len(t) > 200 || len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return ""
	}
	for i := 1; i < len(v)-1; i++ {
		if c := v[i]; c < 0x21 || c > 0x7e || c == '"' {
			return ""
		}
	}
	return t
}

// cleanHeader replaces control characters, so a value from a server can
// be shown on one line.
func cleanHeader(s string) string {
	return strings.Map(func(r rune) rune {
		if isControl(r) {
			return ' '
		}
		return r
	}, s)
}
