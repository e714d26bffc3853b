package gitfs

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing"
)

// The clean conversion git applies to a worktree file before comparing it
// with the index (convert.c convert_to_git): end-of-line normalisation
// from the text, crlf and eol attributes and core.autocrlf, and the ident
// attribute's "$Id$" collapse. Clean filters (the filter attribute with a
// filter.<driver>.clean or .process command) and working-tree-encoding are
// not applied: running a repository's commands is out of the question.

// crlfAction is convert.c's enum convert_crlf_action.
type crlfAction int

const (
	crlfUndefined crlfAction = iota
	crlfBinary
	crlfText
	crlfTextInput
	crlfTextCRLF
	crlfAuto
	crlfAutoInput
	crlfAutoCRLF
)

// converter hashes worktree files as git would store them. It is safe for
// concurrent use; one serves one status computation.
type converter struct {
	r        *Repo
	snap     *indexSnap
	attrs    *attrStack
	autocrlf string // "true", "input" or "false"
}

func (r *Repo) converter(snap *indexSnap) *converter {
	c := &converter{r: r, snap: snap, attrs: newAttrStack(r, snap), autocrlf: "false"}
	if v, ok := r.conf().get("core", "", "autocrlf"); ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "input":
			c.autocrlf = "input"
		default:
			if r.conf().getBool("core", "", "autocrlf", false) {
				c.autocrlf = "true"
			}
		}
	}
	return c
}

// action returns the end-of-line conversion and the ident setting for the
// path p (convert.c convert_attrs). Only whether CRLF becomes LF on the way
// in matters here, so core.eol, which only chooses between text actions,
// is not read.
func (c *converter) action(p string) (crlfAction, bool) {
	a := c.attrs.get(p)
	action := crlfCheck(a["text"])
	if action == crlfUndefined {
		action = crlfCheck(a["crlf"])
	}
	if action != crlfBinary {
		eol := a["eol"].str()
		switch {
		case action == crlfAuto && eol == "lf":
			action = crlfAutoInput
		case action == crlfAuto && eol == "crlf":
			action = crlfAutoCRLF
		case eol == "lf":
			action = crlfTextInput
		case eol == "crlf":
			action = crlfTextCRLF
		}
	}
	if action == crlfUndefined {
		switch c.autocrlf {
		case "true":
			action = crlfAutoCRLF
		case "input":
			action = crlfAutoInput
		default:
			action = crlfBinary
		}
	}
	return action, a["ident"].isTrue()
}

// crlfCheck is convert.c git_path_check_crlf.
func crlfCheck(v attrValue) crlfAction {
	switch v.state {
	case attrTrue:
		return crlfText
	case attrFalse:
		return crlfBinary
	case attrString:
		switch v.val {
		case "input":
			return crlfTextInput
		case "auto":
			return crlfAuto
		}
	}
	return crlfUndefined
}

// hashWorktree computes the blob id git would give the file or symlink abs
// (the worktree copy of path p) when adding it. A regular file is hashed
// as read; only when it holds a CR or a "$" are its attributes looked up
// and, when they ask for a conversion, the converted content hashed.
func (c *converter) hashWorktree(p, abs string, typ uint32, size int64) (plumbing.Hash, error) {
	if typ == syscall.S_IFLNK {
		target, err := os.Readlink(abs)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		return plumbing.ComputeHash(plumbing.BlobObject, []byte(target)), nil
	}
	f, err := openRegular(abs, true)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	defer f.Close()
	h := sha1.New()
	h.Write([]byte("blob " + strconv.FormatInt(size, 10) + "\x00"))
	w := &specialScan{h: h}
	n, err := io.Copy(w, f)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if n != size {
		return plumbing.ZeroHash, fmt.Errorf("%s changed while hashing", abs)
	}
	var out plumbing.Hash
	copy(out[:], h.Sum(nil))
	if !w.special || c == nil {
		return out, nil
	}
	action, ident := c.action(p)
	if action == crlfBinary && !ident {
		return out, nil
	}
	data, err := readRegular(abs)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	data = c.toGit(p, data, action, ident)
	return plumbing.ComputeHash(plumbing.BlobObject, data), nil
}

// readConverted returns the content git would store for the worktree file
// abs at path p (for rename detection of files not yet in the index).
func (c *converter) readConverted(p, abs string, typ uint32) ([]byte, error) {
	if typ == syscall.S_IFLNK {
		t, err := os.Readlink(abs)
		return []byte(t), err
	}
	data, err := readRegular(abs)
	if err != nil {
		return nil, err
	}
	if bytes.IndexByte(data, '\r') < 0 && bytes.IndexByte(data, '$') < 0 {
		return data, nil
	}
	action, ident := c.action(p)
	return c.toGit(p, data, action, ident), nil
}

// lfsMatches reports whether the worktree file abs (path p) is what the
// blob id blob stands for under Git LFS's clean filter: p's filter
// attribute names a driver whose filter.<driver>.clean or .process runs
// git-lfs, the blob is an LFS pointer, and the file has the size and the
// SHA-256 the pointer records. That is what `git-lfs clean` would check
// in; no command is run.
func (c *converter) lfsMatches(p, abs string, blob plumbing.Hash, size int64) bool {
	drv := c.attrs.get(p)["filter"].str()
	if drv == "" {
		return false
	}
	clean, _ := c.r.conf().get("filter", drv, "clean")
	process, _ := c.r.conf().get("filter", drv, "process")
	cmd := clean + " " + process
	if !strings.Contains(cmd, "git-lfs") && !strings.Contains(cmd, "git lfs") {
		return false
	}
	c.r.objMu.Lock()
	n, err := c.r.objects().EncodedObjectSize(blob)
	c.r.objMu.Unlock()
	if err != nil || n > 1024 {
		return false
	}
	ptr, err := c.r.readBlob(blob)
	if err != nil {
		return false
	}
	oid, psize, ok := parseLFSPointer(ptr)
	if !ok || psize != size {
		return false
	}
	f, err := openRegular(abs, true)
	if err != nil {
		return false
	}
	defer f.Close()
	h := sha256.New()
	if m, err := io.Copy(h, f); err != nil || m != size {
		return false
	}
	return hex.EncodeToString(h.Sum(nil)) == oid
}

// parseLFSPointer reads a Git LFS pointer file: a version line, then
// "oid sha256:<hex>" and "size <n>" among sorted key-value lines.
func parseLFSPointer(b []byte) (oid string, size int64, ok bool) {
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "version https://git-lfs.github.com/spec/v1") &&
		!strings.HasPrefix(lines[0], "version https://hawser.github.com/spec/v1") {
		return "", 0, false
	}
	size = -1
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, " ")
		switch k {
		case "oid":
			hexID, found := strings.CutPrefix(v, "sha256:")
			if !found || len(hexID) != 64 {
				return "", 0, false
			}
			oid = hexID
		case "size":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return "", 0, false
			}
			size = n
		}
	}
	return oid, size, oid != "" && size >= 0
}

// specialScan passes bytes to h and notes whether any is a CR or "$".
type specialScan struct {
	h       io.Writer
	special bool
}

func (s *specialScan) Write(b []byte) (int, error) {
	if !s.special && (bytes.IndexByte(b, '\r') >= 0 || bytes.IndexByte(b, '$') >= 0) {
		s.special = true
	}
	return s.h.Write(b)
}

// toGit is convert.c convert_to_git without filters and encodings:
// crlf_to_git, then ident_to_git.
func (c *converter) toGit(p string, data []byte, action crlfAction, ident bool) []byte {
	data = c.crlfToGit(p, data, action)
	if ident {
		data = identToGit(data)
	}
	return data
}

// textStat is convert.c struct text_stat.
type textStat struct {
	nul, lonecr, lonelf, crlf int
	printable, nonprintable   int
}

func gatherStats(b []byte) textStat {
	var s textStat
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '\r':
			if i+1 < len(b) && b[i+1] == '\n' {
				s.crlf++
				i++
			} else {
				s.lonecr++
			}
		case c == '\n':
			s.lonelf++
		case c == 127:
			s.nonprintable++
		case c < 32:
			switch c {
			case '\b', '\t', '\033', '\014':
				s.printable++
			case 0:
				s.nul++
				s.nonprintable++
			default:
				s.nonprintable++
			}
		default:
			s.printable++
		}
	}
	// A trailing ^Z (DOS EOF) does not count as non-printable.
	if len(b) > 0 && b[len(b)-1] == '\032' {
		s.nonprintable--
	}
	return s
}

func (s textStat) isBinary() bool {
	return s.lonecr > 0 || s.nul > 0 || (s.printable>>7) < s.nonprintable
}

// crlfToGit is convert.c crlf_to_git.
func (c *converter) crlfToGit(p string, data []byte, action crlfAction) []byte {
	if action == crlfBinary || len(data) == 0 {
		return data
	}
	st := gatherStats(data)
	if st.crlf == 0 {
		return data
	}
	auto := action == crlfAuto || action == crlfAutoInput || action == crlfAutoCRLF
	if auto {
		if st.isBinary() || c.hasCRLFInIndex(p) {
			return data
		}
	}
	out := make([]byte, 0, len(data))
	if auto {
		// A guessed text file has no lone CR: drop every CR.
		for _, ch := range data {
			if ch != '\r' {
				out = append(out, ch)
			}
		}
		return out
	}
	for i, ch := range data {
		if ch == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			continue
		}
		out = append(out, ch)
	}
	return out
}

// hasCRLFInIndex is convert.c has_crlf_in_index: the index's copy of p is
// text with a CRLF in it, so autocrlf leaves the file alone.
func (c *converter) hasCRLFInIndex(p string) bool {
	e := c.snap.entryForAttr(p)
	if e == nil {
		return false
	}
	data, err := c.r.readBlob(e.Hash)
	if err != nil || bytes.IndexByte(data, '\r') < 0 {
		return false
	}
	st := gatherStats(data)
	return !st.isBinary() && st.crlf > 0
}

// identToGit is convert.c ident_to_git: "$Id: anything$" becomes "$Id$"
// (not across a line break).
func identToGit(src []byte) []byte {
	if countIdent(src) == 0 {
		return src
	}
	out := make([]byte, 0, len(src))
	for {
		d := bytes.IndexByte(src, '$')
		if d < 0 {
			break
		}
		out = append(out, src[:d+1]...)
		src = src[d+1:]
		if len(src) > 3 && string(src[:3]) == "Id:" {
			e := bytes.IndexByte(src[3:], '$')
			if e < 0 {
				break
			}
			if bytes.IndexByte(src[3:3+e], '\n') >= 0 {
				continue // a line break before the next dollar
			}
			out = append(out, "Id$"...)
			src = src[3+e+1:]
		}
	}
	return append(out, src...)
}

// countIdent is convert.c count_ident.
func countIdent(b []byte) int {
	cnt := 0
	for len(b) > 0 {
		ch := b[0]
		b = b[1:]
		if ch != '$' {
			continue
		}
		if len(b) < 3 {
			break
		}
		if string(b[:2]) != "Id" {
			continue
		}
		ch = b[2]
		b = b[3:]
		if ch == '$' {
			cnt++
		}
		if ch != ':' {
			continue
		}
		for len(b) > 0 {
			ch = b[0]
			b = b[1:]
			if ch == '$' {
				cnt++
				break
			}
			if ch == '\n' {
				break
			}
		}
	}
	return cnt
}
