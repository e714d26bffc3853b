// Package uring serves a FUSE connection over io_uring queues (FUSE over
// io_uring, kernel protocol 7.42, issue 20), with /dev/fuse kept for what the
// kernel still sends there.
//
// It owns the transport only: the io_uring instances, the ring entries (a
// number per possible CPU) and their buffers, the register /
// commit-and-fetch cycle, and reading /dev/fuse beside them (with routing
// INTERRUPTs to ring requests); for the tests, also opening /dev/fuse,
// mounting it and answering INIT. It knows nothing
// of go-fuse: every request is handed to a Handler as a raw FUSE request
// (an iovec holding fuse_in_header, the op's argument struct and its
// payload) and the Handler writes the raw reply. fs/uring.go plugs go-fuse's
// fuse.ProtocolServer in as that Handler.
//
// Two ways in. Attach (what neuralisfs uses): another server (go-fuse's)
// mounts and answers INIT, then Attach registers the rings on the same
// connection and from then on reads the connection's /dev/fuse too, so
// that server must stop reading it (fs/uring.go starts go-fuse's Serve only
// once Rings.Wait returns). Mount: this package mounts and answers INIT
// itself with the same Handler; the tests use it.
//
// The system calls are io_uring_setup(2), io_uring_enter(2) and mmap(2)
// from golang.org/x/sys/unix; the rings are mapped and driven here (no
// io_uring library).
//
// # The protocol as Linux 6.18 implements it (fs/fuse/dev_uring.c)
//
// Switch. The module parameter /sys/module/fuse/parameters/enable_uring
// (bool, mode 0644, default N) gates it. With it off, the kernel does not
// offer FUSE_OVER_IO_URING in INIT and every ring command fails with
// EOPNOTSUPP. Once a connection has negotiated it, turning the switch off
// does not take it away.
//
// Negotiation. The kernel sets FUSE_OVER_IO_URING (bit 41 of the 64-bit
// flags, so bit 9 of fuse_init_in.flags2) in INIT when the switch is on; the
// server sets the same bit in fuse_init_out.flags2. INIT itself always
// travels over /dev/fuse. Ring commands are refused with EAGAIN until the
// INIT reply has been written (fc->initialized).
//
// Rings. The server creates io_uring instances with IORING_SETUP_SQE128
// (the command block of a 128-byte SQE carries struct fuse_uring_cmd_req;
// a 64-byte SQE is refused with EINVAL) and, as libfuse does,
// IORING_SETUP_CQE32. The kernel has num_possible_cpus() queues (qid 0..n-1);
// a request goes to the queue of the CPU its caller runs on
// (task_cpu(current)), so every queue must be served. Any number of
// io_uring instances may carry the commands; this package gives every ring
// entry its own (two SQEs), and its own thread, bound to the queue's CPU
// (see "Cost of a request").
//
// Commands. Each is an IORING_OP_URING_CMD SQE on the /dev/fuse fd with
// sqe->cmd_op one of FUSE_IO_URING_CMD_REGISTER (1) or
// FUSE_IO_URING_CMD_COMMIT_AND_FETCH (2), and in the SQE's command area
// (byte 48 on) struct fuse_uring_cmd_req {u64 flags; u64 commit_id; u16 qid;
// u8 padding[6]}.
//
// REGISTER (once per ring entry): sqe->addr points at an array of two
// iovecs and sqe->len is 2. iov[0] is the entry's header block, at least
// sizeof(struct fuse_uring_req_header) = 288 bytes:
//
//	in_out[128]      fuse_in_header of a request; the server writes fuse_out_header here
//	op_in[128]       the request's first argument (its op struct, e.g. fuse_getattr_in), may be empty
//	ring_ent_in_out  {u64 flags; u64 commit_id; u32 payload_sz; u32 padding; u64 reserved}
//
// iov[1] is the payload buffer; it must hold at least max(8192, max_write,
// max_pages*PAGE_SIZE) from the INIT reply, or REGISTER fails with EINVAL
// (and the connection falls back to /dev/fuse for good). The command does
// not complete at once: the kernel keeps it (EIOCBQUEUED) and completes it
// (CQE res 0) when it has put a request into the entry. The ring becomes
// ready, and the kernel starts routing requests to it instead of /dev/fuse,
// the moment every queue has at least one registered entry. Until then the
// kernel holds every new request of a connection that negotiated
// FUSE_OVER_IO_URING (fuse_block_alloc), so a server that negotiates it
// must register every queue, or have a REGISTER refused (which turns
// io_uring off for the connection and releases the requests); anything
// else hangs the mount.
//
// A request in an entry: in_out holds fuse_in_header (its len is the full
// length the request would have on /dev/fuse), op_in holds the first
// argument (since 6.14 the kernel gives ops with no op struct, such as
// LOOKUP, an empty first argument, so op_in's length is always
// len - 40 - payload_sz), the payload buffer holds the remaining arguments
// concatenated (names, WRITE data), and ring_ent_in_out.commit_id (the
// request's unique) and payload_sz describe it. Concatenating in_header,
// op_in and the payload gives exactly the bytes /dev/fuse would have
// delivered.
//
// COMMIT_AND_FETCH: the server writes fuse_out_header {len, error, unique}
// into in_out, all the reply's arguments (op struct and data together) into
// the payload buffer and their total length into ring_ent_in_out.payload_sz,
// then submits the command with commit_id = the request's unique and the
// entry's qid (sqe->addr is not read again; the buffers are the ones given at
// REGISTER). The kernel finishes the request and, in the same command, puts
// the next request of that queue into the entry, completing the CQE when
// there is one. A header with unique 0 (a notification) is rejected:
// notifications stay on /dev/fuse.
//
// Free entries. The kernel hands a request to a free entry of the
// caller's CPU's queue (fuse_uring_queue_fuse_req); with none free it
// keeps the request on the queue until one of that queue's entries
// commits a reply, and only a COMMIT_AND_FETCH takes a kept request up: an
// entry registered later serves requests that arrive after it, not the
// ones kept already. So requests that take long to answer, holding every
// entry of a queue, held up every other caller on that CPU (fixed depth,
// as libfuse has). Here a queue registers another entry whenever taking
// a request leaves it fewer than two free (Rings.took), one at a time, up
// to 64 entries a queue and 1,024 in all; REGISTER is accepted while the
// ring serves. Entries are never unregistered (the protocol has no command
// for it): a queue keeps what it grew to, a thread and a payload buffer
// each, whose pages are taken only as requests fill them. Requests that
// arrive together while none is free still wait for the queue's next
// reply, and then take the new entries' place in line.
//
// What stays on /dev/fuse. INIT, FORGET and BATCH_FORGET, INTERRUPT (and
// the replies to them), notifications (writes with unique 0), and every
// request the kernel queued before the ring became ready. So a server keeps
// reading /dev/fuse for the life of the mount.
//
// FORGETs. The kernel queues one FORGET per inode it lets go of (every file
// of an rm -rf), and a read of /dev/fuse that finds several queued gets
// them as one BATCH_FORGET. A reader here waits ForgetLinger (1 ms) after
// a FORGET before it reads again, so it wakes once for the FORGETs of a
// millisecond rather than once for each: on 2 vCPUs an rm -rf of 2,000
// files through the rings read /dev/fuse 1,980 times before and about 160
// after, and took 108-114 ms instead of 123-131 ms (tmpfs, index and
// journal off, alternating binaries), the daemon's CPU 7 % less.
//
// Interrupts. When a caller waiting for a ring request is signalled, the
// kernel queues the INTERRUPT on /dev/fuse like any other
// (fuse_io_uring_ops.send_interrupt is fuse_dev_queue_interrupt), with the
// unique of the request plus FUSE_INT_REQ_BIT and the request's unique in
// fuse_interrupt_in. It does so only once the request is in an entry
// (FR_SENT, set in fuse_uring_prepare_send just before the entry's command
// completes); a request interrupted while it still waits for a free entry
// gets no INTERRUPT (unlike on /dev/fuse, where the read that hands the
// request over queues it), so it runs to its end. A reply to the INTERRUPT
// is looked up among the /dev/fuse requests only: for a ring request it
// fails with ENOENT, and an EAGAIN (the server does not know the request
// yet) is not retried as it is for a /dev/fuse request. So the reader of
// /dev/fuse must hand the INTERRUPT to the code running the ring request,
// and get it there even when it arrives before the entry's thread has taken
// the request up: each entry publishes the unique it answers, the reader
// matches against them, keeps an INTERRUPT nothing matched for a while (an
// entry taking that unique up delivers it), and retries delivery while the
// Handler answers EAGAIN. The Handler that runs ring requests also answers
// what the reader reads, so one that knows its requests (go-fuse's
// ProtocolServer) finds /dev/fuse requests as well.
//
// Teardown. On unmount or abort the kernel completes every kept command
// with -ENOTCONN (entries in user space are released when the kernel stops
// the queues); a command submitted after that fails with ENOTCONN, and a
// read of /dev/fuse with ENODEV (ECONNABORTED after an abort), whereupon
// the requests still being answered are cancelled. When the daemon dies,
// io_uring cancels the kept commands (IO_URING_F_CANCEL) and the
// connection ends as it would with /dev/fuse closed: callers whose
// requests the dead rings held get ECANCELED (seen on 6.18), later ones
// ENOTCONN (or ECONNABORTED while the queues are torn down), until the
// mount is unmounted.
//
// Task work. The kernel copies a request into an entry in the context of
// the task that submitted the command (io_uring_cmd_complete_in_task), so
// each queue's goroutine is locked to its OS thread and submits and reaps
// all of its commands there.
//
// # Cost of a request
//
// A ring request costs its entry's thread one io_uring_enter: the reply's
// COMMIT_AND_FETCH is submitted and the next request waited for in the same
// call, and when the queue holds a request already the kernel puts it into
// the entry within that call. The thread answers the request itself (no
// goroutine hop; go-fuse's ProtocolServer runs on it) from the entry's
// mapped buffers, and the transport allocates nothing per request
// (ProtocolServer allocates its request struct). The kernel hands a request
// to the entry freed last (fuse_uring_ent_avail puts it at the head of the
// free list), so a caller making one request at a time wakes the same hot
// thread every time; the other entries of its queue wait for parallel
// callers. On an open+close loop (three requests each) the daemon switches
// context about 0.75 times a request over the rings (0.8 before the
// binding below) and 0.9 over /dev/fuse,
// and Go's scheduler seldom gets in the way: a locked entry thread woke to
// find no free P (stoplockedm) 196 times in 60,000 requests.
//
// What cost was the CPU. The kernel picks the queue of the caller's CPU, and
// the entry threads used to run wherever the scheduler woke them, mostly on
// the other, idle CPU, so a request tended to be a cross-CPU wake-up there
// and back (an IPI each way, a VM exit under a hypervisor). Each entry
// thread now binds itself to its queue's CPU (sched_setaffinity, as libfuse
// binds its queue threads; left unbound where that CPU is not the process's
// to use), so the caller sleeps, its CPU switches to the entry's thread,
// and the reply switches back. On 2 vCPUs that took an open+close over the
// rings from 49-55 µs to 31 µs (/dev/fuse: 49-58 µs) and roughly halved
// the daemon's CPU time per request, quiet or under a load average of 25
// (README, "FUSE over io_uring", has the figures).
// IORING_SETUP_DEFER_TASKRUN with SINGLE_ISSUER (task work run only in
// io_uring_enter), and registering the /dev/fuse descriptor as a fixed file,
// made no measurable difference and are not used.
package uring
