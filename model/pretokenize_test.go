package model

import (
	"slices"
	"testing"
	"unicode/utf8"
)

// TestSplitterMatchesRegex: the hand-written splitters cut the corpus exactly where the general regex engine does
// with the same pattern (the regex path serves unknown patterns, so the two must agree where both apply).
func TestSplitterMatchesRegex(t *testing.T) {
	initClasses()
	corpus := readCorpus(t)
	tests := []struct {
		name    string
		pattern string
		fast    preTokenizer
	}{
		{"qwen", patternQwen, gpt4Splitter{maxDigits: 1}},
		{"llama3", patternLlama3, gpt4Splitter{maxDigits: 3}},
		{"gpt2", patternGPT2, gpt2Splitter{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			slow, err := newRegexSplitter(tc.pattern)
			if err != nil {
				t.Fatal(err)
			}
			bad := 0
			for _, s := range corpus {
				got, want := tc.fast.split(s, nil), slow.split(s, nil)
				if !slices.Equal(got, want) {
					bad++
					if bad <= 3 {
						t.Errorf("%q:\n fast  %v\n regex %v", s, words(s, got), words(s, want))
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d strings split differently", bad, len(corpus))
			}
		})
	}
}

func words(s string, ends []int) []string {
	var out []string
	start := 0
	for _, e := range ends {
		out = append(out, s[start:e])
		start = e
	}
	return out
}

func TestSplitterEdges(t *testing.T) {
	initClasses()
	tests := []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"it's THEY'RE", []string{"it", "'s", " THEY", "'RE"}},
		{"a  b", []string{"a", " ", " b"}},
		{"a  \n\n b", []string{"a", "  \n\n", " b"}},
		{"x   ", []string{"x", "   "}},
		{"12345", []string{"1", "2", "3", "4", "5"}},
		{"!!!\n\nx", []string{"!!!\n\n", "x"}},
		{" ?!x", []string{" ?!", "x"}},
		{"\u00a0x\u3000\u3000y", []string{"\u00a0x", "\u3000", "\u3000y"}},
		{"a\xffb", []string{"a", "\xffb"}},
	}
	for _, tc := range tests {
		if got := words(tc.in, gpt4Splitter{maxDigits: 1}.split(tc.in, nil)); !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestClassAtExhaustive compares classAt's inline UTF-8 decoding with the standard decoder on every one-, two- and
// three-byte prefix (valid or not).
func TestClassAtExhaustive(t *testing.T) {
	initClasses()
	ref := func(s string) (uint8, int) {
		r, size := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && size == 1 {
			return clsOther, 1
		}
		return runeClass(r), size
	}
	buf := make([]byte, 3)
	for a := 0; a < 256; a++ {
		for b := 0; b < 256; b++ {
			for c := 0; c < 256; c += 1 + 62*boolInt(a < 0xE0) { // third byte matters only for 3-byte leads
				buf[0], buf[1], buf[2] = byte(a), byte(b), byte(c)
				for _, n := range []int{1, 2, 3} {
					s := string(buf[:n])
					gc, gs := classAt(s, 0)
					wc, ws := ref(s)
					if gc != wc || gs != ws {
						t.Fatalf("% x: got (%d,%d), want (%d,%d)", s, gc, gs, wc, ws)
					}
				}
			}
		}
	}
}
