package fs

import (
	"errors"
	"os"
	"strings"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// owner is the uid and gid a file created for the caller should get: the
// caller's when the daemon runs as root (DESIGN.md §4), else the daemon's
// own (-1: leave as created).
func (f *FS) owner(w who) (int, int) {
	if os.Geteuid() != 0 {
		return -1, -1
	}
	return int(w.uid), int(w.gid)
}

// renameAllowed applies the policy's rename rule: write on both uris, and a
// folder may not carry anything across a rule boundary.
func (t *tree) renameAllowed(w who, slug, oldRel, newRel string, isDir bool) syscall.Errno {
	if t.fs.pol == nil || (t.fs.trivial && t.view == nil) {
		return 0
	}
	err := t.fs.pol.CanRename(w.p, slug, oldRel, newRel, isDir)
	if err == nil {
		return 0
	}
	rule := "default"
	var pe interface{ RuleWhere() string }
	if errors.As(err, &pe) {
		rule = pe.RuleWhere()
	}
	t.audit(w, "rename", uri(slug, oldRel)+" -> "+uri(slug, newRel), rule)
	if errors.Is(err, policy.ErrReadOnly) {
		return syscall.EROFS
	}
	return syscall.EACCES
}

// beforeChange runs before the mount overwrites, truncates or removes an
// existing file (the journal hooks in here).
func (f *FS) beforeChange(w who, slug, rel, op string) {
	if f.opts.Journal != nil {
		f.opts.Journal.Before(JournalEvent{Principal: principalName(w), UID: w.uid, PID: w.pid, Op: op, Slug: slug, Rel: rel})
	}
}

// created records a new name made through the mount.
func (f *FS) created(w who, slug, rel string) {
	if f.opts.Journal != nil {
		f.opts.Journal.Created(JournalEvent{Principal: principalName(w), UID: w.uid, PID: w.pid, Op: "create", Slug: slug, Rel: rel})
	}
	f.changed(slug, rel)
}

func principalName(w who) string {
	if w.p == nil {
		return ""
	}
	return w.p.Name
}

// changed tells the index and git that slug://rel may have new content.
func (f *FS) changed(slug, rel string) {
	if f.opts.Index != nil {
		f.opts.Index.Update(uri(slug, rel))
	}
	if f.opts.Git != nil {
		f.opts.Git.Changed(slug, rel)
	}
}

// removed tells the index and git that slug://rel is gone.
func (f *FS) removed(slug, rel string, isDir bool) {
	if f.opts.Index != nil {
		if isDir {
			f.opts.Index.RemovePrefix(uri(slug, rel) + "/")
		}
		f.opts.Index.Remove(uri(slug, rel))
	}
	if f.opts.Git != nil {
		f.opts.Git.Changed(slug, rel)
	}
}

// renamed tells the index and git that a name moved (or two swapped).
func (f *FS) renamed(w who, slug, oldRel, newRel string, isDir, exchange bool) {
	if f.opts.Journal != nil && !isDir && !exchange {
		f.opts.Journal.Renamed(JournalEvent{Principal: principalName(w), UID: w.uid, PID: w.pid, Op: "rename", Slug: slug, Rel: newRel}, oldRel)
	}
	if f.opts.Index != nil {
		if exchange {
			f.opts.Index.Update(uri(slug, oldRel))
			f.opts.Index.Update(uri(slug, newRel))
			if isDir {
				f.opts.Index.RemovePrefix(uri(slug, oldRel) + "/")
				f.opts.Index.RemovePrefix(uri(slug, newRel) + "/")
			}
		} else {
			f.opts.Index.Rename(uri(slug, oldRel), uri(slug, newRel), isDir)
		}
	}
	if f.opts.Git != nil {
		f.opts.Git.Changed(slug, oldRel)
		f.opts.Git.Changed(slug, newRel)
	}
}

// Changed takes changes seen on the backing folders (not made through the
// mount) and makes them visible: the kernel's cached names, attributes and
// pages for them are invalidated in every mount, and the index and git
// state are told. It must not be called from a FUSE request.
func (f *FS) Changed(changes []mounts.Change) {
	f.treesMu.Lock()
	trees := append([]*tree(nil), f.trees...)
	f.treesMu.Unlock()
	for _, c := range changes {
		for _, t := range trees {
			t.invalidate(c)
		}
		if c.Rescan {
			if f.opts.Git != nil {
				f.opts.Git.Changed(c.Slug, "")
			}
			continue
		}
		if c.Gone {
			f.removed(c.Slug, c.Rel, true)
		} else {
			f.changed(c.Slug, c.Rel)
		}
	}
}

// SourceChanged is called when a source's root was opened, closed or
// replaced: everything the kernel knows below it is dropped.
func (f *FS) SourceChanged(slug string) {
	f.Changed([]mounts.Change{{Slug: slug, Rescan: true}})
	f.treesMu.Lock()
	trees := append([]*tree(nil), f.trees...)
	f.treesMu.Unlock()
	for _, t := range trees {
		t.root.NotifyEntry(slug)
	}
}

// invalidate drops what the kernel caches for one change in this mount.
func (t *tree) invalidate(c mounts.Change) {
	top := t.root.source(c.Slug)
	if top == nil {
		return
	}
	if c.Rescan {
		top.NotifyContent(0, 0)
		pruneAll(&top.Inode)
		return
	}
	dir := &top.Inode
	segs := strings.Split(c.Rel, "/")
	for _, s := range segs[:len(segs)-1] {
		dir = dir.GetChild(s)
		if dir == nil {
			return // the kernel has not seen the folder: nothing cached
		}
	}
	name := segs[len(segs)-1]
	if ch := dir.GetChild(name); ch != nil {
		ch.NotifyContent(0, 0)
	}
	dir.NotifyEntry(name)
	dir.NotifyContent(0, 0)
}

// pruneAll invalidates every name the kernel has cached below dir.
func pruneAll(dir *fusefs.Inode) {
	for name, ch := range dir.Children() {
		if ch.IsDir() {
			pruneAll(ch)
		}
		dir.NotifyEntry(name)
	}
}
