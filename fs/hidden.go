package fs

import (
	"syscall"

	"github.com/neuralis/neuralisfs/policy"
)

// Hidden names are neither probeable nor replaceable (issue 14).
//
// A name the caller may not read is absent to it: its lookup answers
// ENOENT, whether or not a file has the name. The kernel then sends a
// create, mkdir, mknod, symlink, link or rename onto that name to the
// daemon as if it were free. Carried out on the backing folder, the answer
// would depend on what is there (EEXIST from mkdir, symlink, link or an
// O_EXCL create; ESTALE from a create over an existing file; a rename
// silently replacing it), so a caller could learn which hidden names
// exist, and destroy what it cannot see. Instead, every operation that
// makes or moves something onto a name first asks hiddenName, which
// answers EACCES from the rule alone, before anything on disk is touched:
// the same answer for a hidden name that exists and for one that does not,
// with write allowed there or denied.

// hiddenName refuses op (create, mkdir, mknod, symlink, link, rename) onto
// slug://rel when the caller may not read that name — a rule denies it
// read, or it lies inside a folder hidden from the caller — with EACCES
// and an audit line naming the rule that hides it. It returns 0 for a name
// the caller may read.
func (t *tree) hiddenName(w who, op, slug, rel string) syscall.Errno {
	if w.s.pol == nil || (w.s.trivial && t.view == "") {
		return 0
	}
	d := w.s.pol.Decide(w.p, slug, rel, policy.Read)
	if d.Allowed && (op == "mkdir" || w.s.pol.LayerFile(slug, rel)) {
		return 0
	}
	t.audit(w, op, uri(slug, rel), d.Rule.Where())
	return syscall.EACCES
}

// hiddenMove is hiddenName for a rename (or exchange) or link of the name
// from onto the name to. The kernel sends it only after the caller's own
// lookup of from succeeded, so a from the caller may not read is answered
// as that lookup would be (ENOENT); a hidden to is refused as hiddenName
// refuses it. (For an exchange the kernel has looked to up as well and
// answers ENOENT itself when that lookup failed, as it does for a free
// name: the daemon sees a hidden to only if the kernel still held it.)
func (t *tree) hiddenMove(w who, op, slug, from, to string) syscall.Errno {
	if errno := t.allow(w, op, slug, from, policy.Read); errno != 0 {
		return errno
	}
	return t.hiddenName(w, op, slug, to)
}
