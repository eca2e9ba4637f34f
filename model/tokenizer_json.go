package model

import (
	"fmt"
	"strings"

	json "github.com/goccy/go-json"
)

// tokenizerFile is the subset of the HF tokenizers serialization (tokenizer.json) that this package understands.
type tokenizerFile struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    *componentJSON   `json:"normalizer"`
	PreTokenizer  *componentJSON   `json:"pre_tokenizer"`
	PostProcessor *componentJSON   `json:"post_processor"`
	Decoder       *componentJSON   `json:"decoder"`
	Model         modelJSON        `json:"model"`
}

type addedTokenJSON struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// componentJSON is any normalizer, pre-tokenizer, post-processor or decoder: a "type" plus its parameters.
// Sequences nest through the three list fields (their names differ per component kind).
type componentJSON struct {
	Type string `json:"type"`

	Normalizers   []*componentJSON `json:"normalizers"`
	PreTokenizers []*componentJSON `json:"pretokenizers"`
	Decoders      []*componentJSON `json:"decoders"`
	Processors    []*componentJSON `json:"processors"`

	Pattern  *patternJSON `json:"pattern"`
	Content  *string      `json:"content"`
	Prepend  string       `json:"prepend"`
	Behavior string       `json:"behavior"`
	Invert   bool         `json:"invert"`

	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       bool   `json:"use_regex"`
	Replacement    string `json:"replacement"`
	PrependScheme  string `json:"prepend_scheme"`
	Split          *bool  `json:"split"`

	Start int `json:"start"`
	Stop  int `json:"stop"`

	Single        []templatePieceJSON         `json:"single"`
	SpecialTokens map[string]specialTokenJSON `json:"special_tokens"`
}

type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

type templatePieceJSON struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type specialTokenJSON struct {
	IDs []uint32 `json:"ids"`
}

type modelJSON struct {
	Type                    string            `json:"type"`
	Vocab                   map[string]uint32 `json:"vocab"`
	Merges                  json.RawMessage   `json:"merges"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Dropout                 *float64          `json:"dropout"`
}

// parseMerges accepts both serializations: ["a b", ...] (older files) and [["a","b"], ...] (newer files, which
// allow spaces inside a token).
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err != nil {
		return nil, fmt.Errorf("merges: neither pairs nor strings: %w", err)
	}
	pairs = make([][2]string, len(strs))
	for i, s := range strs {
		a, b, ok := strings.Cut(s, " ")
		if !ok {
			return nil, fmt.Errorf("merges[%d]: %q has no space", i, s)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}
