package gitfs

import (
	"container/heap"
	"fmt"
	"math"
	"sort"
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
	b, err := r.readGit("HEAD")
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
	return r.resolveRefLocked(name)
}

// resolveRefLocked is resolveRef for callers holding objMu.
func (r *Repo) resolveRefLocked(name string) (plumbing.Hash, bool, error) {
	if r.view != nil && r.view.git {
		return r.resolveRefView(name)
	}
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
// (a full ref name) builds on, or "" when there is none, as remote.c
// set_merge and branch_get_upstream find it: the first branch.<b>.merge,
// mapped through the fetch refspecs of branch.<b>.remote (taken as is, so
// a name without "refs/heads/" matches none), or for remote "." the local
// ref it names.
func (r *Repo) upstreamOf(branch string) string {
	b := strings.TrimPrefix(branch, "refs/heads/")
	remote, _ := r.conf().get("branch", b, "remote")
	merges := r.conf().getAll("branch", b, "merge")
	if remote == "" || len(merges) == 0 || merges[0] == "" {
		return ""
	}
	merge := merges[0]
	if remote == "." {
		return r.dwimRef(merge)
	}
	for _, spec := range r.conf().getAll("remote", remote, "fetch") {
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

// dwimRef expands a short ref name as refs.c dwim_ref does when exactly
// one of the usual places has it; otherwise the name is kept.
func (r *Repo) dwimRef(name string) string {
	var found []string
	for _, f := range []string{"%s", "refs/%s", "refs/tags/%s", "refs/heads/%s", "refs/remotes/%s", "refs/remotes/%s/HEAD"} {
		full := fmt.Sprintf(f, name)
		if full != "HEAD" && !strings.HasPrefix(full, "refs/") {
			continue
		}
		if _, ok, err := r.resolveRef(full); err == nil && ok {
			found = append(found, full)
		}
	}
	if len(found) == 1 {
		return found[0]
	}
	return name
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

// aheadBehind counts the commits git status reports as ahead and behind:
// what `git rev-list --left-right --count ours...theirs` counts
// (remote.c stat_branch_pair). It follows git step by step, including its
// date-based shortcuts, so that histories with skewed commit dates give
// git's numbers: the merge bases (commit-reach.c paint_down_to_common,
// remove_redundant), then the limited walk (revision.c limit_list, with
// its five-commit slop) from ours and theirs down to them, counting what
// stays interesting on each side. Results are cached.
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

	r.objMu.Lock()
	g := &commitGraph{r: r, nodes: map[plumbing.Hash]*cnode{}}
	ahead, behind, err := g.aheadBehind(ours, theirs)
	r.objMu.Unlock()
	if err != nil {
		return 0, 0, err
	}
	r.status.mu.Lock()
	if len(r.status.aheadBehind) >= 256 {
		clear(r.status.aheadBehind)
	}
	r.status.aheadBehind[key] = [2]int{ahead, behind}
	r.status.mu.Unlock()
	return ahead, behind, nil
}

// Commit flags, as in git's object.flags.
const (
	flagParent1 = 1 << iota
	flagParent2
	flagStale
	flagResult
	flagSeen
	flagAdded
	flagUninteresting
	flagLeft // SYMMETRIC_LEFT
)

// cnode is one commit as git's struct commit: parsed once, with flags.
type cnode struct {
	id      plumbing.Hash
	date    int64
	parents []*cnode
	parsed  bool
	flags   int
}

// commitGraph parses commits on demand (with grafts and shallow
// boundaries applied, through replace refs). Callers hold objMu.
type commitGraph struct {
	r     *Repo
	nodes map[plumbing.Hash]*cnode
	ctr   int
}

func (g *commitGraph) node(id plumbing.Hash) *cnode {
	n := g.nodes[id]
	if n == nil {
		n = &cnode{id: id}
		g.nodes[id] = n
	}
	return n
}

func (g *commitGraph) parse(n *cnode) error {
	if n.parsed {
		return nil
	}
	c, err := object.GetCommit(g.r.objects(), n.id)
	if err != nil {
		return fmt.Errorf("commit %s: %w", n.id, err)
	}
	n.parsed = true
	n.date = c.Committer.When.Unix()
	ps := c.ParentHashes
	if gp, ok := g.r.hist.parents(n.id); ok {
		ps = gp
	}
	for _, p := range ps {
		n.parents = append(n.parents, g.node(p))
	}
	return nil
}

func (g *commitGraph) clearFlags(mask int) {
	for _, n := range g.nodes {
		n.flags &^= mask
	}
}

// insertByDate is commit_list_insert_by_date: after every commit not
// older than n.
func insertByDate(list []*cnode, n *cnode) []*cnode {
	i := 0
	for i < len(list) && list[i].date >= n.date {
		i++
	}
	list = append(list, nil)
	copy(list[i+1:], list[i:])
	list[i] = n
	return list
}

// dateQueue is git's prio_queue ordered by commit date, newest first,
// first in first out among equal dates.
type dateQueue struct {
	items []cqItem
}

type cqItem struct {
	n   *cnode
	ctr int
}

func (q *dateQueue) Len() int { return len(q.items) }
func (q *dateQueue) Less(i, j int) bool {
	a, b := q.items[i], q.items[j]
	if a.n.date != b.n.date {
		return a.n.date > b.n.date
	}
	return a.ctr < b.ctr
}
func (q *dateQueue) Swap(i, j int) { q.items[i], q.items[j] = q.items[j], q.items[i] }
func (q *dateQueue) Push(x any)    { q.items = append(q.items, x.(cqItem)) }
func (q *dateQueue) Pop() any {
	it := q.items[len(q.items)-1]
	q.items = q.items[:len(q.items)-1]
	return it
}

func (g *commitGraph) put(q *dateQueue, n *cnode) {
	g.ctr++
	heap.Push(q, cqItem{n, g.ctr})
}

// paintDownToCommon is commit-reach.c paint_down_to_common without a
// commit-graph: it returns the commits reachable from one and from every
// two that are not below another such commit, newest first.
func (g *commitGraph) paintDownToCommon(one *cnode, twos []*cnode) ([]*cnode, error) {
	q := &dateQueue{}
	one.flags |= flagParent1
	if len(twos) == 0 {
		return []*cnode{one}, nil
	}
	g.put(q, one)
	for _, t := range twos {
		t.flags |= flagParent2
		g.put(q, t)
	}
	var result []*cnode
	nonStale := func() bool {
		for _, it := range q.items {
			if it.n.flags&flagStale == 0 {
				return true
			}
		}
		return false
	}
	for nonStale() {
		c := heap.Pop(q).(cqItem).n
		flags := c.flags & (flagParent1 | flagParent2 | flagStale)
		if flags == flagParent1|flagParent2 {
			if c.flags&flagResult == 0 {
				c.flags |= flagResult
				result = insertByDate(result, c)
			}
			flags |= flagStale // the parents of a found merge base are stale
		}
		for _, p := range c.parents {
			if p.flags&flags == flags {
				continue
			}
			if err := g.parse(p); err != nil {
				return nil, err
			}
			p.flags |= flags
			g.put(q, p)
		}
	}
	return result, nil
}

// mergeBases is commit-reach.c repo_get_merge_bases (get_merge_bases_many_0
// with one "two").
func (g *commitGraph) mergeBases(one, two *cnode) ([]*cnode, error) {
	if one == two {
		return []*cnode{one}, nil
	}
	if err := g.parse(one); err != nil {
		return nil, err
	}
	if err := g.parse(two); err != nil {
		return nil, err
	}
	list, err := g.paintDownToCommon(one, []*cnode{two})
	if err != nil {
		return nil, err
	}
	var result []*cnode
	for _, c := range list {
		if c.flags&flagStale == 0 {
			result = insertByDate(result, c)
		}
	}
	g.clearFlags(flagParent1 | flagParent2 | flagStale | flagResult)
	if len(result) <= 1 {
		return result, nil
	}
	// remove_redundant_no_gen: drop bases reachable from another.
	redundant := make([]bool, len(result))
	for i := range result {
		if redundant[i] {
			continue
		}
		var work []*cnode
		var idx []int
		for j := range result {
			if i != j && !redundant[j] {
				work = append(work, result[j])
				idx = append(idx, j)
			}
		}
		if _, err := g.paintDownToCommon(result[i], work); err != nil {
			return nil, err
		}
		if result[i].flags&flagParent2 != 0 {
			redundant[i] = true
		}
		for k, w := range work {
			if w.flags&flagParent1 != 0 {
				redundant[idx[k]] = true
			}
		}
		g.clearFlags(flagParent1 | flagParent2 | flagStale | flagResult)
	}
	var out []*cnode
	for i, c := range result {
		if !redundant[i] {
			out = insertByDate(out, c)
		}
	}
	return out, nil
}

// markParentsUninteresting is revision.c mark_parents_uninteresting: the
// parents, and the ancestors of those already parsed.
func markParentsUninteresting(c *cnode) {
	stack := append([]*cnode(nil), c.parents...)
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if p.flags&flagUninteresting != 0 {
			continue
		}
		p.flags |= flagUninteresting
		stack = append(stack, p.parents...)
	}
}

// aheadBehind runs `rev-list --left-right ours...theirs` and counts.
func (g *commitGraph) aheadBehind(ours, theirs plumbing.Hash) (int, int, error) {
	a, b := g.node(ours), g.node(theirs)
	bases, err := g.mergeBases(a, b)
	if err != nil {
		return 0, 0, err
	}
	// The pending objects: the merge bases (excluded), ours (left),
	// theirs; handle_commit parses each and marks the parents of an
	// excluded one.
	for _, c := range bases {
		c.flags |= flagUninteresting
	}
	a.flags |= flagLeft
	pending := append(append([]*cnode(nil), bases...), a, b)
	var list []*cnode
	for _, c := range pending {
		if err := g.parse(c); err != nil {
			return 0, 0, err
		}
		if c.flags&flagUninteresting != 0 {
			markParentsUninteresting(c)
		}
		if c.flags&flagSeen == 0 {
			c.flags |= flagSeen
			list = append(list, c)
		}
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].date > list[j].date })

	// limit_list.
	const slop0 = 5
	slop := slop0
	date := int64(math.MaxInt64)
	var interesting *cnode
	var out []*cnode
	for len(list) > 0 {
		c := list[0]
		list = list[1:]
		if c == interesting {
			interesting = nil
		}
		if err := g.processParents(c, &list); err != nil {
			return 0, 0, err
		}
		if c.flags&flagUninteresting != 0 {
			markParentsUninteresting(c)
			// still_interesting
			switch {
			case len(list) == 0:
				slop = 0
			case date <= list[0].date:
				slop = slop0
			default:
				everybody := true
				if interesting != nil && interesting.flags&flagUninteresting == 0 {
					everybody = false
				} else {
					for _, x := range list {
						if x.flags&flagUninteresting == 0 {
							interesting = x
							everybody = false
							break
						}
					}
				}
				if everybody {
					slop--
				} else {
					slop = slop0
				}
			}
			if slop > 0 {
				continue
			}
			break
		}
		date = c.date
		out = append(out, c)
	}
	ahead, behind := 0, 0
	for _, c := range out {
		if c.flags&flagUninteresting != 0 {
			continue
		}
		if c.flags&flagLeft != 0 {
			ahead++
		} else {
			behind++
		}
	}
	return ahead, behind, nil
}

// processParents is revision.c process_parents for a limited walk.
func (g *commitGraph) processParents(c *cnode, list *[]*cnode) error {
	if c.flags&flagAdded != 0 {
		return nil
	}
	c.flags |= flagAdded
	if c.flags&flagUninteresting != 0 {
		for _, p := range c.parents {
			p.flags |= flagUninteresting
			if g.parse(p) != nil {
				continue
			}
			if len(p.parents) > 0 {
				markParentsUninteresting(p)
			}
			if p.flags&flagSeen != 0 {
				continue
			}
			p.flags |= flagSeen
			*list = insertByDate(*list, p)
		}
		return nil
	}
	pass := c.flags & flagLeft
	for _, p := range c.parents {
		if err := g.parse(p); err != nil {
			return err
		}
		p.flags |= pass
		if p.flags&flagSeen == 0 {
			p.flags |= flagSeen
			*list = insertByDate(*list, p)
		}
	}
	return nil
}
