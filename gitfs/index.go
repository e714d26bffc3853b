package gitfs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// fileKey is the cheap identity of a file used to validate caches.
type fileKey struct {
	exists bool
	size   int64
	mtime  int64 // ns
	ctime  int64 // ns
	ino    uint64
}

func statKey(p string) fileKey {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return fileKey{}
	}
	return fileKey{
		exists: true,
		size:   st.Size,
		mtime:  st.Mtim.Sec*1e9 + st.Mtim.Nsec,
		ctime:  st.Ctim.Sec*1e9 + st.Ctim.Nsec,
		ino:    st.Ino,
	}
}

// indexSnap is one decoded index file.
type indexSnap struct {
	key             fileKey
	mtime           time.Time // the index file's mtime: entries at or after it are racily clean
	entries         []*entry  // in index order: by path, then stage
	names           []string  // distinct paths, sorted
	hasSkipWorktree bool      // some entry is skip-worktree
	// tree is the tree the index would write, from its cache-tree
	// extension; zero when unknown. When it is HEAD's tree, nothing is
	// staged and HEAD need not be read at all.
	tree plumbing.Hash
}

// loadIndex returns the decoded index, reusing the last one while the file's
// stat data is unchanged. A missing index is an empty one.
func (r *Repo) loadIndex() (*indexSnap, error) {
	if r.view != nil && r.view.git && r.view.v.Changed(".git/index") {
		// A reader's own index (StatusView after a held git add): not
		// the checkout's, so not cached with it.
		f, err := r.openGit("index")
		if err != nil {
			if os.IsNotExist(err) {
				return r.decodeIndex(nil)
			}
			return nil, fmt.Errorf("index: %w", err)
		}
		defer f.Close()
		return r.decodeIndex(f)
	}
	p := filepath.Join(r.gitDir, "index")
	key := statKey(p)
	r.status.mu.Lock()
	cur := r.status.idx
	r.status.mu.Unlock()
	if cur != nil && cur.key == key {
		return cur, nil
	}
	var f *os.File
	if key.exists {
		var err error
		if f, err = openRegular(p, false); err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("index: %w", err)
		}
	}
	if f != nil {
		defer f.Close()
	}
	snap, err := r.decodeIndex(f)
	if err != nil {
		return nil, err
	}
	r.status.mu.Lock()
	r.status.idx = snap
	r.status.mu.Unlock()
	return snap, nil
}

// decodeIndex reads the index file f (nil: a missing index, an empty one).
func (r *Repo) decodeIndex(f *os.File) (*indexSnap, error) {
	snap := &indexSnap{}
	if f != nil {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			return nil, fmt.Errorf("index: %w", err)
		}
		snap.key = fileKey{exists: true, size: st.Size, mtime: st.Mtim.Sec*1e9 + st.Mtim.Nsec, ctime: st.Ctim.Sec*1e9 + st.Ctim.Nsec, ino: st.Ino}
		snap.mtime = time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
		data, err := readSized(f, st.Size)
		if err != nil {
			return nil, fmt.Errorf("index: %w", err)
		}
		entries, tree, sparse, err := decodeIndexTree(data, r.gitDir)
		if err != nil {
			return nil, fmt.Errorf("index: %w", err)
		}
		if sparse {
			if entries, err = r.expandSparseDirs(entries); err != nil {
				return nil, fmt.Errorf("index: %w", err)
			}
		}
		snap.entries, snap.tree = entries, tree
	}
	// git keeps the index sorted by path then stage; go-git keeps file order.
	// Sort defensively (stable: a sorted slice costs one pass).
	if !sort.SliceIsSorted(snap.entries, func(i, j int) bool { return entryLess(snap.entries[i], snap.entries[j]) }) {
		sort.SliceStable(snap.entries, func(i, j int) bool { return entryLess(snap.entries[i], snap.entries[j]) })
	}
	snap.names = make([]string, 0, len(snap.entries))
	for _, e := range snap.entries {
		if e.SkipWorktree {
			snap.hasSkipWorktree = true
		}
		if n := len(snap.names); n == 0 || snap.names[n-1] != e.Name {
			snap.names = append(snap.names, e.Name)
		}
	}
	return snap, nil
}

// readSized reads f, whose size was size when it was statted, in one
// buffer: io.ReadAll's doubling costs several copies of a large index.
func readSized(f *os.File, size int64) ([]byte, error) {
	buf := make([]byte, 0, size+1) // +1 to see EOF without growing
	for {
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // it grew since the stat
		}
	}
}

func entryLess(a, b *entry) bool {
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return a.Stage < b.Stage
}

// tracked reports whether p is an index path (any stage).
func (s *indexSnap) tracked(p string) bool {
	i := sort.SearchStrings(s.names, p)
	return i < len(s.names) && s.names[i] == p
}

// isGitlink reports whether p is a gitlink (submodule) entry at any stage.
func (s *indexSnap) isGitlink(p string) bool {
	i := sort.Search(len(s.entries), func(i int) bool { return s.entries[i].Name >= p })
	for ; i < len(s.entries) && s.entries[i].Name == p; i++ {
		if s.entries[i].Mode == filemode.Submodule {
			return true
		}
	}
	return false
}

// hasTrackedUnder reports whether some index path lies below directory p.
func (s *indexSnap) hasTrackedUnder(p string) bool {
	if p == "" {
		return len(s.names) > 0
	}
	pre := p + "/"
	i := sort.SearchStrings(s.names, pre)
	return i < len(s.names) && strings.HasPrefix(s.names[i], pre)
}

// inDir returns the entries below directory dir ("" for all).
func (s *indexSnap) inDir(dir string) []*entry {
	if dir == "" {
		return s.entries
	}
	pre := dir + "/"
	lo := sort.Search(len(s.entries), func(i int) bool { return s.entries[i].Name >= pre })
	hi := lo + sort.Search(len(s.entries)-lo, func(i int) bool {
		return !strings.HasPrefix(s.entries[lo+i].Name, pre)
	})
	return s.entries[lo:hi]
}

// inDirAndSelf is inDir with the gitlinks (submodule entries) at dir
// itself first: `git -C dir status -- .` in a folder that is not a
// repository of its own counts the submodule entry the folder is the path
// of (pathspec "dir/" matches a gitlink named dir), as when a submodule
// was turned into plain files (`git rm --cached`, its .git removed).
func (s *indexSnap) inDirAndSelf(dir string) []*entry {
	in := s.inDir(dir)
	if dir == "" {
		return in
	}
	var self []*entry
	for i := sort.Search(len(s.entries), func(i int) bool { return s.entries[i].Name >= dir }); i < len(s.entries) && s.entries[i].Name == dir; i++ {
		if s.entries[i].Mode == filemode.Submodule {
			self = append(self, s.entries[i])
		}
	}
	if self == nil {
		return in
	}
	return append(self, in...)
}

// headFile is one blob (or gitlink) of the HEAD tree.
type headFile struct {
	hash plumbing.Hash
	mode filemode.FileMode
}

// headTree returns the tree hash of commit (zero for no commit).
func (r *Repo) headTree(commit plumbing.Hash) (plumbing.Hash, error) {
	if commit.IsZero() {
		return plumbing.ZeroHash, nil
	}
	r.objMu.Lock()
	defer r.objMu.Unlock()
	c, err := object.GetCommit(r.objects(), commit)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("HEAD commit %s: %w", commit, err)
	}
	return c.TreeHash, nil
}

// headFiles flattens the HEAD tree below dir into path → blob. The result is
// cached by the subtree's hash and must not be modified.
func (r *Repo) headFiles(commit plumbing.Hash, dir string) (map[string]headFile, error) {
	out := map[string]headFile{}
	if commit.IsZero() {
		return out, nil
	}
	r.objMu.Lock()
	defer r.objMu.Unlock()
	c, err := object.GetCommit(r.objects(), commit)
	if err != nil {
		return nil, fmt.Errorf("HEAD commit %s: %w", commit, err)
	}
	th := c.TreeHash
	if dir != "" {
		names := strings.Split(dir, "/")
		for i, name := range names {
			t, err := r.trees.get(r, th)
			if err != nil {
				return nil, err
			}
			found := false
			for _, e := range t.Entries {
				if e.Name == name && e.Mode == filemode.Dir {
					th, found = e.Hash, true
					break
				}
				if e.Name == name && e.Mode == filemode.Submodule && i == len(names)-1 {
					// dir is a submodule entry in HEAD (see inDirAndSelf).
					out[dir] = headFile{e.Hash, e.Mode}
					return out, nil
				}
			}
			if !found {
				return out, nil
			}
		}
	}
	key := headKey{th, dir}
	r.status.mu.Lock()
	if m, ok := r.status.heads[key]; ok {
		r.status.mu.Unlock()
		return m, nil
	}
	r.status.mu.Unlock()
	var walk func(h plumbing.Hash, prefix string) error
	walk = func(h plumbing.Hash, prefix string) error {
		t, err := object.GetTree(r.objects(), h)
		if err != nil {
			return fmt.Errorf("tree %s: %w", h, err)
		}
		for _, e := range t.Entries {
			p := prefix + e.Name
			if e.Mode == filemode.Dir {
				if err := walk(e.Hash, p+"/"); err != nil {
					return err
				}
				continue
			}
			out[p] = headFile{e.Hash, e.Mode}
		}
		return nil
	}
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	if err := walk(th, prefix); err != nil {
		return nil, err
	}
	r.status.mu.Lock()
	if len(r.status.heads) >= 8 {
		for k := range r.status.heads {
			delete(r.status.heads, k)
			break
		}
	}
	r.status.heads[key] = out
	r.status.mu.Unlock()
	return out, nil
}

type headKey struct {
	tree plumbing.Hash
	dir  string
}

// stage0 is the stage of a merged entry.
const stage0 uint8 = 0

// lowerBound returns the index of the first entry not before path p.
func (s *indexSnap) lowerBound(p string) int {
	return sort.Search(len(s.entries), func(i int) bool { return s.entries[i].Name >= p })
}

// entry returns the stage-0 entry for p, or nil.
func (s *indexSnap) entry(p string) *entry {
	i := s.lowerBound(p)
	for ; i < len(s.entries) && s.entries[i].Name == p; i++ {
		if s.entries[i].Stage == stage0 {
			return s.entries[i]
		}
	}
	return nil
}

// expandSparseDirs replaces the sparse-directory entries of a sparse index
// (a tree outside the sparse-checkout cone, mode 040000, name ending in
// "/") by the files of that tree, skip-worktree, as git's
// ensure_full_index does. The result is what a full index would hold.
func (r *Repo) expandSparseDirs(entries []*entry) ([]*entry, error) {
	out := make([]*entry, 0, len(entries))
	for _, e := range entries {
		if e.Mode != sparseDirMode {
			out = append(out, e)
			continue
		}
		if !strings.HasSuffix(e.Name, "/") {
			return nil, fmt.Errorf("%w: sparse directory entry %q without a trailing slash", ErrFormatUnsupported, e.Name)
		}
		var walk func(h plumbing.Hash, prefix string) error
		walk = func(h plumbing.Hash, prefix string) error {
			t, err := object.GetTree(r.objects(), h)
			if err != nil {
				return fmt.Errorf("sparse directory %s: tree %s: %w", e.Name, h, err)
			}
			for _, te := range t.Entries {
				if te.Mode == filemode.Dir {
					if err := walk(te.Hash, prefix+te.Name+"/"); err != nil {
						return err
					}
					continue
				}
				out = append(out, &entry{Name: prefix + te.Name, Hash: te.Hash, Mode: te.Mode, Stage: e.Stage, SkipWorktree: true})
			}
			return nil
		}
		r.objMu.Lock()
		err := walk(e.Hash, e.Name)
		r.objMu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return entryLess(out[i], out[j]) })
	return out, nil
}
