// Package index owns the bleve full-text index of the sources: admission
// rules, the document mapping, the batch indexer, reconcile, search and snippets.
//
// It knows nothing of FUSE or of policy: callers pass a filter for hits.
//
// # Admission
//
// Admit is the one rule for what belongs in a collection (the index, Scan,
// `neuralisfs sources`). Checks run cheapest first: folder names on the way
// (.git, .hg, .svn: "version control metadata"; node_modules, vendor, dist,
// build, target, out, .next, .nuxt, __pycache__, .venv, .tox, .mypy_cache,
// .pytest_cache, .gradle, .terraform, bower_components: "generated or
// vendored folder"), the file name (.env, .env.*, *.pem, *.key, *.p12, *.pfx,
// *.jks, *.keystore, id_rsa*, id_dsa*, id_ecdsa*, id_ed25519*,
// credentials.json, .npmrc, .netrc, .pypirc, .pgpass, .htpasswd: "secret-prone
// name"; package-lock.json, npm-shrinkwrap.json, yarn.lock, pnpm-lock.yaml,
// go.sum, Cargo.lock, poetry.lock, composer.lock, Gemfile.lock, Pipfile.lock,
// uv.lock: "lock file"; *.min.js, *.min.css: "minified file"), the source's
// exclude and include doublestar patterns over the path, the size bound
// (default 1 MiB), then content (a NUL byte: "binary content"; not UTF-8:
// "not valid UTF-8 text"). Symlinks and other non-regular files are skipped
// ("not a regular file"). vendor/ is skipped on purpose: third-party code
// floods results. A folder refused by name or by an exclude pattern prunes the
// walk and is reported once, with a trailing slash.
//
// # Identity
//
// A source's identity is "sha256:" and the hex SHA-256 over, for each
// admitted file in byte-wise order of path, the path, a NUL byte and the
// 32-byte SHA-256 of its content. Scan computes it by reading; Index.Identity
// from what the index remembers.
//
// # Documents and mapping
//
// One document per admitted file, id = uri ("<slug>://<path>"). Keyword
// fields uri, source, path, name, ext (lower case, no dot) and dir (every
// folder above the file: "a" and "a/b" for a/b/c.go, so a filter on a
// folder is one term, not one per file below it); content analysed by a
// code tokenizer (runs of letters, digits and underscores, lower-cased,
// tokens over 128 bytes dropped). size and mtime are not indexed (bleve
// writes 16 terms per number; they were an eighth of a build's CPU): a
// range over them is answered from the side store (see Search). Documents are
// built from our own field type, which turns content straight into term
// frequencies (no token stream, a handful of allocations per file). Content
// has no term vectors: positions would double the cost of a build and
// triple the index, so phrases are checked in the files at search time
// (see Search). Nothing is stored: hits carry only their uri and snippets
// are cut from the file at search time, which keeps the index near a third
// of the size of the text. The default query field is content; there is no
// _all field. The side store records the mapping version
// (mappingVersion); an index of another version is deleted and rebuilt.
//
// # Indexing and durability
//
// Update, Remove, RemovePrefix and Rename never block: they record the change
// in a map keyed by uri (the last change wins, so a burst of writes to the
// same files costs bounded memory; past Options.MaxQueue distinct uris a
// change is dropped and the source reconciled). One goroutine waits
// BatchDelay after the first change, then hands batches to two builder
// goroutines without waiting for one to finish before starting the next
// (bleve builds a segment in the calling goroutine): 200 callers' changes
// at most, or MaxBatch (500) of Reconcile's, a uri never in two batches at
// once; folder-wide changes wait for the builders. Files are read, admitted
// and their terms counted by two workers (Reconcile's, ahead of the
// builders, within 16 MiB), so no text is kept for a batch. Callers' changes
// go before Reconcile's, so a write during a long reconcile is not stuck
// behind it. While a Reconcile has more than MaxBatch files to read, bleve's
// merges wait (up to 500 batches): during a first build each merge rewrites
// what was just indexed. Batches use scorch with unsafe_batch: Batch returns
// once the change is searchable, before it is on disk. The per-file state
// that makes restarts cheap (size, mtime ns, content digest) lives in a bbolt
// side store (meta.db next to the bleve folder) and is written only when
// bleve reports the batch persisted; after a crash, the next Reconcile
// re-reads the files whose batches may have been lost. A file read within 2 s
// of its mtime is remembered as racy, as git does: a write in the same tick
// of the file system's clock may change it again without moving its size or
// mtime, so Reconcile reads it again rather than trust them (found by
// tests/kill_test.go: a kill between an O_TRUNC open and the write left an
// empty file whose old words stayed findable). Close waits (up to
// 10s) for bleve to persist. A restart with nothing changed is the walk: it
// lists folders (and stats their files) on four goroutines at once, and
// compares with the remembered state without copying it.
//
// # Search
//
// Query.Q is bleve query-string syntax over content (a bare word the
// tokenizer splits, such as fmt.Println, is searched as a phrase; wildcards
// and regexps match the lower-cased terms), with field:value for path, name,
// ext, source, uri, size and mtime; an unknown field is an error. path:a/b/**
// (or a/b/*) is the term dir:a/b. A range over size or mtime lists the
// files in range from the side store: by uri when they are at most 2,000,
// else by visiting every document. Filters (source, extension, doublestar
// path glob) narrow the query; the path glob is checked hit by hit after a
// query on its literal start (the dir term when that is a folder, "a/b/",
// else a prefix query over path). canRead is
// asked for every candidate before anything is counted or cut to Limit, so a
// denied principal learns nothing from counts; a filtered search examines the
// best 1,000 matches per request and keeps paging only while it has fewer
// than Limit hits (then Total may be a lower bound, flagged).
//
// A query with phrases runs in two steps per page of 50 candidates: the
// query with each phrase relaxed to the conjunction of its terms (a negated
// phrase to nothing) finds candidates, best first; their files are read and
// checked for every phrase (consecutive tokens, across lines); then the
// exact query, each phrase being its terms filtered by those checks, runs
// over the page, so +, - and OR around phrases keep their meaning (the
// checked documents are a clause of the page's query, not a filter over
// every match of the terms). Paging stops once Limit hits are found, so for
// a phrase in many files Total is a lower bound, flagged. The snippets of
// the hits are cut from the content read for the check (up to 16 MiB).
//
// Each hit shows up to three lines with matches (1-based numbers), found with
// the same tokenizer as the index (only lines that hold a literal of the
// query are tokenized, unless the file holds U+0130 or U+212A, the two
// non-ASCII runes that lower-case to ASCII): Line.Raw, byte offsets in
// Line.Matches, and Line.Text with every match wrapped in «» (long lines cut
// to 240 bytes around the first match, marked with …); the files of the hits
// are read four at a time. FormatText renders "uri:line: text" lines for the
// CLI and .neuralis/search/<query>.
//
// SearchOverlay runs a query over documents given in memory (a principal's
// held files) with the same admission, analysis, queries and snippets, in
// a memory-only bleve index made for the call; its scores are its own and
// not comparable with Search's.
package index
