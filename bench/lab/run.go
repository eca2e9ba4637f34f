package lab

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/kvroute/kvroute/bench"
)

// Config configures a lab run: one workload, every arm at every arrival speedup, then the goodput knee
// of each arm by bisection.
type Config struct {
	// Workers is the fleet size. Default 8.
	Workers int
	// Arms are the arm names (Arms). Default all.
	Arms []string
	// ArrivalSpeedups divide trace time, one run per arm each (as bench e2e's --sweep-arrival). Default
	// {1}.
	ArrivalSpeedups []float64
	// Profile names the engine profile (ExtraProfiles, then Profiles). Default "mocker".
	Profile string
	// ExtraProfiles are profiles beyond the built-in ones (--profile-file). Default none.
	ExtraProfiles []Profile
	// Blocks maps trace hash ids to tokens. Default bench.DefaultBlocks().
	Blocks bench.Blocks
	// Images are the workload's images by the hash id they start at (GenerateImages); they replace
	// those blocks' tokens with the image's placeholder run and travel with the request as production
	// multimodal requests do (images.go). Default none.
	Images Images
	// BlockSize is the engine's and the router's KV block size in tokens. Default 64.
	BlockSize int
	// EventDelay is how long an engine's KV event batch takes to reach the index (ZMQ, decode, re-key,
	// shard mailbox). Default 2 ms; 0 applies a batch at its step's end, before the tokens are delivered.
	EventDelay time.Duration
	// MetricsInterval is the period of the engines' KV usage scrape (the frontend health check's 2 s).
	// Default 2 s.
	MetricsInterval time.Duration
	// SLOs are the TTFT p90 bounds of the goodput sweep, seconds. Default {0.5, 1, 2, 4}.
	SLOs []float64
	// KneeSLO is the TTFT p90 bound whose knee is bisected, seconds; 0 skips the bisection. Default 2.
	KneeSLO float64
	// KneeSteps is the number of bisection runs per arm. Default 6 (the knee to 1/64 of its bracket).
	KneeSteps int
	// KneeSearch bounds the bracket search: when every swept speedup passes (or fails), the top is
	// doubled (the bottom halved) at most this many times. Default 4.
	KneeSearch int
	// Seed seeds the arms' random choices and the arrival jitter. Default 42.
	Seed uint64
	// LoadSamples is about how many per-worker load samples a run records. Default 400.
	LoadSamples int
	// Parallel bounds the runs in flight (each single-threaded). Default GOMAXPROCS.
	Parallel int
	// SpeedChanges change every engine's speed during a run (model time from the first arrival, not
	// scaled by the arrival speedup): from At on, steps run Factor times as fast as the profile says
	// (0.5: half speed). Default none.
	SpeedChanges []SpeedChange
	// Window is the length of the report's time windows (hit rate and TTFT p90 by arrival time), model
	// time. Default 60 s.
	Window time.Duration
	// CalibrationEvery is the period of the learned-calibration samples, model time. Default 5 s.
	CalibrationEvery time.Duration

	profile Profile
	arms    []Arm
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Workers: 8, Arms: ArmNames(), ArrivalSpeedups: []float64{1}, Profile: ProfileMocker, Blocks: bench.DefaultBlocks(),
		BlockSize: 64, EventDelay: 2 * time.Millisecond, MetricsInterval: 2 * time.Second, SLOs: []float64{0.5, 1, 2, 4},
		KneeSLO: 2, KneeSteps: 6, KneeSearch: 4, Seed: 42, LoadSamples: 400, Parallel: runtime.GOMAXPROCS(0),
		Window: time.Minute, CalibrationEvery: 5 * time.Second}
}

// Validate checks the configuration and resolves the profile and arms.
func (c *Config) Validate() error {
	if c.Workers < 1 || c.Workers > 4096 {
		return fmt.Errorf("%w: workers %d out of [1, 4096]", ErrBadConfig, c.Workers)
	}
	if len(c.ArrivalSpeedups) == 0 {
		return fmt.Errorf("%w: no arrival speedup", ErrBadConfig)
	}
	for _, x := range c.ArrivalSpeedups {
		if !(x > 0) || x > 1e6 {
			return fmt.Errorf("%w: arrival speedup %v must be positive", ErrBadConfig, x)
		}
	}
	if err := c.Blocks.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	if err := c.Blocks.CheckEngineBlock(c.BlockSize); err != nil {
		return fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	if c.EventDelay < 0 || c.MetricsInterval <= 0 || c.LoadSamples < 2 || c.Parallel < 1 || c.KneeSteps < 0 || c.KneeSearch < 0 || c.KneeSLO < 0 {
		return fmt.Errorf("%w: event delay %v, metrics interval %v, load samples %d, parallel %d, knee steps %d, knee slo %v",
			ErrBadConfig, c.EventDelay, c.MetricsInterval, c.LoadSamples, c.Parallel, c.KneeSteps, c.KneeSLO)
	}
	if c.Window < time.Second || c.CalibrationEvery < 100*time.Millisecond {
		return fmt.Errorf("%w: window %v (at least 1 s), calibration period %v (at least 100 ms)", ErrBadConfig, c.Window, c.CalibrationEvery)
	}
	for _, sc := range c.SpeedChanges {
		if sc.At < 0 || !(sc.Factor > 0) || sc.Factor > 1e6 {
			return fmt.Errorf("%w: speed change %v at %v", ErrBadConfig, sc.Factor, sc.At)
		}
	}
	for _, s := range c.SLOs {
		if !(s > 0) {
			return fmt.Errorf("%w: slo %v must be positive", ErrBadConfig, s)
		}
	}
	p, err := LookupProfile(c.Profile, c.ExtraProfiles...)
	if err != nil {
		return err
	}
	c.profile = p
	if len(c.Arms) == 0 {
		return fmt.Errorf("%w: no arm", ErrBadConfig)
	}
	c.arms = c.arms[:0]
	for _, name := range c.Arms {
		a, err := LookupArm(name)
		if err != nil {
			return err
		}
		c.arms = append(c.arms, a)
	}
	return nil
}

// SpeedChange is one change of the engines' speed during a run.
type SpeedChange struct {
	At     time.Duration `json:"at"`
	Factor float64       `json:"factor"`
}

// Result is a whole lab run. It holds no wall-clock figure, so the same configuration and workload give
// the same Result, byte for byte once encoded.
type Result struct {
	Workload  string             `json:"workload"`
	Profile   string             `json:"profile"`
	Trace     bench.TraceStats   `json:"trace"`
	Workers   int                `json:"workers"`
	BlockSize int                `json:"block_size"`
	KVBlocks  int                `json:"kv_blocks_per_worker"`
	EventLag  float64            `json:"event_delay_s"`
	Unbounded bench.OracleResult `json:"unbounded_oracle"`
	Pooled    bench.OracleResult `json:"pooled_oracle"`
	// Points are the arm runs, speedup-major then arm order.
	Points []bench.ArmResult `json:"points"`
	// Goodput is per arm the highest swept offered rate whose TTFT p90 meets each SLO there and at every
	// lower rate (bench.Goodput), in SLO order.
	SLOs    []float64            `json:"slos_s"`
	Goodput map[string][]float64 `json:"goodput_rps"`
	// Timelines are the swept runs over model time (windows, learned calibration), in Points order.
	Timelines []Timeline `json:"timelines"`
	// Knees are the bisected goodput knees at KneeSLO.
	KneeSLO float64 `json:"knee_slo_s"`
	Knees   []Knee  `json:"knees,omitempty"`
}

// Knee is one arm's bisected goodput knee: the highest offered rate found whose TTFT p90 meets the SLO,
// and the lowest found that misses it (0 when the bracket could not be closed).
type Knee struct {
	Arm string `json:"arm"`
	// PassRPS met the SLO, FailRPS missed it; the knee lies between.
	PassRPS float64 `json:"pass_rps"`
	FailRPS float64 `json:"fail_rps"`
	// PassP90 is the TTFT p90 at PassRPS; Runs counts the runs made for the knee (bracket search and
	// bisection).
	PassP90 float64 `json:"pass_ttft_p90_s"`
	Runs    int     `json:"runs"`
}

// job is one simulation to run.
type job struct {
	arm Arm
	x   float64
	out *bench.ArmResult
	tl  *Timeline
	err error
}

// runJobs runs the jobs at most cfg.Parallel at a time; each job is deterministic on its own, so the
// results do not depend on the interleaving.
func runJobs(ctx context.Context, cfg *Config, tr *bench.Trace, jobs []*job) error {
	sem := make(chan struct{}, cfg.Parallel)
	var wg sync.WaitGroup
	for _, j := range jobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			run, tl, err := runArmTimeline(cfg, tr, j.arm, j.x)
			if err != nil {
				j.err = err
				return
			}
			r := bench.SummarizeArm(run)
			if r.PlacedHitRate, j.err = placedHitRate(cfg, tr, run); j.err != nil {
				return
			}
			j.out, j.tl = &r, tl
		}()
	}
	wg.Wait()
	for _, j := range jobs {
		if j.err != nil {
			return j.err
		}
	}
	return ctx.Err()
}

// placedHitRate is the hit rate ideal LRU caches of the profile's capacity get on the run's placement
// (bench.Oracle.PlacedHitRate): the pooled oracle less it is what the placement cost, it less the
// engines' hit rate what their timing cost.
func placedHitRate(cfg *Config, tr *bench.Trace, run *bench.ArmRun) (float64, error) {
	worker := make([]int, len(tr.Requests))
	for i := range worker {
		worker[i] = -1
	}
	for _, s := range run.Samples {
		if s.Index >= 0 && s.Index < len(worker) && s.Err == "" {
			worker[s.Index] = s.Worker
		}
	}
	o := bench.Oracle{Blocks: cfg.Blocks, BlockSize: cfg.BlockSize}
	res, err := o.PlacedHitRate(tr, worker, cfg.profile.NumGPUBlocks)
	return res.HitRate, err
}

// Run simulates every arm at every speedup on the workload tr (named name), then bisects each arm's
// knee.
func Run(ctx context.Context, cfg Config, name string, tr *bench.Trace) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(tr.Requests) == 0 {
		return nil, fmt.Errorf("%w: empty workload", ErrBadConfig)
	}
	res := &Result{Workload: name, Profile: cfg.Profile, Trace: tr.Stats(), Workers: cfg.Workers, BlockSize: cfg.BlockSize,
		KVBlocks: cfg.profile.NumGPUBlocks, EventLag: cfg.EventDelay.Seconds(), SLOs: cfg.SLOs, KneeSLO: cfg.KneeSLO,
		Goodput: map[string][]float64{}}
	o := bench.Oracle{Blocks: cfg.Blocks, BlockSize: cfg.BlockSize}
	var err error
	if res.Unbounded, err = o.UnboundedHitRate(tr); err != nil {
		return nil, err
	}
	if res.Pooled, err = o.PooledHitRate(tr, cfg.Workers*cfg.profile.NumGPUBlocks); err != nil {
		return nil, err
	}
	var jobs []*job
	for _, x := range cfg.ArrivalSpeedups {
		for _, a := range cfg.arms {
			jobs = append(jobs, &job{arm: a, x: x})
		}
	}
	if err := runJobs(ctx, &cfg, tr, jobs); err != nil {
		return nil, err
	}
	for _, j := range jobs {
		res.Points = append(res.Points, *j.out)
		res.Timelines = append(res.Timelines, *j.tl)
	}
	for _, a := range cfg.arms {
		var rates, p90 []float64
		for _, p := range res.Points {
			if p.Arm == a.Name {
				rates, p90 = append(rates, p.OfferedRPS), append(p90, ttftP90(&p))
			}
		}
		for _, slo := range cfg.SLOs {
			res.Goodput[a.Name] = append(res.Goodput[a.Name], bench.Goodput(rates, p90, slo))
		}
	}
	if cfg.KneeSLO > 0 && cfg.KneeSteps > 0 {
		if res.Knees, err = knees(ctx, &cfg, tr, res.Points); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// ttftP90 is a point's TTFT p90, failures counted at their time to failure (SummarizeArm's rule); a
// point with failed requests never meets an SLO.
func ttftP90(p *bench.ArmResult) float64 {
	if p.Failed > 0 {
		return p.TTFT.Max + 1e9
	}
	return p.TTFT.P90
}

// knees bisects every arm's knee at once: each round runs one speedup per arm (in parallel), between
// the highest passing and the lowest failing speedup known. A bracket starts from the sweep; with no
// failing point the top speedup is doubled until one fails, with no passing point the bottom is halved
// (each at most KneeSearch times).
func knees(ctx context.Context, cfg *Config, tr *bench.Trace, points []bench.ArmResult) ([]Knee, error) {
	type bracket struct {
		knee       Knee
		lo, hi     float64 // speedups: lo passes (0: none yet), hi fails (0: none yet)
		loP90      float64
		loR, hiR   float64
		grow, fall int
		steps      int // bisection runs so far
	}
	slo := cfg.KneeSLO
	bs := make([]*bracket, len(cfg.arms))
	for k, a := range cfg.arms {
		b := &bracket{knee: Knee{Arm: a.Name}}
		var pts []bench.ArmResult
		for _, p := range points {
			if p.Arm == a.Name {
				pts = append(pts, p)
			}
		}
		slices.SortFunc(pts, func(x, y bench.ArmResult) int { return cmpF(x.ArrivalSpeedup, y.ArrivalSpeedup) })
		for _, p := range pts {
			if ttftP90(&p) <= slo && b.hi == 0 {
				b.lo, b.loR, b.loP90 = p.ArrivalSpeedup, p.OfferedRPS, p.TTFT.P90
			} else if b.hi == 0 {
				b.hi, b.hiR = p.ArrivalSpeedup, p.OfferedRPS
			}
		}
		bs[k] = b
	}
	for round := 0; ; round++ {
		var jobs []*job
		var owner []*bracket
		for k, b := range bs {
			var x float64
			switch {
			case b.hi == 0 && b.grow < cfg.KneeSearch:
				x, b.grow = b.lo*2, b.grow+1
			case b.lo == 0 && b.fall < cfg.KneeSearch:
				x, b.fall = b.hi/2, b.fall+1
			case b.lo > 0 && b.hi > 0 && b.steps < cfg.KneeSteps:
				x, b.steps = (b.lo+b.hi)/2, b.steps+1
			default:
				continue
			}
			jobs = append(jobs, &job{arm: cfg.arms[k], x: x})
			owner = append(owner, b)
		}
		if len(jobs) == 0 {
			break
		}
		if err := runJobs(ctx, cfg, tr, jobs); err != nil {
			return nil, err
		}
		for n, j := range jobs {
			b := owner[n]
			b.knee.Runs++
			if ttftP90(j.out) <= slo {
				b.lo, b.loR, b.loP90 = j.x, j.out.OfferedRPS, j.out.TTFT.P90
			} else {
				b.hi, b.hiR = j.x, j.out.OfferedRPS
			}
		}
	}
	out := make([]Knee, len(bs))
	for k, b := range bs {
		out[k] = b.knee
		out[k].PassRPS, out[k].FailRPS, out[k].PassP90 = b.loR, b.hiR, b.loP90
	}
	return out, nil
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
