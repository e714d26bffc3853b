// Package policy decides whether a principal may read, write or execute a uri
// in the neuralisfs tree.
//
// It is pure: no I/O after New returns, and no knowledge of FUSE, the index or
// git. A *Set is immutable and safe for concurrent use; reloading builds a new one.
package policy
