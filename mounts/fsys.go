package mounts

import (
	"io"
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
	// The daemon's own reads (the index) are not reads by anyone using
	// the folder.
	fd, err := r.OpenNoAtime(rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, &iofs.PathError{Op: "open", Path: name, Err: Errno(err)}
	}
	return &file{File: os.NewFile(uintptr(fd), name), fd: fd}, nil
}

// file is an open file or folder of a source. Its ReadDir stats entries
// relative to the folder's descriptor: os.File's own DirEntry.Info would
// lstat by name, relative to the process's working folder.
type file struct {
	*os.File
	fd   int
	done bool
	ents []iofs.DirEntry
}

func (f *file) Stat() (iofs.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstat(f.fd, &st); err != nil {
		return nil, &iofs.PathError{Op: "stat", Path: f.Name(), Err: err}
	}
	base := f.Name()
	if i := lastSlash(base); i >= 0 {
		base = base[i+1:]
	}
	return FileInfo(base, &st), nil
}

func (f *file) ReadDir(n int) ([]iofs.DirEntry, error) {
	if !f.done {
		names, _ := readDirTypes(f.fd)
		f.done = true
		for _, name := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(f.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue // gone meanwhile
			}
			f.ents = append(f.ents, iofs.FileInfoToDirEntry(FileInfo(name, &st)))
		}
	}
	if n <= 0 {
		out := f.ents
		f.ents = nil
		return out, nil
	}
	if len(f.ents) == 0 {
		return nil, io.EOF
	}
	k := min(n, len(f.ents))
	out := f.ents[:k]
	f.ents = f.ents[k:]
	return out, nil
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
	fl, err := f.Open(name)
	if err != nil {
		return nil, err
	}
	defer fl.Close()
	ents, err := fl.(*file).ReadDir(-1)
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
