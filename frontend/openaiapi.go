package frontend

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/goccy/go-json"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/frontend/openai"
	"github.com/kvroute/kvroute/mm"
	"github.com/kvroute/kvroute/model"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/sched"
	"github.com/kvroute/kvroute/workers/oaiwire"
)

// OpenAIConfig configures the OpenAI endpoints.
type OpenAIConfig struct {
	// Limits bound each request (body, messages, prompt tokens, ...).
	Limits openai.Limits
	// MigrationLimit is how many other workers a request is retried on when its worker fails before any
	// byte reached the client (Dynamo's --migration-limit; kvroute's flag defaults to 3, Dynamo's to 0).
	// Zero value: no retry.
	MigrationLimit int
	// PassiveHealth takes a worker out of the candidates the moment a connection to it is refused,
	// instead of after the health checks notice (a dead worker fails instantly, looks idle and would
	// draw traffic meanwhile). Only with a health Monitor running: it is what puts the worker back.
	PassiveHealth bool
	// RequestTimeout bounds one request end to end, queue wait included. Default 10 minutes.
	RequestTimeout time.Duration
	// MediaGuard screens every media URL of a chat request before it is routed and forwarded (the
	// worker fetches it): internal destinations are refused with 400, whether or not multimodal routing
	// is on and whether or not the part carries a uuid. nil: a guard with an empty allow-list
	// (--media-allow-hosts).
	MediaGuard *mm.Guard
}

// OpenAIAPI serves the OpenAI-compatible endpoints with the embedded router: /v1/chat/completions,
// /v1/completions, /v1/models, /tokenize.
type OpenAIAPI struct {
	R         *router.Router
	Model     *model.Model
	ModelName string
	System    *actor.ActorSystem
	Pool      *WorkerPool
	Cfg       OpenAIConfig
	Metrics   *FrontendMetrics
	// MM, when set, turns on multimodal KV routing (nil: images are routed on the text prefix).
	MM *MMConfig
	// AccessLog, when set, gets one line per request at its end (lifecycle.go). Set before serving.
	AccessLog *slog.Logger
	// Tracer, when set, traces each request (tracing.go). Set before serving.
	Tracer trace.Tracer
	// PD, when set, is the prefill side of disaggregated serving (disagg.go): requests take a prefill
	// hop once prefill workers are registered. Set before serving.
	PD *Disagg

	mmMetrics *mmMetrics
	props     *actor.Props
	actors    requestActors
	nextID    atomic.Uint64
	// unknownMessages counts messages a request actor did not expect (never silently dropped).
	unknownMessages atomic.Uint64
	served          []string

	// live counts requests between begin and end; drainCtx parents every request's context, so
	// cancelAll ends them all (the bounded drain's last step).
	live      atomic.Int64
	drainCtx  context.Context
	cancelAll context.CancelFunc
}

// NewOpenAIAPI wires the endpoints. m may be nil (token-id prompts only).
func NewOpenAIAPI(r *router.Router, m *model.Model, name string, system *actor.ActorSystem, pool *WorkerPool, cfg OpenAIConfig, fm *FrontendMetrics) *OpenAIAPI {
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Minute
	}
	if cfg.MediaGuard == nil {
		cfg.MediaGuard, _ = mm.NewGuard(nil) // an empty allow-list cannot fail
	}
	a := &OpenAIAPI{R: r, Model: m, ModelName: name, System: system, Pool: pool, Cfg: cfg, Metrics: fm, served: []string{name}}
	a.drainCtx, a.cancelAll = context.WithCancel(context.Background())
	// Request actors run on reused goroutines: their stage work needs tens of KiB of stack, which a fresh
	// goroutine per request would grow and copy every time (actors.ReuseDispatcher).
	a.props = actor.PropsFromProducer(func() actor.Actor { return &requestActor{api: a} },
		actor.WithDispatcher(actors.NewReuseDispatcher(300, 10*time.Second)))
	return a
}

// EnableMM turns on multimodal routing, registering its metrics with reg (nil: private).
func (a *OpenAIAPI) EnableMM(cfg *MMConfig, reg prometheus.Registerer) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if cfg.Inline == nil {
		cfg.Inline = NewInlineBudget(DefaultInlineBytes)
	}
	a.MM, a.mmMetrics = cfg, newMMMetrics(reg)
}

// Handle serves the OpenAI paths and reports whether ctx was one of them.
func (a *OpenAIAPI) Handle(ctx *fasthttp.RequestCtx) bool {
	switch string(ctx.Path()) {
	case "/v1/chat/completions":
		a.onlyPost(ctx, func() { a.serveGenerate(ctx, epChat) })
	case "/v1/completions":
		a.onlyPost(ctx, func() { a.serveGenerate(ctx, epCompletion) })
	case "/v1/responses":
		a.onlyPost(ctx, func() { a.serveGenerate(ctx, epResponses) })
	case "/v1/embeddings":
		a.onlyPost(ctx, func() { a.serveGenerate(ctx, epEmbeddings) })
	case "/v1/score", "/score":
		a.onlyPost(ctx, func() { a.serveGenerate(ctx, epScore) })
	case "/v1/rerank", "/rerank", "/v2/rerank":
		a.onlyPost(ctx, func() { a.serveGenerate(ctx, epRerank) })
	case "/detokenize":
		a.onlyPost(ctx, func() { a.detokenizeEndpoint(ctx) })
	case "/v1/models":
		if !ctx.IsGet() {
			methodNotAllowed(ctx, "GET", errorf(ErrMethod, "%s /v1/models: use GET", ctx.Method()))
			return true
		}
		a.models(ctx)
	case "/tokenize":
		a.onlyPost(ctx, func() { a.tokenizeEndpoint(ctx) })
	default:
		return false
	}
	return true
}

func (a *OpenAIAPI) onlyPost(ctx *fasthttp.RequestCtx, fn func()) {
	if !ctx.IsPost() {
		methodNotAllowed(ctx, "POST", errorf(ErrMethod, "%s %s: use POST", ctx.Method(), ctx.Path()))
		return
	}
	if !jsonContent(ctx) {
		// A text/plain or form body is also what a browser page may send to any origin without asking
		// (a CORS "simple" request): refusing it keeps --allowed-origins the gate it is meant to be.
		writeError(ctx, errorf(ErrMediaType, "Unsupported Media Type: only 'application/json' is allowed, got %q",
			ctx.Request.Header.ContentType()))
		return
	}
	fn()
}

// jsonContent reports whether the request's Content-Type is application/json (parameters such as
// charset allowed), the one media type vLLM's and Dynamo's OpenAI servers take.
func jsonContent(ctx *fasthttp.RequestCtx) bool {
	ct := ctx.Request.Header.ContentType()
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(string(ct)), "application/json")
}

// serveGenerate is the request path (docs/architecture.md); each line is a stage.
func (a *OpenAIAPI) serveGenerate(ctx *fasthttp.RequestCtx, ep endpoint) {
	reqID := clientRequestID(ctx) // echoed, logged and forwarded to the worker
	if reqID != "" {
		ctx.Response.Header.Set("X-Request-Id", reqID)
	}
	tr := a.startTrace(ctx, ep)
	t0 := time.Now()
	j, err := a.parse(&ctx.Request.Header, ctx.PostBody(), ep, reqID) // 1 parse + validate; copy out of RequestCtx
	a.R.Metrics.ObserveFrontend(router.FrontendParse, time.Since(t0))
	if err != nil {
		writeError(ctx, err)
		a.failEarly(ctx, ep, reqID, ctx.Response.StatusCode())
		tr.end(&job{ep: ep, reqID: reqID}, ctx.Response.StatusCode(), 0)
		return
	}
	j.trace = tr
	ctx.Response.Header.Set("X-Request-Id", j.reqID)
	a.begin(j)
	// A client that hangs up cancels the request: the actor's stages, the queue wait, the worker call.
	j.watch.start(ctx.Conn(), j.cancel)
	defer j.watch.end()
	j.trace.nextStage(a, "route")
	p := a.runRequestActor(j) // 2–7 request actor: template + tokenize → (images) → hash → route
	if p.err != nil {
		a.fail(ctx, j, p.err)
		return
	}
	j.route, j.routed = p.route, true
	j.trace.nextStage(a, "dispatch")
	a.dispatch(ctx, j, p) // 8–9 dispatch → stream → lifecycle (prefill done, free)
}

// fail answers a begun request with err's OpenAI error and ends it.
func (a *OpenAIAPI) fail(ctx *fasthttp.RequestCtx, j *job, err error) {
	writeError(ctx, err)
	a.end(j, ctx.Response.StatusCode())
}

// headerSource reads a request header by name: fasthttp's RequestHeader at the HTTP edge, the gateway's
// headers in the endpoint picker (Pick).
type headerSource interface {
	Peek(key string) []byte
}

// parse decodes and validates the body and copies what the request path needs out of the request (h
// and postBody may be recycled once it returns).
func (a *OpenAIAPI) parse(h headerSource, postBody []byte, ep endpoint, reqID string) (*job, error) {
	body := append([]byte(nil), postBody...)
	if !utf8.Valid(body) {
		return nil, errorf(ErrBadRequest, "the request body is not valid UTF-8")
	}
	if bytes.Contains(body, []byte(`"mm_kwargs"`)) {
		// Transfer descriptors name addresses and shared-memory segments the worker will open: only
		// the router may write them.
		return nil, errorf(ErrBadRequest, "mm_kwargs is set by the router, not by clients")
	}
	j := &job{ep: ep, body: body, started: time.Now()}
	if err := a.decode(j); err != nil {
		return nil, err
	}
	if err := a.readHeaders(h, j); err != nil {
		return nil, err
	}
	if pin := a.pin(j); pin != nil {
		if err := checkPin(a.R, pin.WorkerID, j.pinRank); err != nil {
			return nil, err
		}
	}
	ns, forward := j.common.CacheNamespace(string(h.Peek("X-Tenant-ID")))
	if forward {
		// nvext.cache_salt or X-Tenant-ID: the worker's engine salts its blocks only with the body's
		// cache_salt, so it gets one, and its cache and the routing prediction share the namespace.
		b, err := openai.SetCacheSalt(j.body, ns)
		if err != nil {
			return nil, errorf(ErrBadRequest, "%v", err)
		}
		j.body = b
	}
	j.namespace = ns
	j.returnRoute = j.common.ReturnRouting()
	if err := a.assignID(j); err != nil {
		return nil, err
	}
	j.reqID = reqID
	if j.reqID == "" {
		j.reqID = j.id
	}
	j.ctx, j.cancel = context.WithTimeout(a.drainCtx, a.Cfg.RequestTimeout)
	return j, nil
}

// decode decodes and validates j's body as its endpoint's request; a Responses request is routed as the
// chat body it renders (same template, same hashes) while the worker gets the original.
func (a *OpenAIAPI) decode(j *job) error {
	switch j.ep {
	case epChat:
		req, err := openai.DecodeChat(j.body, a.Cfg.Limits, a.served)
		if err != nil {
			return err
		}
		j.chat, j.common, j.stream = req, &req.Common, req.Stream
	case epResponses:
		cb, err := oaiwire.ResponsesChat(j.body)
		if err != nil {
			return errorf(ErrBadRequest, "%v", err)
		}
		req, err := openai.DecodeChat(cb, a.Cfg.Limits, a.served)
		if err != nil {
			return err
		}
		j.chat, j.common, j.stream = req, &req.Common, req.Stream
	case epEmbeddings, epScore, epRerank:
		in, err := decodePooling(j.ep, j.body, a.served)
		if err != nil {
			return err
		}
		j.pool, j.common = in, &openai.Common{Model: in.model}
	default:
		req, err := openai.DecodeCompletion(j.body, a.Cfg.Limits, a.served)
		if err != nil {
			return err
		}
		j.comp, j.common, j.stream = req, &req.Common, req.Stream
	}
	return nil
}

// assignID takes the client's request_id, or makes one (kvr-<counter>-<start time>, base 36).
func (a *OpenAIAPI) assignID(j *job) error {
	j.id = j.common.RequestID
	if j.id != "" && !usableRequestID(j.id) {
		// It is echoed and forwarded as the X-Request-Id header: a NUL or a newline there breaks (or
		// forges) the headers of the worker's request and of the client's answer.
		return errorf(ErrBadRequest, "request_id must be 1 to %d printable ASCII characters", maxRequestIDLen)
	}
	if j.id == "" {
		var b [48]byte
		id := append(b[:0], "kvr-"...)
		id = strconv.AppendUint(id, a.nextID.Add(1), 36)
		id = append(id, '-')
		id = strconv.AppendInt(id, j.started.UnixNano(), 36)
		j.id = string(id)
	}
	return nil
}

// readHeaders takes Dynamo's routing headers: priority, strict priority, policy class and direct-mode
// worker pins.
func (a *OpenAIAPI) readHeaders(h headerSource, j *job) error {
	if v := h.Peek("x-dynamo-request-priority"); len(v) > 0 {
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || !openai.ValidPriorityJump(f) {
			return errorf(ErrBadRequest, "header x-dynamo-request-priority: %q is not a number of seconds in [0, %g]", v, openai.MaxPriorityJump)
		}
		j.priority = &f
	}
	if v := h.Peek("x-dynamo-request-strict-priority"); len(v) > 0 {
		n, err := strconv.ParseUint(string(v), 10, 32)
		if err != nil {
			return errorf(ErrBadRequest, "header x-dynamo-request-strict-priority: %q is not an unsigned integer", v)
		}
		j.strict = uint32(n)
	}
	if v := h.Peek("x-dynamo-session-id"); len(v) > 0 {
		if len(v) > sched.MaxSessionIDBytes {
			return errorf(ErrBadRequest, "header x-dynamo-session-id: longer than %d bytes", sched.MaxSessionIDBytes)
		}
		j.session = string(v)
	}
	if v := h.Peek("x-dynamo-worker-instance-id"); len(v) > 0 {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return errorf(ErrBadRequest, "header x-dynamo-worker-instance-id: %q is not a worker id", v)
		}
		j.pinWorker = &n
	}
	if v := h.Peek("x-dynamo-prefill-instance-id"); len(v) > 0 {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return errorf(ErrBadRequest, "header x-dynamo-prefill-instance-id: %q is not a worker id", v)
		}
		j.pinPrefill = &n
	}
	if v := h.Peek("x-dynamo-dp-rank"); len(v) > 0 {
		n, err := strconv.ParseUint(string(v), 10, 32)
		if err != nil {
			return errorf(ErrBadRequest, "header x-dynamo-dp-rank: %q is not a dp rank", v)
		}
		r := uint32(n)
		j.pinRank = &r
	}
	if v := h.Peek(PolicyClassHeader); len(v) > 0 {
		j.policyClass = string(v)
	}
	return nil
}

// PolicyClassHeader names the request's router policy class: an explicit class of
// --router-policy-config, or a policy family (the request's uncached ISL then picks the class). A name
// the document does not know routes in the default family.
const PolicyClassHeader = "x-dynamo-meta-policy-class"

// pin returns the worker a request is pinned to (header, then nvext.backend_instance_id), or nil.
func (a *OpenAIAPI) pin(j *job) *scoring.WorkerKey {
	var id *uint64
	switch {
	case j.pinWorker != nil:
		id = j.pinWorker
	case j.common.NVExt != nil && j.common.NVExt.BackendInstanceID != nil:
		id = j.common.NVExt.BackendInstanceID
	default:
		return nil
	}
	k := scoring.WorkerKey{WorkerID: *id}
	if j.pinRank != nil {
		k.DPRank = *j.pinRank
	}
	return &k
}

// runRequestActor hands j to an idle request actor (a new one when none is idle) and waits for its
// answer.
func (a *OpenAIAPI) runRequestActor(j *job) prepared {
	s := a.actors.get()
	if s == nil {
		s = &requestSlot{pid: a.System.Root.Spawn(a.props), reply: make(chan prepared, 1)}
	}
	s.msg = prepareJob{j: j, reply: s.reply}
	a.System.Root.Send(s.pid, &s.msg)
	p := <-s.reply
	s.msg = prepareJob{} // the actor is done with it: the reply was its last use
	if !a.actors.put(s) {
		a.System.Root.Stop(s.pid)
	}
	return p
}

type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Root    string `json:"root"`
}

func (a *OpenAIAPI) models(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, map[string]any{"object": "list", "data": []modelCard{{ID: a.ModelName, Object: "model", Created: 0, OwnedBy: "kvroute", Root: a.ModelName}}})
}

// tokenizeRequest is vLLM's /tokenize body: completion form (prompt) or chat form (messages, with the
// chat body's template inputs: tools, chat_template_kwargs, continue_final_message). Other chat fields
// are accepted and have no effect on tokens.
type tokenizeRequest struct {
	Model                string            `json:"model"`
	Prompt               *string           `json:"prompt"`
	Messages             []model.Message   `json:"messages"`
	AddGenerationPrompt  *bool             `json:"add_generation_prompt"`
	Tools                []json.RawMessage `json:"tools"`
	ChatTemplateKwargs   map[string]any    `json:"chat_template_kwargs"`
	ContinueFinalMessage bool              `json:"continue_final_message"`
}

// tokenizerFor reports whether /tokenize and /detokenize can answer for model (empty: this API's) with
// this API's tokenizer; if not, it has written the error (404 for another model, 422 without one).
func (a *OpenAIAPI) tokenizerFor(ctx *fasthttp.RequestCtx, model string) bool {
	if model != "" && model != a.ModelName {
		writeError(ctx, errorf(ErrNotFound, "model %q is not served here", model))
		return false
	}
	if a.Model == nil {
		writeError(ctx, errorf(ErrUnprocessable, "no tokenizer is loaded"))
		return false
	}
	return true
}

func (a *OpenAIAPI) tokenizeEndpoint(ctx *fasthttp.RequestCtx) {
	var req tokenizeRequest
	if err := decodeBody(ctx, &req); err != nil {
		writeError(ctx, err)
		return
	}
	if !a.tokenizerFor(ctx, req.Model) {
		return
	}
	var toks []uint32
	switch {
	case req.Prompt != nil && req.Messages != nil:
		writeError(ctx, errorf(ErrBadRequest, "give either prompt or messages, not both"))
		return
	case req.Prompt != nil:
		toks = a.Model.Tokenizer.Encode(*req.Prompt)
	case req.Messages != nil:
		if a.Model.ChatTemplate == nil {
			writeError(ctx, errorf(ErrUnprocessable, "model has no chat template"))
			return
		}
		addGen := !req.ContinueFinalMessage
		if req.AddGenerationPrompt != nil {
			addGen = *req.AddGenerationPrompt
		}
		var err error
		toks, err = a.Model.EncodeChat(req.Messages, model.ChatOptions{AddGenerationPrompt: addGen, Tools: req.Tools,
			Kwargs: req.ChatTemplateKwargs, ContinueFinalMessage: req.ContinueFinalMessage})
		if err != nil {
			writeError(ctx, errorf(ErrBadRequest, "cannot render the chat template: %v", err))
			return
		}
	default:
		writeError(ctx, errorf(ErrBadRequest, "missing field: prompt or messages"))
		return
	}
	if toks == nil {
		toks = []uint32{}
	}
	writeJSON(ctx, map[string]any{"tokens": toks, "count": len(toks)})
}
