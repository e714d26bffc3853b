package fs

import (
	"encoding/binary"
	"reflect"
	"sync"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// expirer tells the kernel that a name's cached entry has expired
// without taking the name away (FUSE_NOTIFY_INVAL_ENTRY with
// FUSE_EXPIRE_ONLY, kernel 6.2 and later): the next walk through the name
// asks LOOKUP again, and the kernel keeps its dentry when the answer is
// the node it had, drops it when another node or none. Dropping the name
// outright (go-fuse's NotifyEntry) takes a folder away from every process
// working in it — getcwd answers ENOENT — even when the folder is still
// there.
//
// The watcher's report of a name no node is known for must drop a cached
// "no such file" there, so it used to drop the name, whatever the kernel
// held; a LOOKUP answered in between (a process's cd into the folder)
// then lost its new working folder at once (TestHeldGitRunsIsLeftForAReviewer
// failed so, about once in fifteen runs under load). An expired entry
// is looked up again instead: a negative one always, a folder's kept
// when it is still the folder.
//
// go-fuse writes no such notification, so the expirer writes it to its own
// duplicate of the mount's /dev/fuse descriptor: notifications stay on
// /dev/fuse over io_uring too. Without the descriptor or the kernel's
// support, entry reports false and the caller drops the name as before.
type expirer struct {
	mu sync.RWMutex
	fd int
	on bool
}

// open starts sending on a duplicate of fd, the mount's /dev/fuse
// descriptor, when the kernel's INIT (in) says it takes FUSE_EXPIRE_ONLY.
func (e *expirer) open(fd int, in *fuse.InitIn) {
	if fd < 0 || in.Flags64()&fuse.CAP_HAS_EXPIRE_ONLY == 0 || nodeIDField == nil {
		return
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return
	}
	e.mu.Lock()
	if e.on {
		unix.Close(e.fd)
	}
	e.fd, e.on = dup, true
	e.mu.Unlock()
}

// close stops sending and closes the descriptor (the mount is served no
// more): its number may then be reused, so no write may follow.
func (e *expirer) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.on {
		unix.Close(e.fd)
		e.on = false
	}
}

// fuseNotifyInvalEntry and fuseExpireOnly are the kernel's
// FUSE_NOTIFY_INVAL_ENTRY code and its flag (include/uapi/linux/fuse.h).
const (
	fuseNotifyInvalEntry = 3
	fuseExpireOnly       = 1
)

// entry expires name in the folder dir. It reports false when it could
// not say so to the kernel (no descriptor, no support, or an error other
// than the kernel holding no such entry).
func (e *expirer) entry(dir *fusefs.Inode, name string) bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if !e.on {
		return false
	}
	// struct fuse_out_header, struct fuse_notify_inval_entry_out, the
	// name and its NUL.
	b := make([]byte, 16+16+len(name)+1)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint32(b[4:], fuseNotifyInvalEntry) // error: the notification's code; unique 0
	ne.PutUint64(b[16:], nodeID(dir))
	ne.PutUint32(b[24:], uint32(len(name)))
	ne.PutUint32(b[28:], fuseExpireOnly)
	copy(b[32:], name)
	_, err := unix.Write(e.fd, b)
	return err == nil || err == syscall.ENOENT
}

// nodeIDField is the index of go-fuse's Inode.nodeId, the id the kernel
// knows a node by, which go-fuse keeps unexported; nil when a go-fuse
// version has no such field of that type (the expirer then stays off).
// It is set once, when go-fuse registers the node, before any request
// or notification can name it.
var nodeIDField = func() []int {
	f, ok := reflect.TypeFor[fusefs.Inode]().FieldByName("nodeId")
	if !ok || f.Type.Kind() != reflect.Uint64 {
		return nil
	}
	return f.Index
}()

// nodeID is the id the kernel knows in by.
func nodeID(in *fusefs.Inode) uint64 {
	return reflect.ValueOf(in).Elem().FieldByIndex(nodeIDField).Uint()
}

// expireEntry expires name in dir in this mount's kernel cache, or drops
// it where the kernel cannot expire it.
func (t *tree) expireEntry(dir *fusefs.Inode, name string) {
	if !t.expire.entry(dir, name) {
		dir.NotifyEntry(name)
	}
}
