package gitfs

import (
	"bytes"
	"container/list"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// ResolveRev resolves rev to a commit: a branch, a tag (annotated tags are
// peeled to their commit), a remote-tracking branch, a full or abbreviated
// commit id, HEAD, or any revision go-git's parser accepts (HEAD~2, main^).
// Errors for unknown revisions wrap io/fs.ErrNotExist.
func (r *Repo) ResolveRev(rev string) (plumbing.Hash, error) {
	r.objMu.Lock()
	defer r.objMu.Unlock()
	h, err := r.repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		// A name that does not parse as a revision (".gitignore", which
		// tools look up in every folder) names no commit either; only a
		// failure to read the repository is an error of its own.
		var pe *iofs.PathError
		if errors.As(err, &pe) {
			return plumbing.ZeroHash, fmt.Errorf("resolve %q: %w", rev, err)
		}
		return plumbing.ZeroHash, fmt.Errorf("resolve %q: %v: %w", rev, err, iofs.ErrNotExist)
	}
	return *h, nil
}

// Refs lists the short names of local branches and tags ("main", "v1.0"),
// sorted, for a .revs/ listing. A name that is both a branch and a tag is
// listed once.
func (r *Repo) Refs() ([]string, error) {
	r.objMu.Lock()
	defer r.objMu.Unlock()
	iter, err := r.storage.IterReferences()
	if err != nil {
		return nil, fmt.Errorf("refs: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	err = iter.ForEach(func(ref *plumbing.Reference) error {
		n := ref.Name()
		if n.IsBranch() || n.IsTag() {
			s := n.Short()
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("refs: %w", err)
	}
	sort.Strings(out)
	return out, nil
}

// Entry describes one path of a commit tree.
type Entry struct {
	Name string      // base name; "" for the root
	Mode os.FileMode // fs.ModeDir, fs.ModeSymlink, 0o755 for executables, 0o644 otherwise
	Size int64       // blob size; 0 for directories and submodules
	Hash plumbing.Hash
	// Submodule is true for a gitlink (mode 160000); Hash is then the
	// commit id and Mode is a directory.
	Submodule bool
}

// Tree is a read-only view of one commit's tree. It is safe for concurrent use.
type Tree struct {
	r      *Repo
	commit plumbing.Hash
	root   plumbing.Hash
}

// Tree returns the tree of commit (a commit id, e.g. from ResolveRev).
func (r *Repo) Tree(commit plumbing.Hash) (*Tree, error) {
	r.objMu.Lock()
	defer r.objMu.Unlock()
	r.refreshHistory()
	c, err := object.GetCommit(r.objects(), commit)
	if err != nil {
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return nil, fmt.Errorf("commit %s: %w", commit, iofs.ErrNotExist)
		}
		return nil, fmt.Errorf("commit %s: %w", commit, err)
	}
	return &Tree{r: r, commit: commit, root: c.TreeHash}, nil
}

// Commit returns the commit id this tree belongs to.
func (t *Tree) Commit() plumbing.Hash { return t.commit }

// Sub returns the tree of the folder p of the same commit (a git source
// that is a sub-folder of its checkout shows that folder of each commit).
// A p that is not a folder in this commit is not found.
func (t *Tree) Sub(p string) (*Tree, error) {
	if p == "" {
		return t, nil
	}
	t.r.objMu.Lock()
	defer t.r.objMu.Unlock()
	ent, tree, err := t.lookup(p)
	if err != nil {
		return nil, err
	}
	if tree == nil || ent.Submodule {
		return nil, notExist(p)
	}
	return &Tree{r: t.r, commit: t.commit, root: ent.Hash}, nil
}

// cleanTreePath turns a slash path ("", ".", "a/b", "/a/b/") into its
// components; ".." segments are refused.
func cleanTreePath(p string) ([]string, error) {
	p = strings.Trim(path.Clean("/"+p), "/")
	if p == "" {
		return nil, nil
	}
	parts := strings.Split(p, "/")
	return parts, nil
}

// lookup walks to p and returns its entry, with the tree object when p is a
// directory. Callers hold objMu.
func (t *Tree) lookup(p string) (Entry, *object.Tree, error) {
	parts, err := cleanTreePath(p)
	if err != nil {
		return Entry{}, nil, err
	}
	tree, err := t.r.trees.get(t.r, t.root)
	if err != nil {
		return Entry{}, nil, err
	}
	ent := Entry{Mode: iofs.ModeDir | 0o755, Hash: t.root}
	for i, name := range parts {
		if tree == nil {
			return Entry{}, nil, notExist(p)
		}
		var te *object.TreeEntry
		for j := range tree.Entries {
			if tree.Entries[j].Name == name {
				te = &tree.Entries[j]
				break
			}
		}
		if te == nil {
			return Entry{}, nil, notExist(p)
		}
		ent, err = t.entry(te)
		if err != nil {
			return Entry{}, nil, fmt.Errorf("%s: %w", p, err)
		}
		tree = nil
		if te.Mode == filemode.Dir {
			tree, err = t.r.trees.get(t.r, te.Hash)
			if err != nil {
				return Entry{}, nil, fmt.Errorf("%s: %w", p, err)
			}
		} else if i != len(parts)-1 {
			return Entry{}, nil, notExist(p)
		}
	}
	return ent, tree, nil
}

func notExist(p string) error {
	return &iofs.PathError{Op: "lookup", Path: p, Err: iofs.ErrNotExist}
}

// entry converts a tree entry, reading the blob size. Callers hold objMu.
func (t *Tree) entry(te *object.TreeEntry) (Entry, error) {
	e := Entry{Name: te.Name, Hash: te.Hash}
	switch te.Mode {
	case filemode.Dir:
		e.Mode = iofs.ModeDir | 0o755
		return e, nil
	case filemode.Submodule:
		e.Mode = iofs.ModeDir | 0o755
		e.Submodule = true
		return e, nil
	case filemode.Symlink:
		e.Mode = iofs.ModeSymlink | 0o777
	case filemode.Executable:
		e.Mode = 0o755
	default:
		e.Mode = 0o644
	}
	sz, err := t.r.objects().EncodedObjectSize(te.Hash)
	if err != nil {
		return Entry{}, err
	}
	e.Size = sz
	return e, nil
}

// Stat describes the path p ("" is the root).
func (t *Tree) Stat(p string) (Entry, error) {
	t.r.objMu.Lock()
	defer t.r.objMu.Unlock()
	e, _, err := t.lookup(p)
	return e, err
}

// ReadDir lists the directory p in git's tree order (byte order of names).
func (t *Tree) ReadDir(p string) ([]Entry, error) {
	t.r.objMu.Lock()
	defer t.r.objMu.Unlock()
	e, tree, err := t.lookup(p)
	if err != nil {
		return nil, err
	}
	if tree == nil {
		if e.Submodule {
			return nil, nil // submodule contents are not in this repository
		}
		return nil, &iofs.PathError{Op: "readdir", Path: p, Err: errNotDir}
	}
	out := make([]Entry, 0, len(tree.Entries))
	for i := range tree.Entries {
		ce, err := t.entry(&tree.Entries[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path.Join(p, tree.Entries[i].Name), err)
		}
		out = append(out, ce)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

var errNotDir = errors.New("not a directory")
var errIsDir = errors.New("is a directory")

// blob returns the blob object for a file or symlink path. Callers hold objMu.
func (t *Tree) blob(p, op string) (*object.Blob, error) {
	e, _, err := t.lookup(p)
	if err != nil {
		return nil, err
	}
	if e.Mode.IsDir() {
		return nil, &iofs.PathError{Op: op, Path: p, Err: errIsDir}
	}
	b, err := object.GetBlob(t.r.objects(), e.Hash)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, p, err)
	}
	return b, nil
}

// ReadFile returns the content of the file (or the target of the symlink) p.
func (t *Tree) ReadFile(p string) ([]byte, error) {
	t.r.objMu.Lock()
	defer t.r.objMu.Unlock()
	b, err := t.blob(p, "read")
	if err != nil {
		return nil, err
	}
	rc, err := b.Reader()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	defer rc.Close()
	buf := bytes.NewBuffer(make([]byte, 0, b.Size))
	if _, err := io.Copy(buf, rc); err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return buf.Bytes(), nil
}

// Open returns a reader of the file p's content. The content is read whole
// first (go-git's pack readers are not safe to share across goroutines), so
// the reader holds no lock.
func (t *Tree) Open(p string) (io.ReadCloser, error) {
	b, err := t.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Readlink returns the target of the symlink p.
func (t *Tree) Readlink(p string) (string, error) {
	e, err := t.Stat(p)
	if err != nil {
		return "", err
	}
	if e.Mode&iofs.ModeSymlink == 0 {
		return "", &iofs.PathError{Op: "readlink", Path: p, Err: errNotSymlink}
	}
	b, err := t.ReadFile(p)
	return string(b), err
}

var errNotSymlink = errors.New("not a symbolic link")

// treeCache is a small LRU of decoded tree objects keyed by hash.
type treeCache struct {
	mu    sync.Mutex
	max   int
	ll    *list.List
	items map[plumbing.Hash]*list.Element
}

type treeItem struct {
	h plumbing.Hash
	t *object.Tree
}

func newTreeCache(max int) *treeCache {
	return &treeCache{max: max, ll: list.New(), items: map[plumbing.Hash]*list.Element{}}
}

// get returns the decoded tree h. Callers hold r.objMu.
func (c *treeCache) get(r *Repo, h plumbing.Hash) (*object.Tree, error) {
	c.mu.Lock()
	if el, ok := c.items[h]; ok {
		c.ll.MoveToFront(el)
		t := el.Value.(*treeItem).t
		c.mu.Unlock()
		return t, nil
	}
	c.mu.Unlock()
	t, err := object.GetTree(r.objects(), h)
	if err != nil {
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return nil, fmt.Errorf("tree %s: %w", h, iofs.ErrNotExist)
		}
		return nil, fmt.Errorf("tree %s: %w", h, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[h]; !ok {
		c.items[h] = c.ll.PushFront(&treeItem{h, t})
		for c.ll.Len() > c.max {
			old := c.ll.Back()
			c.ll.Remove(old)
			delete(c.items, old.Value.(*treeItem).h)
		}
	}
	return t, nil
}

var _ = storer.ErrStop
