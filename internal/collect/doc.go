// Package collect builds the collection one principal would be given from
// the sources it can see (DESIGN.md §12, issue 18): the files the index's
// admission rules admit (index.Scan, index.Admit) that the principal may
// read, ranked, cut to a per-file and a total budget, with every
// considered-but-excluded file named with its reason and a digest of the
// whole.
//
// It is pure: it reads only the fs.FS values it is given, decides
// visibility only through the read func it is given, and knows nothing of
// FUSE, the daemon or the control socket. A file the read func refuses is
// absent: it is neither collected nor listed as excluded.
//
// # Ranking
//
// Every admitted file gets the first class below whose test its slash path
// (relative to its source root) passes; files are ordered by class, then by
// uri (byte order):
//
//	0 readme    the base name starts with "readme" (any case)
//	1 test      a folder named test, tests, __tests__, testdata, spec or
//	            specs on the way, or a name *_test.*, test_*.py, *.test.*,
//	            *.spec.*
//	2 docs      a folder named docs, doc or documentation on the way, or an
//	            extension .md .markdown .rst .adoc .txt .org
//	3 manifest  go.mod go.work package.json Cargo.toml pyproject.toml
//	            setup.py setup.cfg requirements*.txt Gemfile *.gemspec
//	            pom.xml build.gradle build.gradle.kts composer.json Makefile
//	            CMakeLists.txt Dockerfile flake.nix
//	4 config    extensions .toml .yaml .yml .json .ini .cfg .conf .xml
//	            .proto .graphql .gql .xsd .avsc .sql
//	5 source    programming-language extensions (.go .py .js .ts .rs .c …,
//	            see sourceExts)
//	6 other     anything else
//
// The test class is decided second but ranked last: the order of the
// collection is readme, docs, manifest, config, source, other, test.
//
// # Budgets
//
// Budget.MaxFileBytes lowers the source's own per-file bound (a larger file
// is excluded "larger than N bytes", the index's reason). MaxFiles and
// MaxBytes bound the collection: it is the longest prefix of the ranking
// that fits both; every file after the cut is excluded "budget reached",
// and each source that lost a file to the cut is listed in Incomplete with
// the bound that cut it.
//
// # Digest
//
// Digest is "sha256:" and the hex SHA-256 of, for each collected file in
// order, the line  uri NUL "sha256:" hex(SHA-256(content)) LF.
//
// # Framing
//
// Frame writes the collection for a model. The first line is
//
//	COLLECTION <digest> files=<n> bytes=<total> complete|incomplete
//
// then one line per source cut short, INCOMPLETE <quoted slug> <quoted
// reason>, then, for each file,
//
//	BEGIN <quoted uri> <size> sha256:<hex>  LF
//	<exactly size bytes of content>         LF
//	END <quoted uri>                        LF
//
// and last "END COLLECTION <digest>" LF. The uri is quoted as Go's
// strconv.Quote does, so a name holding a newline or a quote stays on one
// line; the content is delimited by its length, never by a marker, so no
// content can end a frame early. Parse reads it back.
package collect
