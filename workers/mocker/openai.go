package mocker

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/goccy/go-json"
	jsonv2 "github.com/goccy/go-json/v2"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/model"
)

// openAIRequest is the union of the completion and chat request fields the mocker reads.
// exactNames decode as encoding/json does but match member names exactly, as vLLM's pydantic models
// do: "Messages" or "Image_URL" is an unknown field, not the one it folds to.
var exactNames = []jsonv2.Options{json.DefaultOptionsV1(), jsonv2.MatchCaseInsensitiveNames(false)}

func unmarshalExact(b []byte, v any) error { return jsonv2.Unmarshal(b, v, exactNames...) }

type openAIRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []rawMessage    `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	CacheSalt           string `json:"cache_salt"`
	RequestID           string `json:"request_id"`
	DataParallelRank    *int   `json:"data_parallel_rank"`
	AddGenerationPrompt *bool  `json:"add_generation_prompt"`
	// ContinueFinalMessage renders the last message open-ended (vLLM's continue_final_message).
	ContinueFinalMessage bool     `json:"continue_final_message"`
	ReturnTokenStrs      bool     `json:"return_token_strs"`
	Tokens               []uint32 `json:"tokens"`
	// Tools and ChatTemplateKwargs are chat template inputs, rendered as the router renders them.
	Tools              []json.RawMessage `json:"tools"`
	ChatTemplateKwargs map[string]any    `json:"chat_template_kwargs"`
	// KVTransferParams is vLLM's disaggregated prefill/decode handshake (disagg.go).
	KVTransferParams *KVTransferParams `json:"kv_transfer_params"`
	// Stop, Logprobs, TopLogprobs and ToolChoice shape the answer (rich.go).
	Stop        json.RawMessage `json:"stop"`
	Logprobs    json.RawMessage `json:"logprobs"`
	TopLogprobs *int            `json:"top_logprobs"`
	ToolChoice  json.RawMessage `json:"tool_choice"`
}

// fullMessages is the messages of a chat body decoded as the router decodes them (model.Message).
type fullMessages struct {
	Messages []model.Message `json:"messages"`
}

// chatMessages parses a chat body's messages: the parts the engine needs (images) and, for the
// template, each whole message as the router reads it.
func chatMessages(raw []byte, body *openAIRequest) ([]ChatMessage, error) {
	msgs, err := parseMessages(body.Messages)
	if err != nil {
		return nil, err
	}
	var full fullMessages
	if err := json.Unmarshal(raw, &full); err == nil && len(full.Messages) == len(msgs) {
		for i := range msgs {
			msgs[i].Msg = &full.Messages[i]
		}
	}
	return msgs, nil
}

// chatOptions are the request's template inputs.
func chatOptions(body *openAIRequest) model.ChatOptions {
	return model.ChatOptions{AddGenerationPrompt: addGenerationPrompt(body), Tools: body.Tools, Kwargs: body.ChatTemplateKwargs}
}

type rawMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type rawPart struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	ImageURL json.RawMessage `json:"image_url"`
	UUID     *string         `json:"uuid"`
	MMKwargs json.RawMessage `json:"mm_kwargs"` // mm transfer hook (mm_transfer.go)
}

// prepared is a parsed request ready for the engine.
type prepared struct {
	req    Request
	rank   int
	stream bool
	usage  bool // stream_options.include_usage
	chat   bool
	rich   richOpts // n, stop, logprobs, forced tool (rich.go)
}

func (w *Worker) handle(ctx *fasthttp.RequestCtx) {
	path := ctx.Path() // compared as string(path): no copy
	if w.cfg.APIKey != "" && bytes.HasPrefix(path, []byte("/v1")) && !bearerIs(ctx, w.cfg.APIKey) {
		writeJSON(ctx, fasthttp.StatusUnauthorized, map[string]string{"error": "Unauthorized"}) // vLLM's body
		return
	}
	switch {
	case string(path) == "/v1/completions" && ctx.IsPost():
		w.serveGenerate(ctx, false)
	case string(path) == "/v1/chat/completions" && ctx.IsPost():
		w.serveGenerate(ctx, true)
	case string(path) == "/v1/responses" && ctx.IsPost():
		w.serveResponses(ctx)
	case string(path) == "/v1/embeddings" && ctx.IsPost():
		w.servePooling(ctx, poolEmbed)
	case (string(path) == "/v1/score" || string(path) == "/score") && ctx.IsPost():
		w.servePooling(ctx, poolScore)
	case (string(path) == "/v1/rerank" || string(path) == "/rerank" || string(path) == "/v2/rerank") && ctx.IsPost():
		w.servePooling(ctx, poolRerank)
	case string(path) == "/v1/models" && ctx.IsGet():
		w.serveModels(ctx)
	case string(path) == "/health" || string(path) == "/ping":
		ctx.SetStatusCode(fasthttp.StatusOK)
	case string(path) == "/version":
		writeJSON(ctx, fasthttp.StatusOK, map[string]string{"version": "kvroute-mocker"})
	case string(path) == "/tokenize" && ctx.IsPost():
		w.serveTokenize(ctx)
	case string(path) == "/detokenize" && ctx.IsPost():
		w.serveDetokenize(ctx)
	case string(path) == "/reset_prefix_cache" && ctx.IsPost():
		if err := w.ResetPrefixCache(); err != nil {
			writeError(ctx, fasthttp.StatusConflict, err)
			return
		}
		ctx.SetStatusCode(fasthttp.StatusOK)
	case string(path) == "/metrics" && ctx.IsGet():
		ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
		ctx.SetBody(w.appendMetrics(nil))
	case string(path) == "/debug/kv_blocks" && ctx.IsGet():
		w.serveKVBlocks(ctx)
	default:
		writeError(ctx, fasthttp.StatusNotFound, fmt.Errorf("mocker: no route %s %s", ctx.Method(), path))
	}
}

// bearerIs checks the request's bearer token in constant time.
func bearerIs(ctx *fasthttp.RequestCtx, key string) bool {
	return subtle.ConstantTimeCompare(ctx.Request.Header.Peek("Authorization"), []byte("Bearer "+key)) == 1
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		ctx.Error(err.Error(), fasthttp.StatusInternalServerError)
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// writeError writes vLLM's error body.
func writeError(ctx *fasthttp.RequestCtx, status int, err error) {
	typ := "BadRequestError"
	switch status {
	case fasthttp.StatusNotFound:
		typ = "NotFoundError"
	case fasthttp.StatusConflict:
		typ = "ConflictError"
	case fasthttp.StatusServiceUnavailable:
		typ = "ServiceUnavailableError"
	}
	writeJSON(ctx, status, map[string]any{"error": map[string]any{"message": err.Error(), "type": typ, "param": nil, "code": status}})
}

// parsePrompt accepts a string, a token-id list, or a one-element list of either.
func (w *Worker) parsePrompt(raw json.RawMessage) ([]uint32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: prompt is required", ErrBadRequest)
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("%w: prompt: %v", ErrBadRequest, err)
		}
		return w.model.Tok.Encode(s), nil
	}
	if ids, ok := parseTokenIDs(raw); ok {
		return ids, nil
	}
	var ids []uint32
	if err := json.Unmarshal(raw, &ids); err == nil {
		return ids, nil
	}
	var many []json.RawMessage
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("%w: prompt must be a string or a list of token ids", ErrBadRequest)
	}
	if len(many) != 1 {
		return nil, fmt.Errorf("%w: batched prompts (%d) are not supported; send one prompt per request", ErrBadRequest, len(many))
	}
	return w.parsePrompt(many[0])
}

// parseMessages turns OpenAI chat messages into ChatMessages.
func parseMessages(raw []rawMessage) ([]ChatMessage, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: messages is required", ErrBadRequest)
	}
	out := make([]ChatMessage, 0, len(raw))
	for i, m := range raw {
		cm := ChatMessage{Role: m.Role}
		c := bytes.TrimSpace(m.Content)
		switch {
		case len(c) == 0 || string(c) == "null":
		case c[0] == '"':
			var s string
			if err := json.Unmarshal(c, &s); err != nil {
				return nil, fmt.Errorf("%w: messages[%d].content: %v", ErrBadRequest, i, err)
			}
			cm.Parts = []ChatPart{{Text: s}}
		default:
			var parts []rawPart
			if err := unmarshalExact(c, &parts); err != nil {
				return nil, fmt.Errorf("%w: messages[%d].content: %v", ErrBadRequest, i, err)
			}
			for j, p := range parts {
				switch p.Type {
				case "text", "input_text":
					cm.Parts = append(cm.Parts, ChatPart{Text: p.Text})
				case "image_url", "image":
					cp := ChatPart{Image: true, MMKwargs: p.MMKwargs} // mm transfer hook: MMKwargs
					if p.UUID != nil {
						cp.UUID = *p.UUID
					}
					if u := bytes.TrimSpace(p.ImageURL); len(u) > 0 && string(u) != "null" {
						if u[0] == '"' {
							_ = json.Unmarshal(u, &cp.URL)
						} else {
							var obj struct {
								URL string `json:"url"`
							}
							if err := unmarshalExact(u, &obj); err != nil {
								return nil, fmt.Errorf("%w: messages[%d].content[%d].image_url: %v", ErrBadRequest, i, j, err)
							}
							cp.URL = obj.URL
						}
					}
					cm.Parts = append(cm.Parts, cp)
				default:
					return nil, fmt.Errorf("%w: messages[%d].content[%d]: unsupported part type %q", ErrBadRequest, i, j, p.Type)
				}
			}
		}
		out = append(out, cm)
	}
	return out, nil
}

// chatPrompt renders and tokenizes messages and expands each image's single placeholder to its token
// count, recording the images' placeholder ranges for the block extra keys.
func (w *Worker) chatPrompt(msgs []ChatMessage, opts model.ChatOptions, cont bool) ([]uint32, []MMItem, error) {
	if cont && opts.AddGenerationPrompt {
		return nil, nil, fmt.Errorf("%w: continue_final_message cannot be combined with add_generation_prompt", ErrBadRequest)
	}
	text, err := w.model.RenderChat(msgs, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: chat template: %v", ErrBadRequest, err)
	}
	if cont {
		if text, err = continueFinal(text, msgs); err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
	}
	ids := w.model.Tok.Encode(text)
	var images []ChatPart
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Image {
				images = append(images, p)
			}
		}
	}
	if len(images) == 0 {
		return ids, nil, nil
	}
	out := make([]uint32, 0, len(ids))
	var mm []MMItem
	next := 0
	for _, id := range ids {
		if id != w.model.ImagePadID || next >= len(images) {
			out = append(out, id)
			continue
		}
		ident, iw, ih, err := w.resolveImage(images[next]) // mm transfer hook: was w.images.resolve
		if err != nil {
			return nil, nil, err
		}
		if w.model.Layout.Kind != "" {
			start := len(out)
			out = w.model.Layout.write(out, iw, ih)
			mm = append(mm, MMItem{ID: ident, Offset: start, Length: len(out) - start})
			next++
			continue
		}
		n := w.model.ImageTokens(iw, ih)
		if w.model.CountImage != nil {
			n = w.model.CountImage(iw, ih)
		}
		mm = append(mm, MMItem{ID: ident, Offset: len(out), Length: n})
		for range n {
			out = append(out, w.model.ImagePadID)
		}
		next++
	}
	if next != len(images) {
		return nil, nil, fmt.Errorf("%w: chat template rendered %d image placeholders for %d images", ErrBadRequest, next, len(images))
	}
	return out, mm, nil
}

func (w *Worker) prepare(ctx *fasthttp.RequestCtx, raw []byte, chat bool) (prepared, error) {
	var body openAIRequest
	if err := unmarshalExact(raw, &body); err != nil {
		return prepared{}, fmt.Errorf("%w: body: %v", ErrBadRequest, err)
	}
	rich, err := parseRich(&body, chat)
	if err != nil {
		return prepared{}, err
	}
	p := prepared{stream: body.Stream, chat: chat, rank: -1, rich: rich}
	p.usage = body.StreamOptions != nil && body.StreamOptions.IncludeUsage
	if chat {
		msgs, err := chatMessages(raw, &body)
		if err != nil {
			return prepared{}, err
		}
		p.req.Prompt, p.req.MM, err = w.chatPrompt(msgs, chatOptions(&body), body.ContinueFinalMessage)
		if err != nil {
			return prepared{}, err
		}
	} else if p.req.Prompt, err = w.parsePrompt(body.Prompt); err != nil {
		return prepared{}, err
	}
	// As vLLM: max_completion_tokens, else max_tokens (deprecated by OpenAI for chat), else the default.
	p.req.MaxTokens = w.cfg.DefaultMaxTokens
	if body.MaxTokens != nil {
		p.req.MaxTokens = *body.MaxTokens
	}
	if body.MaxCompletionTokens != nil {
		p.req.MaxTokens = *body.MaxCompletionTokens
	}
	p.req.CacheSalt = body.CacheSalt
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	if body.RequestID != "" {
		p.req.ID = body.RequestID
	} else {
		var b [48]byte
		id := append(b[:0], prefix...)
		id = strconv.AppendInt(id, int64(w.cfg.ID), 10)
		id = append(id, '-')
		id = strconv.AppendUint(id, w.nextReq.Add(1), 10)
		p.req.ID = string(id)
	}
	if body.DataParallelRank != nil {
		p.rank = *body.DataParallelRank
	}
	if h := ctx.Request.Header.Peek("X-data-parallel-rank"); len(h) > 0 {
		r, err := strconv.Atoi(string(h))
		if err != nil {
			return prepared{}, fmt.Errorf("%w: X-data-parallel-rank %q", ErrBadRequest, h)
		}
		p.rank = r
	}
	if err := w.applyKVTransfer(&p, body.KVTransferParams); err != nil {
		return prepared{}, err
	}
	return p, nil
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	TotalTokens         int `json:"total_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func makeUsage(st StreamState, completion int) *usage {
	u := &usage{PromptTokens: st.PromptTokens, CompletionTokens: completion, TotalTokens: st.PromptTokens + completion}
	u.PromptTokensDetails.CachedTokens = st.CachedTokens
	return u
}

// bodyPool holds scratch buffers for response bodies (fasthttp copies the body).
var bodyPool = sync.Pool{New: func() any { return new([]byte) }}

func (w *Worker) serveGenerate(ctx *fasthttp.RequestCtx, chat bool) {
	p, err := w.prepare(ctx, ctx.PostBody(), chat)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err)
		return
	}
	if p.req.RemoteBlocks > 0 {
		// Disaggregated decode: pull the prefill worker's blocks first (the transfer time).
		var d time.Duration
		d, p.rank = w.pullDelay(p.rank, p.req)
		if !w.wait(d) {
			writeError(ctx, fasthttp.StatusServiceUnavailable, ErrStopped)
			return
		}
	}
	if p.rich.active() {
		w.serveRich(ctx, p, p.rich)
		return
	}
	s, err := w.Submit(p.rank, p.req)
	if err != nil {
		writeError(ctx, submitStatus(err), err)
		return
	}
	created := time.Now().Unix()
	object, chunkObject := "text_completion", "text_completion"
	if chat {
		object, chunkObject = "chat.completion", "chat.completion.chunk"
	}
	if !p.stream {
		w.writeUnary(ctx, s, p.req.ID, p.req.RemoteDecode, object, created, chat)
		return
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	id, withUsage := p.req.ID, p.usage // the writer keeps these, not p (which then stays on the stack)
	ctx.SetBodyStreamWriter(func(bw *bufio.Writer) { w.streamGenerate(bw, s, id, chunkObject, created, chat, withUsage) })
}

// writeUnary waits for s and answers the whole completion in one body (with the KV transfer parameters
// of a prefill for a remote decoder).
func (w *Worker) writeUnary(ctx *fasthttp.RequestCtx, s *Stream, id string, remoteDecode bool, object string, created int64, chat bool) {
	st, ok := w.awaitWhole(ctx, s)
	if !ok {
		return
	}
	c := respChoice{chat: chat, text: w.model.Tok.Decode(st.Tokens), finish: true}
	if chat {
		c.role = "assistant"
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	buf := bodyPool.Get().(*[]byte)
	*buf = appendBody((*buf)[:0], id, object, created, w.model.Name, &c, makeUsage(st, len(st.Tokens)))
	if remoteDecode {
		*buf = w.appendKVTransfer(*buf, s.rankIdx, st.BlockIDs)
	}
	ctx.SetBody(*buf) // copies
	bodyPool.Put(buf)
}

// streamGenerate writes s as SSE chunks, one per token as they come, then the usage chunk when asked for
// (or an error chunk) and [DONE]. A client that leaves aborts the request.
func (w *Worker) streamGenerate(bw *bufio.Writer, s *Stream, id, chunkObject string, created int64, chat, withUsage bool) {
	var toks []uint32
	sent := 0
	var buf []byte
	emitRaw := func(b []byte) bool {
		bw.WriteString("data: ")
		bw.Write(b)
		bw.WriteString("\n\n")
		return bw.Flush() == nil
	}
	emit := func(c *respChoice, u *usage) bool {
		buf = appendBody(buf[:0], id, chunkObject, created, w.model.Name, c, u)
		return emitRaw(buf)
	}
	if chat && !emit(&respChoice{chat: true, delta: true, role: "assistant"}, nil) {
		w.Abort(s)
		return
	}
	for {
		<-s.Notify()
		st := s.Read(sent, toks[:0])
		toks = st.Tokens
		for i, tok := range toks {
			c := respChoice{chat: chat, delta: true, text: w.model.Tok.Decode([]uint32{tok}),
				finish: st.Done && st.Err == nil && i == len(toks)-1}
			if !emit(&c, nil) {
				w.Abort(s)
				return
			}
		}
		sent += len(toks)
		if st.Done {
			w.metrics.observe(s.rankIdx, st)
			if st.Err != nil {
				b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": st.Err.Error(), "type": "ServiceUnavailableError", "code": 503}})
				emitRaw(b)
			} else if withUsage {
				emit(nil, makeUsage(st, sent))
			}
			bw.WriteString("data: [DONE]\n\n")
			bw.Flush()
			return
		}
	}
}

func (w *Worker) serveModels(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": w.model.Name, "object": "model", "created": time.Now().Unix(), "owned_by": "vllm",
			"root": w.model.Root, "parent": nil, "max_model_len": w.maxModelLen(),
		}},
	})
}

func (w *Worker) maxModelLen() int {
	if w.cfg.Engine.MaxModelLen > 0 {
		return w.cfg.Engine.MaxModelLen
	}
	return min(w.model.MaxModelLen, w.cfg.Engine.NumGPUBlocks*w.cfg.Engine.BlockSize)
}

func (w *Worker) serveTokenize(ctx *fasthttp.RequestCtx) {
	var body openAIRequest
	if err := unmarshalExact(ctx.PostBody(), &body); err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, fmt.Errorf("%w: body: %v", ErrBadRequest, err))
		return
	}
	var ids []uint32
	var err error
	if len(body.Messages) > 0 {
		var msgs []ChatMessage
		if msgs, err = chatMessages(ctx.PostBody(), &body); err == nil {
			ids, _, err = w.chatPrompt(msgs, chatOptions(&body), body.ContinueFinalMessage)
		}
	} else {
		ids, err = w.parsePrompt(body.Prompt)
	}
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err)
		return
	}
	resp := map[string]any{"count": len(ids), "max_model_len": w.maxModelLen(), "tokens": ids}
	if body.ReturnTokenStrs {
		strs := make([]string, len(ids))
		for i, id := range ids {
			strs[i] = w.model.Tok.Decode([]uint32{id})
		}
		resp["token_strs"] = strs
	}
	writeJSON(ctx, fasthttp.StatusOK, resp)
}

func (w *Worker) serveDetokenize(ctx *fasthttp.RequestCtx) {
	var body openAIRequest
	if err := unmarshalExact(ctx.PostBody(), &body); err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, fmt.Errorf("%w: body: %v", ErrBadRequest, err))
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]string{"prompt": w.model.Tok.Decode(body.Tokens)})
}

// kvBlocksRank is one rank's ground truth in GET /debug/kv_blocks.
type kvBlocksRank struct {
	DPRank       int           `json:"dp_rank"`
	NumGPUBlocks int           `json:"num_gpu_blocks"`
	UsedBlocks   int           `json:"used_blocks"`
	Blocks       []CachedBlock `json:"blocks"`
}

// KVBlocksResponse is the body of GET /debug/kv_blocks.
type KVBlocksResponse struct {
	BlockSize int            `json:"block_size"`
	Ranks     []kvBlocksRank `json:"ranks"`
}

func (w *Worker) serveKVBlocks(ctx *fasthttp.RequestCtx) {
	resp := KVBlocksResponse{BlockSize: w.cfg.Engine.BlockSize}
	for i := range w.ranks {
		st := w.Stats(i)
		resp.Ranks = append(resp.Ranks, kvBlocksRank{DPRank: i, NumGPUBlocks: st.Blocks, UsedBlocks: st.UsedBlocks, Blocks: w.CachedBlocks(i)})
	}
	writeJSON(ctx, fasthttp.StatusOK, resp)
}

// parseTokenIDs is the fast path for the benchmarks' token-id prompts: a flat JSON array of non-negative
// integers below 2^32. Anything else (floats, exponents, nesting) reports false and takes the JSON decoder.
func parseTokenIDs(raw []byte) ([]uint32, bool) {
	if len(raw) < 2 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return nil, false
	}
	body := raw[1 : len(raw)-1]
	ids := make([]uint32, 0, len(body)/4+1)
	i, n := 0, len(body)
	for i < n && isJSONSpace(body[i]) {
		i++
	}
	if i == n {
		return ids, true
	}
	for {
		for i < n && isJSONSpace(body[i]) {
			i++
		}
		start := i
		var v uint64
		for i < n {
			c := body[i] - '0'
			if c > 9 {
				break
			}
			v = v*10 + uint64(c)
			i++
		}
		if d := i - start; d == 0 || d > 10 || (d > 1 && body[start] == '0') || v > 1<<32-1 {
			return nil, false
		}
		ids = append(ids, uint32(v))
		for i < n && isJSONSpace(body[i]) {
			i++
		}
		if i == n {
			return ids, true
		}
		if body[i] != ',' {
			return nil, false
		}
		i++
	}
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// addGenerationPrompt is vLLM's default: on, unless the request continues its final message.
func addGenerationPrompt(body *openAIRequest) bool {
	if body.AddGenerationPrompt != nil {
		return *body.AddGenerationPrompt
	}
	return !body.ContinueFinalMessage
}

// continueFinal cuts a prompt rendered without a generation prompt after the final message's text, as
// vLLM (transformers' apply_chat_template) does for continue_final_message.
func continueFinal(text string, msgs []ChatMessage) (string, error) {
	if len(msgs) == 0 {
		return "", fmt.Errorf("continue_final_message needs a final message")
	}
	parts := msgs[len(msgs)-1].Parts
	for i := len(parts) - 1; i >= 0; i-- {
		if !parts[i].Image {
			n, err := model.ContinueCut(text, parts[i].Text)
			if err != nil {
				return "", err
			}
			return text[:n], nil
		}
	}
	return "", fmt.Errorf("continue_final_message: the final message has no text to continue")
}

// await waits until s has finished and returns its whole state, observed into the worker's metrics.
func (w *Worker) await(s *Stream) StreamState {
	<-s.Finished()
	st := s.Read(0, nil)
	w.metrics.observe(s.rankIdx, st)
	return st
}

// awaitWhole is await for a unary answer: a failed stream is answered 503 here (ok false).
func (w *Worker) awaitWhole(ctx *fasthttp.RequestCtx, s *Stream) (st StreamState, ok bool) {
	st = w.await(s)
	if st.Err != nil {
		writeError(ctx, fasthttp.StatusServiceUnavailable, st.Err)
		return st, false
	}
	return st, true
}
