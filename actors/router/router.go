package router

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/actors/worker"
	"github.com/kvroute/kvroute/internal/clock"
	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/policy"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/scoring/sched"
	"github.com/kvroute/kvroute/workers/registry"
)

// Config configures the router core.
type Config struct {
	// BlockSize is the KV block size in tokens used to hash requests and re-key events; it must equal the
	// engines' block size. Dynamo's standalone router defaults to 128 (--router-block-size); kvroute
	// takes 16, vLLM's default.
	BlockSize int
	// Indexer configures the sharded index (--router-event-threads shards).
	Indexer indexer.Config
	// Worker configures the mirrors.
	Worker worker.Config
	// Scoring is the router configuration: mode, cost weights, load tracking, queue, busy thresholds
	// (every --router-* flag). Its BlockSize is overwritten with BlockSize.
	Scoring scoring.Config
	// Clock is the clock of load tracking, queueing, approximate-mode TTLs and the stage timings; nil means
	// the wall clock. The worker mirrors share it unless Worker.Clock is set.
	Clock clock.Clock
	// Seed, when set, makes every random choice (tie-breaks, softmax, random modes) reproducible.
	Seed *uint64
	// Registerer receives the router's Prometheus metrics; nil keeps them private.
	Registerer prometheus.Registerer
	// RouterID labels the overhead histograms.
	RouterID string
	// Selector, when set, replaces the configured mode's selection (scoring.Select) with another policy
	// behind the same interface, e.g. a peer router's published formula for side-by-side benchmarks.
	Selector scoring.Selector
	// EventsStaleAfter is per-worker degradation's patience: a worker sent requests but silent on its
	// KV event stream this long is predicted from routing history until its events resume. Default 30s;
	// a negative value disables it.
	EventsStaleAfter time.Duration
	// TickInterval is how often expiries (approximate-mode TTL, stale requests) run. Default 1s; a
	// negative value disables the ticker (tests call Tick).
	TickInterval time.Duration
	// OnLoad, when set, observes every local AddRequest / MarkPrefillCompleted / Free after the scheduler
	// applied it (replica sync, --router-replica-sync; see replica.go). It runs on the request path and
	// must not block. Default nil (off).
	OnLoad func(LoadEvent)
	// Policy is the parsed router policy document (scoring/policy). Nil: New loads
	// Scoring.PolicyConfig when that path is set; without either the queue is one synthetic class.
	Policy *policy.Config
	// Model is the served model's name, which picks its profile from Policy's `models` (else the root).
	Model string
}

// DefaultConfig returns the defaults for a block size: KV mode, Dynamo's cost weights.
func DefaultConfig(blockSize int) Config {
	sc := scoring.DefaultConfig()
	sc.Mode = scoring.ModeKV
	sc.BlockSize = blockSize
	return Config{BlockSize: blockSize, Indexer: indexer.DefaultConfig(), Worker: worker.DefaultConfig(blockSize),
		Scoring: sc, RouterID: "kvroute", TickInterval: time.Second, EventsStaleAfter: 30 * time.Second}
}

// Router is the routing core shared by `kvroute router` and the frontend: the sharded index, the fleet of
// worker mirrors feeding it, and the request-side hashing.
type Router struct {
	cfg     Config
	Index   *indexer.Indexer
	Fleet   *worker.Fleet
	sched   *scheduler
	Metrics *Metrics

	ctlMu    sync.Mutex // serializes AddWorker / RemoveWorker across fleet and scheduler
	stopTick context.CancelFunc
	tickDone chan struct{}
}

// New starts the index and the fleet in system.
func New(system *actor.ActorSystem, cfg Config) (*Router, error) {
	if cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("router: block size %d must be positive", cfg.BlockSize)
	}
	cfg.Worker.BlockSize = cfg.BlockSize
	cfg.Scoring.BlockSize = cfg.BlockSize
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Worker.Clock == nil {
		cfg.Worker.Clock = cfg.Clock
	}
	if cfg.Policy == nil && cfg.Scoring.PolicyConfig != "" {
		pc, err := policy.Load(cfg.Scoring.PolicyConfig)
		if err != nil {
			return nil, fmt.Errorf("router: --router-policy-config: %w", err)
		}
		cfg.Policy = pc
	}
	m := NewMetrics(cfg.Registerer, cfg.RouterID)
	ix, err := indexer.New(system, cfg.Indexer)
	if err != nil {
		return nil, err
	}
	sched, err := newScheduler(cfg.Scoring, ix, cfg.Clock, cfg.Seed, m, cfg.Selector, cfg.OnLoad, cfg.Policy.Profile(cfg.Model))
	if err != nil {
		ix.Stop()
		return nil, err
	}
	fl, err := worker.NewFleet(system, ix, cfg.Worker)
	if err != nil {
		ix.Stop()
		return nil, err
	}
	r := &Router{cfg: cfg, Index: ix, Fleet: fl, sched: sched, Metrics: m}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(newLoadCollector(sched)); err != nil {
			r.Stop()
			return nil, err
		}
		if err := cfg.Registerer.Register(fl.Collector()); err != nil {
			r.Stop()
			return nil, err
		}
	}
	if cfg.TickInterval >= 0 {
		iv := cfg.TickInterval
		if iv == 0 {
			iv = time.Second
		}
		ctx, cancel := context.WithCancel(context.Background())
		r.stopTick, r.tickDone = cancel, make(chan struct{})
		tickLoop.Go(func() { r.tickLoop(ctx, iv) })
	}
	return r, nil
}

// tickLoop is the router's expiry ticker, joined by Stop through tickDone.
var tickLoop = routine.Named("router.tick")

// tickLoop runs the expiries on a wall-clock ticker; the expiries themselves read the injected clock.
func (r *Router) tickLoop(ctx context.Context, iv time.Duration) {
	defer close(r.tickDone)
	routine.Every(ctx.Done(), iv, r.Tick)
}

// Tick runs the time-driven work now: approximate-mode TTL expiry and stale-request expiry.
func (r *Router) Tick() {
	r.sched.tick()
	r.checkEventHealth()
}

// checkEventHealth is per-worker degradation. A worker that was sent requests but has published no KV
// event batch for EventsStaleAfter since (its stream stopped, or cannot be recovered) is switched, alone,
// to approximate prediction: its routed prompts are recorded in the index with the TTL, as in
// --no-router-kv-events. When its batches flow again it is resynced (its index is dropped and rebuilt
// from its replay buffer) and predicted from its events again.
func (r *Router) checkEventHealth() {
	stale := r.cfg.EventsStaleAfter
	if stale <= 0 || !r.sched.config().UseKVEvents {
		return
	}
	toApprox, toEvents := r.sched.eventHealth(stale, r.Fleet)
	for _, id := range toApprox {
		r.Fleet.SetPrediction(id, worker.PredictionApprox)
	}
	for _, id := range toEvents {
		_ = r.Fleet.Resync(id)
		r.Fleet.SetPrediction(id, worker.PredictionEvents)
	}
}

// Config returns the current router configuration.
func (r *Router) Config() scoring.Config { return *r.sched.config() }

// SetConfig replaces the router configuration at run time (busy thresholds, temperature, ...). The block
// size, mode of event ingestion and shard count do not change.
func (r *Router) SetConfig(cfg scoring.Config) error {
	cfg.BlockSize = r.cfg.BlockSize
	return r.sched.setConfig(cfg)
}

// Route decides where a request goes and charges that worker; see RouteRequest.
func (r *Router) Route(ctx context.Context, req *RouteRequest) (RouteResult, error) {
	return r.sched.route(ctx, req, r.cfg.BlockSize)
}

// PrefillDone marks a routed request's first token.
func (r *Router) PrefillDone(id string) error { return r.sched.prefillDone(id) }

// Free ends a routed request.
func (r *Router) Free(id string) error { return r.sched.free(id, 0) }

// FreeOutput ends a routed request that streamed tokens generated tokens, one per chunk (0: not
// counted): the kvroute cost learns its decode from them (scoring/sched decode.go).
func (r *Router) FreeOutput(id string, tokens int) error { return r.sched.free(id, tokens) }

// SetHealthy takes a worker out of routing (unhealthy: it leaves the candidate set and its blocks leave
// the index) or brings it back (healthy: it is resynced from its event stream, then routable again).
func (r *Router) SetHealthy(id uint64, healthy bool, reason string) error {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	if _, ok := r.Fleet.Get(id); !ok {
		return fmt.Errorf("%w: %d", worker.ErrUnknown, id)
	}
	if !r.sched.setHealthy(id, healthy) {
		return nil
	}
	r.Fleet.SetHealth(id, healthy, reason)
	if healthy {
		return r.Fleet.Resync(id)
	}
	return r.Index.ClearWorker(id)
}

// SetKVUsage records a worker rank's own report of KV blocks in use (busy thresholds).
func (r *Router) SetKVUsage(k scoring.WorkerKey, usedBlocks uint64) {
	r.sched.setKVUsage(k, usedBlocks)
}

// SyncCachedBlocks hands the scheduler the index's count of the KV blocks a worker rank's events have
// it holding, so the kvroute cost knows which caches have room (scoring/sched's room.go). The health
// monitor calls it on every metrics scrape of a worker that publishes KV events.
func (r *Router) SyncCachedBlocks(k scoring.WorkerKey) {
	r.sched.setCachedBlocks(k, uint64(r.Index.Blocks(prefix.WorkerKey(k))))
}

// SetCapacity records the KV capacity (blocks per rank) and token budget a worker reports about
// itself, used when its registration gave none.
func (r *Router) SetCapacity(id uint64, totalKVBlocks, maxBatchedTokens int) {
	r.sched.setCapacity(id, totalKVBlocks, maxBatchedTokens)
}

// SetDegraded marks a worker whose KV events cannot be trusted for prediction (failed compatibility
// self-test); "" clears it. It stays routable.
func (r *Router) SetDegraded(id uint64, reason string) { r.Fleet.SetDegraded(id, reason) }

// ActiveRequests is the number of routed requests not yet freed.
func (r *Router) ActiveRequests() int {
	return r.sched.active()
}

// QueueClasses reports every policy class's queue (--router-policy-config): what waits in it and its
// round-robin deficit. Without a policy document there is one class, "default".
func (r *Router) QueueClasses() []sched.ClassQueue { return r.sched.classes() }

// Loads returns every worker rank's load as the scheduler tracks it (one locked copy).
func (r *Router) Loads() []sched.TargetLoad { return r.sched.loads() }

// PrefillCarried returns the prefill tokens the healthy worker ranks carry, summed, and how many ranks
// are healthy (Loads summed, without a list).
func (r *Router) PrefillCarried() (tokens uint64, healthy int) { return r.sched.prefillCarried() }

// Waiting is the number of requests the scheduler holds (queue and minimum-workers gate).
func (r *Router) Waiting() int { return r.sched.waiting() }

// DecodeCalibration reports what the kvroute cost has learned of the fleet's decode from the requests
// ended with FreeOutput: a seconds per generated token on a worker decoding nothing, b more per context
// block decoded beside a request, the observations, and the mean output length (scoring/sched decode.go).
func (r *Router) DecodeCalibration() (a, b float64, n int, meanOutput float64) {
	return r.sched.decodeCalibration()
}

// RecordOutput reports a request's generated tokens so far (for output-block tracking).
func (r *Router) RecordOutput(id string, tokens int) { r.sched.recordOutput(id, tokens) }

// BlockSize returns the hashing block size.
func (r *Router) BlockSize() int { return r.cfg.BlockSize }

// AddWorker starts mirroring a worker and makes it routable. Without KV events (approximate mode) its
// event endpoints are not subscribed. A spec that states a block size other than the router's is
// refused (registry.ErrBadSpec): none of its cached blocks could ever match a prompt's hashes.
func (r *Router) AddWorker(spec registry.Spec) error {
	if spec.BlockSize != 0 && spec.BlockSize != r.cfg.BlockSize {
		return fmt.Errorf("%w: worker %d: block_size %d is not the router's %d (--kv-cache-block-size): its cached blocks would never match",
			registry.ErrBadSpec, spec.ID, spec.BlockSize, r.cfg.BlockSize)
	}
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	if !r.sched.config().UseKVEvents {
		spec.Events, spec.Replay, spec.Topic = "", "", ""
	}
	if err := r.Fleet.Add(spec); err != nil {
		return err
	}
	r.sched.addWorker(spec)
	return nil
}

// Has reports whether worker id is registered.
func (r *Router) Has(id uint64) bool {
	_, ok := r.Fleet.Get(id)
	return ok
}

// RemoveWorker makes a worker unroutable, stops mirroring it and drops its blocks.
func (r *Router) RemoveWorker(id uint64) error {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	if _, ok := r.Fleet.Get(id); !ok {
		return fmt.Errorf("%w: %d", worker.ErrUnknown, id)
	}
	r.sched.removeWorker(id)
	return r.Fleet.Remove(id)
}

// Workers returns every worker's status.
func (r *Router) Workers() []worker.Status { return r.Fleet.Status() }

// HashTokens appends the local block hashes of tokens (full blocks only) to dst.
func (r *Router) HashTokens(dst []uint64, tokens []uint32, loraName string) []uint64 {
	return r.HashSalted(dst, tokens, loraName, "")
}

// HashSalted is HashTokens for a request in a cache namespace (the cache_salt its engine hashes with).
func (r *Router) HashSalted(dst []uint64, tokens []uint32, loraName, namespace string) []uint64 {
	return scoring.LocalBlockHashes(dst, tokens, r.cfg.BlockSize, scoring.DeriveSeed(loraName, namespace), nil)
}

// Overlap appends the overlap of every (worker, dp rank) with the given local block hashes to out.
func (r *Router) Overlap(local []uint64, out []prefix.Score) []prefix.Score {
	return r.Index.FindMatches(local, out)
}

// FailWaiting answers every request waiting in the scheduler (queue, minimum-workers gate) with
// ErrShuttingDown; a graceful shutdown calls it before draining the HTTP server.
func (r *Router) FailWaiting() { r.sched.failWaiting(ErrShuttingDown) }

// Stop fails waiting requests, then stops the ticker, the fleet and the index.
func (r *Router) Stop() {
	r.FailWaiting()
	if r.stopTick != nil {
		r.stopTick()
		<-r.tickDone
		r.stopTick = nil
	}
	r.Fleet.Stop()
	r.Index.Stop()
}
