package openai

import "github.com/kvroute/kvroute/workers/oaiwire"

// The scanner and the usage object live in workers/oaiwire, below the worker client that also reads them;
// these names keep this package the one place the frontend reads OpenAI shapes from.

// Usage is the usage object of a response or of the last stream chunk.
type Usage = oaiwire.Usage

// PromptTokensDetails carries the worker's prefix-cache hit (usage.prompt_tokens_details).
type PromptTokensDetails = oaiwire.PromptTokensDetails

// ParseUsage reads the top-level "usage" of a response body or stream chunk (oaiwire.ParseUsage).
func ParseUsage(body []byte) (Usage, bool, error) { return oaiwire.ParseUsage(body) }

// TopLevelField returns the raw value of key in the JSON object b (no copy), or nil.
func TopLevelField(b []byte, key string) []byte { return oaiwire.TopLevelField(b, key) }

// SetField returns a copy of the JSON object b with key set to the raw JSON value (oaiwire.SetField).
func SetField(b []byte, key string, value []byte) ([]byte, error) {
	return oaiwire.SetField(b, key, value)
}

// DeleteField returns a copy of the JSON object b without key (oaiwire.DeleteField).
func DeleteField(b []byte, key string) ([]byte, error) { return oaiwire.DeleteField(b, key) }
