package oaiwire

import (
	"bytes"
	"fmt"

	json "github.com/goccy/go-json"
)

// Usage is the usage object of a response or of the last stream chunk.
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// PromptTokensDetails carries the worker's prefix-cache hit: the router compares CachedTokens with its
// predicted overlap.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// CachedTokens is usage.prompt_tokens_details.cached_tokens, or 0 when the worker does not report it.
func (u *Usage) CachedTokens() int {
	if u == nil || u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// ParseUsage reads the top-level "usage" of a response body or stream chunk without decoding the rest.
// ok is false when the member is absent or null.
func ParseUsage(body []byte) (u Usage, ok bool, err error) {
	raw := TopLevelField(body, "usage")
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return Usage{}, false, nil
	}
	if err := json.Unmarshal(raw, &u); err != nil {
		return Usage{}, false, err
	}
	if u.PromptTokens < 0 || u.CompletionTokens < 0 || u.TotalTokens < 0 || u.CachedTokens() < 0 {
		// The counts feed the router's load and cache-hit accounting, which never go negative.
		return Usage{}, false, fmt.Errorf("oaiwire: negative token count in usage %s", raw)
	}
	return u, true, nil
}
