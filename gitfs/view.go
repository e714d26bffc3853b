package gitfs

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
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
	// Open opens rel for reading as the reader sees it, never following
	// a symlink on the way or at rel and never leaving the tree (the
	// reader may have made any of it a symlink); it must not block on a
	// FIFO.
	Open(rel string) (*os.File, error)
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
	return vr.render(ctx, res, canRead), nil
}

// withView returns a copy of r that reads the worktree through v.
func (r *Repo) withView(v View) *Repo {
	vr := *r
	ownGit := r.gitDir == filepath.Join(r.worktree, ".git") && r.commonDir == r.gitDir
	vr.view = &viewState{v: v, git: ownGit && v.Changed(".git")}
	return &vr
}

// wtPath returns the host path of the worktree path rel as the reader
// sees it; false when rel does not exist for the reader, or is no path a
// worktree can hold (see safeRel).
func (r *Repo) wtPath(rel string) (string, bool) {
	if !safeRel(rel) {
		return "", false
	}
	if r.view == nil {
		return filepath.Join(r.worktree, filepath.FromSlash(rel)), true
	}
	return r.view.v.Path(rel)
}

// safeRel reports whether rel is a path a worktree can hold (git's
// verify_path, less its checks for other platforms): "" or slash
// separated names, none of them empty, "." or "..". An index entry may
// name anything (an agent can write the index), and such a name must
// never reach a file outside the worktree.
func safeRel(rel string) bool {
	if rel == "" {
		return true
	}
	for {
		name, rest, more := strings.Cut(rel, "/")
		if name == "" || name == "." || name == ".." {
			return false
		}
		if !more {
			return true
		}
		rel = rest
	}
}

// openGit opens name (slash separated) in the per-worktree git dir as
// the reader sees it: HEAD, refs, packed-refs, the index, loose objects.
func (r *Repo) openGit(name string) (*os.File, error) {
	if r.view != nil && r.view.git {
		if !safeRel(name) {
			return nil, os.ErrNotExist
		}
		return regularOnly(r.view.v.Open(".git/" + name))
	}
	return openRegular(filepath.Join(r.gitDir, filepath.FromSlash(name)), false)
}

// readGit reads name in the git dir as the reader sees it (openGit).
func (r *Repo) readGit(name string) ([]byte, error) {
	f, err := r.openGit(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// regularOnly passes on f when it is a regular file.
func regularOnly(f *os.File, err error) (*os.File, error) {
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: f.Name(), Err: errNotRegular}
	}
	return f, nil
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
	if !safeRel(rel) {
		return nil, os.ErrNotExist
	}
	if r.view == nil {
		return openRegular(filepath.Join(r.worktree, filepath.FromSlash(rel)), true)
	}
	return regularOnly(r.view.v.Open(rel))
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
// reader sees: a loose ref file, else packed-refs. A name git would not
// take for a ref (refs.c check_refname_format: "..", a component that
// starts with a dot or ends in ".lock", control characters and the
// like) is an error, and nothing is read for it.
func (r *Repo) resolveRefView(name string) (plumbing.Hash, bool, error) {
	for range 8 {
		if !validRefName(name) {
			return plumbing.ZeroHash, false, fmt.Errorf("ref %q: %w: not a valid ref name", name, ErrFormatUnsupported)
		}
		if b, err := r.readGit(name); err == nil {
			s := strings.TrimSpace(string(b))
			if t, ok := strings.CutPrefix(s, "ref:"); ok {
				name = strings.TrimSpace(t)
				continue
			}
			if !plumbing.IsHash(s) {
				return plumbing.ZeroHash, false, fmt.Errorf("ref %s: %w: it holds no object id", name, ErrFormatUnsupported)
			}
			return plumbing.NewHash(s), true, nil
		}
		if f, err := r.openGit("packed-refs"); err == nil {
			h := packedRefIn(f, name)
			f.Close()
			if plumbing.IsHash(h) {
				return plumbing.NewHash(h), true, nil
			}
		}
		return plumbing.ZeroHash, false, nil
	}
	return plumbing.ZeroHash, false, fmt.Errorf("ref %s: symbolic ref loop", name)
}

// validRefName is refs.c check_refname_format for the full names HEAD
// can point to: "HEAD" or "refs/" and components that are not empty, do
// not start with "." or end with ".lock", and hold no "..", "@{",
// control characters, space, "~^:?*[\\".
func validRefName(name string) bool {
	if name == "HEAD" {
		return true
	}
	if !strings.HasPrefix(name, "refs/") || strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".") ||
		strings.Contains(name, "..") || strings.Contains(name, "@{") || name == "@" {
		return false
	}
	for _, c := range strings.Split(name, "/") {
		if c == "" || c[0] == '.' || strings.HasSuffix(c, ".lock") {
			return false
		}
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f || strings.ContainsRune(" ~^:?*[\\", c) {
			return false
		}
	}
	return true
}

// looseObject reads the loose object h from the objects folder the reader
// sees (the objects a held git add or git commit wrote), bounded as
// readLoose bounds it.
func (r *Repo) looseObject(h plumbing.Hash, t plumbing.ObjectType) (plumbing.EncodedObject, error) {
	hex := h.String()
	f, err := r.openGit("objects/" + hex[:2] + "/" + hex[2:])
	if err != nil {
		return nil, plumbing.ErrObjectNotFound
	}
	defer f.Close()
	if t == headerOnly {
		return readLooseHeader(f, h)
	}
	return readLoose(f, h, t)
}
