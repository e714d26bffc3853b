package gitfs

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
)

// A packed object that is a delta is made from its base, which go-git
// reads whole first, and the base may be a delta of another: the size
// the pack gives for the object (what bounded checks) says nothing of
// them. A repository anyone may write can hold a small commit made from a
// base "commit" of hundreds of MiB of zeros, a few hundred KiB in the
// pack: each .status of it would inflate the base whole. So before go-git
// reads a packed object, its chain of bases is walked in the pack, from
// each object's header (and a delta's own header, the first bytes of its
// data), and refused when any of them is past the object's bound or the
// chain is deeper than git ever makes one. What was walked is kept, so an
// object shared by many chains (as bases are) is walked once.

// maxDeltaDepth bounds a chain of deltas: git's pack-objects makes them
// at most 4095 deep (--depth), 50 by default.
const maxDeltaDepth = 4095

// packBound walks the delta chains of one repository's packs. Guarded by
// Repo.objMu, as the packWatch that holds it.
type packBound struct {
	dir   string
	key   fileKey
	packs []*packIdx // by name, of the listing at key
}

// packIdx is one pack: its index, mapped, and the offsets whose chains
// were walked, with the largest size found on each.
type packIdx struct {
	pack  string // path of the .pack
	idx   []byte // the .idx, mapped read-only; nil once unmapped
	n     int    // objects in it
	walks map[int64]int64
}

// alternate returns the packBound of the alternate object store a
// (go-git reads its packs from objects/pack below a's folder). At most
// maxAlternates are kept; past that they are walked afresh.
func (w *packWatch) alternate(a *dotgit.DotGit) *packBound {
	dir := filepath.Join(a.Fs().Root(), "objects", "pack")
	if b, ok := w.alts[dir]; ok {
		return b
	}
	if w.alts == nil || len(w.alts) >= maxAlternates {
		w.alts = map[string]*packBound{}
	}
	b := &packBound{dir: dir}
	w.alts[dir] = b
	return b
}

// maxAlternates bounds the alternate object stores whose packs a
// repository keeps mapped.
const maxAlternates = 16

// maxWalked bounds the offsets a pack remembers; past it they are
// forgotten and walked again when asked.
const maxWalked = 1 << 20

// check returns ErrObjectTooLarge when the chain of the packed object h
// holds an object past limit (or is too deep), and nil when it does not,
// or when h is in none of the packs this walks (go-git reads it as it
// would have).
func (b *packBound) check(h plumbing.Hash, limit int64) error {
	b.relist()
	for _, p := range b.packs {
		off, ok := p.find(h)
		if !ok {
			continue
		}
		biggest, err := p.chain(off, limit)
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		if biggest > limit {
			return fmt.Errorf("object %s: made from a delta base of %d bytes, more than the %d MiB read: %w", h, biggest, limit>>20, ErrObjectTooLarge)
		}
		return nil
	}
	return nil
}

// relist maps the indexes of the packs in b.dir again when the folder
// changed since the last listing.
func (b *packBound) relist() {
	k := statKey(b.dir)
	if k == b.key {
		return
	}
	b.key = k
	old := map[string]*packIdx{}
	for _, p := range b.packs {
		old[p.pack] = p
	}
	b.packs = nil
	ents, _ := os.ReadDir(b.dir)
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "pack-") || !strings.HasSuffix(name, ".idx") {
			continue
		}
		pack := filepath.Join(b.dir, strings.TrimSuffix(name, ".idx")+".pack")
		if p, ok := old[pack]; ok {
			b.packs = append(b.packs, p)
			delete(old, pack)
			continue
		}
		if p := mapIdx(filepath.Join(b.dir, name), pack); p != nil {
			b.packs = append(b.packs, p)
		}
	}
	for _, p := range old {
		p.unmap()
	}
	sort.Slice(b.packs, func(i, j int) bool { return b.packs[i].pack < b.packs[j].pack })
}

// mapIdx maps a version 2 pack index, or returns nil (an index of another
// version, or one cut short, is left to go-git).
func mapIdx(path, pack string) *packIdx {
	f, err := openRegular(path, true)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() < 8+256*4+40 || fi.Size() > 1<<40 {
		return nil
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil
	}
	n := int64(binary.BigEndian.Uint32(m[8+255*4:]))
	// The header, the hashes, CRCs and offsets, the two trailing
	// hashes; large offsets between the last two.
	if !bytes.Equal(m[:8], []byte{0xff, 't', 'O', 'c', 0, 0, 0, 2}) || int64(8+256*4)+n*(20+4+4)+40 > fi.Size() {
		syscall.Munmap(m)
		return nil
	}
	p := &packIdx{pack: pack, idx: m, n: int(n), walks: map[int64]int64{}}
	// The mapping goes with the packIdx when nothing holds it any more
	// (a Repo dropped): relist unmaps the ones that leave the listing.
	runtime.AddCleanup(p, func(m []byte) { syscall.Munmap(m) }, m)
	return p
}

// unmap drops the mapping of a pack that left the listing. The cleanup
// added at mapIdx is for those never unmapped so: a mapping is dropped
// once, by whichever comes first; here, m is only forgotten (the cleanup
// holds its own reference and unmaps it when p is collected).
func (p *packIdx) unmap() { p.idx = nil }

// find returns the offset of h in the pack.
func (p *packIdx) find(h plumbing.Hash) (int64, bool) {
	m := p.idx
	if m == nil {
		return 0, false
	}
	fan := func(i int) int { return int(binary.BigEndian.Uint32(m[8+i*4:])) }
	lo, hi := 0, fan(int(h[0]))
	if h[0] > 0 {
		lo = fan(int(h[0]) - 1)
	}
	if lo > hi || hi > p.n {
		return 0, false
	}
	const hashes = 8 + 256*4
	i := lo + sort.Search(hi-lo, func(i int) bool {
		return bytes.Compare(m[hashes+(lo+i)*20:hashes+(lo+i)*20+20], h[:]) >= 0
	})
	if i >= hi || !bytes.Equal(m[hashes+i*20:hashes+i*20+20], h[:]) {
		return 0, false
	}
	offs := hashes + p.n*24
	o := binary.BigEndian.Uint32(m[offs+i*4:])
	if o&0x80000000 == 0 {
		return int64(o), true
	}
	large := offs + p.n*4 + int(o&0x7fffffff)*8
	if large+8 > len(m)-40 {
		return 0, false
	}
	v := binary.BigEndian.Uint64(m[large:])
	runtime.KeepAlive(p) // m is unmapped when p is collected
	return int64(v), v < 1<<62
}

// errBadPack: the pack does not read as git writes one; go-git will say
// how when it reads the object.
var errBadPack = errors.New("pack entry unreadable")

// chain walks the chain of bases from the object at off and returns the
// largest size among them (stopping early once one passes limit), from
// what earlier walks found where this one meets them.
func (p *packIdx) chain(off, limit int64) (int64, error) {
	if s, ok := p.walks[off]; ok {
		return s, nil
	}
	f, err := openRegular(p.pack, true)
	if err != nil {
		return 0, nil // go-git will say why
	}
	defer f.Close()
	var (
		walked        []int64
		sizes         []int64
		biggest, tail int64
		zr            io.ReadCloser
	)
	defer func() {
		if zr != nil {
			zr.Close()
		}
	}()
	for depth := 0; ; depth++ {
		if s, ok := p.walks[off]; ok {
			biggest, tail = max(biggest, s), s
			break
		}
		if depth > maxDeltaDepth {
			return 0, fmt.Errorf("a chain of deltas deeper than %d: %w", maxDeltaDepth, ErrObjectTooLarge)
		}
		e, err := readEntry(f, off)
		if err != nil {
			return 0, nil
		}
		size := e.size
		if e.delta {
			src, dst, err := deltaSizes(f, e.data, &zr)
			if err != nil {
				return 0, nil
			}
			size = max(src, dst) // src is what the base must be; go-git checks after it read it
		}
		walked, sizes = append(walked, off), append(sizes, size)
		biggest = max(biggest, size)
		if biggest > limit || !e.delta {
			break
		}
		if e.ref != nil {
			base, ok := p.find(*e.ref)
			if !ok {
				break // go-git finds a base in its own pack only
			}
			off = base
		} else {
			off = e.base
		}
	}
	// What each walked entry's chain holds at most: its own size and
	// everything below it, down to where an earlier walk was met (tail).
	if biggest <= limit {
		if len(p.walks)+len(walked) > maxWalked {
			clear(p.walks)
		}
		below := tail
		for i := len(walked) - 1; i >= 0; i-- {
			below = max(below, sizes[i])
			p.walks[walked[i]] = below
		}
	}
	runtime.KeepAlive(p)
	return biggest, nil
}

// packEntry is a pack entry's header.
type packEntry struct {
	size  int64 // the object's size, or a delta's own
	delta bool
	base  int64          // an offset delta's base
	ref   *plumbing.Hash // a reference delta's base
	data  int64          // where its compressed data starts
}

// readEntry reads the header of the pack entry at off.
func readEntry(f *os.File, off int64) (packEntry, error) {
	var b [32]byte
	n, err := f.ReadAt(b[:], off)
	if n < 2 && err != nil {
		return packEntry{}, errBadPack
	}
	buf := b[:n]
	i := 0
	next := func() (byte, bool) {
		if i >= len(buf) {
			return 0, false
		}
		i++
		return buf[i-1], true
	}
	c, _ := next()
	typ := (c >> 4) & 7
	size := int64(c & 15)
	for shift := 4; c&0x80 != 0; shift += 7 {
		var ok bool
		if c, ok = next(); !ok || shift > 56 {
			return packEntry{}, errBadPack
		}
		size |= int64(c&0x7f) << shift
	}
	e := packEntry{size: size}
	switch typ {
	case 1, 2, 3, 4:
	case 6: // OFS_DELTA
		c, ok := next()
		if !ok {
			return packEntry{}, errBadPack
		}
		rel := int64(c & 0x7f)
		for c&0x80 != 0 {
			if c, ok = next(); !ok || rel > 1<<55 {
				return packEntry{}, errBadPack
			}
			rel = (rel+1)<<7 | int64(c&0x7f)
		}
		if rel <= 0 || rel > off {
			return packEntry{}, errBadPack
		}
		e.delta, e.base = true, off-rel
	case 7: // REF_DELTA
		if i+20 > len(buf) {
			return packEntry{}, errBadPack
		}
		var h plumbing.Hash
		copy(h[:], buf[i:i+20])
		i += 20
		e.delta, e.ref = true, &h
	default:
		return packEntry{}, errBadPack
	}
	e.data = off + int64(i)
	return e, nil
}

// deltaSizes inflates the start of a delta at data and returns the sizes
// its header gives: of its base, and of what it makes. zr is reused from
// one call to the next.
func deltaSizes(f *os.File, data int64, zr *io.ReadCloser) (src, dst int64, err error) {
	r := io.NewSectionReader(f, data, 1<<62)
	if *zr == nil {
		if *zr, err = zlib.NewReader(r); err != nil {
			return 0, 0, err
		}
	} else if err = (*zr).(zlib.Resetter).Reset(r, nil); err != nil {
		return 0, 0, err
	}
	var hdr [20]byte
	n, _ := io.ReadFull(*zr, hdr[:])
	v := hdr[:n]
	src, k := uvarint(v)
	if k <= 0 {
		return 0, 0, errBadPack
	}
	dst, k2 := uvarint(v[k:])
	if k2 <= 0 {
		return 0, 0, errBadPack
	}
	return src, dst, nil
}

// uvarint reads a delta header's size (little-endian base 128).
func uvarint(b []byte) (int64, int) {
	var v uint64
	for i, c := range b {
		if i > 8 {
			return 0, -1
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return int64(v), i + 1
		}
	}
	return 0, 0
}
