package openai

import (
	"bytes"
	"strconv"

	json "github.com/goccy/go-json"

	"github.com/kvroute/kvroute/model"
)

// Limits bound what one request may ask for. The zero value of a field means its default.
type Limits struct {
	// MaxBodyBytes bounds the body (413). Default 32 MiB, the frontend server's own bound; it matters when
	// a caller feeds bodies from elsewhere.
	MaxBodyBytes int
	// MaxMessages bounds the chat messages (413). Default 10,000: far beyond real conversations, and it
	// caps template rendering work.
	MaxMessages int
	// MaxPromptTokens bounds a token-id prompt (413). Default 4 Mi, beyond any context window.
	MaxPromptTokens int
	// MaxStop bounds the stop strings (400). Default 16.
	MaxStop int
	// MaxTools bounds the tool definitions (400). Default 512.
	MaxTools int
	// MaxN is the largest n served (422 above it). Default 128: vLLM forks n sequences from one
	// prefill, and the router charges the prompt once and n decoding sequences; the bound keeps one
	// request from booking a worker's whole batch.
	MaxN int
}

// DefaultLimits returns the defaults documented on Limits.
func DefaultLimits() Limits {
	return Limits{MaxBodyBytes: 32 << 20, MaxMessages: 10_000, MaxPromptTokens: 4 << 20, MaxStop: 16, MaxTools: 512, MaxN: 128}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = d.MaxBodyBytes
	}
	if l.MaxMessages <= 0 {
		l.MaxMessages = d.MaxMessages
	}
	if l.MaxPromptTokens <= 0 {
		l.MaxPromptTokens = d.MaxPromptTokens
	}
	if l.MaxStop <= 0 {
		l.MaxStop = d.MaxStop
	}
	if l.MaxTools <= 0 {
		l.MaxTools = d.MaxTools
	}
	if l.MaxN <= 0 {
		l.MaxN = d.MaxN
	}
	return l
}

// Validate checks the values of a chat request. served lists the model names this frontend serves; an
// empty list accepts any name.
func (r *ChatRequest) Validate(lim Limits, served []string) error {
	lim = lim.withDefaults()
	if err := r.Common.validate(lim, served); err != nil {
		return err
	}
	if r.Messages == nil {
		return errorf(ErrBadRequest, "messages", "is required")
	}
	if len(r.Messages) == 0 {
		return errorf(ErrBadRequest, "messages", "must contain at least one message")
	}
	if len(r.Messages) > lim.MaxMessages {
		return errorf(ErrTooLarge, "messages", "%d messages exceed the limit of %d", len(r.Messages), lim.MaxMessages)
	}
	for i := range r.Messages {
		if err := validateMessage(&r.Messages[i], i); err != nil {
			return err
		}
	}
	for _, p := range r.Media {
		if p.HasUUID && p.UUID == "" {
			return errorf(ErrBadRequest, partParam(p.Message, p.Part)+".uuid", "must be a non-empty string")
		}
		if (p.Type == "image_url" || p.Type == "video_url") && p.URL == "" && !p.HasUUID {
			return errorf(ErrBadRequest, partParam(p.Message, p.Part)+"."+p.Type, "needs a url (or a uuid of cached media)")
		}
	}
	if r.MaxCompletionTokens != nil && *r.MaxCompletionTokens < 1 {
		return errorf(ErrBadRequest, "max_completion_tokens", "must be at least 1, got %d", *r.MaxCompletionTokens)
	}
	if r.TopLogprobs != nil {
		if *r.TopLogprobs < 0 || *r.TopLogprobs > 20 {
			return errorf(ErrBadRequest, "top_logprobs", "must be in [0, 20], got %d", *r.TopLogprobs)
		}
		if r.Logprobs == nil || !*r.Logprobs {
			return errorf(ErrBadRequest, "top_logprobs", "requires logprobs to be true")
		}
	}
	if len(r.Tools) > lim.MaxTools {
		return errorf(ErrBadRequest, "tools", "%d tools exceed the limit of %d", len(r.Tools), lim.MaxTools)
	}
	names := make(map[string]bool, len(r.Tools))
	for i, raw := range r.Tools {
		var t struct {
			Type     string `json:"type"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		param := "tools[" + strconv.Itoa(i) + "]"
		if err := json.Unmarshal(raw, &t); err != nil {
			return errorf(ErrBadRequest, param, "must be an object {\"type\":\"function\",\"function\":{...}}")
		}
		if t.Type != "function" {
			return errorf(ErrBadRequest, param+".type", "must be \"function\", got %q", t.Type)
		}
		if t.Function == nil || t.Function.Name == "" {
			return errorf(ErrBadRequest, param+".function.name", "is required")
		}
		names[t.Function.Name] = true
	}
	if err := validateToolChoice(r.ToolChoice, len(r.Tools) > 0, names); err != nil {
		return err
	}
	if rf := r.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text", "json_object":
		case "json_schema":
			if len(bytes.TrimSpace(rf.JSONSchema)) == 0 || string(bytes.TrimSpace(rf.JSONSchema)) == "null" {
				return errorf(ErrBadRequest, "response_format.json_schema", "is required when type is \"json_schema\"")
			}
		default:
			return errorf(ErrBadRequest, "response_format.type", "must be one of text, json_object, json_schema; got %q", rf.Type)
		}
	}
	if r.ContinueFinalMessage && r.AddGenerationPrompt != nil && *r.AddGenerationPrompt {
		return errorf(ErrBadRequest, "continue_final_message", "cannot be combined with add_generation_prompt=true")
	}
	return nil
}

// Validate checks the values of a completion request.
func (r *CompletionRequest) Validate(lim Limits, served []string) error {
	lim = lim.withDefaults()
	if err := r.Common.validate(lim, served); err != nil {
		return err
	}
	if len(bytes.TrimSpace(r.PromptEmbeds)) > 0 && string(bytes.TrimSpace(r.PromptEmbeds)) != "null" {
		return errorf(ErrUnprocessable, "prompt_embeds", "prompt embeddings cannot be routed by prefix; send token ids or text")
	}
	p := &r.Prompt
	if !p.Set {
		return errorf(ErrBadRequest, "prompt", "is required")
	}
	if p.Len() == 0 {
		return errorf(ErrBadRequest, "prompt", "must not be an empty list")
	}
	if p.Len() > 1 {
		return errorf(ErrUnprocessable, "prompt", "batched prompts (%d) are not supported; send one prompt per request", p.Len())
	}
	if p.IsTokens() {
		if len(p.Tokens()) == 0 {
			return errorf(ErrBadRequest, "prompt", "must not be an empty token list")
		}
		if len(p.Tokens()) > lim.MaxPromptTokens {
			return errorf(ErrTooLarge, "prompt", "%d tokens exceed the limit of %d", len(p.Tokens()), lim.MaxPromptTokens)
		}
	} else if p.Text() == "" {
		return errorf(ErrBadRequest, "prompt", "must not be empty")
	}
	if r.Logprobs != nil && (*r.Logprobs < 0 || *r.Logprobs > 20) {
		return errorf(ErrBadRequest, "logprobs", "must be in [0, 20], got %d", *r.Logprobs)
	}
	if r.BestOf != nil && *r.BestOf != 1 {
		if *r.BestOf < 1 {
			return errorf(ErrBadRequest, "best_of", "must be at least 1, got %d", *r.BestOf)
		}
		return errorf(ErrUnprocessable, "best_of", "best_of > 1 is not supported")
	}
	if r.Suffix != nil && *r.Suffix != "" {
		return errorf(ErrUnprocessable, "suffix", "is not supported")
	}
	return nil
}

// validate checks the shared fields, the model first: an unknown model is a 404 whatever else is wrong.
func (c *Common) validate(lim Limits, served []string) error {
	if len(c.Body) > lim.MaxBodyBytes {
		return errorf(ErrTooLarge, "", "request body of %d bytes exceeds the limit of %d", len(c.Body), lim.MaxBodyBytes)
	}
	if c.Model == "" {
		return errorf(ErrBadRequest, "model", "is required")
	}
	if len(served) > 0 && !contains(served, c.Model) {
		return errorf(ErrNotFound, "model", "the model %q does not exist; served: %v", c.Model, served)
	}
	if c.MaxTokens != nil && *c.MaxTokens < 1 {
		return errorf(ErrBadRequest, "max_tokens", "must be at least 1, got %d", *c.MaxTokens)
	}
	if c.StreamOptions != nil && !c.Stream {
		return errorf(ErrBadRequest, "stream_options", "is only allowed when stream is true")
	}
	if t := c.Temperature; t != nil && (*t < 0 || *t > 2) {
		return errorf(ErrBadRequest, "temperature", "must be in [0, 2], got %g", *t)
	}
	if p := c.TopP; p != nil && (*p <= 0 || *p > 1) {
		return errorf(ErrBadRequest, "top_p", "must be in (0, 1], got %g", *p)
	}
	if p := c.PresencePenalty; p != nil && (*p < -2 || *p > 2) {
		return errorf(ErrBadRequest, "presence_penalty", "must be in [-2, 2], got %g", *p)
	}
	if p := c.FrequencyPenalty; p != nil && (*p < -2 || *p > 2) {
		return errorf(ErrBadRequest, "frequency_penalty", "must be in [-2, 2], got %g", *p)
	}
	if c.N != nil {
		if *c.N < 1 {
			return errorf(ErrBadRequest, "n", "must be at least 1, got %d", *c.N)
		}
		if *c.N > lim.MaxN {
			return errorf(ErrUnprocessable, "n", "n=%d is not supported (at most %d)", *c.N, lim.MaxN)
		}
	}
	if c.UseBeamSearch {
		return errorf(ErrUnprocessable, "use_beam_search", "beam search is not supported")
	}
	if len(c.Stop.List) > lim.MaxStop {
		return errorf(ErrBadRequest, "stop", "%d stop strings exceed the limit of %d", len(c.Stop.List), lim.MaxStop)
	}
	if c.CacheSalt != nil && *c.CacheSalt == "" {
		return errorf(ErrBadRequest, "cache_salt", "must be a non-empty string")
	}
	if c.DataParallelRank != nil && *c.DataParallelRank < 0 {
		return errorf(ErrBadRequest, "data_parallel_rank", "must be non-negative, got %d", *c.DataParallelRank)
	}
	if c.NVExt != nil && c.NVExt.AgentHints != nil && c.NVExt.AgentHints.OSL != nil && *c.NVExt.AgentHints.OSL < 0 {
		return errorf(ErrBadRequest, "nvext.agent_hints.osl", "must be non-negative, got %d", *c.NVExt.AgentHints.OSL)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func msgParam(i int) string     { return "messages[" + strconv.Itoa(i) + "]" }
func partParam(i, j int) string { return msgParam(i) + ".content[" + strconv.Itoa(j) + "]" }

// validateMessage checks one message's role and content parts.
func validateMessage(m *model.Message, i int) error {
	switch m.Role {
	case "system", "developer", "user", "assistant", "tool", "function":
	case "":
		return errorf(ErrBadRequest, msgParam(i)+".role", "is required")
	default:
		return errorf(ErrBadRequest, msgParam(i)+".role", "unknown role %q; expected system, developer, user, assistant or tool", m.Role)
	}
	if m.Content.Null && m.Role != "assistant" {
		return errorf(ErrBadRequest, msgParam(i)+".content", "must not be null for role %q", m.Role)
	}
	for j, p := range m.Content.Parts {
		switch p.Type {
		case "text":
		case "image_url":
			if p.ImageURL == nil {
				// A uuid-only part is checked against Media by the caller.
				continue
			}
		case "video_url", "input_audio", "audio_url":
		case "refusal":
			if m.Role != "assistant" {
				return errorf(ErrBadRequest, partParam(i, j)+".type", "refusal parts are only allowed in assistant messages")
			}
		case "":
			return errorf(ErrBadRequest, partParam(i, j)+".type", "is required")
		default:
			return errorf(ErrBadRequest, partParam(i, j)+".type", "unsupported content part type %q; expected text, image_url, video_url, input_audio or audio_url", p.Type)
		}
	}
	return nil
}

// validateToolChoice checks tool_choice: "none" | "auto" | "required" | {"type":"function","function":{"name"}}.
func validateToolChoice(raw json.RawMessage, haveTools bool, names map[string]bool) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return errorf(ErrBadRequest, "tool_choice", "invalid string")
		}
		switch s {
		case "none", "auto":
			return nil
		case "required":
			if !haveTools {
				return errorf(ErrBadRequest, "tool_choice", "\"required\" needs tools")
			}
			return nil
		}
		return errorf(ErrBadRequest, "tool_choice", "must be none, auto, required or a function object; got %q", s)
	}
	var obj struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if raw[0] != '{' || json.Unmarshal(raw, &obj) != nil {
		return errorf(ErrBadRequest, "tool_choice", "must be a string or an object {\"type\":\"function\",\"function\":{\"name\":...}}")
	}
	if obj.Type != "function" || obj.Function.Name == "" {
		return errorf(ErrBadRequest, "tool_choice", "must name a function: {\"type\":\"function\",\"function\":{\"name\":...}}")
	}
	if !names[obj.Function.Name] {
		return errorf(ErrBadRequest, "tool_choice.function.name", "%q is not among the request's tools", obj.Function.Name)
	}
	return nil
}

// DecodeChat parses and validates a chat body: the request path's stage 1 in one call.
func DecodeChat(body []byte, lim Limits, served []string) (*ChatRequest, error) {
	lim = lim.withDefaults()
	if len(body) > lim.MaxBodyBytes {
		return nil, errorf(ErrTooLarge, "", "request body of %d bytes exceeds the limit of %d", len(body), lim.MaxBodyBytes)
	}
	r, err := ParseChat(body)
	if err != nil {
		return nil, err
	}
	if err := r.Validate(lim, served); err != nil {
		return nil, err
	}
	return r, nil
}

// DecodeCompletion parses and validates a completion body.
func DecodeCompletion(body []byte, lim Limits, served []string) (*CompletionRequest, error) {
	lim = lim.withDefaults()
	if len(body) > lim.MaxBodyBytes {
		return nil, errorf(ErrTooLarge, "", "request body of %d bytes exceeds the limit of %d", len(body), lim.MaxBodyBytes)
	}
	r, err := ParseCompletion(body)
	if err != nil {
		return nil, err
	}
	if err := r.Validate(lim, served); err != nil {
		return nil, err
	}
	return r, nil
}
