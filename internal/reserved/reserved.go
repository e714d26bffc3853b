// Package reserved names what the daemon keeps for itself in the backing
// folders of sources: the names it writes files under for a moment while
// it lands an approval or a revert. It is a leaf package, so that every
// reader of backing folders (the mount, MCP, the index) can leave them
// out without depending on the others.
package reserved

import "strings"

// DaemonPrefix begins the names the daemon itself writes into backing
// folders for a moment: a file an approval of held changes or a revert is
// landing (written or linked next to its name, then renamed over it), and
// a backing file an approval moves aside at the top of its source
// (StagingPrefix) while it lands renames whose old name another change of
// the same approval reuses. Such a name is out of reach of the rules
// that decide the file at its own name (a rule over "*.secret" does not
// match it), so the mount, MCP and the index never show one, at any depth,
// and nothing can be made under such a name through the mount.
const DaemonPrefix = ".neuralisfs-"

// StagingPrefix begins the names an approval moves backing files aside
// to, at the top of a source.
const StagingPrefix = DaemonPrefix + "approving-"

// IsDaemonName reports whether the source path rel is, or is below, a
// name DaemonPrefix begins.
func IsDaemonName(rel string) bool {
	for rel != "" {
		var seg string
		seg, rel, _ = strings.Cut(rel, "/")
		if strings.HasPrefix(seg, DaemonPrefix) {
			return true
		}
	}
	return false
}
