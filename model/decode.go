package model

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// decoder turns token pieces back into text. Byte-level tokenizers need no steps (pieces are raw bytes already);
// SentencePiece-style ones replace "▁", fuse byte tokens and strip the prepended space.
type decoder []decodeStep

type decodeStep struct {
	kind        string // "replace", "bytefallback", "fuse", "strip", "metaspace"
	from, to    string
	start, stop int
}

func buildDecoder(c *componentJSON) (decoder, error) {
	if c == nil {
		return nil, nil
	}
	switch c.Type {
	case "Sequence":
		var d decoder
		for _, sub := range c.Decoders {
			s, err := buildDecoder(sub)
			if err != nil {
				return nil, err
			}
			d = append(d, s...)
		}
		return d, nil
	case "ByteLevel":
		return nil, nil // pieces are bytes already
	case "Fuse":
		return decoder{{kind: "fuse"}}, nil
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil || c.Content == nil {
			return nil, fmt.Errorf("decoder Replace: only string patterns are supported")
		}
		return decoder{{kind: "replace", from: *c.Pattern.String, to: *c.Content}}, nil
	case "ByteFallback":
		return decoder{{kind: "bytefallback"}}, nil
	case "Strip":
		return decoder{{kind: "strip", from: *orEmpty(c.Content), start: c.Start, stop: c.Stop}}, nil
	case "Metaspace":
		repl := c.Replacement
		if repl == "" {
			repl = "\u2581"
		}
		return decoder{{kind: "metaspace", from: repl, start: boolInt(c.PrependScheme != "never")}}, nil
	}
	return nil, fmt.Errorf("unsupported decoder %q", c.Type)
}

func orEmpty(s *string) *string {
	if s == nil {
		e := ""
		return &e
	}
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// DecodeOptions select what Decode keeps.
type DecodeOptions struct {
	// SkipSpecial drops special added tokens (<|im_start|>, <s>, ...). Default false: keep them, so that a decoded
	// chat prompt shows its structure.
	SkipSpecial bool
}

// Decode returns the text of ids. For byte-level tokenizers the result holds exactly the bytes the ids stand for,
// so a slice of ids that cuts a character in two gives invalid UTF-8 rather than replacement characters; unknown
// ids are skipped.
func (t *Tokenizer) Decode(ids []uint32, opts DecodeOptions) string {
	if len(t.decoder) == 0 {
		var sb strings.Builder
		for _, id := range ids {
			if int(id) >= len(t.tokens) || (opts.SkipSpecial && t.special[id]) {
				continue
			}
			sb.WriteString(t.tokens[id])
		}
		return sb.String()
	}
	pieces := make([]string, 0, len(ids))
	for _, id := range ids {
		if int(id) >= len(t.tokens) || (opts.SkipSpecial && t.special[id]) {
			continue
		}
		pieces = append(pieces, t.tokens[id])
	}
	for _, st := range t.decoder {
		switch st.kind {
		case "replace":
			for i, p := range pieces {
				pieces[i] = strings.ReplaceAll(p, st.from, st.to)
			}
		case "bytefallback":
			pieces = byteFallbackPieces(pieces)
		case "fuse":
			pieces = []string{strings.Join(pieces, "")}
		case "strip":
			// Per piece, as HF does (after a Fuse there is one piece: the whole text).
			for i, p := range pieces {
				for k := 0; k < st.start && st.from != "" && strings.HasPrefix(p, st.from); k++ {
					p = p[len(st.from):]
				}
				for k := 0; k < st.stop && st.from != "" && strings.HasSuffix(p, st.from); k++ {
					p = p[:len(p)-len(st.from)]
				}
				pieces[i] = p
			}
		case "metaspace":
			for i, p := range pieces {
				p = strings.ReplaceAll(p, st.from, " ")
				if i == 0 && st.start == 1 {
					p = strings.TrimPrefix(p, " ")
				}
				pieces[i] = p
			}
		}
	}
	return strings.Join(pieces, "")
}

// byteFallbackPieces turns runs of <0xXX> pieces into the text they spell, or into one U+FFFD per byte when the
// run is not valid UTF-8 (HF's rule).
func byteFallbackPieces(pieces []string) []string {
	out := pieces[:0]
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			out = append(out, strings.Repeat("\uFFFD", len(run)))
		}
		run = run[:0]
	}
	for _, p := range pieces {
		if b, ok := parseByteToken(p); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, p)
	}
	flush()
	return out
}

func parseByteToken(p string) (byte, bool) {
	if len(p) != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(p[3])
	lo, ok2 := hexVal(p[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
