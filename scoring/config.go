package scoring

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"
)

// RouterMode is --router-mode.
type RouterMode string

// Router modes. Values are Dynamo's flag spellings.
const (
	ModeKV                  RouterMode = "kv"
	ModeRoundRobin          RouterMode = "round-robin"
	ModeRandom              RouterMode = "random"
	ModePowerOfTwo          RouterMode = "power-of-two"
	ModeLeastLoaded         RouterMode = "least-loaded"
	ModeDeviceAwareWeighted RouterMode = "device-aware-weighted"
	ModeDirect              RouterMode = "direct"
)

// Modes lists every router mode, in documentation order.
var Modes = []RouterMode{ModeRoundRobin, ModeRandom, ModePowerOfTwo, ModeLeastLoaded, ModeDeviceAwareWeighted, ModeDirect, ModeKV}

// SelectionPolicy is --router-selection-policy.
type SelectionPolicy string

// Selection policies. "linear" is accepted as an alias of PolicyDefault.
const (
	PolicyDefault SelectionPolicy = "default"
	PolicyLMetric SelectionPolicy = "lmetric"
)

// Preset is --router-preset: which cost a kv-mode decision uses.
type Preset string

// Presets.
const (
	// PresetKVRoute is kvroute's calibrated cost (calibrated.go): the request's expected time to first
	// token on each worker — the prefill work queued there plus its own uncached tokens, slowed by the
	// worker's decode load at a rate learned from the fleet. The default.
	PresetKVRoute Preset = "kvroute"
	// PresetDynamo is Dynamo's linear cost and defaults, bit for bit (cost.go).
	PresetDynamo Preset = "dynamo"
)

// QueuePolicy is --router-queue-policy. The ordering itself lives in scoring/queue.
type QueuePolicy string

// Queue policies. LCFS is for experiments, on the flag only: policy classes (scoring/policy) take fcfs or
// wspt, as Dynamo's do.
const (
	QueueFCFS QueuePolicy = "fcfs"
	QueueWSPT QueuePolicy = "wspt"
	QueueLCFS QueuePolicy = "lcfs"
)

// SharedCacheType is --shared-cache-type.
type SharedCacheType string

// Shared cache types: the shared-tier credit applies only with hicache.
const (
	SharedCacheNone    SharedCacheType = "none"
	SharedCacheHiCache SharedCacheType = "hicache"
)

// WorkerType says which role the router serves; it matters only for the decode-router special case of
// the cost function.
type WorkerType string

// Worker types.
const (
	WorkerAggregated WorkerType = ""
	WorkerPrefill    WorkerType = "prefill"
	WorkerDecode     WorkerType = "decode"
)

// OptFloat is a float parameter that may be unset (Dynamo's Option<f64>). The zero value is unset.
type OptFloat struct {
	V   float64
	Set bool
}

// Some returns a set OptFloat.
func Some(v float64) OptFloat { return OptFloat{V: v, Set: true} }

// String renders the value, or "unset".
func (o OptFloat) String() string {
	if !o.Set {
		return "unset"
	}
	return fmt.Sprint(o.V)
}

// OptDuration is a duration parameter that may be unset, so that an explicit 0 (off) differs from the
// preset's default. The zero value is unset.
type OptDuration struct {
	V   time.Duration
	Set bool
}

// SomeDuration returns a set OptDuration.
func SomeDuration(v time.Duration) OptDuration { return OptDuration{V: v, Set: true} }

// String renders the value in seconds, or "unset".
func (o OptDuration) String() string {
	if !o.Set {
		return "unset"
	}
	return fmt.Sprint(o.V.Seconds())
}

// DefaultMaxBatchedTokens stands in for a worker that does not report max_num_batched_tokens; it is large
// enough that the queue threshold and the frac busy threshold never trigger.
const DefaultMaxBatchedTokens = 10_000_000

// DefaultStaleExpiry is how long an active request may go without Free before load tracking drops it
// (Dynamo single.rs EXPIRY_DURATION).
const DefaultStaleExpiry = 3600 * time.Second

// Config is every router parameter of Dynamo's KV router, plus kvroute's own. The zero value is not useful; start
// from DefaultConfig. Fields map 1:1 to flags (see Flags in flags.go).
type Config struct {
	// Mode is the routing mode. Default kv: kvroute exists to route by KV overlap (Dynamo's frontend
	// defaults to round-robin; pass --router-mode round-robin for that).
	Mode RouterMode
	// LoadAware is the --load-aware preset: kv mode with credit 0, KV events off, assume_kv_reuse off,
	// active and prefill tracking on (§8.3). Applied by Resolved.
	LoadAware bool

	// BlockSize is the KV block size in tokens. Default 16; Dynamo reads it from the model card, the
	// standalone router defaults to 128 (--router-block-size).
	BlockSize int

	// OverlapScoreCredit (blocks of credit per device-tier overlap block) scales how much a cached prefix
	// discounts prefill. Default 1.0; 0 disables the indexer (pure load balancing); >1 is allowed and can
	// make the adjusted prefill negative before clipping.
	OverlapScoreCredit float64
	// OverlapScoreCreditDecay shrinks the credit of workers with excess prefill load: 1.0 halves it at one
	// request-equivalent of excess. Default 0 (no decay). Needs TrackPrefillTokens.
	OverlapScoreCreditDecay float64
	// PrefillLoadScale multiplies the adjusted prefill blocks against decode blocks. Default 1.0.
	PrefillLoadScale float64
	// HostCacheHitWeight is the credit per host-pinned-tier overlap block, [0,1]. Default 0.75: a host hit
	// still costs a transfer.
	HostCacheHitWeight float64
	// DiskCacheHitWeight is the credit per disk-tier overlap block, [0,1]. Default 0.25.
	DiskCacheHitWeight float64
	// SharedCacheMultiplier is the credit per shared-tier hit beyond the device overlap, only with
	// SharedCacheType hicache. Default 0.5 (the CLI default; the Rust struct default is 0).
	SharedCacheMultiplier float64
	// SharedCacheType enables the shared-tier credit. Default none.
	SharedCacheType SharedCacheType
	// DecodeActiveRequestWeight is the cost per active request on a worker (issue #12300): spreads
	// requests when block counts tie. Default 0.
	DecodeActiveRequestWeight float64
	// Temperature: 0 picks the argmin (random tie-break); >0 samples a softmax over min-max normalized
	// logits, which spreads load between routers that see the same state. Default 0.
	Temperature float64
	// Preset picks the kv-mode cost: kvroute (calibrated, the default) or dynamo (Dynamo's linear cost).
	// The kvroute cost applies to kv-mode decisions at temperature 0 without a per-request override of
	// Dynamo's weights; those, and every other mode, use Dynamo's selection.
	Preset Preset
	// DecodeWeight scales the kvroute cost's charges for the decode a request adds where it goes
	// (DecodeContextWeight, DecodeStallWeight; scoring/sched decode.go); 0 routes on the time to first
	// token alone. Default 0 (docs/router.md: what 1 gains in inter-token latency and costs in hit rate).
	DecodeWeight float64
	// SelectionPolicy is default (linear logit) or lmetric. Default default.
	SelectionPolicy SelectionPolicy
	// WorkerType selects the decode-router special case when WorkerDecode. Default aggregated.
	WorkerType WorkerType

	// UseKVEvents: false is approximate mode (§8.1), where each routing decision is written into the
	// index with TTL. Default true.
	UseKVEvents bool
	// TTL is the approximate-mode block lifetime (--router-ttl-secs). Default 120 s.
	TTL time.Duration
	// ApproxWorkerCapacity bounds the blocks one worker may hold in the approximate index, when the worker
	// does not report total_kv_blocks. Default 1,048,576 (Dynamo's old max_tree_size).
	ApproxWorkerCapacity int
	// ApproxPruneTargetRatio is the fill ratio pruning brings a worker back to. Default 0.8.
	ApproxPruneTargetRatio float64
	// PredictedTTL is predict-on-route's memory of each decision (--router-predicted-ttl-secs; 0: off).
	// Unset, it follows the preset: DefaultPredictedTTL under kvroute with KV events, off under dynamo
	// (Dynamo's default). PredictTTL is the value in effect.
	PredictedTTL OptDuration
	// SessionAffinityTTL binds an X-Dynamo-Session-ID to the worker its first request went to, for this
	// long after the session's last request (--router-session-affinity-ttl-secs); 0 is unset. Range when
	// set: 1 s … 31,536,000 s. Default unset.
	SessionAffinityTTL time.Duration
	// EventThreads is the number of indexer writer threads, one index shard each
	// (--router-event-threads). 0, the default, is Dynamo's 4 capped at the CPUs the process runs Go code
	// on (IndexShards).
	EventThreads int
	// IndexWarm is how often the sharded index reads what queries read of its live views, so that a
	// query finds its path in the caches after the writes ran (--router-index-warm-secs; 0: never;
	// otherwise at least MinIndexWarm). Default DefaultIndexWarm.
	IndexWarm time.Duration

	// TrackActiveBlocks counts decode blocks per worker. Default true; prefill-only routers turn it off.
	TrackActiveBlocks bool
	// TrackOutputBlocks adds a block per generated block boundary (experimental). Default false.
	TrackOutputBlocks bool
	// AssumeKVReuse dedupes active blocks by sequence hash on a worker. Default true.
	AssumeKVReuse bool
	// TrackPrefillTokens charges ISL − cached tokens until the first token. Default true.
	TrackPrefillTokens bool
	// ActiveSequenceStride keeps one hash per N prompt blocks in load tracking. Default 1.
	ActiveSequenceStride int
	// PrefillLoadModel: none (default); aic is not implemented by kvroute and fails Validate.
	PrefillLoadModel string
	// ReplicaSync shares active-load deltas between router replicas. Default false.
	ReplicaSync bool
	// StaleExpiry drops active requests never freed. Default 3600 s (Dynamo single.rs).
	StaleExpiry time.Duration

	// QueueThreshold: with it set, a request waits while every eligible worker has active prefill tokens >
	// threshold × max_num_batched_tokens. Default unset (no queue). Must be ≥ 0.
	QueueThreshold OptFloat
	// QueuePolicy orders waiting requests. Default fcfs.
	QueuePolicy QueuePolicy
	// PolicyConfig is the path of the router policy YAML (scoring/policy): policy classes, each with its
	// own queue, busy rule and limits, replacing QueueThreshold and QueuePolicy. Read once when the
	// router starts. Default "" (one synthetic class from QueueThreshold and QueuePolicy).
	PolicyConfig string
	// OverlapRefreshAfter re-queries overlap for requests that waited longer. Default 10 s; 0 disables.
	OverlapRefreshAfter time.Duration

	// ActiveDecodeBlocksThreshold: busy when kv_used_blocks > threshold × total_kv_blocks, fraction [0,1].
	// Default unset.
	ActiveDecodeBlocksThreshold OptFloat
	// ActivePrefillTokensThreshold: busy when active prefill tokens > this many tokens. Default unset.
	ActivePrefillTokensThreshold OptFloat
	// ActivePrefillTokensThresholdFrac: busy when active prefill tokens > frac × max_num_batched_tokens.
	// Default unset.
	ActivePrefillTokensThresholdFrac OptFloat

	// EncoderCudaToCPURatio is the non-CPU group weight of device-aware-weighted mode
	// (DYN_ENCODER_CUDA_TO_CPU_RATIO). Default 8.
	EncoderCudaToCPURatio float64
	// MinInitialWorkers delays serving until that many workers are known. Default 0.
	MinInitialWorkers int
	// MigrationLimit retries a request on another worker before its first byte. Default 3 (Dynamo: 0):
	// a worker that dies under load fails its requests before any byte, and a retry elsewhere is what
	// keeps that from reaching clients.
	MigrationLimit int

	// OverlapScoreWeight is the deprecated --router-kv-overlap-score-weight. When set it wins: it becomes
	// PrefillLoadScale, and 0 also zeroes the credit (§3.3). Default unset. Applied by Resolved.
	OverlapScoreWeight OptFloat
}

// DefaultConfig returns Dynamo's defaults.
func DefaultConfig() Config {
	return Config{
		Mode:                      ModeKV,
		BlockSize:                 16,
		OverlapScoreCredit:        1.0,
		OverlapScoreCreditDecay:   0,
		PrefillLoadScale:          1.0,
		HostCacheHitWeight:        0.75,
		DiskCacheHitWeight:        0.25,
		SharedCacheMultiplier:     0.5,
		SharedCacheType:           SharedCacheNone,
		DecodeActiveRequestWeight: 0,
		Temperature:               0,
		SelectionPolicy:           PolicyDefault,
		Preset:                    PresetKVRoute,
		DecodeWeight:              0,
		UseKVEvents:               true,
		TTL:                       120 * time.Second,
		ApproxWorkerCapacity:      1 << 20,
		ApproxPruneTargetRatio:    0.8,
		EventThreads:              0,
		IndexWarm:                 DefaultIndexWarm,
		TrackActiveBlocks:         true,
		AssumeKVReuse:             true,
		TrackPrefillTokens:        true,
		ActiveSequenceStride:      1,
		PrefillLoadModel:          "none",
		StaleExpiry:               DefaultStaleExpiry,
		QueuePolicy:               QueueFCFS,
		OverlapRefreshAfter:       10 * time.Second,
		EncoderCudaToCPURatio:     8,
		MigrationLimit:            3,
	}
}

// ErrBadConfig is the class of every Validate error.
var ErrBadConfig = errors.New("scoring: invalid router config")

func badf(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...)
}

func finiteNonNeg(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return badf("%s must be finite and ≥ 0, got %v", name, v)
	}
	return nil
}

// MaxWeight bounds the cost weights and the temperature: far above any useful value, and low enough
// that a weight times a prompt's blocks stays a finite cost (1e308 made every cost +Inf).
const MaxWeight = 1e6

func weight(name string, v float64) error {
	if err := finiteNonNeg(name, v); err != nil {
		return err
	}
	if v > MaxWeight {
		return badf("%s must be ≤ %g, got %v", name, float64(MaxWeight), v)
	}
	return nil
}

func unit(name string, v float64) error {
	if math.IsNaN(v) || v < 0 || v > 1 {
		return badf("%s must be in [0,1], got %v", name, v)
	}
	return nil
}

// Validate reports the first invalid field, wrapped in ErrBadConfig.
func (c *Config) Validate() error {
	switch c.Mode {
	case ModeKV, ModeRoundRobin, ModeRandom, ModePowerOfTwo, ModeLeastLoaded, ModeDeviceAwareWeighted, ModeDirect:
	default:
		return badf("unknown router mode %q", c.Mode)
	}
	switch c.Preset {
	case PresetKVRoute, PresetDynamo:
	default:
		return badf("unknown router preset %q (kvroute or dynamo)", c.Preset)
	}
	switch c.SelectionPolicy {
	case PolicyDefault, PolicyLMetric:
	default:
		return badf("unknown selection policy %q", c.SelectionPolicy)
	}
	switch c.QueuePolicy {
	case QueueFCFS, QueueWSPT, QueueLCFS:
	default:
		return badf("unknown queue policy %q", c.QueuePolicy)
	}
	switch c.SharedCacheType {
	case SharedCacheNone, SharedCacheHiCache:
	default:
		return badf("unknown shared cache type %q", c.SharedCacheType)
	}
	switch c.WorkerType {
	case WorkerAggregated, WorkerPrefill, WorkerDecode:
	default:
		return badf("unknown worker type %q", c.WorkerType)
	}
	if c.PrefillLoadModel != "none" && c.PrefillLoadModel != "" {
		return badf("prefill load model %q is not supported (only none)", c.PrefillLoadModel)
	}
	if c.BlockSize <= 0 {
		return badf("block size must be > 0, got %d", c.BlockSize)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"overlap_score_credit", c.OverlapScoreCredit},
		{"overlap_score_credit_decay", c.OverlapScoreCreditDecay},
		{"prefill_load_scale", c.PrefillLoadScale},
		{"shared_cache_multiplier", c.SharedCacheMultiplier},
		{"decode_active_request_weight", c.DecodeActiveRequestWeight},
		{"router_temperature", c.Temperature},
		{"router_decode_weight", c.DecodeWeight},
		{"encoder_cuda_to_cpu_ratio", c.EncoderCudaToCPURatio},
	} {
		if err := weight(f.name, f.v); err != nil {
			return err
		}
	}
	if c.EncoderCudaToCPURatio == 0 {
		return badf("encoder_cuda_to_cpu_ratio must be > 0")
	}
	if err := unit("host_cache_hit_weight", c.HostCacheHitWeight); err != nil {
		return err
	}
	if err := unit("disk_cache_hit_weight", c.DiskCacheHitWeight); err != nil {
		return err
	}
	if c.TTL <= 0 {
		return badf("router_ttl_secs must be > 0, got %v", c.TTL)
	}
	if c.PredictedTTL.V < 0 || c.StaleExpiry <= 0 || c.OverlapRefreshAfter < 0 {
		return badf("durations must be ≥ 0 (predicted ttl %v, stale expiry %v, overlap refresh %v)",
			c.PredictedTTL, c.StaleExpiry, c.OverlapRefreshAfter)
	}
	if c.SessionAffinityTTL != 0 && (c.SessionAffinityTTL < time.Second || c.SessionAffinityTTL > 31_536_000*time.Second) {
		return badf("router_session_affinity_ttl_secs must be in 1..31536000, got %v", c.SessionAffinityTTL.Seconds())
	}
	if c.ApproxWorkerCapacity <= 0 {
		return badf("approximate worker capacity must be > 0, got %d", c.ApproxWorkerCapacity)
	}
	if !(c.ApproxPruneTargetRatio > 0 && c.ApproxPruneTargetRatio <= 1) {
		return badf("approximate prune target ratio must be in (0,1], got %v", c.ApproxPruneTargetRatio)
	}
	if c.EventThreads < 0 {
		return badf("router_event_threads must be ≥ 0 (0: the default), got %d", c.EventThreads)
	}
	if err := CheckIndexWarm(c.IndexWarm); err != nil {
		return badf("router_index_warm_secs: %v", err)
	}
	if c.ActiveSequenceStride < 1 {
		return badf("router_active_sequence_stride must be ≥ 1, got %d", c.ActiveSequenceStride)
	}
	if c.MinInitialWorkers < 0 || c.MigrationLimit < 0 {
		return badf("counts must be ≥ 0")
	}
	if c.QueueThreshold.Set {
		if err := finiteNonNeg("router_queue_threshold", c.QueueThreshold.V); err != nil {
			return err
		}
	}
	if c.ActiveDecodeBlocksThreshold.Set {
		if err := unit("active_decode_blocks_threshold", c.ActiveDecodeBlocksThreshold.V); err != nil {
			return err
		}
	}
	if c.ActivePrefillTokensThreshold.Set {
		if err := finiteNonNeg("active_prefill_tokens_threshold", c.ActivePrefillTokensThreshold.V); err != nil {
			return err
		}
	}
	if c.ActivePrefillTokensThresholdFrac.Set {
		if err := finiteNonNeg("active_prefill_tokens_threshold_frac", c.ActivePrefillTokensThresholdFrac.V); err != nil {
			return err
		}
	}
	if c.OverlapScoreWeight.Set {
		if err := weight("overlap_score_weight", c.OverlapScoreWeight.V); err != nil {
			return err
		}
	}
	return nil
}

// Resolved returns the configuration the router runs with: the deprecated overlap_score_weight
// migration (§3.3) and then the --load-aware preset (§8.3) applied. Call it once after flags are parsed,
// then Validate the result.
func (c Config) Resolved() Config {
	if c.OverlapScoreWeight.Set {
		c.PrefillLoadScale = c.OverlapScoreWeight.V
		if c.OverlapScoreWeight.V == 0 {
			c.OverlapScoreCredit = 0
		}
		c.OverlapScoreWeight = OptFloat{}
	}
	if c.LoadAware {
		c.Mode = ModeKV
		c.OverlapScoreCredit = 0
		c.UseKVEvents = false
		c.AssumeKVReuse = false
		c.TrackActiveBlocks = true
		c.TrackPrefillTokens = true
		c.PredictedTTL = SomeDuration(0)
	}
	return c
}

// DefaultPredictedTTL is the kvroute preset's predict-on-route TTL: a decision counts as cached on its
// worker for 5 s (Dynamo's suggested value), long enough for the engine's KV events to arrive.
const DefaultPredictedTTL = 5 * time.Second

// PredictTTL is the predict-on-route TTL in effect (0: off): the flag's when set, else
// DefaultPredictedTTL under the kvroute preset in kv mode with KV events, else off.
func (c *Config) PredictTTL() time.Duration {
	switch {
	case c.PredictedTTL.Set:
		return c.PredictedTTL.V
	case c.Preset == PresetKVRoute && c.Mode == ModeKV && c.UseKVEvents && c.NeedsIndexer():
		return DefaultPredictedTTL
	}
	return 0
}

// DefaultIndexWarm is Config.IndexWarm's default: every 5 ms, 1.3–3.9 % of a core at 1,000 workers on
// the conversation trace, for a third off the index's read p99 under its writes (actors/indexer's doc).
const DefaultIndexWarm = 5 * time.Millisecond

// MinIndexWarm is the shortest Config.IndexWarm: a pass over a shard's view at 1,000 workers takes
// 0.09–0.15 ms.
const MinIndexWarm = time.Millisecond

// CheckIndexWarm refuses an index warming period that is negative or shorter than MinIndexWarm (0, never,
// is valid): the router's flag and actors/indexer's Config share the rule.
func CheckIndexWarm(d time.Duration) error {
	if d < 0 || (d > 0 && d < MinIndexWarm) {
		return fmt.Errorf("%v s: want 0 (never) or at least %v s", d.Seconds(), MinIndexWarm.Seconds())
	}
	return nil
}

// DefaultEventThreads is Dynamo's default count of indexer writer threads.
const DefaultEventThreads = 4

// IndexShards is the sharded index's shard count: EventThreads when set, else DefaultIndexShards.
func (c *Config) IndexShards() int {
	if c.EventThreads > 0 {
		return c.EventThreads
	}
	return DefaultIndexShards()
}

// DefaultIndexShards is DefaultEventThreads but no more than GOMAXPROCS. Each shard is a tree with its
// own writer, so shards past the CPUs add no write throughput, only memory (a prefix held on workers of
// several shards is stored once a shard) and read time (a query walks every shard's tree). On the
// conversation trace at 1,000 workers on 2 CPUs, 2 shards against 4: 45.4 against 47.2 B per (block,
// worker), 46.7 against 48.0 B at 10,000, the same unpaced write rate (docs/benchmarks.md, "Shards
// past the CPUs").
func DefaultIndexShards() int { return min(DefaultEventThreads, runtime.GOMAXPROCS(0)) }

// NeedsIndexer reports whether the router keeps a prefix index: kv mode with a non-zero credit.
func (c *Config) NeedsIndexer() bool {
	return c.Mode == ModeKV && c.OverlapScoreCredit > 0
}

// Override is the per-request RouterConfigOverride (§3.2): nil fields keep the router's value.
type Override struct {
	OverlapScoreCredit    *float64 `json:"overlap_score_credit,omitempty"`
	PrefillLoadScale      *float64 `json:"prefill_load_scale,omitempty"`
	Temperature           *float64 `json:"router_temperature,omitempty"`
	AssumeKVReuse         *bool    `json:"assume_kv_reuse,omitempty"`
	TrackPrefillTokens    *bool    `json:"track_prefill_tokens,omitempty"`
	SharedCacheMultiplier *float64 `json:"shared_cache_multiplier,omitempty"`
	// OverlapScoreWeight is the legacy field; it maps as in §3.3 and wins over the new fields.
	OverlapScoreWeight *float64 `json:"overlap_score_weight,omitempty"`
}

// WithOverride returns c with o applied; o may be nil. The result is validated so a bad request value
// cannot poison scoring; the error wraps ErrBadConfig. A request's overlap_score_credit must be in
// [0, 1] (one Dynamo version validates it so); the configured credit may be
// larger, as newer Dynamo allows.
func (c Config) WithOverride(o *Override) (Config, error) {
	if o == nil {
		return c, nil
	}
	if o.OverlapScoreCredit != nil {
		if err := unit("overlap_score_credit", *o.OverlapScoreCredit); err != nil {
			return c, err
		}
	}
	if o.OverlapScoreCredit != nil {
		c.OverlapScoreCredit = *o.OverlapScoreCredit
	}
	if o.PrefillLoadScale != nil {
		c.PrefillLoadScale = *o.PrefillLoadScale
	}
	if o.Temperature != nil {
		c.Temperature = *o.Temperature
	}
	if o.AssumeKVReuse != nil {
		c.AssumeKVReuse = *o.AssumeKVReuse
	}
	if o.TrackPrefillTokens != nil {
		c.TrackPrefillTokens = *o.TrackPrefillTokens
	}
	if o.SharedCacheMultiplier != nil {
		c.SharedCacheMultiplier = *o.SharedCacheMultiplier
	}
	if o.OverlapScoreWeight != nil {
		c.OverlapScoreWeight = Some(*o.OverlapScoreWeight)
		c.PrefillLoadScale = *o.OverlapScoreWeight
		if *o.OverlapScoreWeight == 0 {
			c.OverlapScoreCredit = 0
		}
		c.OverlapScoreWeight = OptFloat{}
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}
