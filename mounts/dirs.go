package mounts

import (
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Dirs resolves names below a Root for a caller that visits many of
// them in path order, in a tree whose names nobody changes meanwhile (a
// held layer's own tree, read under its lock): it keeps the descriptor of
// the last folder it resolved, so the names of one folder cost one
// openat2 for the folder, not one each. Names are confined as by the
// Root's own methods: the folder is opened with the same resolve flags,
// and a name is one component, looked up without following a symlink.
type Dirs struct {
	r   *Root
	dir string
	fd  int
}

// Dirs returns a cursor over r's folders; Close releases it.
func (r *Root) Dirs() *Dirs { return &Dirs{r: r, fd: -1} }

// at returns the descriptor of rel's folder (the cursor's) and rel's
// last name.
func (d *Dirs) at(op, rel string) (int, string, error) {
	if err := checkRel(rel); err != nil || rel == "" {
		if err == nil {
			err = unix.EINVAL
		}
		return -1, "", d.r.wrap(op, rel, err)
	}
	dir, name := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if d.fd >= 0 && d.dir == dir {
		return d.fd, name, nil
	}
	d.Close()
	fd, err := d.r.openat(dir, &dirHow)
	if err != nil {
		return -1, "", d.r.wrap(op, rel, err)
	}
	d.dir, d.fd = dir, fd
	return fd, name, nil
}

// Lstat is Root.Lstat through the cursor.
func (d *Dirs) Lstat(rel string) (unix.Stat_t, error) {
	if rel == "" {
		return d.r.Lstat(rel)
	}
	var st unix.Stat_t
	dfd, name, err := d.at("stat", rel)
	if err != nil {
		return st, err
	}
	return st, d.r.wrap("stat", rel, unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW))
}

// Name returns a path to rel through its folder's open descriptor
// (/proc/self/fd/N/name), valid until the cursor moves to another folder
// or is closed, for the calls that take only a path: those that must not
// follow a final symlink (lgetxattr, llistxattr) can use it as safely as
// the Root's own methods. rel must not be "".
func (d *Dirs) Name(rel string) (string, error) {
	dfd, name, err := d.at("open", rel)
	if err != nil {
		return "", err
	}
	return procPath(dfd) + "/" + name, nil
}

// Close releases the folder's descriptor the cursor holds; the cursor
// may be used again.
func (d *Dirs) Close() {
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd, d.dir = -1, ""
	}
}
