package gitfs

import (
	"bufio"
	"context"
	"crypto/sha1"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"golang.org/x/sys/unix"
)

// worktreeCheck compares index entries with the files on disk and returns
// the worktree column (' ', 'M', 'D', 'T', 'A') per entry, as git's
// refresh + diff-files do: stat data first (mtime, ctime, inode, uid, gid,
// size, exec bit, file type), content hash only when the stat data differs
// or the entry is racily clean. Entries left unchecked when ctx ends are ' '
// and done is false.
func (r *Repo) worktreeCheck(ctx context.Context, snap *indexSnap, ents []*index.Entry, fileMode bool) (ys []byte, done bool) {
	ys = make([]byte, len(ents))
	for i := range ys {
		ys[i] = ' '
	}
	var dirs dirCache
	var next atomic.Int64
	var stopped atomic.Bool
	const chunk = 64
	// Enough workers to keep the disk busy when the inode cache is cold
	// (see ioWorkers), but no more than there are chunks.
	workers := min(ioWorkers(), (len(ents)+chunk-1)/chunk)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var cur dirFD
			defer cur.close()
			for {
				if ctx.Err() != nil {
					stopped.Store(true)
					return
				}
				lo := int(next.Add(chunk)) - chunk
				if lo >= len(ents) {
					return
				}
				hi := min(lo+chunk, len(ents))
				for i := lo; i < hi; i++ {
					e := ents[i]
					if e.Stage != stage0 || e.SkipWorktree {
						continue
					}
					ys[i] = r.checkEntry(ctx, snap, e, fileMode, &dirs, &cur)
				}
			}
		}()
	}
	wg.Wait()
	return ys, !stopped.Load()
}

// dirCache remembers whether a worktree directory is a real directory
// reached without symlinks (git's has_symlink_leading_path).
type dirCache struct {
	m sync.Map // rel dir → bool
}

func (d *dirCache) realDir(root, rel string) bool {
	if rel == "" {
		return true
	}
	if v, ok := d.m.Load(rel); ok {
		return v.(bool)
	}
	ok := false
	parent := ""
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		parent = rel[:i]
	}
	if d.realDir(root, parent) {
		var st syscall.Stat_t
		if syscall.Lstat(filepath.Join(root, rel), &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			ok = true
		}
	}
	d.m.Store(rel, ok)
	return ok
}

// dirFD is one worker's open directory: entries come sorted by path, so
// neighbours share it, and fstatat on a name in it skips resolving the
// whole path again (about 20% of each stat on a VM where syscalls are slow).
type dirFD struct {
	dir string
	fd  int
	ok  bool
}

func (d *dirFD) close() {
	if d.ok {
		unix.Close(d.fd)
	}
	d.ok = false
}

// open makes d the directory rel (relative to root); false when it is not
// a directory reached without symlinks.
func (d *dirFD) open(root, rel string, dirs *dirCache) bool {
	if d.ok && d.dir == rel {
		return true
	}
	d.close()
	d.dir = rel
	if !dirs.realDir(root, rel) {
		return false
	}
	fd, err := unix.Open(filepath.Join(root, rel), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	d.fd, d.ok = fd, true
	return true
}

func (r *Repo) checkEntry(ctx context.Context, snap *indexSnap, e *index.Entry, fileMode bool, dirs *dirCache, cur *dirFD) byte {
	parent, base := "", e.Name
	if i := strings.LastIndexByte(e.Name, '/'); i >= 0 {
		parent, base = e.Name[:i], e.Name[i+1:]
	}
	if !cur.open(r.worktree, parent, dirs) {
		return 'D'
	}
	var ust unix.Stat_t
	if err := unix.Fstatat(cur.fd, base, &ust, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 'D'
	}
	st := syscall.Stat_t{Mode: ust.Mode, Size: ust.Size, Ino: ust.Ino, Uid: ust.Uid, Gid: ust.Gid,
		Mtim: syscall.Timespec{Sec: ust.Mtim.Sec, Nsec: ust.Mtim.Nsec},
		Ctim: syscall.Timespec{Sec: ust.Ctim.Sec, Nsec: ust.Ctim.Nsec}}
	if e.IntentToAdd {
		return 'A'
	}
	typ := st.Mode & syscall.S_IFMT
	switch e.Mode {
	case filemode.Submodule:
		if typ != syscall.S_IFDIR {
			return 'T'
		}
		return r.checkSubmodule(ctx, e, filepath.Join(r.worktree, e.Name))
	case filemode.Symlink:
		if typ == syscall.S_IFDIR {
			return 'D'
		}
		if typ != syscall.S_IFLNK {
			return 'T'
		}
	default: // regular files
		if typ == syscall.S_IFDIR {
			return 'D'
		}
		if typ != syscall.S_IFREG {
			return 'T'
		}
		if fileMode && (e.Mode == filemode.Executable) != (st.Mode&0o100 != 0) {
			return 'M'
		}
	}
	sizeChanged := e.Size != uint32(st.Size)
	statSame := !sizeChanged &&
		e.ModifiedAt.Unix() == st.Mtim.Sec && int64(e.ModifiedAt.Nanosecond()) == st.Mtim.Nsec &&
		e.CreatedAt.Unix() == st.Ctim.Sec && int64(e.CreatedAt.Nanosecond()) == st.Ctim.Nsec &&
		e.Inode == uint32(st.Ino) && e.UID == st.Uid && e.GID == st.Gid
	if statSame {
		racy := !snap.mtime.IsZero() && !snap.mtime.After(e.ModifiedAt)
		if !racy {
			return ' '
		}
	} else if sizeChanged && e.Size != 0 {
		return 'M'
	}
	h, err := hashWorktree(filepath.Join(r.worktree, e.Name), typ, st.Size)
	if err != nil || h != e.Hash {
		return 'M'
	}
	return ' '
}

// hashWorktree computes the blob id of a file or symlink on disk (no clean
// filters or line-ending conversion).
func hashWorktree(abs string, typ uint32, size int64) (plumbing.Hash, error) {
	if typ == syscall.S_IFLNK {
		target, err := os.Readlink(abs)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		return plumbing.ComputeHash(plumbing.BlobObject, []byte(target)), nil
	}
	f, err := openRegular(abs, true)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	defer f.Close()
	h := sha1.New()
	h.Write([]byte("blob " + strconv.FormatInt(size, 10) + "\x00"))
	n, err := io.Copy(h, f)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if n != size {
		return plumbing.ZeroHash, fmt.Errorf("%s changed while hashing", abs)
	}
	var out plumbing.Hash
	copy(out[:], h.Sum(nil))
	return out, nil
}

// submoduleHead reads the commit checked out in the submodule at abs; ok is
// false when it is not checked out (no .git) or cannot be read.
func submoduleHead(abs string) (plumbing.Hash, bool) {
	gitDir := filepath.Join(abs, ".git")
	fi, err := os.Lstat(gitDir)
	if err != nil {
		return plumbing.ZeroHash, false
	}
	if fi.Mode().IsRegular() {
		d, err := readGitdirFile(gitDir)
		if err != nil {
			return plumbing.ZeroHash, false
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(abs, d)
		}
		gitDir = d
	}
	commonDir := gitDir
	if b, err := readRegular(filepath.Join(gitDir, "commondir")); err == nil {
		c := strings.TrimSpace(string(b))
		if !filepath.IsAbs(c) {
			c = filepath.Join(gitDir, c)
		}
		commonDir = c
	}
	b, err := readRegular(filepath.Join(gitDir, "HEAD"))
	if err != nil {
		return plumbing.ZeroHash, false
	}
	s := strings.TrimSpace(string(b))
	for range 8 {
		ref, ok := strings.CutPrefix(s, "ref:")
		if !ok {
			break
		}
		ref = strings.TrimSpace(ref)
		if b, err := readRegular(filepath.Join(commonDir, filepath.FromSlash(ref))); err == nil {
			s = strings.TrimSpace(string(b))
			continue
		}
		s = packedRef(filepath.Join(commonDir, "packed-refs"), ref)
	}
	if !plumbing.IsHash(s) {
		return plumbing.ZeroHash, false
	}
	return plumbing.NewHash(s), true
}

func packedRef(file, ref string) string {
	f, err := openRegular(file, false)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if h, name, ok := strings.Cut(line, " "); ok && name == ref {
			return h
		}
	}
	return ""
}
