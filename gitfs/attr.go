package gitfs

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Git attributes (attr.c), as far as status needs them: "text", "crlf",
// "eol" and "ident" decide the clean conversion of a worktree file before
// it is hashed, and "diff" whether rename detection treats it as binary.

// attrValue is one attribute's state for a path.
type attrValue struct {
	state uint8 // attrUnknown, attrUnset, attrTrue, attrFalse or attrString
	val   string
}

const (
	attrUnknown = iota // no rule said anything
	attrUnset          // "!attr": explicitly unspecified
	attrTrue           // "attr"
	attrFalse          // "-attr"
	attrString         // "attr=value"
)

func (v attrValue) isTrue() bool { return v.state == attrTrue }

// str returns the value of an "attr=value" setting, "" otherwise.
func (v attrValue) str() string {
	if v.state == attrString {
		return v.val
	}
	return ""
}

type attrState struct {
	name  string
	value attrValue
}

// attrRule is one line of an attributes file: a pattern and its settings,
// or a macro definition ("[attr]name settings").
type attrRule struct {
	pat    *ignorePattern // nil for a macro
	macro  string
	states []attrState
}

// attrBlank is attr.c's blank: the separators of an attributes line.
const attrBlank = " \t\r\n"

// parseAttrs parses an attributes file whose patterns apply below the
// slash directory domain ("" for the root); macros are kept only when
// macroOK (top-level files), as git does.
func parseAttrs(b []byte, domain string, macroOK bool) []attrRule {
	base := ""
	if domain != "" {
		base = domain + "/"
	}
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	var rules []attrRule
	for _, line := range strings.Split(string(b), "\n") {
		if r, ok := parseAttrLine(line, base, macroOK); ok {
			rules = append(rules, r)
		}
	}
	return rules
}

// parseAttrLine is attr.c parse_attr_line.
func parseAttrLine(line, base string, macroOK bool) (attrRule, bool) {
	cp := strings.TrimLeft(line, attrBlank)
	if cp == "" || cp[0] == '#' {
		return attrRule{}, false
	}
	var name, states string
	if cp[0] == '"' {
		if n, rest, ok := unquoteC(cp); ok {
			name, states = n, rest
		}
	}
	if name == "" {
		n := strings.IndexAny(cp, attrBlank)
		if n < 0 {
			n = len(cp)
		}
		name, states = cp[:n], cp[n:]
	}
	var r attrRule
	if len(name) > len("[attr]") && strings.HasPrefix(name, "[attr]") {
		if !macroOK {
			return attrRule{}, false
		}
		m := strings.TrimLeft(cp[len("[attr]"):], attrBlank)
		n := strings.IndexAny(m, attrBlank)
		if n < 0 {
			n = len(m)
		}
		if !attrNameValid(m[:n]) {
			return attrRule{}, false
		}
		r.macro, states = m[:n], m[n:]
	} else {
		r.pat = parsePattern(name, base)
		if r.pat.flags&patNegative != 0 {
			return attrRule{}, false // negative patterns are ignored, with a warning
		}
	}
	for _, f := range strings.FieldsFunc(states, func(c rune) bool { return strings.ContainsRune(attrBlank, c) }) {
		var st attrState
		switch {
		case f[0] == '-':
			st.name, st.value = f[1:], attrValue{state: attrFalse}
		case f[0] == '!':
			st.name, st.value = f[1:], attrValue{state: attrUnset}
		default:
			if k, v, ok := strings.Cut(f, "="); ok {
				st.name, st.value = k, attrValue{state: attrString, val: v}
			} else {
				st.name, st.value = f, attrValue{state: attrTrue}
			}
		}
		if !attrNameValid(st.name) {
			return attrRule{}, false // the whole line is rejected
		}
		r.states = append(r.states, st)
	}
	return r, true
}

// attrNameValid is attr.c attr_name_valid: [-._0-9a-zA-Z], not starting
// with "-".
func attrNameValid(s string) bool {
	if s == "" || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '-' || c == '.' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// unquoteC parses a C-quoted string at the start of s (quote.c
// unquote_c_style) and returns it and what follows.
func unquoteC(s string) (string, string, bool) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", false
	}
	var sb strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			return sb.String(), s[i+1:], true
		case '\\':
			i++
			if i >= len(s) {
				return "", "", false
			}
			switch c = s[i]; c {
			case 'a':
				sb.WriteByte('\a')
			case 'b':
				sb.WriteByte('\b')
			case 'f':
				sb.WriteByte('\f')
			case 'n':
				sb.WriteByte('\n')
			case 'r':
				sb.WriteByte('\r')
			case 't':
				sb.WriteByte('\t')
			case 'v':
				sb.WriteByte('\v')
			case '\\', '"':
				sb.WriteByte(c)
			case '0', '1', '2', '3':
				if i+2 >= len(s) {
					return "", "", false
				}
				v, err := strconv.ParseUint(s[i:i+3], 8, 8)
				if err != nil {
					return "", "", false
				}
				sb.WriteByte(byte(v))
				i += 2
			default:
				return "", "", false
			}
		default:
			sb.WriteByte(c)
		}
	}
	return "", "", false
}

// builtinAttrs is git's built-in macro.
var builtinAttrs = parseAttrs([]byte("[attr]binary -diff -merge -text\n"), "", true)

// attrStack finds the attributes of worktree paths, reading each
// directory's .gitattributes once. It is safe for concurrent use.
type attrStack struct {
	r    *Repo
	snap *indexSnap

	once sync.Once
	// low holds the files below the in-tree ones, highest precedence
	// first: core.attributesFile (or $XDG_CONFIG_HOME/git/attributes),
	// /etc/gitattributes, the built-in macro; info is
	// $GIT_DIR/info/attributes, above everything.
	low  [][]attrRule
	info []attrRule

	mu   sync.Mutex
	dirs map[string][]attrRule // by directory: its .gitattributes
}

func newAttrStack(r *Repo, snap *indexSnap) *attrStack {
	return &attrStack{r: r, snap: snap, dirs: map[string][]attrRule{}}
}

func (a *attrStack) init() {
	a.once.Do(func() {
		if p := filepath.Join(a.r.commonDir, "info", "attributes"); a.r.mayRead(p) {
			a.info = readAttrFile(p)
		}
		global, ok := a.r.conf().get("core", "", "attributesfile")
		if ok && global != "" {
			if p := expandHome(global); a.r.mayRead(p) {
				a.low = append(a.low, readAttrFile(p))
			}
		} else if x := xdgConfigHome(); x != "" {
			a.low = append(a.low, readAttrFile(filepath.Join(x, "git", "attributes")))
		}
		if os.Getenv("GIT_ATTR_NOSYSTEM") == "" {
			a.low = append(a.low, readAttrFile("/etc/gitattributes"))
		}
		a.low = append(a.low, builtinAttrs)
	})
}

// readAttrFile reads a top-level attributes file (macros allowed,
// symlinks followed); a missing one has no rules.
func readAttrFile(path string) []attrRule {
	b, err := readRegular(path)
	if err != nil {
		return nil
	}
	return parseAttrs(b, "", true)
}

// dir returns the rules of the .gitattributes in directory rel: the
// worktree file (not followed when a symlink), else the index's copy, as
// git reads them when checking files in.
func (a *attrStack) dir(rel string) []attrRule {
	a.mu.Lock()
	rules, ok := a.dirs[rel]
	a.mu.Unlock()
	if ok {
		return rules
	}
	name := ".gitattributes"
	if rel != "" {
		name = rel + "/.gitattributes"
	}
	var data []byte
	if f, err := a.r.openWorktree(name); err == nil {
		data, err = io.ReadAll(io.LimitReader(f, 100<<20))
		f.Close()
		if err != nil {
			data = nil
		}
	} else if e := a.snap.entryForAttr(name); e != nil {
		data, _ = a.r.readBlob(e.Hash)
	}
	if data != nil {
		rules = parseAttrs(data, rel, rel == "")
	}
	a.mu.Lock()
	a.dirs[rel] = rules
	a.mu.Unlock()
	return rules
}

// get returns the attributes of the file at the slash path p (attr.c
// git_check_attr with every attribute asked for): each attribute takes its
// value from the most specific rule, info/attributes first, then the
// .gitattributes files from p's directory up, then the global, system and
// built-in files; later lines and later settings on a line win; a macro set
// to true sets its own attributes where they are still unknown.
func (a *attrStack) get(p string) map[string]attrValue {
	a.init()
	stack := [][]attrRule{a.info}
	dir := ""
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		dir = p[:i]
	}
	for d := dir; ; {
		stack = append(stack, a.dir(d))
		if d == "" {
			break
		}
		if i := strings.LastIndexByte(d, '/'); i >= 0 {
			d = d[:i]
		} else {
			d = ""
		}
	}
	stack = append(stack, a.low...)

	// Macros: the highest-precedence definition wins.
	macros := map[string]*attrRule{}
	for _, rules := range stack {
		for i := len(rules) - 1; i >= 0; i-- {
			if m := rules[i].macro; m != "" {
				if _, ok := macros[m]; !ok {
					macros[m] = &rules[i]
				}
			}
		}
	}
	vals := map[string]attrValue{}
	var fillOne func(r *attrRule)
	fillOne = func(r *attrRule) {
		for i := len(r.states) - 1; i >= 0; i-- {
			st := r.states[i]
			if _, known := vals[st.name]; known {
				continue
			}
			vals[st.name] = st.value
			if m := macros[st.name]; m != nil && st.value.state == attrTrue {
				fillOne(m)
			}
		}
	}
	for _, rules := range stack {
		for i := len(rules) - 1; i >= 0; i-- {
			r := &rules[i]
			if r.pat != nil && r.pat.matches(p, false) {
				fillOne(r)
			}
		}
	}
	return vals
}

// entryForAttr returns the index entry git reads an attributes file from
// when the worktree has none: stage 0, or "ours" (stage 2) in a conflict.
func (s *indexSnap) entryForAttr(name string) *entry {
	if e := s.entry(name); e != nil {
		return e
	}
	for _, e := range s.entries[s.lowerBound(name):] {
		if e.Name != name {
			break
		}
		if e.Stage == 2 {
			return e
		}
	}
	return nil
}
