package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/mm"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/natsplane"
	"github.com/kvroute/kvroute/workers/registry"
)

func init() {
	register("mocker", "simulated vLLM workers (OpenAI API, ZMQ KV events, replay) without GPUs", runMocker)
}

// mockerIgnoredFlags are vLLM serve flags a launch script may pass; the mocker accepts and ignores them.
var mockerIgnoredFlags = map[string]bool{ // name → takes a value
	"gpu-memory-utilization": true, "tensor-parallel-size": true, "pipeline-parallel-size": true,
	"dtype": true, "seed": true, "prefix-caching-hash-algo": true, "uvicorn-log-level": true, "swap-space": true,
	"kv-cache-dtype": true, "max-logprobs": true, "tokenizer": true, "kv-transfer-config": true,
	"limit-mm-per-prompt": true, "mm-processor-kwargs": true, "tool-call-parser": true, "compilation-config": true,
	"reasoning-parser": true, "trust-remote-code": false, "enable-auto-tool-choice": false, "async-scheduling": false,
	"enable-prefix-caching": false, "no-enable-prefix-caching": false, "enable-chunked-prefill": false,
	"enforce-eager": false, "disable-log-requests": false, "disable-log-stats": false,
	"enable-prompt-tokens-details": false, "no-enable-log-requests": false,
}

func runMocker(args []string) int {
	fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
	f := defineMockerFlags(fs)
	for name, takesValue := range mockerIgnoredFlags {
		if takesValue {
			fs.String(name, "", "ignored (vLLM compatibility)")
		} else {
			fs.Bool(name, false, "ignored (vLLM compatibility)")
		}
	}
	// vllm serve MODEL [flags]: a leading positional argument is the model.
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		*f.modelPath = args[0]
		args = args[1:]
	}
	if code, ok := parseFlags(fs, args, true); !ok {
		return code
	}
	if fs.NArg() == 1 && *f.modelPath == "" {
		*f.modelPath = fs.Arg(0)
	} else if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "mocker: unexpected arguments %v\n", fs.Args())
		return 2
	}

	tmpl, code := f.workerConfig()
	if code != 0 {
		return code
	}
	return f.serve(tmpl)
}

// mockerFlags are kvroute mocker's flags.
type mockerFlags struct {
	numWorkers    *int
	httpPort      *int
	host          *string
	eventsBase    *int
	replayBase    *int
	noEvents      *bool
	natsURL       *string
	curveKey      *string
	dropEvery     *uint64
	kvCfg         *string
	eventFormat   *string
	blockSize     *int
	numBlocks     *int
	maxSeqs       *int
	maxBatched    *int
	maxModelLen   *int
	speedup       *float64
	decodeSpeedup *float64
	dpSize        *int
	modelPath     *string
	served        *string
	defaultMax    *int
	hashSeed      *uint64
	kvBandwidth   *float64
	allowMedia    *string
}

// defineMockerFlags defines the flags of kvroute mocker on fs.
func defineMockerFlags(fs *flag.FlagSet) *mockerFlags {
	f := &mockerFlags{}
	def := mocker.DefaultEngineConfig()
	f.numWorkers = fs.Int("num-workers", 1, "number of simulated workers in this process")
	// 8100, not vLLM's 8000: kvroute frontend and serve listen on 8000, and a simulated worker started
	// beside them with no port should not collide with them. Launch scripts pass --port.
	f.httpPort = fs.Int("http-port", 8100, "HTTP port of worker 0; worker i listens on http-port+i")
	alias(fs, "port", "http-port")
	f.host = fs.String("host", "127.0.0.1", "HTTP listen host")
	f.eventsBase = fs.Int("kv-events-port-base", 5557, "ZMQ PUB port of worker 0 rank 0; worker i rank r binds tcp://*:base+i*dp_size+r")
	f.replayBase = fs.Int("replay-port-base", 5757, "ZMQ replay ROUTER port base, numbered like --kv-events-port-base")
	f.noEvents = fs.Bool("no-kv-events", false, "publish no KV events")
	f.natsURL = fs.String("nats-url", "", "register every worker in the NATS discovery bucket (kvroute frontend --discovery nats), with TTL heartbeats")
	f.curveKey = fs.String("kv-events-curve-server-key", os.Getenv("KVROUTE_KV_EVENTS_CURVE_SECRET"), "Z85 CURVE secret key: authenticate and encrypt the KV event stream; routers need the public key (worker spec curve_key=...) (env KVROUTE_KV_EVENTS_CURVE_SECRET)")
	f.dropEvery = fs.Uint64("kv-events-drop-every", 0, "fault injection: withhold every Nth batch from PUB (kept for replay), so subscribers must recover gaps (0: off)")
	f.kvCfg = fs.String("kv-events-config", "", `vLLM's JSON, e.g. '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558"}'; overrides the port bases (worker i offsets the ports by i*dp_size)`)
	f.eventFormat = fs.String("event-format", "map", "KV event layout: map (current vLLM), array (legacy vLLM / SGLang) or trtllm (TensorRT-LLM's JSON event list, mm_keys per block)")
	// The frontend's default block size (16, vLLM's), so a mocker and a frontend started with defaults
	// agree; --block-size 64 gives Dynamo's mocker default.
	f.blockSize = fs.Int("block-size", 16, "tokens per KV block (the engine's --block-size; the frontend's --kv-cache-block-size)")
	alias(fs, "kv-cache-block-size", "block-size")
	f.numBlocks = fs.Int("num-gpu-blocks", def.NumGPUBlocks, "KV blocks per engine (dp rank)")
	fs.IntVar(f.numBlocks, "num-gpu-blocks-override", def.NumGPUBlocks, "alias of --num-gpu-blocks (vLLM / Dynamo spelling)")
	f.maxSeqs = fs.Int("max-num-seqs", def.MaxNumSeqs, "max running requests per engine")
	f.maxBatched = fs.Int("max-num-batched-tokens", def.MaxNumBatchedTokens, "token budget per engine step (prefill chunks + decodes)")
	f.maxModelLen = fs.Int("max-model-len", 0, "max prompt + output tokens (0: what fits the KV cache)")
	f.speedup = fs.Float64("speedup-ratio", def.SpeedupRatio, "divide simulated durations by this (higher = faster)")
	f.decodeSpeedup = fs.Float64("decode-speedup-ratio", def.DecodeSpeedupRatio, "extra divisor for decode steps")
	f.dpSize = fs.Int("dp-size", 1, "data-parallel ranks (engines) per worker")
	fs.IntVar(f.dpSize, "data-parallel-size", 1, "alias of --dp-size (vLLM spelling)")
	f.modelPath = fs.String("model-path", "", "HF model directory (tokenizer, chat template, image geometry); empty: built-in byte tokenizer")
	fs.StringVar(f.modelPath, "model", "", "alias of --model-path (vLLM spelling; also accepted as the first positional argument)")
	f.served = fs.String("served-model-name", "", "model name in the API (default: the model path, or kvroute-mocker)")
	f.defaultMax = fs.Int("default-max-tokens", 16, "output length when a request sets no max_tokens")
	f.hashSeed = fs.Uint64("hash-seed", 0, "seed of the engine block hashes (opaque to routers)")
	f.kvBandwidth = fs.Float64("kv-transfer-bandwidth", mocker.DefaultKVTransferBandwidth/1e9, "GB/s a decode worker pulls a prefill worker's KV blocks at (disaggregated serving: the transfer time before decode)")
	f.allowMedia = fs.String("media-allow-hosts", "", "comma-separated hosts, IPs or CIDRs that image URLs may reach although internal (the frontend's SSRF guard)")
	return f
}

// workerConfig is the simulated workers' configuration the flags give, or the exit code of a refusal.
func (f *mockerFlags) workerConfig() (mocker.WorkerConfig, int) {
	layout, err := mocker.ParseEventFormat(*f.eventFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return mocker.WorkerConfig{}, 2
	}
	eng := mocker.DefaultEngineConfig()
	eng.BlockSize, eng.NumGPUBlocks, eng.MaxNumSeqs, eng.MaxNumBatchedTokens = *f.blockSize, *f.numBlocks, *f.maxSeqs, *f.maxBatched
	eng.SpeedupRatio, eng.DecodeSpeedupRatio, eng.MaxModelLen, eng.HashSeed = *f.speedup, *f.decodeSpeedup, *f.maxModelLen, *f.hashSeed
	if err := eng.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return mocker.WorkerConfig{}, 2
	}
	tmpl := mocker.WorkerConfig{Engine: eng, DPSize: *f.dpSize, ServedModelName: *f.served, DefaultMaxTokens: *f.defaultMax,
		MediaAllowHosts: mm.ParseAllowHosts(*f.allowMedia), KVTransfer: mocker.KVTransferConfig{Bandwidth: *f.kvBandwidth * 1e9}}
	if !(*f.kvBandwidth > 0) {
		fmt.Fprintln(os.Stderr, "mocker: --kv-transfer-bandwidth must be positive")
		return mocker.WorkerConfig{}, 2
	}
	if *f.modelPath != "" {
		m, err := mocker.LoadModel(*f.modelPath, *f.served)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return mocker.WorkerConfig{}, 1
		}
		tmpl.Model = m
	}
	kv := mocker.DefaultKVEventsConfig()
	if *f.kvCfg != "" {
		if kv, err = mocker.ParseKVEventsConfig(*f.kvCfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return mocker.WorkerConfig{}, 2
		}
	}
	kv.Enable = kv.Enable && !*f.noEvents
	kv.Layout = layout
	kv.CurveSecretKey = *f.curveKey
	if n := *f.dropEvery; n > 0 {
		kv.SkipSend = func(seq uint64) bool { return seq%n == n-1 }
	}
	tmpl.KVEvents = kv

	return tmpl, 0
}

// serve starts the fleet, registers it in NATS discovery when asked, and runs until SIGINT or SIGTERM.
func (f *mockerFlags) serve(tmpl mocker.WorkerConfig) int {
	kv := tmpl.KVEvents
	var err error
	fc := mocker.FleetConfig{NumWorkers: *f.numWorkers, Template: tmpl, HTTPHost: *f.host, HTTPPortBase: *f.httpPort,
		KVEventsPortBase: *f.eventsBase, ReplayPortBase: *f.replayBase}
	var fleet *mocker.Fleet
	if *f.kvCfg != "" {
		fleet, err = startFleetWithEndpoints(fc, kv, max(*f.dpSize, 1))
	} else {
		fleet, err = mocker.StartFleet(fc)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, w := range fleet.Workers {
		fmt.Fprintf(os.Stderr, "mocker: worker %s\n", w.Spec())
	}
	regCtx, stopReg := context.WithCancel(context.Background())
	regDone := make(chan struct{})
	close(regDone)
	if *f.natsURL != "" {
		var err error
		if regDone, err = registerWorkersNATS(regCtx, *f.natsURL, fleet); err != nil {
			fmt.Fprintln(os.Stderr, "mocker:", err)
			stopReg()
			_ = fleet.Close()
			return 1
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	stopReg() // deregister (graceful stop) before the workers go away
	<-regDone
	if err := fleet.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startFleetWithEndpoints starts workers whose endpoints come from --kv-events-config: worker i binds the
// configured endpoints with tcp ports offset by i*dp (ranks add their own offset on top); a connect endpoint
// is shared by all workers, each with its own topic.
func startFleetWithEndpoints(fc mocker.FleetConfig, kv mocker.KVEventsConfig, dp int) (*mocker.Fleet, error) {
	f := &mocker.Fleet{}
	for i := range fc.NumWorkers {
		wc := fc.Template
		wc.ID = i
		wc.HTTPAddr = fc.HTTPHost + ":" + strconv.Itoa(fc.HTTPPortBase+i)
		wc.KVEvents = kv
		wc.KVEvents.ReplayEndpoint = mocker.OffsetEndpoint(kv.ReplayEndpoint, i*dp)
		if kvevents.ShouldBind(kv.Endpoint) {
			wc.KVEvents.Endpoint = mocker.OffsetEndpoint(kv.Endpoint, i*dp)
		} else if fc.NumWorkers > 1 {
			// Connect mode: every worker dials the router's one SUB endpoint (ranks still offset the port, as
			// vLLM does); the topic tells the workers apart, terminated so no topic prefixes another.
			wc.KVEvents.Topic = kv.Topic + "worker-" + strconv.Itoa(i) + "/"
		}
		w, err := mocker.StartWorker(wc)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.Workers = append(f.Workers, w)
	}
	return f, nil
}

// registerWorkersNATS keeps every worker registered in the NATS discovery bucket until ctx is done; the
// returned channel closes once every registration has been deleted.
func registerWorkersNATS(ctx context.Context, url string, fleet *mocker.Fleet) (chan struct{}, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("--nats-url %s: %w", url, err)
	}
	done := make(chan struct{})
	var g routine.Group
	for _, w := range fleet.Workers {
		spec, err := registry.Parse(w.Spec())
		if err != nil {
			nc.Close()
			return nil, err
		}
		g.Go(registrar, func() {
			if err := natsplane.Register(ctx, nc, spec, natsplane.DiscoveryConfig{}, true); err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "mocker: worker %d: discovery: %v\n", spec.ID, err)
			}
		})
	}
	registrarsDone.Go(func() {
		g.Wait()
		nc.Close()
		close(done)
	})
	return done, nil
}
