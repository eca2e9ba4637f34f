package openai

import (
	"bytes"
	"errors"
	"strconv"
	"strings"

	json "github.com/goccy/go-json"

	"github.com/kvroute/kvroute/model"
	"github.com/kvroute/kvroute/workers/oaiwire"
)

// ChatRequest is a POST /v1/chat/completions body. Fields the router does not read (vLLM's sampling
// extras, kv_transfer_params, vllm_xargs, ...) are not decoded: they stay in Body, which dispatch
// forwards as it came.
type ChatRequest struct {
	Common
	// Messages decode straight into the tokenizer's type, so the request path hands them to
	// model.EncodeChat without a copy.
	Messages            []model.Message `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	// Logprobs is a bool for chat (an int for completions).
	Logprobs            *bool             `json:"logprobs"`
	TopLogprobs         *int              `json:"top_logprobs"`
	Tools               []json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls   *bool             `json:"parallel_tool_calls"`
	ResponseFormat      *ResponseFormat   `json:"response_format"`
	ChatTemplate        string            `json:"chat_template"`
	ChatTemplateKwargs  map[string]any    `json:"chat_template_kwargs"`
	AddGenerationPrompt *bool             `json:"add_generation_prompt"`
	// ContinueFinalMessage renders the last (assistant) message open-ended instead of adding a prompt.
	ContinueFinalMessage bool `json:"continue_final_message"`
	// MMProcessorKwargs change vLLM's multimodal identifiers, so the router
	// needs to know they are set.
	MMProcessorKwargs json.RawMessage `json:"mm_processor_kwargs"`

	// Media lists the request's media content parts in document order (filled by ParseChat).
	Media []MediaPart `json:"-"`
}

// CompletionRequest is a POST /v1/completions body.
type CompletionRequest struct {
	Common
	Prompt Prompt `json:"prompt"`
	// Logprobs is an int for completions: the number of top tokens to return.
	Logprobs *int    `json:"logprobs"`
	Echo     bool    `json:"echo"`
	BestOf   *int    `json:"best_of"`
	Suffix   *string `json:"suffix"`
	// PromptEmbeds (base64 tensors) cannot be routed by tokens; their presence is rejected.
	PromptEmbeds json.RawMessage `json:"prompt_embeds"`
}

// Common holds the fields both endpoints share.
type Common struct {
	// Body is the request as received; Parse* keep it (without copying) so dispatch can forward the
	// original bytes. The caller must not modify it afterwards.
	Body []byte `json:"-"`

	Model            string         `json:"model"`
	MaxTokens        *int           `json:"max_tokens"`
	Stream           bool           `json:"stream"`
	StreamOptions    *StreamOptions `json:"stream_options"`
	Temperature      *float64       `json:"temperature"`
	TopP             *float64       `json:"top_p"`
	N                *int           `json:"n"`
	Stop             Stop           `json:"stop"`
	Seed             *int64         `json:"seed"`
	User             string         `json:"user"`
	PresencePenalty  *float64       `json:"presence_penalty"`
	FrequencyPenalty *float64       `json:"frequency_penalty"`
	UseBeamSearch    bool           `json:"use_beam_search"`
	// CacheSalt is vLLM's per-request prefix-cache namespace: it changes the worker's block hashes.
	CacheSalt *string `json:"cache_salt"`
	// Priority is vLLM's scheduling priority (lower runs first on the worker).
	Priority  *int   `json:"priority"`
	RequestID string `json:"request_id"`
	// DataParallelRank pins the request to one dp rank of the worker (vLLM extra).
	DataParallelRank *int   `json:"data_parallel_rank"`
	NVExt            *NVExt `json:"nvext"`
}

// StreamOptions is the stream_options object.
type StreamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// NVExt is Dynamo's request extension object.
type NVExt struct {
	// ReturnRouting asks for the routing decision (chosen worker, per-candidate overlap and cost) in the
	// response body's "nvext".
	ReturnRouting bool        `json:"return_routing"`
	AgentHints    *AgentHints `json:"agent_hints"`
	// CacheSalt namespaces the router's block hashes.
	CacheSalt string `json:"cache_salt"`
	// BackendInstanceID pins the request to one worker, bypassing the cost function.
	BackendInstanceID *uint64 `json:"backend_instance_id"`
}

// AgentHints are a caller's scheduling hints.
type AgentHints struct {
	// Priority moves the request earlier in the router's queue, in seconds.
	Priority *float64 `json:"priority"`
	// LatencySensitivity is the deprecated spelling of Priority.
	LatencySensitivity *float64 `json:"latency_sensitivity"`
	// OSL is the expected output length in tokens.
	OSL *int `json:"osl"`
}

// ResponseFormat is the response_format object.
type ResponseFormat struct {
	Type       string          `json:"type"`
	JSONSchema json.RawMessage `json:"json_schema"`
}

// MediaPart is one media content part of a chat request, located in the body so SetMediaUUIDs can
// rewrite it in place.
type MediaPart struct {
	// Message and Part index messages[Message].content[Part].
	Message, Part int
	// Type is the part type: image_url, video_url, input_audio or audio_url.
	Type string
	// URL is the media URL (possibly a data: URI); empty for input_audio or a uuid-only part.
	URL string
	// UUID is the part's "uuid" as sent, or "".
	UUID    string
	HasUUID bool
	// end is the offset of the part object's closing brace; uuidStart/uuidEnd bound an existing uuid
	// value (quotes included); urlStart/urlEnd bound the JSON string URL was read from (-1 when URL is
	// empty).
	end, uuidStart, uuidEnd int
	urlStart, urlEnd        int
}

// Prompt is a completion prompt: a string, a list of strings, a list of token ids or a list of token-id
// lists. Exactly one of Texts and TokenLists is set after decoding a non-null prompt.
type Prompt struct {
	Texts      []string
	TokenLists [][]uint32
	// List is true for the list forms ([]string, [][]int), which may carry several prompts.
	List bool
	Set  bool
}

// Len is the number of prompts.
func (p *Prompt) Len() int { return len(p.Texts) + len(p.TokenLists) }

// IsTokens reports whether the prompt is given as token ids.
func (p *Prompt) IsTokens() bool { return p.TokenLists != nil }

// Text is the first text prompt.
func (p *Prompt) Text() string {
	if len(p.Texts) == 0 {
		return ""
	}
	return p.Texts[0]
}

// Tokens is the first token-id prompt.
func (p *Prompt) Tokens() []uint32 {
	if len(p.TokenLists) == 0 {
		return nil
	}
	return p.TokenLists[0]
}

var errPromptType = errorf(ErrBadRequest, "prompt", "must be a string, a list of strings, a list of token ids or a list of token-id lists")

// UnmarshalJSON accepts the four prompt forms; token ids must be non-negative integers.
func (p *Prompt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	*p = Prompt{}
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	p.Set = true
	switch b[0] {
	case '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		p.Texts = []string{s}
		return nil
	case '[':
	default:
		return errPromptType
	}
	i := oaiwire.SkipWS(b, 1)
	if i >= len(b) {
		return errPromptType
	}
	switch c := b[i]; {
	case c == ']':
		p.Texts = []string{}
		p.List = true
		return nil
	case c == '"':
		p.List = true
		if err := json.Unmarshal(b, &p.Texts); err != nil {
			return errPromptType
		}
	case c == '[':
		p.List = true
		if err := json.Unmarshal(b, &p.TokenLists); err != nil {
			return errorf(ErrBadRequest, "prompt", "token-id lists must hold non-negative integers below 2^32")
		}
		if p.TokenLists == nil {
			p.TokenLists = [][]uint32{}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		ids, ok := parseTokenIDs(b)
		if !ok {
			return errorf(ErrBadRequest, "prompt", "token ids must be non-negative integers below 2^32")
		}
		p.TokenLists = [][]uint32{ids}
	default:
		return errPromptType
	}
	return nil
}

// parseTokenIDs parses a JSON list of non-negative integers below 2^32 (b starts with '['). Token-id
// prompts run to 100k entries; this is several times faster than the reflective decoder and allocates
// only the result.
func parseTokenIDs(b []byte) ([]uint32, bool) {
	ids := make([]uint32, 0, len(b)/6+1)
	i := oaiwire.SkipWS(b, 1)
	if i < len(b) && b[i] == ']' {
		return ids, oaiwire.SkipWS(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return nil, false
		}
		var v uint64
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			v = v*10 + uint64(b[i]-'0')
			if v > 0xFFFFFFFF {
				return nil, false
			}
			i++
		}
		if b[start] == '0' && i-start > 1 {
			return nil, false // JSON has no leading zeros
		}
		ids = append(ids, uint32(v))
		i = oaiwire.SkipWS(b, i)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = oaiwire.SkipWS(b, i+1)
		case ']':
			return ids, oaiwire.SkipWS(b, i+1) == len(b)
		default:
			return nil, false // '.', 'e', '-' inside: not an integer
		}
	}
}

// Stop is the stop oaiwire.Field: a string or a list of strings.
type Stop struct {
	List []string
	Set  bool
}

// UnmarshalJSON accepts a string, a list of strings or null.
func (s *Stop) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	*s = Stop{}
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	s.Set = true
	switch b[0] {
	case '"':
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		s.List = []string{one}
		return nil
	case '[':
		if err := json.Unmarshal(b, &s.List); err != nil {
			return errorf(ErrBadRequest, "stop", "must be a string or a list of strings")
		}
		return nil
	}
	return errorf(ErrBadRequest, "stop", "must be a string or a list of strings")
}

// ParseChat decodes a chat completion body: JSON syntax and oaiwire.Field types only (Validate checks values).
// The request keeps body (no copy).
func ParseChat(body []byte) (*ChatRequest, error) {
	if err := checkObject(body); err != nil {
		return nil, err
	}
	req := &ChatRequest{}
	if err := model.UnmarshalExact(body, req); err != nil {
		if e := locateMessageError(body); e != nil {
			return nil, e
		}
		return nil, decodeError(err)
	}
	req.Body = body
	if hasMedia(req.Messages) {
		media, err := scanMedia(body)
		if err != nil {
			return nil, errorf(ErrBadRequest, "messages", "%v", err)
		}
		if !sameMedia(req.Messages, media) {
			return nil, errorf(ErrBadRequest, "messages", "the media parts cannot be read unambiguously (repeated or misspelled keys?)")
		}
		req.Media = media
	}
	return req, nil
}

// ParseCompletion decodes a completion body: JSON syntax and oaiwire.Field types only.
func ParseCompletion(body []byte) (*CompletionRequest, error) {
	if err := checkObject(body); err != nil {
		return nil, err
	}
	req := &CompletionRequest{}
	if err := model.UnmarshalExact(body, req); err != nil {
		return nil, decodeError(err)
	}
	req.Body = body
	return req, nil
}

// checkObject rejects an empty body and any top level other than an object, with messages clearer than
// the decoder's.
func checkObject(body []byte) error {
	i := oaiwire.SkipWS(body, 0)
	if i == len(body) {
		return errorf(ErrBadRequest, "", "request body is empty")
	}
	if body[i] != '{' {
		return errorf(ErrBadRequest, "", "request body must be a JSON object")
	}
	return nil
}

// decodeError turns a decoder error into a 400 naming the oaiwire.Field.
func decodeError(err error) error {
	var own *Error
	if errors.As(err, &own) {
		return own
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		param := jsonPath(te.Field)
		want := "a value of another type"
		if te.Type != nil {
			want = goTypeName(te.Type.String())
		}
		msg := "expected " + want + ", got " + te.Value
		if te.Err != nil {
			msg = te.Err.Error()
		}
		return errorf(ErrBadRequest, param, "%s", msg)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return errorf(ErrBadRequest, "", "invalid JSON at byte %d: %s", se.Offset, se.Error())
	}
	return errorf(ErrBadRequest, "", "invalid JSON: %v", err)
}

// jsonPath turns the decoder's oaiwire.Field path ("messages.0.role") into the API's ("messages[0].role").
func jsonPath(p string) string {
	if p == "" {
		return ""
	}
	var b strings.Builder
	for i, seg := range strings.Split(p, ".") {
		if _, err := strconv.Atoi(seg); err == nil {
			b.WriteString("[" + seg + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	return b.String()
}

// locateMessageError finds the message (and content part) a decode error comes from, since errors raised
// inside model.Content lose the path. It runs only on the error path; nil means "not in messages".
func locateMessageError(body []byte) *Error {
	var msgs []json.RawMessage
	if json.Unmarshal(TopLevelField(body, "messages"), &msgs) != nil {
		return nil
	}
	for i, raw := range msgs {
		var m model.Message
		err := json.Unmarshal(raw, &m)
		if err == nil {
			continue
		}
		var fields map[string]json.RawMessage
		if json.Unmarshal(raw, &fields) != nil {
			return errorf(ErrBadRequest, msgParam(i), "must be an object")
		}
		if content, ok := fields["content"]; ok {
			var c model.Content
			if json.Unmarshal(content, &c) != nil {
				var parts []json.RawMessage
				if json.Unmarshal(content, &parts) != nil {
					return errorf(ErrBadRequest, msgParam(i)+".content", "must be a string, a list of content parts or null")
				}
				for j, p := range parts {
					var part model.ContentPart
					if perr := json.Unmarshal(p, &part); perr != nil {
						e := decodeError(perr).(*Error)
						if e.Param == "" {
							return errorf(ErrBadRequest, partParam(i, j), "must be an object {\"type\": ...}")
						}
						e.Param = partParam(i, j) + "." + e.Param
						return e
					}
				}
			}
		}
		e := decodeError(err).(*Error)
		if e.Param != "" {
			e.Param = msgParam(i) + "." + e.Param
		} else {
			e.Param = msgParam(i)
		}
		return e
	}
	return nil
}

// goTypeName names a Go type the way an API user thinks of it.
func goTypeName(t string) string {
	t = strings.TrimPrefix(t, "*")
	switch {
	case t == "string":
		return "a string"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map[") || strings.Contains(t, "."):
		return "an object"
	}
	return t
}

// MaxTokens is the effective output limit: max_completion_tokens, else max_tokens, else 0 (unset).
func (r *ChatRequest) MaxTokens() int {
	if r.MaxCompletionTokens != nil {
		return *r.MaxCompletionTokens
	}
	if r.Common.MaxTokens != nil {
		return *r.Common.MaxTokens
	}
	return 0
}

// ChatOptions are the template inputs of the request, for model.EncodeChat.
func (r *ChatRequest) ChatOptions() model.ChatOptions {
	addGen := !r.ContinueFinalMessage
	if r.AddGenerationPrompt != nil {
		addGen = *r.AddGenerationPrompt
	}
	return model.ChatOptions{AddGenerationPrompt: addGen, Tools: r.Tools, Kwargs: r.ChatTemplateKwargs,
		ContinueFinalMessage: r.ContinueFinalMessage}
}

// IncludeUsage reports whether a streamed response ends with a usage chunk.
func (c *Common) IncludeUsage() bool { return c.StreamOptions != nil && c.StreamOptions.IncludeUsage }

// ReturnRouting reports whether the response should carry the routing decision.
func (c *Common) ReturnRouting() bool { return c.NVExt != nil && c.NVExt.ReturnRouting }

// CacheNamespace is the request's prefix-cache namespace given its X-Tenant-ID header:
// the cache_salt the worker's engine hashes its blocks with. That is the body's cache_salt when set, else
// Dynamo's nvext.cache_salt, else the tenant; forward reports that the worker does not know it yet, so
// the body sent to the worker must carry it as cache_salt (SetCacheSalt) for its cache and the router's
// prediction to agree.
func (c *Common) CacheNamespace(tenant string) (ns string, forward bool) {
	switch {
	case c.CacheSalt != nil:
		return *c.CacheSalt, false
	case c.NVExt != nil && c.NVExt.CacheSalt != "":
		return c.NVExt.CacheSalt, true
	case tenant != "":
		return tenant, true
	}
	return "", false
}

// MaxPriorityJump bounds a request's queue priority (the seconds its arrival is moved earlier): a day. A
// larger jump orders nothing differently among real requests.
const MaxPriorityJump = 86400.0

// ValidPriorityJump reports a priority jump the router takes as given: in [0, MaxPriorityJump] (NaN is
// not).
func ValidPriorityJump(v float64) bool { return v >= 0 && v <= MaxPriorityJump }

// PriorityJump is nvext.agent_hints.priority (or the deprecated latency_sensitivity) clamped to
// [0, MaxPriorityJump], in seconds.
func (c *Common) PriorityJump() float64 {
	if c.NVExt == nil || c.NVExt.AgentHints == nil {
		return 0
	}
	h := c.NVExt.AgentHints
	v := 0.0
	switch {
	case h.Priority != nil:
		v = *h.Priority
	case h.LatencySensitivity != nil:
		v = *h.LatencySensitivity
	}
	return min(max(v, 0), MaxPriorityJump)
}

func hasMedia(msgs []model.Message) bool {
	for i := range msgs {
		for _, p := range msgs[i].Content.Parts {
			if isMediaType(p.Type) {
				return true
			}
		}
	}
	return false
}

func isMediaType(t string) bool {
	switch t {
	case "image_url", "video_url", "input_audio", "audio_url":
		return true
	}
	return false
}
