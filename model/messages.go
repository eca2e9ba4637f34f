package model

import (
	"bytes"
	"errors"
	"fmt"

	json "github.com/goccy/go-json"
	jsonv2 "github.com/goccy/go-json/v2"
)

// exactNames decodes as encoding/json does except that object member names match struct fields only
// exactly, as OpenAI's and vLLM's parsers read them: "Image_URL" is not "image_url". A case-folded
// match would let kvroute see a part the worker ignores, or the reverse.
var exactNames = []jsonv2.Options{json.DefaultOptionsV1(), jsonv2.MatchCaseInsensitiveNames(false)}

// UnmarshalExact decodes b into v with exact (case-sensitive) member names.
func UnmarshalExact(b []byte, v any) error { return jsonv2.Unmarshal(b, v, exactNames...) }

// Message is one OpenAI chat message, as the frontend decodes it from a request body.
type Message struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
	// Name is the optional participant name.
	Name string `json:"name,omitempty"`
	// ToolCalls are an assistant's calls; their arguments are a JSON string as in the OpenAI API.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID ties a role "tool" message to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// ReasoningContent is an assistant's thinking, for templates that render it (Qwen3's <think>).
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// Content is a message's content: a plain string, or a list of parts (text, image_url, video_url, ...).
// JSON null decodes to the empty string form with Null set.
type Content struct {
	Text  string
	Parts []ContentPart
	// IsParts tells the list form from the string form (an empty list is not an empty string to a template).
	IsParts bool
	Null    bool
}

// ContentPart is one element of a list content.
type ContentPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *MediaURL `json:"image_url,omitempty"`
	VideoURL *MediaURL `json:"video_url,omitempty"`
}

// MediaURL is the {url, detail} object of image_url / video_url parts; the URL may be a data: URI.
type MediaURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

// ToolCall is one function call of an assistant message.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its arguments as JSON text.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// TextContent is the string form of Content.
func TextContent(s string) Content { return Content{Text: s} }

// PartsContent is the list form of Content.
func PartsContent(parts ...ContentPart) Content { return Content{Parts: parts, IsParts: true} }

// UnmarshalJSON accepts a string, a list of parts or null.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*c = Content{Null: true}
		return nil
	case b[0] == '"':
		*c = Content{}
		return json.Unmarshal(b, &c.Text)
	case b[0] == '[':
		*c = Content{IsParts: true}
		return UnmarshalExact(b, &c.Parts)
	}
	return errors.New("model: message content must be a string, a list of parts or null")
}

// MarshalJSON writes the form the content was given in.
func (c Content) MarshalJSON() ([]byte, error) {
	switch {
	case c.IsParts:
		if c.Parts == nil {
			return []byte("[]"), nil
		}
		return json.Marshal(c.Parts)
	case c.Null:
		return []byte("null"), nil
	}
	return json.Marshal(c.Text)
}

// ParseMessages decodes an OpenAI messages array.
func ParseMessages(data []byte) ([]Message, error) {
	var msgs []Message
	if err := UnmarshalExact(data, &msgs); err != nil {
		return nil, fmt.Errorf("model: messages: %w", err)
	}
	return msgs, nil
}
