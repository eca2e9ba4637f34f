package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/workers/natsplane"
	"github.com/kvroute/kvroute/workers/registry"
)

func init() {
	register("relay", "republish one worker's ZMQ KV events on NATS (kv-events.<worker-id>), and register it", runRelay)
}

// runRelay runs next to a worker: a kvevents subscriber per dp rank (with replay) whose batches go to the
// worker's NATS subject, normalized to the current vLLM layout (docs/scale-out.md). With --discovery nats
// it also registers the worker in the kvroute-workers bucket with a TTL heartbeat.
func runRelay(args []string) int {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	id := fs.Uint64("worker-id", 0, "the worker's id at the frontends (required)")
	zmqEP := fs.String("kv-events-endpoint", "", "the worker's ZMQ PUB endpoint for rank 0, e.g. tcp://127.0.0.1:5557 (rank r adds r to the port; the events= of a --worker spec)")
	alias(fs, "zmq", "kv-events-endpoint")
	replay := fs.String("kv-events-replay-endpoint", "", "the worker's replay ROUTER endpoint for rank 0 (optional; the replay= of a --worker spec)")
	alias(fs, "replay", "kv-events-replay-endpoint")
	topic := fs.String("topic", "", "ZMQ topic filter")
	dp := fs.Int("dp-size", 1, "data-parallel ranks behind the worker")
	url := fs.String("nats-url", envOr("NATS_SERVER", "nats://localhost:4222"), "NATS server URL(s), comma-separated [$NATS_SERVER]")
	alias(fs, "nats", "nats-url")
	durable := fs.Bool("durable-kv-events", false, "publish into the JetStream stream KV_EVENTS (acknowledged, retried) instead of core NATS")
	replicas := fs.Int("nats-replicas", 1, "replicas of the stream and bucket (3 on a 3-node cluster)")
	discovery := fs.String("discovery", "static", "static, or nats: register the worker in the kvroute-workers bucket")
	ttl := fs.Duration("discovery-ttl", 10*time.Second, "nats discovery: registration lifetime without heartbeat")
	workerURL := fs.String("url", "", "nats discovery: the worker's HTTP base URL, e.g. http://10.0.0.5:8000")
	blockSize := fs.Int("kv-cache-block-size", 0, "nats discovery: the worker's KV block size (0: the frontend's)")
	alias(fs, "block-size", "kv-cache-block-size")
	totalBlocks := fs.Int("total-kv-blocks", 0, "nats discovery: the worker's KV capacity in blocks (0: unknown)")
	if code, ok := parseFlags(fs, args, false); !ok {
		return code
	}
	if *id == 0 || *zmqEP == "" {
		fmt.Fprintln(os.Stderr, "kvroute relay: --worker-id and --kv-events-endpoint are required")
		return 2
	}
	cfg := natsplane.RelayConfig{WorkerID: *id, Topic: *topic, Durable: *durable, Replicas: *replicas}
	var err error
	if cfg.Events, cfg.Replay, err = rankEndpoints(*zmqEP, *replay, *dp); err != nil {
		fmt.Fprintln(os.Stderr, "kvroute relay:", err)
		return 2
	}
	var spec registry.Spec
	switch *discovery {
	case "static":
	case "nats":
		spec = registry.Spec{ID: *id, URL: *workerURL, DPSize: *dp, BlockSize: *blockSize, TotalKVBlocks: *totalBlocks}
		if err := spec.Validate(); err != nil || *workerURL == "" {
			fmt.Fprintln(os.Stderr, "relay: --discovery nats needs a valid --url:", err)
			return 2
		}
	default:
		fmt.Fprintf(os.Stderr, "relay: --discovery %q: want static or nats\n", *discovery)
		return 2
	}
	nc, err := nats.Connect(*url, nats.Name(fmt.Sprintf("kvroute-relay-%d", *id)), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay: --nats:", err)
		return 1
	}
	defer nc.Close()
	rl, err := natsplane.NewRelay(nc, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var g routine.Group
	if *discovery == "nats" {
		g.Go(registrar, func() {
			_ = natsplane.Register(ctx, nc, spec, natsplane.DiscoveryConfig{TTL: *ttl, Replicas: *replicas}, true)
		})
	}
	fmt.Fprintf(os.Stderr, "relay: worker %d, %d rank(s) from %s to %s, subject %s (durable %v)\n", *id, len(cfg.Events), *zmqEP, *url,
		natsplane.EventSubject(*id), *durable)
	err = rl.Run(ctx)
	g.Wait()
	st := rl.Stats()
	fmt.Fprintf(os.Stderr, "relay: %d batches, %d events, %d resets, %d publish errors\n", st.Batches, st.Events, st.Resets, st.PublishErrors)
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	return 0
}

// rankEndpoints derives every dp rank's event and replay endpoints from rank 0's (rank r adds r to the
// port, as vLLM does).
func rankEndpoints(events, replay string, dp int) (eps, reps []string, err error) {
	if dp < 1 {
		return nil, nil, fmt.Errorf("--dp-size %d: want at least 1", dp)
	}
	for r := 0; r < dp; r++ {
		ep, err := registry.RankEndpoint(events, r)
		if err != nil {
			return nil, nil, fmt.Errorf("--kv-events-endpoint: %w", err)
		}
		rep, err := registry.RankEndpoint(replay, r)
		if err != nil {
			return nil, nil, fmt.Errorf("--kv-events-replay-endpoint: %w", err)
		}
		eps, reps = append(eps, ep), append(reps, rep)
	}
	return eps, reps, nil
}
