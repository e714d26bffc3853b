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
// Content is usually analysed before the document is built, while its file
// is read (newAnalyzedField), so the text need not be kept for the batch.
type field struct {
	name     string
	value    []byte
	opts     bindex.FieldIndexingOptions
	keyword  bool
	analyzed bool
	plain    int // bytes of text
	length   int
	freqs    bindex.TokenFrequencies
	size     int
}

// newAnalyzedField is a content field of plain bytes of text whose terms
// were counted already (see termCounter).
func newAnalyzedField(name string, a analysed, plain int64) *field {
	return &field{name: name, opts: bindex.IndexField, analyzed: true, plain: int(plain),
		length: a.tokens, freqs: a.freqs, size: a.mem}
}

// newKeywordsField is a field of several keywords, each one term.
func newKeywordsField(name string, values []string) *field {
	freqs := make(bindex.TokenFrequencies, len(values))
	size := 64
	for _, v := range values {
		freqs[v] = termFreq([]byte(v), 1, false)
		size += 2*len(v) + 64
	}
	return &field{name: name, opts: bindex.IndexField, analyzed: true, length: len(values), freqs: freqs, size: size}
}

func newKeywordField(name string, value []byte) *field {
	return &field{name: name, value: value, opts: bindex.IndexField, keyword: true, plain: len(value)}
}

func (f *field) Name() string                         { return f.name }
func (f *field) ArrayPositions() []uint64             { return nil }
func (f *field) Options() bindex.FieldIndexingOptions { return f.opts }
func (f *field) Value() []byte                        { return f.value }
func (f *field) NumPlainTextBytes() uint64            { return uint64(f.plain) }
func (f *field) EncodedFieldType() byte               { return 't' }
func (f *field) AnalyzedLength() int                  { return f.length }
func (f *field) AnalyzedTokenFrequencies() bindex.TokenFrequencies {
	return f.freqs
}

// Size is an estimate of the memory held, for bleve's statistics.
func (f *field) Size() int { return 64 + len(f.name) + len(f.value) + f.size }

func (f *field) Analyze() {
	switch {
	case f.analyzed:
		return
	case f.keyword:
		f.length = 1
		f.freqs = bindex.TokenFrequencies{string(f.value): termFreq(f.value, 1, f.opts.IncludeTermVectors())}
		f.size = 2*len(f.value) + 64
	case f.opts.IncludeTermVectors():
		toks := codeTokenizer{}.Tokenize(f.value)
		f.length = len(toks)
		f.freqs = analysis.TokenFrequency(toks, nil, f.opts)
		f.size = len(f.value) + len(f.freqs)*96
	default:
		a := contentFrequencies(f.value)
		f.length, f.freqs, f.size = a.tokens, a.freqs, a.mem
	}
	f.analyzed = true
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

// analysed is the content of a file as the index needs it: its terms with
// their frequencies and the number of tokens.
type analysed struct {
	freqs  bindex.TokenFrequencies
	tokens int
	mem    int // estimate of the bytes held
}

// contentFrequencies tokenizes b as codeTokenizer does and counts its terms.
// The terms are copies: b may be reused once it returns.
func contentFrequencies(b []byte) analysed {
	var c termCounter
	return c.count(b)
}

// termCounter counts the terms of one text at a time in a hash table of its
// own, reused from text to text, so each distinct term costs one map entry
// and each token a hash computed while scanning and a probe, not a map
// lookup: Go source has five tokens per distinct term of a file.
type termCounter struct {
	slots []int32 // index+1 in terms, 0 if free; the length is a power of 2
	terms []termCount
	arena []byte // the terms' lower-cased bytes, end to end
}

type termCount struct {
	hash        uint64
	off, n, cnt int32
}

// FNV-1a, over lower-cased bytes.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// lowerASCII maps every byte to its ASCII lower case.
var lowerASCII = func() (t [256]byte) {
	for c := range t {
		t[c] = byte(c)
		if 'A' <= c && c <= 'Z' {
			t[c] = byte(c + 'a' - 'A')
		}
	}
	return t
}()

func (c *termCounter) count(b []byte) analysed {
	c.terms, c.arena = c.terms[:0], c.arena[:0]
	size := 64
	for size < len(b)/16 {
		size *= 2
	}
	if cap(c.slots) >= size {
		c.slots = c.slots[:size]
		clear(c.slots)
	} else {
		c.slots = make([]int32, size)
	}
	n := 0
	start, ascii := -1, true
	var h uint64
	for i := 0; i < len(b); {
		ch := b[i]
		if ch < utf8.RuneSelf {
			if wordByte[ch] {
				if start < 0 {
					start, h = i, fnvOffset
				}
				h = (h ^ uint64(lowerASCII[ch])) * fnvPrime
			} else if start >= 0 {
				if i-start <= maxTokenBytes {
					n++
					c.add(b[start:i], ascii, h)
				}
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
			if i-start <= maxTokenBytes {
				n++
				c.add(b[start:i], ascii, h)
			}
			start, ascii = -1, true
		}
		i += size
	}
	if start >= 0 && len(b)-start <= maxTokenBytes {
		n++
		c.add(b[start:], ascii, h)
	}
	// The map's keys and terms share one copy of the arena, never written again.
	keys := append([]byte(nil), c.arena...)
	s := unsafe.String(unsafe.SliceData(keys), len(keys))
	freqs := make(bindex.TokenFrequencies, len(c.terms))
	slab := make([]bindex.TokenFreq, len(c.terms))
	for i, t := range c.terms {
		tf := &slab[i]
		tf.Term = keys[t.off : t.off+t.n : t.off+t.n]
		tf.SetFrequency(int(t.cnt))
		freqs[s[t.off:t.off+t.n]] = tf
	}
	return analysed{freqs: freqs, tokens: n, mem: len(keys) + len(c.terms)*96}
}

// add counts one token. For an ASCII token h is the hash of its lower-cased
// bytes; any other is lower-cased and hashed here.
func (c *termCounter) add(tok []byte, ascii bool, h uint64) {
	if !ascii {
		tok = lowerBytes(tok)
		h = fnvOffset
		for _, ch := range tok {
			h = (h ^ uint64(ch)) * fnvPrime
		}
	}
	mask := len(c.slots) - 1
	for i := int(h^h>>32) & mask; ; i = (i + 1) & mask {
		k := c.slots[i]
		if k == 0 {
			c.terms = append(c.terms, termCount{hash: h, off: int32(len(c.arena)), n: int32(len(tok)), cnt: 1})
			for _, ch := range tok {
				c.arena = append(c.arena, lowerASCII[ch]) // tok is lower case already if not ASCII
			}
			c.slots[i] = int32(len(c.terms))
			if 2*len(c.terms) > len(c.slots) {
				c.grow()
			}
			return
		}
		t := &c.terms[k-1]
		if t.hash == h && int(t.n) == len(tok) && equalLower(c.arena[t.off:t.off+t.n], tok) {
			t.cnt++
			return
		}
	}
}

// equalLower reports whether low is tok lower-cased (tok is ASCII or
// already lower case).
func equalLower(low, tok []byte) bool {
	for i, ch := range tok {
		if low[i] != lowerASCII[ch] {
			return false
		}
	}
	return true
}

// grow doubles the table.
func (c *termCounter) grow() {
	c.slots = make([]int32, 2*len(c.slots))
	mask := len(c.slots) - 1
	for k, t := range c.terms {
		i := int(t.hash^t.hash>>32) & mask
		for c.slots[i] != 0 {
			i = (i + 1) & mask
		}
		c.slots[i] = int32(k + 1)
	}
}
