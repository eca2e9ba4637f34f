package model

import (
	"fmt"
	"strings"
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

// normalizeForm skips the Unicode tables for text that is already in the form (ASCII always is), which is nearly
// all text a router sees.
func normalizeForm(f norm.Form) normalizer {
	return func(s string) string {
		i := 0
		for i < len(s) && s[i] < utf8.RuneSelf {
			i++
		}
		if i == len(s) {
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
