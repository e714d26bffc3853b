// Package watchdog keeps a killed daemon from hanging in the kernel for
// good (issue 16).
//
// # The hang
//
// The daemon tells the kernel to drop cached names (go-fuse's
// Inode.NotifyEntry and NotifyDelete: a write to /dev/fuse that the kernel
// handles in fuse_reverse_inval_entry) from background goroutines. The
// kernel takes the folder's inode lock for that, uninterruptibly, and a
// LOOKUP, CREATE, UNLINK… another process sent into the same folder holds
// that lock until the daemon answers it. Dropping cached pages
// (NotifyContent) can wait the same way for a page a READ holds. If
// SIGKILL lands then, every other thread of the daemon ends, but the
// thread in the kernel cannot: it waits for the lock, the lock's holder
// waits for an answer no thread is left to give, and the half-dead process
// keeps its descriptor table, so /dev/fuse stays open and the kernel never
// aborts the connection. Nothing ends that but a write to
// /sys/fs/fuse/connections/N/abort. The same goes for any thread a kill
// finds waiting in the kernel on the daemon's own mounts (an io_uring
// queue's teardown, say).
//
// # The watchdog
//
// Start runs a second process, `neuralisfs __watchdog PID` (Command, the
// same binary), before the daemon mounts anything. It sleeps until the
// daemon ends, costing nothing on the request path, and then:
//
//   - When every thread of the daemon is gone within Grace, it exits: the
//     kernel aborted the connections itself when the last /dev/fuse
//     descriptor closed.
//   - When threads linger, every one of them is exiting or has SIGKILL
//     pending (a daemon that is merely busy is never touched), and the
//     dying process still holds /dev/fuse descriptors of its own, it reads
//     their FUSE connections (the fuse_connection line of their fdinfo,
//     Linux ≥ 6.16) and aborts those through the FUSE control
//     filesystem. Every waiting request then fails, the folder lock is
//     released, the stuck thread finishes its write and the process ends. The mounts are left
//     stale ("transport endpoint is not connected", or "software caused
//     connection abort"), which `neuralisfs mount` and `neuralisfs
//     unmount` clear. Only connections the dying process itself holds are
//     aborted, so a mount of another daemon, or a newer one at the same
//     place, is never touched.
//
// How it learns that the daemon ends: the kernel sends a child its
// parent-death signal when the thread that started it ends. Start starts
// the watchdog from a goroutine that keeps its OS thread for the whole
// life of the daemon, blocked in waitid(2) on the watchdog, so that thread
// ends only when the daemon exits or is killed, and a thread stuck in the
// kernel cannot be it. A pidfd of the daemon tells when the last thread is
// gone. (A pidfd of the main thread cannot tell by itself: since Linux
// 6.15 it reports nothing while other threads live.)
//
// The watchdog holds no /dev/fuse descriptor (it closes any it inherits,
// and the daemon starts it before mounting: go-fuse opens /dev/fuse
// without close-on-exec). Descriptors the daemon itself inherited from
// whoever started it are another server's connections: the watchdog notes
// them when it starts and never aborts them. It ignores SIGINT, SIGTERM
// and SIGHUP (a Ctrl-C or `systemctl stop` is for the daemon, which it
// outlives by a moment) and sits in its own process group. A SIGKILL sent
// to it too (systemd's final kill of a whole unit, say) ends the
// protection; the manual abort above still works.
//
// The FUSE control filesystem: /sys/fs/fuse/connections when it is
// mounted there (systemd mounts it; its files belong to each mount's
// owner, so a daemon run by a user can abort its own mounts), else a
// private, detached mount of it (fsopen(2)/fsmount(2), root only) that no
// one else sees and that goes away with the descriptor.
//
// # Why a process
//
// The invalidations cannot avoid the lock: Linux 6.18 takes the folder's
// lock in fuse_reverse_inval_entry before it looks at the name or the
// flags (FUSE_EXPIRE_ONLY included), and NotifyContent can wait on a
// page as well. FUSE_NOTIFY_INC_EPOCH takes no lock but drops every name
// the kernel caches for the mount. A kernel request timeout
// (FUSE_REQUEST_TIMEOUT, fs.fuse.default_request_timeout) aborts a live
// mount whenever any request is slow, slow backing folders included. And
// no thread of the killed daemon can help: SIGKILL ends them all but the
// stuck one. Another process can, and it need do nothing until the
// daemon dies.
//
// The package knows FUSE only through /proc and the control filesystem:
// it does not import go-fuse.
package watchdog
