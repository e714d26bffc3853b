package index

import (
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/registry"
	bindex "github.com/blevesearch/bleve_index_api"
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

// field is a document field analysed straight into bleve's term
// frequencies, without the token stream and the per-token allocations of
// bleve's TextField: content by the code tokenizer, a keyword as one term.
type field struct {
	name    string
	value   []byte
	opts    bindex.FieldIndexingOptions
	keyword bool
	length  int
	freqs   bindex.TokenFrequencies
	size    int
}

func newContentField(name string, value []byte, opts bindex.FieldIndexingOptions) *field {
	return &field{name: name, value: value, opts: opts}
}

func newKeywordField(name string, value []byte) *field {
	return &field{name: name, value: value, opts: bindex.IndexField, keyword: true}
}

func (f *field) Name() string                         { return f.name }
func (f *field) ArrayPositions() []uint64             { return nil }
func (f *field) Options() bindex.FieldIndexingOptions { return f.opts }
func (f *field) Value() []byte                        { return f.value }
func (f *field) NumPlainTextBytes() uint64            { return uint64(len(f.value)) }
func (f *field) EncodedFieldType() byte               { return 't' }
func (f *field) AnalyzedLength() int                  { return f.length }
func (f *field) AnalyzedTokenFrequencies() bindex.TokenFrequencies {
	return f.freqs
}

// Size is an estimate of the memory held, for bleve's statistics.
func (f *field) Size() int { return 64 + len(f.name) + len(f.value) + f.size }

func (f *field) Analyze() {
	if f.keyword {
		f.length = 1
		f.freqs = bindex.TokenFrequencies{string(f.value): termFreq(f.value, 1, f.opts.IncludeTermVectors())}
		f.size = 2*len(f.value) + 64
		return
	}
	f.freqs, f.length = contentFrequencies(f.value, f.opts.IncludeTermVectors())
	f.size = len(f.value) + len(f.freqs)*64
}

func termFreq(term []byte, n int, locs bool) *bindex.TokenFreq {
	tf := &bindex.TokenFreq{Term: term}
	tf.SetFrequency(n)
	if locs {
		tf.Locations = []*bindex.TokenLocation{{Start: 0, End: len(term), Position: 1}}
	}
	return tf
}

// wordByte marks the ASCII bytes that are part of a token.
var wordByte = func() (t [utf8.RuneSelf]bool) {
	for c := 0; c < utf8.RuneSelf; c++ {
		t[c] = isWordByte(byte(c))
	}
	return t
}()

// contentFrequencies tokenizes b as codeTokenizer does and returns the term
// frequencies and the number of tokens. Every ASCII term is a substring of
// one lower-cased copy of b, so a document costs a handful of allocations,
// not one per term.
func contentFrequencies(b []byte, locs bool) (bindex.TokenFrequencies, int) {
	low := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		low[i] = c
	}
	// low is never written again: its terms can be map keys without a copy.
	s := unsafe.String(unsafe.SliceData(low), len(low))
	freqs := make(bindex.TokenFrequencies, len(b)/32+8)
	var slab []bindex.TokenFreq
	var locSlab []bindex.TokenLocation
	n := 0
	add := func(start, end int, ascii bool) {
		if end-start > maxTokenBytes {
			return
		}
		n++
		key, term := s[start:end], low[start:end]
		if !ascii {
			term = lowerBytes(b[start:end])
			key = string(term)
		}
		tf, ok := freqs[key]
		if !ok {
			if len(slab) == cap(slab) {
				slab = make([]bindex.TokenFreq, 0, 256)
			}
			slab = append(slab, bindex.TokenFreq{Term: term})
			tf = &slab[len(slab)-1]
			freqs[key] = tf
		}
		tf.SetFrequency(tf.Frequency() + 1)
		if locs {
			if len(locSlab) == cap(locSlab) {
				locSlab = make([]bindex.TokenLocation, 0, 1024)
			}
			locSlab = append(locSlab, bindex.TokenLocation{Start: start, End: end, Position: n})
			tf.Locations = append(tf.Locations, &locSlab[len(locSlab)-1])
		}
	}
	start, ascii := -1, true
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if wordByte[c] {
				if start < 0 {
					start = i
				}
			} else if start >= 0 {
				add(start, i, ascii)
				start, ascii = -1, true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if isWordRune(r) {
			if start < 0 {
				start = i
			}
			ascii = false
		} else if start >= 0 {
			add(start, i, ascii)
			start, ascii = -1, true
		}
		i += size
	}
	if start >= 0 {
		add(start, len(b), ascii)
	}
	return freqs, n
}
