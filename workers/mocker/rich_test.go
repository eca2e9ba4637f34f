package mocker

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/goccy/go-json"
)

// sseChunks posts a streaming body and returns its data events (without [DONE]) and whether [DONE] came.
func sseChunks(t *testing.T, url string, body any) ([]map[string]any, bool) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	must(t, err)
	defer resp.Body.Close()
	var out []map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return out, true
		}
		var m map[string]any
		must(t, json.Unmarshal([]byte(data), &m))
		out = append(out, m)
	}
	return out, false
}

// The answer's shape follows n, stop, logprobs and a forced tool call, as vLLM's does.
func TestRichResponseShapes(t *testing.T) {
	w := startTestWorker(t, nil)
	msgs := []map[string]any{{"role": "user", "content": "hi"}}
	weather := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"},
			"days": map[string]any{"type": "integer"}}, "required": []string{"city"}}}}
	type choice struct {
		Index        int
		Text         string
		FinishReason *string `json:"finish_reason"`
		StopReason   any     `json:"stop_reason"`
		Message      struct {
			Role      string
			Content   *string
			ToolCalls []struct {
				ID, Type string
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		}
		Logprobs json.RawMessage
	}
	type answer struct {
		Object  string
		Choices []choice
		Usage   struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	post := func(path string, body map[string]any) answer {
		t.Helper()
		st, b := postJSON(t, w.URL()+path, body)
		if st != 200 {
			t.Fatalf("%s %v: %d %s", path, body, st, b)
		}
		var a answer
		must(t, json.Unmarshal(b, &a))
		return a
	}

	a := post("/v1/chat/completions", map[string]any{"messages": msgs, "n": 3, "max_tokens": 4})
	if len(a.Choices) != 3 || a.Usage.CompletionTokens != 12 {
		t.Fatalf("n=3: %d choices, %d completion tokens", len(a.Choices), a.Usage.CompletionTokens)
	}
	for i, c := range a.Choices {
		if c.Index != i || c.Message.Role != "assistant" || c.Message.Content == nil || *c.FinishReason != "length" {
			t.Errorf("n=3 choice %d: %+v", i, c)
		}
	}

	a = post("/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 5, "logprobs": 2})
	var clp struct {
		Tokens        []string
		TokenLogprobs []float64            `json:"token_logprobs"`
		TextOffset    []int                `json:"text_offset"`
		TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	}
	must(t, json.Unmarshal(a.Choices[0].Logprobs, &clp))
	if len(clp.Tokens) != 5 || len(clp.TokenLogprobs) != 5 || len(clp.TextOffset) != 5 || len(clp.TopLogprobs) != 5 ||
		strings.Join(clp.Tokens, "") != a.Choices[0].Text {
		t.Errorf("completion logprobs: %s for %q", a.Choices[0].Logprobs, a.Choices[0].Text)
	}

	a = post("/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 3, "logprobs": true, "top_logprobs": 2})
	var chlp struct {
		Content []struct {
			Token       string
			Logprob     float64
			Bytes       []int
			TopLogprobs []struct{ Token string } `json:"top_logprobs"`
		}
	}
	must(t, json.Unmarshal(a.Choices[0].Logprobs, &chlp))
	if len(chlp.Content) != 3 || len(chlp.Content[0].TopLogprobs) != 2 || chlp.Content[0].Logprob >= 0 {
		t.Errorf("chat logprobs: %s", a.Choices[0].Logprobs)
	}

	// A stop string that the output contains ends it there, with finish_reason stop and the string.
	full := post("/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 8}).Choices[0].Text
	if len(full) < 4 {
		t.Fatalf("output %q too short for a stop test", full)
	}
	stop := full[2:4]
	a = post("/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 8, "stop": []string{"\x00never", stop}})
	want := full[:strings.Index(full, stop)]
	if c := a.Choices[0]; c.Text != want || *c.FinishReason != "stop" || c.StopReason != stop {
		t.Errorf("stop %q in %q: got %q finish %v stop_reason %v, want %q", stop, full, c.Text, *c.FinishReason, c.StopReason, want)
	}

	for _, tc := range []any{"required", map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}} {
		a = post("/v1/chat/completions", map[string]any{"messages": msgs, "tools": []any{weather}, "tool_choice": tc})
		c := a.Choices[0]
		if len(c.Message.ToolCalls) != 1 || c.Message.Content != nil || *c.FinishReason != "tool_calls" {
			t.Fatalf("tool_choice %v: %+v", tc, c)
		}
		call := c.Message.ToolCalls[0]
		var args map[string]any
		if call.Type != "function" || call.Function.Name != "get_weather" || !strings.HasPrefix(call.ID, "chatcmpl-tool-") ||
			json.Unmarshal([]byte(call.Function.Arguments), &args) != nil || args["city"] == nil {
			t.Errorf("tool call: %+v", call)
		}
	}
	if st, b := postJSON(t, w.URL()+"/v1/chat/completions", map[string]any{"messages": msgs, "tools": []any{weather},
		"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "nope"}}}); st != 400 {
		t.Errorf("unknown forced tool: %d %s", st, b)
	}

	// Streams: n=2 chunks carry both indexes and each ends with a finish_reason; a forced tool streams
	// one tool_calls delta.
	chunks, done := sseChunks(t, w.URL()+"/v1/chat/completions", map[string]any{"messages": msgs, "n": 2, "max_tokens": 3,
		"stream": true, "stream_options": map[string]any{"include_usage": true}})
	finished := map[float64]bool{}
	var usage map[string]any
	for _, ch := range chunks {
		if u, ok := ch["usage"].(map[string]any); ok {
			usage = u
		}
		for _, c := range ch["choices"].([]any) {
			c := c.(map[string]any)
			if c["finish_reason"] != nil {
				finished[c["index"].(float64)] = true
			}
		}
	}
	if !done || !finished[0] || !finished[1] || usage == nil || usage["completion_tokens"].(float64) != 6 {
		t.Errorf("n=2 stream: done %v finished %v usage %v", done, finished, usage)
	}
	chunks, done = sseChunks(t, w.URL()+"/v1/chat/completions", map[string]any{"messages": msgs, "stream": true,
		"tools": []any{weather}, "tool_choice": "required"})
	calls := 0
	for _, ch := range chunks {
		for _, c := range ch["choices"].([]any) {
			if d, ok := c.(map[string]any)["delta"].(map[string]any); ok && d["tool_calls"] != nil {
				calls++
			}
		}
	}
	if !done || calls != 1 {
		t.Errorf("tool stream: done %v, %d tool_calls deltas", done, calls)
	}
}
