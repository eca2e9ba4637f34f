package model

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	json "github.com/goccy/go-json"
)

// ErrUnsupported is the class of tokenizer.json features this package does not implement (a different model
// type, an unknown normalizer). Loading fails rather than producing ids the engine would not.
var ErrUnsupported = errors.New("model: unsupported tokenizer feature")

// Tokenizer is a loaded BPE tokenizer (byte-level as in GPT-2/Llama-3/Qwen, or SentencePiece-style with byte
// fallback as in Llama-2). It is immutable after loading except for its word cache, and safe for concurrent use.
type Tokenizer struct {
	vocab   map[string]uint32 // token -> id; byte-level tokens are keyed by the raw bytes they stand for
	merges  *mergeTable
	byteIDs [256]uint32 // byte-level: id of each single byte; byte fallback: id of <0xXX>
	hasByte [256]bool

	added     *addedMatcher
	normalize normalizer
	nfc       bool // the normalizer is exactly NFC: normalized into a pooled buffer instead of a new string
	pre       preTokenizer

	byteLevel    bool // tokens are byte sequences (GPT-2 alphabet in the file)
	prefixSpace  bool // ByteLevel add_prefix_space: a piece not starting with a space gets one
	ignoreMerges bool // a word that is itself a token is emitted whole (Llama-3)
	byteFallback bool
	unk          uint32
	hasUnk       bool

	// metaspace is the Metaspace pre-tokenizer's replacement ("▁") when there is one: spaces become it, and a
	// piece not starting with it gets one in front: every piece (prepend "always"), or only the piece at the start
	// of the input ("first", which makes a piece's ids depend on its position).
	metaspace     string
	prependAlways bool
	prependFirst  bool

	bosIDs, eosIDs []uint32 // post-processor: ids around a single sequence when special tokens are added

	tokens  []string // id -> decoded piece (bytes for byte-level tokens, content for added tokens)
	special []bool   // id -> is a special added token
	decoder decoder

	cache *wordCache
	bufs  sync.Pool // *encodeBufs
}

type encodeBufs struct {
	norm    []byte // NFC output, reused; the normalized text never outlives one encodeText call
	heap    heapScratch
	pieces  []addedPiece
	ends    []int
	syms    []uint32
	refs    []segRef // EncodeCached
	scratch []uint32 // EncodeCached: ids of short segments
}

// LoadTokenizer reads an HF tokenizer.json.
func LoadTokenizer(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model: tokenizer: %w", err)
	}
	return ParseTokenizer(data)
}

// ParseTokenizer builds a Tokenizer from the bytes of a tokenizer.json.
func ParseTokenizer(data []byte) (*Tokenizer, error) {
	var f tokenizerFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("model: tokenizer.json: %w", err)
	}
	if f.Model.Type != "BPE" && f.Model.Type != "" {
		return nil, fmt.Errorf("%w: model type %q (only BPE)", ErrUnsupported, f.Model.Type)
	}
	if f.Model.Dropout != nil && *f.Model.Dropout > 0 {
		return nil, fmt.Errorf("%w: BPE dropout", ErrUnsupported)
	}
	if s := f.Model.ContinuingSubwordPrefix; s != nil && *s != "" {
		return nil, fmt.Errorf("%w: continuing_subword_prefix", ErrUnsupported)
	}
	if s := f.Model.EndOfWordSuffix; s != nil && *s != "" {
		return nil, fmt.Errorf("%w: end_of_word_suffix", ErrUnsupported)
	}
	initClasses()
	initNFCInert()
	t := &Tokenizer{
		ignoreMerges: f.Model.IgnoreMerges,
		byteFallback: f.Model.ByteFallback,
		cache:        newWordCache(1 << 16),
	}
	if err := t.configurePre(f.PreTokenizer); err != nil {
		return nil, err
	}
	var err error
	if t.normalize, err = buildNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	t.nfc = f.Normalizer != nil && f.Normalizer.Type == "NFC"
	if t.decoder, err = buildDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if f.Decoder != nil && f.Decoder.Type == "ByteLevel" {
		t.byteLevel = true
	}
	if err := t.buildVocab(&f); err != nil {
		return nil, err
	}
	if _, whole := t.pre.(wholeSplitter); whole && !t.byteLevel && spaceBoundariesHold(&f) {
		t.pre = spaceWordSplitter{}
	}
	t.configurePost(f.PostProcessor)
	return t, nil
}

func (t *Tokenizer) configurePre(c *componentJSON) error {
	if c == nil {
		t.pre = wholeSplitter{}
		return nil
	}
	var parts []preTokenizer
	var walk func(c *componentJSON) error
	walk = func(c *componentJSON) error {
		switch c.Type {
		case "Sequence":
			for _, sub := range c.PreTokenizers {
				if err := walk(sub); err != nil {
					return err
				}
			}
		case "Split":
			if c.Pattern == nil {
				return fmt.Errorf("%w: Split without pattern", ErrUnsupported)
			}
			if c.Invert || (c.Behavior != "" && c.Behavior != "Isolated") {
				return fmt.Errorf("%w: Split behavior %q invert=%v", ErrUnsupported, c.Behavior, c.Invert)
			}
			if c.Pattern.Regex == nil {
				return fmt.Errorf("%w: Split with a string pattern", ErrUnsupported)
			}
			p, err := splitterFor(*c.Pattern.Regex)
			if err != nil {
				return err
			}
			parts = append(parts, p)
		case "ByteLevel":
			t.byteLevel = true
			t.prefixSpace = c.AddPrefixSpace
			if c.UseRegex {
				parts = append(parts, gpt2Splitter{})
			}
		case "Metaspace":
			t.metaspace = c.Replacement
			if t.metaspace == "" {
				t.metaspace = "\u2581"
			}
			switch c.PrependScheme {
			case "always":
				t.prependAlways = true
			case "first":
				t.prependFirst = true
			case "":
				t.prependAlways = c.AddPrefixSpace // older files: add_prefix_space
			}
			if c.Split == nil || *c.Split {
				parts = append(parts, metaspaceSplitter{repl: t.metaspace})
			}
		default:
			return fmt.Errorf("%w: pre-tokenizer %q", ErrUnsupported, c.Type)
		}
		return nil
	}
	if err := walk(c); err != nil {
		return err
	}
	switch len(parts) {
	case 0:
		t.pre = wholeSplitter{}
	case 1:
		t.pre = parts[0]
	default:
		t.pre = sequenceSplitter(parts)
	}
	return nil
}

func splitterFor(pattern string) (preTokenizer, error) {
	switch pattern {
	case patternQwen:
		return gpt4Splitter{maxDigits: 1}, nil
	case patternLlama3:
		return gpt4Splitter{maxDigits: 3}, nil
	case patternGPT2:
		return gpt2Splitter{}, nil
	}
	return newRegexSplitter(pattern)
}

func (t *Tokenizer) buildVocab(f *tokenizerFile) error {
	size := 0
	for _, id := range f.Model.Vocab {
		size = max(size, int(id)+1)
	}
	for _, a := range f.AddedTokens {
		size = max(size, int(a.ID)+1)
	}
	t.vocab = make(map[string]uint32, len(f.Model.Vocab))
	t.tokens = make([]string, size)
	t.special = make([]bool, size)
	for tok, id := range f.Model.Vocab {
		key := tok
		if t.byteLevel {
			b, ok := byteLevelDecode(tok)
			if !ok {
				continue // not reachable from byte-level input
			}
			key = string(b)
		}
		t.vocab[key] = id
		t.tokens[id] = key
	}
	for b := range 256 {
		var key string
		if t.byteLevel {
			key = string([]byte{byte(b)})
		} else {
			key = fmt.Sprintf("<0x%02X>", b)
		}
		if id, ok := t.vocab[key]; ok {
			t.byteIDs[b], t.hasByte[b] = id, true
		}
	}
	if f.Model.UnkToken != nil {
		if id, ok := f.Model.Vocab[*f.Model.UnkToken]; ok {
			t.unk, t.hasUnk = id, true
		}
	}
	pairs, err := parseMerges(f.Model.Merges)
	if err != nil {
		return fmt.Errorf("model: tokenizer.json: %w", err)
	}
	t.merges = newMergeTable(len(pairs))
	for rank, p := range pairs {
		a, okA := f.Model.Vocab[p[0]]
		b, okB := f.Model.Vocab[p[1]]
		m, okM := f.Model.Vocab[p[0]+p[1]]
		if !okA || !okB || !okM {
			continue
		}
		t.merges.put(a, b, uint64(rank)<<32|uint64(m))
	}
	toks := make([]addedToken, 0, len(f.AddedTokens))
	for _, a := range f.AddedTokens {
		toks = append(toks, addedToken{content: a.Content, id: a.ID, special: a.Special, lstrip: a.LStrip, rstrip: a.RStrip, single: a.SingleWord})
		t.tokens[a.ID] = a.Content
		t.special[a.ID] = a.Special
		if !t.byteLevel {
			t.vocab[a.Content] = a.ID
		}
	}
	t.added = newAddedMatcher(toks)
	return nil
}

func (t *Tokenizer) configurePost(c *componentJSON) {
	if c == nil {
		return
	}
	switch c.Type {
	case "TemplateProcessing":
		seen := false
		for _, p := range c.Single {
			switch {
			case p.Sequence != nil:
				seen = true
			case p.SpecialToken != nil:
				ids := c.SpecialTokens[p.SpecialToken.ID].IDs
				if seen {
					t.eosIDs = append(t.eosIDs, ids...)
				} else {
					t.bosIDs = append(t.bosIDs, ids...)
				}
			}
		}
	case "Sequence":
		for _, p := range c.Processors {
			t.configurePost(p)
		}
	}
}

// VocabSize is the number of ids (the highest id plus one).
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of a token given as its text (added tokens such as "<|image_pad|>", or ordinary tokens
// as the text they decode to).
func (t *Tokenizer) TokenID(tok string) (uint32, bool) {
	if k := t.addedID(tok); k >= 0 {
		return uint32(k), true
	}
	id, ok := t.vocab[tok]
	return id, ok
}

func (t *Tokenizer) addedID(tok string) int {
	n := int32(0)
	for i := 0; i < len(tok) && n >= 0; i++ {
		n = t.added.child(n, tok[i])
	}
	if n <= 0 || t.added.nodes[n].tok < 0 {
		return -1
	}
	return int(t.added.toks[t.added.nodes[n].tok].id)
}

// Token returns the vocabulary string of an id as tokenizer.json spells it (byte-level tokens in the GPT-2
// alphabet), or "" for an unknown id.
func (t *Tokenizer) Token(id uint32) string {
	if int(id) >= len(t.tokens) {
		return ""
	}
	if t.byteLevel && t.addedID(t.tokens[id]) != int(id) {
		return byteLevelEncode([]byte(t.tokens[id]))
	}
	return t.tokens[id]
}

// IsSpecial reports whether id is a special added token (skipped by DecodeOptions.SkipSpecial).
func (t *Tokenizer) IsSpecial(id uint32) bool { return int(id) < len(t.special) && t.special[id] }

// Encode returns the ids of s without the post-processor's special tokens (no BOS): the form for text that a
// chat template rendered, which carries its own special tokens.
func (t *Tokenizer) Encode(s string) []uint32 {
	return t.AppendEncode(make([]uint32, 0, len(s)/3+4), s)
}

// EncodeSpecial is Encode plus the post-processor's tokens around the sequence (Llama-2's <s>), as HF does with
// add_special_tokens=True.
func (t *Tokenizer) EncodeSpecial(s string) []uint32 {
	out := append(make([]uint32, 0, len(s)/3+4+len(t.bosIDs)), t.bosIDs...)
	out = t.AppendEncode(out, s)
	return append(out, t.eosIDs...)
}

// AppendEncode appends the ids of s to dst (no post-processor tokens) and returns the extended slice.
func (t *Tokenizer) AppendEncode(dst []uint32, s string) []uint32 {
	b := t.getBufs()
	b.pieces = t.added.split(s, b.pieces[:0])
	for _, p := range b.pieces {
		if p.isAdded {
			dst = append(dst, p.id)
			continue
		}
		dst = t.encodeText(dst, s[p.start:p.end], p.start == 0, b)
	}
	t.bufs.Put(b)
	return dst
}

func (t *Tokenizer) getBufs() *encodeBufs {
	if b, ok := t.bufs.Get().(*encodeBufs); ok {
		return b
	}
	return &encodeBufs{}
}

// encodeText tokenizes a piece that contains no added token.
// atStart tells whether the piece begins the input (Metaspace prepend_scheme "first").
func (t *Tokenizer) encodeText(dst []uint32, s string, atStart bool, b *encodeBufs) []uint32 {
	switch {
	case t.nfc:
		if !isNFC(s) {
			b.norm = appendNFC(b.norm[:0], s)
			s = unsafe.String(unsafe.SliceData(b.norm), len(b.norm))
		}
	case t.normalize != nil:
		s = t.normalize(s)
	}
	if t.metaspace != "" {
		s = strings.ReplaceAll(s, " ", t.metaspace)
		if (t.prependAlways || (t.prependFirst && atStart)) && !strings.HasPrefix(s, t.metaspace) {
			s = t.metaspace + s
		}
	}
	if t.prefixSpace && len(s) > 0 && s[0] != ' ' {
		s = " " + s
	}
	b.ends = t.pre.split(s, b.ends[:0])
	start := 0
	for _, end := range b.ends {
		dst = t.encodeWord(dst, s[start:end], b)
		start = end
	}
	return dst
}

// encodeWord runs BPE on one pre-tokenized word, through the word cache.
func (t *Tokenizer) encodeWord(dst []uint32, w string, b *encodeBufs) []uint32 {
	if t.byteLevel && len(w) == 1 {
		return append(dst, t.byteIDs[w[0]])
	}
	if t.ignoreMerges {
		if id, ok := t.vocab[w]; ok {
			return append(dst, id)
		}
	}
	cacheable := len(w) <= maxCachedWord
	if cacheable {
		if ids, ok := t.cache.get(w); ok {
			return append(dst, ids...)
		}
	}
	syms := t.initialSymbols(w, b.syms[:0])
	syms = t.merges.merge(syms, &b.heap)
	b.syms = syms[:0]
	if cacheable {
		t.cache.put(w, syms)
	}
	return append(dst, syms...)
}

// initialSymbols is the word before any merge: one symbol per byte (byte-level), or one per character with
// characters outside the vocabulary spelled as <0xXX> byte tokens (byte fallback) or the unknown token.
func (t *Tokenizer) initialSymbols(w string, syms []uint32) []uint32 {
	if t.byteLevel {
		for i := 0; i < len(w); i++ {
			syms = append(syms, t.byteIDs[w[i]])
		}
		return syms
	}
	for i := 0; i < len(w); {
		_, size := utf8.DecodeRuneInString(w[i:])
		ch := w[i : i+size]
		if id, ok := t.vocab[ch]; ok {
			syms = append(syms, id)
		} else if t.byteFallback && t.allBytes(ch) {
			for k := 0; k < len(ch); k++ {
				syms = append(syms, t.byteIDs[ch[k]])
			}
		} else if t.hasUnk {
			syms = append(syms, t.unk)
		}
		i += size
	}
	return syms
}

func (t *Tokenizer) allBytes(ch string) bool {
	for k := 0; k < len(ch); k++ {
		if !t.hasByte[ch[k]] {
			return false
		}
	}
	return true
}

// String describes the tokenizer for logs.
func (t *Tokenizer) String() string {
	kind := "sentencepiece-bpe"
	if t.byteLevel {
		kind = "byte-level-bpe"
	}
	return kind + "(" + strconv.Itoa(len(t.tokens)) + " ids)"
}
