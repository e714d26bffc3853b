package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neuralis/neuralisfs/fs"
	"github.com/neuralis/neuralisfs/internal/journal"
	"github.com/neuralis/neuralisfs/mounts"
	"github.com/neuralis/neuralisfs/policy"
)

// journaler connects the mount's change hooks to the journal: it reads the
// content about to be overwritten through the source's confined root.
type journaler struct{ d *Daemon }

var _ fs.Journal = journaler{}

func (d *Daemon) startJournal() error {
	if !d.cfg.JournalEnabled() {
		return nil
	}
	j, err := journal.Open(journal.Options{
		Dir:          journalDir(d.cfg),
		MaxBytes:     d.cfg.Journal.MaxBytes,
		MaxFileBytes: d.cfg.Journal.MaxFileBytes,
		Batched:      d.cfg.Journal.Sync != "each",
		Log:          d.log,
	})
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	d.journal = j
	return nil
}

func journalDir(cfg *mounts.Config) string {
	return cfg.StateDirPath() + "/journal"
}

func (d *Daemon) source(slug string) *mounts.Source {
	for _, s := range d.sources {
		if s.Slug() == slug {
			return s
		}
	}
	return nil
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
func (d *Daemon) saveCurrent(ev journal.Event, slug, rel string, leaving bool) error {
	src := d.source(slug)
	if src == nil {
		return nil
	}
	r, err := src.Root()
	if err != nil {
		return nil
	}
	fd, err := r.OpenPath(rel)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	return d.journal.Keep(ev, journal.File{
		FD:    fd,
		Mode:  st.Mode,
		Size:  st.Size,
		Links: uint64(st.Nlink),
		Stamp: fmt.Sprintf("%d:%d:%d:%d.%d:%d.%d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec),
	}, leaving)
}

// leaves reports whether op removes the name it changes.
func leaves(op string) bool { return op == "unlink" || op == "rename" }

func (jr journaler) Before(e fs.JournalEvent) {
	if err := jr.d.saveCurrent(event(e), e.Slug, e.Rel, leaves(e.Op)); err != nil {
		jr.d.log.Warn("journal: could not keep content before a change", "uri", uri(e.Slug, e.Rel), "op", e.Op, "err", err)
	}
}

func (jr journaler) Created(e fs.JournalEvent) {
	if err := jr.d.journal.Created(event(e)); err != nil {
		jr.d.log.Warn("journal: could not record a creation", "uri", uri(e.Slug, e.Rel), "err", err)
	}
}

func (jr journaler) Renamed(e fs.JournalEvent, from string) {
	if err := jr.d.journal.Renamed(event(e), uri(e.Slug, from)); err != nil {
		jr.d.log.Warn("journal: could not record a rename", "uri", uri(e.Slug, e.Rel), "err", err)
	}
}

func (jr journaler) History(slug, rel string, canRead func(string) bool) ([]byte, error) {
	recs, err := jr.d.journal.History(uri(slug, rel), canRead)
	if err != nil && !errors.Is(err, journal.ErrNoRecord) {
		return nil, err
	}
	return FormatHistory(recs), nil
}

// FormatHistory renders records one per line, newest first.
func FormatHistory(recs []journal.Record) []byte {
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
			from = " from " + r.From
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\t%s%s\tbefore: %s\t%d bytes\t%04o\n", r.ID, r.Time.Format(time.RFC3339), r.Principal, r.Op, r.URI, from, before, r.Size, r.Mode)
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

// revert restores uri to its state before record id (the newest when id
// is ""), for the principal behind peer, through the confined root. The
// change is journaled itself, so a revert can be reverted.
func (d *Daemon) revert(p *policy.Principal, uid, gid, pid uint32, u, id string) (RevertReply, error) {
	if d.journal == nil {
		return RevertReply{}, errors.New("the journal is disabled in the config ([journal] enabled = false)")
	}
	slug, rel, err := policy.ParseURI(u)
	if err != nil || rel == "" {
		return RevertReply{}, fmt.Errorf("%q is not the uri of a file (<slug>://<path>)", u)
	}
	if !d.pol.SourceVisible(p, slug) || !d.pol.Decide(p, slug, rel, policy.Read).Allowed {
		return RevertReply{}, fmt.Errorf("%s has no history", u)
	}
	if err := d.pol.Check(p, slug, rel, policy.Write); err != nil {
		return RevertReply{}, fmt.Errorf("you may not write %s", u)
	}
	src := d.source(slug)
	if src == nil {
		return RevertReply{}, fmt.Errorf("unknown source %q", slug)
	}
	r, err := src.Root()
	if err != nil {
		return RevertReply{}, err
	}
	plan, err := d.journal.Plan(u, id)
	if err != nil {
		return RevertReply{}, err
	}
	ev := journal.Event{Principal: p.Name, UID: uid, PID: pid, Op: "revert", URI: u}
	st, statErr := r.Lstat(rel)
	exists := statErr == nil
	if exists && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return RevertReply{}, fmt.Errorf("%s is a folder now; move it away first", u)
	}
	if exists {
		if err := d.saveCurrent(ev, slug, rel, false); err != nil {
			return RevertReply{}, fmt.Errorf("keeping the current content of %s before reverting: %w", u, err)
		}
	}
	reply := RevertReply{URI: u, Record: plan.Record.ID}
	if plan.Absent {
		if exists {
			if err := r.Unlink(rel); err != nil {
				return RevertReply{}, err
			}
		}
		reply.Removed = true
	} else {
		owner, group := int(uid), int(gid)
		if exists {
			owner, group = int(st.Uid), int(st.Gid)
		}
		n, err := d.restore(r, rel, plan, owner, group)
		if err != nil {
			return RevertReply{}, err
		}
		reply.Bytes = n
		if !exists {
			d.journal.Created(ev)
		}
	}
	d.fsys.Refresh([]mounts.Change{{Slug: slug, Rel: rel, Gone: plan.Absent}})
	return reply, nil
}

// restore writes the planned content next to rel and renames it over rel,
// so a reader sees the old or the new file, never a half-written one.
func (d *Daemon) restore(r *mounts.Root, rel string, plan journal.Plan, uid, gid int) (int64, error) {
	rc, err := d.journal.Content(plan.Record)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
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
	tmp := join(dir, ".neuralis-revert-"+strconv.FormatInt(time.Now().UnixNano(), 36))
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
