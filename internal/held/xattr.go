package held

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
)

// Extended attributes (user.*, security.*, trusted.*, POSIX ACLs) travel
// with a file: a copy-up takes the backing file's, so the principal sees
// them and its held copy keeps them; an approval gives the backing file
// the held file's, so it neither drops an ACL nor loses one the principal
// set. Symlinks and special files carry none here.

// readXattrs reads every extended attribute of the file at p (a
// /proc/self/fd path of an open descriptor). A filesystem without them
// has none.
func readXattrs(p string) (map[string][]byte, error) {
	return readXattrsWith(p, unix.Listxattr, unix.Getxattr)
}

// readXattrsNoFollow is readXattrs of the file named p itself, a symlink
// not followed: p is a Dirs.Name.
func readXattrsNoFollow(p string) (map[string][]byte, error) {
	return readXattrsWith(p, unix.Llistxattr, unix.Lgetxattr)
}

func readXattrsWith(p string, list func(string, []byte) (int, error), get func(string, string, []byte) (int, error)) (map[string][]byte, error) {
	var buf []byte
	for size := 1024; ; size *= 4 {
		buf = make([]byte, size)
		n, err := list(p, buf)
		if errors.Is(err, syscall.ERANGE) && size < 1<<20 {
			continue
		}
		if errors.Is(err, syscall.ENOTSUP) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		buf = buf[:n]
		break
	}
	out := map[string][]byte{}
	for _, name := range strings.Split(string(buf), "\x00") {
		if name == "" {
			continue
		}
		v, err := getXattrWith(p, name, get)
		if errors.Is(err, syscall.ENODATA) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

func getXattrWith(p, name string, get func(string, string, []byte) (int, error)) ([]byte, error) {
	for size := 256; ; size *= 4 {
		v := make([]byte, size)
		n, err := get(p, name, v)
		if errors.Is(err, syscall.ERANGE) && size < 1<<20 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return v[:n], nil
	}
}

// writeXattrs gives the file at p the attributes want, removing those of
// have that want lacks.
func writeXattrs(p string, want, have map[string][]byte) error {
	for _, name := range sortedNames(want) {
		if old, ok := have[name]; ok && bytes.Equal(old, want[name]) {
			continue
		}
		if err := unix.Setxattr(p, name, want[name], 0); err != nil {
			return &xattrError{name, err}
		}
	}
	for _, name := range sortedNames(have) {
		if _, ok := want[name]; ok {
			continue
		}
		if err := unix.Removexattr(p, name); err != nil && !errors.Is(err, syscall.ENODATA) {
			return &xattrError{name, err}
		}
	}
	return nil
}

type xattrError struct {
	name string
	err  error
}

func (e *xattrError) Error() string { return "extended attribute " + e.name + ": " + e.err.Error() }
func (e *xattrError) Unwrap() error { return e.err }

func sortedNames(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// xattrDigest names a set of attributes: "" for none.
func xattrDigest(m map[string][]byte) string {
	if len(m) == 0 {
		return ""
	}
	h := sha256.New()
	for _, name := range sortedNames(m) {
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write(m[name])
		h.Write([]byte{0})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// hasXattrs reports whether files of type t (S_IFMT bits) carry
// attributes the layer keeps.
func hasXattrs(t uint32) bool { return t == unix.S_IFREG || t == unix.S_IFDIR }

// xattrsAt reads the attributes of rel in r (none for a symlink or a
// special file).
func xattrsAt(r *mounts.Root, rel string) (map[string][]byte, error) {
	fd, err := r.OpenPath(rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if !hasXattrs(st.Mode & unix.S_IFMT) {
		return nil, nil
	}
	return readXattrs(mounts.ProcPath(fd))
}

// syncXattrs gives rel in to the attributes of rel in from (both regular
// files or folders).
func syncXattrs(from *mounts.Root, fromRel string, to *mounts.Root, toRel string) error {
	want, err := xattrsAt(from, fromRel)
	if err != nil {
		return err
	}
	fd, err := to.OpenPath(toRel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	have, err := readXattrs(mounts.ProcPath(fd))
	if err != nil {
		return err
	}
	return writeXattrs(mounts.ProcPath(fd), want, have)
}
