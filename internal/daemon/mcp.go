package daemon

// Control requests for `neuralisfs mcp` (README "MCP server"): reading,
// listing, a folder's .status and writing one file, decided for the
// peer's uid exactly as the mount decides for it. The policy hides a name
// the principal may not read (it is answered as absent, the same sentence
// as a name that does not exist); file permissions are the kernel's, for
// a worker thread that has taken the peer's filesystem identity (package
// asuser), as for revert. Every request that touches a file is an audit
// line with the principal.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/internal/asuser"
	"github.com/neuralis/neuralisfs/internal/audit"
	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/internal/held"
	"github.com/neuralis/neuralisfs/internal/journal"
	"github.com/neuralis/neuralisfs/internal/reserved"
	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// MCPMaxBytes bounds one answer of an mcp-* request: the rest is asked for
// with the Next offset the answer carries.
const MCPMaxBytes = 64 << 10

// mcpMaxDepth bounds a listing's depth.
const mcpMaxDepth = 16

// MCPRead is the answer to mcp-read: Content from byte Offset (of the file,
// or of the line range asked for), and Next, the offset to ask for the
// rest (0 when there is none).
type MCPRead struct {
	URI     string `json:"uri"`
	Content string `json:"content"`
	Offset  int64  `json:"offset"`
	Next    int64  `json:"next,omitempty"`
	Size    int64  `json:"size"`
}

// MCPEntry is one name of a listing.
type MCPEntry struct {
	URI  string `json:"uri"`
	Type string `json:"type"` // "file", "folder", "symlink", "other"
	Size int64  `json:"size"`
}

// MCPList is the answer to mcp-list: entries from the Offset'th on, in
// depth-first order of sorted names, and Next, the offset of the rest
// (0 when there is none).
type MCPList struct {
	URI     string     `json:"uri"`
	Entries []MCPEntry `json:"entries"`
	Next    int64      `json:"next,omitempty"`
}

// MCPWrite is the answer to mcp-write.
type MCPWrite struct {
	URI     string `json:"uri"`
	Bytes   int    `json:"bytes"`
	Created bool   `json:"created"`
	// Held says the write went to the principal's held changes (a review
	// rule): `neuralisfs review list` shows it; the backing file is as it
	// was.
	Held bool `json:"held"`
}

// mcp answers the mcp-* requests.
func (d *Daemon) mcp(ctx context.Context, p *policy.Principal, peer control.Peer, req control.Request) (any, error) {
	switch req.Op {
	case "mcp-read":
		return d.mcpRead(p, peer, req)
	case "mcp-list":
		return d.mcpList(ctx, p, peer, req)
	case "mcp-status":
		return d.mcpStatus(ctx, p, peer, req)
	case "mcp-write":
		return d.mcpWrite(p, peer, req)
	}
	return nil, fmt.Errorf("unknown request %q", req.Op)
}

// mcpAudit records one mcp request on u: outcome "" for a denial.
func (d *Daemon) mcpAudit(p *policy.Principal, peer control.Peer, op, u, rule, outcome string) {
	if d.audit == nil {
		return
	}
	d.audit.Denied(audit.Record{Principal: p.Name, UID: peer.UID, GID: peer.GID, PID: uint32(peer.PID),
		Op: op, URI: u, Rule: rule, Outcome: outcome})
}

// errAbsent is the answer for a name that does not exist and for one the
// policy hides alike, as the mount answers both ENOENT.
func errAbsent(u string) error { return fmt.Errorf("%s: no such file or folder", u) }

// mcpTarget resolves req.URI to a visible source's confined root and the
// path in it; a hidden or unknown source is "unknown source".
func (d *Daemon) mcpTarget(p *policy.Principal, u string) (string, string, *mounts.Root, error) {
	slug, rel, err := policy.ParseURI(strings.TrimSuffix(u, "/"))
	if err != nil {
		if s, ok := strings.CutSuffix(u, "://"); ok && s != "" {
			slug, rel, err = s, "", nil
		} else {
			return "", "", nil, fmt.Errorf("%q is not a uri (<slug>://<path>)", u)
		}
	}
	src := d.source(slug)
	if src == nil || !d.policy().SourceVisible(p, slug) {
		return "", "", nil, fmt.Errorf("unknown source %q", slug)
	}
	r, err := src.Root()
	if err != nil {
		return "", "", nil, fmt.Errorf("source %q is unavailable: %v", slug, err)
	}
	return slug, rel, r, nil
}

// mcpHidden reports whether the policy hides slug://rel (or a folder on
// the way to it) from p, auditing the denial.
func (d *Daemon) mcpHidden(p *policy.Principal, peer control.Peer, op, slug, rel string) bool {
	if reserved.IsDaemonName(rel) {
		return true // the daemon's own, for everyone (reserved.DaemonPrefix)
	}
	for q := rel; ; q = path.Dir(q) {
		if q == "." {
			q = ""
		}
		dec := d.policy().Decide(p, slug, q, policy.Read)
		if !dec.Allowed {
			d.mcpAudit(p, peer, op, uri(slug, rel), dec.Rule.Where(), "")
			return true
		}
		if q == "" {
			return false
		}
	}
}

// mcpView returns the root holding rel as p sees it: its held layer's
// copy when it has one there, else the backing root.
func (d *Daemon) mcpView(p *policy.Principal, slug, rel string, r *mounts.Root) (*mounts.Root, *held.Layer, error) {
	if d.held == nil || !d.policy().Holds(p, slug) {
		return r, nil, nil
	}
	lay := d.held.Get(p.Name, slug)
	if lay == nil {
		return r, nil, nil
	}
	r2, err := lay.Root(r, rel)
	return r2, lay, err
}

// peerErr turns a file error met as the peer into one sentence.
func peerErr(u string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		return errAbsent(u)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%s: permission denied", u)
	case errors.Is(err, unix.EROFS):
		return fmt.Errorf("%s: read-only file system", u)
	}
	return fmt.Errorf("%s: %v", u, err)
}

func (d *Daemon) mcpRead(p *policy.Principal, peer control.Peer, req control.Request) (MCPRead, error) {
	slug, rel, r, err := d.mcpTarget(p, req.URI)
	if err != nil {
		return MCPRead{}, err
	}
	u := uri(slug, rel)
	if req.Offset < 0 || req.From < 0 || req.To < 0 || (req.To > 0 && req.To < req.From) {
		return MCPRead{}, fmt.Errorf("bad range for %s: offset %d, lines %d-%d", u, req.Offset, req.From, req.To)
	}
	if d.mcpHidden(p, peer, "mcp-read", slug, rel) {
		return MCPRead{}, errAbsent(u)
	}
	root, _, err := d.mcpView(p, slug, rel, r)
	if err != nil {
		return MCPRead{}, errAbsent(u)
	}
	self := credOf(peer).Exempt()
	if !self && os.Geteuid() != 0 {
		self = true // the daemon reads only what its own uid may
	}
	var out MCPRead
	err = d.as(self, peer, func() error {
		if st, err := root.Lstat(rel); err != nil {
			return err
		} else if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return errFolder
		} else if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return errSymlink
		} else if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return errNotRegular
		}
		fd, err := root.Open(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), rel)
		defer f.Close()
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return errFolder
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return errNotRegular
		}
		out, err = readRange(f, st.Size, req)
		return err
	})
	switch {
	case errors.Is(err, errFolder):
		return MCPRead{}, fmt.Errorf("%s is a folder; list it instead", u)
	case errors.Is(err, errSymlink):
		return MCPRead{}, symlinkErr(u)
	case errors.Is(err, errNotRegular):
		return MCPRead{}, fmt.Errorf("%s is not a regular file", u)
	case errors.Is(err, errBinary):
		return MCPRead{}, fmt.Errorf("%s is not UTF-8 text; read it on the mount", u)
	case err != nil:
		d.mcpAudit(p, peer, "mcp-read", u, "file permissions", "")
		return MCPRead{}, peerErr(u, err)
	}
	out.URI = u
	d.mcpAudit(p, peer, "mcp-read", u, "", "read")
	return out, nil
}

// symlinkErr is the answer for a symbolic link: the tools open no name
// through one (the mount's callers follow links in their own kernel).
func symlinkErr(u string) error {
	return fmt.Errorf("%s is a symbolic link: the MCP tools do not follow links; name the file it points to by its own uri", u)
}

var (
	errFolder     = errors.New("a folder")
	errNotRegular = errors.New("not a regular file")
	errSymlink    = errors.New("a symbolic link")
	errBinary     = errors.New("not UTF-8 text")
)

// readRange reads at most MCPMaxBytes of f (size bytes) from req.Offset,
// of the whole file or of its lines req.From to req.To (1-based, To 0 for
// the end). An answer ends on a whole UTF-8 character (Next continues
// after it); content that is not UTF-8 text is errBinary.
func readRange(f *os.File, size int64, req control.Request) (MCPRead, error) {
	out := MCPRead{Offset: req.Offset, Size: size}
	var b []byte
	more := false
	if req.From == 0 && req.To == 0 {
		buf := make([]byte, MCPMaxBytes)
		n, err := f.ReadAt(buf, req.Offset)
		if err != nil && err != io.EOF {
			return out, err
		}
		b, more = buf[:n], req.Offset+int64(n) < size
	} else {
		sel, err := selectLines(f, max(req.From, 1), req.To, req.Offset+MCPMaxBytes+1)
		if err != nil {
			return out, err
		}
		out.Size = int64(len(sel))
		if req.Offset < int64(len(sel)) {
			b = sel[req.Offset:]
		}
		if len(b) > MCPMaxBytes {
			b, more = b[:MCPMaxBytes], true
		}
	}
	if more {
		// Do not split a character between two answers.
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.FullRune(b[lastStart(b):]); i++ {
			b = b[:lastStart(b)]
		}
		out.Next = req.Offset + int64(len(b))
	}
	if !utf8.Valid(b) {
		return out, errBinary
	}
	out.Content = string(b)
	return out, nil
}

// lastStart is where the last (maybe incomplete) character of b starts.
func lastStart(b []byte) int {
	i := len(b) - 1
	for i > 0 && !utf8.RuneStart(b[i]) && len(b)-i < utf8.UTFMax {
		i--
	}
	return i
}

// selectLines returns lines from to to (0: the end) of r, at most limit
// bytes of them; it never holds more than that (a line may be any length).
func selectLines(r io.Reader, from, to int, limit int64) ([]byte, error) {
	br := bufio.NewReader(r)
	var sel []byte
	for n := 1; to == 0 || n <= to; {
		part, err := br.ReadSlice('\n')
		if n >= from {
			sel = append(sel, part...)
			if int64(len(sel)) >= limit {
				return sel[:limit], nil
			}
		}
		switch {
		case err == nil:
			n++
		case errors.Is(err, bufio.ErrBufferFull):
			// The rest of the same line follows.
		case err == io.EOF:
			return sel, nil
		default:
			return nil, err
		}
	}
	return sel, nil
}

func (d *Daemon) mcpList(ctx context.Context, p *policy.Principal, peer control.Peer, req control.Request) (MCPList, error) {
	slug, rel, r, err := d.mcpTarget(p, req.URI)
	if err != nil {
		return MCPList{}, err
	}
	u := uri(slug, rel)
	depth := req.Depth
	if depth == 0 {
		depth = 1
	}
	if depth < 0 || depth > mcpMaxDepth || req.Offset < 0 {
		return MCPList{}, fmt.Errorf("bad listing of %s: depth must be 1 to %d and offset at least 0", u, mcpMaxDepth)
	}
	if d.mcpHidden(p, peer, "mcp-list", slug, rel) {
		return MCPList{}, errAbsent(u)
	}
	self := credOf(peer).Exempt() || os.Geteuid() != 0
	var lay *held.Layer
	if d.held != nil && d.policy().Holds(p, slug) {
		lay = d.held.Get(p.Name, slug)
	}
	out := MCPList{URI: u, Entries: []MCPEntry{}}
	var skip, budget int64 = req.Offset, MCPMaxBytes
	full := false
	// list returns the folder dir's entries as p sees them, sorted.
	list := func(dir string) ([]held.Entry, error) {
		if lay != nil {
			// The merged folder is listed by the daemon, once the peer
			// could open it where it sees it (the layer's copy keeps
			// the backing folder's owner and mode): a folder the peer
			// may not list keeps its names, as on the mount.
			at, err := lay.Root(r, dir)
			if err != nil {
				return nil, err
			}
			if err := d.as(self, peer, func() error {
				fd, err := at.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
				if err == nil {
					unix.Close(fd)
				}
				return err
			}); err != nil {
				return nil, err
			}
			return lay.List(r, dir)
		}
		var ents []held.Entry
		err := d.as(self, peer, func() error {
			fd, err := r.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				return err
			}
			f := os.NewFile(uintptr(fd), dir)
			defer f.Close()
			names, err := f.Readdirnames(-1)
			if err != nil {
				return err
			}
			for _, n := range names {
				var st unix.Stat_t
				if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
					continue
				}
				ents = append(ents, held.Entry{Name: n, St: st})
			}
			return nil
		})
		return ents, err
	}
	pol := d.policy()
	shows := pol.Trivial() || pol.HidesNothing(slug) // folder sizes, as fs.tree.showsCounts
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		ents, err := list(dir)
		if err != nil {
			return err
		}
		slices.SortFunc(ents, func(a, b held.Entry) int { return strings.Compare(a.Name, b.Name) })
		for _, e := range ents {
			if full {
				return nil
			}
			crel := join(dir, e.Name)
			if reserved.IsDaemonName(crel) || !d.policy().Decide(p, slug, crel, policy.Read).Allowed {
				continue
			}
			ent := MCPEntry{URI: uri(slug, crel), Type: typeOf(e.St.Mode), Size: e.St.Size}
			if ent.Type == "folder" && !shows {
				// As the mount shows it (fs hideCounts): a folder's
				// size grows with every name in it, hidden ones too.
				ent.Size = 4096
			}
			if skip > 0 {
				skip--
			} else {
				cost := int64(len(ent.URI) + 48)
				if budget < cost {
					full = true
					out.Next = req.Offset + int64(len(out.Entries))
					return nil
				}
				budget -= cost
				out.Entries = append(out.Entries, ent)
			}
			if ent.Type == "folder" && level < depth {
				// A folder the peer may not open is listed, not entered
				// (ls -R says so and goes on).
				walk(crel, level+1)
			}
		}
		return nil
	}
	if err := walk(rel, 1); err != nil {
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			var st unix.Stat_t
			var lerr error
			if lay != nil {
				st, _, lerr = lay.Lstat(r, rel)
			} else {
				st, lerr = r.Lstat(rel)
			}
			if lerr == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return MCPList{}, symlinkErr(u)
			}
			return MCPList{}, fmt.Errorf("%s is a file; read it instead", u)
		}
		d.mcpAudit(p, peer, "mcp-list", u, "file permissions", "")
		return MCPList{}, peerErr(u, err)
	}
	d.mcpAudit(p, peer, "mcp-list", u, "", "list")
	return out, nil
}

func typeOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "folder"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}

// MCPText is a rendered text (a .status) from Offset, with Next the
// offset of the rest (0 when there is none).
type MCPText struct {
	URI    string `json:"uri"`
	Text   string `json:"text"`
	Offset int64  `json:"offset"`
	Next   int64  `json:"next,omitempty"`
}

func (d *Daemon) mcpStatus(ctx context.Context, p *policy.Principal, peer control.Peer, req control.Request) (MCPText, error) {
	slug, rel, r, err := d.mcpTarget(p, req.URI)
	if err != nil {
		return MCPText{}, err
	}
	u := uri(slug, rel)
	if req.Offset < 0 {
		return MCPText{}, fmt.Errorf("bad offset %d for %s", req.Offset, u)
	}
	if d.mcpHidden(p, peer, "mcp-status", slug, rel) {
		return MCPText{}, errAbsent(u)
	}
	// A principal whose writes are held sees its own worktree.
	vr, lay, err := d.mcpView(p, slug, rel, r)
	if err != nil {
		return MCPText{}, peerErr(u, err)
	}
	var view *held.View
	if lay != nil {
		view = lay.View(r)
	}
	var st unix.Stat_t
	if err := d.as(credOf(peer).Exempt() || os.Geteuid() != 0 || lay != nil, peer, func() (err error) { st, err = vr.Lstat(rel); return err }); err != nil {
		return MCPText{}, peerErr(u, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return MCPText{}, fmt.Errorf("%s is not a folder", u)
	}
	if d.git == nil || len(d.git.Virtual(slug, rel)) == 0 {
		return MCPText{}, fmt.Errorf("%s is not a folder of a git checkout: it has no .status", u)
	}
	files, done := d.peerFiles(peer)
	defer done()
	if rel != "" && !files.canSee(u) {
		return MCPText{}, peerErr(u, unix.EACCES)
	}
	b, err := d.git.Status(ctx, slug, rel, func(q string) bool {
		return d.policy().Decide(p, slug, q, policy.Read).Allowed && files.canSee(uri(slug, q))
	}, view)
	if err != nil {
		return MCPText{}, fmt.Errorf("%s: %v", u, err)
	}
	d.mcpAudit(p, peer, "mcp-status", u, "", "status")
	out := MCPText{URI: u, Offset: req.Offset}
	if req.Offset < int64(len(b)) {
		b = b[req.Offset:]
		if len(b) > MCPMaxBytes {
			b = b[:MCPMaxBytes]
			out.Next = req.Offset + MCPMaxBytes
		}
		out.Text = string(b)
	}
	return out, nil
}

// mcpWrite creates or replaces the content of one file, as a write on the
// mount would: held in the principal's layer under a review rule, made as
// the peer (journaled first) when the policy allows it, refused with the
// policy's answer otherwise.
func (d *Daemon) mcpWrite(p *policy.Principal, peer control.Peer, req control.Request) (MCPWrite, error) {
	slug, rel, r, err := d.mcpTarget(p, req.URI)
	if err != nil {
		return MCPWrite{}, err
	}
	u := uri(slug, rel)
	if rel == "" || strings.HasSuffix(req.URI, "/") {
		return MCPWrite{}, fmt.Errorf("%q is not the uri of a file (<slug>://<path>)", req.URI)
	}
	if d.mcpHidden(p, peer, "mcp-write", slug, rel) {
		// The mount refuses a change to a hidden name with EACCES,
		// whether something is there or not.
		return MCPWrite{}, fmt.Errorf("%s: permission denied", u)
	}
	dec := d.policy().Decide(p, slug, rel, policy.Write)
	if !dec.Allowed {
		d.mcpAudit(p, peer, "mcp-write", u, dec.Rule.Where(), "")
		if dec.ReadOnly {
			return MCPWrite{}, fmt.Errorf("%s is on a read-only source: writes are refused", u)
		}
		return MCPWrite{}, fmt.Errorf("%s: permission denied by the policy (%s)", u, dec.Rule.Where())
	}
	self := credOf(peer).Exempt()
	if !self && os.Geteuid() != 0 {
		return MCPWrite{}, fmt.Errorf("writing as uid %d needs the daemon to run as root (it checks the write with uid %d's file permissions)", peer.UID, peer.UID)
	}
	content := []byte(req.Content)
	if dec.Held {
		return d.mcpWriteHeld(p, peer, slug, rel, r, content, self, dec)
	}
	st, statErr := r.Lstat(rel)
	exists := statErr == nil
	if exists && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return MCPWrite{}, symlinkErr(u)
	}
	if exists && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return MCPWrite{}, fmt.Errorf("%s is not a regular file", u)
	}
	if exists && !self {
		// The peer must be able to write the file: no journal record for
		// a write that is refused (opening without O_TRUNC changes nothing).
		if err := asuser.Run(credOf(peer), func() error { return openable(r, rel) }); err != nil {
			d.mcpAudit(p, peer, "mcp-write", u, "file permissions", "")
			return MCPWrite{}, peerErr(u, err)
		}
	}
	ev := journal.Event{Principal: p.Name, UID: peer.UID, PID: uint32(peer.PID), Op: "write", URI: u}
	j := d.jr()
	if exists && j != nil {
		if err := d.saveCurrent(ev, slug, rel, false, false); err != nil {
			return MCPWrite{}, fmt.Errorf("keeping the current content of %s before writing: %w", u, err)
		}
	}
	if exists {
		err = d.as(self, peer, func() error { return rewrite(r, rel, content, 0, false) })
	} else {
		uid, gid := -1, -1
		if self {
			uid, gid = int(peer.UID), int(peer.GID)
		}
		err = d.as(self, peer, func() error {
			fd, _, err := r.Create(rel, unix.O_WRONLY|unix.O_EXCL, 0o644, uid, gid)
			if err != nil {
				return err
			}
			f := os.NewFile(uintptr(fd), rel)
			defer f.Close()
			if _, err := f.Write(content); err != nil {
				return err
			}
			return f.Sync()
		})
	}
	if err != nil {
		d.mcpAudit(p, peer, "mcp-write", u, "file permissions", "")
		return MCPWrite{}, peerErr(u, err)
	}
	if !exists && j != nil {
		j.Created(ev)
	}
	d.fsys.Refresh([]mounts.Change{{Slug: slug, Rel: rel}})
	d.mcpAudit(p, peer, "mcp-write", u, dec.Rule.Where(), "write")
	return MCPWrite{URI: u, Bytes: len(content), Created: !exists}, nil
}

// mcpWriteHeld writes content to rel in p's held layer (copied up from the
// backing file first when p sees one): the backing file is untouched.
func (d *Daemon) mcpWriteHeld(p *policy.Principal, peer control.Peer, slug, rel string, r *mounts.Root, content []byte, self bool, dec policy.Decision) (MCPWrite, error) {
	u := uri(slug, rel)
	if d.held == nil {
		return MCPWrite{}, fmt.Errorf("%s: writes here are held for review, and the held-changes store is not open", u)
	}
	if err := d.held.CheckQuota(p.Name); err != nil {
		d.mcpAudit(p, peer, "mcp-write", u, dec.Rule.Where(), "quota")
		return MCPWrite{}, fmt.Errorf("%s: %v", u, err)
	}
	lay, err := d.held.Ensure(p.Name, slug)
	if err != nil {
		return MCPWrite{}, fmt.Errorf("%s: cannot open the held changes: %v", u, err)
	}
	st, root, statErr := lay.Lstat(r, rel)
	exists := statErr == nil
	if exists && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return MCPWrite{}, symlinkErr(u)
	}
	if exists && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return MCPWrite{}, fmt.Errorf("%s is not a regular file", u)
	}
	if !self {
		// The peer must be able to write the file, or make it in its
		// folder, where it sees them (the backing file or its own held
		// one), as the kernel checks on the mount before the write is
		// held; neither check changes anything.
		var err error
		if exists {
			err = asuser.Run(credOf(peer), func() error { return openable(root, rel) })
		} else {
			dir := path.Dir(rel)
			if dir == "." {
				dir = ""
			}
			var droot *mounts.Root
			if _, droot, err = lay.Lstat(r, dir); err == nil {
				err = asuser.Run(credOf(peer), func() error { return canMakeIn(droot, dir) })
			}
		}
		if err != nil {
			d.mcpAudit(p, peer, "mcp-write", u, "file permissions", "")
			return MCPWrite{}, peerErr(u, err)
		}
	}
	// Checked by what the write adds, as a write through the mount is
	// (held.Layer.CheckSize): the content replaces the held file, or
	// is new. Before, only "holds the bound already?" was asked, and
	// one call could pass the bound by its content's length.
	var have int64
	if exists && lay.Where(rel) == held.Upper {
		have = st.Size
	}
	if err := lay.CheckSize(rel, 0, have, int64(len(content))); err != nil {
		d.mcpAudit(p, peer, "mcp-write", u, dec.Rule.Where(), "quota")
		return MCPWrite{}, fmt.Errorf("%s: %v", u, err)
	}
	write := func(fd int) error {
		f := os.NewFile(uintptr(fd), rel)
		defer f.Close()
		if _, err := f.Write(content); err != nil {
			return err
		}
		return f.Sync()
	}
	if exists {
		if err := lay.CopyUp(r, rel); err != nil {
			return MCPWrite{}, fmt.Errorf("%s: %v", u, err)
		}
		fd, err := lay.Upper().Open(rel, unix.O_WRONLY|unix.O_TRUNC|unix.O_NOCTTY, 0)
		if err == nil {
			err = write(fd)
		}
		if err != nil {
			return MCPWrite{}, fmt.Errorf("%s: %v", u, err)
		}
	} else {
		fd := -1
		err := lay.Make(r, rel, func(up *mounts.Root) (err error) {
			fd, _, err = up.Create(rel, unix.O_WRONLY|unix.O_EXCL, 0o644, int(peer.UID), int(peer.GID))
			return err
		})
		if err == nil {
			err = write(fd)
		} else if fd >= 0 {
			unix.Close(fd)
		}
		if err != nil {
			return MCPWrite{}, peerErr(u, err)
		}
	}
	lay.Wrote(rel)
	d.fsys.HeldChanged(slug, []string{rel})
	d.mcpAudit(p, peer, "mcp-write", u, dec.Rule.Where(), "held")
	return MCPWrite{URI: u, Bytes: len(content), Created: !exists, Held: true}, nil
}

// canMakeIn reports whether a name can be made in the folder dir (run as
// the peer): write and search permission on it.
func canMakeIn(r *mounts.Root, dir string) error {
	fd, err := r.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Faccessat2(fd, "", unix.W_OK|unix.X_OK, unix.AT_EACCESS|unix.AT_EMPTY_PATH)
}

// openable reports whether rel can be opened for writing (run as the
// peer); the open changes nothing.
func openable(r *mounts.Root, rel string) error {
	fd, err := r.Open(rel, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err == nil {
		unix.Close(fd)
	}
	return err
}
