package policy

import "github.com/bmatcuk/doublestar/v4"

// refMatch is the reference for crule.match: doublestar, except at the root.
func refMatch(pat, path string) bool {
	if path == "" {
		return pat == "" || pat == "**"
	}
	ok, _ := doublestar.Match(pat, path)
	return ok
}
