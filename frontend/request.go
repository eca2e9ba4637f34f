package frontend

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/frontend/openai"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/workers/client"
)

// endpoint is the OpenAI endpoint a request came in on; the worker gets the same one.
type endpoint uint8

const (
	epChat endpoint = iota
	epCompletion
	epResponses  // vLLM's stateless /v1/responses: routed as the chat it renders
	epEmbeddings // pooling endpoints: routed on their input's tokens, answered whole
	epScore
	epRerank
	numEndpoints
)

var endpointPaths = [numEndpoints]string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings",
	"/v1/score", "/v1/rerank"}

func (e endpoint) path() string { return endpointPaths[e] }

// pooling reports whether e is a pooling endpoint (embeddings, score, rerank): no chat template, no
// generation, one whole answer.
func (e endpoint) pooling() bool { return e >= epEmbeddings }

// job is everything the request path needs, copied out of fasthttp's RequestCtx (which is recycled when
// the handler returns).
type job struct {
	ep endpoint
	id string // the router's request id (unique in this process)
	// reqID is the client's X-Request-Id, else id: echoed, logged and forwarded to the worker.
	reqID  string
	body   []byte // the original body (own copy), forwarded to the worker
	chat   *openai.ChatRequest
	comp   *openai.CompletionRequest
	common *openai.Common
	// pool is a pooling request's inputs (epEmbeddings, epScore, epRerank).
	pool *poolingInput
	// namespace is the request's cache namespace (cache_salt), folded into its routing hashes.
	namespace string
	stream    bool
	started   time.Time
	// ctx bounds the request: the queue wait, the upstream call. Cancelled when the client goes away.
	ctx    context.Context
	cancel context.CancelFunc
	// release frees what the request holds beyond its context (mm_kwargs transfer buffers); nil if none.
	release func()

	// Routing inputs from headers (they take precedence over the body).
	priority  *float64
	strict    uint32
	session   string // X-Dynamo-Session-ID
	pinWorker *uint64
	pinRank   *uint32
	// pinPrefill is x-dynamo-prefill-instance-id: the prefill worker of a disaggregated request (it
	// then skips conditional prefill).
	pinPrefill  *uint64
	returnRoute bool
	// policyClass is x-dynamo-meta-policy-class: an explicit policy class or a policy family.
	policyClass string
	// exclude lists workers this request must not route to (the endpoint picker's subset hint).
	exclude []uint64

	// headers backs the worker request's extra headers (request id, dp rank, traceparent, tracestate).
	headers [4]client.Header

	// What the lifecycle records (lifecycle.go): the route taken, when the first token came.
	route  router.RouteResult
	routed bool
	// prefill is the prefill worker's decision of a disaggregated request; serving says how a request
	// was served when the frontend has prefill workers ("" otherwise): disaggregated, bypassed, fallback.
	prefill router.RouteResult
	serving string
	firstAt time.Duration
	// promptTokens is the worker's reported prompt length (0 until usage arrives); chunks counts the
	// stream's events, for the mean inter-token latency.
	promptTokens int
	chunks       int
	// trace is the request's spans (zero when tracing is off).
	trace requestTrace
}

// close ends the request: its context, and the resources it held for the worker.
func (j *job) close() {
	j.cancel()
	if j.release != nil {
		j.release()
		j.release = nil
	}
}

// prepared is the request actor's answer: the routing decision (or why there is none).
type prepared struct {
	// req is the route request of the first decision (routing tokens with image positions expanded,
	// namespace, priority, tier, pin, OSL, session); migration re-routes it with failed workers excluded.
	req   *router.RouteRequest
	route router.RouteResult
	// prefill is set for a disaggregated request: its prefill decision; route is then decided after the
	// prefill hop (disagg.go).
	prefill *router.RouteResult
	err     error
}

// prepareJob asks a request actor to tokenize and route one request.
type prepareJob struct {
	j     *job
	reply chan prepared
}

// requestActor runs the CPU stages of one request — chat template, tokenization, (images), hashing,
// routing — off the fasthttp goroutine. A panic in a stage (a template bug on hostile input) is turned
// into this request's error; the handler sees a 500 instead of a crashed process. An actor serves one
// request at a time and is then reused (requestActors).
type requestActor struct {
	api *OpenAIAPI
}

func (a *requestActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *prepareJob:
		var out prepared
		func() {
			defer func() {
				if r := recover(); r != nil {
					out = prepared{err: fmt.Errorf("internal error while preparing the request: %v", r)}
				}
			}()
			out = a.api.prepare(m.j)
		}()
		m.reply <- out
	}
}

// maxIdleRequestActors bounds the idle request actors kept for reuse: well above the requests a frontend
// prepares at once (the stages are CPU work), so a burst past it only spawns actors that are stopped
// after their request.
const maxIdleRequestActors = 256

// requestActors keeps idle request actors for reuse. Spawning one per request (PID, mailbox, process
// registry entry, then a Stop through the mailbox) cost ~15 allocations and a second dispatcher run per
// request; a reused actor costs one Send. Each actor still serves one request at a time: a handler takes
// it off the idle list and puts it back after the answer, so a slow request (a long chat template, an
// image probe) never holds up another.
type requestActors struct {
	mu   sync.Mutex
	idle []*requestSlot
}

// requestSlot is one request actor with its message and reply channel, owned by the handler that took
// it until it is put back.
type requestSlot struct {
	pid   *actor.PID
	msg   prepareJob
	reply chan prepared
}

func (r *requestActors) get() *requestSlot {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.idle)
	if n == 0 {
		return nil
	}
	s := r.idle[n-1]
	r.idle[n-1] = nil
	r.idle = r.idle[:n-1]
	return s
}

// put keeps s for reuse and reports false when the idle list is full (the caller stops the actor).
func (r *requestActors) put(s *requestSlot) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.idle) >= maxIdleRequestActors {
		return false
	}
	r.idle = append(r.idle, s)
	return true
}

// tokenize renders and tokenizes the prompt the worker will see.
func (a *OpenAIAPI) tokenize(j *job) ([]uint32, error) {
	switch j.ep {
	case epEmbeddings, epScore, epRerank:
		return a.poolingTokens(j.pool)
	case epChat, epResponses:
		if a.Model == nil || a.Model.ChatTemplate == nil {
			return nil, errorf(ErrUnprocessable, "model %q has no chat template", a.ModelName)
		}
		toks, err := a.Model.EncodeChat(j.chat.Messages, j.chat.ChatOptions())
		if err != nil {
			return nil, errorf(ErrBadRequest, "cannot render the chat template: %v", err)
		}
		return toks, nil
	default:
		p := &j.comp.Prompt
		if p.IsTokens() {
			return p.Tokens(), nil
		}
		if a.Model == nil {
			return nil, errorf(ErrUnprocessable, "text prompts need a tokenizer; send token ids")
		}
		return a.Model.Tokenizer.Encode(p.Text()), nil
	}
}

// prepare runs stages 2–7 of the request path: template + tokenize while the images are resolved,
// routing tokens, hash, route.
func (a *OpenAIAPI) prepare(j *job) prepared {
	if err := a.screenMedia(j); err != nil { // the SSRF guard, before anything is fetched or forwarded
		return prepared{err: err}
	}
	var imgs *imageWork
	if j.ep != epResponses { // a Responses body has no chat parts to tag with mm uuids: its images route on text
		imgs = a.startImages(j.ctx, j) // per image, concurrently: mm_hash · size probe · token count
	}
	tokens, err := a.tokenize(j)
	if err != nil {
		if imgs != nil {
			<-imgs.done
		}
		return prepared{err: err}
	}
	if len(tokens) == 0 {
		return prepared{err: errorf(ErrBadRequest, "the prompt is empty")}
	}
	view, err := a.routingView(imgs, tokens) // placeholders → N × pad_value(mm_hash)
	if err != nil {
		return prepared{err: err}
	}
	xfer := a.startTransfers(j.ctx, imgs, view) // mm_kwargs handoff, concurrently with routing
	routing, isl := view.tokens, view.isl
	rr := &router.RouteRequest{ID: j.id, Tokens: tokens, ReturnCosts: j.returnRoute, CacheNamespace: j.namespace}
	if routing != nil {
		rr.Tokens, rr.ISL = routing, isl
		if view.blockMM != nil { // legacy scheme: the images' mm_hash values enter their blocks' hashes
			rr.Local = scoring.LocalBlockHashes(nil, routing, a.R.BlockSize(), scoring.DeriveSeed("", j.namespace), view.blockMM)
		}
	}
	rr.Priority = j.common.PriorityJump()
	if j.priority != nil {
		rr.Priority = *j.priority
	}
	rr.Strict, rr.PolicyClass, rr.Session, rr.Exclude = j.strict, j.policyClass, j.session, j.exclude
	if h := j.common.NVExt; h != nil && h.AgentHints != nil && h.AgentHints.OSL != nil {
		rr.ExpectedOutputTokens = *h.AgentHints.OSL
	}
	if pin := a.pin(j); pin != nil {
		rr.Pin, rr.PinRank = pin, j.pinRank != nil
	}
	if n := j.common.N; n != nil {
		rr.Sequences = *n // n sequences fork from one prefill: the router charges n decodes
	}
	res, pre, err := a.route(j, rr) // the decode core; with prefill workers, the prefill core first
	members := xfer.wait(j)         // joined before dispatch; the buffers are released when the request ends
	if err != nil {
		return prepared{err: mapRouteErr(err)}
	}
	a.forwardImages(j, imgs, view, members)
	return prepared{req: rr, route: res, prefill: pre}
}
