package daemon

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/fs"
	"github.com/neuralis/neuralisfs/index"
	"github.com/neuralis/neuralisfs/internal/asuser"
	"github.com/neuralis/neuralisfs/internal/audit"
	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/internal/held"
	"github.com/neuralis/neuralisfs/internal/journal"
	"github.com/neuralis/neuralisfs/internal/rawname"
	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// startHeld opens the store of held changes. It is opened even when no
// rule holds writes yet: a reload may add one.
func (d *Daemon) startHeld() error {
	s, err := held.Open(filepath.Join(d.cfg.StateDirPath(), "held"), d.cfg.ReviewMaxBytes(), d.log)
	if err != nil {
		return err
	}
	d.held = s
	d.overlays = index.NewOverlayCache(overlayIdle)
	d.recoverAside()
	return nil
}

// recoverAside puts back what an approval cut short by a kill had moved
// aside (held.Layer.RecoverAside); what cannot go back is logged with
// where it is.
func (d *Daemon) recoverAside() {
	for _, l := range d.held.Layers() {
		r, err := d.sourceRoot(l.Slug)
		if err != nil {
			continue // its records stay for a later start
		}
		if err := l.RecoverAside(r); err != nil {
			d.log.Error("held changes: an approval that did not finish left files aside", "principal", l.Principal, "source", l.Slug, "err", err)
		}
	}
}

// ReviewItem is one held change as `review list` shows it.
type ReviewItem struct {
	held.Change
	Age      string `json:"age"`
	Conflict string `json:"conflict,omitempty"`
	// GitRuns lists the uris of the change that git reads commands from
	// (held.GitRuns): review approve --all leaves the change held.
	GitRuns []string `json:"git_runs,omitempty"`
	// Busy says why --all left the change held: its principal has a
	// file of it open for writing.
	Busy string `json:"busy,omitempty"`
	// Why says why approve --all left it held for another reason: the
	// backing files moved since it was made (a conflict), or it goes
	// with a change that did.
	Why string `json:"why,omitempty"`
	// Unseen says the change carries names the reader is not shown
	// (under a folder its file permissions do not let it list, or
	// hidden from it by the policy), or held files whose content its
	// file permissions do not let it read: it may reject the change but
	// not approve it, which would land them unseen. How many is not said.
	Unseen bool `json:"unseen,omitempty"`
	// Moved says the change moved while its diff was read (review diff):
	// what the diff showed may not be what its id names, so the id is
	// left out of the diff's approve line.
	Moved bool `json:"moved,omitempty"`
	// full is the change as held, before what the reader may not see
	// was left out of it: approving or rejecting it checks and lands
	// every name it carries.
	full held.Change
}

// MarshalJSON writes it with its names as rawname.Enc keeps them: a
// name that is not UTF-8 reached review list as U+FFFD, another name or
// none, and the reviewer could neither see nor type the one held.
func (it ReviewItem) MarshalJSON() ([]byte, error) {
	type plain ReviewItem
	p := plain(it)
	p.URI, p.Path, p.From = rawname.Enc(p.URI), rawname.Enc(p.Path), rawname.Enc(p.From)
	p.Inside, p.Links, p.GitRuns = rawname.EncAll(p.Inside), rawname.EncAll(p.Links), rawname.EncAll(p.GitRuns)
	return json.Marshal(p)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (it *ReviewItem) UnmarshalJSON(b []byte) error {
	type plain ReviewItem
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	p.URI, p.Path, p.From = rawname.Dec(p.URI), rawname.Dec(p.Path), rawname.Dec(p.From)
	p.Inside, p.Links, p.GitRuns = rawname.DecAll(p.Inside), rawname.DecAll(p.Links), rawname.DecAll(p.GitRuns)
	*it = ReviewItem(p)
	return nil
}

// ReviewReply answers review requests: the changes listed, approved or
// rejected, and the diff text for review diff.
type ReviewReply struct {
	Changes []ReviewItem `json:"changes"`
	Diff    string       `json:"diff,omitempty"`
	// Left lists, for review approve --all, the changes it left held
	// because git reads commands from them (with those they link to).
	Left []ReviewItem `json:"left,omitempty"`
	// Unlisted says, one sentence each, which layers could not be
	// listed because their source cannot be opened: their changes are
	// in none of the above, and --all leaves them held.
	Unlisted []string `json:"unlisted,omitempty"`
	// Exact lists, for review diff, the ids that approve exactly what it
	// showed: none of a unit that holds what the reader is not shown, or
	// that moved while it was read, nor of a unit that must land with
	// one of those (approving it would be refused).
	Exact []string `json:"exact,omitempty"`
}

// unlisted says which layers of principal (every one for "") could not
// be listed for p because their source cannot be opened, so that an
// empty list is not read as "nothing is held". It names the layers of
// p's own principal, and every one to root and the daemon's uid: any
// other reader learns nothing of what others hold there.
func (d *Daemon) unlisted(p *policy.Principal, peer control.Peer, principal string) []string {
	exempt := credOf(peer).Exempt()
	return d.unlistedOf(func(holder string) bool {
		return (principal == "" || holder == principal) && (holder == p.Name || exempt)
	}, exempt)
}

// unlistedOf is unlisted for the layers whose principal holder passes;
// detail adds why the source cannot be opened, which may name its
// backing folder (for root and the daemon's uid only).
func (d *Daemon) unlistedOf(holder func(string) bool, detail bool) []string {
	var out []string
	for _, l := range d.held.Layers() {
		if !holder(l.Principal) {
			continue
		}
		if _, err := d.sourceRoot(l.Slug); err != nil {
			why := ""
			if detail {
				why = " (" + err.Error() + ")"
			}
			out = append(out, fmt.Sprintf("%s's held changes in %s, if any, are not listed: the source cannot be opened%s", l.Principal, l.Slug, why))
		}
	}
	return out
}

// reviewable lists the held changes peer may see: its own principal's,
// and those of others on uris it may read and write without its own
// writes being held (it could approve them) and whose names its file
// permissions let it learn on the mount (it may list the backing folder
// of each, or of the nearest one there is). Hidden files are absent.
func (d *Daemon) reviewable(p *policy.Principal, peer control.Peer, only string) []ReviewItem {
	files, done := d.peerFiles(peer)
	defer done()
	sees := func(c held.Change) bool {
		names := append([]string{c.Path}, c.Links...)
		if c.From != "" {
			names = append(names, c.From)
		}
		for _, rel := range names {
			if !files.canSee(c.Slug + "://" + rel) {
				return false
			}
		}
		return true
	}
	items, _ := d.heldItems(func(holder string) bool { return only == "" || holder == only },
		d.canReadFor(peer.UID, peer.GID), func(holder string, c held.Change) bool {
			return d.mayReview(p, holder, c) && (holder == p.Name || sees(c))
		}, files.names(), false)
	return items
}

// readerSight is what a reader's own file permissions show it of held
// changes (the daemon reads as root); a nil func checks nothing.
type readerSight struct {
	// read says which files of l's diffs it may read.
	read func(l *held.Layer) *held.Readable
	// see says whether it may learn a backing name (a uri); seeHeld,
	// a name of l's tree as l's principal sees it on the mount.
	see     func(uri string) bool
	seeHeld func(l *held.Layer, rel string) bool
}

// shown is canRead narrowed to the backing names s lets the reader learn.
func (s readerSight) shown(canRead func(string) bool) func(string) bool {
	if s.see == nil {
		return canRead
	}
	return func(u string) bool { return canRead(u) && s.see(u) }
}

// heldItems lists the held changes of the layers whose principal holder
// passes, keeping those keep lets through and every path canRead allows
// (a change naming a path it does not allow is left out whole); with diff
// it also renders their diffs. What a change carries inside it (a
// folder's names) is shown where canRead and the reader's file
// permissions (files) allow: a name under a folder the reader may not
// list is hidden from it on the mount, whatever the policy says.
func (d *Daemon) heldItems(holder func(string) bool, canRead func(string) bool, keep func(string, held.Change) bool, files readerSight, diff bool) ([]ReviewItem, string) {
	shown := files.shown(canRead)
	out := []ReviewItem{}
	var diffs strings.Builder
	if d.held == nil {
		return out, ""
	}
	for _, l := range d.held.Layers() {
		if !holder(l.Principal) {
			continue
		}
		r, err := d.sourceRoot(l.Slug)
		if err != nil {
			continue
		}
		hooks := l.HookDirs(r)
		for _, c := range l.Changes(r) {
			if !keep(l.Principal, c) || !canRead(c.URI) || c.From != "" && !canRead(c.Slug+"://"+c.From) ||
				slices.ContainsFunc(c.Links, func(x string) bool { return !canRead(c.Slug + "://" + x) }) {
				// Left out whole: a name it lands with (links) is one
				// the reader may not see.
				continue
			}
			full := c
			full.Inside = slices.Clone(c.Inside)
			c.Inside = slices.DeleteFunc(c.Inside, func(x string) bool {
				return !canRead(c.Slug+"://"+x) || files.seeHeld != nil && !files.seeHeld(l, x)
			})
			var read *held.Readable
			if files.read != nil {
				read = files.read(l)
			}
			if read != nil {
				// A digest of content the reader may not read lets it
				// test guesses of that content.
				old := c.Path
				if c.Op == "rename" {
					old = c.From
				}
				if c.Digest != "" && !read.Held(c.Path) {
					c.Digest = ""
				}
				if (c.Base.Digest != "" || c.Base.Xattrs != "") && !read.Backing(old) {
					c.Base.Digest, c.Base.Xattrs = "", ""
				}
			}
			it := ReviewItem{Change: c, full: full, Unseen: len(c.Inside) < len(full.Inside) || contentUnseen(l, r, c, read)}
			if !c.Since.IsZero() {
				// (A unit with no time recorded showed the longest
				// duration there is, 2562047h47m16s.)
				it.Age = time.Since(c.Since).Round(time.Second).String()
			}
			for _, p := range c.GitRuns(hooks) {
				it.GitRuns = append(it.GitRuns, c.Slug+"://"+p)
			}
			// The conflict check needs the bases as held: c's digests
			// are cleared where the reader may not read the file, and
			// checked so every such file was "changed" (a red-team pass
			// saw a write-only file's first append listed as a conflict).
			if err := l.ConflictShown(r, full, shown); err != nil {
				it.Conflict = err.Error()
			}
			out = append(out, it)
			if diff {
				diffs.WriteString(l.Diff(r, shownAs(full, c), shown, read))
			}
		}
	}
	return out, diffs.String()
}

// mayReview reports whether p may see (and, for another principal's
// change, approve) c of holder.
func (d *Daemon) mayReview(p *policy.Principal, holder string, c held.Change) bool {
	if p.Name == holder {
		return true
	}
	return d.mayApprove(p, c) == nil
}

// mayApprove says why p may not approve c, or nil: it needs write, not
// held, on every uri the change touches.
func (d *Daemon) mayApprove(p *policy.Principal, c held.Change) error {
	paths := append([]string{c.Path}, c.Inside...)
	if c.From != "" {
		paths = append(paths, c.From)
	}
	paths = append(paths, c.Links...) // a link writes both names
	for _, rel := range paths {
		dec := d.policy().Decide(p, c.Slug, rel, policy.Write)
		if !dec.Allowed {
			return fmt.Errorf("you may not write %s://%s", c.Slug, rel)
		}
		if dec.Held {
			return fmt.Errorf("your own writes to %s://%s are held for review, so you cannot approve changes there", c.Slug, rel)
		}
	}
	return nil
}

// review answers review-list, review-diff, review-approve and
// review-reject.
func (d *Daemon) review(p *policy.Principal, peer control.Peer, req control.Request) (any, error) {
	if d.held == nil {
		if req.Op == "review-list" {
			return ReviewReply{Changes: []ReviewItem{}}, nil
		}
		return nil, errors.New("nothing is held for review: no rule in the config has review = [\"write\"]")
	}
	if req.Principal != "" {
		if _, ok := d.policy().PrincipalByName(req.Principal); !ok {
			return nil, fmt.Errorf("unknown principal %q", req.Principal)
		}
	}
	items := d.reviewable(p, peer, req.Principal)
	unlisted := d.unlisted(p, peer, req.Principal)
	if req.Op == "review-list" {
		return ReviewReply{Changes: items, Unlisted: unlisted}, nil
	}
	pick, err := pickChanges(items, req.IDs, req.All, req.Op == "review-approve")
	if err != nil {
		if len(unlisted) > 0 {
			err = fmt.Errorf("%w; %s", err, strings.Join(unlisted, "; "))
		}
		return nil, err
	}
	rep := ReviewReply{Changes: []ReviewItem{}, Unlisted: unlisted}
	if req.All && req.Op == "review-approve" {
		pick, rep.Left = leaveGitRuns(pick)
		var unseen []ReviewItem
		pick, unseen = leaveUnseen(pick)
		rep.Left = append(rep.Left, unseen...)
	}
	if req.All && (req.Op == "review-approve" || req.Op == "review-reject") {
		var busy []ReviewItem
		pick, busy = d.leaveBusy(pick)
		rep.Left = append(rep.Left, busy...)
	}
	if req.All && req.Op == "review-approve" && !req.Force {
		var conflicts []ReviewItem
		pick, conflicts = leaveConflicts(pick)
		rep.Left = append(rep.Left, conflicts...)
	}
	switch req.Op {
	case "review-diff":
		// Content is shown only where the peer's own file permissions
		// would let it read the file, on either side.
		files, done := d.peerFiles(peer)
		defer done()
		var b strings.Builder
		for i, it := range pick {
			l := d.held.Get(it.Principal, it.Slug)
			r, err := d.sourceRoot(it.Slug)
			if l == nil || err != nil {
				continue
			}
			text, sh := l.DiffShown(r, shownAs(it.full, it.Change), files.names().shown(d.canReadFor(peer.UID, peer.GID)), files.readable(l))
			b.WriteString(text)
			if !it.Unseen && !l.StillShows(it.full, sh) {
				// Changed while it was read: the diff may show one
				// content under the id of another (a red-team pass).
				pick[i].Moved = true
				fmt.Fprintf(&b, "# %s changed while this diff was read: what is shown above may not be what approving %s lands; run review diff again\n", it.ID, it.ID)
			}
			if it.Unseen {
				fmt.Fprintf(&b, "# %s also holds names or content not shown to you (under folders you may not list, in files you may not read, or hidden from you): you may reject it, and only a reviewer who can see them may approve it\n", it.ID)
			}
		}
		var blocked []int
		changes := make([]held.Change, len(pick))
		for i := range pick {
			changes[i] = pick[i].Change
			if pick[i].Unseen || pick[i].Moved {
				blocked = append(blocked, i)
			}
		}
		if len(blocked) > 0 {
			blocked = held.Together(changes, blocked)
		}
		for i := range pick {
			if !slices.Contains(blocked, i) {
				rep.Exact = append(rep.Exact, pick[i].ID)
			}
		}
		rep.Changes, rep.Diff = pick, b.String()
		return rep, nil
	case "review-approve", "review-reject":
		approve := req.Op == "review-approve"
		// Checked and made whole; answered as shown.
		shownAs := map[string]ReviewItem{}
		for i := range pick {
			shownAs[pick[i].ID] = pick[i]
			pick[i].Change = pick[i].full
		}
		// Every change is checked before any is made: a refusal changes
		// nothing.
		for _, it := range pick {
			if !approve && it.Principal == p.Name {
				continue // anyone may withdraw its own held change
			}
			if err := d.mayApprove(p, it.Change); err != nil {
				return nil, err
			}
			if approve && shownAs[it.ID].Unseen {
				// An agent chose what a reviewer other than root does not
				// see: a folder of mode 0700 in its unit hid a program
				// inside from the diff, and approving landed it (found by
				// a red-team pass).
				return nil, fmt.Errorf("%s's held change %s %s holds names or content not shown to you (under folders you may not list, in files you may not read, or hidden from you); approving it would land them unseen: reject it, or have a reviewer who can see them approve it", it.Principal, it.ID, index.QuoteURI(it.URI))
			}
			if err := d.filesAllow(peer, it.Change); err != nil {
				return nil, err
			}
			if l := d.held.Get(it.Principal, it.Slug); l != nil {
				if err := l.Busy(it.Change); err != nil {
					return nil, fmt.Errorf("%w (%s's held change %s); try again once it is closed", err, it.Principal, it.ID)
				}
			}
			if approve && it.Conflict != "" && !req.Force {
				d.auditReview(p, peer, "review-conflict", it)
				return nil, fmt.Errorf("%s changed since %s's held change was made (%s); look at it with review diff, then approve with --force or reject", it.URI, it.Principal, it.ID)
			}
		}
		restore := func() error { return nil }
		if approve {
			var err error
			var put func() error
			if pick, put, err = d.stage(pick, req.Force); err != nil {
				return nil, err
			}
			restore = func() error {
				err := put()
				if err != nil {
					// Said to whoever approved, and logged: a file left
					// aside is hidden on the mount (a data-integrity pass
					// found nothing in the log).
					d.log.Error("held changes: an approval could not put back what it moved aside", "err", err)
				}
				return err
			}
		}
		late := map[string]bool{} // ids left held by a conflict found while approving (--all)
		for i, it := range pick {
			if late[it.ID] {
				continue
			}
			err := d.decide(p, peer, it, approve, req.Force)
			if err != nil && req.All && approve && !req.Force && errors.Is(err, held.ErrConflict) {
				// Found only while landing it (someone wrote the backing
				// file after the check): it is left held, with the units
				// still to come that must go with it, as a conflict found
				// before is, and --all decides the rest. Before, the
				// first such conflict ended the approval, and every unit
				// after it was left untried.
				rest := make([]held.Change, len(pick)-i)
				for j := range rest {
					rest[j] = pick[i+j].Change
				}
				for _, j := range held.Together(rest, []int{0}) {
					left := shownAs[pick[i+j].ID]
					late[left.ID] = true
					if j == 0 {
						left.Why = "the backing files changed while it was being approved; nothing of it landed"
					} else {
						left.Why = "it goes with a held change whose backing files changed while it was being approved"
					}
					rep.Left = append(rep.Left, left)
				}
				continue
			}
			if err != nil {
				if len(rep.Changes) > 0 {
					// Say what is done: the answer is the error alone.
					var done []string
					for _, c := range rep.Changes {
						done = append(done, c.ID+" "+index.QuoteURI(c.URI))
					}
					verb := map[bool]string{true: "approved", false: "rejected"}[approve]
					err = fmt.Errorf("%w (%s before it: %s)", err, verb, strings.Join(done, ", "))
				}
				return rep, errors.Join(err, restore())
			}
			rep.Changes = append(rep.Changes, shownAs[it.ID])
		}
		d.pruneUntouched(pick, req.Principal)
		if len(late) > 0 {
			// What was moved aside for a unit left held goes back.
			if err := restore(); err != nil {
				return rep, err
			}
		}
		return rep, nil
	}
	return nil, fmt.Errorf("unknown request %q", req.Op)
}

// pruneUntouched drops, after an approval or a rejection, the copies the
// principals of pick (or principal, or every one with --all) left
// unchanged in their layers (held.Layer.PruneUntouched), so that they see
// the backing files again.
func (d *Daemon) pruneUntouched(pick []ReviewItem, principal string) {
	for _, l := range d.held.Layers() {
		mine := principal == "" || l.Principal == principal
		if principal == "" && len(pick) > 0 {
			mine = slices.ContainsFunc(pick, func(it ReviewItem) bool { return it.Principal == l.Principal && it.Slug == l.Slug })
		}
		if !mine {
			continue
		}
		if gone := l.PruneUntouched(); len(gone) > 0 {
			d.fsys.HeldChanged(l.Slug, gone)
		}
	}
}

// stage prepares the changes of each layer approved together whose
// backing paths overlap (held.Layer.Stage): a rename whose origin
// another of them replaces or removes has its file moved aside first.
// It returns pick in the order to approve it, and restore, which puts
// back what was moved aside and not yet approved.
func (d *Daemon) stage(pick []ReviewItem, force bool) ([]ReviewItem, func() error, error) {
	type key struct{ principal, slug string }
	var keys []key
	groups := map[key][]int{}
	for i, it := range pick {
		k := key{it.Principal, it.Slug}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	var restores []func() error
	restore := func() error {
		var errs []error
		for _, r := range restores {
			errs = append(errs, r())
		}
		return errors.Join(errs...)
	}
	out := make([]ReviewItem, 0, len(pick))
	for _, k := range keys {
		idx := groups[k]
		l := d.held.Get(k.principal, k.slug)
		src := d.source(k.slug)
		if l == nil || src == nil {
			for _, i := range idx {
				out = append(out, pick[i])
			}
			continue
		}
		r, err := src.Root()
		if err != nil {
			return nil, nil, errors.Join(err, restore())
		}
		cs := make([]held.Change, len(idx))
		byPath := map[string]ReviewItem{}
		for j, i := range idx {
			cs[j] = pick[i].Change
			byPath[pick[i].Path] = pick[i]
		}
		staged, undo, err := l.Stage(r, cs, force)
		if err != nil {
			return nil, nil, errors.Join(err, restore())
		}
		restores = append(restores, undo)
		for _, c := range staged {
			it := byPath[c.Path]
			it.Change = c
			out = append(out, it)
		}
	}
	return out, restore, nil
}

// pickChanges selects items by id or uri (or all of them), with the
// changes holding the other names of a held file with several names
// (held.Together): they are approved or rejected together.
func pickChanges(items []ReviewItem, ids []string, all, approve bool) ([]ReviewItem, error) {
	if all {
		if len(ids) > 0 {
			return nil, errors.New("name changes or use --all, not both")
		}
		return items, nil
	}
	if len(ids) == 0 {
		return nil, errors.New("name at least one held change (an id or a uri from review list), or use --all")
	}
	var pick []int
	byID := false
	for _, id := range ids {
		n := 0
		for i, it := range items {
			if it.ID == id || it.URI == id || it.From != "" && it.Slug+"://"+it.From == id {
				if !slices.Contains(pick, i) {
					pick = append(pick, i)
				}
				byID = byID || it.ID == id
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("no held change %q (review list shows them; an id names the content listed, and changes when the principal changes it)", id)
		}
	}
	changes := make([]held.Change, len(items))
	for i := range items {
		changes[i] = items[i].Change
	}
	grouped := held.Together(changes, pick)
	if approve && byID {
		// An id names the content listed, and approving by id lands
		// exactly that: a unit that goes with it must be named too, by
		// its own id, or it landed as it is now, changed since the
		// reviewer read it (a red-team pass: a rename approved by its
		// id, unchanged, landed the file made at its old name, rewritten
		// after review).
		for _, i := range grouped {
			if !slices.Contains(pick, i) {
				return nil, fmt.Errorf("%s goes with %s %s %s, which was not named: approve them together by id (review approve %s %s), after reading both in review diff", items[pick[0]].ID, items[i].ID, items[i].Op, index.QuoteURI(items[i].URI), items[pick[0]].ID, items[i].ID)
			}
		}
	}
	// Named ones first, in the order named, then those they link to.
	out := make([]ReviewItem, 0, len(grouped))
	for _, i := range pick {
		out = append(out, items[i])
	}
	for _, i := range grouped {
		if !slices.Contains(pick, i) {
			out = append(out, items[i])
		}
	}
	return out, nil
}

// shownAs is the change a diff renders for a reader: full (as held, its
// bases' digests kept, for the conflict check) with the names the reader
// is shown (c's).
func shownAs(full, c held.Change) held.Change {
	full.Inside = c.Inside
	return full
}

// contentUnseen reports whether c carries a held regular file whose
// content read (the reader's file permissions; nil: any) does not let
// the reader read: its diff says "content not shown", and approving it
// would land content the reviewer was not shown (a red-team pass landed
// a set-user-ID program of mode 4711 so).
func contentUnseen(l *held.Layer, r *mounts.Root, c held.Change, read *held.Readable) bool {
	if read == nil || c.Op == "delete" || c.Op == "rmdir" {
		return false
	}
	for _, p := range append([]string{c.Path}, c.Inside...) {
		if l.Where(p) != held.Upper {
			continue
		}
		if st, _, err := l.Lstat(r, p); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && !read.Held(p) {
			return true
		}
	}
	return false
}

// leaveGitRuns splits the changes review approve --all picked into
// those it approves and those it leaves held: every change git reads
// commands from (ReviewItem.GitRuns), with the changes that must be
// approved with it (held.Together). Approving one of them takes a
// reviewer naming it, by id or uri, after its diff has said so.
func leaveGitRuns(items []ReviewItem) (approve, left []ReviewItem) {
	return leaveHeld(items, func(it *ReviewItem) bool { return len(it.GitRuns) > 0 })
}

// leaveUnseen splits items, for approve --all, into those to approve and
// those left held (with the units they must go with) because they carry
// names the approver is not shown.
func leaveUnseen(items []ReviewItem) (approve, left []ReviewItem) {
	approve, left = leaveHeld(items, func(it *ReviewItem) bool { return it.Unseen })
	for i := range left {
		if left[i].Unseen {
			left[i].Why = "it holds names or content not shown to you; a reviewer who can see them may approve it"
		} else {
			left[i].Why = "it goes with a held change that holds names or content not shown to you"
		}
	}
	return approve, left
}

// leaveBusy splits items, for --all, into those to decide and those left
// held (with the units they must go with) because their principal still
// has a file of them open for writing: one open descriptor refused the
// whole --all, every other principal's changes included, for as long as
// the principal kept it open.
func (d *Daemon) leaveBusy(items []ReviewItem) (decide, left []ReviewItem) {
	decide, left = leaveHeld(items, func(it *ReviewItem) bool {
		l := d.held.Get(it.Principal, it.Slug)
		if l == nil {
			return false
		}
		if err := l.Busy(it.full); err != nil {
			it.Busy = err.Error()
			return true
		}
		return false
	})
	for i := range left {
		if left[i].Busy == "" {
			left[i].Busy = "it goes with a held change whose file is open for writing"
		}
	}
	return decide, left
}

// leaveConflicts splits items, for approve --all, into those to approve
// and those left held (with the units they must go with) because the
// backing files moved since they were made: one conflicting unit
// refused the whole --all, every other principal's changes included,
// and an agent holding a change to a file rewritten often stalled every
// approval (found by a red-team pass). Named by id or uri, a conflict is
// still refused without --force.
func leaveConflicts(items []ReviewItem) (approve, left []ReviewItem) {
	approve, left = leaveHeld(items, func(it *ReviewItem) bool { return it.Conflict != "" })
	for i := range left {
		if left[i].Conflict != "" {
			left[i].Why = "the backing files changed since it was made: " + left[i].Conflict
		} else {
			left[i].Why = "it goes with a held change whose backing files changed since it was made"
		}
	}
	return approve, left
}

// leaveHeld splits items into those to decide and those left held: the
// ones marked says, with the changes that must go with them
// (held.Together).
func leaveHeld(items []ReviewItem, marked func(*ReviewItem) bool) (decide, left []ReviewItem) {
	var picked []int
	changes := make([]held.Change, len(items))
	for i := range items {
		changes[i] = items[i].Change
		if marked(&items[i]) {
			picked = append(picked, i)
		}
	}
	if len(picked) == 0 {
		return items, nil
	}
	leave := held.Together(changes, picked)
	for i, it := range items {
		if slices.Contains(leave, i) {
			left = append(left, it)
		} else {
			decide = append(decide, it)
		}
	}
	return decide, left
}

// decide approves (applies, journaled) or rejects one held change.
func (d *Daemon) decide(p *policy.Principal, peer control.Peer, it ReviewItem, approve, force bool) error {
	l := d.held.Get(it.Principal, it.Slug)
	src := d.source(it.Slug)
	if l == nil || src == nil {
		return fmt.Errorf("%s: %w", it.URI, held.ErrNoChange)
	}
	r, err := src.Root()
	if err != nil {
		return err
	}
	var changes []mounts.Change
	touched := func(rel string) {
		for _, c := range changes {
			if c.Rel == rel {
				return
			}
		}
		changes = append(changes, mounts.Change{Slug: it.Slug, Rel: rel})
	}
	touched(it.Path)
	for _, x := range it.Inside {
		touched(x)
	}
	for _, x := range it.Links {
		touched(x) // an unchanged copy linked to leaves the layer
	}
	if it.From != "" {
		touched(it.From)
	}
	if !approve {
		if err := l.Discard(r, it.Change); err != nil {
			return err
		}
		d.auditReview(p, peer, "review-reject", it)
		d.fsys.HeldChanged(it.Slug, rels(changes))
		return nil
	}
	ev := journal.Event{Principal: p.Name, UID: peer.UID, PID: uint32(peer.PID), Op: "approve"}
	hooks := held.Hooks{
		Before: func(rel, op string) {
			touched(rel)
			if d.jr() == nil {
				return
			}
			e := ev
			e.URI = uri(it.Slug, rel)
			if err := d.saveCurrent(e, it.Slug, rel, op == "unlink", true); err != nil {
				d.log.Warn("journal: could not keep content before an approval", "uri", e.URI, "err", err)
			}
		},
		Created: func(rel string) {
			touched(rel)
			j := d.jr()
			if j == nil {
				return
			}
			e := ev
			e.URI = uri(it.Slug, rel)
			j.Created(e)
		},
		Renamed: func(from, rel string) {
			touched(from)
			touched(rel)
			j := d.jr()
			if j == nil {
				return
			}
			e := ev
			e.URI = uri(it.Slug, rel)
			j.Renamed(e, uri(it.Slug, from))
		},
	}
	err = l.Apply(r, it.Change, hooks, force)
	if errors.Is(err, held.ErrConflict) {
		// The base moved between the check and the change.
		d.auditReview(p, peer, "review-conflict", it)
		return fmt.Errorf("%s changed while approving; nothing was changed: %w", it.URI, held.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("approving %s: %w", it.URI, err)
	}
	d.auditReview(p, peer, "review-approve", it)
	for i := range changes {
		if _, err := r.Lstat(changes[i].Rel); err != nil {
			changes[i].Gone = true
		}
	}
	d.fsys.Refresh(changes)
	return nil
}

func rels(cs []mounts.Change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Rel
	}
	return out
}

// auditReview records a review decision on it. A decision on another
// principal's change (only a reviewer may make one) or by root or the
// daemon's uid is never rate limited; a principal withdrawing its own held
// changes is limited as its other lines are, or an agent could write
// lines without bound by holding and withdrawing.
func (d *Daemon) auditReview(p *policy.Principal, peer control.Peer, op string, it ReviewItem) {
	if d.audit == nil {
		return
	}
	r := audit.Record{Principal: p.Name, UID: peer.UID, GID: peer.GID, PID: uint32(peer.PID), Op: op, URI: it.URI, Rule: "review", Outcome: strings.TrimPrefix(op, "review-")}
	if it.Principal == p.Name && peer.UID != 0 && peer.UID != uint32(os.Geteuid()) {
		d.audit.Denied(r)
		return
	}
	d.audit.Decision(r)
}

// reviewer renders .neuralis/review/ for the mount.
type reviewer struct{ d *Daemon }

// ReviewText lists (or diffs) principal's own held changes that canRead
// allows, showing of them what files let the caller see.
func (rv reviewer) ReviewText(principal string, canRead func(string) bool, files fs.ReviewSight, diff bool) ([]byte, error) {
	uri := func(l *held.Layer, rel string) string { return l.Slug + "://" + rel }
	sight := readerSight{
		read: func(l *held.Layer) *held.Readable {
			return &held.Readable{
				Backing: func(rel string) bool { return files.Open(uri(l, rel)) },
				Held:    func(rel string) bool { return files.OpenHeld(uri(l, rel)) },
			}
		},
		see:     files.See,
		seeHeld: func(l *held.Layer, rel string) bool { return files.SeeHeld(uri(l, rel)) },
	}
	items, diffs := rv.d.heldItems(func(holder string) bool { return holder == principal }, canRead,
		func(string, held.Change) bool { return true }, sight, diff)
	var b strings.Builder
	// A layer whose source cannot be opened is in neither: a comment
	// line says so, so that an empty list is not read as nothing held.
	for _, u := range rv.d.unlistedOf(func(holder string) bool { return holder == principal }, false) {
		b.WriteString("# " + u + "\n")
	}
	if diff {
		return []byte(b.String() + diffs), nil
	}
	if len(items) == 0 {
		if b.Len() > 0 {
			return []byte(b.String()), nil
		}
		return []byte("no held changes\n"), nil
	}
	for _, it := range items {
		what := it.URI
		if it.Op == "rename" {
			what = index.QuoteURI(it.Slug+"://"+it.From) + " -> " + it.URI
		}
		what = index.QuoteURI(what)
		note := ""
		if it.Conflict != "" {
			note = "\tconflict"
		}
		if len(it.GitRuns) > 0 {
			note += "\tgit-runs" // approve --all leaves it held
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\t%d\t%s%s\n", it.ID, it.Op, what, it.Size, cmp.Or(it.Age, "-"), note)
	}
	return []byte(b.String()), nil
}

// filesAllow checks, with the peer's own file permissions (package
// asuser), that it could make c on a plain folder: write on every
// backing file the change replaces or removes, and write and search on
// the folder of every name it makes or removes. Root and the daemon's uid
// are not checked (the daemon applies changes as itself).
func (d *Daemon) filesAllow(peer control.Peer, c held.Change) error {
	cred := credOf(peer)
	if cred.Exempt() {
		return nil
	}
	r, err := d.sourceRoot(c.Slug)
	if err != nil {
		return err
	}
	paths := append([]string{c.Path}, c.Inside...)
	if c.From != "" {
		paths = append(paths, c.From)
	}
	var denied string
	err = asuser.Run(cred, func() error {
		for _, rel := range paths {
			if _, err := r.Lstat(rel); err == nil && c.Op != "rename" && c.Op != "delete" && c.Op != "rmdir" {
				if !accessAt(r, rel, unix.W_OK) {
					denied = rel
					return nil
				}
			}
			dir := path.Dir(rel)
			for dir != "." && dir != "" {
				if _, err := r.Lstat(dir); err == nil {
					break
				}
				dir = path.Dir(dir)
			}
			if dir == "." {
				dir = ""
			}
			if !accessAt(r, dir, unix.W_OK|unix.X_OK) {
				denied = dir
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if denied != "" {
		return fmt.Errorf("uid %d may not write %s://%s (file permissions), so it cannot approve or reject this change", peer.UID, c.Slug, denied)
	}
	return nil
}

// accessAt reports whether the thread's filesystem identity may access
// rel below r with mode (access(2) semantics, decided by fsuid).
func accessAt(r *mounts.Root, rel string, mode uint32) bool {
	fd, err := r.OpenPath(rel)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Faccessat2(fd, "", mode, unix.AT_EACCESS|unix.AT_EMPTY_PATH) == nil
}
