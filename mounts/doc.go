// Package mounts owns the mount table: it loads and validates config.toml,
// turns each configured source into a confined backing root with a status,
// watches the backing folders for changes made behind the mount's back, and
// hands the other packages their typed options.
//
// Every access to a backing file goes through a *Root, which holds the source
// folder as a directory file descriptor and resolves paths below it with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) and *at calls, so nothing that
// is renamed or swapped on disk can make the daemon leave the source.
//
// The file, inline, http and mcp kinds (feed.go, feed_mcp.go) are read-only trees the daemon
// fills under state_dir (RunFeed) and serves through the same *Root; their
// status and identity come from what was fetched, not from the folder.
// Inline text is secret-scanned when the config loads (secret.go).
//
// A [[layer]] (layer.go) becomes a source of its own in Config.Sources, on
// its source's folder, with SourceConfig.Layer naming that source; what it
// shows is decided by the policy (policy.Set.LayerMember), and fs hands
// changes through one slug to the others.
//
// It knows nothing of FUSE; it may use policy's pure types.
package mounts
