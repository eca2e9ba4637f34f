package frontend

import (
	"context"
	"errors"
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
	costsTop    int // with returnRoute, the cheapest workers' candidates only (PickOptions.CostsTop)
	// policyClass is x-dynamo-meta-policy-class: an explicit policy class or a policy family.
	policyClass string
	// exclude lists workers this request must not route to; only, when not empty, the only ones it may
	// route to (the endpoint picker's subset hint).
	exclude, only []uint64

	// watch cancels ctx when the client hangs up (clientgone.go).
	watch clientWatch

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

// requestActor prepares one request at a time — chat template, tokenization, images, hashing, routing,
// the mm_kwargs handoff — off the fasthttp goroutine, and is then reused (requestActors). The stages
// that wait on the network run concurrently and report back as messages (messages.go): imagesResolved,
// transferReady, and the request's end of life, clientGone or deadlineExpired. The actor owns the
// request's preparation state, so it alone decides when the request is ready, and what a stage that
// fails or arrives late means: a transfer that finishes after the client left has its buffer released
// here, never forwarded. Tokenization and the routing decision run inline: they are CPU work on the
// reused goroutine's grown stack (actors.ReuseDispatcher), and a queued decision is cancelled through the
// request's context, which the client-gone watcher and the timeout cancel.
//
// Supervision: a panic in a stage (a template bug on hostile input) is recovered in Receive and becomes
// this request's 500; the actor keeps serving. protoactor's default one-for-one restart would drop the
// waiting handler's reply, so no panic is left to it.
type requestActor struct {
	api *OpenAIAPI
	gen uint64       // the generation of the request being prepared (or the last one)
	cur *preparation // &prep while a request is prepared, nil when idle
	// prep is reused from request to request (one allocation less per request).
	prep preparation
}

// preparation is the state of the request an actor is preparing.
type preparation struct {
	gen   uint64
	j     *job
	reply chan prepared
	// stopWatch unregisters the context watch that turns cancellation into clientGone / deadlineExpired
	// (nil until the actor first waits on a stage).
	stopWatch func() bool

	imgs          *imageWork
	imagesPending bool
	imagesStart   time.Time
	tokens        []uint32
	view          imageView
	req           *router.RouteRequest
	route         router.RouteResult
	prefill       *router.RouteResult // the prefill decision of a disaggregated request (disagg.go)
	routed        bool
	transfers     int // reports still expected
	members       [][]byte
	releases      []func()
	failed        error // set by abort while transfers are still out
}

func (a *requestActor) Receive(ctx actor.Context) {
	defer a.recoverStage()
	switch m := ctx.Message().(type) {
	case *prepareJob:
		a.start(ctx, m)
	case *imagesResolved:
		if p := a.current(m.gen); p != nil {
			p.imagesPending = false
			if p.j.ctx.Err() == nil { // a stage cut short by the client's leaving is not a duration
				a.api.R.Metrics.ObserveFrontend(router.FrontendImages, time.Since(p.imagesStart))
			}
			a.afterTokens(ctx, p)
		}
	case *transferReady:
		p := a.current(m.gen)
		if p == nil {
			if m.release != nil {
				m.release() // the request was answered without it
			}
			return
		}
		p.transfers--
		if m.release != nil {
			p.members[m.i], p.releases[m.i] = m.member, m.release
		}
		switch {
		case p.transfers > 0:
		case p.failed != nil:
			a.finish(p, prepared{err: p.failed})
		case p.routed:
			a.finish(p, prepared{req: p.req, route: p.route, prefill: p.prefill})
		}
	case *clientGone:
		if p := a.current(m.gen); p != nil {
			a.abort(p, mapRouteErr(context.Canceled))
		}
	case *deadlineExpired:
		if p := a.current(m.gen); p != nil {
			a.abort(p, mapRouteErr(context.DeadlineExceeded))
		}
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	default:
		a.api.unknownMessages.Add(1)
	}
}

// current returns the preparation a stage report belongs to, or nil when it is stale.
func (a *requestActor) current(gen uint64) *preparation {
	if a.cur == nil || a.cur.gen != gen {
		return nil
	}
	return a.cur
}

// start begins a request: the media screen, the image stage and the context watch, then tokenization.
func (a *requestActor) start(ctx actor.Context, m *prepareJob) {
	a.gen++
	gen, self, root := a.gen, ctx.Self(), ctx.ActorSystem().Root
	a.prep = preparation{gen: gen, j: m.j, reply: m.reply}
	p := &a.prep
	a.cur = p
	j := m.j
	if err := a.api.screenMedia(j); err != nil { // the SSRF guard, before anything is fetched or forwarded
		a.finish(p, prepared{err: err})
		return
	}
	// per image, concurrently: mm_hash · size probe · token count
	// A Responses body has no chat parts to tag with mm uuids: its images route on text.
	if j.chat != nil && len(j.chat.Media) > 0 && j.ep != epResponses {
		p.imagesStart = time.Now()
		p.imgs, p.imagesPending = a.api.startImages(j.ctx, j, func() { root.Send(self, &imagesResolved{gen: gen}) })
		if p.imagesPending {
			a.watch(ctx, p)
		}
	}
	t0 := time.Now()
	tokens, err := a.api.tokenize(j)
	a.api.R.Metrics.ObserveFrontend(router.FrontendTokenize, time.Since(t0))
	if err != nil {
		a.finish(p, prepared{err: err})
		return
	}
	if len(tokens) == 0 {
		a.finish(p, prepared{err: errorf(ErrBadRequest, "the prompt is empty")})
		return
	}
	p.tokens = tokens
	a.afterTokens(ctx, p)
}

// afterTokens routes once both the tokens and the images are in: the routing view, the transfers
// (concurrently with the decision), the decision.
func (a *requestActor) afterTokens(ctx actor.Context, p *preparation) {
	if p.tokens == nil || p.imagesPending || a.cur != p {
		return
	}
	j, api := p.j, a.api
	if err := j.ctx.Err(); err != nil {
		// The client left (or the deadline passed) while the images resolved: its message is on the way,
		// but nothing is routed, charged or transferred for a request no one waits for.
		a.abort(p, mapRouteErr(err))
		return
	}
	view, err := api.routingView(p.imgs, p.tokens) // placeholders → N × pad_value(mm_hash)
	if err != nil {
		a.finish(p, prepared{err: err})
		return
	}
	p.view = view
	if p.imgs != nil {
		p.members, p.releases = make([][]byte, len(p.imgs.media)), make([]func(), len(p.imgs.media))
	}
	gen, self, root := p.gen, ctx.Self(), ctx.ActorSystem().Root
	p.transfers = api.startTransfers(j.ctx, p.imgs, view, func(i int, member []byte, release func()) {
		root.Send(self, &transferReady{gen: gen, i: i, member: member, release: release})
	})
	p.req = api.routeRequest(j, p.tokens, view)
	res, pre, err := api.route(j, p.req) // the decode core; with prefill workers, the prefill core first
	if err != nil {
		a.abort(p, mapRouteErr(err))
		return
	}
	p.route, p.prefill, p.routed = res, pre, true
	if p.transfers == 0 {
		a.finish(p, prepared{req: p.req, route: res, prefill: pre})
		return
	}
	a.watch(ctx, p)
}

// watch turns the end of the request's context into a message (clientGone, deadlineExpired) while the
// actor waits on a stage's report. A request that never waits (no images, no transfers: tokens and the
// decision run inline, and the decision's queue wait ends with the context) pays nothing for it.
func (a *requestActor) watch(ctx actor.Context, p *preparation) {
	if p.stopWatch != nil {
		return
	}
	gen, self, root, j := p.gen, ctx.Self(), ctx.ActorSystem().Root, p.j
	p.stopWatch = context.AfterFunc(j.ctx, func() {
		if errors.Is(j.ctx.Err(), context.DeadlineExceeded) {
			root.Send(self, &deadlineExpired{gen: gen})
		} else {
			root.Send(self, &clientGone{gen: gen})
		}
	})
}

// abort ends the preparation with err once no transfer is outstanding: a transfer in flight holds a
// buffer that only its report can release, and the cancelled context makes it report soon.
func (a *requestActor) abort(p *preparation, err error) {
	if p.failed != nil {
		return // already ending; the first cause stands
	}
	if p.routed { // charged on a worker it will never reach
		if p.prefill != nil {
			_ = a.api.PD.Prefill.Free(p.req.ID)
		} else {
			a.api.finish(p.j)
		}
		p.routed = false
	}
	if p.transfers > 0 {
		p.failed = err
		p.j.cancel() // the transfers unwind and report; the last report finishes
		return
	}
	a.finish(p, prepared{err: err})
}

// finish answers the handler: the buffers of the transfers that completed go with the request (released
// when it ends); on success the images' uuids and mm_kwargs are written into the worker-bound body.
func (a *requestActor) finish(p *preparation, out prepared) {
	if a.cur != p {
		return
	}
	a.cur = nil
	if p.stopWatch != nil {
		p.stopWatch()
	}
	if rs := p.releases; rs != nil {
		p.j.release = func() {
			for _, r := range rs {
				if r != nil {
					r()
				}
			}
		}
	}
	if out.err == nil {
		a.api.forwardImages(p.j, p.imgs, p.view, p.members) // may inline the downloaded image bytes
	}
	if p.transfers == 0 && !p.imagesPending {
		// No transfer and no forwarding reads the image bytes any more. While the image stage still runs
		// (the client left, or tokenization failed first) its goroutine owns them; they go with the
		// request.
		p.imgs.dropData()
	}
	p.reply <- out
	// The actor waits idle for its next request (requestActors keeps up to 256): it keeps nothing of
	// this one. Its body, parsed request, tokens and worker-bound body stayed reachable from here until
	// the actor's next request, so idle actors held the peak's memory (1.1 GB live after 8 concurrent
	// 29 MB image requests had ended). Late stage reports carry what they must release themselves.
	*p = preparation{gen: p.gen}
}

// recoverStage turns a panic in a stage (a template bug on hostile input) into the current request's
// error; the actor keeps serving.
func (a *requestActor) recoverStage() {
	if r := recover(); r != nil && a.cur != nil {
		a.finish(a.cur, prepared{err: fmt.Errorf("internal error while preparing the request: %v", r)})
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

// routeRequest is the router's request for j: the routing tokens (image positions expanded when routing
// on images), namespace, priority, tier, pin, OSL, session, excluded workers.
func (a *OpenAIAPI) routeRequest(j *job, tokens []uint32, view imageView) *router.RouteRequest {
	rr := &router.RouteRequest{ID: j.id, Tokens: tokens, ReturnCosts: j.returnRoute, CostsTop: j.costsTop, CacheNamespace: j.namespace}
	if view.tokens != nil {
		rr.Tokens, rr.ISL = view.tokens, view.isl
		if view.blockMM != nil { // legacy scheme: the images' mm_hash values enter their blocks' hashes
			rr.Local = scoring.LocalBlockHashes(nil, view.tokens, a.R.BlockSize(), scoring.DeriveSeed("", j.namespace), view.blockMM)
		}
	}
	rr.Priority = j.common.PriorityJump()
	if j.priority != nil {
		rr.Priority = *j.priority
	}
	rr.Strict, rr.PolicyClass, rr.Session, rr.Exclude, rr.Only = j.strict, j.policyClass, j.session, j.exclude, j.only
	if h := j.common.NVExt; h != nil && h.AgentHints != nil && h.AgentHints.OSL != nil {
		rr.ExpectedOutputTokens = *h.AgentHints.OSL
	}
	if pin := a.pin(j); pin != nil {
		rr.Pin, rr.PinRank = pin, j.pinRank != nil
	}
	if n := j.common.N; n != nil {
		rr.Sequences = *n // n sequences fork from one prefill: the router charges n decodes
	}
	return rr
}
