package mounts

import (
	iofs "io/fs"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// FS returns the source as a read-only io/fs.FS (for the index and for
// scans), confined like every other access: no symlink is followed, and a
// symlink is reported as one (Stat does not follow it either).
func (s *Source) FS() iofs.FS { return sourceFS{s} }

type sourceFS struct{ s *Source }

func fsPath(name string) (string, error) {
	if !iofs.ValidPath(name) {
		return "", iofs.ErrInvalid
	}
	if name == "." {
		return "", nil
	}
	return name, nil
}

func (f sourceFS) Open(name string) (iofs.File, error) {
	rel, err := fsPath(name)
	if err != nil {
		return nil, &iofs.PathError{Op: "open", Path: name, Err: err}
	}
	r, err := f.s.Root()
	if err != nil {
		return nil, &iofs.PathError{Op: "open", Path: name, Err: err}
	}
	fd, err := r.Open(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &iofs.PathError{Op: "open", Path: name, Err: Errno(err)}
	}
	return os.NewFile(uintptr(fd), name), nil
}

func (f sourceFS) Stat(name string) (iofs.FileInfo, error) {
	rel, err := fsPath(name)
	if err != nil {
		return nil, &iofs.PathError{Op: "stat", Path: name, Err: err}
	}
	r, err := f.s.Root()
	if err != nil {
		return nil, &iofs.PathError{Op: "stat", Path: name, Err: err}
	}
	st, err := r.Lstat(rel)
	if err != nil {
		return nil, &iofs.PathError{Op: "stat", Path: name, Err: Errno(err)}
	}
	base := name
	if i := lastSlash(name); i >= 0 {
		base = name[i+1:]
	}
	return FileInfo(base, &st), nil
}

func (f sourceFS) ReadDir(name string) ([]iofs.DirEntry, error) {
	file, err := f.Open(name)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	ents, err := file.(*os.File).ReadDir(-1)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ents, func(a, b iofs.DirEntry) int {
		switch {
		case a.Name() < b.Name():
			return -1
		case a.Name() > b.Name():
			return 1
		}
		return 0
	})
	return ents, nil
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

// FileInfo turns a stat result into an io/fs.FileInfo.
func FileInfo(name string, st *unix.Stat_t) iofs.FileInfo {
	return statInfo{name: name, st: *st}
}

type statInfo struct {
	name string
	st   unix.Stat_t
}

func (i statInfo) Name() string { return i.name }
func (i statInfo) Size() int64  { return i.st.Size }
func (i statInfo) Mode() iofs.FileMode {
	m := iofs.FileMode(i.st.Mode & 0777)
	switch i.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= iofs.ModeDir
	case unix.S_IFLNK:
		m |= iofs.ModeSymlink
	case unix.S_IFIFO:
		m |= iofs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= iofs.ModeSocket
	case unix.S_IFCHR:
		m |= iofs.ModeDevice | iofs.ModeCharDevice
	case unix.S_IFBLK:
		m |= iofs.ModeDevice
	}
	if i.st.Mode&unix.S_ISUID != 0 {
		m |= iofs.ModeSetuid
	}
	if i.st.Mode&unix.S_ISGID != 0 {
		m |= iofs.ModeSetgid
	}
	if i.st.Mode&unix.S_ISVTX != 0 {
		m |= iofs.ModeSticky
	}
	return m
}
func (i statInfo) ModTime() time.Time { return time.Unix(i.st.Mtim.Sec, i.st.Mtim.Nsec) }
func (i statInfo) IsDir() bool        { return i.st.Mode&unix.S_IFMT == unix.S_IFDIR }
func (i statInfo) Sys() any           { return &i.st }
