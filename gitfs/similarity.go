package gitfs

import (
	"bytes"
	"sort"
)

// Similarity scoring for inexact rename detection, after git's
// diffcore-delta.c: content is cut into spans that end at a newline or after
// 64 bytes, each span is hashed, and the score is how many bytes of the
// destination's spans also occur in the source, over the larger size.

const (
	maxScore          = 60000 // git's MAX_SCORE
	minRenameScore    = 30000 // git's default -M50%
	minBasenameScore  = minRenameScore + (maxScore-minRenameScore)/2
	spanHashBase      = 107927
	maxRenameMatrix   = 1000 * 1000 // diff.renameLimit 1000 squared
	binarySniffLength = 8000
)

type span struct {
	hash uint32
	cnt  uint32
}

// spanHashes returns the sorted span histogram of buf.
func spanHashes(buf []byte) []span {
	isText := bytes.IndexByte(buf[:min(len(buf), binarySniffLength)], 0) < 0
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

// similarity returns git's rename score (0..maxScore) of dst against src,
// or 0 when the sizes alone rule out reaching minScore.
func similarity(src, dst []byte, srcSpans, dstSpans []span, minScore int) int {
	maxSize, baseSize := len(src), len(dst)
	if baseSize > maxSize {
		maxSize, baseSize = baseSize, maxSize
	}
	if maxSize == 0 {
		return 0
	}
	delta := maxSize - baseSize
	if int64(baseSize)*int64(maxScore-minScore) < int64(delta)*maxScore {
		return 0
	}
	var copied uint64
	s := 0
	for _, d := range dstSpans {
		for s < len(srcSpans) && srcSpans[s].hash < d.hash {
			s++
		}
		var srcCnt uint32
		if s < len(srcSpans) && srcSpans[s].hash == d.hash {
			srcCnt = srcSpans[s].cnt
			s++
		}
		copied += uint64(min(srcCnt, d.cnt))
	}
	return int(copied * maxScore / uint64(maxSize))
}
