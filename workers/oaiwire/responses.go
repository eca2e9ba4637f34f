package oaiwire

import (
	"errors"
	"fmt"

	json "github.com/goccy/go-json"
)

// ErrResponses is the class of a /v1/responses body that cannot be served statelessly.
var ErrResponses = errors.New("responses")

// responsesBody is the part of an OpenAI Responses request that decides the prompt.
type responsesBody struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Stream             bool              `json:"stream"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	PreviousResponseID *string           `json:"previous_response_id"`
	CacheSalt          *string           `json:"cache_salt"`
	RequestID          *string           `json:"request_id"`
}

type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    string          `json:"output"`
}

type responsesPart struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	ImageURL json.RawMessage `json:"image_url"`
}

// ResponsesChat rewrites a Responses API body (vLLM's /v1/responses, stateless) as the chat completions
// body with the same prompt: instructions become the system message, a string input the user message,
// message items their messages (input_text / output_text parts as text, input_image as an image part),
// function_call items assistant tool calls and function_call_output items tool messages; tools move from
// the flat Responses shape to the chat shape. The chat body renders through the model's chat template
// exactly as the worker renders the Responses request, so both are tokenized, hashed and routed alike.
// previous_response_id needs server-side state and is refused.
func ResponsesChat(body []byte) ([]byte, error) {
	var r responsesBody
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: invalid JSON body: %v", ErrResponses, err)
	}
	if r.PreviousResponseID != nil && *r.PreviousResponseID != "" {
		return nil, fmt.Errorf("%w: previous_response_id needs stored responses; send the whole conversation as input", ErrResponses)
	}
	msgs, err := responsesMessages(&r)
	if err != nil {
		return nil, err
	}
	chat := map[string]any{"model": r.Model, "messages": msgs, "stream": r.Stream}
	if r.MaxOutputTokens != nil {
		chat["max_tokens"] = *r.MaxOutputTokens
	}
	if r.Temperature != nil {
		chat["temperature"] = *r.Temperature
	}
	if r.TopP != nil {
		chat["top_p"] = *r.TopP
	}
	if r.CacheSalt != nil {
		chat["cache_salt"] = *r.CacheSalt
	}
	if r.RequestID != nil {
		chat["request_id"] = *r.RequestID
	}
	if len(r.Tools) > 0 {
		tools, err := responsesTools(r.Tools)
		if err != nil {
			return nil, err
		}
		chat["tools"] = tools
	}
	if tc := trimSpace(r.ToolChoice); len(tc) > 0 && string(tc) != "null" {
		if tc[0] == '"' {
			chat["tool_choice"] = json.RawMessage(tc)
		} else {
			var named struct {
				Type string `json:"type"`
				Name string `json:"name"`
			}
			if err := json.Unmarshal(tc, &named); err != nil || named.Name == "" {
				return nil, fmt.Errorf("%w: tool_choice: want a string or {\"type\":\"function\",\"name\":...}", ErrResponses)
			}
			chat["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": named.Name}}
		}
	}
	return json.Marshal(chat)
}

// responsesMessages is the chat conversation of a Responses request: the instructions as a system
// message, then the input (one string: a user message; else a list of items, each a message).
func responsesMessages(r *responsesBody) ([]map[string]any, error) {
	var msgs []map[string]any
	if r.Instructions != nil && *r.Instructions != "" {
		msgs = append(msgs, map[string]any{"role": "system", "content": *r.Instructions})
	}
	in := trimSpace(r.Input)
	switch {
	case len(in) == 0 || string(in) == "null":
		return nil, fmt.Errorf("%w: input is required", ErrResponses)
	case in[0] == '"':
		var s string
		if err := json.Unmarshal(in, &s); err != nil {
			return nil, fmt.Errorf("%w: input: %v", ErrResponses, err)
		}
		msgs = append(msgs, map[string]any{"role": "user", "content": s})
	default:
		var items []responsesItem
		if err := json.Unmarshal(in, &items); err != nil {
			return nil, fmt.Errorf("%w: input: want a string or a list of items", ErrResponses)
		}
		for i, it := range items {
			m, err := itemMessage(it)
			if err != nil {
				return nil, fmt.Errorf("%w: input[%d]: %v", ErrResponses, i, err)
			}
			msgs = append(msgs, m)
		}
	}
	return msgs, nil
}

// responsesTools turns the Responses API's flat function tools ({"type":"function","name":...}) into
// Chat Completions' nested ones ({"type":"function","function":{"name":...}}).
func responsesTools(raw []json.RawMessage) ([]any, error) {
	tools := make([]any, len(raw))
	for i, t := range raw {
		var flat struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal(t, &flat); err != nil || flat.Type != "function" || flat.Name == "" {
			return nil, fmt.Errorf("%w: tools[%d]: want {\"type\":\"function\",\"name\":...}", ErrResponses, i)
		}
		fn := map[string]any{"name": flat.Name, "description": flat.Description}
		if len(flat.Parameters) > 0 {
			fn["parameters"] = flat.Parameters
		}
		tools[i] = map[string]any{"type": "function", "function": fn}
	}
	return tools, nil
}

// itemMessage is one input item as a chat message.
func itemMessage(it responsesItem) (map[string]any, error) {
	switch it.Type {
	case "", "message":
		if it.Role == "" {
			return nil, errors.New("message item without a role")
		}
		c := trimSpace(it.Content)
		if len(c) > 0 && c[0] == '"' {
			var s string
			if err := json.Unmarshal(c, &s); err != nil {
				return nil, err
			}
			return map[string]any{"role": it.Role, "content": s}, nil
		}
		var parts []responsesPart
		if err := json.Unmarshal(c, &parts); err != nil {
			return nil, errors.New("content: want a string or a list of parts")
		}
		out := make([]any, 0, len(parts))
		for j, p := range parts {
			switch p.Type {
			case "input_text", "output_text", "text":
				out = append(out, map[string]any{"type": "text", "text": p.Text})
			case "input_image":
				var url string
				if err := json.Unmarshal(p.ImageURL, &url); err != nil || url == "" {
					return nil, fmt.Errorf("content[%d]: input_image needs image_url (a URL string)", j)
				}
				out = append(out, map[string]any{"type": "image_url", "image_url": map[string]any{"url": url}})
			default:
				return nil, fmt.Errorf("content[%d]: unsupported part type %q", j, p.Type)
			}
		}
		return map[string]any{"role": it.Role, "content": out}, nil
	case "function_call":
		return map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": it.CallID, "type": "function", "function": map[string]any{"name": it.Name, "arguments": it.Arguments}}}}, nil
	case "function_call_output":
		return map[string]any{"role": "tool", "tool_call_id": it.CallID, "content": it.Output}, nil
	}
	return nil, fmt.Errorf("unsupported item type %q", it.Type)
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
