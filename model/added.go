package model

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedMatcher finds added tokens (special or not) in raw text before anything else happens to it, with HF's
// leftmost-longest rule. Added tokens are few (tens to hundreds) and start with few distinct bytes, so a 256-entry
// table of candidates per first byte, longest first, is as fast as an automaton for these files.
type addedMatcher struct {
	first [256][]int // indexes into toks, longest content first
	toks  []addedToken
}

type addedToken struct {
	content string
	id      uint32
	special bool
	lstrip  bool
	rstrip  bool
	single  bool
}

// addedPiece is a span of the input: an added token (id valid) or text to tokenize.
type addedPiece struct {
	start, end int
	id         uint32
	isAdded    bool
}

func newAddedMatcher(toks []addedToken) *addedMatcher {
	m := &addedMatcher{toks: toks}
	for i, t := range toks {
		if t.content == "" {
			continue
		}
		b := t.content[0]
		m.first[b] = append(m.first[b], i)
	}
	for b := range m.first {
		c := m.first[b]
		sort.SliceStable(c, func(x, y int) bool { return len(toks[c[x]].content) > len(toks[c[y]].content) })
	}
	return m
}

// match returns the index of the longest added token at s[i:], or -1.
func (m *addedMatcher) match(s string, i int) int {
	for _, k := range m.first[s[i]] {
		c := m.toks[k].content
		if strings.HasPrefix(s[i:], c) {
			if m.toks[k].single && !singleWordOK(s, i, i+len(c)) {
				continue
			}
			return k
		}
	}
	return -1
}

func singleWordOK(s string, start, end int) bool {
	isWord := func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) || r == '_' }
	if start > 0 {
		r, _ := utf8.DecodeLastRuneInString(s[:start])
		if isWord(r) {
			return false
		}
	}
	if end < len(s) {
		r, _ := utf8.DecodeRuneInString(s[end:])
		if isWord(r) {
			return false
		}
	}
	return true
}

// split appends the pieces of s to dst. Text pieces are never empty.
func (m *addedMatcher) split(s string, dst []addedPiece) []addedPiece {
	textStart := 0
	for i := 0; i < len(s); {
		if m.first[s[i]] == nil {
			i++
			continue
		}
		k := m.match(s, i)
		if k < 0 {
			i++
			continue
		}
		t := &m.toks[k]
		start, end := i, i+len(t.content)
		if t.lstrip {
			for start > textStart && isSpaceByte(s[start-1]) {
				start--
			}
		}
		if t.rstrip {
			for end < len(s) && isSpaceByte(s[end]) {
				end++
			}
		}
		if start > textStart {
			dst = append(dst, addedPiece{start: textStart, end: start})
		}
		dst = append(dst, addedPiece{start: start, end: end, id: t.id, isAdded: true})
		i, textStart = end, end
	}
	if textStart < len(s) {
		dst = append(dst, addedPiece{start: textStart, end: len(s)})
	}
	return dst
}

func isSpaceByte(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
