package model

import "unicode/utf8"

// Byte-level BPE (GPT-2 lineage) stores every byte as a printable rune so that vocabularies are valid text:
// the printable Latin-1 bytes map to themselves and the other 68 bytes to U+0100 onwards, in byte order.
// This package works on raw bytes internally and converts only when loading the vocabulary.

var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelDecode turns a vocabulary string back into the bytes it stands for. ok is false when a rune is outside
// the 256-rune alphabet (such entries cannot be produced by byte-level pre-tokenization).
func byteLevelDecode(s string) (out []byte, ok bool) {
	out = make([]byte, 0, len(s))
	for _, r := range s {
		b, found := runeToByte[r]
		if !found {
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}

// byteLevelEncode is the inverse of byteLevelDecode (used by Tokenizer.Token for display).
func byteLevelEncode(b []byte) string {
	out := make([]byte, 0, len(b)*2)
	for _, c := range b {
		out = utf8.AppendRune(out, byteToRune[c])
	}
	return string(out)
}
