package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/fs"
	"github.com/neuralis/neuralisfs/index"
	"github.com/neuralis/neuralisfs/internal/asuser"
	"github.com/neuralis/neuralisfs/internal/control"
	"github.com/neuralis/neuralisfs/internal/journal"
	"github.com/neuralis/neuralisfs/internal/rawname"
	"github.com/neuralis/neuralisfs/internal/reserved"
	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// journaler connects the mount's change hooks to the journal: it reads the
// content about to be overwritten through the source's confined root.
type journaler struct{ d *Daemon }

var _ fs.Journal = journaler{}

// errJournalOff answers a history or revert while the journal is off.
var errJournalOff = errors.New("the journal is disabled in the config ([journal] enabled = false)")

// jr is the running journal, or nil.
func (d *Daemon) jr() *journal.Journal { return d.jrnl.Load() }

func (d *Daemon) startJournal() error {
	if !d.cfg.JournalEnabled() {
		return nil
	}
	j, err := d.openJournal(d.cfg)
	if err != nil {
		return err
	}
	d.jrnl.Store(j)
	return nil
}

// openJournal opens the journal under state_dir with cfg's bounds and,
// the first time, cleans up after a revert a kill cut short.
func (d *Daemon) openJournal(cfg *mounts.Config) (*journal.Journal, error) {
	j, err := journal.Open(journal.Options{
		Dir:          journalDir(d.cfg),
		MaxBytes:     cfg.Journal.MaxBytes,
		MaxFileBytes: cfg.Journal.MaxFileBytes,
		MaxRecords:   cfg.Journal.MaxRecords,
		Batched:      cfg.Journal.Sync != "each",
		Log:          d.log,
		NoSpace:      func(err error) { d.noSpace("journal", err) },
	})
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if d.landing == nil {
		d.landing = &landing{path: filepath.Join(d.cfg.StateDirPath(), "landing.jsonl")}
		if err := d.landing.clean(d.sourceRoot); err != nil {
			d.log.Error("revert: cleaning up after a revert that did not finish", "err", err)
		}
	}
	return j, nil
}

// setJournal turns the journal on or off as a reload's cfg says. Turned
// on, it is opened as at start, with every record and copy it kept
// before, and the mounts keep content before their changes from the next
// one on; turned off, they stop, and it is closed (what it staged is
// published first, as at a stop). Its folder under state_dir stays, and
// history and revert say the journal is off meanwhile.
func (d *Daemon) setJournal(cfg *mounts.Config) error {
	on := cfg.JournalEnabled()
	if (d.jr() != nil) == on {
		return nil
	}
	if !on {
		d.fsys.SetJournal(nil)
		if err := d.jrnl.Swap(nil).Close(); err != nil {
			d.log.Warn("closing the journal", "err", err)
		}
		return nil
	}
	j, err := d.openJournal(cfg)
	if err != nil {
		return err
	}
	d.jrnl.Store(j)
	d.fsys.SetJournal(journaler{d})
	return nil
}

func journalDir(cfg *mounts.Config) string {
	return cfg.StateDirPath() + "/journal"
}

func (d *Daemon) source(slug string) *mounts.Source {
	for _, s := range d.srcs() {
		if s.Slug() == slug {
			return s
		}
	}
	return nil
}

// sourceRoot is the confined root of source slug: an error when the
// running config has no such source (a reload removed it) or when it is
// unavailable.
func (d *Daemon) sourceRoot(slug string) (*mounts.Root, error) {
	src := d.source(slug)
	if src == nil {
		return nil, fmt.Errorf("unknown source %q", slug)
	}
	return src.Root()
}

func event(e fs.JournalEvent) journal.Event {
	return journal.Event{Principal: e.Principal, UID: e.UID, PID: e.PID, Op: e.Op, URI: uri(e.Slug, e.Rel)}
}

func uri(slug, rel string) string { return slug + "://" + rel }

// saveCurrent journals the current content of slug://rel if it is an
// existing regular file. leaving says the name is about to go (unlink,
// rename over it), so the journal may keep the inode by a hard link
// instead of copying it.
//
// The file is resolved once, confined and without following a symlink
// (O_PATH), and the journal works on exactly that inode; in batched mode
// it stages the content and hashes and stores it in the background
// (journal.Keep), so the FUSE request waits for a link or a
// copy_file_range, not for hashing, fsyncs or publishing.
//
// regular says the kernel knows the file as a regular file (see
// fs.JournalEvent.Regular): it is then opened for reading at once, so the
// journal reads it through that descriptor instead of opening it again
// through /proc (one path walk and an open and a close fewer on every
// change). Otherwise it is opened O_PATH, so that removing a device node
// never opens the device; either way fstat decides whether it is kept.
func (d *Daemon) saveCurrent(ev journal.Event, slug, rel string, leaving, regular bool) error {
	r, err := d.sourceRoot(slug)
	if err != nil {
		return nil
	}
	fd, readable := -1, false
	if regular {
		// O_NONBLOCK: a FIFO swapped in behind the mount must not block.
		// No access time stamped: the change itself would not stamp it
		// on a plain folder.
		fd, err = r.OpenNoAtime(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
		readable = err == nil
	}
	if !readable {
		// Not known to be regular, or not readable by the daemon (which
		// may still keep it by a hard link).
		if fd, err = r.OpenPath(rel); err != nil {
			return nil
		}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	return d.keep(ev, fd, readable, &st, leaving)
}

// keep journals the regular file open at fd (readable, or O_PATH), whose
// fstat is st.
func (d *Daemon) keep(ev journal.Event, fd int, readable bool, st *unix.Stat_t, leaving bool) error {
	j := d.jr()
	if j == nil {
		return nil // turned off since the change checked
	}
	return j.Keep(ev, journal.File{
		FD:       fd,
		Readable: readable,
		Mode:     st.Mode,
		UID:      st.Uid,
		GID:      st.Gid,
		Size:     st.Size,
		Links:    uint64(st.Nlink),
		Stamp:    stamp(st),
	}, leaving)
}

// stamp identifies st's file and state for journal.File.Stamp.
func stamp(st *unix.Stat_t) string {
	b := make([]byte, 0, 96)
	for i, v := range []int64{int64(st.Dev), int64(st.Ino), st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec} {
		if i > 0 {
			b = append(b, ":::.:."[i-1])
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return string(b)
}

// leaves reports whether op removes the name it changes.
func leaves(op string) bool { return op == "unlink" || op == "rename" }

func (jr journaler) Before(e fs.JournalEvent) {
	if err := jr.d.saveCurrent(event(e), e.Slug, e.Rel, leaves(e.Op) && !e.Open, e.Regular); err != nil && !errors.Is(err, journal.ErrClosed) {
		jr.d.log.Warn("journal: could not keep content before a change", "uri", uri(e.Slug, e.Rel), "op", e.Op, "err", err)
	}
}

func (jr journaler) BeforeOpen(e fs.JournalEvent, fd int, st *unix.Stat_t) {
	if err := jr.d.keep(event(e), fd, true, st, false); err != nil && !errors.Is(err, journal.ErrClosed) {
		jr.d.log.Warn("journal: could not keep content before a change", "uri", uri(e.Slug, e.Rel), "op", e.Op, "err", err)
	}
}

func (jr journaler) Created(e fs.JournalEvent) {
	j := jr.d.jr()
	if j == nil {
		return
	}
	if err := j.Created(event(e)); err != nil && !errors.Is(err, journal.ErrClosed) {
		jr.d.log.Warn("journal: could not record a creation", "uri", uri(e.Slug, e.Rel), "err", err)
	}
}

func (jr journaler) Renamed(e fs.JournalEvent, from string) {
	j := jr.d.jr()
	if j == nil {
		return
	}
	if err := j.Renamed(event(e), uri(e.Slug, from)); err != nil && !errors.Is(err, journal.ErrClosed) {
		jr.d.log.Warn("journal: could not record a rename", "uri", uri(e.Slug, e.Rel), "err", err)
	}
}

func (jr journaler) History(slug, rel string, canRead, readContent func(string) bool, reader asuser.Cred) ([]byte, error) {
	j := jr.d.jr()
	if j == nil {
		return nil, errJournalOff
	}
	recs, err := j.History(uri(slug, rel), canRead)
	if err != nil && !errors.Is(err, journal.ErrNoRecord) {
		return nil, err
	}
	return FormatHistory(hideDigests(visibleHistory(uri(slug, rel), recs), readContent, reader), droppedFor(j, reader)), nil
}

// Kept stands for a record's digest (its Before) where the reader may
// not read the file: the content is kept, and revert brings it back.
const Kept = "kept"

// hideDigests shows a record's digest of the content before it only to
// a reader whose own file permissions let it read the file now
// (readContent, asked once per uri; nil allows every one) and let it read
// that content when it was recorded (its mode and owner then:
// Record.ReadableBy; an exempt reader, root or the daemon's uid, reads
// every one): a SHA-256 of a file it may not read let it test guesses
// of that content offline, a PIN say (found by a red-team pass; held
// changes' digests follow the same rule), and so did one of a version
// it could not read, of a file it may read now (a second pass).
func hideDigests(recs []journal.Record, readContent func(string) bool, reader asuser.Cred) []journal.Record {
	if readContent == nil && reader.Exempt() {
		return recs
	}
	may := map[string]bool{}
	for i, r := range recs {
		if !strings.HasPrefix(r.Before, "sha256:") {
			continue
		}
		ok, known := may[r.URI]
		if !known {
			ok = readContent == nil || readContent(r.URI)
			may[r.URI] = ok
		}
		if !ok || !reader.Exempt() && !r.ReadableBy(reader.UID, reader.GID, reader.Groups) {
			recs[i].Before = Kept
		}
	}
	return recs
}

// HistoryReply is the control socket's answer to "history": the records,
// newest first, and what the journal's record bound has dropped (nil when
// nothing was), so a history can say it is not the whole story.
// droppedFor is what j's record bound dropped, as told to reader: the
// count and the time to root only (journal.Dropped.Untold).
func droppedFor(j *journal.Journal, reader asuser.Cred) journal.Dropped {
	if reader.Exempt() {
		return j.Dropped()
	}
	return j.Dropped().Untold()
}

type HistoryReply struct {
	Records []journal.Record `json:"records"`
	Dropped *journal.Dropped `json:"dropped,omitempty"`
}

func historyReply(recs []journal.Record, d journal.Dropped) HistoryReply {
	if recs == nil {
		recs = []journal.Record{}
	}
	rep := HistoryReply{Records: recs}
	if d.Records != 0 {
		rep.Dropped = &d
	}
	return rep
}

// visibleHistory keeps the records of a history answer for q (a uri, or a
// folder's ending in "/") that the reader may know of. The journal matches
// a record by its uri or by the uri it was renamed from, and blanks a from
// the reader may not read; a record that matched only through such a
// hidden from would tell the reader that the hidden name existed (asking
// for the history of a guessed secret name would confirm it), so it goes.
func visibleHistory(q string, recs []journal.Record) []journal.Record {
	match := func(u string) bool { return u == q }
	if strings.HasSuffix(q, "/") {
		match = func(u string) bool { return strings.HasPrefix(u, q) }
	}
	out := recs[:0]
	for _, r := range recs {
		if match(r.URI) || (r.From != "" && match(r.From)) {
			out = append(out, r)
		}
	}
	return out
}

// FormatHistory renders records one per line, newest first, and then a
// line saying that older records were dropped when the journal's record
// bound dropped any.
func FormatHistory(recs []journal.Record, dropped journal.Dropped) []byte {
	var b bytes.Buffer
	if len(recs) == 0 {
		b.WriteString("# no history\n")
	}
	for _, r := range recs {
		before := r.Before
		switch {
		case before == journal.Absent:
			before = "absent"
		case !r.Kept:
			before = "not kept"
		case len(before) > 19:
			before = before[:19]
		}
		from := ""
		if r.From != "" {
			from = " from " + index.QuoteURI(r.From)
		}
		// A uri with a newline or tab in it is quoted, so a file name
		// cannot forge a record line or column.
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\t%s%s\tbefore: %s\t%d bytes\t%04o\n", r.ID, r.Time.Format(time.RFC3339), r.Principal, r.Op, index.QuoteURI(r.URI), from, before, r.Size, r.Mode)
	}
	if note := dropped.Note(); note != "" {
		b.WriteString(note + "\n")
	}
	return b.Bytes()
}

// RevertReply says what a revert did.
type RevertReply struct {
	URI     string `json:"uri"`
	Record  string `json:"record"`
	Removed bool   `json:"removed"`
	Bytes   int64  `json:"bytes"`
}

// MarshalJSON writes rep with its uri as rawname.Enc keeps it (the uri is
// bytes, and JSON would write those that are not UTF-8 as U+FFFD).
func (rep RevertReply) MarshalJSON() ([]byte, error) {
	type plain RevertReply
	rep.URI = rawname.Enc(rep.URI)
	return json.Marshal(plain(rep))
}

// UnmarshalJSON reads rep back, its uri as it was.
func (rep *RevertReply) UnmarshalJSON(b []byte) error {
	type plain RevertReply
	if err := json.Unmarshal(b, (*plain)(rep)); err != nil {
		return err
	}
	rep.URI = rawname.Dec(rep.URI)
	return nil
}

// mayRevert says why p may not change slug://rel by a revert, or nil: a
// revert writes the backing files, so it needs write there, not held
// (nothing a principal whose writes are held for review writes reaches
// the files before someone accepts it).
func (d *Daemon) mayRevert(p *policy.Principal, slug, rel string) error {
	dec := d.policy().Decide(p, slug, rel, policy.Write)
	switch {
	case !dec.Allowed:
		return fmt.Errorf("you may not write %s://%s", slug, rel)
	case dec.Held:
		return fmt.Errorf("your writes to %s://%s are held for review, so a revert cannot make them: make the change on the mount, where it is held, or ask a reviewer to revert", slug, rel)
	}
	return nil
}

// revert restores uri to its state before record id (the newest when id
// is ""), for the principal behind peer, through the confined root. The
// change is journaled itself, so a revert can be reverted.
//
// Policy decides as for the mount (read and write on the uri), and so do
// file permissions: the daemon runs as root, so for any peer but root and
// the daemon's own uid the change is made on a thread that has taken the
// peer's filesystem identity (package asuser) and the kernel checks it as
// it would the peer's own. The restored file then is what the peer could
// have made itself: an existing file is rewritten in place, keeping its
// owner and mode (the kernel drops set-id bits when the peer does not
// own it); a missing one is created by the peer, and only from content
// others could read (the journal does not record who owned it).
func (d *Daemon) revert(p *policy.Principal, peer control.Peer, u, id string) (RevertReply, error) {
	j := d.jr()
	if j == nil {
		return RevertReply{}, errJournalOff
	}
	slug, rel, err := policy.ParseURI(u)
	if err != nil || rel == "" {
		return RevertReply{}, fmt.Errorf("%q is not the uri of a file (<slug>://<path>)", u)
	}
	if !d.policy().SourceVisible(p, slug) || d.source(slug) == nil {
		return RevertReply{}, fmt.Errorf("unknown source %q", slug)
	}
	if !d.policy().Decide(p, slug, rel, policy.Read).Allowed {
		return RevertReply{}, fmt.Errorf("%s has no history", u)
	}
	if err := d.mayRevert(p, slug, rel); err != nil {
		return RevertReply{}, err
	}
	r, err := d.sourceRoot(slug)
	if err != nil {
		return RevertReply{}, err
	}
	if id != "" {
		// Only a record of u's history as the peer sees it: the journal's
		// own answer about any other record names that record's uri.
		recs, err := j.History(u, d.canReadFor(peer.UID, peer.GID))
		if err != nil && !errors.Is(err, journal.ErrNoRecord) {
			return RevertReply{}, err
		}
		if !slices.ContainsFunc(recs, func(r journal.Record) bool { return r.ID == id && r.URI == u }) {
			return RevertReply{}, fmt.Errorf("%s has no record %q (neuralisfs history %s lists them)", u, id, u)
		}
	}
	plan, err := j.Plan(u, id)
	if err != nil {
		return RevertReply{}, err
	}
	uid, gid, pid := peer.UID, peer.GID, uint32(peer.PID)
	self := credOf(peer).Exempt()
	if !self && os.Geteuid() != 0 {
		return RevertReply{}, fmt.Errorf("reverting as uid %d needs the daemon to run as root (it checks the change with uid %d's file permissions)", uid, uid)
	}
	ev := journal.Event{Principal: p.Name, UID: uid, PID: pid, Op: "revert", URI: u}
	st, statErr := r.Lstat(rel)
	exists := statErr == nil
	if exists && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return RevertReply{}, fmt.Errorf("%s is a folder now; move it away first", u)
	}
	if !plan.Absent && !exists {
		// Folders a restore recreates are created by the caller too: the
		// policy must let it make each of them, as mkdir on the mount would.
		for dir := path.Dir(rel); dir != "." && dir != ""; dir = path.Dir(dir) {
			if _, err := r.Lstat(dir); err == nil {
				break
			}
			if err := d.mayRevert(p, slug, dir); err != nil {
				return RevertReply{}, fmt.Errorf("%w (the folder %s was in)", err, u)
			}
		}
	}
	if !self && !plan.Absent && !plan.Record.ReadableBy(uid, gid, peer.Groups) {
		// Whatever the file is now: an agent that may write the name
		// made it anew (or found it made writable) and reverted it to
		// root's 0600 content, then read it (found by a red-team pass).
		if plan.Record.Owner == nil {
			return RevertReply{}, fmt.Errorf("%s was mode %04o, readable only by its owner or group, and this record does not say who they were: only root can bring it back", u, plan.Mode&0o7777)
		}
		return RevertReply{}, fmt.Errorf("%s was mode %04o, owned by uid %d and gid %d, which you could not read: only they, or root, can bring it back", u, plan.Mode&0o7777, plan.Record.Owner.UID, plan.Record.Owner.GID)
	}
	var content []byte
	if !plan.Absent {
		// Read (and verify) the saved copy as the daemon: the journal is
		// private. It is at most [journal] max_file_bytes.
		rc, err := j.Content(plan.Record)
		if err != nil {
			return RevertReply{}, err
		}
		content, err = io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return RevertReply{}, err
		}
	}
	if exists {
		if err := d.saveCurrent(ev, slug, rel, false, false); err != nil {
			return RevertReply{}, fmt.Errorf("keeping the current content of %s before reverting: %w", u, err)
		}
	}
	if !exists {
		// The journal does not record who owned the file, so a file a
		// revert brings back is the reverter's: with its set-id bits, a
		// root revert of what an agent made set-uid and removed gave
		// root a set-uid file of the agent's bytes (found by a red-team
		// pass). A file brought back has none.
		plan.Mode &^= unix.S_ISUID | unix.S_ISGID
	}
	reply := RevertReply{URI: u, Record: plan.Record.ID}
	switch {
	case plan.Absent:
		if exists {
			if err := d.as(self, peer, func() error { return r.Unlink(rel) }); err != nil {
				return RevertReply{}, err
			}
		}
		reply.Removed = true
	case self:
		owner, group := int(uid), int(gid)
		if exists {
			owner, group = int(st.Uid), int(st.Gid)
		}
		n, err := d.restoreAs(true, peer, slug, r, rel, plan, bytes.NewReader(content), owner, group)
		if err != nil {
			return RevertReply{}, err
		}
		reply.Bytes = n
	case exists:
		err := d.as(false, peer, func() error { return rewrite(r, rel, content, plan.Mode, st.Uid == uid) })
		if err != nil {
			return RevertReply{}, err
		}
		reply.Bytes = int64(len(content))
	default:
		n, err := d.restoreAs(false, peer, slug, r, rel, plan, bytes.NewReader(content), -1, -1)
		if err != nil {
			return RevertReply{}, err
		}
		reply.Bytes = n
	}
	if !plan.Absent && !exists {
		j.Created(ev)
	}
	d.fsys.Refresh([]mounts.Change{{Slug: slug, Rel: rel, Gone: plan.Absent}})
	return reply, nil
}

// as runs fn as the daemon when self is set, else as the peer (see
// package asuser): the kernel then checks what fn does with the peer's
// own file permissions.
func (d *Daemon) as(self bool, peer control.Peer, fn func() error) error {
	if self {
		return fn()
	}
	return asuser.Run(credOf(peer), fn)
}

func credOf(peer control.Peer) asuser.Cred {
	return asuser.Cred{UID: peer.UID, GID: peer.GID, Groups: peer.Groups}
}

// rewrite replaces the content of the existing regular file rel in place
// (run as the peer, see d.as): the file keeps its inode, owner and mode,
// as when the peer rewrites it on the mount; the peer's own file also gets
// back the mode it had (mode; the kernel decides the set-id bits).
func rewrite(r *mounts.Root, rel string, content []byte, mode uint32, owned bool) error {
	fd, err := r.Open(rel, unix.O_WRONLY|unix.O_TRUNC|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s is not a regular file now; move it away first", rel)
	}
	if _, err := f.Write(content); err != nil {
		return err
	}
	if owned {
		if err := unix.Fchmod(fd, mode&0o7777); err != nil {
			return err
		}
	}
	return f.Sync()
}

// revertTemp is the name restore writes rel's content under: next to
// it, one of the daemon's own (reserved.DaemonPrefix).
func revertTemp(rel string) string {
	dir := path.Dir(rel)
	if dir == "." {
		dir = ""
	}
	return join(dir, reserved.DaemonPrefix+"revert-"+strconv.FormatInt(time.Now().UnixNano(), 36))
}

// restoreAs is restore as the peer (d.as), with its name next to rel
// recorded while it exists (landing): the record is the daemon's, written
// outside the peer's credentials.
func (d *Daemon) restoreAs(self bool, peer control.Peer, slug string, r *mounts.Root, rel string, plan journal.Plan, rc io.Reader, uid, gid int) (int64, error) {
	tmp := revertTemp(rel)
	if err := d.landing.note(slug, tmp, false); err != nil {
		return 0, fmt.Errorf("recording the name a revert writes under: %w", err)
	}
	var n int64
	err := d.as(self, peer, func() (err error) {
		n, err = d.restore(r, rel, tmp, plan, rc, uid, gid)
		return err
	})
	d.landing.note(slug, tmp, true)
	return n, err
}

// restore writes the planned content next to rel (at tmp) and renames it
// over rel, so a reader sees the old or the new file, never a
// half-written one.
func (d *Daemon) restore(r *mounts.Root, rel, tmp string, plan journal.Plan, rc io.Reader, uid, gid int) (int64, error) {
	if os.Geteuid() != 0 {
		uid, gid = -1, -1
	}
	dir := path.Dir(rel)
	if dir == "." {
		dir = ""
	}
	// A file deleted with its folder (rm -rf) comes back with the folder.
	if dir != "" {
		segs := ""
		for _, s := range strings.Split(dir, "/") {
			segs = join(segs, s)
			if _, err := r.Lstat(segs); err != nil {
				if _, err := r.Mkdir(segs, 0o755, uid, gid); err != nil {
					return 0, err
				}
			}
		}
	}
	fd, _, err := r.Create(tmp, unix.O_WRONLY|unix.O_EXCL, plan.Mode&0o7777, uid, gid)
	if err != nil {
		return 0, err
	}
	f := os.NewFile(uintptr(fd), tmp)
	n, err := io.Copy(f, rc)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = f.Chmod(os.FileMode(plan.Mode & 0o777))
		if plan.Mode&0o7000 != 0 {
			err = unix.Fchmod(fd, plan.Mode&0o7777)
		}
	}
	f.Close()
	if err == nil {
		err = r.Rename(tmp, rel, 0)
	}
	if err != nil {
		r.Unlink(tmp)
		return 0, err
	}
	return n, nil
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}
