package fs

import "slices"

// Absent extended attributes are remembered per node (issue 15). `ls -l`
// asks for security.selinux on every name it lists, and a caller that does
// not own a file makes the kernel ask for system.posix_acl_access at each
// permission check after the attributes were refreshed; on most trees
// neither exists, and each question cost the daemon a confined open of
// the parent folder, a getxattrat and a close. The kernel keeps no answer
// but an ACL's, so the daemon keeps the "no such attribute" ones.
//
// Only absences are kept, only for a node the watcher covers (every change
// behind the mount reaches the daemon, as for the attributes it lets the
// kernel keep), and only as answers about the backing file: a caller
// whose held layer has its own copy at that path neither reads nor keeps
// them (a held principal is served from them wherever its layer holds
// nothing). Only a few things make an absent attribute exist: a
// setxattr (an ACL is one), a new file (a folder's default ACL, a label),
// a change behind the mount, an approved held change or a revert (both
// reach the mount as changes behind it), a reload. A chmod, chown, write
// or truncate can remove security.capability, never add one; a chmod
// rewrites an ACL only where there is one. So every kept absence is
// forgotten at once (FS.xgen moves) at each setxattr and removexattr
// through the mount, each change the watcher reports, each reload, each
// held change made, approved or rejected, and each name made, removed or
// renamed through the mount (a node is kept by path, and a path may then
// name another file; go-fuse may even give a new file the node it keeps
// for an earlier one with the same inode number). A kept absence is
// trusted only while the generation it was read under is still current,
// and a question reads the generation before it asks the backing folder,
// so an answer read while a change lands is never kept past it.

// maxAbsent bounds the names kept per node: a caller asking for many
// different absent names keeps only the last few.
const maxAbsent = 4

type absentXattrs struct {
	gen   uint64
	names []string
}

// xattrGen returns the current generation of kept absences.
func (f *FS) xattrGen() uint64 { return f.xgen.Load() }

// forgetXattrs drops every kept absence.
func (f *FS) forgetXattrs() {
	f.xgen.Add(1)
	f.vgen.Add(1)
}

// noAttrs is kept as an absent name when a LISTXATTR found no name at
// all (no xattr name is empty), and answers the next LISTXATTR from
// memory: `cp -a`, `tar --xattrs`, `rsync -X` and Python's shutil.copy2
// list every file's attributes. It says nothing of any one name: some
// filesystems answer names they do not list (CIFS' user.cifs.dosattrib).
const noAttrs = ""

// knownAbsent reports whether attr is known not to exist on n.
func (n *node) knownAbsent(attr string) bool {
	p := n.absent.Load()
	return p != nil && p.gen == n.t.fs.xattrGen() && slices.Contains(p.names, attr)
}

// keepAbsent remembers that attr did not exist on n when asked under gen.
func (n *node) keepAbsent(gen uint64, attr string) {
	if gen != n.t.fs.xattrGen() {
		return // something changed meanwhile
	}
	next := &absentXattrs{gen: gen}
	if p := n.absent.Load(); p != nil && p.gen == gen {
		if slices.Contains(p.names, attr) {
			return
		}
		next.names = append(next.names, p.names...)
		if len(next.names) >= maxAbsent {
			next.names = next.names[1:]
		}
	}
	next.names = append(next.names, attr)
	n.absent.Store(next)
}

// absentCacheable reports whether an answer about the backing file
// slug://rel may be kept and used: the watcher sees every change to it.
func (n *node) absentCacheable(rel string) bool {
	return n.t.fs.watched(n.slug, rel)
}
