// Package policy decides whether a principal may read, write or execute a uri
// in the neuralisfs tree.
//
// It is pure: no I/O after New returns, and no knowledge of FUSE, the index or
// git. A *Set is immutable and safe for concurrent use; reloading builds a new one.
//
// # Semantics
//
// A uri is "<slug>://<path>"; the source root is "<slug>://". Paths are never
// normalised: one with "." or ".." segments, a leading or trailing slash, an
// empty segment or a NUL byte is denied (Decide) or rejected (ParseURI).
//
// A rule's uri is a doublestar glob: "*" does not cross "/", "**" does, and
// "*" matches dot files (unlike a shell). "x/**" matches the folder x itself
// and everything below it, and so does "x/" (a trailing slash is shorthand
// for "x/**"). "x" alone matches only the name x. The source root is matched
// only by "<slug>://" and "<slug>://**" (not by "<slug>://*"). Braces are
// expanded when the rule is compiled. The slug part may itself be a glob
// ("*://**/.env").
//
// For each capability the last rule in file order that matches the uri,
// applies to the principal ("*", its name, or "role:<r>") and mentions that
// capability decides; a rule that mentions only write does not touch an
// earlier read decision. Without one, the source's default decides, else the
// global default (allow unless set).
//
// Before the rules: a source the principal cannot see (visible_to) is
// denied every capability, and write on a read-only source is denied with
// Decision.ReadOnly set (callers answer EROFS).
//
// Denied read means absent, so read also requires every ancestor folder to
// be readable: a file inside a hidden folder is hidden whatever its own
// rules say (as in .gitignore, a file cannot be re-included when its folder
// is excluded). So that allow-lists work, a read-denied folder stays visible
// when a rule later than the one that denied it allows read on a uri whose
// literal folder prefix lies inside it: with `deny data://**` then
// `allow data://docs/**`, data:// and docs/ are visible, the rest of data://
// is not; with `deny secrets/**` then `allow secrets/shared/**` (for ci),
// ci sees secrets/ listing only shared/. Only the folders on such a rule's
// literal prefix are reopened (Decide does not know which names are folders,
// and a file must never be readable just because a pattern could match
// below it): after `deny secrets/**`, `allow secrets/**/*.md` shows the .md
// files directly in secrets/ but not those in its subfolders.
//
// Git data follows the strictest reader. A .git folder (or file) holds the
// name and content of every committed file, and its config and hooks run
// as whoever uses git there next, so a principal who may not read
// everything in a source (ReadsAll is false: a rule denies it read
// somewhere there, or the default does) is denied every capability on any
// path with a ".git" segment in that source, at any depth: `deny
// data://secrets/**` would otherwise be undone by `git show
// HEAD:secrets/k`. A rule whose pattern has a literal ".git" segment
// (`data://.git/**`, `data://**/.git/**`) decides as written, for those
// who know their secrets were never committed. Principals with nothing
// hidden keep git working on the mount.
//
// Held writes: a rule may list write in review instead of allow or deny
// (review = ["write"]; nothing but write may be held). For the write
// capability such a rule takes part in "last matching rule decides"
// exactly as allow and deny do; when it decides, the write is allowed with
// Decision.Held set: the mount keeps it as the principal's pending change
// instead of applying it. A later allow or deny for the same principal
// and uri overrides it, and it overrides earlier ones. Holds reports
// whether any review rule applies to a principal in a source; a source
// where one applies to anyone is never Uniform (each holding principal
// sees its own layer there). Read-only sources answer EROFS before any
// review rule is looked at.
//
// Principals: a caller's uid listed by a [[principal]] wins (first in file
// order), then its gid, then the daemon's uid and root are Owner, anyone else
// is Other. Entries with the same name merge.
//
// A directory rename is refused (ErrCrossesBoundary) when a rule might decide
// differently for its contents at the new place; see CanRename.
package policy
