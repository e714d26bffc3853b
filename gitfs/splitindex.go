package gitfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/go-git/go-git/v5/plumbing"
)

// decodeIndexTree decodes an index file (parseIndex), merging a split
// index ("link") with its shared index as git's split-index.c does, and
// returns the entries, the hash of the tree the index would write (from
// its cache-tree extension; zero when absent, invalidated, or not covering
// every entry) and whether it is a sparse index, whose sparse-directory
// entries the caller expands.
func decodeIndexTree(data []byte, gitDir string) ([]*entry, plumbing.Hash, bool, error) {
	f, err := parseIndex(data)
	if err != nil {
		return nil, plumbing.ZeroHash, false, err
	}
	entries := f.entries
	sparse := f.sparse
	if f.link != nil {
		if len(f.link) < 20 {
			return nil, plumbing.ZeroHash, false, fmt.Errorf("%w: malformed split index link extension", ErrFormatUnsupported)
		}
		var shared *indexFile
		entries, shared, err = mergeSplitIndex(f.entries, f.link, gitDir)
		if err != nil {
			return nil, plumbing.ZeroHash, false, fmt.Errorf("%w: split index: %v", ErrFormatUnsupported, err)
		}
		sparse = sparse || (shared != nil && shared.sparse)
	}
	var tree plumbing.Hash
	if f.treeCount >= 0 && f.treeCount == len(entries) {
		tree = f.tree
	}
	return entries, tree, sparse, nil
}

// mergeSplitIndex applies a split index's entries to its shared index
// (split-index.c merge_base_index): entries marked in the replace bitmap
// take the split index's first entries in order (keeping their names,
// stored empty), entries marked in the delete bitmap go, and the split
// index's remaining entries are added as add_index_entry does: replacing an
// entry of the same name and stage, and a merged (stage 0) entry replacing
// every unmerged stage of its path.
func mergeSplitIndex(split []*entry, link []byte, gitDir string) ([]*entry, *indexFile, error) {
	var base plumbing.Hash
	copy(base[:], link[:20])
	rest := link[20:]
	var del, repl []int
	if len(rest) > 0 {
		var err error
		if del, rest, err = ewahBits(rest); err != nil {
			return nil, nil, fmt.Errorf("delete bitmap: %v", err)
		}
		if repl, _, err = ewahBits(rest); err != nil {
			return nil, nil, fmt.Errorf("replace bitmap: %v", err)
		}
	}
	var shared []*entry
	var sharedFile *indexFile
	if !base.IsZero() {
		data, err := readRegular(filepath.Join(gitDir, "sharedindex."+base.String()))
		if err != nil {
			return nil, nil, err
		}
		sharedFile, err = parseIndex(data)
		if err != nil {
			return nil, nil, fmt.Errorf("shared index: %v", err)
		}
		if sharedFile.link != nil {
			return nil, nil, errors.New("shared index is itself split")
		}
		shared = sharedFile.entries
	}
	out := make([]*entry, len(shared))
	copy(out, shared)
	next := 0
	for _, pos := range repl {
		if pos >= len(shared) || next >= len(split) {
			return nil, nil, fmt.Errorf("replace bit %d does not match the entries", pos)
		}
		e := *split[next]
		next++
		if e.Name == "" {
			e.Name = shared[pos].Name
		}
		out[pos] = &e
	}
	removed := make([]bool, len(shared))
	for _, pos := range del {
		if pos >= len(shared) {
			return nil, nil, fmt.Errorf("delete bit %d beyond %d shared entries", pos, len(shared))
		}
		removed[pos] = true
	}
	merged := make([]*entry, 0, len(out)+len(split)-next)
	for i, e := range out {
		if !removed[i] {
			merged = append(merged, e)
		}
	}
	type key struct {
		name  string
		stage uint8
	}
	byKey := make(map[key]int, len(merged))
	for i, e := range merged {
		byKey[key{e.Name, e.Stage}] = i
	}
	drop := map[int]bool{}
	for _, e := range split[next:] {
		if i, ok := byKey[key{e.Name, e.Stage}]; ok {
			merged[i] = e
			continue
		}
		if e.Stage == 0 {
			for st := uint8(1); st <= 3; st++ {
				if i, ok := byKey[key{e.Name, st}]; ok {
					drop[i] = true
					delete(byKey, key{e.Name, st})
				}
			}
		}
		byKey[key{e.Name, e.Stage}] = len(merged)
		merged = append(merged, e)
	}
	if len(drop) > 0 {
		kept := merged[:0]
		for i, e := range merged {
			if !drop[i] {
				kept = append(kept, e)
			}
		}
		merged = kept
	}
	sort.SliceStable(merged, func(i, j int) bool { return entryLess(merged[i], merged[j]) })
	return merged, sharedFile, nil
}

// ewahBits decodes one serialized EWAH bitmap (git's ewah/ewah_io.c) into
// the positions of its set bits, and returns the bytes after it.
func ewahBits(b []byte) ([]int, []byte, error) {
	if len(b) < 8 {
		return nil, nil, errors.New("short bitmap")
	}
	bitSize := int(binary.BigEndian.Uint32(b))
	words := int(binary.BigEndian.Uint32(b[4:]))
	need := 8 + words*8 + 4
	if words < 0 || len(b) < need {
		return nil, nil, errors.New("short bitmap")
	}
	buf := make([]uint64, words)
	for i := range buf {
		buf[i] = binary.BigEndian.Uint64(b[8+i*8:])
	}
	var bits []int
	pos := 0
	for i := 0; i < words; {
		rlw := buf[i]
		i++
		running := rlw&1 == 1
		runLen := int((rlw >> 1) & 0xffffffff)
		literals := int(rlw >> 33)
		if running {
			for k := 0; k < runLen*64; k++ {
				bits = append(bits, pos+k)
			}
		}
		pos += runLen * 64
		for k := 0; k < literals && i < words; k++ {
			w := buf[i]
			i++
			for bit := 0; bit < 64; bit++ {
				if w>>bit&1 == 1 {
					bits = append(bits, pos+bit)
				}
			}
			pos += 64
		}
	}
	// Bits past bitSize are padding.
	n := sort.SearchInts(bits, bitSize)
	return bits[:n], b[need:], nil
}
