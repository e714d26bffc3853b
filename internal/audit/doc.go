// Package audit writes the audit log: one JSON line per denied operation
// (DESIGN.md §9), appended to <state_dir>/audit.log.
//
// The log is bounded in every direction a flood could push it: lines are
// rate limited (a token bucket for each principal, so one principal's
// flood drops its own lines only), each string of a line is cut at
// MaxField bytes (MaxDetail for detail), the file is rotated to
// audit.log.1 at a size cap (one old file is kept), and Denied never
// blocks its caller — a FUSE request — because lines go through a bounded
// channel to one writer goroutine; what cannot be queued or is over the
// rate is counted and reported as one {"principal": P, "dropped": N} line
// once logging resumes.
//
// Decisions of a person (Decision: a review approval or rejection; and
// Reload: every reload of the config the daemon runs, op "reload", uri
// the config file, rule "applied" or "refused", detail what changed or
// why not) are never
// rate limited, and are written to audit.decisions.log too (rotated the
// same way), so that a principal's lines, within its rate, cannot rotate
// them out of reach.
//
// Follow reads the log back for `neuralisfs audit [--follow]`.
//
// It knows nothing of FUSE or policy: callers pass the principal, operation,
// uri and deciding rule as strings.
package audit
