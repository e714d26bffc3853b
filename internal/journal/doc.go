// Package journal keeps the write-once journal of what the mount overwrote
// or deleted (issue 6), so every change through the mount can be reverted.
//
// Layout under Options.Dir (<state_dir>/journal, mode 0700, files 0600):
//
//	LOCK            flock(2)ed by the one process that has the journal open
//	records.jsonl   append-only JSON lines: one per change, plus "evicted",
//	                "from" and "dropped" lines; appended through a shared
//	                mapping (tail.go), so while open it ends in NUL bytes;
//	                compacted now and then (bound.go)
//	objects/<hex>   content-addressed copies of previous content (sha256)
//	packs/<hex>     many small copies in one write-once file, named by the
//	                sha256 of the whole file (see pack.go)
//	tmp-<random>    a copy being written, or a compacted records.jsonl
//	                (tmp-records-<random>); removed, never adopted, by Open
//	staged.log      copies of small files kept by Keep (batched), appended
//	                one after another behind a header, until published
//	staged/<id>     other content kept by Keep and not yet published
//
// Publishing an object: write to a tmp- name opened with O_EXCL, fsync it,
// link(2) it to objects/<hex> (link never replaces), remove the tmp- name,
// fsync objects/, then append and fsync the record. An existing object is
// reused only once a re-hash has proved it holds the same bytes (a file of
// up to 1 MiB is hashed in memory first, so content already stored costs
// no copy, only the record's fsync); different bytes under the name are
// ErrConflict and the entry is left as it is. A proof is remembered under
// the object file's device, inode, size, mtime and ctime, and the next
// reuse re-hashes only when its stat differs: the journal is private and
// write-once, and any change to a file's bytes or the file itself moves
// its ctime, which nobody can set (a proof is remembered only when the
// ctime was at least settleTime old when the re-hash began, so a change
// right after it cannot land in the same timestamp grain). Reading for a
// revert (Plan, Content) always re-hashes and refuses a corrupt entry with
// ErrCorrupt; the journal never repairs one.
//
// Every copy is fsynced before it is linked, in both modes.
//
// Durability: Save returns once its copy and record are fsynced;
// concurrent calls share one write and one fsync of records.jsonl (group
// commit). Created and Renamed only record names, so they return after
// the write and their fsync follows within 100 ms, with the next Save, or
// at Close: a power cut can lose such a record, a killed process cannot.
// Those deferred fsyncs (objects/, then records.jsonl) run without the
// append lock, so no change waits for them.
//
// Keep (the daemon's hook) is Save in strict mode (Options.Batched false,
// sync = "each"). In batched mode (the daemon's default) it keeps the
// synchronous part small. It reads through the caller's descriptor when
// that is readable (the mount's own read-write descriptor of a write-open,
// made without O_TRUNC and truncated only after Keep returns), and opens
// the file again through /proc otherwise; it reads with O_NOATIME where
// it may, so keeping a file stamps no access time. A file of up to 64 KiB
// (hashBytes) is read and hashed first; when that content is stored already (see above), Keep
// appends the record with its digest and returns: the object it names was
// fsynced before it was linked, and the line is written before the change
// proceeds and fsynced within 100 ms, like a staged line, so a killed
// process loses nothing and a power cut only the last moments, as below.
// Otherwise Keep stages the content — a hard link of the inode under
// staged/<id> when the name is about to go (unlink, rename over) and it has
// no other name (a file of up to 64 KiB once its hash says the content is
// new; the copy Keep read is handed to the publisher in memory); otherwise,
// for a file of
// up to 1 MiB, a copy appended to staged.log with one pwrite(2); otherwise
// a copy under staged/<id> (copy_file_range where possible); EXDEV or
// EPERM from the link falls back to copying — and appends a "staged" line
// (the record without its digest; for staged.log also the copy's offset
// and CRC-32C) before it returns. Staging does not create a file per
// change because ext4's inode allocator slows down with every recently
// deleted inode (recently_deleted), which made that create cost ~200 µs
// of CPU. A background publisher then hashes the staged content (a copy
// Keep hashed is handed over in memory with its digest, up to 16 MiB of
// them at a time, and neither read back nor hashed again), stores it
// exactly as Save does (an equal object reused once proved; a copy under
// staged/ that Keep made itself is its own O_EXCL temporary: it is
// fsynced and linked to objects/<hex>, not copied again, while a linked
// old inode is copied, as a holder outside the mount may still write it),
// appends the
// record's line with the digest (same id), and removes the staged file or
// releases the copy in staged.log. The publisher gathers copies while
// they keep coming (gatherIdle, gatherMax; a reader waiting for a record
// cuts it short); two or more new copies Keep handed over
// in memory are written as one pack (packs/<hex>, published like an
// object: O_EXCL tmp-, fsync, non-replacing link, packs/ fsynced), so a
// burst costs a file and an fsync per pack, not per copy. An object in a
// pack is reused, re-hashed and refused when corrupt exactly as one under
// objects/, and retention evicts a pack whole: its objects were new
// together, and removing its file is what frees their bytes. Once every copy in staged.log is
// published and 4 MiB have gone through it, it is emptied: a new header
// whose base (the logical offset of its first copy) moves past every
// offset used, so an offset never names two copies. It is rewound, keeping
// its length so the next copies overwrite pages already allocated, while
// it went no further than 8 MiB, and cut back to its header beyond that
// (and at Open and Close); beyond 64 MiB not yet published, copies go to
// staged/ instead. History, Plan and Content wait
// for a record still being published, so a revert right after a change
// restores exactly the prior bytes. An open and a truncate of the same
// unchanged file (same stamp) by the same process within a second — one
// O_TRUNC open — make one record.
//
// Open recovers from a crash: it removes tmp- files, cuts a torn last line
// off records.jsonl, removes objects and packs no kept record uses (a Save that died
// before its record was durable), reports records whose object is missing
// as not kept, publishes every staged record that has no record line yet
// from its staged copy (a copy whose length or CRC-32C changed — torn by a
// power cut —, that is missing, or that sits in a staged.log whose header
// is unreadable is reported not kept), and then removes everything left in
// staged/ and cuts staged.log back to its header (copies already published,
// or staged by a Keep that died before its staged line, whose change never
// happened). A killed process thus loses no record whose Keep returned; a
// power cut in batched mode can lose what was kept in the last moments
// (copies are fsynced when published, normally within milliseconds).
//
// Retention is bounded by Options.MaxBytes (total object bytes: the objects
// used least recently are evicted first, in the same write and fsync as
// the record that pushed the total over) and Options.MaxFileBytes (a
// larger file is recorded with Before == Unknown and not read at all).
// Evicting writes a durable "evicted" line before it removes the object,
// and every record that used it then reports Kept == false, so History
// never claims content it no longer has.
//
// Records are bounded by Options.MaxRecords (issue 16: kept forever, they
// grew the daemon by megabytes a minute under a steady load; a record
// costs about 0.3-0.5 KiB of memory, BenchmarkRecordMemory). A batch that
// would pass the bound carries a "dropped" line (fsynced with it) that
// drops the oldest records — a 64th of the bound more than needed, so a
// drop costs one fsync per chunk — but never one still being published;
// once the line is durable they leave memory, and so does every object
// no kept record uses any more (removed as retention removes one).
// Replay applies a "dropped" line to the records read before it, exactly
// as the running journal did. Once half the lines of records.jsonl are
// dead (dropped records, "evicted" and "from" lines, published staged
// lines) and it has 4096 lines or more, a background goroutine rewrites
// it: every kept record as one line in its current state (a record still
// being published as its staged line) behind one "dropped" line carrying
// the count, written to a tmp- file and fsynced; then, holding the append
// lock, the lines appended meanwhile are copied over as they are, the
// file is fsynced (objects/ first when lazy records wait for it), renamed
// over records.jsonl and the folder fsynced. A SIGKILL before the rename
// leaves the old file, which holds everything; after it, the new one,
// which holds the same records: no kept record is lost and no dropped one
// comes back (TestBoundCrash kills at every step). Dropped says how many
// were dropped and until when, so a history can say it is not complete.
//
// Renames: the caller calls Save (op "rename") for a target that exists,
// then Renamed with the old name after the rename; Renamed adds the old
// name to that record, or records the target as created when it did not
// exist. The record belongs to the target; History of the old name shows
// it too, and Plan of the old name points at the target.
//
// Revert is planned here and applied by the caller: Plan says what the uri
// held before a record (content by digest and mode, or Absent); the caller
// writes that through the confined source root and journals its own change
// like any other (Save, or Created when it recreates a deleted file),
// which is what makes a revert revertible.
//
// The package knows nothing of FUSE, policy or the index: callers pass the
// principal and uri as strings and a canRead filter for History.
package journal
