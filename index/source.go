package index

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/neuralis/neuralisfs/internal/lowprio"
)

// Source is one configured source as the index sees it: a slug and a file
// system confined to the source root. The mount passes an implementation that
// never follows symlinks; tests use os.DirFS.
type Source struct {
	Slug         string
	FS           fs.FS
	Include      []string
	Exclude      []string
	MaxFileBytes int64 // 0: DefaultMaxFileBytes; negative: no bound
}

// Rules returns the admission settings of s.
func (s Source) Rules() SourceRules {
	return SourceRules{Include: s.Include, Exclude: s.Exclude, MaxFileBytes: s.MaxFileBytes}
}

var slugRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

func (s Source) validate() error {
	if !slugRE.MatchString(s.Slug) {
		return fmt.Errorf("source slug %q is not of the form [a-z0-9][a-z0-9._-]*", s.Slug)
	}
	if s.FS == nil {
		return fmt.Errorf("source %q has no file system", s.Slug)
	}
	if err := s.Rules().Validate(); err != nil {
		return fmt.Errorf("source %q: %w", s.Slug, err)
	}
	return nil
}

// URI returns the uri of path p in the source slug: "<slug>://<p>".
func URI(slug, p string) string { return slug + "://" + p }

// SplitURI splits "<slug>://<path>" into its parts.
func SplitURI(uri string) (slug, p string, ok bool) {
	slug, p, ok = strings.Cut(uri, "://")
	if !ok || slug == "" {
		return "", "", false
	}
	return slug, p, true
}

// validPath reports whether p is a clean slash path relative to a root.
func validPath(p string) bool {
	return p != "" && p != "." && fs.ValidPath(p)
}

// File is an admitted file of a scan.
type File struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// Skip is a file or folder left out of a collection, with the reason.
type Skip struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Report is what Scan found: every admitted file, every skipped file or pruned
// folder (a folder is reported once, with a trailing slash), and the identity
// of the admitted set.
type Report struct {
	Admitted []File `json:"admitted"`
	Skipped  []Skip `json:"skipped"`
	Identity string `json:"identity"`
}

// prepared is a file read, admitted and hashed, ready to be indexed.
type prepared struct {
	path    string
	size    int64
	mtime   int64 // ns since the epoch
	racy    bool  // stat'd within racyWindow of mtime (see metaEntry)
	ok      bool  // admitted
	reason  string
	digest  [sha256.Size]byte
	content []byte    // only when ok, until analysed
	terms   *analysed // the content's terms, once analysed (see readFile)
}

// mem is about the memory pr holds.
func (pr *prepared) mem() int64 {
	n := int64(len(pr.content))
	if pr.terms != nil {
		n += int64(pr.terms.mem)
	}
	return n
}

// scratch is a reader's buffer and term counter, reused from file to file:
// a fresh buffer per file costs more than reading it (page faults).
type scratch struct {
	buf []byte
	tc  termCounter
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// readFile is prepare, then, for admitted content that analyse asks for,
// the counting of its terms, so that the content itself is not kept: an
// admitted result holds terms or nothing.
func readFile(fsys fs.FS, p string, rules SourceRules, info fs.FileInfo, analyse func(*prepared) bool) (prepared, error) {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	pr, err := prepare(fsys, p, rules, info, sc.buf)
	if cap(pr.content) > cap(sc.buf) {
		sc.buf = pr.content[:0]
	}
	if err == nil && pr.ok && analyse(&pr) {
		a := sc.tc.count(pr.content)
		pr.terms = &a
	}
	pr.content = nil
	return pr, err
}

// lstat stats p without following a final symlink where fsys can (fs.ReadLinkFS).
func lstat(fsys fs.FS, p string) (fs.FileInfo, error) {
	if _, ok := fsys.(fs.ReadLinkFS); ok {
		return fs.Lstat(fsys, p)
	}
	return fs.Stat(fsys, p)
}

// prepare reads p through fsys and applies every admission rule. info may be
// nil. A file that does not exist returns an error wrapping fs.ErrNotExist.
// The content is read into buf's array when it fits.
func prepare(fsys fs.FS, p string, rules SourceRules, info fs.FileInfo, buf []byte) (prepared, error) {
	pr := prepared{path: p}
	if ok, reason := admitName(p, rules); !ok {
		pr.reason = reason
		return pr, nil
	}
	if info == nil {
		var err error
		if info, err = lstat(fsys, p); err != nil {
			return pr, err
		}
	}
	if !info.Mode().IsRegular() {
		pr.reason = ReasonNotRegular
		return pr, nil
	}
	pr.size, pr.mtime = info.Size(), info.ModTime().UnixNano()
	if ok, reason := admitSize(pr.size, rules); !ok {
		pr.reason = reason
		return pr, nil
	}
	f, err := fsys.Open(p)
	if err != nil {
		return pr, err
	}
	defer f.Close()
	// Stat the open file: what was read is what is described, even if the
	// name was replaced since the walk.
	if st, err := f.Stat(); err == nil {
		if !st.Mode().IsRegular() {
			pr.reason = ReasonNotRegular
			return pr, nil
		}
		pr.size, pr.mtime = st.Size(), st.ModTime().UnixNano()
	}
	pr.racy = racyAt(pr.mtime, time.Now())
	max := rules.maxBytes()
	limit := pr.size + 1
	if max >= 0 && limit > max+1 {
		limit = max + 1
	}
	if int64(cap(buf)) < limit {
		buf = make([]byte, 0, limit)
	}
	content, err := readAllInto(io.LimitReader(f, max64(max)), buf[:0])
	if err != nil {
		return pr, fmt.Errorf("read %s: %w", p, err)
	}
	pr.size = int64(len(content)) // the file may have changed since stat
	if ok, reason := admitSize(pr.size, rules); !ok {
		pr.reason = reason
		return pr, nil
	}
	if ok, reason := admitContent(pr.size, content); !ok {
		pr.reason = reason
		return pr, nil
	}
	pr.ok = true
	pr.content = content
	pr.digest = sha256.Sum256(content)
	return pr, nil
}

func max64(max int64) int64 {
	if max < 0 {
		return 1<<63 - 1
	}
	return max + 1
}

// readAllInto is io.ReadAll starting from buf.
func readAllInto(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return b, err
		}
	}
}

// walkEntry is a regular file found by a walk that passed the name rules.
type walkEntry struct {
	path string
	info fs.FileInfo
}

// walk lists the candidate files of a source below root ("." for all):
// folders are pruned by AdmitDir, files refused by name or not regular go to
// skip. It reads no content. Folders are listed (and their files stat'ed)
// by walkWorkers goroutines at once: a restart with nothing changed is a
// walk, and its system calls are most of it. Entries and skips come out in
// the order of fs.WalkDir, and skip is called from the caller's goroutine.
func walk(ctx context.Context, fsys fs.FS, root string, rules SourceRules, skip func(Skip)) ([]walkEntry, error) {
	info, err := fs.Stat(fsys, root)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%s is not a folder", root)
	}
	top := &walkDirNode{path: root}
	w := &walker{ctx: ctx, fsys: fsys, rules: rules, queue: []*walkDirNode{top}, top: top}
	w.cond = sync.NewCond(&w.mu)
	var wg sync.WaitGroup
	for range walkWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lowprio.LowerIO()
			w.run()
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if w.topErr != nil {
		return nil, w.topErr
	}
	var out []walkEntry
	top.flatten(&out, skip)
	return out, nil
}

// walkWorkers list folders at once (see walk).
const walkWorkers = 4

type walker struct {
	ctx   context.Context
	fsys  fs.FS
	rules SourceRules
	top   *walkDirNode

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []*walkDirNode // folders to list
	active int            // folders being listed
	topErr error          // the top folder could not be listed
}

// walkDirNode is a folder being walked: what it holds, in name order.
type walkDirNode struct {
	path  string
	items []walkItem
}

// walkItem is one of: an admitted file (entry), a skip, or a sub-folder.
type walkItem struct {
	entry walkEntry
	skip  *Skip
	dir   *walkDirNode
}

// run lists folders until none is left to list or being listed.
func (w *walker) run() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for len(w.queue) == 0 && w.active > 0 {
			w.cond.Wait()
		}
		if len(w.queue) == 0 {
			w.cond.Broadcast()
			return
		}
		n := w.queue[len(w.queue)-1]
		w.queue = w.queue[:len(w.queue)-1]
		w.active++
		w.mu.Unlock()
		subs := w.list(n)
		w.mu.Lock()
		w.queue = append(w.queue, subs...)
		w.active--
		w.cond.Broadcast()
	}
}

// list reads the folder n and returns its admitted sub-folders.
func (w *walker) list(n *walkDirNode) []*walkDirNode {
	if w.ctx.Err() != nil {
		return nil
	}
	ents, err := fs.ReadDir(w.fsys, n.path)
	if err != nil {
		if n == w.top {
			w.mu.Lock()
			w.topErr = err
			w.mu.Unlock()
			return nil
		}
		n.items = []walkItem{{skip: &Skip{Path: n.path, Reason: "unreadable: " + errText(err)}}}
		return nil
	}
	var subs []*walkDirNode
	n.items = make([]walkItem, 0, len(ents))
	for _, d := range ents {
		p := d.Name()
		if n.path != "." {
			p = n.path + "/" + p
		}
		if d.IsDir() {
			if ok, reason := AdmitDir(p, w.rules); !ok {
				n.items = append(n.items, walkItem{skip: &Skip{Path: p + "/", Reason: reason}})
				continue
			}
			c := &walkDirNode{path: p}
			n.items = append(n.items, walkItem{dir: c})
			subs = append(subs, c)
			continue
		}
		// The folders on the way passed AdmitDir: only the file's name and
		// the patterns over its whole path are left to check.
		if ok, reason := admitFileName(p, w.rules); !ok {
			n.items = append(n.items, walkItem{skip: &Skip{Path: p, Reason: reason}})
			continue
		}
		if !d.Type().IsRegular() {
			n.items = append(n.items, walkItem{skip: &Skip{Path: p, Reason: ReasonNotRegular}})
			continue
		}
		info, err := d.Info()
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				n.items = append(n.items, walkItem{skip: &Skip{Path: p, Reason: "unreadable: " + errText(err)}})
			}
			continue
		}
		n.items = append(n.items, walkItem{entry: walkEntry{path: p, info: info}})
	}
	// Popped last in, first out: listing the first sub-folder next keeps
	// the queue short.
	for i, j := 0, len(subs)-1; i < j; i, j = i+1, j-1 {
		subs[i], subs[j] = subs[j], subs[i]
	}
	return subs
}

func (n *walkDirNode) flatten(out *[]walkEntry, skip func(Skip)) {
	for _, it := range n.items {
		switch {
		case it.skip != nil:
			skip(*it.skip)
		case it.dir != nil:
			it.dir.flatten(out, skip)
		default:
			*out = append(*out, it.entry)
		}
	}
}

// errText is err's message without the path an fs.PathError repeats.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// identityHash returns the identity of a set of admitted files: "sha256:" and
// the hex SHA-256 over, for each file in byte-wise order of path, the path, a
// NUL byte and the 32-byte SHA-256 of its content.
func identityHash(paths []string, digests map[string][sha256.Size]byte) string {
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		d := digests[p]
		h.Write([]byte(p))
		h.Write([]byte{0})
		h.Write(d[:])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// parallel runs fn(i) for i in [0,n) on workers goroutines, stopping early
// when ctx is done.
func parallel(ctx context.Context, n, workers int, fn func(i int)) {
	parallelAt(ctx, n, workers, fn, false)
}

// background is parallel on background threads (lowprio): for indexing,
// not for a search someone waits for.
func background(ctx context.Context, n, workers int, fn func(i int)) {
	parallelAt(ctx, n, workers, fn, true)
}

func parallelAt(ctx context.Context, n, workers int, fn func(i int), low bool) {
	next := make(chan int)
	done := make(chan struct{})
	for w := 0; w < workers; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			var p lowprio.Pacer
			if low {
				lowprio.LowerIO()
			}
			for i := range next {
				if low {
					p.Pace(ctx) // give way to requests (issue 15)
				}
				fn(i)
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	for w := 0; w < workers; w++ {
		<-done
	}
}

// Scan lists what the index would admit from src, without an index: every
// admitted file with its size, every skip with its reason, and the identity.
// It reads content only to check admission and hash it, and prints nothing.
func Scan(ctx context.Context, src Source) (Report, error) {
	if err := src.validate(); err != nil {
		return Report{}, err
	}
	rules := src.Rules()
	var rep Report
	entries, err := walk(ctx, src.FS, ".", rules, func(s Skip) { rep.Skipped = append(rep.Skipped, s) })
	if err != nil {
		return Report{}, fmt.Errorf("scan %s: %w", src.Slug, err)
	}
	results := make([]prepared, len(entries))
	errs := make([]error, len(entries))
	parallel(ctx, len(entries), scanWorkers, func(i int) {
		pr, err := readFile(src.FS, entries[i].path, rules, entries[i].info, func(*prepared) bool { return false })
		results[i], errs[i] = pr, err
	})
	if err := ctx.Err(); err != nil {
		return Report{}, err
	}
	digests := make(map[string][sha256.Size]byte)
	var paths []string
	for i, pr := range results {
		switch {
		case errors.Is(errs[i], fs.ErrNotExist):
			// removed while scanning
		case errs[i] != nil:
			rep.Skipped = append(rep.Skipped, Skip{Path: pr.path, Reason: "unreadable: " + errText(errs[i])})
		case !pr.ok:
			rep.Skipped = append(rep.Skipped, Skip{Path: pr.path, Reason: pr.reason})
		default:
			rep.Admitted = append(rep.Admitted, File{Path: pr.path, Size: pr.size})
			digests[pr.path] = pr.digest
			paths = append(paths, pr.path)
		}
	}
	sort.Slice(rep.Admitted, func(i, j int) bool { return rep.Admitted[i].Path < rep.Admitted[j].Path })
	sort.Slice(rep.Skipped, func(i, j int) bool { return rep.Skipped[i].Path < rep.Skipped[j].Path })
	rep.Identity = identityHash(paths, digests)
	return rep, nil
}

// scanWorkers is how many files are read and hashed at once.
const scanWorkers = 4

func limitReader(r io.Reader, max int64) io.Reader { return io.LimitReader(r, max) }
