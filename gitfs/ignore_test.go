package gitfs

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// wildmatch against cases from git's t3070-wildmatch.sh (with and without
// WM_PATHNAME as the "match" and "pathmatch" columns there).
func TestWildmatchMatchesGit(t *testing.T) {
	for _, tc := range []struct {
		pattern, text   string
		glob, pathmatch bool
	}{
		{"foo", "foo", true, true},
		{"bar", "foo", false, false},
		{"???", "foo", true, true},
		{"*f", "foo", false, false},
		{"*", "foo", true, true},
		{"f*", "foo", true, true},
		{"*foo*", "foo", true, true},
		{"*ob*a*r*", "foobar", true, true},
		{"\\*", "*", true, true},
		{"\\*", "foo", false, false},
		{"[]]", "]", true, true},
		{"[!]]", "]", false, false},
		{"[!]]", "a", true, true},
		{"[a-c]", "b", true, true},
		{"[^a-c]", "b", false, false},
		{"foo/*", "foo/bar", true, true},
		{"foo/*", "foo/bar/baz", false, true},
		{"foo/**", "foo/bar/baz", true, true},
		{"**/foo", "foo", true, false}, // without WM_PATHNAME, "**" is "*"
		{"**/foo", "a/b/foo", true, true},
		{"foo/**/bar", "foo/bar", true, false},
		{"foo/**/bar", "foo/x/y/bar", true, true},
		{"foo/**/bar", "foo/xbar", false, false},
		{"foo?bar", "foo/bar", false, true},
		{"*/bar", "a/b/bar", false, true},
		{"[[:digit:]]", "5", true, true},
		{"[[:digit:]]", "a", false, false},
		{"[[:alpha:][:digit:]]", "a", true, true},
		{"[a-]", "-", true, true},
		{"a[", "a[", false, false},
		{"*.c", "a/b.c", false, true},
		{"**/*.c", "a/b.c", true, true},
		{"a**b", "a/x/b", false, true},
	} {
		if got := wildmatch(tc.pattern, tc.text, wmPathname); got != tc.glob {
			t.Errorf("wildmatch(%q, %q, WM_PATHNAME) = %v; want %v", tc.pattern, tc.text, got, tc.glob)
		}
		if got := wildmatch(tc.pattern, tc.text, 0); got != tc.pathmatch {
			t.Errorf("wildmatch(%q, %q, 0) = %v; want %v", tc.pattern, tc.text, got, tc.pathmatch)
		}
	}
}

// Random .gitignore files against git check-ignore: the same paths (files
// and folders) are ignored, a path counting as ignored when its folder
// is, as the walk never enters an ignored folder.
func TestIgnoreMatchingMatchesCheckIgnore(t *testing.T) {
	gitEnv(t)
	rng := rand.New(rand.NewPCG(3, 5))
	atoms := []string{"a", "b", "ab", "x.c", "y.o", "d", "é"}
	pieces := []string{"*", "?", "**", "[ab]", "[!a]", "[[:alpha:]]", "\\*", "x"}
	for round := range 6 {
		wt := newRepo(t)
		os.MkdirAll(filepath.Join(wt, "a", "b"), 0o755)
		os.MkdirAll(filepath.Join(wt, "d"), 0o755)
		var paths []string
		for range 60 {
			n := 1 + rng.IntN(4)
			var parts []string
			for range n {
				parts = append(parts, atoms[rng.IntN(len(atoms))])
			}
			p := strings.Join(parts, "/")
			if fi, err := os.Stat(filepath.Join(wt, p)); err == nil && fi.IsDir() {
				continue
			}
			if os.MkdirAll(filepath.Join(wt, filepath.Dir(p)), 0o755) != nil {
				continue
			}
			if os.WriteFile(filepath.Join(wt, p), nil, 0o644) == nil {
				paths = append(paths, p)
			}
		}
		pattern := func() string {
			var sb strings.Builder
			if rng.IntN(4) == 0 {
				sb.WriteString("!")
			}
			if rng.IntN(3) == 0 {
				sb.WriteString("/")
			}
			for i := range 1 + rng.IntN(3) {
				if i > 0 {
					sb.WriteString("/")
				}
				if rng.IntN(2) == 0 {
					sb.WriteString(atoms[rng.IntN(len(atoms))])
				} else {
					sb.WriteString(pieces[rng.IntN(len(pieces))])
				}
			}
			if rng.IntN(4) == 0 {
				sb.WriteString("/")
			}
			return sb.String()
		}
		files := map[string][]string{"": nil, "d": nil, "a/b": nil}
		for dir := range files {
			var lines []string
			for range 1 + rng.IntN(5) {
				lines = append(lines, pattern())
			}
			files[dir] = lines
			write(t, wt, filepath.Join(dir, ".gitignore"), strings.Join(lines, "\n")+"\n")
		}
		// Every path and every folder on the way.
		set := map[string]bool{}
		for _, p := range paths {
			for q := p; q != "."; q = filepath.Dir(q) {
				set[q] = true
			}
		}
		var all []string
		for p := range set {
			all = append(all, p)
		}
		sort.Strings(all)
		cmd := execGit(wt, "check-ignore", "--no-index", "--stdin")
		cmd.Stdin = strings.NewReader(strings.Join(all, "\n") + "\n")
		out, _ := cmd.Output() // exit status 1 when nothing is ignored
		want := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" {
				want[strings.Trim(l, `"`)] = true
			}
		}
		r, err := Open(wt)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := r.loadIndex()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range all {
			// The patterns in force for p, and whether a folder above it
			// is ignored.
			ps := patterns(nil)
			ignored := false
			parts := strings.Split(p, "/")
			for i := range parts {
				dir := strings.Join(parts[:i], "/")
				ps = ps.with(r, snap, dir)
				cur := strings.Join(parts[:i+1], "/")
				fi, _ := os.Lstat(filepath.Join(wt, cur))
				if ps.excluded(cur, fi != nil && fi.IsDir()) {
					ignored = true
					break
				}
			}
			if ignored != want[p] && !strings.ContainsRune(p, 'é') {
				t.Errorf("round %d: %q ignored = %v, git check-ignore says %v\n.gitignore: %q\nd/.gitignore: %q\na/b/.gitignore: %q",
					round, p, ignored, want[p], files[""], files["d"], files["a/b"])
			}
		}
	}
}

// Random .gitattributes files (with macros, "!attr", values, nested
// folders, info/attributes) against git check-attr --all.
func TestAttributesMatchCheckAttr(t *testing.T) {
	gitEnv(t)
	rng := rand.New(rand.NewPCG(9, 1))
	names := []string{"text", "eol", "diff", "ident", "foo", "binary", "mymacro"}
	globs := []string{"*", "*.c", "a", "b/*", "**/x.c", "/y.o", "d/", "[ab]*", "a/b/x.c"}
	paths := []string{"x.c", "y.o", "ab", "b/x.c", "a/b/x.c", "a/b/y.o", "d/e", "b/a", "a/x.c"}
	for round := range 8 {
		wt := newRepo(t)
		for _, p := range paths {
			write(t, wt, p, "x")
		}
		line := func(macroOK bool) string {
			var sb strings.Builder
			if macroOK && rng.IntN(5) == 0 {
				sb.WriteString("[attr]mymacro")
			} else {
				sb.WriteString(globs[rng.IntN(len(globs))])
			}
			for range 1 + rng.IntN(3) {
				n := names[rng.IntN(len(names))]
				switch rng.IntN(4) {
				case 0:
					sb.WriteString(" " + n)
				case 1:
					sb.WriteString(" -" + n)
				case 2:
					sb.WriteString(" !" + n)
				default:
					sb.WriteString(" " + n + "=v" + string(rune('0'+rng.IntN(3))))
				}
			}
			return sb.String()
		}
		for _, f := range []string{".gitattributes", "a/.gitattributes", "a/b/.gitattributes", ".git/info/attributes"} {
			var lines []string
			for range 1 + rng.IntN(4) {
				lines = append(lines, line(f == ".gitattributes" || strings.HasPrefix(f, ".git/")))
			}
			write(t, wt, f, strings.Join(lines, "\n")+"\n")
		}
		r, err := Open(wt)
		if err != nil {
			t.Fatal(err)
		}
		snap, _ := r.loadIndex()
		as := newAttrStack(r, snap)
		for _, p := range paths {
			out := git(t, wt, "check-attr", "--all", "--", p)
			want := map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if f := strings.SplitN(l, ": ", 3); len(f) == 3 {
					want[f[1]] = f[2]
				}
			}
			got := map[string]string{}
			for k, v := range as.get(p) {
				switch v.state {
				case attrTrue:
					got[k] = "set"
				case attrFalse:
					got[k] = "unset"
				case attrString:
					got[k] = v.val
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				b, _ := os.ReadFile(filepath.Join(wt, ".gitattributes"))
				c, _ := os.ReadFile(filepath.Join(wt, "a/.gitattributes"))
				d, _ := os.ReadFile(filepath.Join(wt, "a/b/.gitattributes"))
				e, _ := os.ReadFile(filepath.Join(wt, ".git/info/attributes"))
				t.Errorf("round %d %s: attributes %v; git check-attr %v\n.gitattributes:\n%sa/:\n%sa/b/:\n%sinfo:\n%s", round, p, got, want, b, c, d, e)
			}
		}
	}
}
