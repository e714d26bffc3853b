package fs

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/gitfs"
	"github.com/neuralis/neuralisfs/internal/asuser"
	"github.com/neuralis/neuralisfs/internal/held"
	"github.com/neuralis/neuralisfs/internal/uring"
	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// Indexer is what the mount tells the full-text index. Every method must
// return at once (the index queues); none is called on a read path.
type Indexer interface {
	Update(uri string)
	Remove(uri string)
	RemovePrefix(uriPrefix string)
	Rename(oldURI, newURI string, isDir bool)
}

// Searcher answers `.neuralis/search/<query>` for one principal p (nil:
// the owner): canRead filters hits before they are counted, and p's held
// writes are searched as p sees them (README "Held writes").
type Searcher interface {
	SearchText(ctx context.Context, query string, p *policy.Principal, canRead func(uri string) bool) ([]byte, error)
}

// GitState is what the mount asks of and tells the git layer.
type GitState interface {
	// Changed says slug://rel was written through the mount or changed on
	// disk ("" for anything in the source).
	Changed(slug, rel string)
	// Virtual lists the virtual names shown in folder rel of slug
	// (".status", ".revs"); nil when there are none.
	Virtual(slug, rel string) []string
	// Status renders the .status file of folder rel of slug for a reader
	// who can read only what canRead allows and sees the source through
	// view: its held changes over the backing files (nil: the backing
	// files).
	Status(ctx context.Context, slug, rel string, canRead func(rel string) bool, view *held.View) ([]byte, error)
	// Revs lists the branches and tags shown in slug's .revs/.
	Revs(slug string) []string
	// Tree resolves rev in slug ("" for a git-pinned source's own rev).
	Tree(slug, rev string) (*gitfs.Tree, error)
}

// Journal keeps what the mount overwrites or deletes.
type Journal interface {
	// Before runs before an existing file is changed (op "open" for a
	// write-open, "truncate", "unlink", or "rename" for the file a rename
	// replaces); it must return only once the content is kept.
	Before(e JournalEvent)
	// BeforeOpen is Before for a write-open ("open") that the mount makes
	// through fd: the file, open read-write and not yet truncated, whose
	// fstat is st. It keeps the content through fd (no second open of the
	// file); fd stays the caller's.
	BeforeOpen(e JournalEvent, fd int, st *unix.Stat_t)
	// Created runs after a new name was made.
	Created(e JournalEvent)
	// Renamed runs after from (relative to the same source) moved onto e.Rel.
	Renamed(e JournalEvent, from string)
	// History renders the caller's readable history of slug://rel;
	// readContent says which files' content digests it may be shown.
	History(slug, rel string, canRead, readContent func(uri string) bool, reader asuser.Cred) ([]byte, error)
}

// JournalEvent is one change made through the mount.
type JournalEvent struct {
	Principal string
	UID, PID  uint32
	Op        string
	Slug, Rel string
	// Open says the file is open through the mount: its content can still
	// change through those descriptors after its name is gone, so it must
	// be copied, not kept by a hard link (which would also show in the
	// holders' fstat as a link count of 1 instead of 0).
	Open bool
	// Regular says the kernel knows the file as a regular file: an OPEN
	// or a truncate through the mount reaches us only for one, and an
	// unlink or rename says so when the kernel knows the victim's node.
	// The journal may then open the file for reading at once instead of
	// resolving it O_PATH first (it still checks the type with fstat
	// before reading); without it, a device node that is only being
	// removed would be opened.
	Regular bool
}

// Auditor records denied operations.
type Auditor interface {
	Denied(d Denial)
}

// Denial is one refused operation, for the audit log.
type Denial struct {
	Principal string
	UID, GID  uint32
	PID       uint32
	Op        string
	URI       string
	Rule      string
}

// Status describes the sources for `.neuralis/sources`.
type StatusFunc func(slug string) (status mounts.Status, identity string)

// Options configure the filesystem shared by the main mount and the views.
type Options struct {
	Sources []*mounts.Source
	// Policy decides every operation; nil allows everything.
	Policy *policy.Set
	// Index and Search are the index the mount tells of changes and the
	// search it answers .neuralis/search from (nil: none); SetIndex
	// changes them.
	Index  Indexer
	Search Searcher
	Audit  Auditor  // may be nil
	Git    GitState // may be nil
	// Journal, when set, keeps content before the mount changes it;
	// SetJournal changes it.
	Journal Journal
	// Held keeps the writes review rules hold (nil: such writes are
	// refused with EROFS).
	Held *held.Store
	// Review renders .neuralis/review/ (nil: nothing is held).
	Review Reviewer
	// Collection renders .neuralis/collection (nil: an empty object).
	Collection Collector
	// SourceStatus overrides the status and identity shown for a source
	// (the daemon adds index and git state); nil shows mounts' status.
	SourceStatus StatusFunc
	Log          *slog.Logger
	// EntryTimeout and AttrTimeout are how long the kernel may cache names
	// and attributes whose decision is the same for every principal (at
	// start: a reload sets them anew, Reload's Timeouts).
	EntryTimeout time.Duration
	AttrTimeout  time.Duration
	// WatchedTimeout replaces both for sources for which Watched reports
	// that every change is seen (and so invalidated in the kernel); 0 or a
	// nil Watched keeps EntryTimeout and AttrTimeout everywhere.
	WatchedTimeout time.Duration
	Watched        func(slug, rel string) bool
	// Passthrough hands regular-file I/O to the kernel where it can.
	Passthrough bool
	// DaemonUID is the uid the daemon runs as (the principal owner).
	DaemonUID uint32
	// Stats, when set, counts every request and denial (stats.go).
	Stats *Stats
}

// FS is the state shared by every mount the daemon serves.
type FS struct {
	opts Options
	log  *slog.Logger
	// cur is what the running config decides (see state); Reload
	// replaces it whole.
	cur atomic.Pointer[state]
	// stats counts requests (Options.Stats, SetStats); nil: not counted.
	stats atomic.Pointer[Stats]
	// reloadMu serializes reloads; gate counts the requests that may
	// answer with cacheable entries, so a reload can wait for those that
	// started under the old state (see reload.go).
	reloadMu sync.Mutex
	gate     gate

	devMu sync.RWMutex
	devs  map[uint64]uint64

	treesMu sync.Mutex
	trees   []*tree

	// files are the open files of every mount (reload.go).
	files openFiles
	// opens bounds what each caller holds open (openquota.go).
	opens *openQuota

	virtIno atomic.Uint64

	// releasing holds the cached opens whose RELEASE is being served,
	// by the call (pagecache.go, negCache.Release).
	releasing sync.Map // <-chan struct{} → *cachedRelease
	// renaming holds, by the call, the paths each RENAME being served
	// moves (negCache.Rename, FS.moving).
	renaming sync.Map // <-chan struct{} → *[]string

	stopped atomic.Bool // no more kernel invalidations (Stop)

	own ownChanges // changes made through the mount, for the watcher
	// ext is the index, search and journal the mount uses now (a reload
	// turns them on and off: SetIndex, SetJournal); opts keeps the ones
	// it started with.
	ext atomic.Pointer[extras]
	// dropLogged is when droppedFolder last logged (Unix ns), and
	// dropsUnlogged how many it left out since.
	dropLogged, dropsUnlogged atomic.Int64
	// xgen is the generation of the absent extended attributes kept per
	// node (xattrcache.go).
	xgen atomic.Uint64
	// vgen moves at every change the daemon hears of (forgetXattrs and
	// changedTo): a virtual file's snapshot is reused only while it
	// stands (noopen.go).
	vgen atomic.Uint64

	shadowMu sync.Mutex
	shadowed map[string][]string // slug → backing paths hidden by virtual names
}

// shadow records (and logs once) a backing file hidden by a virtual name
// such as .status: it stays on disk and is reported in .neuralis/sources,
// never silently lost (DESIGN.md §8).
func (f *FS) shadow(slug, rel string) {
	f.shadowMu.Lock()
	defer f.shadowMu.Unlock()
	if f.shadowed == nil {
		f.shadowed = map[string][]string{}
	}
	for _, p := range f.shadowed[slug] {
		if p == rel {
			return
		}
	}
	if len(f.shadowed[slug]) < 100 {
		f.shadowed[slug] = append(f.shadowed[slug], rel)
	}
	f.log.Warn("a backing file is hidden by a virtual name", "uri", uri(slug, rel))
}

// shadowedIn lists the backing files of slug hidden by virtual names.
func (f *FS) shadowedIn(slug string) []string {
	f.shadowMu.Lock()
	defer f.shadowMu.Unlock()
	return append([]string(nil), f.shadowed[slug]...)
}

// New makes the filesystem. It clears the process umask: the caller's umask
// comes with every create, mkdir and mknod and is applied to the mode there,
// unless the folder has a default ACL (DESIGN.md §11, mounts.WithUmask).
func New(opts Options) *FS {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	syscall.Umask(0)
	f := &FS{
		opts:  opts,
		log:   opts.Log,
		devs:  map[uint64]uint64{},
		opens: newOpenQuota(),
	}
	f.stats.Store(opts.Stats)
	f.ext.Store(&extras{index: opts.Index, search: opts.Search, journal: opts.Journal})
	f.cur.Store(newState(opts.Policy, opts.Sources, Timeouts{Entry: opts.EntryTimeout, Attr: opts.AttrTimeout, Watched: opts.WatchedTimeout}))
	f.virtIno.Store(virtualInoBase)
	return f
}

// extras are the parts of the daemon a reload may turn on or off.
type extras struct {
	index   Indexer
	search  Searcher
	journal Journal
}

func (f *FS) indexer() Indexer   { return f.ext.Load().index }
func (f *FS) searcher() Searcher { return f.ext.Load().search }
func (f *FS) journal() Journal   { return f.ext.Load().journal }

// SetIndex makes ix the index the mount tells of its changes and s the
// search behind .neuralis/search from now on; nil turns them off. A
// request already past its check may still tell or ask the one before.
func (f *FS) SetIndex(ix Indexer, s Searcher) {
	f.setExtras(func(e *extras) { e.index, e.search = ix, s })
}

// SetJournal makes j the journal that keeps content before the mount's
// changes from now on; nil turns keeping off.
func (f *FS) SetJournal(j Journal) {
	f.setExtras(func(e *extras) { e.journal = j })
}

func (f *FS) setExtras(change func(*extras)) {
	for {
		old := f.ext.Load()
		e := *old
		change(&e)
		if f.ext.CompareAndSwap(old, &e) {
			return
		}
	}
}

// Inode numbers: backing files keep their own st_ino on the first device
// seen (so `ls -i` matches the backing folder), other devices are moved
// into their own range, and virtual nodes live at the top.
const (
	virtualInoBase = uint64(0xF) << 60
	devShift       = 52
)

func (f *FS) ino(dev, ino uint64) uint64 {
	f.devMu.RLock()
	k, ok := f.devs[dev]
	f.devMu.RUnlock()
	if !ok {
		f.devMu.Lock()
		if k, ok = f.devs[dev]; !ok {
			k = uint64(len(f.devs))
			f.devs[dev] = k
		}
		f.devMu.Unlock()
	}
	return ino ^ (k << devShift)
}

func (f *FS) newVirtualIno() uint64 { return f.virtIno.Add(1) }

// MountOptions are what a caller can choose for one FUSE mount.
type MountOptions struct {
	AllowOther bool
	Debug      bool
	// View, when set, decides every request as the principal of this name
	// and refuses callers who are not it (a [[view]]); "" decides per
	// caller. The name is resolved in the running policy at each request,
	// so a reload that redefines the principal applies to the view.
	View string
	// ReadOnly mounts the tree read-only (a [[view]]'s read_only): the
	// kernel answers every write EROFS itself, and keeps access times
	// from going stale, so reads (passthrough marks a file's access time
	// stale after each) cost no GETATTR at the next stat.
	ReadOnly bool
	// FsName is shown as the first column of mount and df.
	FsName string
	// IOURing is [mount] io_uring: "off" or "" (/dev/fuse), "auto" (FUSE
	// over io_uring where the kernel offers it) or "on" (refuse to mount
	// without it). See fs/uring.go. Either way the *fuse.Server Mount
	// returns unmounts with Unmount, and Wait returns once it has stopped.
	IOURing string
}

// Mount serves the tree at dir until the returned server is unmounted.
func (f *FS) Mount(dir string, mo MountOptions) (*fuse.Server, error) {
	t := &tree{fs: f, view: mo.View, dir: dir, readOnly: mo.ReadOnly, noOpen: mo.ReadOnly && mo.View != ""}
	t.root = &rootNode{t: t}
	zero := time.Duration(0)
	opts := &fusefs.Options{
		// Timeouts are set per entry by our nodes; zero here keeps the
		// bridge from overriding a deliberate zero (see setEntryOutTimeout).
		EntryTimeout: &zero,
		AttrTimeout:  &zero,
		MountOptions: fuse.MountOptions{
			AllowOther: mo.AllowOther,
			Debug:      mo.Debug,
			FsName:     mo.FsName,
			Name:       "neuralisfs",
			// POSIX and flock locks are kept by the kernel for everyone
			// using the mount (they are not shared with processes using the
			// backing folder directly); see README "Limits".
			EnableLocks: false,
			MaxWrite:    1 << 20,
			DirectMount: true,
			Options:     []string{"default_permissions"},
			// POSIX ACLs: the kernel checks the backing files' ACLs, not
			// just their mode bits, and caches them per inode (a
			// readdirplus or an attribute refresh drops them again). The
			// kernel then leaves the umask to us (DONT_MASK; see
			// negCache.Create).
			EnableAcl: true,
			// ATOMIC_O_TRUNC: an O_TRUNC open is one OPEN carrying
			// O_TRUNC instead of an OPEN and a SETATTR (see node.Open for
			// the set-id bits the kernel then leaves to us).
			// HANDLE_KILLPRIV_V2: the daemon clears set-id bits where a
			// truncate or chown asks it to (FATTR_KILL_SUIDGID, see
			// setattrFd), so the kernel marks the superblock SB_NOSEC: a
			// file found without set-id bits and security.capability at
			// its first write is not asked about them again (S_NOSEC)
			// until its attributes show set-id bits. Without it every
			// write(2), passthrough ones included, cost a GETXATTR
			// security.capability round trip. Writes that must drop the
			// bits still reach us (file_remove_privs' SETATTR that sets
			// nothing, answered by a chown to -1 -1, which drops them as
			// the backing filesystem does for any chown).
			// SETXATTR_EXT: the kernel says when an access ACL must
			// clear the set-group-id bit (negCache.SetXAttr).
			ExtraCapabilities: fuse.CAP_DONT_MASK | fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_HANDLE_KILLPRIV_V2 | fuse.CAP_SETXATTR_EXT,
			MaxReadAhead:      128 << 10,
		},
		NullPermissions: true,
		RootStableAttr:  &fusefs.StableAttr{Ino: 1},
		Logger:          nil,
	}
	if opts.FsName == "" {
		opts.FsName = "neuralisfs"
	}
	if mo.ReadOnly {
		// The superblock's flag (fs_context's "ro"): IS_RDONLY, which
		// both the VFS's write checks and fuse_invalidate_atime read.
		opts.Options = append(opts.Options, "ro")
	}
	if mo.AllowOther {
		opts.Options = append(opts.Options, "allow_other")
		opts.AllowOther = false // already in Options; go-fuse would add it twice
	}
	var raw fuse.RawFileSystem = fusefs.NewNodeFS(t.root, opts)
	var lists *noOpendir
	if t.view != "" {
		// Every caller gets the same listing (a view is one principal's,
		// whatever a reload changes): no OPENDIR/RELEASEDIR round trips,
		// and the kernel keeps listings (dirlist.go). Not in the main
		// mount: the kernel never asks again once OPENDIR answered
		// ENOSYS, and a reload may add rules that list differently per
		// principal.
		lists = &noOpendir{RawFileSystem: raw, t: t}
		raw = lists
		opts.ExtraCapabilities |= fuse.CAP_NO_OPENDIR_SUPPORT
		// The kernel keeps symlink targets in the link's page cache
		// (FUSE_CACHE_SYMLINKS) and answers readlink and every walk
		// through the link from it. READLINK is decided for its caller
		// (policy, held layer), so only where there is one caller: a
		// reload that hides a link drops its page (forgetName), and a
		// change to it, through any mount or behind them, drops it as
		// it drops a file's pages.
		opts.EnableSymlinkCaching = true
	}
	if t.noOpen {
		raw = &noOpen{RawFileSystem: raw}
	}
	if labelsOff() {
		raw = &noLabels{RawFileSystem: raw}
	}
	var rfs fuse.RawFileSystem = &negCache{RawFileSystem: raw, fs: f}
	// Always: with no Stats it only marks each request for the background
	// work to give way to (lowprio.Foreground).
	rfs = &statsFS{RawFileSystem: rfs, stats: &f.stats}
	var srv *fuse.Server
	if useRing, err := wantUring(dir, mo.IOURing); err != nil {
		return nil, err
	} else if useRing {
		if srv, t.rings, err = mountUring(dir, rfs, opts.MountOptions, mo.IOURing == "on", &t.expire); err != nil {
			t.expire.close()
			return nil, err
		}
		t.onRings.Store(t.rings != nil)
	} else {
		devFuseMu.Lock() // see newServerFD
		var fd int
		srv, fd, err = serverAndFD(dir, rfs, &opts.MountOptions)
		if srv != nil && err != nil {
			// Served all the same; names are dropped, not expired.
			slog.Warn("no /dev/fuse descriptor for notifications go-fuse does not send", "mountpoint", dir, "err", err)
		} else if err == nil {
			t.expire.open(fd, srv.KernelSettings())
		}
		devFuseMu.Unlock()
		if srv == nil {
			return nil, fmt.Errorf("mount %s: %w", dir, err)
		}
		go srv.Serve()
		if err := srv.WaitMount(); err != nil {
			srv.Unmount()
			t.expire.close()
			return nil, fmt.Errorf("mount %s: %w", dir, err)
		}
		slog.Info("serving", "mountpoint", dir, "transport", "/dev/fuse")
	}
	f.treesMu.Lock()
	f.trees = append(f.trees, t)
	f.treesMu.Unlock()
	go func() {
		srv.Wait()
		t.expire.close()
		if lists != nil {
			lists.releaseAll()
		}
		f.treesMu.Lock()
		for i, x := range f.trees {
			if x == t {
				f.trees = append(f.trees[:i], f.trees[i+1:]...)
				break
			}
		}
		f.treesMu.Unlock()
	}()
	return srv, nil
}

// Detach marks the view mounted at dir as dropped by a reload, before it
// is unmounted: a process working inside it when the unmount is lazy (a
// busy mount) kept writing through it, under the view's old settings (a
// view made read_only by the reload took creates and unlinks relative to
// a working folder or a folder descriptor kept from before; found by a
// red-team pass). From now on every write through it answers EROFS;
// reads go on, decided by the current rules, until the last process lets
// go. A write through a descriptor opened for writing before goes on, as
// a reload's other changes leave open files alone.
func (f *FS) Detach(dir string) {
	f.treesMu.Lock()
	defer f.treesMu.Unlock()
	for _, t := range f.trees {
		if t.dir == dir && t.view != "" {
			t.detached.Store(true)
		}
	}
}

// negCache turns a failed lookup whose node set an entry timeout into a
// cached negative entry. go-fuse only does that with one mount-wide
// negative timeout, which would cache "no such file" answered to a denied
// principal for everyone (DESIGN.md §11); our nodes set a timeout only for
// names that are absent for every principal.
//
// It also passes every request that can answer with cacheable entries or
// attributes through the reload gate (see FS.Reload).
type negCache struct {
	fuse.RawFileSystem
	fs *FS
}

// Release serves a RELEASE and only then forgets the cached open it
// ends (fileHandle.released): go-fuse drops a reference to the node's
// passthrough backing file at every RELEASE after the handle's own
// Release returns, cached handles' too, so a passthrough open let in
// before that would lose its backing file to the cached one's release
// (pagecache.go). The call is told apart by its cancel channel, which
// go-fuse hands the handle's Release in its context; a RELEASE is never
// interrupted, so the channel need not be the request's.
func (n *negCache) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	ch := make(chan struct{})
	key := (<-chan struct{})(ch)
	var rs cachedRelease
	n.fs.releasing.Store(key, &rs)
	n.RawFileSystem.Release(key, in)
	n.fs.releasing.Delete(key)
	if rs.pc != nil {
		rs.pc.forgetOpen()
	}
}

// Rename serves a RENAME and only then ends the hold it put on the
// watcher's reports of the paths it moves (FS.moving): go-fuse moves the
// node to its new name after the node's Rename returns. The call is told
// apart by its cancel channel, as in Release: each request being served
// has its own.
func (n *negCache) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if cancel == nil {
		return n.RawFileSystem.Rename(cancel, in, oldName, newName)
	}
	var keys []string
	n.fs.renaming.Store(cancel, &keys)
	st := n.RawFileSystem.Rename(cancel, in, oldName, newName)
	n.fs.renaming.Delete(cancel)
	n.fs.own.doneMoving(keys)
	return st
}

// SetXAttr hands the request's FUSE_SETXATTR_ACL_KILL_SGID to the node
// method inside the flags (killSGIDFlag): go-fuse's node API drops it.
func (n *negCache) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	if in.SetXAttrFlags&fuse.SETXATTR_ACL_KILL_SGID != 0 {
		in.Flags |= killSGIDFlag
	}
	return n.RawFileSystem.SetXAttr(cancel, in, attr, data)
}

// Create, Tmpfile, Mkdir and Mknod hand the caller's umask to the node methods
// inside the mode (go-fuse's node API drops it): with POSIX ACLs on, the
// kernel leaves applying it to us, because a folder's default ACL
// overrides it (mounts.WithUmask).
func (n *negCache) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer n.fs.gate.leave(n.fs.gate.enter())
	in.Mode = mounts.WithUmask(in.Mode, in.Umask)
	return n.RawFileSystem.Create(cancel, in, name, out)
}

func (n *negCache) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	defer n.fs.gate.leave(n.fs.gate.enter())
	in.Mode = mounts.WithUmask(in.Mode, in.Umask)
	return n.RawFileSystem.Tmpfile(cancel, in, out)
}

func (n *negCache) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer n.fs.gate.leave(n.fs.gate.enter())
	in.Mode = mounts.WithUmask(in.Mode, in.Umask)
	return n.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (n *negCache) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer n.fs.gate.leave(n.fs.gate.enter())
	in.Mode = mounts.WithUmask(in.Mode, in.Umask)
	return n.RawFileSystem.Mknod(cancel, in, name, out)
}

func (n *negCache) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer n.fs.gate.leave(n.fs.gate.enter())
	st := n.RawFileSystem.Lookup(cancel, header, name, out)
	if st == fuse.ENOENT && out.EntryTimeout() > 0 {
		out.NodeId = 0
		out.Generation = 0
		out.Attr = fuse.Attr{}
		return fuse.OK
	}
	return st
}

// The other requests that answer with entries or attributes the kernel
// caches, or with a listing it may keep, pass the reload gate too.

func (n *negCache) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer n.fs.gate.leave(n.fs.gate.enter())
	return n.RawFileSystem.GetAttr(cancel, in, out)
}

func (n *negCache) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer n.fs.gate.leave(n.fs.gate.enter())
	return n.RawFileSystem.SetAttr(cancel, in, out)
}

func (n *negCache) Symlink(cancel <-chan struct{}, header *fuse.InHeader, pointedTo, linkName string, out *fuse.EntryOut) fuse.Status {
	defer n.fs.gate.leave(n.fs.gate.enter())
	return n.RawFileSystem.Symlink(cancel, header, pointedTo, linkName, out)
}

func (n *negCache) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer n.fs.gate.leave(n.fs.gate.enter())
	return n.RawFileSystem.Link(cancel, in, name, out)
}

func (n *negCache) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer n.fs.gate.leave(n.fs.gate.enter())
	return n.RawFileSystem.OpenDir(cancel, in, out)
}

func (n *negCache) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer n.fs.gate.leave(n.fs.gate.enter())
	return n.RawFileSystem.ReadDirPlus(cancel, in, out)
}

// tree is one FUSE mount of the filesystem: the main mount or a view.
type tree struct {
	fs *FS
	// view is the principal a view decides as; "" in the main mount.
	view string
	root *rootNode
	// dir is the mountpoint.
	dir string
	// readOnly: mounted read-only (a view's read_only).
	readOnly bool
	// detached: a reload removed or replaced the view (Detach); the
	// kernel may still serve processes inside it (a busy mount is
	// detached lazily), and every write from them answers EROFS.
	detached atomic.Bool
	// noOpen: a read-only view, served without OPEN (noopen.go); revs
	// bounds the commit files' content it keeps.
	noOpen bool
	revs   revCache
	// rings are the io_uring queues serving this mount, nil on /dev/fuse;
	// onRings says so to requests (set once the mount serves).
	rings   *uring.Rings
	onRings atomic.Bool
	// expire expires names in the kernel's cache (expire.go).
	expire expirer
}

// cacheAll reports whether every decision in s is the same for every
// caller of this mount (no policy, or a view), so every answer may be
// cached.
func (t *tree) cacheAll(s *state) bool { return s.trivial || t.view != "" }

// who identifies the caller of a request, and the state it is decided by:
// loaded once per request, so no request mixes two configs.
type who struct {
	s   *state
	p   *policy.Principal
	uid uint32
	gid uint32
	pid uint32
}

// caller resolves the principal behind ctx. In a view, a caller who is not
// the view's principal is refused.
func (t *tree) caller(ctx context.Context) (who, syscall.Errno) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return who{}, syscall.EIO
	}
	return t.resolve(t.fs.state(), c.Uid, c.Gid, c.Pid)
}

// resolve is caller for a request from uid/gid/pid decided by s.
func (t *tree) resolve(s *state, uid, gid, pid uint32) (who, syscall.Errno) {
	w := who{s: s, uid: uid, gid: gid, pid: pid}
	if s.pol == nil {
		return w, 0
	}
	w.p = s.pol.Resolve(uid, gid)
	if t.view != "" {
		vp, ok := s.pol.PrincipalByName(t.view)
		if !ok || w.p.Name != vp.Name {
			return w, syscall.EACCES
		}
		w.p = vp
	}
	return w, 0
}

func (t *tree) entryTimeout(s *state, slug, rel string, uniform bool) time.Duration {
	return t.timeout(s, slug, rel, uniform, s.tm.Entry)
}

func (t *tree) attrTimeout(s *state, slug, rel string, uniform bool) time.Duration {
	return t.timeout(s, slug, rel, uniform, s.tm.Attr)
}

// fileAttrTimeout is attrTimeout for st, the file at slug://rel: a file
// with more than one name may change through one the watcher does not
// watch (a hard link outside the source, or in a folder it skips), which
// no event reports, so its attributes get attr_timeout, not the longer
// watched_timeout. Root's chmod 600 through such a link went unseen in a
// view for a minute, in which the agent opened the file and read what
// root wrote after it (found by a red-team pass).
func (t *tree) fileAttrTimeout(s *state, slug, rel string, uniform bool, st *unix.Stat_t) time.Duration {
	d := t.attrTimeout(s, slug, rel, uniform)
	if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		d = min(d, s.tm.Attr)
	}
	return d
}

// timeout is how long the kernel may cache slug://rel: not at all when the
// policy decides it differently for different callers, WatchedTimeout
// while every change to it is seen, and otherwise unwatched.
func (t *tree) timeout(s *state, slug, rel string, uniform bool, unwatched time.Duration) time.Duration {
	if !uniform && !t.cacheAll(s) {
		return 0
	}
	if t.fs.watched(slug, rel) {
		return s.tm.Watched
	}
	return unwatched
}

// watched reports whether every change to slug://rel reaches the daemon
// (and so the kernel's caches), so its name and attributes may be cached
// for the longer WatchedTimeout. Slug "" (the mount's root, the control
// folder, commit trees) never is.
func (f *FS) watched(slug, rel string) bool {
	s := f.state()
	if src := s.srcs[slug]; src != nil && src.Config.Layer != "" {
		slug = src.Config.Layer // watched as its source's folder
	}
	return slug != "" && s.tm.Watched > 0 && f.opts.Watched != nil && f.opts.Watched(slug, rel)
}

// uniform reports whether slug://rel is decided the same for everyone in
// s, so the kernel may cache it for all callers. Answers are remembered
// with s (Uniform costs microseconds when per-principal rules can reach a
// path; it is asked on every lookup); a reload starts a new memo.
func (t *tree) uniform(s *state, slug, rel string) bool {
	if t.cacheAll(s) {
		return true
	}
	return s.uniform(slug, rel)
}

func uri(slug, rel string) string { return slug + "://" + rel }

// allow decides cap for the caller on slug://rel. A refused read is
// ENOENT (absent), a refused write EACCES or EROFS; every refusal is
// audited.
func (t *tree) allow(w who, op string, slug, rel string, c policy.Cap) syscall.Errno {
	if c != policy.Read && t.detached.Load() {
		return syscall.EROFS
	}
	if w.s.trivial && t.view == "" {
		return 0
	}
	if w.s.pol == nil {
		return 0
	}
	d := w.s.pol.Decide(w.p, slug, rel, c)
	if d.Allowed {
		return 0
	}
	t.audit(w, op, uri(slug, rel), d.Rule.Where())
	switch {
	case c == policy.Read:
		return syscall.ENOENT
	case d.ReadOnly:
		return syscall.EROFS
	}
	return syscall.EACCES
}

// canRead reports whether the caller may see slug://rel (no audit line:
// used for filtering listings and results).
func (t *tree) canRead(w who, slug, rel string) bool {
	if w.s.pol == nil || (w.s.trivial && t.view == "") {
		return true
	}
	return w.s.pol.Decide(w.p, slug, rel, policy.Read).Allowed
}

func (t *tree) audit(w who, op, u, rule string) {
	name := ""
	if w.p != nil {
		name = w.p.Name
	}
	if st := t.fs.stats.Load(); st != nil {
		st.denied(op, name)
	}
	if t.fs.opts.Audit == nil {
		return
	}
	t.fs.opts.Audit.Denied(Denial{Principal: name, UID: w.uid, GID: w.gid, PID: w.pid, Op: op, URI: u, Rule: rule})
}
