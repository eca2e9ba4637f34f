package mocker

import (
	"fmt"
	"slices"
	"time"
)

// Request is one generation request as the engine sees it: token ids in, a number of tokens out.
type Request struct {
	// ID must be unique among the engine's live requests.
	// The engine keeps Prompt (cached blocks alias it): the caller must not modify it after Add.
	ID string
	// Prompt is the full prompt in token ids, image placeholders already expanded.
	Prompt []uint32
	// MaxTokens is the number of tokens to generate (at least 1; the filler never stops early).
	MaxTokens int
	// MM lists the prompt's multimodal items, sorted by Offset; they enter the extra keys of the blocks
	// they overlap.
	MM []MMItem
	// LoraName enters every block's extra keys and the events' lora_name.
	LoraName string
	// CacheSalt enters block 0's extra keys.
	CacheSalt string
	// RemoteBlocks is how many leading full prompt blocks another engine computed and this one pulls
	// (disaggregated decode, vLLM's do_remote_prefill): at admission they count as computed without
	// prefill work and are stored as new blocks (BlockStored), as vLLM's decode side does once the KV
	// arrived. The caller waits out the transfer time before Add. Default 0.
	RemoteBlocks int
	// RemoteDecode asks for the request's block ids at completion (disaggregated prefill, vLLM's
	// do_remote_decode): Progress.BlockIDs of its last step lists the full prompt blocks, which the
	// prefill response hands to the decode worker as remote_block_ids.
	RemoteDecode bool
}

// Progress is what one step did for one request: at most one new token, and whether it finished.
type Progress struct {
	ID string
	// Token is the token generated this step; Output the number generated so far (Output-1 is its index).
	Token  uint32
	Output int
	// First is set on the step that produced the first token (the end of prefill).
	First bool
	// Done is set when Output reached MaxTokens (finish reason "length") or the request was aborted.
	Done bool
	// PromptTokens and CachedTokens are the usage figures: CachedTokens is the prefix-cache hit measured when
	// the request was first scheduled (vLLM's num_cached_tokens).
	PromptTokens int
	CachedTokens int
	// BlockIDs are the physical ids of the full prompt blocks, on the last step of a RemoteDecode request.
	BlockIDs []int32
}

// StepResult is everything one engine step did. Its slices are reused by the next Step call.
type StepResult struct {
	// Idle is set when nothing was scheduled and there were no events: the caller should wait for input.
	Idle bool
	// Duration is the simulated length of the step, already divided by the speedup ratios.
	Duration time.Duration
	// Events are the step's KV cache events in call order (one vLLM batch).
	Events []KVEvent
	// Progress has one entry per request that produced a token or finished.
	Progress []Progress
	// PrefillTokens and Decodes are the timing model's inputs; Preempted counts preemptions this step.
	// PrefillPairs and DecodeContext are the extra inputs of a fitted Timing (its A and C).
	PrefillTokens int
	Decodes       int
	Preempted     int
	PrefillPairs  float64
	DecodeContext int
}

// Stats are the engine's gauges and counters, as vLLM exports them.
type Stats struct {
	Running, Waiting   int
	UsedBlocks, Blocks int
	PrefixQueries      uint64 // prompt tokens of admitted requests
	PrefixHits         uint64 // of which cached
	Preemptions        uint64
	PromptTokens       uint64
	GenerationTokens   uint64
	Evictions          uint64
	FinishedRequests   uint64
	Steps              uint64
	BusyTime           time.Duration // sum of step durations
}

// KVUsage is vLLM's kv_cache_usage_perc: referenced blocks over all blocks, in [0,1].
func (s Stats) KVUsage() float64 {
	if s.Blocks == 0 {
		return 0
	}
	return float64(s.UsedBlocks) / float64(s.Blocks)
}

type reqState struct {
	Request
	output       []uint32 // generated tokens, append-only (blocks alias it, as they alias Prompt)
	numOutput    int
	computed     int
	blocks       []int32
	numCached    int // leading blocks already cached (hashed)
	hashes       []BlockHash
	extras       []*ExtraKeys
	prefilled    bool // caught up with its tokens since the last (re)admission
	admitted     bool // counted in the prefix-cache stats
	cachedTokens int
	running      bool
}

func (r *reqState) numTokens() int { return len(r.Prompt) + len(r.output) }

// span returns tokens [from, to) of prompt+output, aliasing Prompt or output when the range lies in one of
// them (neither is ever modified in place) and copying only for the range that straddles both.
func (r *reqState) span(from, to int) []uint32 {
	np := len(r.Prompt)
	switch {
	case to <= np:
		return r.Prompt[from:to:to]
	case from >= np:
		return r.output[from-np : to-np : to-np]
	}
	out := make([]uint32, 0, to-from)
	out = append(out, r.Prompt[from:]...)
	return append(out, r.output[:to-np]...)
}

func (r *reqState) blockTokens(i, bs int) []uint32 { return r.span(i*bs, (i+1)*bs) }

// Engine is one simulated vLLM engine core (one dp rank): the KV block pool and the continuous-batching
// scheduler. It is pure: no goroutines, no clock, no I/O; Step returns how long the step takes and what it
// emitted, and the caller performs it. Not safe for concurrent use.
type Engine struct {
	cfg     EngineConfig
	pool    *blockPool
	waiting []*reqState // FIFO; preempted requests return to the front
	running []*reqState
	byID    map[string]*reqState
	stats   Stats
	res     StepResult
	sched   []scheduled
	hits    []int32
}

type scheduled struct {
	r      *reqState
	n      int
	decode bool
}

// NewEngine validates cfg and builds an empty engine.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Engine{
		cfg:  cfg,
		pool: newBlockPool(cfg.NumGPUBlocks, cfg.BlockSize),
		byID: make(map[string]*reqState),
	}, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() EngineConfig { return e.cfg }

// SetSpeed changes the speedup ratios from the next step on (an engine slowed or sped up mid-run, for
// simulations of a fleet whose engines change speed). Both must be positive.
func (e *Engine) SetSpeed(speedup, decodeSpeedup float64) error {
	if !(speedup > 0) || !(decodeSpeedup > 0) {
		return fmt.Errorf("%w: speedup ratios %v and %v must be positive", ErrBadConfig, speedup, decodeSpeedup)
	}
	e.cfg.SpeedupRatio, e.cfg.DecodeSpeedupRatio = speedup, decodeSpeedup
	return nil
}

// Add queues a request. It fails with ErrBadRequest when the request can never fit the KV cache or the
// model length, or when its ID is already live.
func (e *Engine) Add(req Request) error {
	bs := e.cfg.BlockSize
	switch {
	case len(req.Prompt) == 0:
		return fmt.Errorf("%w: empty prompt", ErrBadRequest)
	case req.MaxTokens < 1:
		return fmt.Errorf("%w: max_tokens %d must be at least 1", ErrBadRequest, req.MaxTokens)
	case e.byID[req.ID] != nil:
		return fmt.Errorf("%w: duplicate request id %q", ErrBadRequest, req.ID)
	}
	// Compared as room left after the prompt: prompt + max_tokens would wrap for a max_tokens near the
	// int range (and then pass both checks, and the output buffer below would be sized by it).
	if e.cfg.MaxModelLen > 0 && req.MaxTokens > e.cfg.MaxModelLen-len(req.Prompt) {
		return fmt.Errorf("%w: prompt (%d) + max_tokens (%d) exceeds max model length %d", ErrBadRequest, len(req.Prompt), req.MaxTokens, e.cfg.MaxModelLen)
	}
	if req.MaxTokens > e.cfg.NumGPUBlocks*bs-len(req.Prompt) {
		return fmt.Errorf("%w: prompt (%d) + max_tokens (%d) needs more than the %d KV blocks of %d tokens", ErrBadRequest, len(req.Prompt), req.MaxTokens, e.cfg.NumGPUBlocks, bs)
	}
	for i, it := range req.MM {
		if it.Offset < 0 || it.Length <= 0 || it.Offset+it.Length > len(req.Prompt) || (i > 0 && it.Offset < req.MM[i-1].Offset) {
			return fmt.Errorf("%w: multimodal item %d [%d,+%d) out of order or outside the prompt", ErrBadRequest, i, it.Offset, it.Length)
		}
	}
	r := &reqState{Request: req}
	r.output = make([]uint32, 0, req.MaxTokens)
	e.byID[req.ID] = r
	e.waiting = append(e.waiting, r)
	return nil
}

// Abort drops a live request (client gone), freeing its blocks. It reports whether the request was live.
func (e *Engine) Abort(id string) bool {
	r := e.byID[id]
	if r == nil {
		return false
	}
	delete(e.byID, id)
	if r.running {
		e.running = slices.DeleteFunc(e.running, func(x *reqState) bool { return x == r })
		e.pool.release(r.blocks)
		r.blocks, r.running = nil, false
	} else {
		e.waiting = slices.DeleteFunc(e.waiting, func(x *reqState) bool { return x == r })
	}
	return true
}

// ResetPrefixCache drops every cached block if none is in use (AllBlocksCleared goes out with the next
// TakeEvents or Step); otherwise it returns ErrResetBusy.
func (e *Engine) ResetPrefixCache() error {
	if !e.pool.reset() {
		return ErrResetBusy
	}
	return nil
}

// TakeEvents returns and clears the events not yet returned by a Step (e.g. after ResetPrefixCache).
func (e *Engine) TakeEvents() []KVEvent {
	ev := slices.Clone(e.pool.events)
	e.pool.events = e.pool.events[:0]
	return ev
}

// HasWork reports whether a Step would schedule anything.
func (e *Engine) HasWork() bool { return len(e.running) > 0 || len(e.waiting) > 0 }

// Stats returns the current gauges and counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Running, s.Waiting = len(e.running), len(e.waiting)
	s.UsedBlocks, s.Blocks = e.pool.usedBlocks(), e.pool.capacity
	s.Evictions = e.pool.evictions
	return s
}

// PendingPrefill is the prefill the engine has not started: the tokens of each running request still in
// prefill beyond those its steps so far (the one in flight included) took, and each waiting request's
// tokens less the prefix its cache holds now. A router's charge for a worker's queued prefill (the
// uncached tokens routed there and not yet at their first token) less this is what the engine has
// computed of it, or computes in the step in flight.
func (e *Engine) PendingPrefill() int {
	n := 0
	for _, r := range e.running {
		if !r.prefilled {
			n += r.numTokens() - r.computed
		}
	}
	for _, r := range e.waiting {
		n += r.numTokens() - e.PrefixHitTokens(r.Request)
	}
	return n
}

// CachedBlocks appends the cached blocks (ground truth for /debug/kv_blocks) to dst, in block-id order.
// Token slices alias engine memory that is never mutated.
func (e *Engine) CachedBlocks(dst []CachedBlock) []CachedBlock { return e.pool.cachedBlocks(dst) }

// PrefixHitTokens is how many tokens of prompt the cache holds now (full blocks, capped one token short of
// the prompt as vLLM does), without touching anything: the figure a router's overlap score predicts.
func (e *Engine) PrefixHitTokens(req Request) int {
	r := &reqState{Request: req}
	maxBlocks := (len(req.Prompt) - 1) / e.cfg.BlockSize
	e.ensureHashes(r, maxBlocks)
	n := 0
	for n < maxBlocks && e.pool.lookup(r.hashes[n]) >= 0 {
		n++
	}
	return n * e.cfg.BlockSize
}

func (e *Engine) ensureHashes(r *reqState, nFull int) {
	bs := e.cfg.BlockSize
	for i := len(r.hashes); i < nFull; i++ {
		extra := blockExtraKeys(i, bs, r.LoraName, r.CacheSalt, r.MM)
		var parent BlockHash
		if i > 0 {
			parent = r.hashes[i-1]
		}
		r.hashes = append(r.hashes, hashBlock(e.cfg.HashSeed, parent, i > 0, r.blockTokens(i, bs), extra))
		r.extras = append(r.extras, extra)
	}
}

// cacheFull caches the request's blocks that are full once its first upto tokens are computed, emitting one
// BlockStored for the consecutive new blocks (vLLM's cache_full_blocks at scheduling time).
func (e *Engine) cacheFull(r *reqState, upto int) {
	bs := e.cfg.BlockSize
	nFull := upto / bs
	if nFull <= r.numCached {
		return
	}
	e.ensureHashes(r, nFull)
	first := r.numCached
	for i := first; i < nFull; i++ {
		var parent BlockHash
		if i > 0 {
			parent = r.hashes[i-1]
		}
		e.pool.cacheBlock(r.blocks[i], r.hashes[i], parent, i > 0, r.blockTokens(i, bs), r.extras[i], r.LoraName)
	}
	ev := KVEvent{
		Kind:      EventStored,
		Hashes:    slices.Clone(r.hashes[first:nFull]),
		Tokens:    r.span(first*bs, nFull*bs),
		BlockSize: bs,
		Extra:     slices.Clone(r.extras[first:nFull]),
		LoraName:  r.LoraName,
	}
	if first > 0 {
		ev.Parent, ev.HasParent = r.hashes[first-1], true
	}
	e.pool.events = append(e.pool.events, ev)
	r.numCached = nFull
}

// growBlocks makes room for the request's first upto tokens; false when the free queue is too short.
func (e *Engine) growBlocks(r *reqState, upto int) bool {
	need := (upto+e.cfg.BlockSize-1)/e.cfg.BlockSize - len(r.blocks)
	if need > e.pool.numFree {
		return false
	}
	for range need {
		r.blocks = append(r.blocks, e.pool.allocate())
	}
	return true
}

func (e *Engine) preempt(r *reqState) {
	e.pool.release(r.blocks)
	r.blocks = r.blocks[:0]
	r.numCached, r.computed, r.prefilled, r.running = 0, 0, false, false
	e.waiting = slices.Insert(e.waiting, 0, r)
	e.stats.Preemptions++
	e.res.Preempted++
}

// Step schedules one engine step (vLLM's V1 scheduler: running requests first, then waiting ones while
// the token budget and max_num_seqs allow, chunking long prefills and preempting the newest running
// request when blocks run out), applies its outcome (one token per request that caught up with its
// tokens) and returns the step's simulated duration, events and per-request progress.
func (e *Engine) Step() *StepResult {
	res := &e.res
	*res = StepResult{Events: res.Events[:0], Progress: res.Progress[:0]}
	e.sched = e.sched[:0]
	budget := e.scheduleRunning(e.cfg.MaxNumBatchedTokens)
	e.admitWaiting(budget)
	e.timeStep(res)
	e.sampleOutputs(res)
	res.Events = append(res.Events, e.pool.events...)
	e.pool.events = e.pool.events[:0]
	if len(e.sched) == 0 && len(res.Events) == 0 {
		res.Idle = true
		res.Duration = 0
	} else {
		e.stats.Steps++
		e.stats.BusyTime += res.Duration
	}
	return res
}

// scheduleRunning is the step's first phase: each running request, in admission order, is scheduled for
// the tokens it still has to compute within budget; when blocks run out the newest running request is
// preempted (possibly the one being scheduled, which ends the phase). It returns the budget left.
func (e *Engine) scheduleRunning(budget int) int {
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		n := min(r.numTokens()-r.computed, budget)
		scheduledSelf := true
		for !e.growBlocks(r, r.computed+n) {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			if victim == r {
				scheduledSelf = false
				break
			}
		}
		if !scheduledSelf {
			break
		}
		e.cacheFull(r, r.computed+n)
		e.sched = append(e.sched, scheduled{r: r, n: n, decode: r.prefilled})
		budget -= n
	}
	return budget
}

// admitWaiting is the second phase: waiting requests are admitted in order while the budget, max_num_seqs
// and the free blocks allow, unless this step had to preempt.
func (e *Engine) admitWaiting(budget int) {
	for e.res.Preempted == 0 && len(e.waiting) > 0 && budget > 0 && len(e.running) < e.cfg.MaxNumSeqs {
		n, ok := e.admit(e.waiting[0], budget)
		if !ok {
			return
		}
		budget -= n
	}
}

// admit moves r from waiting to running: it reuses r's longest cached prefix of full blocks (at most
// len-1 tokens, so that one token is computed; blocks pulled from a prefill engine count as computed),
// takes blocks for up to budget more tokens and schedules them. It returns the tokens scheduled, or false
// when the free and evictable blocks cannot hold them.
func (e *Engine) admit(r *reqState, budget int) (int, bool) {
	bs := e.cfg.BlockSize
	maxBlocks := (r.numTokens() - 1) / bs
	e.ensureHashes(r, maxBlocks)
	e.hits = e.hits[:0]
	evictable := 0
	for len(e.hits) < maxBlocks {
		id := e.pool.lookup(r.hashes[len(e.hits)])
		if id < 0 {
			break
		}
		if e.pool.blocks[id].ref == 0 {
			evictable++
		}
		e.hits = append(e.hits, id)
	}
	hitTokens := len(e.hits) * bs
	if remote := min(r.RemoteBlocks, maxBlocks); remote > len(e.hits) {
		// Pulled from the prefill engine: computed, not yet cached here (cacheFull stores them).
		hitTokens = remote * bs
	}
	n := min(r.numTokens()-hitTokens, budget)
	need := (hitTokens+n+bs-1)/bs - len(e.hits)
	if need > e.pool.numFree-evictable {
		return 0, false
	}
	for _, id := range e.hits {
		e.pool.touch(id)
	}
	r.blocks = append(r.blocks[:0], e.hits...)
	r.numCached, r.computed = len(e.hits), hitTokens
	r.RemoteBlocks = 0 // a preempted request recomputes what it pulled
	e.growBlocks(r, hitTokens+n)
	if !r.admitted {
		r.admitted = true
		r.cachedTokens = len(e.hits) * bs
		e.stats.PrefixQueries += uint64(r.numTokens())
		e.stats.PrefixHits += uint64(r.cachedTokens)
		e.stats.PromptTokens += uint64(len(r.Prompt))
	}
	e.waiting = e.waiting[1:]
	r.running = true
	e.running = append(e.running, r)
	e.cacheFull(r, hitTokens+n)
	e.sched = append(e.sched, scheduled{r: r, n: n})
	return n, true
}

// timeStep is the third phase: the scheduled work (prefill tokens and their attention pairs, decodes and
// their context) and the step's simulated duration from it.
func (e *Engine) timeStep(res *StepResult) {
	for _, s := range e.sched {
		if s.decode {
			res.Decodes++
			res.DecodeContext += s.r.computed
		} else {
			res.PrefillTokens += s.n
			res.PrefillPairs += float64(s.n) * (float64(s.r.computed) + float64(s.n)/2)
		}
	}
	if t := e.cfg.Timing; t != nil {
		in := StepInputs{PrefillTokens: res.PrefillTokens, PrefillPairs: res.PrefillPairs, Decodes: res.Decodes, DecodeContext: res.DecodeContext}
		res.Duration = t.Duration(in, e.cfg.SpeedupRatio, e.cfg.DecodeSpeedupRatio)
	} else {
		occupancy := float64(e.pool.usedBlocks()) / float64(e.pool.capacity)
		res.Duration = StepDuration(res.PrefillTokens, res.Decodes, occupancy, e.cfg.SpeedupRatio, e.cfg.DecodeSpeedupRatio)
	}
}

// sampleOutputs is the outcome: a request that caught up with its tokens samples one; one that reached
// its max_tokens releases its blocks and leaves the running list.
func (e *Engine) sampleOutputs(res *StepResult) {
	bs := e.cfg.BlockSize
	finished := false
	for _, s := range e.sched {
		r := s.r
		r.computed += s.n
		if r.computed < r.numTokens() {
			continue
		}
		r.prefilled = true
		tok := e.cfg.FillerTokens[(r.numOutput+len(r.Prompt))%len(e.cfg.FillerTokens)]
		r.output = append(r.output, tok)
		r.numOutput++
		e.stats.GenerationTokens++
		p := Progress{ID: r.ID, Token: tok, Output: r.numOutput, First: r.numOutput == 1, PromptTokens: len(r.Prompt), CachedTokens: r.cachedTokens}
		if r.numOutput >= r.MaxTokens {
			p.Done = true
			if r.RemoteDecode {
				p.BlockIDs = slices.Clone(r.blocks[:len(r.Prompt)/bs])
			}
			e.pool.release(r.blocks)
			r.blocks = nil
			r.running = false
			delete(e.byID, r.ID)
			e.stats.FinishedRequests++
			finished = true
		}
		res.Progress = append(res.Progress, p)
	}
	if finished {
		e.running = slices.DeleteFunc(e.running, func(r *reqState) bool { return !r.running })
	}
}
