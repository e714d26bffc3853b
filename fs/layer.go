package fs

import (
	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/mounts"
)

// A layer ([[layer]]) is a source of its own whose root is its source's
// folder: the same backing file shows under two slugs, at the same path.
// Each slug gets its own inodes (a node knows its slug, and go-fuse would
// merge two nodes with one inode number), so the kernel caches each
// separately and a change through one slug must be invalidated under
// every other slug that shows the file (alsoShown).

// layerDev is the device number the inode numbering uses for a file of
// src found on dev: a device of the source's own (by its slug), so that
// its files get inode numbers of their own. A layer's files are the same
// backing files as its source's, and so are those of two sources over
// one folder, or one inside the other's (a checkout and a source of one
// of its subfolders): with one inode number go-fuse kept one node for
// both slugs, and the slug that looked a folder up second answered
// ENOENT there (found by a differential pass). The slug, not the
// source's place in the config, keeps a source's numbers through a
// reload that adds or removes another.
func layerDev(src *mounts.Source, dev uint64) uint64 {
	if src == nil {
		return dev
	}
	// FNV-1a of the slug, without hash.Hash's allocation (every stat).
	h := uint64(14695981039346656037)
	for i := 0; i < len(src.Config.Slug); i++ {
		h ^= uint64(src.Config.Slug[i])
		h *= 1099511628211
	}
	return dev ^ (h | 1<<63)
}

// layerShows reports whether slug://rel, of type mode (S_IFMT bits), is
// part of its layer: a folder on the way to what the layer includes is;
// anything else must be included itself (policy.Set.LayerFile). Always
// true outside layers.
func layerShows(s *state, slug, rel string, mode uint32) bool {
	return s.pol == nil || mode&unix.S_IFMT == unix.S_IFDIR || s.pol.LayerFile(slug, rel)
}

// ino is the inode number of the backing file st in n's source.
func (n *node) ino(st *unix.Stat_t) uint64 {
	return n.t.fs.ino(layerDev(n.src, st.Dev), st.Ino)
}

// alsoShown makes changes the mount made through slug visible under the
// other slugs that show the same backing files (its source, its layers):
// their kernel caches are invalidated and their index documents and git
// state told, as for a change seen on disk. It runs in the background:
// invalidations are never sent from inside a request.
func (f *FS) alsoShown(slug string, changes ...mounts.Change) {
	s := f.state()
	src := s.srcs[slug]
	if src == nil {
		return
	}
	base := src.Config.Layer
	if base == "" {
		base = slug
	}
	var out []mounts.Change
	for _, other := range s.order {
		if other != slug && (other == base || s.srcs[other].Config.Layer == base) {
			out = s.layerCopies(out, other, changes)
		}
	}
	if len(out) > 0 {
		go f.applyTo(out, true)
	}
}

// withLayers adds to changes seen on a source's folder (by the watcher,
// which watches each folder once, under its source's slug) the same
// changes for the source's layers that show the path.
func (s *state) withLayers(changes []mounts.Change) []mounts.Change {
	out := changes
	for _, slug := range s.order {
		l := s.srcs[slug].Config.Layer
		if l == "" {
			continue
		}
		var mine []mounts.Change
		for _, c := range changes {
			if c.Slug == l {
				mine = append(mine, c)
			}
		}
		if len(mine) > 0 {
			if len(out) == len(changes) {
				out = append([]mounts.Change(nil), changes...)
			}
			out = s.layerCopies(out, slug, mine)
		}
	}
	return out
}

// layerCopies appends changes, as changes under slug, to out: those whose
// path slug shows.
func (s *state) layerCopies(out []mounts.Change, slug string, changes []mounts.Change) []mounts.Change {
	for _, c := range changes {
		if !c.Rescan && s.pol != nil && !s.pol.LayerMember(slug, c.Rel) {
			continue
		}
		c.Slug = slug
		out = append(out, c)
	}
	return out
}
