package lab

import (
	"fmt"
	"strconv"
	"time"

	"github.com/kvroute/kvroute/bench"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/mocker"
)

// The discrete-event simulation of one arm at one arrival speedup: N mocker engines stepped on a virtual
// clock exactly as the mocker's rank loop steps them on the wall clock (a step's outcome lands at its
// end, the next step starts there, an idle engine steps as soon as a request arrives), their KV events
// re-keyed as the worker actor does and applied to the production prefix index EventDelay later, and
// the arm's scheduler called at each arrival, first token and end.

// epoch is virtual time zero (a fixed instant, so reports do not depend on the machine's clock).
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type evKind uint8

const (
	evArrive evKind = iota // a request arrives (i: trace index)
	evStep                 // engine w's step ends
	evKV                   // a batch of engine w's KV events reaches the index
	evTick                 // metrics scrape and the scheduler's timers
	evSample               // per-worker load sample for the report
	evSpeed                // every engine's speed changes (i: index into Config.SpeedChanges)
	evCal                  // sample the scheduler's learned calibration
)

type event struct {
	at   int64 // virtual nanoseconds
	seq  uint64
	kind evKind
	w    int32
	i    int32
	ops  []kvOp
}

// eventHeap is a binary min-heap on (at, seq): equal times keep their scheduling order, so a run is a
// pure function of its inputs.
type eventHeap []event

func (h eventHeap) less(a, b int) bool {
	if h[a].at != h[b].at {
		return h[a].at < h[b].at
	}
	return h[a].seq < h[b].seq
}

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = event{}
	s = s[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && s.less(l, m) {
			m = l
		}
		if r < n && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// kvOp is one re-keyed engine event, as the worker actor hands it to the indexer.
type kvOp struct {
	kind      kvevents.Kind
	parent    uint64
	hasParent bool
	blocks    []prefix.Block
	hashes    []uint64
}

type simEngine struct {
	eng      *mocker.Engine
	busy     bool
	res      *mocker.StepResult
	inflight int // dispatched and not ended
}

type simReq struct {
	req    Request
	arrive int64
	first  int64
	queued bool // the scheduler holds it
	mm     []mocker.MMItem
}

// sim is one run. Single goroutine; owns everything it holds.
type sim struct {
	cfg     *Config
	tr      *bench.Trace
	sched   Scheduler
	fleet   *Fleet
	index   *prefix.Index
	engines []simEngine
	heap    eventHeap
	seq     uint64
	now     int64
	reqs    []simReq
	byID    map[string]int
	samples []bench.E2ESample
	left    int   // requests not ended
	end     int64 // when the last request ended
	local   []uint64
	loadT   []float64
	load    [][]float64
	tick    int64
	ldEvery int64
	calib   []Calibration
}

func (s *sim) at(t int64, e event) {
	e.at, e.seq = t, s.seq
	s.seq++
	s.heap.push(e)
}

func (s *sim) time(t int64) time.Time { return epoch.Add(time.Duration(t)) }

// runArm simulates arm on tr at arrival speedup x.
func runArm(cfg *Config, tr *bench.Trace, arm Arm, x float64) (*bench.ArmRun, error) {
	return runArmWith(cfg, tr, arm, x, nil)
}

// runArmTimeline is runArm with the run's timeline (windows and calibration samples).
func runArmTimeline(cfg *Config, tr *bench.Trace, arm Arm, x float64) (*bench.ArmRun, *Timeline, error) {
	var s *sim
	run, err := runArmWith(cfg, tr, arm, x, func(x *sim) { s = x })
	if err != nil {
		return nil, nil, err
	}
	tl := &Timeline{Arm: arm.Name, ArrivalSpeedup: x, WindowS: cfg.Window.Seconds(), Windows: windows(run.Samples, cfg.Window.Seconds()),
		Calibration: s.calib}
	if x, ok := s.sched.(Explainer); ok {
		tl.Decisions = x.Decisions()
	}
	return run, tl, nil
}

// runArmWith is runArm with a hook that sees the run before it starts (tests inspect its index).
func runArmWith(cfg *Config, tr *bench.Trace, arm Arm, x float64, hook func(*sim)) (*bench.ArmRun, error) {
	arrivals, err := tr.Arrivals(bench.ReplayConfig{Speedup: x, Seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	s := &sim{cfg: cfg, tr: tr, index: prefix.New(), byID: make(map[string]int, len(tr.Requests)), left: len(tr.Requests)}
	ec := cfg.profile.EngineConfig(cfg.BlockSize)
	for range cfg.Workers {
		e, err := mocker.NewEngine(ec)
		if err != nil {
			return nil, err
		}
		s.engines = append(s.engines, simEngine{eng: e})
	}
	s.fleet = &Fleet{Workers: cfg.Workers, BlockSize: cfg.BlockSize, TotalKVBlocks: ec.NumGPUBlocks,
		MaxNumBatchedTokens: ec.MaxNumBatchedTokens, Index: s.index, index: s.index, kvUsed: make([]uint64, cfg.Workers)}
	s.fleet.pending = func(w int) int {
		e := &s.engines[w]
		n := e.eng.PendingPrefill()
		if e.busy {
			n += e.res.PrefillTokens // the step in flight
		}
		return n
	}
	if s.sched, err = arm.New(s.fleet, cfg.Seed); err != nil {
		return nil, fmt.Errorf("lab: arm %s: %w", arm.Name, err)
	}
	s.reqs = make([]simReq, len(tr.Requests))
	s.samples = make([]bench.E2ESample, len(tr.Requests))
	for _, a := range arrivals {
		s.at(int64(a.At), event{kind: evArrive, i: int32(a.Index)})
	}
	span := int64(float64(tr.Span()) / x)
	s.tick = int64(cfg.MetricsInterval)
	s.ldEvery = max(int64(20*time.Millisecond), span/int64(cfg.LoadSamples))
	s.load = make([][]float64, cfg.Workers)
	if len(arrivals) > 0 {
		s.at(0, event{kind: evTick})
		s.at(0, event{kind: evSample})
	}
	if _, ok := s.sched.(Calibrated); ok && len(arrivals) > 0 {
		s.at(0, event{kind: evCal})
	}
	for k, sc := range cfg.SpeedChanges {
		s.at(int64(sc.At), event{kind: evSpeed, i: int32(k)})
	}
	if hook != nil {
		hook(s)
	}
	for len(s.heap) > 0 {
		e := s.heap.pop()
		s.now = e.at
		switch e.kind {
		case evArrive:
			s.arrive(int(e.i))
		case evStep:
			s.stepEnd(int(e.w))
		case evKV:
			s.apply(int(e.w), e.ops)
		case evTick:
			s.scrape()
			if t, ok := s.sched.(Ticker); ok {
				s.release(t.Tick(s.time(s.now)))
			}
			if s.left > 0 {
				s.at(s.now+s.tick, event{kind: evTick})
			}
		case evSpeed:
			f := cfg.SpeedChanges[e.i].Factor
			for w := range s.engines {
				if err := s.engines[w].eng.SetSpeed(ec.SpeedupRatio*f, ec.DecodeSpeedupRatio); err != nil {
					return nil, err
				}
			}
		case evCal:
			if c, ok := s.sched.(Calibrated).Calibration(); ok {
				c.T = float64(s.now) / 1e9
				s.calib = append(s.calib, c)
			}
			if s.left > 0 {
				s.at(s.now+int64(cfg.CalibrationEvery), event{kind: evCal})
			}
		case evSample:
			s.sample()
			if s.left > 0 {
				s.at(s.now+s.ldEvery, event{kind: evSample})
			}
		}
	}
	run := &bench.ArmRun{Arm: arm.Name, ArrivalSpeedup: x, TimeScale: 1, Samples: s.samples, LoadT: s.loadT, Load: s.load,
		Wall: time.Duration(s.end)}
	if span > 0 {
		run.Offered = float64(len(tr.Requests)) / (float64(span) / 1e9)
	}
	for i := range s.engines {
		run.Engine = append(run.Engine, s.engines[i].eng.Stats())
	}
	return run, nil
}

// scrape records every engine's KV usage for the schedulers (the router's metrics poll).
func (s *sim) scrape() {
	for w := range s.engines {
		s.fleet.kvUsed[w] = uint64(s.engines[w].eng.Stats().UsedBlocks)
	}
	s.fleet.scrapes++
}

// sample records the per-worker in-flight requests for the report's imbalance and load plot.
func (s *sim) sample() {
	s.loadT = append(s.loadT, float64(s.now)/1e9)
	for w := range s.engines {
		s.load[w] = append(s.load[w], float64(s.engines[w].inflight))
	}
}

func (s *sim) arrive(i int) {
	r := &s.tr.Requests[i]
	sr := &s.reqs[i]
	sr.arrive = s.now
	// The prompt is built per run (not shared across arms): memory stays bounded by what the engines hold.
	p, err := buildPrompt(s.cfg, r)
	sr.req = Request{ID: "r" + strconv.Itoa(i), ISL: len(p.tokens), OSL: max(1, r.OutputLength), Prompt: p.tokens, Local: p.local, Chain: p.chain}
	sr.mm = p.mm
	s.byID[sr.req.ID] = i
	s.samples[i] = bench.E2ESample{Index: i, Worker: -1, At: float64(s.now) / 1e9, PromptTokens: len(p.tokens)}
	if err != nil {
		s.fail(i, err.Error(), false)
		return
	}
	rt, err := s.sched.Route(s.time(s.now), &sr.req)
	if err != nil {
		s.fail(i, "route: "+err.Error(), false)
		return
	}
	if rt.Queued {
		sr.queued = true
		return
	}
	s.dispatch(i, rt.Worker, rt.OverlapBlocks)
}

func (s *sim) dispatch(i, w, overlap int) {
	sr := &s.reqs[i]
	if w < 0 || w >= len(s.engines) {
		s.fail(i, fmt.Sprintf("scheduler chose worker %d of %d", w, len(s.engines)), true)
		return
	}
	sr.queued = false
	smp := &s.samples[i]
	smp.Worker = w
	smp.PredictedTokens = min(overlap*s.cfg.BlockSize, sr.req.ISL)
	e := &s.engines[w]
	if err := e.eng.Add(mocker.Request{ID: sr.req.ID, Prompt: sr.req.Prompt, MaxTokens: sr.req.OSL, MM: sr.mm}); err != nil {
		s.fail(i, err.Error(), true)
		return
	}
	e.inflight++
	if !e.busy {
		s.step(w)
	}
}

// fail ends request i without tokens; routed tells whether the scheduler holds it (and must free it).
func (s *sim) fail(i int, msg string, routed bool) {
	sr := &s.reqs[i]
	sr.req.Prompt, sr.req.Local, sr.req.Chain = nil, nil, nil
	s.left--
	s.end = s.now
	smp := &s.samples[i]
	smp.Err = msg
	smp.TTFT = float64(s.now-sr.arrive) / 1e9
	smp.E2E = smp.TTFT
	if routed {
		s.release(s.sched.Free(s.time(s.now), sr.req.ID))
	}
}

func (s *sim) release(rel []Released) {
	for _, r := range rel {
		i, ok := s.byID[r.ID]
		if !ok || !s.reqs[i].queued {
			continue
		}
		if r.Err != nil {
			s.fail(i, "queue: "+r.Err.Error(), false)
			continue
		}
		s.dispatch(i, r.Worker, r.OverlapBlocks)
	}
}

// step starts engine w's next step now; an idle engine waits for the next dispatch.
func (s *sim) step(w int) {
	e := &s.engines[w]
	res := e.eng.Step()
	if res.Idle {
		e.busy, e.res = false, nil
		return
	}
	e.busy, e.res = true, res
	s.at(s.now+int64(res.Duration), event{kind: evStep, w: int32(w)})
}

// stepEnd carries out engine w's step at its end: the KV events leave for the index, tokens reach their
// requests, and the next step starts.
func (s *sim) stepEnd(w int) {
	e := &s.engines[w]
	res := e.res
	if len(res.Events) > 0 {
		ops := s.rekey(res.Events)
		if s.cfg.EventDelay == 0 {
			s.apply(w, ops)
		} else {
			s.at(s.now+int64(s.cfg.EventDelay), event{kind: evKV, w: int32(w), ops: ops})
		}
	}
	now := s.time(s.now)
	for k := range res.Progress {
		p := &res.Progress[k]
		i, ok := s.byID[p.ID]
		if !ok {
			continue
		}
		sr := &s.reqs[i]
		smp := &s.samples[i]
		if p.First {
			sr.first = s.now
			smp.TTFT = float64(s.now-sr.arrive) / 1e9
			smp.CachedTokens = p.CachedTokens
			smp.PromptTokens = p.PromptTokens
			s.release(s.sched.PrefillDone(now, p.ID))
		}
		if p.Done {
			sr.req.Prompt, sr.req.Local, sr.req.Chain, sr.mm = nil, nil, nil, nil // the engine keeps what it caches
			s.left--
			s.end = s.now
			e.inflight--
			smp.OutputTokens = p.Output
			smp.E2E = float64(s.now-sr.arrive) / 1e9
			if p.Output > 1 {
				smp.ITL = float64(s.now-sr.first) / 1e9 / float64(p.Output-1)
			}
			delete(s.byID, p.ID)
			if o, ok := s.sched.(OutputRecorder); ok {
				o.Output(p.ID, p.Output)
			}
			s.release(s.sched.Free(now, p.ID))
		}
	}
	s.step(w)
}

// rekey turns one step's engine events into index operations the way actors/worker's converter does:
// stored blocks get the router's local hash of their tokens (kvevents.Rekey, LoRA-less, unsalted seed),
// paired with the engine's hash; removals and clears pass through.
func (s *sim) rekey(evs []mocker.KVEvent) []kvOp {
	ops := make([]kvOp, 0, len(evs))
	for k := range evs {
		ev := &evs[k]
		hashes := make([]uint64, len(ev.Hashes))
		for j, h := range ev.Hashes {
			hashes[j] = uint64(h)
		}
		switch ev.Kind {
		case mocker.EventStored:
			kev := kvevents.Event{Kind: kvevents.Stored, BlockHashes: hashes, ParentHash: uint64(ev.Parent), HasParent: ev.HasParent,
				TokenIDs: ev.Tokens, BlockSize: ev.BlockSize, LoraName: ev.LoraName}
			if len(s.cfg.Images) > 0 {
				// The extra keys as vLLM's BlockStored carries them: (uuid, offset) per image in the block.
				kev.ExtraKeys = make([][]kvevents.ExtraKey, len(ev.Extra))
				for j, x := range ev.Extra {
					if x == nil {
						continue
					}
					for _, m := range x.MM {
						kev.ExtraKeys[j] = append(kev.ExtraKeys[j], kvevents.ExtraKey{Kind: kvevents.ExtraMM, Str: m.ID, Int: int64(m.Offset)})
					}
				}
				spec := ImageModel()
				s.local, _ = kvevents.RekeyImages(&kev, s.cfg.BlockSize, scoring.Seed, spec.RunTokenID, spec.EndTokenID, s.local[:0])
			} else {
				s.local, _ = kvevents.Rekey(&kev, s.cfg.BlockSize, scoring.Seed, s.local[:0])
			}
			if len(s.local) == 0 {
				continue
			}
			blocks := make([]prefix.Block, len(s.local))
			for j, h := range s.local {
				blocks[j] = prefix.Block{EngineHash: hashes[j], LocalHash: h}
			}
			ops = append(ops, kvOp{kind: kvevents.Stored, parent: uint64(ev.Parent), hasParent: ev.HasParent, blocks: blocks})
		case mocker.EventRemoved:
			ops = append(ops, kvOp{kind: kvevents.Removed, hashes: hashes})
		case mocker.EventCleared:
			ops = append(ops, kvOp{kind: kvevents.Cleared})
		}
	}
	return ops
}

// apply applies a batch to the index as the indexer shard does (errors are the index's counters).
func (s *sim) apply(w int, ops []kvOp) {
	k := prefix.WorkerKey(Key(w))
	for i := range ops {
		op := &ops[i]
		switch op.kind {
		case kvevents.Stored:
			_ = s.index.Store(k, op.parent, op.hasParent, op.blocks)
		case kvevents.Removed:
			_ = s.index.Remove(k, op.hashes)
		case kvevents.Cleared:
			s.index.ClearWorker(k.WorkerID)
		}
	}
}
