package gitfs

import (
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Rename and copy detection as git status does it (diffcore-rename.c, as
// of git 2.3x), run once between HEAD and the index and once between the
// index and the worktree (where intent-to-add entries are the additions).

// rfile is one side of a diff pair: a blob (or gitlink) by id, or a
// worktree file not hashed yet.
type rfile struct {
	path string
	hash plumbing.Hash
	mode filemode.FileMode
	abs  string // the worktree file holding the content; "" for a blob
	typ  uint32 // its file type (S_IFREG, S_IFLNK), for abs

	renameUsed int // diff_filespec.rename_used

	sized, loaded, failed bool
	size                  int64
	data                  []byte
	spans                 []span
	binary                int8 // 0 unknown, 1 binary, -1 text
}

// rpair is one diff queue entry that rename detection looks at.
type rpair struct {
	status byte   // 'A' (a creation), 'D' (a deletion), anything else for a change (a copy source)
	one    *rfile // the old side; nil for 'A'
	two    *rfile // the new side; nil for 'D'

	from    *rpair // for 'A': the source it was paired with
	renamed byte   // for 'A': 'R' or 'C' once paired
}

func (p *rpair) path() string {
	if p.two != nil {
		return p.two.path
	}
	return p.one.path
}

// renameOpts are the settings of one detection.
type renameOpts struct {
	copies   bool // status.renames / diff.renames = copies
	limit    int  // the rename limit; <= 0 means unlimited
	minScore int
}

// renameOptions reads status.renames, diff.renames, status.renameLimit and
// diff.renameLimit as git status does (wt-status.c, diff.c
// diff_setup_done); ok is false when detection is off.
func (r *Repo) renameOptions() (o renameOpts, ok bool) {
	mode := func(v string) int { // 0 off, 1 renames, 2 copies
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "copies", "copy":
			return 2
		}
		if b, ok := parseBool(v); ok && !b {
			return 0
		}
		return 1
	}
	diffMode := 1
	if v, set := r.conf().get("diff", "", "renames"); set {
		diffMode = mode(v)
	}
	detect := diffMode
	if v, set := r.conf().get("status", "", "renames"); set {
		detect = mode(v)
	}
	if detect == 0 {
		return o, false
	}
	o.copies = detect == 2
	o.minScore = minRenameScore
	// diff_setup_done fills the limit from diff.renameLimit only when
	// detection is on at that point (diff.renames); status.renameLimit
	// overrides it afterwards.
	o.limit = -1
	if diffMode != 0 {
		o.limit = 1000
		if v, set := r.conf().get("diff", "", "renamelimit"); set {
			if n, err := parseConfigInt(v); err == nil {
				o.limit = n
			}
		}
	}
	if v, set := r.conf().get("status", "", "renamelimit"); set {
		if n, err := parseConfigInt(v); err == nil && n >= 0 {
			o.limit = n
		}
	}
	return o, true
}

// parseBool parses a git boolean value.
func parseBool(v string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "true", "yes", "on":
		return true, true
	case "false", "no", "off":
		return false, true
	}
	if n, err := parseConfigInt(v); err == nil {
		return n != 0, true
	}
	return false, false
}

// parseConfigInt parses a git integer with an optional k, m or g suffix.
func parseConfigInt(v string) (int, error) {
	v = strings.TrimSpace(v)
	mul := 1
	if n := len(v); n > 0 {
		switch v[n-1] {
		case 'k', 'K':
			mul, v = 1<<10, v[:n-1]
		case 'm', 'M':
			mul, v = 1<<20, v[:n-1]
		case 'g', 'G':
			mul, v = 1<<30, v[:n-1]
		}
	}
	n, err := strconv.Atoi(v)
	return n * mul, err
}

// renameCtx holds what one detection loads.
type renameCtx struct {
	r    *Repo
	conv *converter
}

// diffcoreRename pairs the additions of the queue q (sorted by path) with
// deletions (and, for copies, changed paths) as diffcore_rename does:
// exact matches first, then (renames only) unique base names at 75%
// similarity, then the best matches of at least 50% from a matrix that
// keeps four candidates per destination, unless the rename limit squared
// is exceeded. Paired additions get from and renamed set; a deletion that
// became a rename keeps its one.renameUsed above zero.
func (rc *renameCtx) diffcoreRename(q []*rpair, o renameOpts) {
	var dsts []*rpair
	var srcs []*rfile
	for _, p := range q {
		switch {
		case p.status == 'A':
			dsts = append(dsts, p)
		case p.status == 'D':
			srcs = append(srcs, p.one)
		case o.copies:
			p.one.renameUsed++ // the source stays: every use is a copy
			srcs = append(srcs, p.one)
		}
	}
	if len(dsts) == 0 || len(srcs) == 0 {
		return
	}
	byDst := map[*rfile]*rpair{}
	for _, p := range q {
		if p.one != nil {
			byDst[p.one] = p
		}
	}
	record := func(d *rpair, s *rfile) {
		s.renameUsed++
		d.from = byDst[s]
	}

	// Exact renames (find_exact_renames): sources with the same id, in
	// order; an unused one with the same base name wins at once;
	// non-regular files pair only with the same mode; at most 100
	// candidates are looked at.
	bySum := map[plumbing.Hash][]*rfile{}
	for _, s := range srcs {
		h := rc.hashOf(s)
		bySum[h] = append(bySum[h], s)
	}
	for _, d := range dsts {
		t := d.two
		var best *rfile
		bestScore := -1
		left := 100
		for _, s := range bySum[rc.hashOf(t)] {
			if (!isRegular(s.mode) || !isRegular(t.mode)) && s.mode != t.mode {
				continue
			}
			score := 0
			if s.renameUsed == 0 {
				score = 1
			} else if !o.copies {
				continue
			}
			if basenameSame(s.path, t.path) {
				score++
			}
			if score > bestScore {
				best, bestScore = s, score
				if score == 2 {
					break
				}
			}
			if left--; left == 0 {
				break
			}
		}
		if best != nil {
			record(d, best)
		}
	}

	if !o.copies {
		srcs = unusedSources(srcs)
		rc.basenameMatches(srcs, dsts, o.minScore+(maxScore-o.minScore)/2, record)
		srcs = unusedSources(srcs)
	}
	left := 0
	for _, d := range dsts {
		if d.from == nil {
			left++
		}
	}
	if left == 0 || len(srcs) == 0 {
		return
	}
	if o.limit > 0 && int64(left)*int64(len(srcs)) > int64(o.limit)*int64(o.limit) {
		return
	}

	// The similarity matrix: four best candidates per destination
	// (record_if_better), stable-sorted by score then same base name.
	const perDst = 4
	type score struct {
		src, dst  int // -1 dst: unused slot
		score     int
		nameScore int
	}
	mx := make([]score, 0, left*perDst)
	for di, d := range dsts {
		if d.from != nil {
			continue
		}
		m := make([]score, perDst)
		for j := range m {
			m[j].dst = -1
		}
		for si, s := range srcs {
			this := score{src: si, dst: di, score: rc.similarity(s, d.two, o.minScore)}
			if basenameSame(s.path, d.two.path) {
				this.nameScore = 1
			}
			worst := 0
			for j := 1; j < perDst; j++ {
				if scoreCompare(m[j].dst, m[j].score, m[j].nameScore, m[worst].dst, m[worst].score, m[worst].nameScore) > 0 {
					worst = j
				}
			}
			if scoreCompare(m[worst].dst, m[worst].score, m[worst].nameScore, this.dst, this.score, this.nameScore) > 0 {
				m[worst] = this
			}
		}
		mx = append(mx, m...)
	}
	sort.SliceStable(mx, func(i, j int) bool {
		return scoreCompare(mx[i].dst, mx[i].score, mx[i].nameScore, mx[j].dst, mx[j].score, mx[j].nameScore) < 0
	})
	find := func(copies bool) {
		for _, m := range mx {
			if m.dst < 0 || m.score < o.minScore {
				break
			}
			d := dsts[m.dst]
			if d.from != nil {
				continue
			}
			if !copies && srcs[m.src].renameUsed > 0 {
				continue
			}
			record(d, srcs[m.src])
		}
	}
	find(false)
	if o.copies {
		find(true)
	}
}

// resolveRenames sets the status of each paired addition, walking the
// queue in order as diff_resolve_rename_copy does: a source still used by
// a later pair makes this one a copy.
func resolveRenames(q []*rpair) {
	for _, p := range q {
		if p.status != 'A' || p.from == nil {
			continue
		}
		p.from.one.renameUsed--
		if p.from.one.renameUsed > 0 {
			p.renamed = 'C'
		} else {
			p.renamed = 'R'
		}
	}
}

// scoreCompare is diffcore-rename.c score_compare: unused slots sink, then
// higher scores, then same base names come first.
func scoreCompare(aDst, aScore, aName, bDst, bScore, bName int) int {
	if aDst < 0 {
		if bDst >= 0 {
			return 1
		}
		return 0
	} else if bDst < 0 {
		return -1
	}
	if aScore == bScore {
		return bName - aName
	}
	return bScore - aScore
}

func unusedSources(srcs []*rfile) []*rfile {
	out := srcs[:0:0]
	for _, s := range srcs {
		if s.renameUsed == 0 {
			out = append(out, s)
		}
	}
	return out
}

// basenameMatches is find_basename_matches: a source whose base name is
// unique among the sources and also unique among the unpaired
// destinations is paired with that destination when at least minScore
// similar.
func (rc *renameCtx) basenameMatches(srcs []*rfile, dsts []*rpair, minScore int, record func(*rpair, *rfile)) {
	srcIdx := map[string]int{}
	for i, s := range srcs {
		b := baseName(s.path)
		if _, dup := srcIdx[b]; dup {
			srcIdx[b] = -1
		} else {
			srcIdx[b] = i
		}
	}
	dstIdx := map[string]int{}
	for i, d := range dsts {
		if d.from != nil {
			continue
		}
		b := baseName(d.two.path)
		if _, dup := dstIdx[b]; dup {
			dstIdx[b] = -1
		} else {
			dstIdx[b] = i
		}
	}
	for i, s := range srcs {
		b := baseName(s.path)
		di, ok := dstIdx[b]
		if !ok || srcIdx[b] != i || di < 0 {
			continue
		}
		d := dsts[di]
		if d.from != nil {
			continue
		}
		if rc.similarity(s, d.two, minScore) < minScore {
			continue
		}
		record(d, s)
	}
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// basenameSame is diffcore-rename.c basename_same.
func basenameSame(a, b string) bool { return baseName(a) == baseName(b) }

func isRegular(m filemode.FileMode) bool {
	return m == filemode.Regular || m == filemode.Executable || m == filemode.Deprecated
}

// hashOf returns the blob id of f, hashing a worktree file as git would
// store it.
func (rc *renameCtx) hashOf(f *rfile) plumbing.Hash {
	if f.abs == "" || !f.hash.IsZero() {
		return f.hash
	}
	if rc.load(f) {
		f.hash = plumbing.ComputeHash(plumbing.BlobObject, f.data)
	}
	return f.hash
}

// sizeOf returns the content size of f, from the object header when it
// is a blob.
func (rc *renameCtx) sizeOf(f *rfile) (int64, bool) {
	if f.sized {
		return f.size, !f.failed
	}
	if f.abs != "" {
		rc.load(f)
		return f.size, !f.failed
	}
	f.sized = true
	rc.r.objMu.Lock()
	n, err := rc.r.objects().EncodedObjectSize(f.hash)
	rc.r.objMu.Unlock()
	if err != nil {
		f.failed = true
		return 0, false
	}
	f.size = n
	return n, true
}

// load reads f's content.
func (rc *renameCtx) load(f *rfile) bool {
	if f.loaded {
		return !f.failed
	}
	f.loaded, f.sized = true, true
	var err error
	if f.abs != "" {
		f.data, err = rc.conv.readConverted(f.path, f.abs, f.typ)
	} else {
		f.data, err = rc.r.readBlob(f.hash)
	}
	if err != nil {
		f.failed = true
		return false
	}
	f.size = int64(len(f.data))
	return true
}

// isBinary is diff_filespec_is_binary: the diff attribute (false for
// "-diff" and "binary"; a named driver's diff.<driver>.binary), else a NUL
// in the first 8000 bytes.
func (rc *renameCtx) isBinary(f *rfile) bool {
	if f.binary == 0 {
		f.binary = -1
		decided := false
		if rc.conv != nil {
			switch v := rc.conv.attrs.get(f.path)["diff"]; v.state {
			case attrFalse:
				f.binary, decided = 1, true
			case attrString:
				if b, set := rc.r.conf().get("diff", v.val, "binary"); set {
					if t, ok := parseBool(b); ok {
						decided = true
						if t {
							f.binary = 1
						}
					}
				}
			}
		}
		if !decided && bytesHasNUL(f.data[:min(len(f.data), binarySniffLength)]) {
			f.binary = 1
		}
	}
	return f.binary > 0
}

func bytesHasNUL(b []byte) bool {
	for _, c := range b {
		if c == 0 {
			return true
		}
	}
	return false
}

// similarity is estimate_similarity: 0 unless both are regular files
// whose sizes allow reaching minScore, else how much of the destination's
// content the source holds, scaled to maxScore.
func (rc *renameCtx) similarity(src, dst *rfile, minScore int) int {
	if !isRegular(src.mode) || !isRegular(dst.mode) {
		return 0
	}
	ss, ok1 := rc.sizeOf(src)
	ds, ok2 := rc.sizeOf(dst)
	if !ok1 || !ok2 {
		return 0
	}
	maxSize, baseSize := max(ss, ds), min(ss, ds)
	if maxSize*(maxScore-int64(minScore)) < (maxSize-baseSize)*maxScore {
		return 0
	}
	if !rc.load(src) || !rc.load(dst) {
		return 0
	}
	if src.spans == nil {
		src.spans = spanHashes(src.data, !rc.isBinary(src))
	}
	if dst.spans == nil {
		dst.spans = spanHashes(dst.data, !rc.isBinary(dst))
	}
	if ds == 0 {
		return 0
	}
	return int(copiedBytes(src.spans, dst.spans) * maxScore / uint64(maxSize))
}

// readBlob returns a blob's content.
func (r *Repo) readBlob(h plumbing.Hash) ([]byte, error) {
	r.objMu.Lock()
	defer r.objMu.Unlock()
	b, err := object.GetBlob(r.objects(), h)
	if err != nil {
		return nil, err
	}
	rc, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}
