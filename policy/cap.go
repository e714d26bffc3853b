package policy

import "fmt"

// Cap is a capability a principal may hold on a uri. Caps are bits, so a set
// of them fits in one Cap value.
type Cap uint8

// The capabilities of DESIGN.md §4.
const (
	// Read covers seeing a name, stat, reading, listing.
	Read Cap = 1 << iota
	// Write covers create, modify, truncate, delete, rename, chmod/chown/utimes, xattrs, link.
	Write
	// Exec covers executing a file.
	Exec
)

// allCaps lists every capability in display order.
var allCaps = [...]Cap{Read, Write, Exec}

// String returns "read", "write" or "exec"; a set of several caps is joined with "|".
func (c Cap) String() string {
	switch c {
	case Read:
		return "read"
	case Write:
		return "write"
	case Exec:
		return "exec"
	}
	s := ""
	for _, one := range allCaps {
		if c&one != 0 {
			if s != "" {
				s += "|"
			}
			s += one.String()
		}
	}
	if s == "" || c&^(Read|Write|Exec) != 0 {
		return fmt.Sprintf("Cap(%d)", uint8(c))
	}
	return s
}

// ParseCap parses "read", "write" or "exec".
func ParseCap(s string) (Cap, error) {
	switch s {
	case "read":
		return Read, nil
	case "write":
		return Write, nil
	case "exec":
		return Exec, nil
	}
	return 0, fmt.Errorf("unknown capability %q (want read, write or exec)", s)
}

// capIndex maps a single capability to 0..2, or -1.
func capIndex(c Cap) int {
	switch c {
	case Read:
		return 0
	case Write:
		return 1
	case Exec:
		return 2
	}
	return -1
}
