package model

import (
	"fmt"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// A preTokenizer cuts normalized text into words; BPE never merges across a word boundary. It appends the end
// offset of every word to ends (the words tile s: each starts where the previous one ended).
type preTokenizer interface {
	split(s string, ends []int) []int
}

// The split patterns with a hand-written fast path. They are compared with the pattern text of tokenizer.json
// exactly; anything else goes to the general regex engine.
const (
	// Qwen2/2.5/3: one digit per word.
	patternQwen = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Llama-3 and the GPT-4 (cl100k) family: up to three digits per word.
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// GPT-2's ByteLevel(use_regex=true) pattern.
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// Character classes of the split patterns. \s is the Unicode White_Space property (as in Oniguruma and as the
// reference JS port rewrites it), so U+0085 and U+00A0 are spaces and U+200B and U+FEFF are not.
const (
	clsOther uint8 = iota // neither letter, number nor white space (punctuation, symbols, emoji, invalid bytes)
	clsLetter
	clsNumber
	clsSpace   // white space other than \r and \n
	clsNewline // \r or \n
)

var (
	bmpClassOnce sync.Once
	bmpClass     []uint8 // class of every rune below 0x10000
)

func runeClass(r rune) uint8 {
	switch {
	case r == '\r' || r == '\n':
		return clsNewline
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.Is(unicode.White_Space, r):
		return clsSpace
	}
	return clsOther
}

func initClasses() {
	bmpClassOnce.Do(func() {
		t := make([]uint8, 0x10000)
		for r := range rune(0x10000) {
			t[r] = runeClass(r)
		}
		bmpClass = t
	})
}

// classAt returns the class and byte width of the character at s[i]. An invalid byte is a one-byte clsOther
// character, so arbitrary bytes split deterministically and round-trip through byte-level BPE.
func classAt(s string, i int) (uint8, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return bmpClass[c], 1
	}
	// Two- and three-byte sequences (Latin, Cyrillic, Arabic, CJK, Hangul) decoded inline: this is the hot path
	// of non-English text, and utf8.DecodeRuneInString's multi-byte path is not inlined.
	if c >= 0xC2 && c < 0xE0 && i+1 < len(s) {
		if c1 := s[i+1]; c1&0xC0 == 0x80 {
			return bmpClass[rune(c&0x1F)<<6|rune(c1&0x3F)], 2
		}
	} else if c >= 0xE0 && c < 0xF0 && i+2 < len(s) {
		c1, c2 := s[i+1], s[i+2]
		lo, hi := byte(0x80), byte(0xBF)
		if c == 0xE0 {
			lo = 0xA0 // no overlong forms
		} else if c == 0xED {
			hi = 0x9F // no surrogates
		}
		if c1 >= lo && c1 <= hi && c2&0xC0 == 0x80 {
			return bmpClass[rune(c&0x0F)<<12|rune(c1&0x3F)<<6|rune(c2&0x3F)], 3
		}
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && size == 1 {
		return clsOther, 1
	}
	if r < 0x10000 {
		return bmpClass[r], size
	}
	return runeClass(r), size
}

// gpt4Splitter is the hand-written form of patternQwen (maxDigits 1) and patternLlama3 (maxDigits 3). Each step
// tries the pattern's alternatives in order at position i, with the same greedy and backtracking outcome as the
// regex:
//
//  1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
//  2. [^\r\n\p{L}\p{N}]?\p{L}+
//  3. \p{N}{1,maxDigits}
//  4. ' '?[^\s\p{L}\p{N}]+[\r\n]*
//  5. \s*[\r\n]+        -> up to and including the last \r or \n of the white-space run
//  6. \s+(?!\S)         -> the run minus its last character, unless the run ends the text
//  7. \s+
type gpt4Splitter struct{ maxDigits int }

func (p gpt4Splitter) split(s string, ends []int) []int {
	n := len(s)
	i := 0
	for i < n {
		c, size := classAt(s, i)
		j := i + size
		switch {
		case s[i] == '\'' && contraction(s, j) > 0:
			j += contraction(s, j)
		case c == clsLetter:
			j = skipClass(s, j, clsLetter)
		case c != clsNewline && c != clsNumber && j < n && classIs(s, j, clsLetter):
			j = skipClass(s, j, clsLetter)
		case c == clsNumber:
			for k := 1; k < p.maxDigits && j < n; k++ {
				c2, sz := classAt(s, j)
				if c2 != clsNumber {
					break
				}
				j += sz
			}
		case c == clsOther || (s[i] == ' ' && j < n && classIs(s, j, clsOther)):
			j = skipClass(s, j, clsOther)
			for j < n && (s[j] == '\r' || s[j] == '\n') {
				j++
			}
		default: // white space: alternatives 5, 6, 7
			lastNL, lastStart := -1, i
			if c == clsNewline {
				lastNL = i
			}
			for j < n {
				c2, sz := classAt(s, j)
				if c2 != clsSpace && c2 != clsNewline {
					break
				}
				if c2 == clsNewline {
					lastNL = j
				}
				lastStart = j
				j += sz
			}
			switch {
			case lastNL >= 0:
				j = lastNL + 1
			case j == n:
			case lastStart > i:
				j = lastStart
			}
		}
		ends = append(ends, j)
		i = j
	}
	return ends
}

// gpt2Splitter is the hand-written form of patternGPT2.
type gpt2Splitter struct{}

func (gpt2Splitter) split(s string, ends []int) []int {
	n := len(s)
	i := 0
	for i < n {
		c, size := classAt(s, i)
		j := i + size
		if s[i] == ' ' && j < n {
			c2, _ := classAt(s, j)
			if c2 == clsLetter || c2 == clsNumber || c2 == clsOther {
				c = c2
				_, size = classAt(s, j)
				j += size
			}
		}
		switch {
		case s[i] == '\'' && contractionExact(s, j) > 0:
			j += contractionExact(s, j)
		case c == clsLetter || c == clsNumber || c == clsOther:
			j = skipClass(s, j, c)
		default:
			lastStart := i
			for j < n {
				c2, sz := classAt(s, j)
				if c2 != clsSpace && c2 != clsNewline {
					break
				}
				lastStart = j
				j += sz
			}
			if j < n && lastStart > i {
				j = lastStart
			}
		}
		ends = append(ends, j)
		i = j
	}
	return ends
}

func classIs(s string, i int, want uint8) bool {
	c, _ := classAt(s, i)
	return c == want
}

func skipClass(s string, j int, want uint8) int {
	for j < len(s) {
		c, sz := classAt(s, j)
		if c != want {
			break
		}
		j += sz
	}
	return j
}

// contraction returns the length of a case-insensitive s|t|re|ve|m|ll|d at s[j:] (after an apostrophe), or 0.
func contraction(s string, j int) int {
	if j >= len(s) {
		return 0
	}
	switch s[j] | 0x20 {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if j+1 < len(s) && s[j+1]|0x20 == 'e' {
			return 2
		}
	case 'l':
		if j+1 < len(s) && s[j+1]|0x20 == 'l' {
			return 2
		}
	}
	return 0
}

// contractionExact is contraction without case folding (GPT-2's pattern has no (?i)).
func contractionExact(s string, j int) int {
	if j >= len(s) {
		return 0
	}
	switch s[j] {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if j+1 < len(s) && s[j+1] == 'e' {
			return 2
		}
	case 'l':
		if j+1 < len(s) && s[j+1] == 'l' {
			return 2
		}
	}
	return 0
}

// regexSplitter serves split patterns without a fast path, with HF's "Isolated" behavior: matches and the gaps
// between them are both words. It is exact for .NET-compatible patterns but slow (tens of MB/s at best).
type regexSplitter struct {
	re *regexp2.Regexp
}

func newRegexSplitter(pattern string) (*regexSplitter, error) {
	re, err := regexp2.Compile(pattern, regexp2.Unicode)
	if err != nil {
		return nil, fmt.Errorf("model: split pattern %q: %w", pattern, err)
	}
	return &regexSplitter{re: re}, nil
}

func (p *regexSplitter) split(s string, ends []int) []int {
	if !utf8.ValidString(s) {
		// regexp2 works on runes; give invalid bytes no chance to shift offsets.
		return gpt4Splitter{maxDigits: 1}.split(s, ends)
	}
	runes := []rune(s)
	offs := make([]int, len(runes)+1)
	o := 0
	for k, r := range runes {
		offs[k] = o
		o += utf8.RuneLen(r)
	}
	offs[len(runes)] = o
	last := 0
	m, _ := p.re.FindRunesMatch(runes)
	for m != nil {
		start, end := offs[m.RuneIndex], offs[m.RuneIndex+m.RuneLength]
		if start > last {
			ends = append(ends, start)
		}
		if end > start {
			ends = append(ends, end)
			last = end
		}
		m, _ = p.re.FindNextMatch(m)
	}
	if last < len(s) {
		ends = append(ends, len(s))
	}
	return ends
}

// wholeSplitter makes the whole text one word (no pre-tokenizer, as in SentencePiece-style BPE).
type wholeSplitter struct{}

func (wholeSplitter) split(s string, ends []int) []int {
	if len(s) > 0 {
		ends = append(ends, len(s))
	}
	return ends
}

// sequenceSplitter applies splitters one after the other, each to the words of the previous one.
type sequenceSplitter []preTokenizer

func (q sequenceSplitter) split(s string, ends []int) []int {
	cur := []int{len(s)}
	if len(s) == 0 {
		cur = cur[:0]
	}
	for _, p := range q {
		var next []int
		start := 0
		for _, e := range cur {
			sub := p.split(s[start:e], nil)
			for _, x := range sub {
				next = append(next, start+x)
			}
			start = e
		}
		cur = next
	}
	return append(ends, cur...)
}

// metaspaceSplitter is Metaspace(split=true): spaces become the replacement rune (done by the caller's
// normalization step) and each word starts at a replacement rune.
type metaspaceSplitter struct{ repl string }

func (p metaspaceSplitter) split(s string, ends []int) []int {
	for i := 1; i < len(s); i++ {
		if len(s)-i >= len(p.repl) && s[i:i+len(p.repl)] == p.repl {
			ends = append(ends, i)
			i += len(p.repl) - 1
		}
	}
	if len(s) > 0 {
		ends = append(ends, len(s))
	}
	return ends
}

// spaceWordSplitter cuts SentencePiece-style text (spaces already "▁") before every "▁" that follows another
// character than "▁". Such a model has no pre-tokenizer, so BPE in principle runs over the whole text; but when
// no token and no merge rule joins a character to a following "▁" (spaceBoundariesHold), no merge can cross
// these cuts, and BPE per word gives the same ids while letting the word cache work. Llama-2 and Mistral
// vocabularies have this property.
type spaceWordSplitter struct{}

const metaspaceRune = "\u2581"

func (spaceWordSplitter) split(s string, ends []int) []int {
	for i := 1; i+len(metaspaceRune) <= len(s); i++ {
		if s[i] == metaspaceRune[0] && s[i:i+len(metaspaceRune)] == metaspaceRune && !strings.HasSuffix(s[:i], metaspaceRune) {
			ends = append(ends, i)
			i += len(metaspaceRune) - 1
		}
	}
	if len(s) > 0 {
		ends = append(ends, len(s))
	}
	return ends
}

// spaceBoundariesHold reports whether no vocabulary token and no merge result contains a character other than
// "▁" followed by "▁" (see spaceWordSplitter).
func spaceBoundariesHold(f *tokenizerFile) bool {
	joins := func(tok string) bool {
		for i := 1; i < len(tok); i++ {
			if strings.HasPrefix(tok[i:], metaspaceRune) && !strings.HasSuffix(tok[:i], metaspaceRune) {
				return true
			}
		}
		return false
	}
	for tok := range f.Model.Vocab {
		if joins(tok) {
			return false
		}
	}
	pairs, err := parseMerges(f.Model.Merges)
	if err != nil {
		return false
	}
	for _, p := range pairs {
		if joins(p[0] + p[1]) {
			return false
		}
	}
	return true
}
