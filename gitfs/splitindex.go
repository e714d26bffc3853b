package gitfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// decodeIndex decodes an index file's entries. go-git's decoder stops at
// the first mandatory extension it does not know; for a split index
// ("link") the entries it read before stopping are merged with the shared
// index here, as git's split-index.c does. A sparse index ("sdir") or any
// other unknown mandatory extension is ErrFormatUnsupported.
func decodeIndex(data []byte, gitDir string) ([]*index.Entry, error) {
	entries, _, err := decodeIndexTree(data, gitDir)
	return entries, err
}

// decodeIndexTree is decodeIndex that also returns the hash of the tree the
// index would write, from its cache-tree extension (zero when the
// extension is absent or its root is invalidated, as after `git add`).
func decodeIndexTree(data []byte, gitDir string) ([]*index.Entry, plumbing.Hash, error) {
	if entries, tree, ok := fastDecodeIndex(data); ok {
		return entries, tree, nil
	}
	idx := &index.Index{}
	err := index.NewDecoder(bytes.NewReader(data)).Decode(idx)
	if err == nil {
		var root plumbing.Hash
		if c := idx.Cache; c != nil && len(c.Entries) > 0 && c.Entries[0].Path == "" && c.Entries[0].Entries >= 0 && c.Entries[0].Entries == len(idx.Entries) {
			root = c.Entries[0].Hash
		}
		return idx.Entries, root, nil
	}
	entries, err := decodeSplit(idx, data, gitDir, err)
	return entries, plumbing.ZeroHash, err
}

func decodeSplit(idx *index.Index, data []byte, gitDir string, err error) ([]*index.Entry, error) {
	if !errors.Is(err, index.ErrUnknownExtension) {
		return nil, err
	}
	exts, ok := indexExtensions(data)
	if !ok {
		return nil, fmt.Errorf("%w: the index has a mandatory extension go-git cannot read, and its extensions could not be located", ErrFormatUnsupported)
	}
	for sig := range exts {
		if sig == "sdir" {
			return nil, fmt.Errorf("%w: the index is a sparse index (extension \"sdir\"), which go-git cannot read; git sparse-checkout set --no-sparse-index turns it back into a full one", ErrFormatUnsupported)
		}
		if sig != "link" && (sig[0] < 'A' || sig[0] > 'Z') {
			return nil, fmt.Errorf("%w: the index uses the mandatory extension %q, which go-git cannot read", ErrFormatUnsupported, sig)
		}
	}
	link, ok := exts["link"]
	if !ok || len(link) < 20 {
		return nil, fmt.Errorf("%w: malformed split index link extension", ErrFormatUnsupported)
	}
	entries, err := mergeSplitIndex(idx.Entries, link, gitDir)
	if err != nil {
		return nil, fmt.Errorf("%w: split index: %v", ErrFormatUnsupported, err)
	}
	return entries, nil
}

// indexExtensions locates the extension section of an index file: a chain
// of (signature, length, payload) records, signatures being four ASCII
// letters, ending exactly at the trailing checksum. The earliest offset
// from which such a chain reaches the checksum is taken (go-git does not
// report where the entries ended).
func indexExtensions(data []byte) (map[string][]byte, bool) {
	end := len(data) - 20
	if end < 12 {
		return nil, false
	}
	isSig := func(p int) bool {
		for _, c := range data[p : p+4] {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
				return false
			}
		}
		return true
	}
	for start := 12; start+8 <= end; start++ {
		if !isSig(start) {
			continue
		}
		exts := map[string][]byte{}
		p := start
		for p+8 <= end && isSig(p) {
			n := int(binary.BigEndian.Uint32(data[p+4:]))
			if n < 0 || p+8+n > end {
				break
			}
			exts[string(data[p:p+4])] = data[p+8 : p+8+n]
			p += 8 + n
		}
		if p == end {
			return exts, true
		}
	}
	return nil, false
}

// mergeSplitIndex applies a split index's entries to its shared index:
// entries marked in the delete bitmap go, entries marked in the replace
// bitmap take the split index's first entries in order (keeping their
// names, stored empty), and the split index's remaining entries are added.
func mergeSplitIndex(split []*index.Entry, link []byte, gitDir string) ([]*index.Entry, error) {
	var base plumbing.Hash
	copy(base[:], link[:20])
	rest := link[20:]
	var del, repl []int
	if len(rest) > 0 {
		var err error
		if del, rest, err = ewahBits(rest); err != nil {
			return nil, fmt.Errorf("delete bitmap: %v", err)
		}
		if repl, _, err = ewahBits(rest); err != nil {
			return nil, fmt.Errorf("replace bitmap: %v", err)
		}
	}
	var shared []*index.Entry
	if !base.IsZero() {
		data, err := readRegular(filepath.Join(gitDir, "sharedindex."+base.String()))
		if err != nil {
			return nil, err
		}
		idx := &index.Index{}
		if err := index.NewDecoder(bytes.NewReader(data)).Decode(idx); err != nil {
			return nil, fmt.Errorf("shared index: %v", err)
		}
		shared = idx.Entries
	}
	removed := make([]bool, len(shared))
	for _, pos := range del {
		if pos >= len(shared) {
			return nil, fmt.Errorf("delete bit %d beyond %d shared entries", pos, len(shared))
		}
		removed[pos] = true
	}
	out := make([]*index.Entry, len(shared))
	copy(out, shared)
	next := 0
	for _, pos := range repl {
		if pos >= len(shared) || next >= len(split) {
			return nil, fmt.Errorf("replace bit %d does not match the entries", pos)
		}
		e := *split[next]
		next++
		if e.Name == "" {
			e.Name = shared[pos].Name
		}
		out[pos] = &e
	}
	merged := make([]*index.Entry, 0, len(out)+len(split)-next)
	for i, e := range out {
		if !removed[i] {
			merged = append(merged, e)
		}
	}
	// New entries replace any remaining entry with the same name and stage.
	byKey := map[[2]any]int{}
	for i, e := range merged {
		byKey[[2]any{e.Name, e.Stage}] = i
	}
	for _, e := range split[next:] {
		if i, ok := byKey[[2]any{e.Name, e.Stage}]; ok {
			merged[i] = e
			continue
		}
		byKey[[2]any{e.Name, e.Stage}] = len(merged)
		merged = append(merged, e)
	}
	sort.SliceStable(merged, func(i, j int) bool { return entryLess(merged[i], merged[j]) })
	return merged, nil
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
