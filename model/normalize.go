package model

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// A normalizer rewrites a text piece before pre-tokenization. Offsets are not tracked: the router needs ids only.
type normalizer func(s string) string

func buildNormalizer(c *componentJSON) (normalizer, error) {
	if c == nil {
		return nil, nil
	}
	switch c.Type {
	case "Sequence":
		var steps []normalizer
		for _, sub := range c.Normalizers {
			n, err := buildNormalizer(sub)
			if err != nil {
				return nil, err
			}
			if n != nil {
				steps = append(steps, n)
			}
		}
		return func(s string) string {
			for _, n := range steps {
				s = n(s)
			}
			return s
		}, nil
	case "NFC":
		return normalizeForm(norm.NFC), nil
	case "NFD":
		return normalizeForm(norm.NFD), nil
	case "NFKC":
		return normalizeForm(norm.NFKC), nil
	case "NFKD":
		return normalizeForm(norm.NFKD), nil
	case "Lowercase":
		return strings.ToLower, nil
	case "Prepend":
		p := c.Prepend
		return func(s string) string {
			if s == "" {
				return s
			}
			return p + s
		}, nil
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil || c.Content == nil {
			return nil, fmt.Errorf("model: normalizer Replace: only string patterns are supported")
		}
		from, to := *c.Pattern.String, *c.Content
		return func(s string) string { return strings.ReplaceAll(s, from, to) }, nil
	case "Strip":
		return strings.TrimSpace, nil
	}
	return nil, fmt.Errorf("model: unsupported normalizer %q", c.Type)
}

// appendNFC appends NFC(s) to dst, normalizing only around characters that are not NFC-inert: an inert character
// never combines with what precedes it, so the text splits there without changing the result. Text with one
// decomposed accent in a 50 KB prompt costs one small normalization, not a copy through the Unicode tables.
func appendNFC(dst []byte, s string) []byte {
	last, prev := 0, 0 // last: start of the text not yet appended; prev: start of the previous character
	for i := 0; i < len(s); {
		size, inert := inertAt(s, i)
		if inert {
			prev = i
			i += size
			continue
		}
		// Not inert: normalize from the previous character (a starter it may compose with) through the next
		// inert one, which the piece ends with only where an inert character or the text's end follows it.
		// x/text passes an incomplete UTF-8 sequence at the end of its input through unchanged, where the
		// same bytes with more text after them are an invalid byte and a character that may change ("\xf7"
		// then U+0387 keeps U+0387 at the end, and becomes U+00B7 before a "0"): a piece never ends
		// right after the bytes it normalizes unless the text does.
		start := min(prev, i)
		j := i + size
		for j < len(s) {
			sz, inert := inertAt(s, j)
			j += sz
			if !inert {
				continue
			}
			if j == len(s) {
				break
			}
			if _, next := inertAt(s, j); next {
				break
			}
		}
		dst = append(dst, s[last:start]...)
		dst = norm.NFC.AppendString(dst, s[start:j])
		last, prev, i = j, j, j
	}
	return append(dst, s[last:]...)
}

// inertAt returns the size of the character at s[i] (1 for a byte that is not valid UTF-8) and whether it
// is NFC-inert.
func inertAt(s string, i int) (int, bool) {
	if s[i] < utf8.RuneSelf {
		return 1, true
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	return size, r < nfcTableEnd && !(r == utf8.RuneError && size == 1) && nfcInert[r>>6]&(1<<(r&63)) != 0
}

// isNFC reports whether s is certainly NFC already (false means "maybe not").
func isNFC(s string) bool {
	i := 0
	for i < len(s) && s[i] < utf8.RuneSelf {
		i++
	}
	if i == len(s) || nfcInertString(s[i:]) {
		return true
	}
	if i > 0 {
		i--
	}
	return norm.NFC.QuickSpanString(s[i:]) == len(s)-i
}

// normalizeForm skips the Unicode tables for text that is already in the form, which is nearly all text a router
// sees. For NFC the check is one table lookup per BMP character (nfcInert); other forms use x/text's quick check.
func normalizeForm(f norm.Form) normalizer {
	return func(s string) string {
		i := 0
		for i < len(s) && s[i] < utf8.RuneSelf {
			i++
		}
		if i == len(s) {
			return s
		}
		if f == norm.NFC && nfcInertString(s[i:]) {
			return s
		}
		if i > 0 {
			i-- // a combining mark composes with the character before it
		}
		if f.QuickSpanString(s[i:]) == len(s)-i {
			return s
		}
		return f.String(s)
	}
}

// nfcTableEnd covers the BMP and the supplementary planes with emoji and CJK extensions (24 KiB of bits).
const nfcTableEnd = 0x30000

var (
	nfcInertOnce sync.Once
	nfcInert     []uint64 // bit r set: rune r (< nfcTableEnd) is NFC-normal, has combining class 0, never composes backwards
)

func initNFCInert() {
	nfcInertOnce.Do(func() {
		t := make([]uint64, nfcTableEnd/64)
		var buf [4]byte
		for r := rune(0); r < nfcTableEnd; r++ {
			if r >= 0xD800 && r <= 0xDFFF {
				continue
			}
			n := utf8.EncodeRune(buf[:], r)
			p := norm.NFC.Properties(buf[:n])
			if p.CCC() == 0 && p.BoundaryBefore() && norm.NFC.IsNormal(buf[:n]) {
				t[r>>6] |= 1 << (r & 63)
			}
		}
		nfcInert = t
	})
}

// nfcInertString reports whether every character of s is inert for NFC, so that s is already normalized no matter
// what precedes it... as long as the character before s is a starter too, which the caller guarantees by passing a
// suffix that follows ASCII.
func nfcInertString(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r >= nfcTableEnd || (r == utf8.RuneError && size == 1) || nfcInert[r>>6]&(1<<(r&63)) == 0 {
			return false
		}
		i += size
	}
	return true
}
