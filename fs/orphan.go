package fs

import (
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/held"
	"github.com/neuralis/neuralisfs/mounts"
)

// A file unlinked while it is open has no name left in its source, but
// POSIX still lets its holders change it: fchmod, fchown, futimens,
// ftruncate and the f*xattr calls reach us as node operations, often
// without a file handle (the kernel passes one only for ftruncate). Such
// an orphan is reached through the descriptor of one of its open handles.
// It has no uri, so there is no rule to decide: whoever holds an open
// file was let in when it was opened, as on any filesystem. The same goes
// for a folder removed (rmdir, or a rename over it) while a process holds
// it open: fstat and fchmod of it work on a plain folder (its link count
// then 0), and answered ESTALE here (xfstests generic/035) until its open
// folder handles joined the set. A folder removed through the mount that
// is only a process's working folder has no handle: rmdir keeps its
// attributes as they were (removedAttr), so stat(".") there answers them
// with link count 0 and ls lists it empty, as on a plain folder, where
// both answered ESTALE or ENOENT before; so does one a rename through
// the mount replaced (replacedDir). (One removed behind the mount has
// nothing kept and still answers ESTALE.)

// opened is an open file or folder of a node whose backing descriptor
// can be duplicated.
type opened interface {
	dupFd() (int, error)
}

// handleSet is the open files (and folders) of one node. Nearly every
// node has at most one open at a time, so that one is kept without
// allocating.
type handleSet struct {
	mu   sync.Mutex
	one  opened
	more []opened
}

func (s *handleSet) add(h opened) {
	s.mu.Lock()
	if s.one == nil {
		s.one = h
	} else {
		s.more = append(s.more, h)
	}
	s.mu.Unlock()
}

func (s *handleSet) remove(h opened) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.one == h {
		s.one = nil
		if n := len(s.more); n > 0 {
			s.one, s.more[n-1] = s.more[n-1], nil
			s.more = s.more[:n-1]
		}
		return
	}
	for i, o := range s.more {
		if o == h {
			last := len(s.more) - 1
			s.more[i], s.more[last] = s.more[last], nil
			s.more = s.more[:last]
			return
		}
	}
}

// open reports whether any handle is open.
func (s *handleSet) open() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.one != nil
}

// dup returns a new descriptor of one open handle's file, for the caller
// to close; the handle may be released meanwhile without harm.
func (s *handleSet) dup() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.one == nil {
		return -1, false
	}
	for _, h := range append([]opened{s.one}, s.more...) {
		if fd, err := h.dupFd(); err == nil {
			return fd, true
		}
	}
	return -1, false
}

// reopenable returns a new descriptor (to close) of an open file handle
// that uid opened (any uid when anyone) with at least the access asked
// (read, write), and the held layer the file is a copy in (nil when it is
// a backing file); ok is false when there is none.
func (s *handleSet) reopenable(uid uint32, anyone, read, write bool) (fd int, lay *held.Layer, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.one == nil {
		return -1, nil, false
	}
	for _, o := range append([]opened{s.one}, s.more...) {
		h, isFile := o.(*fileHandle)
		if !isFile || !anyone && (h.by.uid != uid || read && !h.reads || write && !h.writer) {
			continue
		}
		if fd, err := h.dupFd(); err == nil {
			return fd, h.lay, true
		}
	}
	return -1, nil, false
}

// dupFd is a new descriptor of the handle's backing file.
func (f *fileHandle) dupFd() (int, error) {
	return unix.FcntlInt(uintptr(f.fd()), unix.F_DUPFD_CLOEXEC, 0)
}

// dupFd is a new descriptor of the handle's backing folder (EBADF once
// released).
func (d *dirHandle) dupFd() (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return -1, unix.EBADF
	}
	return unix.FcntlInt(uintptr(d.fd), unix.F_DUPFD_CLOEXEC, 0)
}

// orphanFd is a descriptor (to close) of the node's file when the node has
// no name left but is still open; ok is false otherwise.
func (n *node) orphanFd() (fd int, ok bool) {
	if n.top {
		return -1, false
	}
	if _, named := n.rel(); named {
		return -1, false
	}
	return n.handles.dup()
}

// orphanChange decides a change (setattr, an xattr set or removed, an
// inode flag) made through fd, an open file of a node with no name left
// on the mount: it may reach the file only when the file has no name left
// on disk either (a link count of 0), or when no rule decides anything
// (no policy; not a view). A node also loses its name when a principal
// whose writes are held removes or replaces it in its layer, or when a
// name is dropped on the mount while the file keeps another on disk; the
// file is then still a backing file at some uri, and a change made
// through a descriptor opened only to read it skipped review and every
// rule (an agent's held `rm` of a file it had open, then `truncate
// /proc/self/fd/N` or `setfattr`, changed the backing file). Such a change
// answers ESTALE, as a name gone stale does: a call by path (truncate,
// chmod, setxattr on /proc/self/fd/N included) is retried by the kernel
// with a fresh lookup, and meets the file at its name, if the caller has
// one, and the rules there.
func (n *node) orphanChange(fd int) syscall.Errno {
	if !n.ruled() {
		return 0
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return toErrno(err)
	}
	if st.Nlink != 0 {
		return syscall.ESTALE
	}
	return 0
}

// ruled reports whether rules decide requests on n's mount: a policy
// that is not trivial, or a view.
func (n *node) ruled() bool {
	s := n.t.fs.state()
	return !s.trivial || n.t.view != ""
}

// orphanOpen opens n again, a file with no name left on the mount that
// is still open: open("/proc/self/fd/N") of a file removed while open
// reaches the daemon so, with no name to go by (a plain folder opens the
// file; here it answered ESTALE, which the kernel cannot retry for such a
// path). The file is opened again through the descriptor of one of its
// open handles, with flags. Where rules decide, the file must have no name
// left on disk (see orphanChange; ESTALE otherwise, as before), and the
// caller's uid must hold an open handle of it with the access it asks for
// (EACCES otherwise): a reopen gives no access the rules did not grant at
// an open by name. The kernel has checked the file's mode bits first
// (default_permissions). A copy in a held layer stays held: the new
// handle is bounded by max_bytes as the first.
func (n *node) orphanOpen(w who, flags uint32) (*fileHandle, syscall.Errno) {
	if errno := n.t.fs.opens.room(quotaKey(w)); errno != 0 {
		return nil, errno
	}
	wr := writing(flags)
	ruled := n.ruled()
	fd, lay, ok := n.handles.reopenable(w.uid, !ruled, flags&syscall.O_ACCMODE != syscall.O_WRONLY, wr)
	if !ok {
		if ruled && n.handles.open() {
			var st unix.Stat_t
			if d, ok := n.orphanFd(); ok {
				err := unix.Fstat(d, &st)
				unix.Close(d)
				if err == nil && st.Nlink == 0 {
					return nil, syscall.EACCES
				}
			}
		}
		return nil, syscall.ESTALE
	}
	defer unix.Close(fd)
	if ruled {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, toErrno(err)
		}
		if st.Nlink != 0 {
			return nil, syscall.ESTALE
		}
	}
	// As Open; no O_NOFOLLOW, which would refuse the magic link.
	oflags := int(flags)&^(syscall.O_APPEND|fuse.FMODE_EXEC|syscall.O_CREAT|syscall.O_EXCL) | syscall.O_NOCTTY | syscall.O_CLOEXEC
	nfd, err := unix.Open(mounts.ProcPath(fd), oflags, 0)
	if err != nil {
		return nil, toErrno(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(nfd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(nfd)
		return nil, syscall.ESTALE
	}
	h := newFileHandle(n, w, "", nfd, wr, flags)
	if lay != nil {
		h.hold(lay)
		if wr {
			lay.Opened(nfd) // its release tells the layer (Closed)
		}
	}
	if wr && flags&syscall.O_TRUNC != 0 && w.uid != 0 {
		killSetID(nfd)
	}
	return h, 0
}

// orphanSetattr applies a setattr to an unlinked, open file.
func (n *node) orphanSetattr(fh *fileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	fd := -1
	if fh != nil {
		fd = fh.fd()
	} else {
		d, ok := n.orphanFd()
		if !ok {
			return syscall.ENOENT
		}
		defer unix.Close(d)
		fd = d
	}
	if errno := n.orphanChange(fd); errno != 0 {
		return errno
	}
	trunc := func(sz int64) error { return unix.Truncate(mounts.ProcPath(fd), sz) }
	if errno := setattrFd(fd, in, trunc, nil); errno != 0 {
		return errno
	}
	return n.orphanAttr(fd, out)
}

func (n *node) orphanAttr(fd int, out *fuse.AttrOut) syscall.Errno {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return toErrno(err)
	}
	n.fill(n.t.fs.state(), &out.Attr, &st)
	return 0
}

// orphanXattr runs an xattr call on an unlinked, open file; ok is false
// when the node is not one. A call that changes the file (change) is
// decided by orphanChange first.
func (n *node) orphanXattr(change bool, call func(fd int) (int, error)) (int, syscall.Errno, bool) {
	fd, ok := n.orphanFd()
	if !ok {
		return 0, 0, false
	}
	defer unix.Close(fd)
	if change {
		if errno := n.orphanChange(fd); errno != 0 {
			return 0, errno, true
		}
	}
	sz, err := call(fd)
	return sz, toErrno(err), true
}

// removedAttr fills out, when out is not nil, with the attributes rmdir
// through the mount kept for the node, a folder with no name left (see
// above); it reports whether there were any.
func (n *node) removedAttr(out *fuse.AttrOut) bool {
	st := n.removed.Load()
	if st == nil {
		return false
	}
	if _, named := n.rel(); named {
		return false
	}
	if out != nil {
		n.fill(n.t.fs.state(), &out.Attr, st)
		out.Nlink = 0 // fill shows a folder's count as 1 under a policy
	}
	return true
}

// replacedDir is the folder node the kernel holds at name in n, which a
// rename of a folder (mode) onto that name replaces, and its attributes
// as stat finds them before the rename; nil when the rename replaces no
// such folder (an exchange keeps both).
func (n *node) replacedDir(name string, mode uint32, flags uint32, stat func() (unix.Stat_t, error)) (*node, *unix.Stat_t) {
	if mode&unix.S_IFMT != unix.S_IFDIR || flags&unix.RENAME_EXCHANGE != 0 {
		return nil, nil
	}
	ch := n.GetChild(name)
	if ch == nil || ch.StableAttr().Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, nil
	}
	d, ok := ch.Operations().(*node)
	if !ok {
		return nil, nil
	}
	st, err := stat()
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, nil
	}
	return d, &st
}

// replaced keeps st, the attributes of the folder n that rmdir removed
// or a rename replaced, for removedAttr; n may be nil.
func (n *node) replaced(st *unix.Stat_t) {
	if n == nil {
		return
	}
	st.Nlink = 0
	n.removed.Store(st)
}
