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
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/frontend"
	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/workers/registry"
)

func init() {
	register("router", "standalone KV router service: event ingestion, overlap scores, routing decisions", runRouter)
}

// workerFlags collects repeatable --worker values.
type workerFlags []registry.Spec

func (w *workerFlags) String() string { return fmt.Sprint(len(*w), " workers") }

func (w *workerFlags) Set(s string) error {
	sp, err := registry.Parse(s)
	if err != nil {
		return err
	}
	*w = append(*w, sp)
	return nil
}

// intAlias lets a second flag name write the same int as a table flag (e.g. --block-size for
// --kv-cache-block-size).
type intAlias struct{ p *int }

func (a intAlias) String() string {
	if a.p == nil {
		return "0"
	}
	return strconv.Itoa(*a.p)
}
func (a intAlias) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return err
	}
	*a.p = v
	return nil
}

// routerFlags are kvroute router's flags. addRouterFlags is the one place they are registered, so the
// command and the flag coverage test see the same set.
type routerFlags struct {
	cfg       scoring.Config
	port      *int
	host      *string
	log       *logFlags
	bind      *bindFlags
	identity  *time.Duration
	hugePages *string
	srv       serverFlags
	workers   workerFlags
}

// routerRefuses are flags of the shared router and logging tables that the standalone router has nothing
// to apply to: it dispatches no requests (no migration, no OpenAI access log, no generated tokens to
// count) and has no NATS connection
// to share load over. It refuses them with the reason (the value that is its behaviour anyway is
// accepted) instead of ignoring them; kvroute frontend takes them.
var routerRefuses = []refusedFlag{
	{name: "migration-limit", env: "DYN_MIGRATION_LIMIT", allow: "0", reason: "the standalone router dispatches no requests; kvroute frontend --migration-limit retries them"},
	{name: "router-replica-sync", env: "DYN_ROUTER_REPLICA_SYNC", isBool: true, allow: "false", reason: "the standalone router has no NATS connection; kvroute frontend --router-replica-sync shares load between replicas"},
	{name: "router-track-output-blocks", env: "DYN_ROUTER_TRACK_OUTPUT_BLOCKS", isBool: true, allow: "false", reason: "the standalone router's API reports no generated tokens (only prefill_done and free); kvroute frontend --router-track-output-blocks counts them from the stream"},
	{name: "access-log", env: "KVROUTE_ACCESS_LOG", isBool: true, allow: "false", reason: "the standalone router serves no OpenAI requests; kvroute frontend --access-log logs them"},
}

func addRouterFlags(fs *flag.FlagSet) (*routerFlags, error) {
	rf := &routerFlags{cfg: scoring.DefaultConfig()}
	rf.cfg.Mode = scoring.ModeKV // the standalone router exists to route by KV overlap
	shared := flag.NewFlagSet("router", flag.ContinueOnError)
	if err := scoring.RegisterFlags(shared, &rf.cfg); err != nil {
		return nil, err
	}
	var err error
	if rf.log, err = addLogFlags(shared); err != nil {
		return nil, err
	}
	skip := map[string]bool{}
	for _, r := range routerRefuses {
		skip[r.name] = true
		fs.Var(refused{reason: r.reason, allow: r.allow, isBool: r.isBool}, r.name, "refused: "+r.reason)
		if err := refusedEnv(r.env, r.isBool, r.allow, r.reason); err != nil {
			return nil, err // as the flag: its variable set is refused too, not ignored
		}
	}
	shared.VisitAll(func(f *flag.Flag) {
		if !skip[f.Name] {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
	fs.Var(intAlias{&rf.cfg.BlockSize}, "block-size", "KV block size in tokens (alias of --kv-cache-block-size)")
	port, err := strconv.Atoi(envOr("DYN_HTTP_PORT", "8000"))
	if err != nil {
		return nil, fmt.Errorf("$DYN_HTTP_PORT: %w", err)
	}
	rf.port = fs.Int("http-port", port, "HTTP port [$DYN_HTTP_PORT]")
	rf.host = fs.String("http-host", envOr("DYN_HTTP_HOST", "0.0.0.0"), "HTTP listen address [$DYN_HTTP_HOST]")
	alias(fs, "host", "http-host")
	rf.bind = registerBindFlag(fs)
	rf.identity = identityCheckFlag(fs)
	rf.hugePages = hugePagesFlag(fs)
	rf.srv.register(fs)
	fs.Var(&rf.workers, "worker", "a worker: id=1,url=http://...,events=tcp://...,replay=tcp://... (repeatable)")
	return rf, nil
}

func runRouter(args []string) int {
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	rf, err := addRouterFlags(fs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		return 2
	}
	if code, ok := parseFlags(fs, args, false); !ok {
		return code
	}
	if err := rf.srv.check(); err != nil {
		fmt.Fprintln(errOut, "kvroute router:", err)
		return 2
	}
	cfg := rf.cfg.Resolved()
	if err := checkUnbuiltScoring(&cfg); err != nil {
		fmt.Fprintln(errOut, "kvroute router:", err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(errOut, "kvroute router:", err)
		return 2
	}
	log, err := rf.log.logger(os.Stderr)
	if err != nil {
		fmt.Fprintln(errOut, "kvroute router:", err)
		return 2
	}
	bind, identity, sf, workers, port, host := rf.bind, rf.identity, &rf.srv, rf.workers, rf.port, rf.host
	stopHuge, err := startHugePages(*rf.hugePages, log, true)
	if err != nil {
		fmt.Fprintln(errOut, "kvroute router:", err)
		return 2
	}
	defer stopHuge()

	system := actors.NewSystem(nil)
	rcfg := router.DefaultConfig(cfg.BlockSize)
	rcfg.Scoring = cfg
	rcfg.Registerer = prometheus.DefaultRegisterer
	_ = prometheus.Register(routine.Collector()) // registered already when a test runs the command twice in one process
	rcfg.Worker.BindEndpoints = *bind
	rcfg.Worker.Log = log
	rcfg.Worker.IdentityCheck = *identity
	rcfg.Indexer.Shards, rcfg.Indexer.WarmEvery = cfg.IndexShards(), cfg.IndexWarm
	r, err := router.New(system, rcfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		return 1
	}
	defer r.Stop()
	for _, w := range workers {
		if err := r.AddWorker(w); err != nil {
			fmt.Fprintln(os.Stderr, "router:", err)
			return 1
		}
	}

	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		return 1
	}
	srv := routerServer(sf, r, cfg.MinInitialWorkers, log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdownOnSignal.Go(func() {
		<-ctx.Done()
		_ = srv.Shutdown()
	})
	log.Info("kvroute router listening", "addr", ln.Addr().String(), "block_size", cfg.BlockSize,
		"shards", rcfg.Indexer.Shards, "workers", len(workers), "bind", *bind,
		"tokenizer", "none: no model directory is read; requests carry token ids or block hashes")
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		return 1
	}
	return 0
}

// routerServer is the standalone router's HTTP edge: the router API, and the probes as the frontend's:
// /ready is 503 until max(1, --router-min-initial-workers) workers are registered and healthy (this
// command runs no health checks: a registration counts), /health lists them in Dynamo's shape. (They
// were a bare 200 whatever the fleet.)
func routerServer(sf *serverFlags, r *router.Router, minWorkers int, log *slog.Logger) *frontend.Server {
	scfg := sf.config(32<<20, nil)
	scfg.Probes = frontend.NewProbes(r, frontend.ProbeConfig{MinReadyWorkers: max(1, minWorkers), Version: version()})
	srv := frontend.NewServer(scfg, &frontend.RouterAPI{R: r})
	logAccess(log, srv.Config())
	return srv
}
