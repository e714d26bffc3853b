package index

import (
	"unicode"
	"unicode/utf8"

	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/registry"
)

// tokenizerName is the content tokenizer, registered with bleve so a stored
// index mapping that names it can be reopened.
const tokenizerName = "neuralis_code"

// maxTokenBytes drops longer tokens (base64 blobs, hashes in data files):
// they bloat the term dictionary and nobody types them.
const maxTokenBytes = 128

func init() {
	if err := registry.RegisterTokenizer(tokenizerName, func(map[string]interface{}, *registry.Cache) (analysis.Tokenizer, error) {
		return codeTokenizer{}, nil
	}); err != nil {
		panic(err)
	}
}

// codeTokenizer splits text into runs of letters, digits and underscores,
// lower-cased. Unlike Unicode word segmentation it splits "fmt.Println" and
// "a-b" into separate words, which is what people searching code expect.
// Snippets use the same function, so highlights agree with matches.
type codeTokenizer struct{}

func (codeTokenizer) Tokenize(input []byte) analysis.TokenStream {
	ts := make(analysis.TokenStream, 0, len(input)/6+1)
	var slab []analysis.Token // tokens are allocated in chunks, not one by one
	pos := 0
	eachToken(input, func(start, end int) {
		if end-start > maxTokenBytes {
			return
		}
		pos++
		if len(slab) == cap(slab) {
			slab = make([]analysis.Token, 0, 512)
		}
		slab = append(slab, analysis.Token{
			Start:    start,
			End:      end,
			Term:     lowerIfNeeded(input[start:end]),
			Position: pos,
			Type:     analysis.AlphaNumeric,
		})
		ts = append(ts, &slab[len(slab)-1])
	})
	return ts
}

// lowerIfNeeded returns b itself when it is already lower case ASCII (most
// tokens of most text), else a lower-cased copy.
func lowerIfNeeded(b []byte) []byte {
	for _, c := range b {
		if c >= utf8.RuneSelf || ('A' <= c && c <= 'Z') {
			return lowerBytes(b)
		}
	}
	return b
}

// analyzer is codeTokenizer as an analysis.Analyzer (lower-casing is done by
// the tokenizer itself, so the chain has no filters).
type analyzer struct{}

func (analyzer) Analyze(input []byte) analysis.TokenStream { return codeTokenizer{}.Tokenize(input) }

func isWordByte(c byte) bool {
	return c == '_' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r)
}

// eachToken calls fn with the byte range of every token of b.
func eachToken(b []byte, fn func(start, end int)) {
	start := -1
	for i := 0; i < len(b); {
		c := b[i]
		var word bool
		size := 1
		if c < utf8.RuneSelf {
			word = isWordByte(c)
		} else {
			var r rune
			r, size = utf8.DecodeRune(b[i:])
			word = isWordRune(r)
		}
		if word {
			if start < 0 {
				start = i
			}
		} else if start >= 0 {
			fn(start, i)
			start = -1
		}
		i += size
	}
	if start >= 0 {
		fn(start, len(b))
	}
}

// lowerBytes returns a lower-cased copy of b.
func lowerBytes(b []byte) []byte {
	ascii := true
	for _, c := range b {
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	out := make([]byte, len(b))
	if ascii {
		for i, c := range b {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			out[i] = c
		}
		return out
	}
	out = out[:0]
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		out = utf8.AppendRune(out, unicode.ToLower(r))
		i += size
	}
	return out
}
