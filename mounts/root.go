package mounts

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrBadPath is returned for a relative path that is not clean: empty
// segments, "." or "..", or a leading slash.
var ErrBadPath = errors.New("path is not a clean relative path")

// Root is a source folder held open as a directory file descriptor. Every
// method resolves its path below that descriptor and refuses to follow any
// symlink on the way (DESIGN.md §5): a symlink swapped in anywhere answers
// ELOOP, an escape EXDEV, and the last component of a path is never followed.
//
// Paths are slash-separated and relative to the root; "" is the root itself.
// A *Root is safe for concurrent use.
type Root struct {
	fd   int
	path string
	dev  uint64
	ino  uint64
}

// OpenRoot opens the folder at dir as a confined root.
func OpenRoot(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &PathErr{Op: "open", Path: dir, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &PathErr{Op: "stat", Path: dir, Err: err}
	}
	return &Root{fd: fd, path: dir, dev: st.Dev, ino: st.Ino}, nil
}

// Close releases the root's descriptor.
func (r *Root) Close() error { return unix.Close(r.fd) }

// Path is the host path the root was opened at (for messages and watches;
// never for access).
func (r *Root) Path() string { return r.path }

// Dev is the device the root lives on.
func (r *Root) Dev() uint64 { return r.dev }

// Ino is the inode number of the root folder.
func (r *Root) Ino() uint64 { return r.ino }

// Fd is the root's O_PATH directory descriptor. It stays owned by r.
func (r *Root) Fd() int { return r.fd }

// PathErr is an error from a confined operation; it unwraps to the errno.
type PathErr struct {
	Op   string
	Path string
	Err  error
}

func (e *PathErr) Error() string { return e.Op + " " + e.Path + ": " + e.Err.Error() }
func (e *PathErr) Unwrap() error { return e.Err }

// ValidRel reports whether rel is a path a Root takes: "" or slash
// separated names, none of them empty, "." or "..".
func ValidRel(rel string) bool { return checkRel(rel) == nil }

func checkRel(rel string) error {
	if rel == "" {
		return nil
	}
	if strings.HasPrefix(rel, "/") || strings.HasSuffix(rel, "/") {
		return ErrBadPath
	}
	for seg := range strings.SplitSeq(rel, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return ErrBadPath
		}
	}
	return nil
}

func (r *Root) wrap(op, rel string, err error) error {
	if err == nil {
		return nil
	}
	return &PathErr{Op: op, Path: rel, Err: err}
}

const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Open opens rel below the root with flags (O_NOFOLLOW and O_CLOEXEC are
// always added). It retries openat2's EAGAIN.
func (r *Root) Open(rel string, flags int, mode uint32) (int, error) {
	if err := checkRel(rel); err != nil {
		return -1, r.wrap("open", rel, err)
	}
	fd, err := r.openat(rel, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: resolveFlags,
	})
	return fd, r.wrap("open", rel, err)
}

// dirHow opens a folder to work in. It leaves O_NOFOLLOW off so that a
// symlink swapped in for the folder answers ELOOP (RESOLVE_NO_SYMLINKS),
// as one anywhere else on the way does, rather than ENOTDIR.
var dirHow = unix.OpenHow{
	Flags:   uint64(unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC),
	Resolve: resolveFlags,
}

// openat opens the clean rel below the root as how says: a rel shorter
// than PATH_MAX in one openat2, a longer one in pieces (see walk).
func (r *Root) openat(rel string, how *unix.OpenHow) (int, error) {
	if len(rel) < unix.PathMax {
		if rel == "" {
			rel = "."
		}
		return openat2(r.fd, rel, how)
	}
	dfd, rest, err := r.walk(rel)
	if err != nil {
		return -1, err
	}
	fd, err := openat2(dfd, rest, how)
	unix.Close(dfd)
	return fd, err
}

// openat2 is unix.Openat2 retrying EAGAIN (a rename or mount raced the
// lookup) and EINTR a bounded number of times.
func openat2(dfd int, p string, how *unix.OpenHow) (int, error) {
	for range 16 {
		fd, err := unix.Openat2(dfd, p, how)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, err
		}
		return fd, nil
	}
	return -1, unix.EAGAIN
}

// chunkMax bounds the piece of a long path one openat2 resolves: well
// under PATH_MAX (4096 bytes with its NUL), past which openat2 answers
// ENAMETOOLONG whatever the depth of the descriptor it starts from.
const chunkMax = 2048

// walk resolves a clean rel too long for one openat2 (issue 16): it cuts
// rel at slashes into pieces of at most chunkMax bytes and opens each
// piece but the last as a folder (O_PATH|O_DIRECTORY) below the descriptor
// of the one before, starting at the root, with the same resolve flags as
// every other access. The confinement is the same as one openat2 of the
// whole path: no piece holds "..", and no symlink is followed anywhere,
// including at a piece's end (see dirHow). It returns the last folder's
// descriptor, which the caller closes, and the piece left, relative to it.
func (r *Root) walk(rel string) (int, string, error) {
	cur := r.fd
	for len(rel) > chunkMax {
		cut := strings.LastIndexByte(rel[:chunkMax+1], '/')
		if cut <= 0 {
			// One name longer than a piece: the kernel refuses it
			// (NAME_MAX is 255), so let it say so.
			if cut = strings.IndexByte(rel, '/'); cut < 0 {
				break
			}
		}
		fd, err := openat2(cur, rel[:cut], &dirHow)
		if cur != r.fd {
			unix.Close(cur)
		}
		if err != nil {
			return -1, "", err
		}
		cur, rel = fd, rel[cut+1:]
	}
	if cur == r.fd {
		// rel is one name of PATH_MAX bytes or more, far past NAME_MAX.
		return -1, "", unix.ENAMETOOLONG
	}
	return cur, rel, nil
}

// OpenNoAtime is Open with O_NOATIME, for the daemon's own reads (the
// journal's, the index's), which must not stamp access times; where the
// daemon may not (not the file's owner and without CAP_FOWNER), it opens
// without it.
func (r *Root) OpenNoAtime(rel string, flags int) (int, error) {
	fd, err := r.Open(rel, flags|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		fd, err = r.Open(rel, flags, 0)
	}
	return fd, err
}

// parent opens the folder holding rel and returns its fd and the last
// component. The root itself has no parent inside the source.
func (r *Root) parent(op, rel string) (int, string, error) {
	if rel == "" {
		return -1, "", r.wrap(op, rel, unix.EINVAL)
	}
	if err := checkRel(rel); err != nil {
		return -1, "", r.wrap(op, rel, err)
	}
	dir, name := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	fd, err := r.openat(dir, &dirHow)
	if err != nil {
		return -1, "", r.wrap(op, rel, err)
	}
	return fd, name, nil
}

// Lstat stats rel without following a final symlink.
func (r *Root) Lstat(rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if rel == "" {
		return st, r.wrap("stat", rel, unix.Fstat(r.fd, &st))
	}
	dfd, name, err := r.parent("stat", rel)
	if err != nil {
		return st, err
	}
	defer unix.Close(dfd)
	err = unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, r.wrap("stat", rel, err)
}

// Mkdir creates the folder rel with mode and gives it to uid:gid (when uid
// is not negative).
// Subdirs returns the names of the folders directly in the folder rel,
// read in one pass over it (the entries' d_type, a stat only where the
// file system gives none): for a caller that would otherwise stat many
// of its names one by one.
func (r *Root) Subdirs(rel string) (map[string]bool, error) {
	fd, err := r.Open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	names, types := readDirTypes(fd)
	dirs := map[string]bool{}
	for i, name := range names {
		t := types[i]
		if t == unix.DT_UNKNOWN {
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				t = unix.DT_DIR
			}
		}
		if t == unix.DT_DIR {
			dirs[name] = true
		}
	}
	return dirs, nil
}

func (r *Root) Mkdir(rel string, mode uint32, uid, gid int) (unix.Stat_t, error) {
	return r.make("mkdir", rel, uid, gid, unix.AT_REMOVEDIR, 0, func(dfd int, name string) error {
		return unix.Mkdirat(dfd, name, maskMode(dfd, mode))
	})
}

// Mknod creates a special file (fifo, socket, device) at rel.
func (r *Root) Mknod(rel string, mode uint32, dev int, uid, gid int) (unix.Stat_t, error) {
	return r.make("mknod", rel, uid, gid, 0, mode&(unix.S_ISUID|unix.S_ISGID), func(dfd int, name string) error {
		return unix.Mknodat(dfd, name, maskMode(dfd, mode), dev)
	})
}

// make creates a name with mk in rel's folder, gives it to uid:gid (the
// folder's group in a setgid folder; nobody when uid is negative) and
// stats it. If the chown fails, the new name is removed again (with
// unlinkFlags) so a failed call leaves nothing behind.
//
// The daemon makes the name as root, so it already belongs to a root
// caller, and is not chowned then: a chown clears the set-group-id bit of
// a group-executable file even when it changes nothing, and a FIFO a root
// caller made set-group-id in a setgid folder of a group it is not in
// lost the bit (LTP's mknod05). When it is chowned, the set-id bits of
// setid, which the caller asked for and the kernel let through (it strips
// the set-group-id bit where the caller may not have it before the
// request is sent), are put back, as Create does.
func (r *Root) make(op, rel string, uid, gid, unlinkFlags int, setid uint32, mk func(dfd int, name string) error) (unix.Stat_t, error) {
	var st unix.Stat_t
	dfd, name, err := r.parent(op, rel)
	if err != nil {
		return st, err
	}
	defer unix.Close(dfd)
	if err := mk(dfd, name); err != nil {
		return st, r.wrap(op, rel, err)
	}
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		unix.Unlinkat(dfd, name, unlinkFlags)
		return st, r.wrap("stat", rel, err)
	}
	uid, gid = ownerIn(dfd, uid, gid)
	if uid < 0 || st.Uid == uint32(uid) && (gid < 0 || st.Gid == uint32(gid)) {
		return st, nil
	}
	if err := unix.Fchownat(dfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		unix.Unlinkat(dfd, name, unlinkFlags)
		return st, r.wrap("chown", rel, err)
	}
	mode := st.Mode
	err = unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && st.Mode&setid != setid {
		// The node itself, never what a name swapped in since points to.
		if fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			var now unix.Stat_t
			if unix.Fstat(fd, &now) == nil && now.Ino == st.Ino && now.Dev == st.Dev && now.Mode&unix.S_IFMT != unix.S_IFLNK {
				ChmodFd(fd, mode&07777)
				unix.Fstat(fd, &st)
			}
			unix.Close(fd)
		}
	}
	return st, r.wrap("stat", rel, err)
}

// Create creates and opens the regular file rel (O_CREAT is added; the
// caller passes O_EXCL when it wants it) and gives it to uid:gid.
func (r *Root) Create(rel string, flags int, mode uint32, uid, gid int) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	dfd, name, err := r.parent("create", rel)
	if err != nil {
		return -1, st, err
	}
	defer unix.Close(dfd)
	mode = maskMode(dfd, mode)
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: resolveFlags,
	}
	fd, err := unix.Openat2(dfd, name, &how)
	if err != nil {
		return -1, st, r.wrap("create", rel, err)
	}
	if st, err = r.give(dfd, fd, rel, mode, uid, gid); err != nil {
		return -1, st, err
	}
	return fd, st, nil
}

// give gives fd, a regular file just made in the folder dfd with mode, to
// uid:gid (see ownerIn) unless it is theirs already, and returns its
// stat; a chown clears set-id bits, so those of mode are put back. On an
// error it closes fd. A file with another name already is not chowned.
func (r *Root) give(dfd, fd int, rel string, mode uint32, uid, gid int) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return st, r.wrap("stat", rel, err)
	}
	uid, gid = ownerIn(dfd, uid, gid)
	if uid >= 0 && (st.Uid != uint32(uid) || (gid >= 0 && st.Gid != uint32(gid))) && st.Nlink <= 1 {
		if err := unix.Fchown(fd, uid, gid); err != nil {
			unix.Close(fd)
			return st, r.wrap("chown", rel, err)
		}
		if mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			unix.Fchmod(fd, mode&07777)
		}
		unix.Fstat(fd, &st)
	}
	return st, nil
}

// Tmpfile opens a regular file with no name in the folder rel (open(2)
// with O_TMPFILE; flags carry the access mode, O_EXCL and the status
// flags) and gives it to uid:gid, as Create does. It gets a name only by
// LinkFd. The backing file system refuses it where it has no O_TMPFILE
// (EOPNOTSUPP).
func (r *Root) Tmpfile(rel string, flags int, mode uint32, uid, gid int) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	if err := checkRel(rel); err != nil {
		return -1, st, r.wrap("tmpfile", rel, err)
	}
	dfd, err := r.openat(rel, &dirHow)
	if err != nil {
		return -1, st, r.wrap("tmpfile", rel, err)
	}
	defer unix.Close(dfd)
	mode = maskMode(dfd, mode)
	how := unix.OpenHow{
		Flags:   uint64(flags&^(unix.O_CREAT|unix.O_TRUNC) | unix.O_TMPFILE | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: resolveFlags,
	}
	fd, err := openat2(dfd, ".", &how)
	if err != nil {
		return -1, st, r.wrap("tmpfile", rel, err)
	}
	if st, err = r.give(dfd, fd, rel, mode, uid, gid); err != nil {
		return -1, st, err
	}
	return fd, st, nil
}

// LinkFd gives the open file fd, one with no name (Tmpfile), the name
// rel. It links through /proc/self/fd, as linkat(2)'s AT_EMPTY_PATH
// would without needing CAP_DAC_READ_SEARCH, so the backing file system
// applies its own rule: a file with no links is linkable only if it was
// made by O_TMPFILE without O_EXCL (ENOENT otherwise), and only within
// its own file system (EXDEV).
func (r *Root) LinkFd(fd int, rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	nfd, nname, err := r.parent("link", rel)
	if err != nil {
		return st, err
	}
	defer unix.Close(nfd)
	if err := unix.Linkat(unix.AT_FDCWD, procPath(fd), nfd, nname, unix.AT_SYMLINK_FOLLOW); err != nil {
		return st, r.wrap("link", rel, err)
	}
	err = unix.Fstatat(nfd, nname, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, r.wrap("stat", rel, err)
}

// Unlink removes the non-folder rel.
func (r *Root) Unlink(rel string) error {
	dfd, name, err := r.parent("unlink", rel)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	return r.wrap("unlink", rel, unix.Unlinkat(dfd, name, 0))
}

// Rmdir removes the empty folder rel.
func (r *Root) Rmdir(rel string) error { return r.rmdir(rel, nil) }

// RmdirStat removes the empty folder rel, as Rmdir, and returns its
// attributes as they were just before (for a process still working in
// it: orphan.go in package fs).
func (r *Root) RmdirStat(rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := r.rmdir(rel, &st)
	return st, err
}

// rmdir removes the empty folder rel, first filling st with its stat
// when st is not nil.
func (r *Root) rmdir(rel string, st *unix.Stat_t) error {
	dfd, name, err := r.parent("rmdir", rel)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if st != nil {
		if err := unix.Fstatat(dfd, name, st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return r.wrap("rmdir", rel, err)
		}
	}
	return r.wrap("rmdir", rel, unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR))
}

// Symlink creates a symlink at rel pointing at target (stored as given; the
// daemon never follows it).
func (r *Root) Symlink(target, rel string, uid, gid int) (unix.Stat_t, error) {
	return r.make("symlink", rel, uid, gid, 0, 0, func(dfd int, name string) error {
		return unix.Symlinkat(target, dfd, name)
	})
}

// Readlink reads the symlink rel.
func (r *Root) Readlink(rel string) ([]byte, error) {
	dfd, name, err := r.parent("readlink", rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			return nil, r.wrap("readlink", rel, err)
		}
		if n < len(buf) {
			return buf[:n], nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Link makes newRel another name of oldRel (never following a symlink).
func (r *Root) Link(oldRel, newRel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	ofd, oname, err := r.parent("link", oldRel)
	if err != nil {
		return st, err
	}
	defer unix.Close(ofd)
	nfd, nname, err := r.parent("link", newRel)
	if err != nil {
		return st, err
	}
	defer unix.Close(nfd)
	if err := unix.Linkat(ofd, oname, nfd, nname, 0); err != nil {
		return st, r.wrap("link", newRel, err)
	}
	err = unix.Fstatat(nfd, nname, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, r.wrap("stat", newRel, err)
}

// Rename renames oldRel to newRel with renameat2 flags (RENAME_NOREPLACE,
// RENAME_EXCHANGE, RENAME_WHITEOUT).
func (r *Root) Rename(oldRel, newRel string, flags uint) error {
	ofd, oname, err := r.parent("rename", oldRel)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	nfd, nname, err := r.parent("rename", newRel)
	if err != nil {
		return err
	}
	defer unix.Close(nfd)
	return r.wrap("rename", oldRel, unix.Renameat2(ofd, oname, nfd, nname, flags))
}

// ownerIn adjusts the group a new file in the folder dfd gets: a setgid
// folder gives its own group to everything created in it, as the kernel
// did when the daemon created the file, so the caller's gid is not forced.
func ownerIn(dfd int, uid, gid int) (int, int) {
	if uid < 0 {
		return uid, gid
	}
	var st unix.Stat_t
	if unix.Fstat(dfd, &st) == nil && st.Mode&unix.S_ISGID != 0 {
		return uid, -1
	}
	return uid, gid
}

// procPath names an open descriptor through /proc so calls that have no
// fd or *at form for an O_PATH descriptor (xattrs; chmod and utimes on
// kernels without their AT_EMPTY_PATH forms, fdattr.go) reach exactly the
// inode that was opened without following anything.
func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// ProcPath names an open descriptor through /proc (see procPath).
func ProcPath(fd int) string { return procPath(fd) }

// OpenPath opens rel itself with O_PATH (a symlink is opened, not
// followed), for several attribute changes on one resolution.
func (r *Root) OpenPath(rel string) (int, error) { return r.openPath("open", rel) }

// openPath opens rel itself as O_PATH (a symlink is opened, not followed).
func (r *Root) openPath(op, rel string) (int, error) {
	fd, err := r.Open(rel, unix.O_PATH, 0)
	if err != nil {
		var pe *PathErr
		if errors.As(err, &pe) {
			pe.Op = op
		}
		return -1, err
	}
	return fd, nil
}

// Truncate sets the size of the regular file rel.
func (r *Root) Truncate(rel string, size int64) error {
	fd, err := r.Open(rel, unix.O_WRONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return r.wrap("truncate", rel, unix.Ftruncate(fd, size))
}

// Utimens sets the access and modification times of rel (UTIME_OMIT in a
// Timespec leaves that one alone).
func (r *Root) Utimens(rel string, ts [2]unix.Timespec) error {
	fd, err := r.openPath("utimes", rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return r.wrap("utimes", rel, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		// utimensat with AT_SYMLINK_NOFOLLOW on the parent reaches the link itself.
		dfd, name, err := r.parent("utimes", rel)
		if err != nil {
			return err
		}
		defer unix.Close(dfd)
		return r.wrap("utimes", rel, unix.UtimesNanoAt(dfd, name, ts[:], unix.AT_SYMLINK_NOFOLLOW))
	}
	return r.wrap("utimes", rel, UtimesFd(fd, ts[:]))
}

// Statfs reports the filesystem holding the root.
func (r *Root) Statfs() (unix.Statfs_t, error) {
	var st unix.Statfs_t
	err := unix.Fstatfs(r.fd, &st)
	return st, r.wrap("statfs", "", err)
}

// Alive reports whether the root folder is still linked at its host path
// as the same inode (it may have been removed or replaced meanwhile).
func (r *Root) Alive() bool {
	var st unix.Stat_t
	if err := unix.Fstat(r.fd, &st); err != nil || st.Nlink == 0 {
		return false
	}
	var cur unix.Stat_t
	if err := unix.Stat(r.path, &cur); err != nil {
		return false
	}
	return cur.Dev == r.dev && cur.Ino == r.ino
}

// String describes the root for logs.
func (r *Root) String() string { return fmt.Sprintf("root(%s)", r.path) }

// Errno extracts the errno of err, or 0.
func Errno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}
