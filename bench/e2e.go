package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/frontend"
	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/workers/client"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

// The e2e bench's long-lived goroutines: the in-process stack's HTTP server (ended by its Close) and an
// arm's load sampler (joined through samplerDone). The per-request goroutines of a replay are a fan-out
// joined by a WaitGroup before the arm returns, and stay bare.
var (
	e2eServe    = routine.Named("bench.e2e-serve")
	loadSampler = routine.Named("bench.load-sampler")
)

// The end-to-end bench: per arm, a fresh fleet of simulated vLLM workers (real HTTP and
// ZMQ on loopback), a fresh router core and OpenAI frontend, and the trace replayed through
// /v1/completions as token-id prompts. Arms run one after another on the same arrivals.

// E2E arm names (--modes).
const (
	ArmKV          = "kv"
	ArmKVApprox    = "kv-approx"
	ArmRoundRobin  = "round-robin"
	ArmRandom      = "random"
	ArmLeastLoaded = "least-loaded"
	ArmLLMD        = "llmd"
	ArmSGLang      = "sglang"
	// ArmDisagg is kv routing over a disaggregated fleet of the same size: the first half of the workers
	// prefill (role=prefill), the rest decode, conditional prefill at Dynamo's defaults (token_cap).
	ArmDisagg = "disagg"
	// ArmDisaggAll is ArmDisagg with every request disaggregated (conditional prefill policy never).
	ArmDisaggAll = "disagg-all"
)

// E2EArms lists every arm, in report order.
var E2EArms = []string{ArmKV, ArmKVApprox, ArmRoundRobin, ArmRandom, ArmLeastLoaded, ArmLLMD, ArmSGLang}

// disaggArms are the arms over a disaggregated fleet (not in the default list: they answer "aggregated
// or disaggregated?", --modes kv,disagg,disagg-all).
var disaggArms = []string{ArmDisagg, ArmDisaggAll}

// prefillWorkers is how many of a fleet's workers prefill in a disaggregated arm (0: aggregated).
func prefillWorkers(arm string, workers int) int {
	if arm != ArmDisagg && arm != ArmDisaggAll {
		return 0
	}
	return max(1, workers/2)
}

// E2EConfig configures one e2e run (every arm, every sweep point).
type E2EConfig struct {
	// Workers is the fleet size. Default 8 (Dynamo's router benchmark).
	Workers int
	// Arms are the arms to run (E2EArms names). Default all.
	Arms []string
	// ArrivalSpeedups divides trace time; one entry per sweep point (--arrival-speedup, or
	// --sweep-arrival). Default {1}.
	ArrivalSpeedups []float64
	// SpeedupRatio divides the simulated engine durations (mocker --speedup-ratio). Default 1.
	SpeedupRatio float64
	// Blocks maps trace hash ids to tokens (--trace-block-size, seed).
	Blocks Blocks
	// BlockSize is the engine and router KV block size in tokens. Default 64 (the mocker's and the
	// published A/B's).
	BlockSize int
	// NumGPUBlocks is each worker's KV capacity in blocks. Default 16,384 (the mocker's).
	NumGPUBlocks int
	// SLOTTFT is the TTFT p90 bound of goodput. Default 2 s.
	SLOTTFT time.Duration
	// Seed seeds the router's random choices (random arm, tie-breaks). Default 42.
	Seed uint64
	// DrainTimeout bounds the wait for in-flight requests after the last arrival; what is still running
	// then is cancelled and counted as failed (its TTFT censored at the cancel). Default 2 minutes.
	DrainTimeout time.Duration
	// LoadSamples is about how many per-worker load samples an arm records. Default 400.
	LoadSamples int
}

// DefaultE2EConfig returns the defaults.
func DefaultE2EConfig() E2EConfig {
	return E2EConfig{Workers: 8, Arms: E2EArms, ArrivalSpeedups: []float64{1}, SpeedupRatio: 1, Blocks: DefaultBlocks(),
		BlockSize: 64, NumGPUBlocks: 16384, SLOTTFT: 2 * time.Second, Seed: 42, DrainTimeout: 2 * time.Minute, LoadSamples: 400}
}

// Validate checks the configuration.
func (c *E2EConfig) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("bench: e2e workers %d must be positive", c.Workers)
	}
	if len(c.Arms) == 0 {
		return fmt.Errorf("bench: e2e needs at least one arm")
	}
	for _, a := range c.Arms {
		if !isArm(a) {
			return fmt.Errorf("bench: unknown e2e arm %q (have %v, %v)", a, E2EArms, disaggArms)
		}
		if prefillWorkers(a, c.Workers) > 0 && c.Workers < 2 {
			return fmt.Errorf("bench: e2e arm %s needs at least 2 workers (prefill and decode)", a)
		}
	}
	if len(c.ArrivalSpeedups) == 0 {
		return fmt.Errorf("bench: e2e needs an arrival speedup")
	}
	for _, s := range c.ArrivalSpeedups {
		if !(s > 0) {
			return fmt.Errorf("bench: arrival speedup %v must be positive", s)
		}
	}
	if !(c.SpeedupRatio > 0) {
		return fmt.Errorf("bench: speedup ratio %v must be positive", c.SpeedupRatio)
	}
	if err := c.Blocks.Validate(); err != nil {
		return err
	}
	if err := c.Blocks.CheckEngineBlock(c.BlockSize); err != nil {
		return err
	}
	if c.NumGPUBlocks < 1 || c.SLOTTFT <= 0 || c.DrainTimeout <= 0 || c.LoadSamples < 2 {
		return fmt.Errorf("bench: e2e num-gpu-blocks %d, slo %v, drain %v, load samples %d", c.NumGPUBlocks, c.SLOTTFT, c.DrainTimeout, c.LoadSamples)
	}
	return nil
}

// armScalePrefix names diagnostic kv arms with another --router-prefill-load-scale: "kv-scale8" is kv
// mode with PrefillLoadScale 8 (Dynamo's default is 1), which weighs the uncached prefill 8× against the
// active decode blocks. Not in the default arm list: it answers "does the load term cost the hit rate?".
const armScalePrefix = "kv-scale"

func armScale(a string) (float64, bool) {
	if !strings.HasPrefix(a, armScalePrefix) {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.TrimPrefix(a, armScalePrefix), 64)
	return v, err == nil && v >= 0
}

func isArm(a string) bool {
	if _, ok := armScale(a); ok {
		return true
	}
	for _, b := range append(E2EArms, disaggArms...) {
		if a == b {
			return true
		}
	}
	return false
}

// E2ESample is one request as the client saw it. Durations are seconds; TTFT is from sending the
// request to the first data event carrying a token; ITL is the request's mean inter-token gap
// ((last token − first token) / (tokens − 1), AIPerf's per-request ITL); E2E is to the end of the stream.
type E2ESample struct {
	Index  int     `json:"i"`
	Worker int     `json:"w"` // fleet index, -1 when never routed
	At     float64 `json:"at"`
	TTFT   float64 `json:"ttft"`
	ITL    float64 `json:"itl"`
	E2E    float64 `json:"e2e"`
	// PromptTokens and CachedTokens come from the usage chunk (the engine's counts); PredictedTokens is
	// the router's overlap header × block size, capped at the prompt.
	PromptTokens    int    `json:"prompt"`
	CachedTokens    int    `json:"cached"`
	PredictedTokens int    `json:"predicted"`
	OutputTokens    int    `json:"output"`
	Err             string `json:"err,omitempty"`
}

// OK reports whether the request completed.
func (s *E2ESample) OK() bool { return s.Err == "" }

// ArmRun is what one arm at one arrival speedup recorded: the samples, the load over time and the
// engines' own counters. Summarize turns it into an ArmResult.
type ArmRun struct {
	Arm            string
	ArrivalSpeedup float64
	// TimeScale converts wall time to model time (the engine's time at speedup ratio 1): the speedup
	// ratio. Samples are wall seconds; SummarizeArm reports model time.
	TimeScale float64
	// Offered is the offered arrival rate in model requests/s: requests / replayed span × speedup ratio⁻¹.
	Offered float64
	Samples []E2ESample
	// LoadT are the sample times (s from the start) and Load[w][i] worker w's in-flight requests then.
	LoadT []float64
	Load  [][]float64
	// Wall is from the first arrival to the last completion (or the drain timeout).
	Wall time.Duration
	// Lateness is how far behind schedule the replay fired at worst (CPU starvation shows here).
	Lateness time.Duration
	// Engine holds each worker's engine counters at the end.
	Engine []mocker.Stats
	// Prefill is how many of the leading workers (and Engine entries) are prefill workers (disaggregated
	// arms; 0 otherwise); Disaggregated and Bypassed count the requests that took the prefill hop and
	// those conditional prefill served aggregated.
	Prefill                 int
	Disaggregated, Bypassed uint64
}

// e2eStack is one arm's deployment: fleet, router, frontend on a loopback listener.
type e2eStack struct {
	fleet  *mocker.Fleet
	system *actor.ActorSystem
	r      *router.Router
	pd     *frontend.Disagg // disaggregated arms: the prefill core
	pool   *frontend.WorkerPool
	srv    *frontend.Server
	base   string
	ids    map[uint64]int // worker id → fleet index
}

func armRouterConfig(arm string, bs int) router.Config {
	rcfg := router.DefaultConfig(bs)
	switch arm {
	case ArmKV, ArmDisagg, ArmDisaggAll:
	case ArmKVApprox:
		rcfg.Scoring.UseKVEvents = false
	case ArmRoundRobin:
		rcfg.Scoring.Mode = scoring.ModeRoundRobin
	case ArmRandom:
		rcfg.Scoring.Mode = scoring.ModeRandom
	case ArmLeastLoaded:
		rcfg.Scoring.Mode = scoring.ModeLeastLoaded
	case ArmLLMD:
		rcfg.Selector = NewLLMDSelector(bs)
	case ArmSGLang:
		rcfg.Selector = NewSGLangSelector(bs)
	default:
		if v, ok := armScale(arm); ok {
			rcfg.Scoring.PrefillLoadScale = v
		}
	}
	return rcfg
}

// e2eFirstWorkerID numbers the bench's workers from 1, as kvroute serve and the launch script do.
const e2eFirstWorkerID = 1

func startE2EStack(cfg *E2EConfig, arm string) (_ *e2eStack, err error) {
	eng := mocker.DefaultEngineConfig()
	eng.BlockSize, eng.NumGPUBlocks, eng.SpeedupRatio = cfg.BlockSize, cfg.NumGPUBlocks, cfg.SpeedupRatio
	tmpl := mocker.WorkerConfig{Engine: eng, DefaultMaxTokens: 16}
	events := arm != ArmKVApprox // approximate mode reads no events: don't pay for publishing them
	if events {
		tmpl.KVEvents = mocker.DefaultKVEventsConfig()
	}
	fc := mocker.FleetConfig{NumWorkers: cfg.Workers, Template: tmpl, NoReplay: !events, FirstID: e2eFirstWorkerID}
	fleet, err := mocker.StartFleet(fc)
	if err != nil {
		return nil, err
	}
	s := &e2eStack{fleet: fleet, ids: map[uint64]int{}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.system = actors.NewSystem(nil)
	rcfg := armRouterConfig(arm, cfg.BlockSize)
	seed := cfg.Seed
	rcfg.Seed = &seed
	if s.r, err = router.New(s.system, rcfg); err != nil {
		return nil, err
	}
	nPrefill := prefillWorkers(arm, cfg.Workers)
	if nPrefill > 0 {
		if err := s.startPrefill(arm, rcfg); err != nil {
			return nil, err
		}
	}
	for i, spec := range fleet.Specs() {
		sp, err := registry.Parse(spec)
		if err != nil {
			return nil, err
		}
		if nPrefill > 0 {
			sp.Role = registry.RoleDecode
			if i < nPrefill {
				sp.Role = registry.RolePrefill
			}
		}
		if err := frontend.RegisterWorker(s.r, s.pd, sp); err != nil {
			return nil, err
		}
		s.ids[sp.ID] = i
	}
	s.pool = frontend.NewWorkerPool(client.DefaultConfig())
	api := frontend.NewOpenAIAPI(s.r, nil, "mock-model", s.system, s.pool, frontend.OpenAIConfig{RequestTimeout: time.Hour}, frontend.NewFrontendMetrics(nil))
	api.PD = s.pd
	s.srv = frontend.NewServer(frontend.ServerConfig{}, api, &frontend.RouterAPI{R: s.r, PD: s.pd})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e2eServe.Go(func() { _ = s.srv.Serve(ln) })
	s.base = "http://" + ln.Addr().String()
	if events {
		s.waitConnected(10 * time.Second)
	}
	return s, nil
}

// startPrefill starts the prefill core of a disaggregated arm (the same mode and cost as rcfg, no
// active-block tracking); disagg-all sends every request through it.
func (s *e2eStack) startPrefill(arm string, rcfg router.Config) error {
	pcfg := rcfg
	pcfg.Scoring = frontend.PrefillConfig(rcfg.Scoring)
	pcfg.RouterID = "kvroute-prefill"
	pr, err := router.New(s.system, pcfg)
	if err != nil {
		return err
	}
	dc := frontend.DefaultDisaggConfig()
	if arm == ArmDisaggAll {
		dc.BypassPolicy = frontend.BypassNever
	}
	if s.pd, err = frontend.NewDisagg(pr, dc); err != nil {
		pr.Stop()
		return err
	}
	return nil
}

// waitConnected waits, up to d, until every worker's event stream is connected (its catch-up replay
// answered), so that the first requests are not routed on an index that misses events.
func (s *e2eStack) waitConnected(d time.Duration) {
	deadline := time.Now().Add(d)
	cores := []*router.Router{s.r}
	if s.pd != nil {
		cores = append(cores, s.pd.Prefill)
	}
	for _, core := range cores {
		for _, w := range core.Workers() {
			for w.Replays == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
				w, _ = core.Fleet.StatusOf(w.ID)
			}
		}
	}
}

// Close stops everything the stack started.
func (s *e2eStack) Close() {
	if s.srv != nil {
		_ = s.srv.Shutdown()
	}
	if s.pool != nil {
		s.pool.Close()
	}
	if s.pd != nil {
		s.pd.Prefill.Stop()
	}
	if s.r != nil {
		s.r.Stop()
	}
	if s.system != nil {
		s.system.Shutdown()
	}
	_ = s.fleet.Close()
}

// completionBody is the request body of one trace line: its token-id prompt, max_tokens = output
// length, streamed with usage.
func completionBody(dst []byte, b *Blocks, r *Request, scratch []uint32) ([]byte, []uint32) {
	scratch = b.AppendPrompt(scratch[:0], r)
	dst = append(dst[:0], `{"model":"mock-model","stream":true,"stream_options":{"include_usage":true},"max_tokens":`...)
	dst = strconv.AppendInt(dst, int64(max(1, r.OutputLength)), 10)
	dst = append(dst, `,"prompt":[`...)
	for i, t := range scratch {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, uint64(t), 10)
	}
	return append(dst, "]}"...), scratch
}

// errNotSent marks a request the replay never fired (the run was cancelled first).
const errNotSent = "not sent"

var (
	sseData  = []byte("data: ")
	sseDone  = []byte("[DONE]")
	sseUsage = []byte(`"usage":{`)
	sseError = []byte(`"error":`)
	sseChoic = []byte(`"choices":[{`)
)

type usageChunk struct {
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// e2eRequest sends one request and reads its stream into s. inflight[w] counts the request while its
// worker is known and it has not ended.
func e2eRequest(ctx context.Context, hc *http.Client, st *e2eStack, body []byte, bs, promptLen int, inflight []atomic.Int64, s *E2ESample) {
	start := time.Now()
	s.Worker, s.Err = -1, ""
	defer func() {
		if s.E2E == 0 {
			s.E2E = time.Since(start).Seconds()
		}
		if s.TTFT == 0 && !s.OK() {
			s.TTFT = time.Since(start).Seconds() // censored: no token before the failure
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, st.base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		s.Err = err.Error()
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		s.Err = err.Error()
		return
	}
	defer resp.Body.Close()
	if id, err := strconv.ParseUint(resp.Header.Get("x-kvroute-worker-id"), 10, 64); err == nil {
		if w, ok := st.ids[id]; ok {
			s.Worker = w
			inflight[w].Add(1)
			defer inflight[w].Add(-1)
		}
	}
	if ov, err := strconv.Atoi(resp.Header.Get("x-kvroute-overlap-blocks")); err == nil {
		s.PredictedTokens = min(ov*bs, promptLen)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		s.Err = fmt.Sprintf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
		return
	}
	first, last, tokens := readE2EStream(bufio.NewReaderSize(resp.Body, 16<<10), start, s)
	s.E2E = time.Since(start).Seconds()
	if tokens > 1 {
		s.ITL = last.Sub(first).Seconds() / float64(tokens-1)
	}
	if s.OutputTokens == 0 {
		s.OutputTokens = tokens
	}
	if tokens == 0 && s.Err == "" {
		s.Err = "no tokens"
	}
}

// readE2EStream reads a completion's SSE stream to its end: the time of the first and last token chunk
// and how many there were (TTFT is set at the first), the usage chunk's counts, and an error event or a
// read error into s.Err.
func readE2EStream(br *bufio.Reader, start time.Time, s *E2ESample) (first, last time.Time, tokens int) {
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			rest, err2 := br.ReadBytes('\n')
			line, err = append(append([]byte(nil), line...), rest...), err2
		}
		if len(line) > 0 && bytes.HasPrefix(line, sseData) {
			data := bytes.TrimSpace(line[len(sseData):])
			switch {
			case bytes.Equal(data, sseDone):
			case bytes.Contains(data, sseUsage):
				var u usageChunk
				if json.Unmarshal(data, &u) == nil && u.Usage != nil {
					s.PromptTokens, s.OutputTokens = u.Usage.PromptTokens, u.Usage.CompletionTokens
					if d := u.Usage.PromptTokensDetails; d != nil {
						s.CachedTokens = d.CachedTokens
					}
				}
			case bytes.HasPrefix(data, []byte("{")) && bytes.Contains(data, sseError) && !bytes.Contains(data, sseChoic):
				s.Err = "stream error: " + string(data)
			case bytes.Contains(data, sseChoic):
				now := time.Now()
				if tokens == 0 {
					first = now
					s.TTFT = now.Sub(start).Seconds()
				}
				last = now
				tokens++
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && s.Err == "" {
				s.Err = err.Error()
			}
			return first, last, tokens
		}
	}
}

// RunArm replays tr at arrival speedup x through a fresh stack for arm and records every request. p
// (may be nil) advances by one per finished request.
func RunArm(ctx context.Context, cfg *E2EConfig, tr *Trace, arm string, x float64, p *Progress) (*ArmRun, error) {
	arrivals, err := tr.Arrivals(ReplayConfig{Speedup: x, Seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	st, err := startE2EStack(cfg, arm)
	if err != nil {
		return nil, fmt.Errorf("bench: e2e arm %s: %w", arm, err)
	}
	defer st.Close()
	run := &ArmRun{Arm: arm, ArrivalSpeedup: x, TimeScale: cfg.SpeedupRatio, Samples: make([]E2ESample, len(tr.Requests)), Load: make([][]float64, cfg.Workers)}
	for i := range run.Samples {
		run.Samples[i] = E2ESample{Index: i, Worker: -1, Err: errNotSent}
	}
	if span := tr.Span().Seconds() / x; span > 0 {
		run.Offered = float64(len(tr.Requests)) / span / cfg.SpeedupRatio
	}
	tr2 := &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true, IdleConnTimeout: time.Minute}
	defer tr2.CloseIdleConnections()
	hc := &http.Client{Transport: tr2}
	inflight := make([]atomic.Int64, cfg.Workers)

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()

	every := max(20*time.Millisecond, time.Duration(float64(tr.Span())/x)/time.Duration(cfg.LoadSamples))
	stopSampler := sampleLoad(run, inflight, start, every)

	var wg sync.WaitGroup
	blocks := cfg.Blocks
	late, rerr := Replay(rctx, arrivals, WallSleeper{Start: start}, func() time.Duration { return time.Since(start) }, func(a Arrival) {
		r := &tr.Requests[a.Index]
		s := &run.Samples[a.Index]
		s.Index, s.At = a.Index, a.At.Seconds()
		body, _ := completionBody(nil, &blocks, r, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			e2eRequest(rctx, hc, st, body, cfg.BlockSize, blocks.PromptLen(r), inflight, s)
			if p != nil {
				p.Add(1)
			}
		}()
	})
	run.Lateness = late
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cfg.DrainTimeout):
		cancel()
		<-done
	case <-ctx.Done():
		cancel()
		<-done
	}
	run.Wall = time.Since(start)
	stopSampler()
	for _, w := range st.fleet.Workers {
		run.Engine = append(run.Engine, w.Stats(0))
	}
	if st.pd != nil {
		run.Prefill = prefillWorkers(arm, cfg.Workers)
		run.Disaggregated, run.Bypassed, _ = st.pd.Counts()
	}
	if rerr != nil && ctx.Err() != nil {
		return run, ctx.Err()
	}
	return run, nil
}

// sampleLoad records each worker's in-flight requests into run.Load every period (so a run has about
// LoadSamples points) until the returned stop, which joins the sampler.
func sampleLoad(run *ArmRun, inflight []atomic.Int64, start time.Time, every time.Duration) (stop func()) {
	samplerDone := make(chan struct{})
	stopSampler := make(chan struct{})
	loadSampler.Go(func() {
		defer close(samplerDone)
		routine.Every(stopSampler, every, func() {
			run.LoadT = append(run.LoadT, time.Since(start).Seconds())
			for w := range inflight {
				run.Load[w] = append(run.Load[w], float64(inflight[w].Load()))
			}
		})
	})
	return func() {
		close(stopSampler)
		<-samplerDone
	}
}

// RunE2E runs every arm at every arrival speedup of cfg on tr, sweep point by sweep point, and
// computes the oracles and verdicts. p (may be nil) counts finished requests over all runs.
func RunE2E(ctx context.Context, cfg E2EConfig, tr *Trace, p *Progress) (*E2EResult, []*ArmRun, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	o := Oracle{Blocks: cfg.Blocks, BlockSize: cfg.BlockSize}
	res := &E2EResult{Trace: tr.Stats(), Workers: cfg.Workers, BlockSize: cfg.BlockSize, NumGPUBlocks: cfg.NumGPUBlocks,
		SpeedupRatio: cfg.SpeedupRatio, SLOTTFT: cfg.SLOTTFT.Seconds()}
	var err error
	if res.Unbounded, err = o.UnboundedHitRate(tr); err != nil {
		return nil, nil, err
	}
	if res.Pooled, err = o.PooledHitRate(tr, cfg.Workers*cfg.NumGPUBlocks); err != nil {
		return nil, nil, err
	}
	if p != nil {
		p.SetTotal(int64(len(cfg.ArrivalSpeedups) * len(cfg.Arms) * len(tr.Requests)))
	}
	var runs []*ArmRun
	for _, x := range cfg.ArrivalSpeedups {
		for _, arm := range cfg.Arms {
			run, err := RunArm(ctx, &cfg, tr, arm, x, p)
			if err != nil {
				return nil, nil, err
			}
			runs = append(runs, run)
			res.Arms = append(res.Arms, SummarizeArm(run))
		}
	}
	res.Finish()
	return res, runs, nil
}
