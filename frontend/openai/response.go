package openai

import (
	json "github.com/goccy/go-json"

	"github.com/kvroute/kvroute/model"
)

// ChatCompletion is a non-streaming chat response (object "chat.completion").
type ChatCompletion struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []ChatChoice   `json:"choices"`
	Usage   *Usage         `json:"usage,omitempty"`
	NVExt   *NVExtResponse `json:"nvext,omitempty"`
}

// ChatChoice is one choice of a ChatCompletion.
type ChatChoice struct {
	Index        int             `json:"index"`
	Message      ChatMessage     `json:"message"`
	FinishReason *string         `json:"finish_reason"`
	Logprobs     json.RawMessage `json:"logprobs,omitempty"`
}

// ChatMessage is an assistant message of a response, or the delta of a chunk.
type ChatMessage struct {
	Role             string           `json:"role,omitempty"`
	Content          *string          `json:"content,omitempty"`
	ReasoningContent *string          `json:"reasoning_content,omitempty"`
	ToolCalls        []model.ToolCall `json:"tool_calls,omitempty"`
}

// ChatChunk is one streamed chat event (object "chat.completion.chunk"). The usage chunk has no choices.
type ChatChunk struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []ChunkChoice  `json:"choices"`
	Usage   *Usage         `json:"usage,omitempty"`
	NVExt   *NVExtResponse `json:"nvext,omitempty"`
}

// ChunkChoice is one choice of a ChatChunk.
type ChunkChoice struct {
	Index        int             `json:"index"`
	Delta        ChatMessage     `json:"delta"`
	FinishReason *string         `json:"finish_reason"`
	Logprobs     json.RawMessage `json:"logprobs,omitempty"`
}

// Completion is a completion response (object "text_completion"), streamed chunks included.
type Completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
	NVExt   *NVExtResponse     `json:"nvext,omitempty"`
}

// CompletionChoice is one choice of a Completion.
type CompletionChoice struct {
	Index        int             `json:"index"`
	Text         string          `json:"text"`
	FinishReason *string         `json:"finish_reason"`
	Logprobs     json.RawMessage `json:"logprobs,omitempty"`
}

// Object names.
const (
	ObjectChatCompletion = "chat.completion"
	ObjectChatChunk      = "chat.completion.chunk"
	ObjectCompletion     = "text_completion"
)

// NVExtResponse is the "nvext" member of a response when the request asked for return_routing.
type NVExtResponse struct {
	Routing *Routing `json:"routing,omitempty"`
}

// Routing is the routing decision of a request.
type Routing struct {
	WorkerID      uint64             `json:"worker_id"`
	DPRank        uint32             `json:"dp_rank"`
	OverlapBlocks uint32             `json:"overlap_blocks"`
	Candidates    []RoutingCandidate `json:"candidates,omitempty"`
	// Prefill is the prefill worker's decision of a disaggregated request (the top level is its decode
	// worker's).
	Prefill *Routing `json:"prefill,omitempty"`
}

// RoutingCandidate is one worker's score in a routing decision.
type RoutingCandidate struct {
	WorkerID      uint64  `json:"worker_id"`
	DPRank        uint32  `json:"dp_rank"`
	OverlapBlocks uint32  `json:"overlap_blocks"`
	Cost          float64 `json:"cost"`
}

// ErrorResponse is the OpenAI error body.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is the inside of an ErrorResponse.
type ErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// SSE framing. A stream is a sequence of "data: <json>\n\n" events closed by "data: [DONE]\n\n".
var (
	SSEPrefix = []byte("data: ")
	SSEDone   = []byte("data: [DONE]\n\n")
)

// AppendSSE appends payload as one SSE data event.
func AppendSSE(dst, payload []byte) []byte {
	dst = append(dst, SSEPrefix...)
	dst = append(dst, payload...)
	return append(dst, '\n', '\n')
}

// AppendSSEError appends an error event as vLLM sends one mid-stream: data: {"error":{...}}. The caller
// still ends the stream with SSEDone.
func AppendSSEError(dst []byte, status int, typ, msg string) []byte {
	b, _ := json.Marshal(ErrorResponse{Error: ErrorBody{Message: msg, Type: typ, Code: status}})
	return AppendSSE(dst, b)
}

// AddNVExt returns a copy of a response body or chunk (a JSON object) with "nvext" set to v, leaving the
// worker's other bytes untouched.
func AddNVExt(body []byte, v *NVExtResponse) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return SetField(body, "nvext", raw)
}
