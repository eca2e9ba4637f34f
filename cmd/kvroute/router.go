package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/frontend"
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

func runRouter(args []string) int {
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	cfg := scoring.DefaultConfig()
	cfg.Mode = scoring.ModeKV // the standalone router exists to route by KV overlap
	if err := scoring.RegisterFlags(fs, &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		return 2
	}
	fs.Var(intAlias{&cfg.BlockSize}, "block-size", "KV block size in tokens (alias of --kv-cache-block-size)")
	port := fs.Int("http-port", 8000, "HTTP port")
	host := fs.String("http-host", envOr("DYN_HTTP_HOST", "0.0.0.0"), "HTTP listen address [$DYN_HTTP_HOST]")
	alias(fs, "host", "http-host")
	lf := addLogFlags(fs)
	bind := registerBindFlag(fs)
	identity := identityCheckFlag(fs)
	var sf serverFlags
	sf.register(fs)
	var workers workerFlags
	fs.Var(&workers, "worker", "a worker: id=1,url=http://...,events=tcp://...,replay=tcp://... (repeatable)")
	if code, ok := parseFlags(fs, args, false); !ok {
		return code
	}
	if err := sf.check(); err != nil {
		fmt.Fprintln(errOut, "kvroute router:", err)
		return 2
	}
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(errOut, "kvroute router:", err)
		return 2
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		fmt.Fprintln(errOut, "kvroute router:", err)
		return 2
	}

	system := actors.NewSystem(nil)
	rcfg := router.DefaultConfig(cfg.BlockSize)
	rcfg.Scoring = cfg
	rcfg.Registerer = prometheus.DefaultRegisterer
	rcfg.Worker.BindEndpoints = *bind
	rcfg.Worker.Log = log
	rcfg.Worker.IdentityCheck = *identity
	rcfg.Indexer = indexer.Config{Shards: cfg.EventThreads, MailboxSize: indexer.DefaultConfig().MailboxSize}
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
	srv := frontend.NewServer(sf.config(32<<20, nil), &frontend.RouterAPI{R: r})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown()
	}()
	log.Info("kvroute router listening", "addr", ln.Addr().String(), "block_size", cfg.BlockSize,
		"shards", cfg.EventThreads, "workers", len(workers), "bind", *bind,
		"tokenizer", "none: no model directory is read; requests carry token ids or block hashes")
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		return 1
	}
	return 0
}
