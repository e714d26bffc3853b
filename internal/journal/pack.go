package journal

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// packsName is the folder (under Options.Dir) of packs: write-once files
// that each hold many small objects, so a burst of new content costs one
// file, one fsync and one link instead of one of each per object.
//
// A pack is published exactly as an object is (a tmp- file opened with
// O_EXCL, fsync, a non-replacing link under the SHA-256 of the whole
// file, removal of the tmp- name, fsync of packs/). Its layout:
//
//	"neuralisfs pack v1\n"
//	the objects' bytes, one after another
//	an index: per object its SHA-256 (32 bytes), offset and length
//	(8 bytes each, big-endian)
//	a footer: the index's offset and the object count (8 bytes each),
//	then "NFSPACK1"
//
// An object in a pack is read, re-hashed and proved exactly as one under
// objects/ (its bytes at its offset; the proof is remembered under the
// pack file's key), and a pack is evicted as one: its objects are used
// together (they were new in the same burst), and removing the file is
// what frees their bytes.
const packsName = "packs"

const (
	packMagic     = "neuralisfs pack v1\n"
	packTrailer   = "NFSPACK1"
	packEntryLen  = sha256.Size + 8 + 8
	packFooterLen = 8 + 8 + len(packTrailer)
	// packMin is the fewest new copies a batch packs; fewer are stored
	// under objects/.
	packMin = 2
	// packMax bounds the object bytes in one pack: a larger batch writes
	// several. A pack is also at most a sixteenth of MaxBytes, so that
	// evicting one (a pack goes whole) never takes much more than needed.
	packMax = 4 << 20
)

// pack is one file under packs/ that holds objects the journal knows.
type pack struct {
	name string // hex SHA-256 of the file
	live int    // entries of j.objects in it; at 0 the file is removed
}

// packed is one object of a pack being written.
type packed struct {
	hx   string
	data []byte
	off  int64
}

// encodePack lays objs out as a pack (setting each off) in buf's memory
// when it is large enough, and returns it.
func encodePack(buf []byte, objs []*packed) []byte {
	size := len(packMagic) + len(objs)*packEntryLen + packFooterLen
	for _, o := range objs {
		size += len(o.data)
	}
	b := buf[:0]
	if cap(b) < size {
		// Grow by at least double: batches of a burst differ a little in
		// size, and growing to each one exactly made a fresh (zeroed,
		// page-faulted) buffer for most packs.
		b = make([]byte, 0, max(size, 2*cap(b)))
	}
	b = append(b, packMagic...)
	for _, o := range objs {
		o.off = int64(len(b))
		b = append(b, o.data...)
	}
	idx := len(b)
	for _, o := range objs {
		sum, _ := hex.DecodeString(o.hx)
		b = append(b, sum...)
		b = binary.BigEndian.AppendUint64(b, uint64(o.off))
		b = binary.BigEndian.AppendUint64(b, uint64(len(o.data)))
	}
	b = binary.BigEndian.AppendUint64(b, uint64(idx))
	b = binary.BigEndian.AppendUint64(b, uint64(len(objs)))
	return append(b, packTrailer...)
}

// packEntry is one object as a pack's index lists it.
type packEntry struct {
	hx       string
	off, len int64
}

// readPackIndex reads the index of the pack file f (size bytes). An index
// that does not fit the file is an error; the objects' bytes are not read
// (they are re-hashed whenever they are used).
func readPackIndex(f *os.File, size int64) ([]packEntry, error) {
	if size < int64(len(packMagic)+packFooterLen) {
		return nil, errors.New("too short for a pack")
	}
	foot := make([]byte, packFooterLen)
	if _, err := f.ReadAt(foot, size-int64(packFooterLen)); err != nil {
		return nil, err
	}
	if string(foot[16:]) != packTrailer {
		return nil, errors.New("no pack footer")
	}
	idx, count := binary.BigEndian.Uint64(foot), binary.BigEndian.Uint64(foot[8:])
	end := uint64(size) - uint64(packFooterLen)
	if idx < uint64(len(packMagic)) || idx > end || (end-idx)%packEntryLen != 0 || (end-idx)/packEntryLen != count {
		return nil, errors.New("pack index does not fit the file")
	}
	raw := make([]byte, end-idx)
	if _, err := f.ReadAt(raw, int64(idx)); err != nil {
		return nil, err
	}
	out := make([]packEntry, 0, count)
	for e := raw; len(e) > 0; e = e[packEntryLen:] {
		off, n := binary.BigEndian.Uint64(e[32:]), binary.BigEndian.Uint64(e[40:])
		if off < uint64(len(packMagic)) || off > idx || n > idx-off {
			return nil, errors.New("pack index names bytes outside the objects")
		}
		out = append(out, packEntry{hx: hex.EncodeToString(e[:32]), off: int64(off), len: int64(n)})
	}
	return out, nil
}

// writePack publishes objs as one pack and makes each a known object
// pinned once per job that holds it (uses[hx]), as publishAs does for one
// object. packs/ is fsynced before it returns. On an error nothing is
// known and the caller stores the objects one by one.
func (j *Journal) writePack(objs []*packed, uses map[string]int) error {
	// One buffer for every pack (only the publisher writes packs): a pack
	// of up to packMax bytes each time would otherwise be most of the
	// daemon's garbage during a burst, and each collection it brings
	// empties the FUSE server's buffer pools too.
	b := encodePack(j.packBuf, objs)
	if cap(b) <= 2*packMax {
		j.packBuf = b
	}
	sum := sha256.Sum256(b)
	name := hex.EncodeToString(sum[:])
	tmp, _, err := j.writeTemp(nil, b, nil, int64(len(b)))
	if err != nil {
		return err
	}
	defer func() {
		j.step("remove pack tmp")
		if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			j.log.Warn("journal: could not remove a copy", "name", tmp, "err", rerr)
		}
	}()
	j.step("link pack")
	if err := os.Link(tmp, filepath.Join(j.dir, packsName, name)); err != nil {
		// EEXIST: the very same pack is stored already, so its objects
		// are known, or it is one Open left alone; either way the
		// caller's one-by-one path sorts the objects out.
		return fmt.Errorf("publish pack %s: %w", name, err)
	}
	j.step("fsync packs")
	if err := j.packFD.Sync(); err != nil {
		// The pack stays (write-once); its objects stay unknown, and
		// Open removes it as a pack no record uses.
		return fmt.Errorf("journal: fsync packs: %w", err)
	}
	p := &pack{name: name}
	j.mu.Lock()
	for _, o := range objs {
		if x := j.objects[o.hx]; x != nil {
			// Published meanwhile by a Save: pin that one. Its bytes
			// here are dead until the pack goes.
			x.pins += uses[o.hx]
			continue
		}
		j.objects[o.hx] = &object{size: int64(len(o.data)), pins: uses[o.hx], pack: p, off: o.off}
		j.total += int64(len(o.data))
		p.live++
	}
	j.mu.Unlock()
	return nil
}

// packBatch stores the in-memory copies of batch that the journal does
// not hold yet in packs, when there are at least packMin of them, and
// fills ps[i] for every job it settled (a copy stored already is reused
// here too). Jobs it leaves (ps[i] nil) go through publishOne.
func (j *Journal) packBatch(batch []*job, ps []*pending) {
	var todo []int
	for i, jb := range batch {
		if jb.data != nil && jb.hx != "" {
			todo = append(todo, i)
		}
	}
	if len(todo) < packMin {
		return
	}
	j.step("store staged copy")
	var objs []*packed
	uses := map[string]int{}
	var mine []int // jobs whose object goes into a pack
	for _, i := range todo {
		jb := batch[i]
		n := int64(len(jb.data))
		if uses[jb.hx] > 0 {
			uses[jb.hx]++
			mine = append(mine, i)
			continue
		}
		ok, err := j.reuse(jb.hx, n)
		if ok || err != nil {
			ps[i] = j.settle(jb.rec, jb.hx, n, false, err)
			continue
		}
		uses[jb.hx] = 1
		objs = append(objs, &packed{hx: jb.hx, data: jb.data})
		mine = append(mine, i)
	}
	if len(objs) < packMin {
		return
	}
	// Split into packs of at most packMax object bytes (and a sixteenth
	// of MaxBytes).
	limit := int(min(packMax, j.maxBytes.Load()/16))
	stored := map[string]bool{}
	for len(objs) > 0 {
		k, sum := 0, 0
		for k < len(objs) && (k == 0 || sum+len(objs[k].data) <= limit) {
			sum += len(objs[k].data)
			k++
		}
		j.step("write pack")
		if err := j.writePack(objs[:k], uses); err != nil {
			j.log.Warn("journal: could not write a pack, storing its copies one by one", "err", err)
		} else {
			for _, o := range objs[:k] {
				stored[o.hx] = true
			}
		}
		objs = objs[k:]
	}
	for _, i := range mine {
		jb := batch[i]
		if stored[jb.hx] {
			ps[i] = j.settle(jb.rec, jb.hx, int64(len(jb.data)), false, nil)
		}
	}
}

// unpack forgets o, an object of a pack evicted or dropped, and removes
// the pack file once it holds nothing the journal knows. Holds mu.
func (j *Journal) unpack(o *object) {
	p := o.pack
	p.live--
	if p.live > 0 {
		return
	}
	if err := unix.Unlinkat(j.packDirFD, p.name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		// Its objects are forgotten; Open removes it next time.
		j.log.Warn("journal: could not remove a pack", "pack", p.name, "err", err)
	}
}

// scanPacks adds the objects of packs/ that kept records use (want: their
// newest record's seq) and the journal does not know yet, and removes
// packs none of whose objects is used. A pack whose index cannot be read
// is left as it is (the journal never repairs an entry), and its objects
// stay unknown.
func (j *Journal) scanPacks(want map[string]uint64) error {
	ents, err := os.ReadDir(filepath.Join(j.dir, packsName))
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if !isHex(name) {
			j.log.Warn("journal: unexpected file in packs, left alone", "name", name)
			continue
		}
		path := filepath.Join(j.dir, packsName, name)
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		st, err := f.Stat()
		var index []packEntry
		if err == nil {
			index, err = readPackIndex(f, st.Size())
		}
		f.Close()
		if err != nil {
			j.log.Warn("journal: unreadable pack left as it is; records using it are reported not kept", "pack", name, "err", err)
			continue
		}
		p := &pack{name: name}
		for _, pe := range index {
			last, used := want[pe.hx]
			if !used || j.objects[pe.hx] != nil {
				continue
			}
			j.objects[pe.hx] = &object{size: pe.len, lastSeq: last, pack: p, off: pe.off}
			j.total += pe.len
			p.live++
		}
		if p.live == 0 {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("journal: remove unused pack %s: %w", name, err)
			}
			j.log.Info("journal: removed a pack no record uses", "pack", name)
		}
	}
	return nil
}
