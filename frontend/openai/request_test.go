package openai

import (
	"errors"
	"strings"
	"testing"

	json "github.com/goccy/go-json"
)

var served = []string{"m"}

// TestMalformedChat: each body gets its class and a message naming the problem.
func TestMalformedChat(t *testing.T) {
	huge := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2048) + `"}]}`
	many := `{"model":"m","messages":[` + strings.Repeat(`{"role":"user","content":"a"},`, 20) + `{"role":"user","content":"a"}]}`
	lim := Limits{MaxBodyBytes: 1024, MaxMessages: 8}
	tests := []struct {
		name, body string
		class      error
		want       string // substring of the message
	}{
		{"empty body", ``, ErrBadRequest, "empty"},
		{"whitespace body", "  \n", ErrBadRequest, "empty"},
		{"not json", `hello`, ErrBadRequest, "JSON object"},
		{"array top level", `[1,2]`, ErrBadRequest, "JSON object"},
		{"truncated", `{"model":"m","messages":[`, ErrBadRequest, "JSON"},
		{"trailing garbage", `{"model":"m","messages":[{"role":"user","content":"hi"}]} x`, ErrBadRequest, "JSON"},
		{"missing model", `{"messages":[{"role":"user","content":"hi"}]}`, ErrBadRequest, "model: is required"},
		{"model not string", `{"model":5,"messages":[{"role":"user","content":"hi"}]}`, ErrBadRequest, "model"},
		{"unknown model", `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, ErrNotFound, "does not exist"},
		{"missing messages", `{"model":"m"}`, ErrBadRequest, "messages: is required"},
		{"null messages", `{"model":"m","messages":null}`, ErrBadRequest, "messages: is required"},
		{"empty messages", `{"model":"m","messages":[]}`, ErrBadRequest, "at least one"},
		{"messages not list", `{"model":"m","messages":{"role":"user"}}`, ErrBadRequest, "messages"},
		{"message not object", `{"model":"m","messages":["hi"]}`, ErrBadRequest, "messages"},
		{"unknown role", `{"model":"m","messages":[{"role":"robot","content":"hi"}]}`, ErrBadRequest, `messages[0].role: unknown role "robot"`},
		{"missing role", `{"model":"m","messages":[{"content":"hi"}]}`, ErrBadRequest, "messages[0].role: is required"},
		{"role not string", `{"model":"m","messages":[{"role":1,"content":"hi"}]}`, ErrBadRequest, "role"},
		{"content number", `{"model":"m","messages":[{"role":"user","content":42}]}`, ErrBadRequest, "content"},
		{"user content null", `{"model":"m","messages":[{"role":"user","content":null}]}`, ErrBadRequest, "messages[0].content: must not be null"},
		{"bad part type", `{"model":"m","messages":[{"role":"user","content":[{"type":"hologram"}]}]}`, ErrBadRequest, `messages[0].content[0].type: unsupported content part type "hologram"`},
		{"part without type", `{"model":"m","messages":[{"role":"user","content":[{"text":"a"}]}]}`, ErrBadRequest, "content[0].type: is required"},
		{"part text not string", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":7}]}]}`, ErrBadRequest, "text"},
		{"image without url", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}`, ErrBadRequest, "content[0].image_url: needs a url"},
		{"image empty uuid", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","uuid":""}]}]}`, ErrBadRequest, "uuid: must be a non-empty"},
		{"refusal from user", `{"model":"m","messages":[{"role":"user","content":[{"type":"refusal","refusal":"no"}]}]}`, ErrBadRequest, "refusal"},
		{"max_tokens zero", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, ErrBadRequest, "max_tokens: must be at least 1"},
		{"max_tokens negative", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":-5}`, ErrBadRequest, "max_tokens"},
		{"max_tokens string", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":"10"}`, ErrBadRequest, "max_tokens"},
		{"max_tokens float", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1.5}`, ErrBadRequest, "max_tokens"},
		{"max_completion_tokens zero", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":0}`, ErrBadRequest, "max_completion_tokens"},
		{"temperature high", `{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":2.5}`, ErrBadRequest, "temperature: must be in [0, 2]"},
		{"temperature negative", `{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":-0.1}`, ErrBadRequest, "temperature"},
		{"temperature string", `{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":"hot"}`, ErrBadRequest, "temperature"},
		{"top_p zero", `{"model":"m","messages":[{"role":"user","content":"hi"}],"top_p":0}`, ErrBadRequest, "top_p"},
		{"n zero", `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":0}`, ErrBadRequest, "n: must be at least 1"},
		{"n too many", `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":129}`, ErrUnprocessable, "n=129 is not supported"},
		{"stream not bool", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":"yes"}`, ErrBadRequest, "stream"},
		{"stream_options without stream", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`, ErrBadRequest, "stream_options"},
		{"stop number", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stop":5}`, ErrBadRequest, "stop"},
		{"too many stops", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}`, ErrBadRequest, "stop strings"},
		{"seed string", `{"model":"m","messages":[{"role":"user","content":"hi"}],"seed":"x"}`, ErrBadRequest, "seed"},
		{"tools not list", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":{}}`, ErrBadRequest, "tools"},
		{"tool wrong type", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"code"}]}`, ErrBadRequest, `tools[0].type`},
		{"tool without name", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{}}]}`, ErrBadRequest, "tools[0].function.name"},
		{"tool_choice unknown", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tool_choice":"sometimes"}`, ErrBadRequest, "tool_choice"},
		{"tool_choice required without tools", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tool_choice":"required"}`, ErrBadRequest, "needs tools"},
		{"tool_choice names missing tool", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, ErrBadRequest, `"g" is not among`},
		{"response_format unknown", `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"xml"}}`, ErrBadRequest, "response_format.type"},
		{"json_schema missing", `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema"}}`, ErrBadRequest, "json_schema"},
		{"top_logprobs without logprobs", `{"model":"m","messages":[{"role":"user","content":"hi"}],"top_logprobs":3}`, ErrBadRequest, "top_logprobs"},
		{"logprobs int for chat", `{"model":"m","messages":[{"role":"user","content":"hi"}],"logprobs":3}`, ErrBadRequest, "logprobs"},
		{"empty cache_salt", `{"model":"m","messages":[{"role":"user","content":"hi"}],"cache_salt":""}`, ErrBadRequest, "cache_salt"},
		{"nvext not object", `{"model":"m","messages":[{"role":"user","content":"hi"}],"nvext":true}`, ErrBadRequest, "nvext"},
		{"nvext return_routing string", `{"model":"m","messages":[{"role":"user","content":"hi"}],"nvext":{"return_routing":"yes"}}`, ErrBadRequest, "return_routing"},
		{"agent priority string", `{"model":"m","messages":[{"role":"user","content":"hi"}],"nvext":{"agent_hints":{"priority":"high"}}}`, ErrBadRequest, "priority"},
		{"beam search", `{"model":"m","messages":[{"role":"user","content":"hi"}],"use_beam_search":true}`, ErrUnprocessable, "beam"},
		{"continue and add generation", `{"model":"m","messages":[{"role":"user","content":"hi"}],"continue_final_message":true,"add_generation_prompt":true}`, ErrBadRequest, "continue_final_message"},
		{"huge body", huge, ErrTooLarge, "exceeds the limit"},
		{"too many messages", many, ErrTooLarge, "21 messages exceed the limit of 8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeChat([]byte(tc.body), lim, served)
			if err == nil {
				t.Fatalf("accepted %s", tc.body)
			}
			t.Logf("%d %v", len(tc.body), err)
			if !errors.Is(err, tc.class) {
				t.Fatalf("class: got %v, want %v (%v)", classOf(err), tc.class, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("message %q does not contain %q", err.Error(), tc.want)
			}
		})
	}
}

func TestMalformedCompletion(t *testing.T) {
	tests := []struct {
		name, body string
		class      error
		want       string
	}{
		{"missing prompt", `{"model":"m"}`, ErrBadRequest, "prompt: is required"},
		{"null prompt", `{"model":"m","prompt":null}`, ErrBadRequest, "prompt: is required"},
		{"empty prompt", `{"model":"m","prompt":""}`, ErrBadRequest, "prompt: must not be empty"},
		{"empty list", `{"model":"m","prompt":[]}`, ErrBadRequest, "empty list"},
		{"empty token list", `{"model":"m","prompt":[[]]}`, ErrBadRequest, "empty token list"},
		{"prompt number", `{"model":"m","prompt":5}`, ErrBadRequest, "prompt"},
		{"prompt object", `{"model":"m","prompt":{"text":"a"}}`, ErrBadRequest, "prompt"},
		{"negative token", `{"model":"m","prompt":[1,-2,3]}`, ErrBadRequest, "non-negative"},
		{"token too big", `{"model":"m","prompt":[1,4294967296]}`, ErrBadRequest, "non-negative"},
		{"float token", `{"model":"m","prompt":[1,2.5]}`, ErrBadRequest, "non-negative"},
		{"exponent token", `{"model":"m","prompt":[1,2e3]}`, ErrBadRequest, "non-negative"},
		{"leading zero token", `{"model":"m","prompt":[01]}`, ErrBadRequest, "JSON"},
		{"token trailing comma", `{"model":"m","prompt":[1,2,]}`, ErrBadRequest, "JSON"},
		{"mixed list", `{"model":"m","prompt":["a",1]}`, ErrBadRequest, "prompt"},
		{"batched strings", `{"model":"m","prompt":["a","b"]}`, ErrUnprocessable, "batched prompts (2)"},
		{"batched tokens", `{"model":"m","prompt":[[1],[2]]}`, ErrUnprocessable, "batched"},
		{"prompt embeds", `{"model":"m","prompt_embeds":"AAAA","prompt":"x"}`, ErrUnprocessable, "prompt_embeds"},
		{"logprobs too many", `{"model":"m","prompt":"x","logprobs":50}`, ErrBadRequest, "logprobs"},
		{"logprobs bool", `{"model":"m","prompt":"x","logprobs":true}`, ErrBadRequest, "logprobs"},
		{"best_of", `{"model":"m","prompt":"x","best_of":3}`, ErrUnprocessable, "best_of"},
		{"suffix", `{"model":"m","prompt":"x","suffix":"end"}`, ErrUnprocessable, "suffix"},
		{"unknown model", `{"model":"other","prompt":"x"}`, ErrNotFound, "other"},
		{"max_tokens negative", `{"model":"m","prompt":"x","max_tokens":-1}`, ErrBadRequest, "max_tokens"},
		{"too many tokens", `{"model":"m","prompt":[1,2,3,4,5]}`, ErrTooLarge, "5 tokens exceed"},
	}
	lim := Limits{MaxPromptTokens: 4}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeCompletion([]byte(tc.body), lim, served)
			if err == nil {
				t.Fatalf("accepted %s", tc.body)
			}
			t.Logf("%d %v", len(tc.body), err)
			if !errors.Is(err, tc.class) {
				t.Fatalf("class: got %v, want %v (%v)", classOf(err), tc.class, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("message %q does not contain %q", err.Error(), tc.want)
			}
		})
	}
}

func classOf(err error) error {
	for _, c := range []error{ErrBadRequest, ErrNotFound, ErrTooLarge, ErrUnprocessable, ErrUnavailable} {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

func TestValidChat(t *testing.T) {
	body := `{"model":"m","messages":[
		{"role":"system","content":"be brief"},
		{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"image_url","image_url":{"url":"http://x/y.png"},"uuid":"sku-1"}]},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"42"}],
		"max_completion_tokens":32,"max_tokens":8,"stream":true,"stream_options":{"include_usage":true},
		"temperature":0.7,"top_p":0.9,"n":1,"stop":"\n","seed":7,"user":"u",
		"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}},
		"response_format":{"type":"json_object"},"logprobs":true,"top_logprobs":2,
		"nvext":{"return_routing":true,"agent_hints":{"priority":-3},"cache_salt":"tenant"},
		"cache_salt":"vs","chat_template_kwargs":{"enable_thinking":false},"kv_transfer_params":{"x":1},"vllm_xargs":{"a":"b"}}`
	r, err := DecodeChat([]byte(body), Limits{}, served)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Messages) != 4 || r.Messages[1].Content.Parts[1].ImageURL.URL != "data:image/png;base64,AAAA" {
		t.Fatalf("messages: %+v", r.Messages)
	}
	if r.MaxTokens() != 32 || !r.Stream || !r.IncludeUsage() || !r.ReturnRouting() {
		t.Fatalf("max %d stream %v usage %v routing %v", r.MaxTokens(), r.Stream, r.IncludeUsage(), r.ReturnRouting())
	}
	if ns, fwd := r.CacheNamespace("t"); ns != "vs" || fwd || r.PriorityJump() != 0 || r.Stop.List[0] != "\n" {
		t.Fatalf("namespace %q (forward %v) priority %v stop %q", ns, fwd, r.PriorityJump(), r.Stop.List)
	}
	r.CacheSalt = nil
	if ns, fwd := r.CacheNamespace("t"); ns != "tenant" || !fwd {
		t.Fatalf("nvext namespace %q (forward %v)", ns, fwd)
	}
	r.NVExt.CacheSalt = ""
	if ns, fwd := r.CacheNamespace("t"); ns != "t" || !fwd {
		t.Fatalf("header namespace %q (forward %v)", ns, fwd)
	}
	if ns, fwd := r.CacheNamespace(""); ns != "" || fwd {
		t.Fatalf("no namespace: %q (forward %v)", ns, fwd)
	}
	if len(r.Media) != 2 || r.Media[0].URL != "data:image/png;base64,AAAA" || r.Media[0].HasUUID ||
		r.Media[1].URL != "http://x/y.png" || r.Media[1].UUID != "sku-1" || r.Media[1].Message != 1 || r.Media[1].Part != 2 {
		t.Fatalf("media: %+v", r.Media)
	}
	opts := r.ChatOptions()
	if !opts.AddGenerationPrompt || len(opts.Tools) != 1 || opts.Kwargs["enable_thinking"] != false {
		t.Fatalf("chat options %+v", opts)
	}
	if &r.Body[0] != &[]byte(body)[0] && string(r.Body) != body {
		t.Fatal("body not kept")
	}
	cont, err := ParseChat([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure"}],"continue_final_message":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if opts := cont.ChatOptions(); opts.AddGenerationPrompt || !opts.ContinueFinalMessage {
		t.Fatalf("continue_final_message: chat options %+v", opts)
	}
}

func TestValidCompletionForms(t *testing.T) {
	tests := []struct {
		body   string
		tokens []uint32
		text   string
	}{
		{`{"model":"m","prompt":"hello"}`, nil, "hello"},
		{`{"model":"m","prompt":["hello"]}`, nil, "hello"},
		{`{"model":"m","prompt":[1,2,3]}`, []uint32{1, 2, 3}, ""},
		{`{"model":"m","prompt":[ 0 , 4294967295 ]}`, []uint32{0, 4294967295}, ""},
		{`{"model":"m","prompt":[[4,5]]}`, []uint32{4, 5}, ""},
		{`{"model":"m","prompt":" [ 6 ] "}`, nil, " [ 6 ] "},
	}
	for _, tc := range tests {
		r, err := DecodeCompletion([]byte(tc.body), Limits{}, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if r.Prompt.Text() != tc.text || len(r.Prompt.Tokens()) != len(tc.tokens) {
			t.Fatalf("%s: text %q tokens %v", tc.body, r.Prompt.Text(), r.Prompt.Tokens())
		}
		for i := range tc.tokens {
			if r.Prompt.Tokens()[i] != tc.tokens[i] {
				t.Fatalf("%s: tokens %v", tc.body, r.Prompt.Tokens())
			}
		}
	}
}

func TestParamInError(t *testing.T) {
	_, err := DecodeChat([]byte(`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"x","content":"b"}]}`), Limits{}, served)
	if ParamOf(err) != "messages[1].role" {
		t.Fatalf("param %q (%v)", ParamOf(err), err)
	}
}

func TestSetMediaUUIDs(t *testing.T) {
	body := `{"model":"m", "messages":[{"role":"user","content":[{"type":"text","text":"}{\"uuid\""},` +
		`{"type":"image_url","image_url":{"url":"a"}} ,{ "type" : "image_url", "uuid":"old", "image_url":{"url":"b"} }]}],"x":1}`
	r, err := DecodeChat([]byte(body), Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := SetMediaUUIDs(r.Body, r.Media, []string{"u1", "u\"2"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m", "messages":[{"role":"user","content":[{"type":"text","text":"}{\"uuid\""},` +
		`{"type":"image_url","image_url":{"url":"a"},"uuid":"u1"} ,{ "type" : "image_url", "uuid":"u\"2", "image_url":{"url":"b"} }]}],"x":1}`
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	r2, err := DecodeChat(out, Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Media[0].UUID != "u1" || r2.Media[1].UUID != `u"2` {
		t.Fatalf("media after rewrite: %+v", r2.Media)
	}
	same, _ := SetMediaUUIDs(r.Body, r.Media, []string{"", "old"})
	if string(same) != body {
		t.Fatalf("no-op rewrite changed the body: %s", same)
	}
	if _, err := SetMediaUUIDs(r.Body, r.Media, []string{"x"}); err == nil {
		t.Fatal("count mismatch accepted")
	}
}

func TestSetAndDeleteField(t *testing.T) {
	tests := []struct {
		in, key, val, set, del string
	}{
		{`{}`, "a", `1`, `{"a":1}`, `{}`},
		{`{ }`, "a", `1`, `{ "a":1}`, `{ }`},
		{`{"a":0,"b":[1,{"a":2}]}`, "a", `"x"`, `{"a":"x","b":[1,{"a":2}]}`, `{"b":[1,{"a":2}]}`},
		{`{"b":2 , "a":{"z":1}}`, "a", `null`, `{"b":2 , "a":null}`, `{"b":2}`},
		{`{"b":2}`, "nvext", `{"r":1}`, `{"b":2,"nvext":{"r":1}}`, `{"b":2}`},
		{`{"\u0061":1,"c":3}`, "a", `5`, `{"\u0061":5,"c":3}`, `{"c":3}`},
	}
	for _, tc := range tests {
		got, err := SetField([]byte(tc.in), tc.key, []byte(tc.val))
		if err != nil || string(got) != tc.set {
			t.Fatalf("SetField(%s, %s) = %s, %v; want %s", tc.in, tc.key, got, err, tc.set)
		}
		got, err = DeleteField([]byte(tc.in), tc.key)
		if err != nil || string(got) != tc.del {
			t.Fatalf("DeleteField(%s, %s) = %s, %v; want %s", tc.in, tc.key, got, err, tc.del)
		}
	}
	if _, err := SetField([]byte(`{"a":`), "a", []byte("1")); err == nil {
		t.Fatal("malformed object accepted")
	}
}

func TestParseUsageAndNVExt(t *testing.T) {
	chunk := []byte(`{"id":"c","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":5,"total_tokens":105,"prompt_tokens_details":{"cached_tokens":64}}}`)
	u, ok, err := ParseUsage(chunk)
	if err != nil || !ok || u.PromptTokens != 100 || u.CompletionTokens != 5 || u.CachedTokens() != 64 {
		t.Fatalf("usage %+v ok %v err %v", u, ok, err)
	}
	if _, ok, _ := ParseUsage([]byte(`{"usage":null}`)); ok {
		t.Fatal("null usage reported")
	}
	out, err := AddNVExt(chunk, &NVExtResponse{Routing: &Routing{WorkerID: 3, OverlapBlocks: 4, Candidates: []RoutingCandidate{{WorkerID: 3, OverlapBlocks: 4, Cost: 1.5}}}})
	if err != nil {
		t.Fatal(err)
	}
	var back ChatChunk
	if err := json.Unmarshal(out, &back); err != nil || back.NVExt == nil || back.NVExt.Routing.WorkerID != 3 || back.Usage.CachedTokens() != 64 {
		t.Fatalf("%s: %+v %v", out, back, err)
	}
}

func TestSSE(t *testing.T) {
	b := AppendSSE(nil, []byte(`{"a":1}`))
	b = AppendSSEError(b, 503, "service_unavailable_error", "worker lost")
	b = append(b, SSEDone...)
	want := "data: {\"a\":1}\n\ndata: {\"error\":{\"message\":\"worker lost\",\"type\":\"service_unavailable_error\",\"param\":null,\"code\":503}}\n\ndata: [DONE]\n\n"
	if string(b) != want {
		t.Fatalf("got %q", b)
	}
}

func TestRewriteMedia(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://a/x.png"}},{"type":"image_url","image_url":{"url":"http://a/y.png"},"uuid":"old"},{"type":"text","text":"hi"}]}]}`)
	req, err := ParseChat(body)
	if err != nil || len(req.Media) != 2 {
		t.Fatalf("parse: %v %d", err, len(req.Media))
	}
	out, err := RewriteMedia(body, req.Media, []string{"u1", "u2"}, nil, "mm_kwargs", [][]byte{[]byte(`{"kind":"shm"}`), nil})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://a/x.png"},"uuid":"u1","mm_kwargs":{"kind":"shm"}},{"type":"image_url","image_url":{"url":"http://a/y.png"},"uuid":"u2"},{"type":"text","text":"hi"}]}]}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	if _, err := RewriteMedia(body, req.Media, []string{"u1"}, nil, "k", [][]byte{nil}); err == nil {
		t.Fatal("length mismatch accepted")
	}
	if _, err := RewriteMedia(body, req.Media, []string{"u1", "u2"}, []string{"x"}, "k", [][]byte{nil, nil}); err == nil {
		t.Fatal("urls length mismatch accepted")
	}
}

// TestRewriteMediaURLs: a URL is replaced in place, before or after an existing uuid, other members of
// the part and of image_url kept; "" keeps a URL.
func TestRewriteMediaURLs(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":[` +
		`{"type":"image_url","uuid":"old","image_url":{"detail":"low","url":"http://a/x.png"}},` +
		`{"type":"image_url","image_url":{"url":"http://a/y.png"},"uuid":"keep"},` +
		`{"type":"image_url","image_url":{"url":"http://a/z.png"}},` +
		`{"type":"text","text":"hi"}]}]}`)
	req, err := ParseChat(body)
	if err != nil || len(req.Media) != 3 {
		t.Fatalf("parse: %v %+v", err, req)
	}
	out, err := RewriteMedia(body, req.Media, []string{"u1", "keep", "u3"}, []string{"data:image/png;base64,QQ==", "data:a\"b", ""},
		"mm_kwargs", [][]byte{nil, []byte(`{"kind":"net"}`), nil})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","messages":[{"role":"user","content":[` +
		`{"type":"image_url","uuid":"u1","image_url":{"detail":"low","url":"data:image/png;base64,QQ=="}},` +
		`{"type":"image_url","image_url":{"url":"data:a\"b"},"uuid":"keep","mm_kwargs":{"kind":"net"}},` +
		`{"type":"image_url","image_url":{"url":"http://a/z.png"},"uuid":"u3"},` +
		`{"type":"text","text":"hi"}]}]}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	again, err := ParseChat(out)
	if err != nil || again.Media[0].URL != "data:image/png;base64,QQ==" || again.Media[1].URL != `data:a"b` || again.Media[2].URL != "http://a/z.png" {
		t.Fatalf("reparsed: %v %+v", err, again.Media)
	}
}
