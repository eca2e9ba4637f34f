package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kvroute/kvroute/scoring"
)

// Dynamo launch-line compatibility for kvroute frontend and serve: the flags and DYN_* variables of
// Dynamo's frontend reference that kvroute honours, and those it refuses with the reason (never silently
// ignored). docs/migrating-from-dynamo.md maps them all.

// opsFlags are the frontend's operations and Dynamo-compatibility flags.
type opsFlags struct {
	log          *logFlags
	namespace    *string
	resetStates  *bool
	discBackend  *string
	requestPlane *string
	dumpConfig   *string
	metricsPfx   *string
	tokenizer    *string
	chatProc     *string
	pprof        *bool
	otlp         *string
	service      *string
	grace        *time.Duration
	drain        *time.Duration
	hugePages    *string
}

// envSeconds reads a seconds value (Dynamo's *_SECS variables) as a duration default.
func envSeconds(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("$%s %q: want a non-negative number of seconds", name, v)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// refusedFlag is one Dynamo flag kvroute cannot honour.
type refusedFlag struct {
	name, env string
	isBool    bool
	allow     string // the value that is kvroute's behaviour anyway and is accepted
	reason    string
}

var refusedFlags = []refusedFlag{
	{"namespace-prefix", "DYN_NAMESPACE_PREFIX", false, "", "kvroute does not discover workers by namespace; list them with --worker, the /v1/workers API or --discovery nats"},
	{"use-remote-indexer", "DYN_USE_REMOTE_INDEXER", true, "", "the indexer is always in-process; replicas share load with --router-replica-sync and events over --event-plane nats"},
	{"serve-indexer", "DYN_SERVE_INDEXER", true, "", "the indexer is always in-process; other processes query it through the HTTP API of kvroute router"},
	{"kserve-grpc-server", "DYN_KSERVE_GRPC_SERVER", true, "", "kvroute serves the OpenAI HTTP API only (no KServe gRPC)"},
	{"grpc-metrics-port", "DYN_GRPC_METRICS_PORT", false, "", "kvroute serves no gRPC; metrics are on the HTTP port's /metrics"},
	{"enable-anthropic-api", "DYN_ENABLE_ANTHROPIC_API", true, "", "kvroute serves the OpenAI API only (no /v1/messages)"},
	{"interactive", "DYN_INTERACTIVE", true, "", "kvroute has no interactive chat mode"},
	{"dyn-debug-perf", "DYN_DEBUG_PERF", true, "", "there is no Python preprocessor to time; routing-stage timings are the dynamo_router_overhead_* metrics"},
	{"dyn-preprocess-workers", "DYN_PREPROCESS_WORKERS", false, "0", "preprocessing runs on the request's goroutine; there are no worker processes to size"},
	{"rejection-frontend-request-concurrency-limit", "DYN_REJECTION_FRONTEND_REQUEST_CONCURRENCY_LIMIT", false, "", "use --max-concurrent-requests (answers 429 past the limit)"},
	{"rejection-frontend-runtime-task-limit", "DYN_REJECTION_FRONTEND_RUNTIME_TASK_LIMIT", false, "", "there is no task runtime to bound; use --max-concurrent-requests"},
	{"rejection-frontend-request-plane-connection-limit", "DYN_REJECTION_FRONTEND_REQUEST_PLANE_CONNECTION_LIMIT", false, "", "worker connections are pooled per worker; use --max-concurrent-requests"},
	{"admission-control", "DYN_ADMISSION_CONTROL", true, "", "Dynamo ignores it too; set the busy thresholds (--active-decode-blocks-threshold, ...) instead"},
	{"aic-backend", "DYN_AIC_BACKEND", false, "", "the aic prefill load model needs AIConfigurator's performance database, which kvroute does not have (--router-prefill-load-model none)"},
	{"aic-system", "DYN_AIC_SYSTEM", false, "", "the aic prefill load model is not supported (--router-prefill-load-model none)"},
	{"aic-model-path", "DYN_AIC_MODEL_PATH", false, "", "the aic prefill load model is not supported (--router-prefill-load-model none)"},
	{"aic-backend-version", "DYN_AIC_BACKEND_VERSION", false, "", "the aic prefill load model is not supported (--router-prefill-load-model none)"},
	{"aic-tp-size", "DYN_AIC_TP_SIZE", false, "", "the aic prefill load model is not supported (--router-prefill-load-model none)"},
	{"aic-moe-tp-size", "DYN_AIC_MOE_TP_SIZE", false, "", "the aic prefill load model is not supported (--router-prefill-load-model none)"},
	{"aic-moe-ep-size", "DYN_AIC_MOE_EP_SIZE", false, "", "the aic prefill load model is not supported (--router-prefill-load-model none)"},
	{"aic-attention-dp-size", "DYN_AIC_ATTENTION_DP_SIZE", false, "", "the aic prefill load model is not supported (--router-prefill-load-model none)"},
	{"router-max-tree-size", "", false, "", "removed from Dynamo (the index is bounded by the workers' own capacity)"},
	{"router-prune-target-ratio", "", false, "", "removed from Dynamo (the index is bounded by the workers' own capacity)"},
}

// addOpsFlags registers logging, probes, shutdown and the Dynamo-compatibility flags on fs. The
// canonical flags must already be registered (aliases point at them).
func addOpsFlags(fs *flag.FlagSet) (*opsFlags, error) {
	log, err := addLogFlags(fs)
	if err != nil {
		return nil, err
	}
	o := &opsFlags{log: log}
	reset, err := envBool("DYN_ROUTER_RESET_STATES")
	if err != nil {
		return nil, err
	}
	pprof, err := envBool("KVROUTE_PPROF")
	if err != nil {
		return nil, err
	}
	o.namespace = fs.String("namespace", envOr("DYN_NAMESPACE", "dynamo"), "Dynamo namespace: the dynamo_namespace label of dynamo_component_* metrics and /health's instances [$DYN_NAMESPACE]")
	o.resetStates = fs.Bool("router-reset-states", reset,
		"with --router-durable-kv-events: purge the KV_EVENTS stream and the index snapshot at startup (dangerous with running replicas) [$DYN_ROUTER_RESET_STATES]")
	o.discBackend = fs.String("discovery-backend", os.Getenv("DYN_DISCOVERY_BACKEND"), "Dynamo's discovery backend: mem (workers from flags and the API) or nats (as --discovery nats); etcd, kubernetes and file are refused [$DYN_DISCOVERY_BACKEND]")
	o.requestPlane = fs.String("request-plane", envOr("DYN_REQUEST_PLANE", "http"), "how requests reach workers: http, their OpenAI API (tcp and nats are refused) [$DYN_REQUEST_PLANE]")
	o.dumpConfig = fs.String("dump-config-to", os.Getenv("DYN_DUMP_CONFIG_TO"), "write every flag's resolved value as JSON to this file at startup [$DYN_DUMP_CONFIG_TO]")
	o.metricsPfx = fs.String("metrics-prefix", envOr("DYN_METRICS_PREFIX", "dynamo_frontend"), "frontend metric prefix; only Dynamo's default dynamo_frontend is supported [$DYN_METRICS_PREFIX]")
	o.tokenizer = fs.String("tokenizer", envOr("DYN_TOKENIZER", "default"), "default or fastokens: both mean the model's tokenizer.json, which kvroute's own tokenizer reads; none: no model directory, prompts must be token ids [$DYN_TOKENIZER]")
	o.chatProc = fs.String("dyn-chat-processor", envOr("DYN_CHAT_PROCESSOR", "dynamo"), "chat template renderer: dynamo (kvroute renders templates itself; vllm and sglang are refused) [$DYN_CHAT_PROCESSOR]")
	otlp := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if otlp == "" {
		if base := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); base != "" {
			otlp = strings.TrimSuffix(base, "/") + "/v1/traces"
		}
	}
	o.otlp = fs.String("otlp-traces-endpoint", otlp, "OTLP/HTTP traces URL (e.g. http://otel-collector:4318/v1/traces): a span per request and per stage, W3C traceparent taken from the client and passed to the worker; empty: no tracing [$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, $OTEL_EXPORTER_OTLP_ENDPOINT]")
	o.service = fs.String("otel-service-name", envOr("OTEL_SERVICE_NAME", "kvroute"), "service.name of the exported spans [$OTEL_SERVICE_NAME]")
	o.pprof = fs.Bool("pprof", pprof, "serve Go profiles at /debug/pprof/ (an admin path: needs --admin-token when one is set) [$KVROUTE_PPROF]")
	grace, err := envSeconds("DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS", 5*time.Second)
	if err != nil {
		return nil, err
	}
	drain, err := envSeconds("DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS", 5*time.Second)
	if err != nil {
		return nil, err
	}
	o.grace = fs.Duration("graceful-shutdown-grace-period", grace, "on SIGTERM: /ready turns 503 and requests in flight get this long while new ones are still served (ends early when none is in flight) [$DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS, seconds]")
	o.drain = fs.Duration("graceful-shutdown-timeout", drain, "then the listener closes and what is still in flight gets this long before it is cancelled [$DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS, seconds]")
	o.hugePages = hugePagesFlag(fs)
	alias(fs, "busy-threshold", "active-decode-blocks-threshold")
	alias(fs, "router-busy-threshold", "active-decode-blocks-threshold")
	for _, r := range refusedFlags {
		if err := refuse(fs, r.name, r.env, r.isBool, r.allow, r.reason); err != nil {
			return nil, err
		}
	}
	alias(fs, "i", "interactive")
	return o, nil
}

// check validates the compatibility flags after parsing; it returns the discovery mode they imply
// ("" when --discovery-backend is unset).
func (o *opsFlags) check() (discovery string, err error) {
	if _, err := parseLevel(*o.log.level); err != nil {
		return "", err
	}
	if err := oneOf("log-format", strings.ToLower(*o.log.format), []string{"text", "json", "jsonl"}); err != nil {
		return "", err
	}
	switch *o.discBackend {
	case "":
	case "mem":
		discovery = "static"
	case "nats":
		discovery = "nats"
	case "etcd", "kubernetes", "file":
		return "", fmt.Errorf("--discovery-backend %s: not supported; kvroute takes workers from --worker flags and the /v1/workers API (mem) or the NATS bucket (nats)", *o.discBackend)
	default:
		return "", oneOf("discovery-backend", *o.discBackend, []string{"mem", "nats"})
	}
	switch *o.requestPlane {
	case "http":
	case "tcp", "nats":
		return "", fmt.Errorf("--request-plane %s: not supported; kvroute sends requests to each worker's OpenAI HTTP API (http)", *o.requestPlane)
	default:
		return "", oneOf("request-plane", *o.requestPlane, []string{"http"})
	}
	if *o.metricsPfx != "dynamo_frontend" {
		return "", fmt.Errorf("--metrics-prefix %q: not supported; the frontend's metrics keep Dynamo's default names (dynamo_frontend_*) so its dashboards work", *o.metricsPfx)
	}
	if err := oneOf("tokenizer", *o.tokenizer, []string{"default", "fastokens", "none"}); err != nil {
		return "", err
	}
	if *o.chatProc != "dynamo" {
		return "", fmt.Errorf("--dyn-chat-processor %q: not supported; kvroute renders chat templates itself (dynamo)", *o.chatProc)
	}
	return discovery, nil
}

// dump writes every flag's resolved value to --dump-config-to, as Dynamo's --dump-config-to does.
func (o *opsFlags) dump(fs *flag.FlagSet) error {
	if *o.dumpConfig == "" {
		return nil
	}
	cfg := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(refused); ok || strings.Contains(f.Usage, "alias of --") || strings.HasPrefix(f.Usage, "disable --") {
			return
		}
		if f.Name == "admin-token" || f.Name == "router-api-token" {
			return // a secret
		}
		cfg[f.Name] = f.Value.String()
	})
	b, err := json.MarshalIndent(cfg, "", "  ") // map keys come out sorted
	if err != nil {
		return err
	}
	if err := os.WriteFile(*o.dumpConfig, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--dump-config-to: %w", err)
	}
	return nil
}

// checkUnbuiltScoring refuses router settings whose machinery kvroute does not have, so they are not
// accepted and silently ignored: the shared cache tier (Dynamo's hicache) needs a shared-tier indexer,
// which kvroute lacks, so there are no shared hits for --shared-cache-multiplier to credit.
func checkUnbuiltScoring(cfg *scoring.Config) error {
	if cfg.SharedCacheType != scoring.SharedCacheNone && cfg.SharedCacheType != "" {
		return fmt.Errorf("--shared-cache-type %s: not supported; kvroute has no shared-tier (HiCache storage) indexer, so there are no shared hits to credit (none is accepted)", cfg.SharedCacheType)
	}
	if def := scoring.DefaultConfig().SharedCacheMultiplier; cfg.SharedCacheMultiplier != def {
		return fmt.Errorf("--shared-cache-multiplier %g: applies only with --shared-cache-type hicache, which kvroute does not support (Dynamo's default %g is accepted)", cfg.SharedCacheMultiplier, def)
	}
	return nil
}
