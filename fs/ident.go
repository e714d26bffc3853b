package fs

import (
	"context"
	"sync"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// A mount's inode numbers are the backing files' (fs.go's ino), and the
// backing file system reuses a number as soon as its file is gone: ext4
// gives a new file the lowest free number in its group. go-fuse finds a
// known node by its StableAttr, so a file that got the number of one the
// kernel still holds under its old name — a file replaced by a rename
// behind the mount, its name not yet invalidated by the watcher — would
// be handed the old node: the kernel would take both names for one inode
// and read the new file's bytes under the old name.
//
// idents tells the two files apart by the StableAttr's generation. Each
// number the kernel holds has one live node in ids, with the generation
// it was given. A lookup that finds the number held under another name
// checks that name. Only when it names another file now (the old one was
// replaced, and its number reused) and no file open through the node has
// the number (an open file's number is not free) does the number get a
// new generation, and so a node of its own and the kernel a new inode.
// A name that still holds the number (a hard link), a name that is gone
// and a node without a name tell nothing against go-fuse's view: a
// rename through the mount moves the file before go-fuse moves its node,
// and a LOOKUP racing it must find that node (a new one there displaced
// it, and opens through the kernel's names for it failed, about once in
// six runs of TestOpenWhileRenamesReplaceTheName over io_uring). A folder keeps its node
// under any name: the kernel never holds two names for one folder
// (d_splice_alias moves its one name), so a folder renamed behind the
// mount moves in go-fuse's tree at the lookup of its new name, and a
// process working inside it goes on working there. A file made through
// the mount is new by definition and always gets a new generation.
// Generations are what the kernel is told in a LOOKUP's answer
// (fuse_stale_inode compares them for a nodeid), never shown to callers.
type idents struct {
	mu  sync.Mutex
	gen uint64
	ids map[uint64]ident
}

type ident struct {
	gen uint64
	n   *node
}

// fresh gives n, a node for the file numbered ino, a new generation.
func (d *idents) fresh(ino uint64, n *node) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.freshLocked(ino, n)
}

func (d *idents) freshLocked(ino uint64, n *node) uint64 {
	if d.ids == nil {
		d.ids = make(map[uint64]ident)
	}
	d.gen++
	d.ids[ino] = ident{gen: d.gen, n: n}
	return d.gen
}

// forget drops n when go-fuse forgets it (OnForget).
func (d *idents) forget(ino uint64, n *node) {
	d.mu.Lock()
	if id, ok := d.ids[ino]; ok && id.n == n {
		delete(d.ids, ino)
	}
	d.mu.Unlock()
}

// held returns the live node for ino and its generation, if any.
func (d *idents) held(ino uint64) (*node, uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := d.ids[ino]
	return id.n, id.gen
}

// OnForget is called once the kernel and go-fuse's tree hold n no more.
func (n *node) OnForget() {
	if !n.top {
		n.t.ids.forget(n.StableAttr().Ino, n)
	}
}

var _ = (fusefs.NodeOnForgetter)((*node)(nil))

// newChild makes the inode for a file made through the mount (create,
// mkdir, mknod, symlink), found by stat: a new file, so a new generation.
func (n *node) newChild(ctx context.Context, st *unix.Stat_t) *fusefs.Inode {
	child := &node{t: n.t, src: n.src, slug: n.slug}
	ino := n.ino(st)
	return n.NewInode(ctx, child, fusefs.StableAttr{
		Mode: st.Mode & unix.S_IFMT,
		Ino:  ino,
		Gen:  n.t.ids.fresh(ino, child),
	})
}

// foundChild makes or finds the inode for the file st found at name
// (LOOKUP, READDIRPLUS, LINK): the node the kernel holds for that file
// if it holds one, else a new one (see idents).
//
// A folder go-fuse still keeps under that name is reused rather than
// replaced. go-fuse finds a known inode by its identity only while the
// kernel holds it. A folder the kernel forgot stays in go-fuse's tree
// while it has children — a hard-linked file the kernel still holds
// through its other name — but is no longer found by identity, so a new
// lookup of its name would make a second inode and put it under the
// name. The old one would keep its children and its stale idea of where
// it is: a rename of the new one does not move it, and the file's path,
// taken through it, would name the folder's old place — an ENOENT, or
// another file's name there (found by fsstress: lchown of a hard-linked
// symlink after its other folder was forgotten, looked up and
// exchanged). Reusing the folder keeps one inode per folder, as go-fuse
// keeps one per file the kernel holds.
func (n *node) foundChild(ctx context.Context, name string, st *unix.Stat_t) *fusefs.Inode {
	mode, ino := st.Mode&unix.S_IFMT, n.ino(st)
	if mode == unix.S_IFDIR {
		if old := n.GetChild(name); old != nil {
			if sa := old.StableAttr(); sa.Mode == mode && sa.Ino == ino {
				if on, ok := old.Operations().(*node); ok && on.src == n.src {
					return old
				}
			}
		}
	}
	child := &node{t: n.t, src: n.src, slug: n.slug}
	var gen uint64
	if old, g := n.t.ids.held(ino); old != nil && old.StableAttr().Mode == mode && (mode == unix.S_IFDIR || n.sameFile(ctx, old, name, ino)) {
		gen = g // go-fuse finds old by this identity
	} else {
		d := &n.t.ids
		d.mu.Lock()
		if id := d.ids[ino]; id.n == old && id.gen == g {
			gen = d.freshLocked(ino, child)
		} else {
			gen = id.gen // a lookup racing this one registered it first
		}
		d.mu.Unlock()
	}
	return n.NewInode(ctx, child, fusefs.StableAttr{Mode: mode, Ino: ino, Gen: gen})
}

// sameFile reports whether old, the node the kernel holds for number ino,
// is the file just found at name in n: it is known under that name, the
// name it is known under still holds that number (a hard link), or a
// file open through old has that number — an open file's number is not
// free, so it is that file, whatever became of old's name (a hard link
// whose other name was removed, behind the mount or through it).
func (n *node) sameFile(ctx context.Context, old *node, name string, ino uint64) bool {
	if n.GetChild(name) == old.EmbeddedInode() {
		return true // one of the names go-fuse knows it by
	}
	if _, parent := old.Parent(); parent == nil || !old.holdsOther(ctx, ino) {
		// Nameless (unlinked or moved through the mount), or its name
		// is gone: nothing says the file went, as go-fuse has it.
		return true
	}
	fd, ok := old.handles.dup()
	if !ok {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && old.ino(&st) == ino
}

// holdsOther reports whether n's name, as the caller sees it, holds
// another file than number ino: the file n was is gone and its number
// reused. A name that is gone tells nothing: a rename through the mount
// moves the file before go-fuse moves its node (a LOOKUP of the new name
// racing it found the node still under the old one), so that counts as
// the same file.
func (n *node) holdsOther(ctx context.Context, ino uint64) bool {
	w, errno := n.t.caller(ctx)
	if errno != 0 {
		return false
	}
	rel, ok := n.rel()
	if !ok {
		return false
	}
	r, err := n.src.Root()
	if err != nil {
		return false
	}
	st, errno := n.lstatAs(w, r, rel)
	return errno == 0 && n.ino(&st) != ino
}
