package gitfs

import (
	"errors"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
)

// ErrObjectTooLarge is returned for an object past what this package
// reads (maxObject, maxLooseObject).
var ErrObjectTooLarge = errors.New("object too large")

// maxObject bounds the commits, trees and tags (and objects of a type not
// asked for) that this package reads into memory. Real ones are
// kilobytes: a tree lists a folder at about 50 bytes a name, so a folder
// of 100,000 files makes a tree of some 5 MiB, and 16 MiB is a third of a
// million names in one folder. A repository anyone may write (an agent's
// own git init in a view) can hold a compressed object that inflates to
// hundreds of MiB from a file of a few (400 MB of zeros is a 1.7 MB loose
// object), and go-git reads an object whole, and a loose one until its
// stream ends whatever its header says: one .status of such a commit took
// 16 s and 1.9 GB, three at once 3.7 GB.
const maxObject = 16 << 20

// maxLooseObject bounds the blobs readLoose reads into memory.
const maxLooseObject = 512 << 20

// objectLimit is the bound for an object asked for as type t.
func objectLimit(t plumbing.ObjectType) int64 {
	if t == plumbing.BlobObject {
		return maxLooseObject
	}
	return maxObject
}

// readLoose reads the loose object h (zlib-compressed "<type> <size>\0"
// and content) from f, asked for as type t (plumbing.AnyObject for any).
// It checks the header before inflating the content: an object of
// another type is plumbing.ErrObjectNotFound (as go-git answers), and one
// past objectLimit(t) is refused with ErrObjectTooLarge; it inflates no
// more than the size the header gives, and refuses an object whose
// content runs past it or hashes to another id.
func readLoose(f io.Reader, h plumbing.Hash, t plumbing.ObjectType) (plumbing.EncodedObject, error) {
	hex := h.String()
	zr, ot, size, err := looseHeader(f, h)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	if t != plumbing.AnyObject && ot != t {
		return nil, plumbing.ErrObjectNotFound
	}
	if lim := objectLimit(t); size < 0 || size > lim {
		return nil, fmt.Errorf("object %s: a %s of %d bytes, more than the %d MiB read: %w", hex, ot, size, lim>>20, ErrObjectTooLarge)
	}
	o := &plumbing.MemoryObject{}
	o.SetType(ot)
	o.SetSize(size)
	w, err := o.Writer()
	if err != nil {
		return nil, err
	}
	if _, err := io.CopyN(w, zr, size); err != nil {
		return nil, fmt.Errorf("object %s: %w", hex, err)
	}
	if n, _ := zr.Read(make([]byte, 1)); n > 0 {
		return nil, fmt.Errorf("object %s: content runs past the %d bytes its header gives", hex, size)
	}
	if o.Hash() != h {
		return nil, fmt.Errorf("object %s: content hashes to %s", hex, o.Hash())
	}
	return o, nil
}

// looseHeader starts inflating the loose object h in f and reads its
// header; the caller closes zr.
func looseHeader(f io.Reader, h plumbing.Hash) (zr *objfile.Reader, ot plumbing.ObjectType, size int64, err error) {
	zr, err = objfile.NewReader(f)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("object %s: %w", h, err)
	}
	if ot, size, err = zr.Header(); err != nil {
		zr.Close()
		return nil, 0, 0, fmt.Errorf("object %s: %w", h, err)
	}
	return zr, ot, size, nil
}

// headerOnly asks looseObject for an object's type and size only.
const headerOnly = plumbing.InvalidObject

// readLooseHeader returns the loose object h in f with its type and size
// and no content, inflating only the header.
func readLooseHeader(f io.Reader, h plumbing.Hash) (plumbing.EncodedObject, error) {
	zr, ot, size, err := looseHeader(f, h)
	if err != nil {
		return nil, err
	}
	zr.Close()
	o := &plumbing.MemoryObject{}
	o.SetType(ot)
	o.SetSize(size)
	return o, nil
}

// bounded reads h for EncodedObject within objectLimit(t) before go-git
// sees it: a loose object in the storage's own objects folder, or in an
// alternate's, is read by readLoose (go-git would inflate it whole); for
// one packed in the storage's own packs, the size the pack gives (for a
// delta, the size of what it makes) is checked, and so is every base it
// is made from (packBound), and go-git reads it (done false, as for an
// object not found).
func (s objectStore) bounded(t plumbing.ObjectType, h plumbing.Hash) (o plumbing.EncodedObject, done bool, err error) {
	if s.dir == nil {
		return nil, false, nil
	}
	if o, done, err := looseIn(s.dir, t, h); done {
		return o, true, err
	}
	n, err := s.Storage.EncodedObjectSize(h)
	if err == nil {
		if t != plumbing.BlobObject && n > maxObject {
			return nil, true, fmt.Errorf("object %s: %d bytes, more than the %d MiB read: %w", h, n, maxObject>>20, ErrObjectTooLarge)
		}
		if s.packs != nil {
			if err := s.packs.bound.check(h, objectLimit(t)); err != nil {
				return nil, true, err
			}
		}
		return nil, false, nil
	}
	// Not in the storage's own objects: go-git looks in the alternates
	// next, where the chain that makes a packed object is walked too
	// (its own size is the first in it).
	if alts, err := s.dir.Alternates(); err == nil {
		for _, a := range alts {
			if o, done, err := looseIn(a, t, h); done {
				return o, true, err
			}
			if s.packs == nil {
				continue
			}
			if err := s.packs.alternate(a).check(h, objectLimit(t)); err != nil {
				return nil, true, err
			}
		}
	}
	return nil, false, nil
}

// looseIn reads h with readLoose when dir holds it as a loose object
// (done true); done false when it does not.
func looseIn(dir *dotgit.DotGit, t plumbing.ObjectType, h plumbing.Hash) (o plumbing.EncodedObject, done bool, err error) {
	f, err := dir.Object(h)
	if err != nil {
		return nil, false, nil
	}
	defer f.Close()
	o, err = readLoose(f, h, t)
	return o, true, err
}
