package gitfs

import "sort"

// Similarity scoring for inexact rename detection, after git's
// diffcore-delta.c: content is cut into spans that end at a newline or after
// 64 bytes, each span is hashed, and the score is how many bytes of the
// destination's spans also occur in the source, over the larger size.

const (
	maxScore          = 60000 // git's MAX_SCORE
	minRenameScore    = 30000 // git's default -M50%
	spanHashBase      = 107927
	binarySniffLength = 8000
)

type span struct {
	hash uint32
	cnt  uint32
}

// spanHashes returns the sorted span histogram of buf (diffcore-delta.c
// hash_chars); in text, a CR before an LF is not counted.
func spanHashes(buf []byte, isText bool) []span {
	m := map[uint32]uint32{}
	var accum1, accum2 uint32
	n := uint32(0)
	for i := 0; i < len(buf); i++ {
		c := uint32(buf[i])
		old1 := accum1
		if isText && c == '\r' && i+1 < len(buf) && buf[i+1] == '\n' {
			continue
		}
		accum1 = (accum1 << 7) ^ (accum2 >> 25)
		accum2 = (accum2 << 7) ^ (old1 >> 25)
		accum1 += c
		n++
		if n < 64 && c != '\n' {
			continue
		}
		m[(accum1+accum2*0x61)%spanHashBase] += n
		n, accum1, accum2 = 0, 0, 0
	}
	if n > 0 {
		m[(accum1+accum2*0x61)%spanHashBase] += n
	}
	out := make([]span, 0, len(m))
	for h, c := range m {
		out = append(out, span{h, c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].hash < out[j].hash })
	return out
}

// copiedBytes is diffcore-delta.c diffcore_count_changes' src_copied: for
// each span hash, the smaller of the two byte counts.
func copiedBytes(srcSpans, dstSpans []span) uint64 {
	var copied uint64
	s := 0
	for _, d := range dstSpans {
		for s < len(srcSpans) && srcSpans[s].hash < d.hash {
			s++
		}
		if s < len(srcSpans) && srcSpans[s].hash == d.hash {
			copied += uint64(min(srcSpans[s].cnt, d.cnt))
			s++
		}
	}
	return copied
}
