package model

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedMatcher finds added tokens (special or not) in raw text before anything else happens to it, with HF's
// leftmost-longest rule: a byte trie walked from each position that can start a token. Llama-3 has 256 added
// tokens all starting with "<|", so trying candidates one by one would cost hundreds of comparisons per "<".
type addedMatcher struct {
	first [256]bool // bytes that start some token
	nodes []trieNode
	toks  []addedToken
	// starts lists the distinct first bytes when there are at most 4 of them (all of Qwen's, Llama-3's and
	// Llama-2's added tokens start with '<'): the scan then jumps with strings.IndexByte instead of testing every
	// byte, which matters for 100k-token prompts.
	starts []byte
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

type trieNode struct {
	edges []trieEdge
	tok   int32 // index into toks of the token ending here, or -1
}

type trieEdge struct {
	b    byte
	next int32
}

func (m *addedMatcher) child(n int32, b byte) int32 {
	for _, e := range m.nodes[n].edges {
		if e.b == b {
			return e.next
		}
	}
	return -1
}

func newAddedMatcher(toks []addedToken) *addedMatcher {
	m := &addedMatcher{toks: toks, nodes: []trieNode{{tok: -1}}}
	for i, t := range toks {
		if t.content == "" {
			continue
		}
		m.first[t.content[0]] = true
		n := int32(0)
		for k := 0; k < len(t.content); k++ {
			c := m.child(n, t.content[k])
			if c < 0 {
				c = int32(len(m.nodes))
				m.nodes = append(m.nodes, trieNode{tok: -1})
				m.nodes[n].edges = append(m.nodes[n].edges, trieEdge{b: t.content[k], next: c})
			}
			n = c
		}
		if m.nodes[n].tok < 0 { // the first of duplicate contents wins
			m.nodes[n].tok = int32(i)
		}
	}
	for b, ok := range m.first {
		if ok {
			m.starts = append(m.starts, byte(b))
		}
	}
	if len(m.starts) > 4 {
		m.starts = nil
	}
	return m
}

// match returns the index of the longest added token at s[i:], or -1.
func (m *addedMatcher) match(s string, i int) int {
	var found [8]int32 // tokens ending along the path, shortest first
	nf := 0
	n := int32(0)
	for j := i; j < len(s); j++ {
		if n = m.child(n, s[j]); n < 0 {
			break
		}
		if k := m.nodes[n].tok; k >= 0 {
			if nf == len(found) {
				copy(found[:], found[1:])
				nf--
			}
			found[nf] = k
			nf++
		}
	}
	for f := nf - 1; f >= 0; f-- {
		k := found[f]
		if m.toks[k].single && !singleWordOK(s, i, i+len(m.toks[k].content)) {
			continue
		}
		return int(k)
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
		if m.starts != nil {
			next := m.nextStart(s, i)
			if next < 0 {
				break
			}
			i = next
		} else if !m.first[s[i]] {
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

// nextStart returns the first index >= i holding a possible first byte, or -1.
func (m *addedMatcher) nextStart(s string, i int) int {
	best := -1
	for _, b := range m.starts {
		if k := strings.IndexByte(s[i:], b); k >= 0 && (best < 0 || i+k < best) {
			best = i + k
		}
	}
	return best
}

func isSpaceByte(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
