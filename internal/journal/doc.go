// Package journal keeps the write-once journal of what the mount overwrote
// or deleted (issue 6), so every change through the mount can be reverted.
//
// Layout under Options.Dir (<state_dir>/journal, mode 0700, files 0600):
//
//	LOCK            flock(2)ed by the one process that has the journal open
//	records.jsonl   append-only JSON lines: one per change, plus "evicted" and
//	                "from" lines; fsynced before Save, Created or Renamed return
//	objects/<hex>   content-addressed copies of previous content (sha256)
//	tmp-<random>    a copy being written; removed, never adopted, by Open
//
// Publishing an object: write to a tmp- name opened with O_EXCL, fsync it,
// link(2) it to objects/<hex> (link never replaces), remove the tmp- name,
// fsync objects/, then append and fsync the record. An existing object is
// reused only after re-hashing proves it holds the same bytes; different
// bytes under the name are ErrConflict and the entry is left as it is.
// Reading re-hashes and refuses a corrupt entry with ErrCorrupt; the
// journal never repairs an entry.
//
// Retention is bounded by Options.MaxBytes (total object bytes: the objects
// used least recently are evicted first) and Options.MaxFileBytes (a larger
// file is recorded without content). Evicting appends a durable "evicted"
// line before it removes the object, and every record that used it then
// reports Kept == false, so History never claims content it no longer has.
//
// Revert is planned here and applied by the caller: Plan says what the uri
// held before a record (content by digest and mode, or "absent"); the caller
// writes that through the confined source root and journals its own change
// like any other, which is what makes a revert revertible.
//
// The package knows nothing of FUSE, policy or the index: callers pass the
// principal and uri as strings and a canRead filter for History.
package journal
