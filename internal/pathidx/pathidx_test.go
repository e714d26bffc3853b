package pathidx

import (
	"slices"
	"testing"
)

func TestParentIsAlwaysShorter(t *testing.T) {
	for in, want := range map[string]string{
		"/": "", "/a": "/", "//a": "/", "//a/b": "//a", "/srv/x/y": "/srv/x",
		"/srv/x/y/": "/srv/x/y", "a": "", "a/b": "a", "": "",
	} {
		if got := Parent(in); got != want || (in != "" && len(got) >= len(in)) {
			t.Errorf("Parent(%q) = %q; want %q", in, got, want)
		}
	}
}

// Below finds every path under one, at any depth, however the paths are
// spelled (host paths, a root at "/", relative ones), and nothing beside
// it whose name shares its prefix; Remove leaves the rest.
func TestBelowFindsTheSubtreeOnly(t *testing.T) {
	for _, c := range []struct {
		paths []string
		of    string
		want  []string
	}{
		{[]string{"/s/a", "/s/a/b", "/s/a/b/c", "/s/a2", "/s/a2/b"}, "/s/a", []string{"/s/a/b", "/s/a/b/c"}},
		{[]string{"/", "//a", "//a/b", "//c"}, "/", []string{"//a", "//a/b", "//c"}},
		{[]string{"x", "x/y", "x/y/z", "xy", "xy/z"}, "x", []string{"x/y", "x/y/z"}},
		{[]string{"x", "x/y", "x/y/z"}, "", []string{"x", "x/y", "x/y/z"}},
	} {
		var k Kids
		for _, p := range c.paths {
			k.Add(p)
		}
		got := k.Below(c.of)
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("%v below %q: %v; want %v", c.paths, c.of, got, c.want)
		}
		for _, p := range c.want {
			k.Remove(p)
		}
		if n := k.Len(); n != len(c.paths)-len(c.want) {
			t.Errorf("%v: %d indexed after removing %v; want %d", c.paths, n, c.want, len(c.paths)-len(c.want))
		}
	}
}

// A path is found below a folder above it whose folders on the way are not
// indexed (git's record: a checkout's folder, nothing above it), and
// removing the last path under a chain of such folders leaves no link.
func TestBelowReachesAcrossFoldersNotIndexed(t *testing.T) {
	var k Kids
	k.Add("x/s1/s2/d")
	k.Add("x/s1/s2")
	if got := k.Below("x"); len(got) != 2 {
		t.Errorf("below x: %v; want x/s1/s2 and x/s1/s2/d", got)
	}
	if k.Has("x/s1") || k.Len() != 2 {
		t.Errorf("a folder on the way counts as indexed: %d indexed", k.Len())
	}
	k.Remove("x/s1/s2")
	if got := k.Below("x"); len(got) != 1 || got[0] != "x/s1/s2/d" {
		t.Errorf("below x after removing x/s1/s2: %v; want x/s1/s2/d", got)
	}
	k.Remove("x/s1/s2/d")
	if n := k.linkCount(); n != 0 || k.Len() != 0 {
		t.Errorf("%d links and %d paths left after removing every path", n, k.Len())
	}
}
