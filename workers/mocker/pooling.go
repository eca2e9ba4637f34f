package mocker

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/workers/oaiwire"
)

// The pooling endpoints (embeddings, score, rerank) and the stateless Responses API, in vLLM's shapes.
// A pooling request runs its inputs through the engine as one-token requests (prefill: the KV blocks
// and events a real engine's prefix cache would hold); the vectors are made up but deterministic, so
// equal texts embed equally and a text scores highest against itself.

// embedDim is the simulated embedding size.
const embedDim = 32

type poolKind uint8

const (
	poolEmbed poolKind = iota
	poolScore
	poolRerank
)

type poolingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	Text1          json.RawMessage `json:"text_1"`
	Text2          json.RawMessage `json:"text_2"`
	Queries        json.RawMessage `json:"queries"`
	Documents      json.RawMessage `json:"documents"`
	Data1          json.RawMessage `json:"data_1"`
	Data2          json.RawMessage `json:"data_2"`
	Query          *string         `json:"query"`
	TopN           *int            `json:"top_n"`
	RequestID      string          `json:"request_id"`
}

// texts reads a string, a list of strings or a list of {"text"} objects; nil when absent.
func texts(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return []string{s}, err
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		return ss, nil
	}
	var objs []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &objs); err != nil {
		return nil, fmt.Errorf("%w: want a string, strings or {\"text\"} objects", ErrBadRequest)
	}
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Text
	}
	return out, nil
}

// embedInputs reads an embeddings input as token-id lists.
func (w *Worker) embedInputs(raw json.RawMessage) ([][]uint32, error) {
	if ss, err := texts(raw); err == nil && ss != nil {
		out := make([][]uint32, len(ss))
		for i, s := range ss {
			out[i] = w.model.Tok.Encode(s)
		}
		return out, nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return [][]uint32{ids}, nil
	}
	var lists [][]uint32
	if err := json.Unmarshal(raw, &lists); err != nil || len(lists) == 0 {
		return nil, fmt.Errorf("%w: input: want a string, strings or token-id lists", ErrBadRequest)
	}
	return lists, nil
}

// embed is a deterministic unit vector of a token sequence.
func embed(ids []uint32, dim int) []float32 {
	v := make([]float64, dim)
	for i, t := range ids {
		h := uint64(t)*0x9E3779B97F4A7C15 + uint64(i%4)
		for d := range v {
			h ^= h >> 29
			h *= 0xBF58476D1CE4E5B9
			v[d] += float64(int64(h>>11)%2001-1000) / 1000
		}
	}
	var n float64
	for _, x := range v {
		n += x * x
	}
	n = math.Sqrt(n)
	out := make([]float32, dim)
	for d, x := range v {
		if n > 0 {
			out[d] = float32(x / n)
		}
	}
	return out
}

func cosine(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

// runPrefill runs each input through the engine as a one-token request and returns the prompt tokens
// it counted.
func (w *Worker) runPrefill(id string, inputs [][]uint32) (int, error) {
	streams := make([]*Stream, 0, len(inputs))
	for i, ids := range inputs {
		if len(ids) == 0 {
			continue
		}
		s, err := w.Submit(-1, Request{ID: id + "-" + strconv.Itoa(i), Prompt: ids, MaxTokens: 1})
		if err != nil {
			for _, prev := range streams {
				w.Abort(prev)
			}
			return 0, err
		}
		streams = append(streams, s)
	}
	total := 0
	for _, s := range streams {
		st := w.await(s)
		if st.Err != nil {
			return 0, st.Err
		}
		total += st.PromptTokens
	}
	return total, nil
}

func (w *Worker) servePooling(ctx *fasthttp.RequestCtx, kind poolKind) {
	var body poolingRequest
	if err := unmarshalExact(ctx.PostBody(), &body); err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, fmt.Errorf("%w: body: %v", ErrBadRequest, err))
		return
	}
	id := body.RequestID
	if id == "" {
		id = strconv.Itoa(w.cfg.ID) + "-" + strconv.FormatUint(w.nextReq.Add(1), 10)
	}
	created := time.Now().Unix()
	switch kind {
	case poolEmbed:
		w.serveEmbed(ctx, &body, id, created)
	case poolScore:
		w.serveScore(ctx, &body, id, created)
	case poolRerank:
		w.serveRerank(ctx, &body, id)
	}
}

// failBad answers a request the pooling endpoints refuse (err wraps ErrBadRequest).
func failBad(ctx *fasthttp.RequestCtx, err error) { writeError(ctx, submitStatus(err), err) }

// serveEmbed answers /v1/embeddings: one prefill of every input, a deterministic vector per input
// (truncated to dimensions, float or base64).
func (w *Worker) serveEmbed(ctx *fasthttp.RequestCtx, body *poolingRequest, id string, created int64) {
	inputs, err := w.embedInputs(body.Input)
	if err != nil {
		writeError(ctx, submitStatus(err), err)
		return
	}
	dim := embedDim
	if body.Dimensions != nil {
		if *body.Dimensions < 1 || *body.Dimensions > embedDim {
			failBad(ctx, fmt.Errorf("%w: dimensions: want 1..%d", ErrBadRequest, embedDim))
			return
		}
		dim = *body.Dimensions
	}
	if body.EncodingFormat != "" && body.EncodingFormat != "float" && body.EncodingFormat != "base64" {
		failBad(ctx, fmt.Errorf("%w: encoding_format: want float or base64", ErrBadRequest))
		return
	}
	prompt, err := w.runPrefill("embd-"+id, inputs)
	if err != nil {
		writeError(ctx, submitStatus(err), err)
		return
	}
	data := make([]map[string]any, len(inputs))
	for i, ids := range inputs {
		v := embed(ids, embedDim)[:dim]
		var e any = v
		if body.EncodingFormat == "base64" {
			b := make([]byte, 4*len(v))
			for k, x := range v {
				binary.LittleEndian.PutUint32(b[4*k:], math.Float32bits(x))
			}
			e = base64.StdEncoding.EncodeToString(b)
		}
		data[i] = map[string]any{"index": i, "object": "embedding", "embedding": e}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"id": "embd-" + id, "object": "list", "created": created,
		"model": w.model.Name, "data": data, "usage": map[string]any{"prompt_tokens": prompt, "total_tokens": prompt,
			"completion_tokens": 0, "prompt_tokens_details": nil}})
}

// serveScore answers /score: text_1 (one text, or one per text_2; queries or data_1 as aliases) against
// text_2 (documents or data_2), a score per pair.
func (w *Worker) serveScore(ctx *fasthttp.RequestCtx, body *poolingRequest, id string, created int64) {
	a, err1 := texts(body.Text1)
	b, err2 := texts(body.Text2)
	if len(a) == 0 {
		a, err1 = texts(body.Queries)
		if len(a) == 0 {
			a, err1 = texts(body.Data1)
		}
	}
	if len(b) == 0 {
		b, err2 = texts(body.Documents)
		if len(b) == 0 {
			b, err2 = texts(body.Data2)
		}
	}
	if err1 != nil || err2 != nil || len(a) == 0 || len(b) == 0 || (len(a) != 1 && len(a) != len(b)) {
		failBad(ctx, fmt.Errorf("%w: score needs text_1 (one text, or one per text_2) and text_2", ErrBadRequest))
		return
	}
	scores, prompt, err := w.scorePairs(id, a, b)
	if err != nil {
		writeError(ctx, submitStatus(err), err)
		return
	}
	data := make([]map[string]any, len(scores))
	for i, s := range scores {
		data[i] = map[string]any{"index": i, "object": "score", "score": s}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"id": "score-" + id, "object": "list", "created": created,
		"model": w.model.Name, "data": data, "usage": map[string]any{"prompt_tokens": prompt, "total_tokens": prompt}})
}

// serveRerank answers /rerank: the documents scored against the query, best first, top_n of them.
func (w *Worker) serveRerank(ctx *fasthttp.RequestCtx, body *poolingRequest, id string) {
	docs, err := texts(body.Documents)
	if err != nil || body.Query == nil || len(docs) == 0 {
		failBad(ctx, fmt.Errorf("%w: rerank needs query and documents", ErrBadRequest))
		return
	}
	scores, prompt, err := w.scorePairs(id, []string{*body.Query}, docs)
	if err != nil {
		writeError(ctx, submitStatus(err), err)
		return
	}
	order := make([]int, len(docs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool { return scores[order[x]] > scores[order[y]] })
	if body.TopN != nil && *body.TopN > 0 && *body.TopN < len(order) {
		order = order[:*body.TopN]
	}
	results := make([]map[string]any, len(order))
	for i, d := range order {
		results[i] = map[string]any{"index": d, "document": map[string]any{"text": docs[d]}, "relevance_score": scores[d]}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"id": "rerank-" + id, "model": w.model.Name,
		"usage": map[string]any{"total_tokens": prompt}, "results": results})
}

// scorePairs scores each b against a[0] (or a[i] when a has one text per b) in (0, 1): the engine
// prefills each pair as a cross-encoder would.
func (w *Worker) scorePairs(id string, a, b []string) ([]float64, int, error) {
	inputs := make([][]uint32, len(b))
	scores := make([]float64, len(b))
	for i, doc := range b {
		q := a[0]
		if len(a) == len(b) {
			q = a[i]
		}
		qi, di := w.model.Tok.Encode(q), w.model.Tok.Encode(doc)
		inputs[i] = append(append([]uint32(nil), qi...), di...)
		scores[i] = (cosine(embed(qi, embedDim), embed(di, embedDim)) + 1) / 2
	}
	prompt, err := w.runPrefill("score-"+id, inputs)
	return scores, prompt, err
}

// serveResponses answers vLLM's stateless /v1/responses: the input rendered as the chat it stands for
// (oaiwire.ResponsesChat, the same rewrite the router tokenizes), generated, and answered as a
// response object, or streamed as Responses events.
func (w *Worker) serveResponses(ctx *fasthttp.RequestCtx) {
	cb, err := oaiwire.ResponsesChat(ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, fmt.Errorf("%w: %v", ErrBadRequest, err))
		return
	}
	p, err := w.prepare(ctx, cb, true)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err)
		return
	}
	p.req.ID = "resp_" + strings.TrimPrefix(p.req.ID, "chatcmpl-")
	s, err := w.Submit(p.rank, p.req)
	if err != nil {
		writeError(ctx, submitStatus(err), err)
		return
	}
	v := responseView{id: p.req.ID, msgID: "msg_" + strconv.FormatUint(w.nextReq.Add(1), 10), model: w.model.Name,
		created: time.Now().Unix(), maxTokens: p.req.MaxTokens}
	if !p.stream {
		st, ok := w.awaitWhole(ctx, s)
		if !ok {
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, v.object("completed", w.model.Tok.Decode(st.Tokens), &st, len(st.Tokens)))
		return
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetBodyStreamWriter(func(bw *bufio.Writer) { w.streamResponse(bw, s, v) })
}

// responseView builds the Responses API objects of one response: the response, its one message item and
// the item's text part.
type responseView struct {
	id, msgID, model string
	created          int64
	maxTokens        int
}

// object is the response in status; with st (done) it carries the message and the usage.
func (v responseView) object(status, text string, st *StreamState, out int) map[string]any {
	r := map[string]any{"id": v.id, "object": "response", "created_at": v.created, "model": v.model,
		"status": status, "output": []any{}, "parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{},
		"error": nil, "incomplete_details": nil, "instructions": nil, "metadata": nil, "temperature": 1.0, "top_p": 1.0,
		"max_output_tokens": v.maxTokens, "previous_response_id": nil, "reasoning": nil, "text": map[string]any{"format": map[string]any{"type": "text"}},
		"truncation": "disabled", "usage": nil, "user": nil, "background": false, "service_tier": "auto"}
	if st != nil {
		r["output"] = []any{map[string]any{"id": v.msgID, "type": "message", "role": "assistant", "status": "completed",
			"content": []any{responsePart(text)}}}
		r["usage"] = map[string]any{"input_tokens": st.PromptTokens, "output_tokens": out, "total_tokens": st.PromptTokens + out,
			"input_tokens_details": map[string]any{"cached_tokens": st.CachedTokens}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}
	}
	return r
}

// item is the message item in status, with its text part when text is set.
func (v responseView) item(status string, text any) map[string]any {
	content := []any{}
	if text != nil {
		content = []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": nil}}
	}
	return map[string]any{"id": v.msgID, "type": "message", "role": "assistant", "status": status, "content": content}
}

func responsePart(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": nil}
}

// streamResponse writes the Responses API event stream of s: created, in_progress, the item and part
// added, a text delta per token, then the done events and completed (or an error event). A client that
// leaves aborts the request.
func (w *Worker) streamResponse(bw *bufio.Writer, s *Stream, v responseView) {
	seq := 0
	emit := func(typ string, m map[string]any) bool {
		m["type"], m["sequence_number"] = typ, seq
		seq++
		b, _ := json.Marshal(m)
		bw.WriteString("event: ")
		bw.WriteString(typ)
		bw.WriteString("\ndata: ")
		bw.Write(b)
		bw.WriteString("\n\n")
		return bw.Flush() == nil
	}
	msgID := v.msgID
	if !emit("response.created", map[string]any{"response": v.object("in_progress", "", nil, 0)}) ||
		!emit("response.in_progress", map[string]any{"response": v.object("in_progress", "", nil, 0)}) ||
		!emit("response.output_item.added", map[string]any{"output_index": 0, "item": v.item("in_progress", nil)}) ||
		!emit("response.content_part.added", map[string]any{"output_index": 0, "content_index": 0, "item_id": msgID, "part": responsePart("")}) {
		w.Abort(s)
		return
	}
	var toks []uint32
	text := ""
	sent := 0
	for {
		<-s.Notify()
		st := s.Read(sent, toks[:0])
		toks = st.Tokens
		for _, tok := range toks {
			d := w.model.Tok.Decode([]uint32{tok})
			text += d
			if !emit("response.output_text.delta", map[string]any{"output_index": 0, "content_index": 0, "item_id": msgID,
				"delta": d, "logprobs": []any{}}) {
				w.Abort(s)
				return
			}
		}
		sent += len(toks)
		if !st.Done {
			continue
		}
		w.metrics.observe(s.rankIdx, st)
		if st.Err != nil {
			emit("error", map[string]any{"code": "server_error", "message": st.Err.Error(), "param": nil})
			return
		}
		emit("response.output_text.done", map[string]any{"output_index": 0, "content_index": 0, "item_id": msgID, "text": text, "logprobs": []any{}})
		emit("response.content_part.done", map[string]any{"output_index": 0, "content_index": 0, "item_id": msgID, "part": responsePart(text)})
		emit("response.output_item.done", map[string]any{"output_index": 0, "item": v.item("completed", text)})
		emit("response.completed", map[string]any{"response": v.object("completed", text, &st, sent)})
		return
	}
}
