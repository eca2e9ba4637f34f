package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/frontend"
	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/mm"
	"github.com/kvroute/kvroute/model"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/transfer"
	"github.com/kvroute/kvroute/workers/client"
	"github.com/kvroute/kvroute/workers/mocker"
)

func init() {
	register("frontend", "OpenAI-compatible frontend with the embedded KV router, pointed at real workers", runFrontend)
}

// frontendFlags are the flags kvroute frontend and kvroute serve share.
type frontendFlags struct {
	cfg       scoring.Config
	port      *int
	host      *string
	modelPath *string
	modelName *string
	models    modelFlags
	bind      *bindFlags
	identity  *time.Duration
	workers   workerFlags
	maxBody   *int
	timeout   *time.Duration
	health    *time.Duration
	selfTest  *bool
	mmOn      *bool
	allow     *string
	decode    *bool
	maxImages *int
	maxPixels *uint64
	dataURIID *string
	srv       serverFlags
	nats      *natsFlags
	xfer      *string
	xferAddr  *string
	ops       *opsFlags
	pd        frontend.DisaggConfig
	// maxReqImgBytes and imgInFlight bound the frontend's image downloads per request and across the
	// process.
	maxReqImgBytes, imgInFlight *int64
}

func addFrontendFlags(fs *flag.FlagSet, defaultMode scoring.RouterMode) (*frontendFlags, error) {
	f := &frontendFlags{cfg: scoring.DefaultConfig()}
	f.cfg.Mode = defaultMode
	if err := scoring.RegisterFlags(fs, &f.cfg); err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(envOr("DYN_HTTP_PORT", "8000"))
	if err != nil {
		return nil, fmt.Errorf("$DYN_HTTP_PORT: %w", err)
	}
	f.port = fs.Int("http-port", port, "HTTP port [$DYN_HTTP_PORT]")
	f.host = fs.String("http-host", envOr("DYN_HTTP_HOST", "0.0.0.0"), "HTTP listen address [$DYN_HTTP_HOST]")
	alias(fs, "host", "http-host")
	envModel := envOr("DYN_MODEL_PATH", envOr("KVROUTE_MODEL_PATH", defaultModelPath))
	f.modelPath = fs.String("model-path", envModel, "HF-layout model directory or HF cache model name (tokenizer, chat template) [$DYN_MODEL_PATH, $KVROUTE_MODEL_PATH]")
	f.modelName = fs.String("model-name", os.Getenv("DYN_MODEL_NAME"), "served model name (default: the model directory's name) [$DYN_MODEL_NAME]")
	fs.Var(&f.models, "model", "a served model: name=path (a model directory or HF cache name), optionally ,block_size=N; repeatable, each model with its own tokenizer, router and workers (worker spec model=name); replaces --model-path and --model-name")
	f.bind = registerBindFlag(fs)
	f.identity = identityCheckFlag(fs)
	fs.Var(&f.workers, "worker", "a worker: id=1,url=http://...,events=tcp://...,replay=tcp://... (repeatable)")
	maxBody := 32 << 20
	if v := os.Getenv("DYN_HTTP_BODY_LIMIT_MB"); v != "" {
		mb, err := strconv.Atoi(v)
		if err != nil || mb <= 0 {
			return nil, fmt.Errorf("$DYN_HTTP_BODY_LIMIT_MB %q: want a positive number of MiB", v)
		}
		maxBody = mb << 20
	}
	f.maxBody = fs.Int("max-body-bytes", maxBody, "largest request body accepted (413 above) [$DYN_HTTP_BODY_LIMIT_MB, in MiB]")
	f.timeout = fs.Duration("request-timeout", 10*time.Minute, "bound on one request, queue wait included")
	f.health = fs.Duration("health-check-interval", 2*time.Second, "how often each worker's /health and /metrics are checked, the checks of a round spread over half of it (0 disables)")
	f.selfTest = fs.Bool("worker-self-test", true, "on registration, send a canary prompt and check its KV events match the router's hashes")
	f.mmOn = fs.Bool("mm-routing", true, "route images by identity (mm_hash pad values) when the model family is known")
	f.allow = fs.String("media-allow-hosts", "", "comma-separated hosts, IPs or CIDRs that image URLs may reach although internal (SSRF guard)")
	f.decode = fs.Bool("frontend-decoding", false, "download and decode images in the frontend; identity = hash of the decoded pixels")
	f.maxImages = fs.Int("mm-max-images", 32, "most images per request routed on their identity")
	f.maxPixels = fs.Uint64("mm-max-total-pixels", 1<<28, "bound on the sum of W×H over a request's images")
	f.maxReqImgBytes = fs.Int64("mm-max-request-image-bytes", mm.DefaultMaxRequestBytes, "with --frontend-decoding: bytes one request's image downloads may read in total (413 above)")
	f.imgInFlight = fs.Int64("mm-image-bytes-in-flight", mm.DefaultMaxFetchBytesInFlight, "image bytes downloaded by the frontend (--frontend-decoding, --mm-transfer) and held at once across all requests; a download waits up to 2s for room, then its request gets 429")
	f.dataURIID = fs.String("mm-data-uri-identity", "payload", "identity of a data: URI image: payload (its decoded bytes, whatever the MIME label) or uri (the whole URI string, as Dynamo's default path)")
	f.srv.register(fs)
	f.pd = frontend.DefaultDisaggConfig()
	if v := os.Getenv("DYN_DECODE_FALLBACK"); v != "" {
		if f.pd.DecodeFallback, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("$DYN_DECODE_FALLBACK %q: want true or false", v)
		}
	}
	fs.BoolVar(&f.pd.DecodeFallback, "decode-fallback", f.pd.DecodeFallback, "disaggregated serving: when no prefill worker can take a request, serve it aggregated on a decode worker instead of answering 503 [$DYN_DECODE_FALLBACK]")
	fs.StringVar(&f.pd.BypassPolicy, "conditional-prefill-policy", f.pd.BypassPolicy, "disaggregated serving: which prompts skip the prefill hop: token_cap, threshold_only, always_bypass or never")
	fs.IntVar(&f.pd.BypassBelowTokens, "conditional-prefill-bypass-below-tokens", f.pd.BypassBelowTokens, "disaggregated serving: a prompt with fewer net-new tokens (ISL − the decode worker's cached tokens) skips the prefill hop")
	fs.IntVar(&f.pd.DisaggAboveTokens, "conditional-prefill-disagg-above-tokens", f.pd.DisaggAboveTokens, "disaggregated serving (token_cap): a prompt with at least this many net-new tokens always takes the prefill hop")
	fs.Float64Var(&f.pd.RoomyRatio, "conditional-prefill-roomy-ratio", f.pd.RoomyRatio, "disaggregated serving (token_cap, between the thresholds): bypass while the decode workers carry fewer prefill tokens than this × disagg-above-tokens each")
	f.nats = addNATSFlags(fs)
	f.xfer = fs.String("mm-transfer", "", "hand preprocessed images (mm_kwargs) to workers: shm (same node), net (transfer agent) or off; env KVROUTE_MM_TRANSFER, DYNAMO_MM_TRANSFER; DYNAMO_DISABLE_NIXL_MM=1 means off")
	f.xferAddr = fs.String("mm-transfer-advertise", "", "net mode: host:port of the transfer agent as workers reach it (default: its loopback listen address)")
	if f.ops, err = addOpsFlags(fs); err != nil {
		return nil, err
	}
	f.nats.reset = f.ops.resetStates
	addNegations(fs)
	return f, nil
}

// check validates what the flag package cannot: enumerated values, flag pairs, Dynamo's refusals.
func (f *frontendFlags) check(fs *flag.FlagSet) error {
	modes := make([]string, len(scoring.Modes))
	for i, m := range scoring.Modes {
		modes[i] = string(m)
	}
	if err := oneOf("router-mode", string(f.cfg.Mode), modes); err != nil {
		return err
	}
	if err := oneOf("mm-data-uri-identity", *f.dataURIID, []string{"payload", "uri"}); err != nil {
		return err
	}
	if *f.maxReqImgBytes <= 0 || *f.imgInFlight <= 0 {
		return fmt.Errorf("--mm-max-request-image-bytes and --mm-image-bytes-in-flight must be positive")
	}
	if err := f.srv.check(); err != nil {
		return err
	}
	if len(f.models) > 0 {
		var clash string
		fs.Visit(func(fl *flag.Flag) {
			if fl.Name == "model-path" || fl.Name == "model-name" {
				clash = fl.Name
			}
		})
		if clash != "" {
			return fmt.Errorf("--%s and --model: name the models with --model name=path only", clash)
		}
		if *f.ops.tokenizer == "none" {
			return fmt.Errorf("--tokenizer none serves one model: give --model-name, not --model")
		}
	}
	if err := f.pd.Validate(); err != nil {
		return err
	}
	if err := checkUnbuiltScoring(&f.cfg); err != nil {
		return err
	}
	disc, err := f.ops.check()
	if err != nil {
		return err
	}
	if disc != "" {
		explicit := false
		fs.Visit(func(fl *flag.Flag) { explicit = explicit || fl.Name == "discovery" })
		if explicit && *f.nats.discovery != disc {
			return fmt.Errorf("--discovery %s and --discovery-backend %s disagree", *f.nats.discovery, *f.ops.discBackend)
		}
		*f.nats.discovery = disc
	}
	return f.ops.dump(fs)
}

// frontendApp is a running frontend: router, HTTP server, the actor system.
type frontendApp struct {
	// hugeStop ends --huge-pages' periodic advice of the heap.
	hugeStop func()
	system   *actor.ActorSystem
	router   *router.Router
	pool     *frontend.WorkerPool
	server   *frontend.Server
	api      *frontend.OpenAIAPI
	probes   *frontend.Probes
	drain    frontend.DrainConfig
	log      *slog.Logger
	mon      *frontend.Monitor // the first model's
	// pds are every model's prefill side (prefill router core) of disaggregated serving, in --model
	// order; pmons check their workers.
	pds   []*frontend.Disagg
	pmons []*frontend.Monitor
	// models serves every model; routers and mons are per model, in --model order (routers[0] == router).
	models  *frontend.Models
	routers []*router.Router
	mons    []*frontend.Monitor
	tracer  trace.Tracer
	fleets  []*mocker.Fleet // kvroute serve's simulated workers, closed by closeFleet
	prober  *mm.Prober      // every model's image prober (--mm-routing)
	// traceStop flushes and stops the span exporter (nil: tracing off).
	traceStop func(context.Context) error
	nats      *natsFlags
	ln        net.Listener
	model     *model.Model
	name      string
}

// startFrontend loads the model, starts the router core, registers the flag workers and listens.
func startFrontend(f *frontendFlags, reg *prometheus.Registry, log *slog.Logger) (*frontendApp, error) {
	cfg := f.cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Huge pages first: a reservation (N) must come before the heap fills with the models and the index;
	// auto's probe and reservation go on in the background while the models load.
	hugeStop, err := startHugePages(*f.ops.hugePages, log, true)
	if err != nil {
		return nil, err
	}
	sms, perModel, err := loadServedModels(f, log)
	if err != nil {
		hugeStop()
		return nil, err
	}
	name := sms[0].name
	app := &frontendApp{hugeStop: hugeStop, system: actors.NewSystem(nil), model: sms[0].m, name: name, log: log,
		drain: frontend.DrainConfig{GracePeriod: *f.ops.grace, Timeout: *f.ops.drain}}
	app.pool = frontend.NewWorkerPool(client.DefaultConfig())
	ms := modelSetup{f: f, cfg: cfg, reg: reg, log: log, multi: len(sms) > 1,
		fm: frontend.NewFrontendMetricsWith(reg, frontend.MetricLabels{Model: name, Namespace: *f.ops.namespace})}
	if err := app.startMedia(f, &ms, reg); err != nil {
		app.stop()
		return nil, err
	}
	if *f.ops.otlp != "" {
		tracer, shutdown, err := startTracing(*f.ops.otlp, *f.ops.service)
		if err != nil {
			app.stop()
			return nil, err
		}
		app.tracer, app.traceStop = tracer, shutdown
		log.Info("tracing on", "otlp_endpoint", *f.ops.otlp, "service", *f.ops.service)
	}
	ms.hc = frontend.DefaultHealthConfig()
	ms.hc.Interval, ms.hc.SelfTest = *f.health, *f.selfTest
	var collector *frontend.ModelCollector
	apis := make([]*frontend.OpenAIAPI, len(sms))
	for i, sm := range sms {
		if apis[i], err = app.startModel(ms, i, sm, perModel[i]); err != nil {
			app.stop()
			return nil, err
		}
		if collector == nil {
			collector = frontend.NewModelCollector(app.routers[i], sm.name, cfg.MigrationLimit)
		} else {
			collector.AddModel(app.routers[i], sm.name)
		}
	}
	reg.MustRegister(collector)
	c := &cores{rs: app.routers, pds: app.pds}
	for _, sm := range sms {
		c.names = append(c.names, sm.name)
	}
	if err := f.nats.start(c, perModel, log); err != nil {
		app.stop()
		return nil, err
	}
	if f.nats.on() {
		reg.MustRegister(natsCollector{f.nats.plane})
	}
	app.api = apis[0]
	app.models = frontend.NewModels(apis...)
	app.mon = app.mons[0]
	if err := app.serve(f, cfg, sms, reg); err != nil {
		app.stop()
		return nil, err
	}
	workers := 0
	for _, r := range app.routers {
		workers += len(r.Workers())
	}
	names := make([]string, len(sms))
	for i, sm := range sms {
		names[i] = sm.name
	}
	log.Info("kvroute frontend listening", "addr", app.ln.Addr().String(), "models", strings.Join(names, ","), "router_mode", cfg.Mode,
		"block_size", cfg.BlockSize, "workers", workers)
	return app, nil
}

// startMedia sets up what every model's image handling shares: the media URL guard and, with --mm-routing,
// one image prober (its download and decode budgets bound the process) and the data: URI budget of the
// worker-bound bodies.
func (app *frontendApp) startMedia(f *frontendFlags, ms *modelSetup, reg prometheus.Registerer) error {
	var err error
	if ms.guard, err = mm.NewGuard(mm.ParseAllowHosts(*f.allow)); err != nil {
		return fmt.Errorf("--media-allow-hosts: %w", err)
	}
	if !*f.mmOn {
		return nil
	}
	if ms.prober, err = mm.NewProber(f.probeConfig(), nil, nil); err != nil {
		return err
	}
	ms.inline = frontend.NewInlineBudget(frontend.DefaultInlineBytes)
	p := ms.prober
	app.prober = p
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvroute_media_fetch_bytes_in_flight",
		Help: "Image bytes the frontend is downloading or holding until decoded (--frontend-decoding, --mm-transfer), at most --mm-image-bytes-in-flight."},
		func() float64 { return float64(p.FetchBytesInFlight()) }))
	return nil
}

// loadServedModels loads the served models (--model, or --model-path and --model-name) and assigns each
// --worker to its model's list; worker ids stay unique over the frontend (/v1/workers/{id}).
func loadServedModels(f *frontendFlags, log *slog.Logger) ([]servedModel, []workerFlags, error) {
	withTokenizer := *f.ops.tokenizer != "none"
	if !withTokenizer {
		if *f.modelName == "" {
			return nil, nil, fmt.Errorf("--tokenizer none: give --model-name, the model the workers serve")
		}
		log.Info("no tokenizer (--tokenizer none): prompts must be token ids; text prompts and chat are answered 422, images route on their token ids")
	}
	sms, err := loadModels(f.modelArgs(), withTokenizer)
	if err != nil {
		if len(f.models) == 0 {
			err = fmt.Errorf("--model-path: %w", err)
		}
		return nil, nil, err
	}
	multi := len(sms) > 1
	names := make([]string, len(sms))
	for i, sm := range sms {
		names[i] = sm.name
	}
	perModel := make([]workerFlags, len(sms))
	ids := map[uint64]bool{}
	for _, w := range f.workers {
		if w.URL == "" {
			return nil, nil, fmt.Errorf("--worker id=%d: url is required (the frontend sends it requests)", w.ID)
		}
		if multi && ids[w.ID] {
			return nil, nil, fmt.Errorf("--worker id=%d: given twice (worker ids are unique over all models)", w.ID)
		}
		ids[w.ID] = true
		i, err := assignModel(w, names, log)
		if err != nil {
			return nil, nil, fmt.Errorf("--worker: %w", err)
		}
		perModel[i] = append(perModel[i], w)
	}
	f.workers = nil
	return sms, perModel, nil
}

// modelSetup is what every served model's router core and API share.
type modelSetup struct {
	f     *frontendFlags
	cfg   scoring.Config
	reg   *prometheus.Registry
	log   *slog.Logger
	multi bool
	fm    *frontend.FrontendMetrics
	guard *mm.Guard
	hc    frontend.HealthConfig
	// prober fetches and probes every model's images (--mm-routing), so that --mm-image-bytes-in-flight
	// bounds the whole process, not each model; inline bounds the downloaded bytes every model's requests
	// in flight carry to their workers.
	prober *mm.Prober
	inline *frontend.InlineBudget
}

// startModel starts served model i: its router core (the first model's through the NATS planes when
// configured, with the prefill core of disaggregated serving beside it), its workers, its OpenAI API
// (images when --mm is on) and its health monitor.
func (a *frontendApp) startModel(ms modelSetup, i int, sm servedModel, workers workerFlags) (*frontend.OpenAIAPI, error) {
	f, cfg, log := ms.f, ms.cfg, ms.log
	bs := cfg.BlockSize
	if sm.blockSize > 0 {
		bs = sm.blockSize
	}
	var mreg prometheus.Registerer = ms.reg
	if ms.multi {
		// Every model's router core exports the same series: the model label tells them apart.
		mreg = prometheus.WrapRegistererWith(prometheus.Labels{"model": sm.name}, ms.reg)
	}
	rcfg := router.DefaultConfig(bs)
	rcfg.Scoring = cfg
	rcfg.Scoring.BlockSize = bs
	rcfg.Model = sm.name // picks its profile from --router-policy-config's models
	rcfg.Registerer = mreg
	rcfg.Worker.BindEndpoints = *f.bind
	rcfg.Worker.Log = log
	rcfg.Worker.IdentityCheck = *f.identity
	if sm.m != nil {
		rcfg.Worker.ImageTokenID, rcfg.Worker.ImageEndTokenID = eventImageTokens(sm.m, sm.name)
	}
	rcfg.Indexer.Shards, rcfg.Indexer.WarmEvery = cfg.IndexShards(), cfg.IndexWarm
	var r *router.Router
	var err error
	if i == 0 {
		r, err = f.nats.newRouter(a.system, rcfg, log)
		a.nats = f.nats
	} else {
		rcfg.OnLoad = f.nats.loadObserver() // replica sync: every core publishes its load changes
		if len(*f.bind) > 0 {
			rcfg.Worker.BindShare = a.router.Fleet // one socket per endpoint: the first model's
		}
		r, err = router.New(a.system, rcfg)
	}
	if err != nil {
		return nil, err
	}
	rcfg.OnLoad = f.nats.loadObserver() // and the model's prefill core, started from rcfg below
	if len(*f.bind) > 0 {
		rcfg.Worker.BindShare = r.Fleet // the prefill core's workers publish to the same sockets
	}
	a.routers = append(a.routers, r)
	if i == 0 {
		a.router = r
	}
	pd, err := a.startPrefill(ms, rcfg, sm.name, mreg)
	if err != nil {
		return nil, err
	}
	for _, w := range workers {
		if f.nats.on() {
			break // the NATS planes register them, once every model's cores exist (natsFlags.start)
		}
		if err := frontend.RegisterWorker(r, pd, w); err != nil { // the role picks the core
			return nil, err
		}
	}
	mfm := ms.fm
	if i > 0 {
		mfm = ms.fm.ForModel(sm.name)
	}
	api := frontend.NewOpenAIAPI(r, sm.m, sm.name, a.system, a.pool,
		frontend.OpenAIConfig{MigrationLimit: cfg.MigrationLimit, RequestTimeout: *f.timeout, MediaGuard: ms.guard,
			PassiveHealth: *f.health > 0}, mfm)
	if *f.ops.log.access {
		api.AccessLog = log
	}
	api.PD = pd
	api.Tracer = a.tracer
	if *f.mmOn && sm.m != nil {
		if err := enableMM(api, f, ms.prober, ms.inline, sm.dir, sm.name, mreg, log); err != nil {
			return nil, err
		}
	}
	mhc := ms.hc
	mhc.ModelName = sm.name
	a.mons = append(a.mons, frontend.NewMonitor(r, a.pool, mhc, log))
	return api, nil
}

// startPrefill starts a model's prefill core for disaggregated serving: the same mode and cost as rcfg,
// no active-block tracking, private metrics; and its health monitor. Its counters of how requests were
// served go to reg (labelled with the model when several are served).
func (a *frontendApp) startPrefill(ms modelSetup, rcfg router.Config, name string, reg prometheus.Registerer) (*frontend.Disagg, error) {
	pcfg := rcfg
	pcfg.Scoring = frontend.PrefillConfig(rcfg.Scoring)
	pcfg.Registerer, pcfg.RouterID = nil, "kvroute-prefill"
	prefill, err := router.New(a.system, pcfg)
	if err != nil {
		return nil, err
	}
	pd, err := frontend.NewDisagg(prefill, ms.f.pd)
	if err != nil {
		prefill.Stop()
		return nil, err
	}
	a.pds = append(a.pds, pd)
	mhc := ms.hc
	mhc.ModelName = name
	a.pmons = append(a.pmons, frontend.NewMonitor(prefill, a.pool, mhc, ms.log))
	reg.MustRegister(pd)
	return pd, nil
}

// serve builds the HTTP edge (probes, the OpenAI and router APIs, pprof when on), starts the health
// monitors and listens.
func (a *frontendApp) serve(f *frontendFlags, cfg scoring.Config, sms []servedModel, reg *prometheus.Registry) error {
	pc := frontend.ProbeConfig{Namespace: *f.ops.namespace, MinReadyWorkers: max(1, cfg.MinInitialWorkers),
		Checked: a.mon.Checked, Version: version(), Model: a.name}
	for i, r := range a.routers[1:] {
		pc.Models = append(pc.Models, frontend.ProbedModel{Name: sms[i+1].name, R: r, Checked: a.mons[i+1].Checked})
	}
	a.probes = frontend.NewProbes(a.router, pc)
	scfg := f.srv.config(*f.maxBody, reg)
	scfg.Probes = a.probes
	others, otherPDs := map[string]*router.Router{}, map[string]*frontend.Disagg{}
	for i, r := range a.routers[1:] {
		others[sms[i+1].name], otherPDs[sms[i+1].name] = r, a.pds[i+1]
	}
	handlers := []frontend.Handler{a.models, &frontend.RouterAPI{R: a.router, RequireURL: true, Models: others, Model: a.name,
		PD: a.pds[0], PDs: otherPDs}}
	if *f.ops.pprof {
		handlers = append(handlers, frontend.NewPprofHandler())
	}
	a.server = frontend.NewServer(scfg, handlers...)
	logAccess(a.log, a.server.Config())
	for _, m := range a.mons {
		m.Start()
	}
	for _, m := range a.pmons {
		m.Start()
	}
	var err error
	if a.ln, err = net.Listen("tcp", net.JoinHostPort(*f.host, strconv.Itoa(*f.port))); err != nil {
		return err
	}
	httpServe.Go(func() { _ = a.server.Serve(a.ln) })
	return nil
}

// eventImageTokens are the tokens the event path normalizes in stored blocks: the run token holding
// image embeddings and, for structured layouts (Llama-4, Pixtral), the token closing an image. Without
// a routable family it is config.json's image_token_id / image_token_index, as before.
func eventImageTokens(m *model.Model, name string) (run, end uint32) {
	if info, err := mm.ModelInfoFrom(m, name); err == nil {
		if spec := mm.Detect(info); spec.Enabled {
			return spec.RunTokenID, spec.EndTokenID
		}
	}
	if m.Config.ImageTokenID > 0 {
		return uint32(m.Config.ImageTokenID), 0
	}
	return 0, 0
}

// enableMM turns on multimodal routing when the model's family is known; otherwise it says why not,
// and for a vision model it cannot route on images it still installs the image stage, which then
// counts every request with images as a fallback by reason (unsupported_family, unknown_model)
// without fetching anything.
func enableMM(api *frontend.OpenAIAPI, f *frontendFlags, prober *mm.Prober, inline *frontend.InlineBudget, dir, name string,
	reg prometheus.Registerer, log *slog.Logger) error {
	spec, err := mm.LoadSpec(dir, name)
	if err != nil {
		return err
	}
	if !spec.Enabled {
		log.Info("multimodal routing off: images route on the text prefix", "reason", spec.Disabled)
		if !spec.Vision() {
			return nil
		}
	}
	res, err := mm.NewResolver(spec, prober, f.resolveConfig())
	if err != nil {
		return err
	}
	mc := &frontend.MMConfig{Resolver: res, Limits: mm.DefaultLimits(), Inline: inline}
	if !spec.Enabled {
		api.EnableMM(mc, reg) // counts the fallbacks; nothing is fetched or transferred
		return nil
	}
	mode, err := transfer.ResolveMode(*f.xfer, nil)
	if err != nil {
		return err
	}
	if mode != transfer.ModeOff {
		proc, err := transfer.LoadProcessor(dir)
		if err != nil {
			return fmt.Errorf("--mm-transfer: %w", err)
		}
		tc := transfer.Config{Mode: mode, Processor: proc,
			Fetch: func(ctx context.Context, u string) ([]byte, error) { return prober.Fetch(ctx, u, 0) }}
		tc.Agent.AdvertiseAddr = *f.xferAddr
		if mc.Transfer, err = transfer.NewSender(tc); err != nil {
			return err
		}
	}
	api.EnableMM(mc, reg)
	log.Info("multimodal routing on", "family", spec.Family.String(), "frontend_decoding", *f.decode, "mm_transfer", mode.String())
	return nil
}

// stop drains the HTTP server within the configured cap (frontend.Drain), then stops the rest.
func (a *frontendApp) stop() {
	if a.hugeStop != nil {
		defer a.hugeStop()
	}
	if a.server != nil {
		if a.ln != nil {
			frontend.Drain(a.server, a.models, a.probes, a.drain, a.log)
		} else {
			_ = a.server.Shutdown()
		}
	}
	for _, m := range a.mons {
		m.Stop()
	}
	for _, m := range a.pmons {
		m.Stop()
	}
	if a.traceStop != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = a.traceStop(ctx)
		cancel()
	}
	if a.nats != nil {
		a.nats.stop()
	}
	if a.pool != nil {
		a.pool.Close()
	}
	if a.prober != nil {
		a.prober.Close()
	}
	for _, pd := range a.pds {
		pd.Prefill.Stop()
	}
	for _, r := range a.routers {
		r.Stop()
	}
	a.system.Shutdown()
}

// closeFleet stops kvroute serve's simulated workers (after stop, so streams drain first).
func (a *frontendApp) closeFleet() {
	for _, fl := range a.fleets {
		fl.Close()
	}
}

// modelNameOf names a model by its directory, as vLLM's served name defaults to the model argument.
func modelNameOf(dir string) string {
	for i := len(dir) - 1; i >= 0; i-- {
		if dir[i] == '/' && i < len(dir)-1 {
			return dir[i+1:]
		}
	}
	return dir
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), routine.Collector())
	return reg
}

func waitForSignal() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
}

// probeConfig is the image prober's configuration from the multimodal flags.
func (f *frontendFlags) probeConfig() mm.ProbeConfig {
	pc := mm.DefaultProbeConfig()
	pc.AllowHosts = mm.ParseAllowHosts(*f.allow)
	pc.MaxFetchBytesInFlight = *f.imgInFlight
	return pc
}

// resolveConfig is the image stage's configuration from the multimodal flags.
func (f *frontendFlags) resolveConfig() mm.ResolveConfig {
	rc := mm.DefaultResolveConfig()
	rc.FrontendDecoding, rc.MaxImages, rc.MaxTotalPixels = *f.decode, *f.maxImages, *f.maxPixels
	rc.DataURIAsString = *f.dataURIID == "uri"
	rc.MaxRequestBytes = *f.maxReqImgBytes
	return rc
}

// parseFrontend registers the frontend flags on a new flag set named name, parses args, checks them
// and builds the logger. ok=false: exit with code.
func parseFrontend(name string, args []string, extra func(fs *flag.FlagSet)) (f *frontendFlags, log *slog.Logger, code int, ok bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	f, err := addFrontendFlags(fs, scoring.ModeKV)
	if err != nil {
		fmt.Fprintf(errOut, "kvroute %s: %v\n", name, err)
		return nil, nil, 2, false
	}
	if extra != nil {
		extra(fs)
	}
	if code, ok := parseFlags(fs, args, false); !ok {
		return nil, nil, code, false
	}
	if err := f.check(fs); err != nil {
		fmt.Fprintf(errOut, "kvroute %s: %v\n", name, err)
		return nil, nil, 2, false
	}
	if log, err = f.ops.log.logger(os.Stderr); err != nil {
		fmt.Fprintf(errOut, "kvroute %s: %v\n", name, err)
		return nil, nil, 2, false
	}
	return f, log, 0, true
}

func runFrontend(args []string) int {
	f, log, code, ok := parseFrontend("frontend", args, nil)
	if !ok {
		return code
	}
	app, err := startFrontend(f, newRegistry(), log)
	if err != nil {
		fatal(log, "frontend", err)
		return 1
	}
	waitForSignal()
	log.Info("shutdown: signal received")
	app.stop()
	return 0
}
