package fs

import (
	"context"
	"slices"
	"strings"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/neuralis/neuralisfs/internal/held"
	"github.com/neuralis/neuralisfs/internal/reserved"
)

// Virtual names inside sources: git sources show a read-only `.status` in
// every folder of a checkout (DESIGN.md §6). A backing file with a reserved
// name is shadowed, never silently replaced: creating one through the
// mount is refused with EPERM, and the source's status reports it.
//
// Virtual names answer a lookup by name but are not listed (as ZFS's
// hidden .zfs): a listed .status would be an untracked file to git on the
// mount in every folder, which `git add -A` would commit, and a listed
// .revs/ would send find, grep -r, cp -r and tar through every commit.

// Virtual names in git sources.
const (
	StatusName = ".status"
	RevsName   = ".revs"
)

// virtualNames lists the virtual names of folder rel.
func (n *node) virtualNames(rel string) []string {
	if n.t.fs.opts.Git == nil {
		return nil
	}
	return n.t.fs.opts.Git.Virtual(n.slug, rel)
}

// reserved reports whether name in folder rel is a virtual name, or one
// of the daemon's own (daemonName): nothing can be made under either
// through the mount.
func (n *node) reserved(rel, name string) bool {
	return daemonName(name) || n.virtual(rel, name)
}

// daemonName reports whether name is one the daemon itself writes into
// backing folders for a moment (reserved.DaemonPrefix: a file an approval
// or a revert is landing, or one an approval moved aside). It is absent
// to every caller whether or not it is there: a lookup answers ENOENT,
// a listing leaves it out.
func daemonName(name string) bool {
	return strings.HasPrefix(name, reserved.DaemonPrefix)
}

// virtual reports whether name in folder rel is a virtual name.
func (n *node) virtual(rel, name string) bool {
	// Only these names can be virtual: every other lookup, create and
	// rename skips asking the git layer (it is on every syscall's path).
	if name != StatusName && name != RevsName {
		return false
	}
	return slices.Contains(n.virtualNames(rel), name)
}

// hidden is the set of backing names a listing of rel must leave out
// because virtual entries take their place.
func (n *node) hidden(rel string) map[string]bool {
	names := n.virtualNames(rel)
	if len(names) == 0 {
		return nil
	}
	m := make(map[string]bool, len(names))
	for _, v := range names {
		m[v] = true
	}
	return m
}

// virtualLookup answers a lookup of a virtual name, or returns nil.
func (n *node) virtualLookup(ctx context.Context, w who, rel, name string, out *fuse.EntryOut) *fusefs.Inode {
	if !n.virtual(rel, name) {
		return nil
	}
	if name == RevsName {
		ino := n.t.fs.newVirtualIno()
		ctlAttr(&out.Attr, ino, syscall.S_IFDIR|0o555)
		return n.NewInode(ctx, &revsDir{t: n.t, slug: n.slug}, fusefs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino})
	}
	g := n.t.fs.opts.Git
	slug := n.slug
	content := func(ctx context.Context, w who) ([]byte, error) {
		files, done := n.t.sightFor(w)
		defer done()
		// A principal whose writes are held sees its own worktree
		// (README "Held writes").
		var view *held.View
		if lay := n.layer(w); lay != nil {
			if r, err := n.src.Root(); err == nil {
				view = lay.View(r)
			}
		}
		return g.Status(ctx, slug, rel, func(r string) bool { return n.t.canRead(w, slug, r) && files.canSee(slug, r) }, view)
	}
	ino := n.t.fs.newVirtualIno()
	ctlAttr(&out.Attr, ino, syscall.S_IFREG|0o444)
	return n.NewInode(ctx, &ctlFile{t: n.t, content: content}, fusefs.StableAttr{Mode: syscall.S_IFREG, Ino: ino})
}
