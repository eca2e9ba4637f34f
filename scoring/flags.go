package scoring

import (
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Flag describes one router parameter on the command line and in the environment. Flags is
// data so that `kvroute router` and `kvroute frontend` register the same set, and docs/router.md lists it.
type Flag struct {
	// Name is the flag without dashes; empty for environment-only parameters.
	Name string
	// Neg is the negative boolean form (e.g. "no-router-kv-events"), empty when there is none.
	Neg string
	// Aliases are older spellings that set the same field (deprecated names).
	Aliases []string
	// Env is the DYN_* variable; EnvAliases are older variables, consulted when Env is unset.
	Env        string
	EnvAliases []string
	// Help is the one-line usage text; the unit is in it.
	Help string
	// Field points at the Config field the flag sets. Durations are given in seconds.
	Field func(c *Config) any
	// Deprecated marks flags kept for compatibility.
	Deprecated bool
	// Ours marks kvroute-only parameters that Dynamo does not have.
	Ours bool
}

// Default renders the flag's value in DefaultConfig.
func (f *Flag) Default() string {
	d := DefaultConfig()
	return render(f.Field(&d))
}

// Flags is the router flag table, in the order of Dynamo's router reference.
var Flags = []Flag{
	{Name: "router-mode", Env: "DYN_ROUTER_MODE", Help: "routing mode: kv, round-robin, random, power-of-two, least-loaded, device-aware-weighted, direct",
		Field: func(c *Config) any { return &c.Mode }},
	{Name: "router-min-initial-workers", Env: "DYN_ROUTER_MIN_INITIAL_WORKERS", Help: "wait for this many workers before serving",
		Field: func(c *Config) any { return &c.MinInitialWorkers }},
	{Name: "load-aware", Env: "DYN_ROUTER_LOAD_AWARE", Help: "KV-mode preset that routes by load only (credit 0, no KV events, no KV reuse)",
		Field: func(c *Config) any { return &c.LoadAware }},
	{Name: "router-kv-overlap-score-credit", Env: "DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT", Help: "prefill blocks credited per cached device block (0 disables the indexer)",
		Field: func(c *Config) any { return &c.OverlapScoreCredit }},
	{Name: "router-kv-overlap-score-credit-decay", Env: "DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT_DECAY", Help: "credit decay per request-equivalent of excess prefill load (1.0 halves it)",
		Field: func(c *Config) any { return &c.OverlapScoreCreditDecay }},
	{Name: "router-prefill-load-scale", Env: "DYN_ROUTER_PREFILL_LOAD_SCALE", Help: "weight of adjusted prefill blocks against decode blocks",
		Field: func(c *Config) any { return &c.PrefillLoadScale }},
	{Name: "router-host-cache-hit-weight", Env: "DYN_ROUTER_HOST_CACHE_HIT_WEIGHT", Help: "credit per host-tier cached block, [0,1]",
		Field: func(c *Config) any { return &c.HostCacheHitWeight }},
	{Name: "router-disk-cache-hit-weight", Env: "DYN_ROUTER_DISK_CACHE_HIT_WEIGHT", Help: "credit per disk-tier cached block, [0,1]",
		Field: func(c *Config) any { return &c.DiskCacheHitWeight }},
	{Name: "shared-cache-multiplier", Env: "DYN_SHARED_CACHE_MULTIPLIER", Help: "credit per shared-tier hit beyond the device overlap; applies only with hicache, which kvroute refuses (Dynamo's default 0.5 is accepted)",
		Field: func(c *Config) any { return &c.SharedCacheMultiplier }},
	{Name: "shared-cache-type", Env: "DYN_SHARED_CACHE_TYPE", Help: "shared cache type: none (hicache is refused: kvroute has no shared-tier indexer)",
		Field: func(c *Config) any { return &c.SharedCacheType }},
	{Name: "router-decode-active-request-weight", Env: "DYN_ROUTER_DECODE_ACTIVE_REQUEST_WEIGHT", Help: "experimental: block-equivalent cost per active request on a worker",
		Field: func(c *Config) any { return &c.DecodeActiveRequestWeight }},
	{Name: "router-temperature", Env: "DYN_ROUTER_TEMPERATURE", Help: "softmax temperature over normalized costs; 0 picks the cheapest",
		Field: func(c *Config) any { return &c.Temperature }},
	{Name: "router-preset", Env: "KVROUTE_ROUTER_PRESET", Ours: true,
		Help:  "kv-mode cost: kvroute (expected time to first token, calibrated from the fleet) or dynamo (Dynamo's linear cost, exactly)",
		Field: func(c *Config) any { return &c.Preset }},
	{Name: "router-decode-weight", Env: "KVROUTE_ROUTER_DECODE_WEIGHT", Ours: true,
		Help:  "kvroute preset: weight of the decode a request adds where it goes (the context decoded beside it, the prefill chunks it shares steps with) against its time to first token; 0 (the default) routes on time to first token alone, 1 prices the decode as measured in the fleet lab",
		Field: func(c *Config) any { return &c.DecodeWeight }},
	{Name: "router-selection-policy", Help: "cost policy: default (linear logit) or lmetric",
		Field: func(c *Config) any { return &c.SelectionPolicy }},
	{Name: "router-kv-events", Neg: "no-router-kv-events", Aliases: []string{"no-kv-events"}, Env: "DYN_ROUTER_USE_KV_EVENTS",
		Help:  "use worker KV events; off is approximate mode (routing decisions are indexed with a TTL)",
		Field: func(c *Config) any { return &c.UseKVEvents }},
	{Name: "router-ttl-secs", Env: "DYN_ROUTER_TTL_SECS", Help: "approximate-mode block lifetime in seconds",
		Field: func(c *Config) any { return &c.TTL }},
	{Name: "router-approx-worker-capacity", Env: "KVROUTE_ROUTER_APPROX_WORKER_CAPACITY", Ours: true,
		Help:  "approximate mode: max indexed blocks per worker when it reports no total_kv_blocks",
		Field: func(c *Config) any { return &c.ApproxWorkerCapacity }},
	{Name: "router-predicted-ttl-secs", Env: "DYN_ROUTER_PREDICTED_TTL_SECS", Help: "predict-on-route: seconds a decision counts as cached on its worker before its KV events arrive (0: off; unset: 5 under --router-preset kvroute, off under dynamo)",
		Field: func(c *Config) any { return &c.PredictedTTL }},
	{Name: "router-session-affinity-ttl-secs", Env: "DYN_ROUTER_SESSION_AFFINITY_TTL_SECS",
		Help:  "bind X-Dynamo-Session-ID to its first worker for this many seconds after its last request (0: off)",
		Field: func(c *Config) any { return &c.SessionAffinityTTL }},
	{Name: "router-event-threads", Env: "DYN_ROUTER_EVENT_THREADS", Help: "indexer writer threads, one index shard each (0: Dynamo's 4, at most GOMAXPROCS)",
		Field: func(c *Config) any { return &c.EventThreads }},
	{Name: "router-index-warm-secs", Env: "KVROUTE_ROUTER_INDEX_WARM_SECS", Ours: true,
		Help:  "how often the index reads what queries read of its live views, so that a query finds its path in the caches after the writes ran; skipped while no query runs (0: never; else at least 0.001)",
		Field: func(c *Config) any { return &c.IndexWarm }},
	{Name: "router-replica-sync", Env: "DYN_ROUTER_REPLICA_SYNC", Help: "share active load with other router replicas",
		Field: func(c *Config) any { return &c.ReplicaSync }},
	{Name: "router-track-active-blocks", Neg: "no-router-track-active-blocks", Env: "DYN_ROUTER_TRACK_ACTIVE_BLOCKS", Help: "count active decode blocks per worker",
		Field: func(c *Config) any { return &c.TrackActiveBlocks }},
	{Name: "router-track-output-blocks", Env: "DYN_ROUTER_TRACK_OUTPUT_BLOCKS", Help: "add a block per generated block boundary (experimental)",
		Field: func(c *Config) any { return &c.TrackOutputBlocks }},
	{Name: "router-assume-kv-reuse", Neg: "no-router-assume-kv-reuse", Env: "DYN_ROUTER_ASSUME_KV_REUSE", Help: "dedupe active blocks by prefix (their chain of block hashes) on a worker",
		Field: func(c *Config) any { return &c.AssumeKVReuse }},
	{Name: "router-track-prefill-tokens", Neg: "no-router-track-prefill-tokens", Env: "DYN_ROUTER_TRACK_PREFILL_TOKENS", Help: "charge uncached prompt tokens until the first token",
		Field: func(c *Config) any { return &c.TrackPrefillTokens }},
	{Name: "router-prefill-load-model", Env: "DYN_ROUTER_PREFILL_LOAD_MODEL", Help: "prefill load model: none (aic is not supported)",
		Field: func(c *Config) any { return &c.PrefillLoadModel }},
	{Name: "router-active-sequence-stride", Env: "DYN_ROUTER_ACTIVE_SEQUENCE_STRIDE", Help: "keep one hash per N prompt blocks in load tracking",
		Field: func(c *Config) any { return &c.ActiveSequenceStride }},
	{Name: "router-queue-threshold", Env: "DYN_ROUTER_QUEUE_THRESHOLD", EnvAliases: []string{"DYN_ROUTER_QUEUE_THRESHOLD_FRAC"},
		Help:  "queue while every worker's active prefill tokens exceed this × max_num_batched_tokens (unset: no queue)",
		Field: func(c *Config) any { return &c.QueueThreshold }},
	{Name: "router-queue-policy", Env: "DYN_ROUTER_QUEUE_POLICY", Help: "queue order: fcfs, wspt or lcfs",
		Field: func(c *Config) any { return &c.QueuePolicy }},
	{Name: "router-policy-config", Env: "DYN_ROUTER_POLICY_CONFIG",
		Help:  "router policy YAML: policy classes (x-dynamo-meta-policy-class) with their own queues, busy thresholds and limits; replaces the queue threshold and policy (unset: one class)",
		Field: func(c *Config) any { return &c.PolicyConfig }},
	{Name: "active-decode-blocks-threshold", Env: "DYN_ACTIVE_DECODE_BLOCKS_THRESHOLD", Help: "busy above this fraction of KV blocks in use, [0,1]",
		Field: func(c *Config) any { return &c.ActiveDecodeBlocksThreshold }},
	{Name: "active-prefill-tokens-threshold", Env: "DYN_ACTIVE_PREFILL_TOKENS_THRESHOLD", Help: "busy above this many active prefill tokens",
		Field: func(c *Config) any { return &c.ActivePrefillTokensThreshold }},
	{Name: "active-prefill-tokens-threshold-frac", Env: "DYN_ACTIVE_PREFILL_TOKENS_THRESHOLD_FRAC", Help: "busy above this fraction of max_num_batched_tokens in active prefill",
		Field: func(c *Config) any { return &c.ActivePrefillTokensThresholdFrac }},
	{Name: "migration-limit", Env: "DYN_MIGRATION_LIMIT", Help: "retries on another worker before the first byte",
		Field: func(c *Config) any { return &c.MigrationLimit }},
	{Name: "kv-cache-block-size", Aliases: []string{"router-block-size"}, Env: "DYN_KV_CACHE_BLOCK_SIZE", Help: "KV block size in tokens",
		Field: func(c *Config) any { return &c.BlockSize }},
	{Name: "router-kv-overlap-score-weight", Aliases: []string{"kv-overlap-score-weight"}, Env: "DYN_ROUTER_KV_OVERLAP_SCORE_WEIGHT",
		EnvAliases: []string{"DYN_OVERLAP_SCORE_WEIGHT"}, Deprecated: true,
		Help:  "deprecated: sets prefill load scale; 0 also sets credit 0",
		Field: func(c *Config) any { return &c.OverlapScoreWeight }},
	{Env: "DYN_ROUTER_OVERLAP_REFRESH_AFTER_SECS", Help: "re-query overlap for requests queued longer than this many seconds (0: never)",
		Field: func(c *Config) any { return &c.OverlapRefreshAfter }},
	{Env: "DYN_ENCODER_CUDA_TO_CPU_RATIO", Help: "device-aware-weighted: weight of a non-CPU worker against a CPU worker",
		Field: func(c *Config) any { return &c.EncoderCudaToCPURatio }},
}

// RegisterFlags applies the DYN_* environment to cfg and registers every flag of Flags on fs, bound to
// cfg. Precedence: an explicit flag beats the environment, which beats cfg's incoming value. Call
// cfg.Resolved() and Validate after fs.Parse.
func RegisterFlags(fs *flag.FlagSet, cfg *Config) error {
	return RegisterFlagsEnv(fs, cfg, os.LookupEnv)
}

// RegisterFlagsEnv is RegisterFlags with an injected environment.
func RegisterFlagsEnv(fs *flag.FlagSet, cfg *Config, lookup func(string) (string, bool)) error {
	for i := range Flags {
		f := &Flags[i]
		p := f.Field(cfg)
		for _, env := range append([]string{f.Env}, f.EnvAliases...) {
			if env == "" {
				continue
			}
			if v, ok := lookup(env); ok && v != "" {
				if err := setValue(p, v); err != nil {
					return fmt.Errorf("%w: $%s: %v", ErrBadConfig, env, err)
				}
				break
			}
		}
		if f.Name == "" {
			continue
		}
		usage := f.Help
		if f.Env != "" {
			usage += " [$" + f.Env + "]"
		}
		fs.Var(fieldValue{p}, f.Name, usage)
		for _, a := range f.Aliases {
			if strings.HasPrefix(a, "no-") {
				fs.Var(negValue{p.(*bool)}, a, "deprecated alias of --"+f.Neg)
				continue
			}
			fs.Var(fieldValue{p}, a, "deprecated alias of --"+f.Name)
		}
		if f.Neg != "" {
			fs.Var(negValue{p.(*bool)}, f.Neg, "disable --"+f.Name)
		}
	}
	return nil
}

// fieldValue is a flag.Value over one Config field.
type fieldValue struct{ p any }

func (v fieldValue) String() string {
	if v.p == nil {
		return ""
	}
	return render(v.p)
}

func (v fieldValue) Set(s string) error { return setValue(v.p, s) }

func (v fieldValue) IsBoolFlag() bool {
	_, ok := v.p.(*bool)
	return ok
}

// negValue is the --no-x form of a boolean.
type negValue struct{ p *bool }

func (v negValue) String() string {
	if v.p == nil {
		return "false"
	}
	return strconv.FormatBool(!*v.p)
}

func (v negValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*v.p = !b
	return nil
}

func (negValue) IsBoolFlag() bool { return true }

func render(p any) string {
	switch p := p.(type) {
	case *bool:
		return strconv.FormatBool(*p)
	case *int:
		return strconv.Itoa(*p)
	case *float64:
		return strconv.FormatFloat(*p, 'g', -1, 64)
	case *time.Duration:
		if *p == 0 {
			return "unset"
		}
		return strconv.FormatFloat(p.Seconds(), 'g', -1, 64)
	case *OptFloat:
		return p.String()
	case *OptDuration:
		return p.String()
	case *string:
		if *p == "" {
			return "unset"
		}
		return *p
	case *RouterMode:
		return string(*p)
	case *SelectionPolicy:
		return string(*p)
	case *Preset:
		return string(*p)
	case *QueuePolicy:
		return string(*p)
	case *SharedCacheType:
		return string(*p)
	}
	panic(fmt.Sprintf("scoring: flag field of type %T", p))
}

func parseFloat(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("not a finite number: %q", s)
	}
	return v, nil
}

func setValue(p any, s string) error {
	s = strings.TrimSpace(s)
	switch p := p.(type) {
	case *bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		*p = b
	case *int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		*p = n
	case *float64:
		v, err := parseFloat(s)
		if err != nil {
			return err
		}
		*p = v
	case *time.Duration:
		v, err := parseFloat(s)
		if err != nil {
			return err
		}
		*p = time.Duration(v * float64(time.Second))
	case *OptDuration:
		var o OptFloat
		if err := setValue(&o, s); err != nil {
			return err
		}
		*p = OptDuration{V: time.Duration(o.V * float64(time.Second)), Set: o.Set}
		return nil
	case *OptFloat:
		if s == "" || strings.EqualFold(s, "none") || strings.EqualFold(s, "unset") {
			*p = OptFloat{}
			return nil
		}
		v, err := parseFloat(s)
		if err != nil {
			return err
		}
		*p = Some(v)
	case *string:
		*p = s
	case *RouterMode:
		*p = RouterMode(strings.ToLower(s))
	case *SelectionPolicy:
		if strings.EqualFold(s, "linear") {
			s = string(PolicyDefault)
		}
		*p = SelectionPolicy(strings.ToLower(s))
	case *QueuePolicy:
		*p = QueuePolicy(strings.ToLower(s))
	case *Preset:
		*p = Preset(strings.ToLower(s))
	case *SharedCacheType:
		*p = SharedCacheType(strings.ToLower(s))
	default:
		return fmt.Errorf("unsupported field type %T", p)
	}
	return nil
}
