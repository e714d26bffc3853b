// Package index owns the bleve full-text index of the sources: admission
// rules, the document mapping, the batch indexer, reconcile, search and snippets.
//
// It knows nothing of FUSE or of policy: callers pass a filter for hits.
package index
