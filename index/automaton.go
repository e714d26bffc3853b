package index

import (
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// bleve runs a regexp or wildcard query by building a DFA over bytes
// (vellum) for the whole expression before it looks at the index, with
// no way to stop it: a query as short as /.*x.{0,12}/ makes it work
// through 10,000 states for seconds before it gives up, and /\pL{0,20}x/
// finishes after a quarter of a minute (found by FuzzSearch, which
// stalled on them). Anyone who may search sends such queries over the
// control socket, so Search first builds the expression's DFA over runes
// itself, within a budget, and refuses what does not fit.
const (
	// maxAutomatonStates bounds the DFA's states.
	maxAutomatonStates = 2000
	// maxAutomatonWork bounds the sum, over the states, of the
	// instructions each holds weighted by the byte ranges they stand for:
	// about what vellum does for every one of its 256 bytes per state.
	maxAutomatonWork = 20000
)

// automatonTooBig reports whether bleve's automaton for the regular
// expression expr could cost more than the budget. A syntax error is left
// for bleve to report.
func automatonTooBig(expr string) bool {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return false
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return false
	}
	if len(prog.Inst) > maxAutomatonWork {
		return true
	}
	// Runes between two consecutive bounds are matched alike by every
	// instruction: one of each stands for them all.
	bounds := map[rune]bool{0: true, '\n': true, '\n' + 1: true}
	weight := make([]int, len(prog.Inst))
	for pc, in := range prog.Inst {
		switch in.Op {
		case syntax.InstRune, syntax.InstRune1:
			if len(in.Rune) == 1 {
				r := in.Rune[0]
				for f := r; ; {
					bounds[f], bounds[f+1] = true, true
					if syntax.Flags(in.Arg)&syntax.FoldCase == 0 {
						break
					}
					if f = unicode.SimpleFold(f); f == r {
						break
					}
				}
				weight[pc] = 1
				break
			}
			for i := 0; i+1 < len(in.Rune); i += 2 {
				bounds[in.Rune[i]], bounds[in.Rune[i+1]+1] = true, true
			}
			weight[pc] = len(in.Rune) / 2
		case syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			weight[pc] = 4 // every UTF-8 length
		}
	}
	var classes []rune
	for r := range bounds {
		if r <= utf8.MaxRune {
			classes = append(classes, r)
		}
	}
	slices.Sort(classes)

	matches := func(in *syntax.Inst, r rune) bool {
		switch in.Op {
		case syntax.InstRune, syntax.InstRune1:
			return in.MatchRune(r)
		case syntax.InstRuneAny:
			return true
		case syntax.InstRuneAnyNotNL:
			return r != '\n'
		}
		return false
	}
	// closure follows the instructions that consume nothing.
	closure := func(pcs []uint32) []uint32 {
		var out []uint32
		seen := map[uint32]bool{}
		for len(pcs) > 0 {
			pc := pcs[len(pcs)-1]
			pcs = pcs[:len(pcs)-1]
			if seen[pc] {
				continue
			}
			seen[pc] = true
			in := &prog.Inst[pc]
			switch in.Op {
			case syntax.InstAlt, syntax.InstAltMatch:
				pcs = append(pcs, in.Out, in.Arg)
			case syntax.InstCapture, syntax.InstNop, syntax.InstEmptyWidth:
				pcs = append(pcs, in.Out)
			case syntax.InstFail:
			default:
				out = append(out, pc)
			}
		}
		slices.Sort(out)
		return out
	}
	key := func(pcs []uint32) string {
		var b strings.Builder
		for _, pc := range pcs {
			fmt.Fprintf(&b, "%d,", pc)
		}
		return b.String()
	}
	start := closure([]uint32{uint32(prog.Start)})
	seen := map[string]bool{key(start): true}
	queue := [][]uint32{start}
	work, steps := 0, 0
	for len(queue) > 0 {
		s := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, pc := range s {
			work += weight[pc]
		}
		if work > maxAutomatonWork {
			return true
		}
		for _, r := range classes {
			var next []uint32
			for _, pc := range s {
				if in := &prog.Inst[pc]; matches(in, r) {
					next = append(next, in.Out)
				}
			}
			// The check itself stays cheap: a few million steps at most.
			if steps += len(s) + 1; steps > 200*maxAutomatonWork {
				return true
			}
			if len(next) == 0 {
				continue
			}
			n := closure(next)
			if k := key(n); !seen[k] {
				if seen[k] = true; len(seen) > maxAutomatonStates {
					return true
				}
				queue = append(queue, n)
			}
		}
	}
	return false
}
