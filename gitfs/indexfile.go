package gitfs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// entry is one index entry, as git's read-cache.c keeps it.
type entry struct {
	Name  string
	Hash  plumbing.Hash
	Mode  filemode.FileMode
	Stage uint8
	Size  uint32
	// Stat data as recorded: seconds and nanoseconds of ctime and mtime,
	// device, inode, owner (each truncated to 32 bits, as git does).
	CtimeSec, CtimeNsec uint32
	MtimeSec, MtimeNsec uint32
	Dev, Inode          uint32
	UID, GID            uint32

	AssumeValid  bool // CE_VALID: git update-index --assume-unchanged
	SkipWorktree bool // CE_SKIP_WORKTREE: sparse checkout, --skip-worktree
	IntentToAdd  bool // CE_INTENT_TO_ADD: git add -N
}

// sparseDirMode is the mode of a sparse-directory entry of a sparse index:
// a whole tree outside the sparse-checkout cone, named with a trailing
// slash.
const sparseDirMode = filemode.Dir

// indexFile is one decoded index file.
type indexFile struct {
	entries []*entry // in file order
	// tree is the root of the cache-tree ("TREE") and treeCount the
	// number of entries it covers (-1 when absent or invalidated); it is
	// the index's tree only when that is every entry of the (merged) index.
	tree      plumbing.Hash
	treeCount int
	// link is the payload of a split index's "link" extension; nil for a
	// self-contained index.
	link []byte
	// sparse is set by the "sdir" extension: entries may be sparse
	// directories.
	sparse bool
}

// parseIndex decodes an index file of version 2, 3 or 4 (read-cache.c):
// every entry with its flags, and the extensions that change what the
// entries mean. Optional extensions (upper-case signature: TREE, REUC,
// UNTR, FSMN, EOIE, IEOT) are skipped except for the cache-tree root; the
// mandatory "link" (split index) and "sdir" (sparse index) are returned for
// the caller to resolve; any other mandatory extension is
// ErrFormatUnsupported.
func parseIndex(data []byte) (*indexFile, error) {
	const header = 12
	hashLen := 20
	if len(data) < header+hashLen || string(data[:4]) != "DIRC" {
		return nil, fmt.Errorf("%w: not an index file (bad signature or too short)", ErrFormatUnsupported)
	}
	version := binary.BigEndian.Uint32(data[4:8])
	if version < 2 || version > 4 {
		return nil, fmt.Errorf("%w: index version %d", ErrFormatUnsupported, version)
	}
	n := int(binary.BigEndian.Uint32(data[8:12]))
	end := len(data) - hashLen
	if n < 0 || n > (end-header)/(62+1) {
		return nil, fmt.Errorf("%w: index claims %d entries in %d bytes", ErrFormatUnsupported, n, len(data))
	}
	out := &indexFile{entries: make([]*entry, n), treeCount: -1}
	all := make([]entry, n)
	pos := header
	var prev []byte // v4: the previous entry's name
	for i := range n {
		if pos+62 > end {
			return nil, fmt.Errorf("%w: index entry %d truncated", ErrFormatUnsupported, i)
		}
		b := data[pos:]
		e := &all[i]
		e.CtimeSec, e.CtimeNsec = binary.BigEndian.Uint32(b[0:]), binary.BigEndian.Uint32(b[4:])
		e.MtimeSec, e.MtimeNsec = binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])
		e.Dev = binary.BigEndian.Uint32(b[16:])
		e.Inode = binary.BigEndian.Uint32(b[20:])
		e.Mode = filemode.FileMode(binary.BigEndian.Uint32(b[24:]))
		e.UID = binary.BigEndian.Uint32(b[28:])
		e.GID = binary.BigEndian.Uint32(b[32:])
		e.Size = binary.BigEndian.Uint32(b[36:])
		copy(e.Hash[:], b[40:60])
		flags := binary.BigEndian.Uint16(b[60:])
		e.AssumeValid = flags&0x8000 != 0
		e.Stage = uint8(flags>>12) & 0x3
		off := 62
		if flags&0x4000 != 0 {
			if version < 3 || pos+64 > end {
				return nil, fmt.Errorf("%w: index entry %d: extended flags in a version %d index", ErrFormatUnsupported, i, version)
			}
			ext := binary.BigEndian.Uint16(b[62:])
			e.SkipWorktree = ext&0x4000 != 0
			e.IntentToAdd = ext&0x2000 != 0
			off = 64
		}
		nameLen := int(flags & 0xfff)
		if version == 4 {
			// The name is the previous one minus its last strip bytes,
			// plus a NUL-terminated suffix; no padding.
			p := pos + off
			strip, used := decodeVarint(data[p:end])
			if used == 0 || strip > uint64(len(prev)) {
				return nil, fmt.Errorf("%w: index entry %d: bad name compression", ErrFormatUnsupported, i)
			}
			p += used
			keep := len(prev) - int(strip)
			// The length in the flags is authoritative (read-cache.c
			// create_from_disk); 0xfff means "look for the NUL".
			j := nameLen - keep
			if nameLen == 0xfff {
				j = bytes.IndexByte(data[p:end], 0)
			}
			if j < 0 || p+j >= end || data[p+j] != 0 {
				return nil, fmt.Errorf("%w: index entry %d: bad name", ErrFormatUnsupported, i)
			}
			name := make([]byte, keep+j)
			copy(name, prev[:keep])
			copy(name[keep:], data[p:p+j])
			e.Name = string(name)
			prev = name
			pos = p + j + 1
		} else {
			if nameLen == 0xfff {
				j := bytes.IndexByte(data[pos+off:end], 0)
				if j < 0 {
					return nil, fmt.Errorf("%w: index entry %d: unterminated name", ErrFormatUnsupported, i)
				}
				nameLen = j
			}
			if pos+off+nameLen > end {
				return nil, fmt.Errorf("%w: index entry %d truncated", ErrFormatUnsupported, i)
			}
			e.Name = string(data[pos+off : pos+off+nameLen])
			pos += (off + nameLen + 8) &^ 7 // NUL padding to a multiple of 8
		}
		out.entries[i] = e
	}
	for pos+8 <= end {
		sig := string(data[pos : pos+4])
		size := int(binary.BigEndian.Uint32(data[pos+4:]))
		body := pos + 8
		if size < 0 || body+size > end {
			return nil, fmt.Errorf("%w: index extension %q truncated", ErrFormatUnsupported, sig)
		}
		switch {
		case sig == "TREE":
			out.tree, out.treeCount = cacheTreeRoot(data[body : body+size])
		case sig == "link":
			out.link = data[body : body+size]
		case sig == "sdir":
			out.sparse = true
		case sig[0] >= 'A' && sig[0] <= 'Z':
			// optional: REUC, UNTR, FSMN, EOIE, IEOT, ...
		default:
			return nil, fmt.Errorf("%w: the index uses the mandatory extension %q", ErrFormatUnsupported, sig)
		}
		pos = body + size
	}
	if pos != end {
		return nil, fmt.Errorf("%w: index has %d stray bytes before its checksum", ErrFormatUnsupported, end-pos)
	}
	return out, nil
}

// decodeVarint decodes git's offset varint (varint.c); used is 0 on error.
func decodeVarint(b []byte) (val uint64, used int) {
	if len(b) == 0 {
		return 0, 0
	}
	c := b[0]
	used = 1
	val = uint64(c & 127)
	for c&128 != 0 {
		val++
		if val == 0 || val>>57 != 0 || used >= len(b) {
			return 0, 0
		}
		c = b[used]
		used++
		val = val<<7 + uint64(c&127)
	}
	return val, used
}

// cacheTreeRoot parses the root of a TREE extension: "" NUL, the entry
// count, a space, the subtree count, a newline, then the hash when the
// count is not -1 (invalidated). count is -1 when there is no valid root.
func cacheTreeRoot(b []byte) (h plumbing.Hash, count int) {
	if len(b) < 1 || b[0] != 0 {
		return h, -1
	}
	b = b[1:]
	sp := bytes.IndexByte(b, ' ')
	nl := bytes.IndexByte(b, '\n')
	if sp < 0 || nl < sp {
		return h, -1
	}
	count, err := strconv.Atoi(string(b[:sp]))
	if err != nil || count < 0 || len(b) < nl+1+20 {
		return h, -1
	}
	copy(h[:], b[nl+1:nl+21])
	return h, count
}
