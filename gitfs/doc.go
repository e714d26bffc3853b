// Package gitfs reads git state through go-git: status of a checkout, branch
// and upstream, commit trees, and the rendering of virtual .status files.
//
// It never runs the git binary and knows nothing of FUSE.
package gitfs
