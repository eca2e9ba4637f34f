package mocker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
)

// The rich path answers requests whose response shape depends on sampling options — n > 1, stop,
// logprobs, a forced tool call — in vLLM's shapes, so that a frontend's pass-through of those fields is
// tested end to end. Plain requests keep the allocation-free encoder of openai.go.

// maxN bounds n (vLLM has no bound of its own; a simulator needs one).
const maxN = 128

// richOpts are the response-shaping options of a request.
type richOpts struct {
	n           int
	stop        []string
	logprobs    bool
	topLogprobs int
	// tool is the function a tool_choice forces ("" none), with its parameters schema.
	tool       string
	toolParams json.RawMessage
}

func (o *richOpts) active() bool {
	return o.n > 1 || len(o.stop) > 0 || o.logprobs || o.tool != ""
}

// parseRich reads n, stop, logprobs / top_logprobs and tool_choice from a parsed body.
func parseRich(body *openAIRequest, chat bool) (richOpts, error) {
	o := richOpts{n: 1}
	if body.N != nil {
		if *body.N < 1 || *body.N > maxN {
			return o, fmt.Errorf("%w: n=%d: want 1..%d", ErrBadRequest, *body.N, maxN)
		}
		o.n = *body.N
	}
	if s := bytes.TrimSpace(body.Stop); len(s) > 0 && string(s) != "null" {
		if s[0] == '"' {
			var one string
			if err := json.Unmarshal(s, &one); err != nil {
				return o, fmt.Errorf("%w: stop: %v", ErrBadRequest, err)
			}
			o.stop = []string{one}
		} else if err := json.Unmarshal(s, &o.stop); err != nil {
			return o, fmt.Errorf("%w: stop: want a string or a list of strings", ErrBadRequest)
		}
		o.stop = dropEmpty(o.stop)
	}
	if l := bytes.TrimSpace(body.Logprobs); len(l) > 0 && string(l) != "null" && string(l) != "false" {
		if chat {
			if string(l) != "true" {
				return o, fmt.Errorf("%w: logprobs: want a boolean", ErrBadRequest)
			}
			o.logprobs = true
			if body.TopLogprobs != nil {
				o.topLogprobs = *body.TopLogprobs
			}
		} else {
			k, err := strconv.Atoi(string(l))
			if err != nil || k < 0 || k > 20 {
				return o, fmt.Errorf("%w: logprobs: want an integer 0..20", ErrBadRequest)
			}
			o.logprobs, o.topLogprobs = true, k
		}
	}
	if o.topLogprobs < 0 || o.topLogprobs > 20 {
		return o, fmt.Errorf("%w: top_logprobs: want 0..20", ErrBadRequest)
	}
	if chat {
		name, params, err := forcedTool(body.ToolChoice, body.Tools)
		if err != nil {
			return o, err
		}
		o.tool, o.toolParams = name, params
	}
	return o, nil
}

func dropEmpty(ss []string) []string {
	out := ss[:0]
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

type toolDef struct {
	Type     string `json:"type"`
	Function struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// forcedTool returns the function tool_choice forces: a named function, or the first tool with
// "required". "auto" and "none" force nothing (the simulator then answers with text).
func forcedTool(choice json.RawMessage, tools []json.RawMessage) (string, json.RawMessage, error) {
	c := bytes.TrimSpace(choice)
	if len(c) == 0 || string(c) == "null" || string(c) == `"auto"` || string(c) == `"none"` {
		return "", nil, nil
	}
	defs := make([]toolDef, len(tools))
	for i, t := range tools {
		if err := json.Unmarshal(t, &defs[i]); err != nil || defs[i].Function.Name == "" {
			return "", nil, fmt.Errorf("%w: tools[%d]: want {\"type\":\"function\",\"function\":{\"name\":...}}", ErrBadRequest, i)
		}
	}
	if string(c) == `"required"` {
		if len(defs) == 0 {
			return "", nil, fmt.Errorf("%w: tool_choice required needs tools", ErrBadRequest)
		}
		return defs[0].Function.Name, defs[0].Function.Parameters, nil
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(c, &named); err != nil || named.Function.Name == "" {
		return "", nil, fmt.Errorf("%w: tool_choice: want \"auto\", \"none\", \"required\" or {\"type\":\"function\",\"function\":{\"name\":...}}", ErrBadRequest)
	}
	for _, d := range defs {
		if d.Function.Name == named.Function.Name {
			return d.Function.Name, d.Function.Parameters, nil
		}
	}
	return "", nil, fmt.Errorf("%w: tool_choice names %q, which is not in tools", ErrBadRequest, named.Function.Name)
}

// toolArguments builds arguments that satisfy the schema's types: a placeholder per property.
func toolArguments(params json.RawMessage) string {
	var schema struct {
		Properties map[string]struct {
			Type string          `json:"type"`
			Enum []any           `json:"enum"`
			Raw  json.RawMessage `json:"-"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	args := map[string]any{}
	if json.Unmarshal(params, &schema) == nil {
		for k, p := range schema.Properties {
			switch {
			case len(p.Enum) > 0:
				args[k] = p.Enum[0]
			case p.Type == "integer" || p.Type == "number":
				args[k] = 0
			case p.Type == "boolean":
				args[k] = false
			case p.Type == "array":
				args[k] = []any{}
			case p.Type == "object":
				args[k] = map[string]any{}
			default:
				args[k] = "mock"
			}
		}
	}
	b, _ := json.Marshal(args)
	return string(b)
}

// seqResult is one sequence's answer.
type seqResult struct {
	tokens []uint32
	text   string
	finish string
	stop   any // vLLM's stop_reason: the matched stop string, or null
}

// cutStop truncates text at its first stop string and reports which one.
func cutStop(text string, stops []string) (string, string, bool) {
	best, which := -1, ""
	for _, s := range stops {
		if i := strings.Index(text, s); i >= 0 && (best < 0 || i < best) {
			best, which = i, s
		}
	}
	if best < 0 {
		return text, "", false
	}
	return text[:best], which, true
}

// logprob is a deterministic made-up log-probability for a token (shape, not meaning).
func logprob(tok uint32, rank int) float64 {
	return -float64(tok%97+1)/100 - float64(rank)
}

func (w *Worker) chatLogprobs(toks []uint32, top int) map[string]any {
	content := make([]map[string]any, len(toks))
	for i, t := range toks {
		s := w.model.Tok.Decode([]uint32{t})
		tops := make([]map[string]any, top)
		for r := range top {
			alt := t + uint32(r)
			as := w.model.Tok.Decode([]uint32{alt})
			tops[r] = map[string]any{"token": as, "logprob": logprob(alt, r), "bytes": bytesOf(as)}
		}
		content[i] = map[string]any{"token": s, "logprob": logprob(t, 0), "bytes": bytesOf(s), "top_logprobs": tops}
	}
	return map[string]any{"content": content}
}

func (w *Worker) completionLogprobs(toks []uint32, top int) map[string]any {
	tokens := make([]string, len(toks))
	lps := make([]float64, len(toks))
	offsets := make([]int, len(toks))
	tops := make([]map[string]float64, len(toks))
	off := 0
	for i, t := range toks {
		tokens[i] = w.model.Tok.Decode([]uint32{t})
		lps[i] = logprob(t, 0)
		offsets[i] = off
		off += len(tokens[i])
		m := map[string]float64{tokens[i]: lps[i]}
		for r := 1; r < top; r++ {
			m[w.model.Tok.Decode([]uint32{t + uint32(r)})] = logprob(t+uint32(r), r)
		}
		tops[i] = m
	}
	return map[string]any{"tokens": tokens, "token_logprobs": lps, "text_offset": offsets, "top_logprobs": tops}
}

func bytesOf(s string) []int {
	b := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		b[i] = int(s[i])
	}
	return b
}

// serveRich answers a request whose options shape the response: n sequences (each its own engine
// request over the same prompt: the prefix cache shares the prompt's blocks), stop strings, logprobs,
// a forced tool call.
func (w *Worker) serveRich(ctx *fasthttp.RequestCtx, p prepared, o richOpts) {
	streams, ok := w.submitN(ctx, p, o.n)
	if !ok {
		return
	}
	created := time.Now().Unix()
	if !p.stream {
		w.writeRichUnary(ctx, p, o, streams, created)
		return
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetBodyStreamWriter(func(bw *bufio.Writer) { w.streamRich(bw, p, o, streams, created) })
}

// submitN submits the request's n sequences (ids suffixed -1, -2, ... after the first); on a refusal it
// aborts those already submitted, answers the error and returns false.
func (w *Worker) submitN(ctx *fasthttp.RequestCtx, p prepared, n int) ([]*Stream, bool) {
	streams := make([]*Stream, n)
	for i := range streams {
		req := p.req
		if i > 0 {
			req.ID = p.req.ID + "-" + strconv.Itoa(i)
		}
		s, err := w.Submit(p.rank, req)
		if err != nil {
			for _, prev := range streams[:i] {
				w.Abort(prev)
			}
			writeError(ctx, submitStatus(err), err)
			return nil, false
		}
		streams[i] = s
	}
	return streams, true
}

// writeRichUnary waits for every sequence and answers one JSON body with a choice per sequence.
func (w *Worker) writeRichUnary(ctx *fasthttp.RequestCtx, p prepared, o richOpts, streams []*Stream, created int64) {
	object := "text_completion"
	if p.chat {
		object = "chat.completion"
	}
	choices := make([]map[string]any, len(streams))
	var prompt, cached, completion int
	for i, s := range streams {
		st, ok := w.awaitWhole(ctx, s)
		if !ok {
			return
		}
		prompt, cached = st.PromptTokens, st.CachedTokens
		completion += len(st.Tokens)
		choices[i] = w.richChoice(i, w.finishSeq(st.Tokens, o), o, p.chat, false)
	}
	u := makeUsage(StreamState{PromptTokens: prompt, CachedTokens: cached}, completion)
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"id": p.req.ID, "object": object, "created": created,
		"model": w.model.Name, "choices": choices, "usage": u})
}

// richTotals is what the usage chunk of a streamed rich request reports.
type richTotals struct{ prompt, cached, completion int }

// streamRich writes the SSE stream of a rich request: one sequence after the other, each streamed as its
// tokens come (a client assembles the choices by index, as it does from vLLM's interleaved chunks), then
// the usage chunk when asked for and [DONE]. A client that leaves or an engine failure aborts every
// sequence.
func (w *Worker) streamRich(bw *bufio.Writer, p prepared, o richOpts, streams []*Stream, created int64) {
	chunkObject := "text_completion"
	if p.chat {
		chunkObject = "chat.completion.chunk"
	}
	emit := func(choices []map[string]any, u *usage) bool {
		m := map[string]any{"id": p.req.ID, "object": chunkObject, "created": created, "model": w.model.Name, "choices": choices}
		if u != nil {
			m["usage"] = u
		}
		b, _ := json.Marshal(m)
		bw.WriteString("data: ")
		bw.Write(b)
		bw.WriteString("\n\n")
		return bw.Flush() == nil
	}
	abortAll := func() {
		for _, s := range streams {
			w.Abort(s)
		}
	}
	var t richTotals
	for i, s := range streams {
		if p.chat && !emit([]map[string]any{{"index": i, "delta": map[string]any{"role": "assistant", "content": ""},
			"logprobs": nil, "finish_reason": nil}}, nil) {
			abortAll()
			return
		}
		if !w.streamRichSeq(bw, emit, s, i, p, o, &t) {
			abortAll()
			return
		}
		if o.tool != "" {
			// The call arrives whole in one delta, then the finish chunk.
			call := w.richChoice(i, seqResult{finish: "tool_calls"}, o, true, true)
			finish := call["finish_reason"]
			call["finish_reason"] = nil
			if !emit([]map[string]any{call}, nil) || !emit([]map[string]any{{"index": i, "delta": map[string]any{},
				"logprobs": nil, "finish_reason": finish}}, nil) {
				abortAll()
				return
			}
		}
	}
	if p.usage {
		emit([]map[string]any{}, makeUsage(StreamState{PromptTokens: t.prompt, CachedTokens: t.cached}, t.completion))
	}
	bw.WriteString("data: [DONE]\n\n")
	bw.Flush()
}

// streamRichSeq streams sequence i as its tokens come, a chunk per token, cutting it at the first stop
// string (without a tool call to answer); its counts go into t. False when the client left or the engine
// failed (an error chunk and [DONE] are written then): the caller aborts the request.
func (w *Worker) streamRichSeq(bw *bufio.Writer, emit func([]map[string]any, *usage) bool, s *Stream, i int, p prepared, o richOpts, t *richTotals) bool {
	var toks []uint32
	text := ""
	sent := 0
	for done := false; !done; {
		<-s.Notify()
		st := s.Read(sent, toks[:0])
		toks = st.Tokens
		if st.Done && st.Err != nil {
			b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": st.Err.Error(), "type": "ServiceUnavailableError", "code": 503}})
			bw.WriteString("data: ")
			bw.Write(b)
			bw.WriteString("\n\ndata: [DONE]\n\n")
			bw.Flush()
			return false
		}
		for j, tok := range toks {
			piece := w.model.Tok.Decode([]uint32{tok})
			seq := seqResult{tokens: []uint32{tok}, text: piece}
			if o.tool == "" {
				if cut, which, hit := cutStop(text+piece, o.stop); hit {
					seq.text, seq.finish, seq.stop = cut[len(text):], "stop", which
					done = true
					w.Abort(s)
				} else if st.Done && j == len(toks)-1 {
					seq.finish = "length"
				}
			}
			text += seq.text
			if o.tool == "" && !emit([]map[string]any{w.richChoice(i, seq, o, p.chat, true)}, nil) {
				return false
			}
			if done {
				break
			}
		}
		sent += len(toks)
		t.completion += len(toks)
		if st.Done {
			t.prompt, t.cached = st.PromptTokens, st.CachedTokens
			w.metrics.observe(s.rankIdx, st)
			done = true
		}
	}
	return true
}

// finishSeq applies stop strings to a finished sequence.
func (w *Worker) finishSeq(toks []uint32, o richOpts) seqResult {
	r := seqResult{tokens: toks, text: w.model.Tok.Decode(toks), finish: "length"}
	if o.tool != "" {
		r.finish = "tool_calls"
		return r
	}
	if cut, which, hit := cutStop(r.text, o.stop); hit {
		r.text, r.finish, r.stop = cut, "stop", which
	}
	return r
}

// richChoice is one choice (or chunk choice) in vLLM's shape.
func (w *Worker) richChoice(i int, r seqResult, o richOpts, chat, delta bool) map[string]any {
	c := map[string]any{"index": i, "logprobs": nil, "stop_reason": r.stop}
	if r.finish != "" {
		c["finish_reason"] = r.finish
	} else {
		c["finish_reason"] = nil
	}
	if o.logprobs && o.tool == "" {
		if chat {
			c["logprobs"] = w.chatLogprobs(r.tokens, o.topLogprobs)
		} else {
			c["logprobs"] = w.completionLogprobs(r.tokens, o.topLogprobs)
		}
	}
	if !chat {
		c["text"] = r.text
		return c
	}
	msg := map[string]any{"role": "assistant", "content": r.text}
	if delta {
		msg = map[string]any{"content": r.text}
	}
	if o.tool != "" {
		call := map[string]any{"id": "chatcmpl-tool-" + strconv.FormatUint(w.nextReq.Add(1), 10), "type": "function",
			"function": map[string]any{"name": o.tool, "arguments": toolArguments(o.toolParams)}}
		if delta {
			call["index"] = 0
			msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{call}}
		} else {
			msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{call}}
		}
	}
	if delta {
		c["delta"] = msg
	} else {
		msg["reasoning_content"] = nil
		c["message"] = msg
	}
	return c
}

// submitStatus maps a Submit error to its status.
func submitStatus(err error) int {
	switch {
	case errors.Is(err, ErrStopped):
		return fasthttp.StatusServiceUnavailable
	case !errors.Is(err, ErrBadRequest):
		return fasthttp.StatusInternalServerError
	}
	return fasthttp.StatusBadRequest
}
