// Package held keeps the writes a review rule holds: each principal's
// pending changes to a source, as a layer over the backing files that only
// that principal sees, until a person approves or rejects them.
//
// A Layer is one principal's held state in one source, kept under
// <state_dir>/held/<principal>/<slug>/:
//
//   - tree/ holds the layer's own files, folders, symlinks and fifos at
//     their paths in the source ("upper", as in overlayfs): what the
//     principal created, and copies of backing files it changed (copied up
//     whole, with mode, owner, times and extended attributes, before the
//     first change reaches them). A folder copied in place keeps the
//     backing folder's inode number (KeepIno; MovedIno for one the
//     principal renamed, in its view), and goes once nothing of the layer
//     is in it. The principal's reads and writes of those paths go to these
//     files, so they are real files with real descriptors (passthrough
//     serves them like any other).
//   - records.jsonl is an append-only log of what tree/ cannot say: the
//     backing state each copied-up path was made from (its base: type,
//     mode, size, SHA-256), the backing paths the principal deleted
//     ("gone": hidden from it, with what they were), and which held path a
//     rename brought from which backing path. A torn last line (a kill in
//     the middle of a write) is skipped when the log is read back. It is
//     rewritten as the records of the state alone once it grows to four
//     times that, and its size counts in the principal's bound.
//
// What the principal sees at a path: the layer's own entry if tree/ has
// one; else nothing when the path or a folder above it is gone; else the
// backing file. A folder shows tree/'s entries and the backing folder's
// entries that are neither gone nor shadowed by tree/'s. Everyone else
// sees the backing files only.
//
// Changes lists what a reviewer decides on, one unit per change (a folder
// made, deleted, replaced or renamed is one unit with everything in it),
// each with the base it was made on and an id that names its content as
// listed. Apply makes a unit's change on the backing files through the
// confined root (the daemon journals each file it replaces or removes
// first, so a revert undoes an approval) after checking that the backing
// files are still as the base says, everything inside a folder it removes
// or moves included: a moved base is ErrConflict (a ConflictError naming
// the file), never a silent overwrite; a unit changed since its id was
// listed is ErrChanged. Discard forgets a unit (reject, or after Apply).
// Both refuse a unit while the principal has one of its files open for
// writing (ErrBusy): its next writes would go nowhere. Diff renders a unit
// for a terminal, with the principal's control characters escaped.
//
// Why real files and not the journal's write-once object store: the
// principal reads and writes its held files the way it writes any file —
// partial writes at offsets, mmap, O_APPEND, truncates, passthrough reads —
// and each of those would otherwise be a copy of the whole object per
// write. The layer gets the store's safety another way: a copy-up goes
// through a temporary file and a rename, records.jsonl is append-only and
// read back past a torn line, and fsync through the mount reaches tree/'s
// files (so a SIGKILL loses no held byte the principal synced; the tests
// kill the daemon in a burst of held writes). Content reaches the journal's
// store when it is approved: every backing file an approval replaces or
// removes is journaled first.
//
// Hard links: Link makes the new name a link of the old one in tree/
// (copying a backing file up first), so the principal sees one file with
// all its names. Changes lists, for a unit whose regular file has other
// names in tree/, those names (Change.Links, part of its id); Together
// groups the units holding the names of one file, which the daemon
// approves or rejects at once. Apply lands the first of them as any file
// and remembers where (by tree/ inode), and links each later name to it
// (linked next to the name, renamed over it; the hooks journal it as any
// name made or replaced). A name linked to a backing file the principal
// left unchanged is linked to that backing file, and its copy leaves
// tree/. A name is landed as a link only to a backing file with exactly
// its content, mode and owner; otherwise it lands as a file of its own.
// DirLinks counts a folder's subfolders as the principal sees them.
//
// The package knows nothing of FUSE or policy: the mount decides which
// writes are held and asks the layer what the principal sees.
package held
