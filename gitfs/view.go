package gitfs

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"
	"golang.org/x/sys/unix"
)

// View is a worktree as one reader sees it where that differs from the
// files on disk: the mount keeps a principal's held writes (changes
// waiting for review) in a layer of its own and shows that principal the
// layer over the checkout, so its .status must describe that worktree.
// Paths are slash separated and relative to the worktree root ("" is the
// root).
type View interface {
	// Path returns the host path of the file that holds rel for the
	// reader, or false when rel does not exist for it (it deleted rel or
	// a folder above it). Nothing need exist at the path returned.
	Path(rel string) (string, bool)
	// List lists the folder rel as the reader sees it, in any order;
	// false when rel is not a folder it sees.
	List(rel string) ([]ViewEntry, bool)
	// Changed reports whether the reader sees anything at or below rel
	// other than what the checkout holds.
	Changed(rel string) bool
}

// ViewEntry is one name of a folder listed by a View.
type ViewEntry struct {
	Name string
	Mode uint32 // the S_IFMT bits at least
}

// viewState is a Repo copy's view of the worktree.
type viewState struct {
	v View
	// git says the git dir is the worktree's own .git folder and the
	// reader changed something in it (git add, git commit): HEAD, refs,
	// the index and loose objects are then read through v as well. The
	// configuration, info/ and packs are always the checkout's.
	git bool
}

// StatusView is Status for a reader who sees the worktree through v: the
// files, folders and .gitignore/.gitattributes files it sees, and, when
// the git dir is the worktree's .git folder, the HEAD, refs, index and
// loose objects it sees there. Nothing is cached (the result is the
// reader's alone), and a scan past Options.ScanTimeout returns what it
// found with the header marked incomplete. Submodules are read from the
// checkout.
func (r *Repo) StatusView(ctx context.Context, dir string, v View, canRead func(repoPath string) bool) ([]byte, error) {
	if r.worktree == "" {
		return nil, fmt.Errorf("status: %s is a bare repository", r.gitDir)
	}
	if strings.Contains("/"+filepath.ToSlash(dir)+"/", "/../") {
		return nil, fmt.Errorf("status %q: path escapes the worktree", dir)
	}
	dir = cleanRel(dir)
	vr := r.withView(v)
	r.reloadConfig()
	hs, err := vr.readHead()
	if err != nil {
		return nil, fmt.Errorf("status %s: %w", r.worktree, err)
	}
	res, err := vr.compute(ctx, dir, hs, r.scanTimeout())
	if err != nil {
		return nil, fmt.Errorf("status %s: %w", filepath.Join(r.worktree, dir), err)
	}
	return vr.render(res, canRead), nil
}

// withView returns a copy of r that reads the worktree through v.
func (r *Repo) withView(v View) *Repo {
	vr := *r
	ownGit := r.gitDir == filepath.Join(r.worktree, ".git") && r.commonDir == r.gitDir
	vr.view = &viewState{v: v, git: ownGit && v.Changed(".git")}
	return &vr
}

// wtPath returns the host path of the worktree path rel as the reader
// sees it; false when rel does not exist for the reader.
func (r *Repo) wtPath(rel string) (string, bool) {
	if r.view == nil {
		return filepath.Join(r.worktree, filepath.FromSlash(rel)), true
	}
	return r.view.v.Path(rel)
}

// gitPath returns the host path of name (slash separated) in the
// per-worktree git dir as the reader sees it; false when the reader
// deleted it.
func (r *Repo) gitPath(name string) (string, bool) {
	if r.view != nil && r.view.git {
		return r.view.v.Path(".git/" + name)
	}
	return filepath.Join(r.gitDir, filepath.FromSlash(name)), true
}

// lstat stats the worktree path rel as the reader sees it, without
// following a symlink there.
func (r *Repo) lstat(rel string, st *unix.Stat_t) error {
	p, ok := r.wtPath(rel)
	if !ok {
		return unix.ENOENT
	}
	return unix.Lstat(p, st)
}

// listDir lists the worktree folder rel as the reader sees it (see
// readDir).
func (r *Repo) listDir(rel string) []dirent {
	if r.view == nil {
		return readDir(filepath.Join(r.worktree, filepath.FromSlash(rel)))
	}
	ents, ok := r.view.v.List(rel)
	if !ok {
		return nil
	}
	out := make([]dirent, 0, len(ents))
	for _, e := range ents {
		if e.Name == "" || e.Name == "." || e.Name == ".." {
			continue
		}
		out = append(out, dirent{name: e.Name, typ: direntType(e.Mode)})
	}
	return out
}

// openWorktree opens the regular file at the worktree path rel as the
// reader sees it, not following a symlink there.
func (r *Repo) openWorktree(rel string) (*os.File, error) {
	p, ok := r.wtPath(rel)
	if !ok {
		return nil, os.ErrNotExist
	}
	return openRegular(p, true)
}

// nestedRepo is isNestedRepo for the worktree folder rel as the reader
// sees it.
func (r *Repo) nestedRepo(rel string) bool {
	if r.view == nil {
		return isNestedRepo(filepath.Join(r.worktree, filepath.FromSlash(rel)))
	}
	dotgit, ok := r.view.v.Path(rel + "/.git")
	if !ok {
		return false
	}
	head, ok := r.view.v.Path(rel + "/.git/HEAD")
	if !ok {
		head = ""
	}
	return isNestedRepoAt(dotgit, head)
}

// resolveRefView resolves a full ref name as git does from the files the
// reader sees: a loose ref file, else packed-refs.
func (r *Repo) resolveRefView(name string) (plumbing.Hash, bool, error) {
	for range 8 {
		if p, ok := r.gitPath(name); ok {
			if b, err := readRegular(p); err == nil {
				s := strings.TrimSpace(string(b))
				if t, ok := strings.CutPrefix(s, "ref:"); ok {
					name = strings.TrimSpace(t)
					continue
				}
				if !plumbing.IsHash(s) {
					return plumbing.ZeroHash, false, fmt.Errorf("ref %s: %w: cannot parse %q", name, ErrFormatUnsupported, s)
				}
				return plumbing.NewHash(s), true, nil
			}
		}
		if p, ok := r.gitPath("packed-refs"); ok {
			if h := packedRef(p, name); plumbing.IsHash(h) {
				return plumbing.NewHash(h), true, nil
			}
		}
		return plumbing.ZeroHash, false, nil
	}
	return plumbing.ZeroHash, false, fmt.Errorf("ref %s: symbolic ref loop", name)
}

// looseObject reads the loose object h from the objects folder the reader
// sees (the objects a held git add or git commit wrote).
func (r *Repo) looseObject(h plumbing.Hash) (plumbing.EncodedObject, error) {
	hex := h.String()
	p, ok := r.gitPath("objects/" + hex[:2] + "/" + hex[2:])
	if !ok {
		return nil, plumbing.ErrObjectNotFound
	}
	f, err := openRegular(p, true)
	if err != nil {
		return nil, plumbing.ErrObjectNotFound
	}
	defer f.Close()
	zr, err := objfile.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", hex, err)
	}
	defer zr.Close()
	t, size, err := zr.Header()
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", hex, err)
	}
	if size > maxLooseObject {
		return nil, fmt.Errorf("object %s: %d bytes is more than this package reads", hex, size)
	}
	o := &plumbing.MemoryObject{}
	o.SetType(t)
	o.SetSize(size)
	w, err := o.Writer()
	if err != nil {
		return nil, err
	}
	if _, err := io.CopyN(w, zr, size); err != nil {
		return nil, fmt.Errorf("object %s: %w", hex, err)
	}
	if o.Hash() != h {
		return nil, fmt.Errorf("object %s: content hashes to %s", hex, o.Hash())
	}
	return o, nil
}

// maxLooseObject bounds what looseObject reads into memory.
const maxLooseObject = 512 << 20
