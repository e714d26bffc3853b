package gitfs

import (
	"container/heap"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// headState is what HEAD points at.
type headState struct {
	branch string        // "refs/heads/main"; "" when detached
	commit plumbing.Hash // ZeroHash when the branch has no commits yet
}

// readHead reads HEAD from the per-worktree git dir and resolves it through
// loose and packed refs in the common dir.
func (r *Repo) readHead() (headState, error) {
	b, err := readRegular(filepath.Join(r.gitDir, "HEAD"))
	if err != nil {
		return headState{}, fmt.Errorf("HEAD: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if ref, ok := strings.CutPrefix(s, "ref:"); ok {
		hs := headState{branch: strings.TrimSpace(ref)}
		h, ok, err := r.resolveRef(hs.branch)
		if err != nil {
			return headState{}, err
		}
		if ok {
			hs.commit = h
		}
		return hs, nil
	}
	if !plumbing.IsHash(s) {
		return headState{}, fmt.Errorf("HEAD: %w: cannot parse %q", ErrFormatUnsupported, s)
	}
	return headState{commit: plumbing.NewHash(s)}, nil
}

// resolveRef resolves a full ref name to an object id, following symbolic
// refs; ok is false when the ref does not exist.
func (r *Repo) resolveRef(name string) (plumbing.Hash, bool, error) {
	r.objMu.Lock()
	defer r.objMu.Unlock()
	for range 8 {
		ref, err := r.storage.Reference(plumbing.ReferenceName(name))
		if err == plumbing.ErrReferenceNotFound {
			return plumbing.ZeroHash, false, nil
		}
		if err != nil {
			return plumbing.ZeroHash, false, fmt.Errorf("ref %s: %w", name, err)
		}
		if ref.Type() == plumbing.HashReference {
			return ref.Hash(), true, nil
		}
		name = string(ref.Target())
	}
	return plumbing.ZeroHash, false, fmt.Errorf("ref %s: symbolic ref loop", name)
}

// upstreamOf returns the full name of the remote-tracking ref that branch
// (a full ref name) builds on, from branch.<b>.remote and branch.<b>.merge
// mapped through the remote's fetch refspecs, or "" when there is none.
func (r *Repo) upstreamOf(branch string) string {
	b := strings.TrimPrefix(branch, "refs/heads/")
	remote, _ := r.cfg.get("branch", b, "remote")
	merge, _ := r.cfg.get("branch", b, "merge")
	if remote == "" || merge == "" {
		return ""
	}
	if !strings.HasPrefix(merge, "refs/") {
		merge = "refs/heads/" + merge
	}
	if remote == "." {
		return merge
	}
	for _, spec := range r.cfg.getAll("remote", remote, "fetch") {
		rs := config.RefSpec(spec)
		if strings.HasPrefix(spec, "^") || rs.Validate() != nil {
			continue
		}
		if rs.Match(plumbing.ReferenceName(merge)) {
			return string(rs.Dst(plumbing.ReferenceName(merge)))
		}
	}
	return ""
}

// shortenRef abbreviates a full ref name as git's shorten_unambiguous_ref
// does in the common cases.
func shortenRef(name string) string {
	for _, p := range []string{"refs/heads/", "refs/tags/", "refs/remotes/"} {
		if s, ok := strings.CutPrefix(name, p); ok {
			return s
		}
	}
	if s, ok := strings.CutPrefix(name, "refs/"); ok {
		return s
	}
	return name
}

// header renders the "## ..." line without its newline, as git's
// wt_shortstatus_print_tracking does.
func (r *Repo) header(hs headState) (string, error) {
	var sb strings.Builder
	sb.WriteString("## ")
	if hs.commit.IsZero() {
		sb.WriteString("No commits yet on ")
	}
	if hs.branch == "" {
		sb.WriteString("HEAD (no branch)")
		return sb.String(), nil
	}
	sb.WriteString(strings.TrimPrefix(hs.branch, "refs/heads/"))
	up := r.upstreamOf(hs.branch)
	if up == "" {
		return sb.String(), nil
	}
	sb.WriteString("...")
	sb.WriteString(shortenRef(up))
	upHash, ok, err := r.resolveRef(up)
	if err != nil {
		return "", err
	}
	if !ok || hs.commit.IsZero() {
		sb.WriteString(" [gone]")
		return sb.String(), nil
	}
	ahead, behind, err := r.aheadBehind(hs.commit, upHash)
	if err != nil {
		return "", err
	}
	switch {
	case ahead == 0 && behind == 0:
	case ahead == 0:
		fmt.Fprintf(&sb, " [behind %d]", behind)
	case behind == 0:
		fmt.Fprintf(&sb, " [ahead %d]", ahead)
	default:
		fmt.Fprintf(&sb, " [ahead %d, behind %d]", ahead, behind)
	}
	return sb.String(), nil
}

// aheadBehind counts commits reachable from ours but not theirs (ahead) and
// the reverse (behind), like git rev-list --left-right --count ours...theirs.
// It paints both sides down the history newest first and stops once every
// commit left to visit is reachable from both; results are cached.
func (r *Repo) aheadBehind(ours, theirs plumbing.Hash) (int, int, error) {
	if ours == theirs {
		return 0, 0, nil
	}
	key := [2]plumbing.Hash{ours, theirs}
	r.status.mu.Lock()
	if v, ok := r.status.aheadBehind[key]; ok {
		r.status.mu.Unlock()
		return v[0], v[1], nil
	}
	r.status.mu.Unlock()

	const (
		left  = 1
		right = 2
		both  = left | right
	)
	r.objMu.Lock()
	defer r.objMu.Unlock()
	flags := map[plumbing.Hash]uint8{}
	times := map[plumbing.Hash]int64{}
	parents := map[plumbing.Hash][]plumbing.Hash{}
	load := func(h plumbing.Hash) error {
		if _, ok := times[h]; ok {
			return nil
		}
		c, err := object.GetCommit(r.objects(), h)
		if err != nil {
			return fmt.Errorf("commit %s: %w", h, err)
		}
		times[h] = c.Committer.When.Unix()
		parents[h] = c.ParentHashes
		return nil
	}
	q := &commitQueue{}
	push := func(h plumbing.Hash, f uint8) error {
		old := flags[h]
		if old|f == old {
			return nil
		}
		flags[h] = old | f
		if err := load(h); err != nil {
			return err
		}
		heap.Push(q, queued{h, times[h]})
		return nil
	}
	if err := push(ours, left); err != nil {
		return 0, 0, err
	}
	if err := push(theirs, right); err != nil {
		return 0, 0, err
	}
	for q.Len() > 0 {
		// Stop when everything still queued is reachable from both sides:
		// nothing below can change a count.
		allBoth := true
		for _, it := range *q {
			if flags[it.h] != both {
				allBoth = false
				break
			}
		}
		if allBoth {
			break
		}
		it := heap.Pop(q).(queued)
		f := flags[it.h]
		for _, p := range parents[it.h] {
			if err := push(p, f); err != nil {
				return 0, 0, err
			}
		}
	}
	// Commits still queued are reachable from both sides; with equal or
	// skewed commit times an ancestor of theirs may have been painted from
	// one side only before it. Carry "both" into such visited commits.
	for q.Len() > 0 {
		it := heap.Pop(q).(queued)
		for _, p := range parents[it.h] {
			if f, seen := flags[p]; seen && f != both {
				if err := push(p, both); err != nil {
					return 0, 0, err
				}
			}
		}
	}
	ahead, behind := 0, 0
	for _, f := range flags {
		switch f {
		case left:
			ahead++
		case right:
			behind++
		}
	}
	r.status.mu.Lock()
	if len(r.status.aheadBehind) >= 256 {
		clear(r.status.aheadBehind)
	}
	r.status.aheadBehind[key] = [2]int{ahead, behind}
	r.status.mu.Unlock()
	return ahead, behind, nil
}

type queued struct {
	h plumbing.Hash
	t int64
}

// commitQueue is a max-heap of commits by committer time.
type commitQueue []queued

func (q commitQueue) Len() int           { return len(q) }
func (q commitQueue) Less(i, j int) bool { return q[i].t > q[j].t }
func (q commitQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *commitQueue) Push(x any)        { *q = append(*q, x.(queued)) }
func (q *commitQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}
