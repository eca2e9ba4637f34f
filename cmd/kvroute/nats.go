package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/workers/natsplane"
)

// natsFlags are the scale-out flags of kvroute frontend / serve (docs/scale-out.md). --router-replica-sync
// is a scoring flag (scoring.Config.ReplicaSync); the rest live here.
type natsFlags struct {
	eventPlane  *string
	url         *string
	embedded    *bool
	embedPort   *int
	storeDir    *string
	durable     *bool
	snapshot    *int
	replicas    *int
	discovery   *string
	discoveryTT *time.Duration
	routerID    *string
	reset       *bool // --router-reset-states (opsFlags); nil: false

	plane *natsPlane // running components, set by newRouter and start
}

// addNATSFlags registers the scale-out flags on fs.
func addNATSFlags(fs *flag.FlagSet) *natsFlags {
	n := &natsFlags{}
	n.eventPlane = fs.String("event-plane", envOr("DYN_EVENT_PLANE", "zmq"), "where KV events come from: zmq (each worker's socket) or nats (kv-events.<id> subjects fed by kvroute relay)")
	n.url = fs.String("nats-url", envOr("NATS_SERVER", "nats://localhost:4222"), "NATS server URL(s), comma-separated")
	n.embedded = fs.Bool("nats-embedded", false, "start an in-process single-node NATS server with JetStream and use it")
	n.embedPort = fs.Int("nats-embedded-port", 4222, "client port of the embedded NATS server (0: a free port)")
	n.storeDir = fs.String("nats-store-dir", "", "JetStream store of the embedded server (default: a temporary directory)")
	n.durable = fs.Bool("durable-kv-events", false, "read KV events from the JetStream stream KV_EVENTS (with snapshots) instead of core NATS")
	fs.BoolVar(n.durable, "router-durable-kv-events", false, "alias of --durable-kv-events (Dynamo's name)")
	n.snapshot = fs.Int("router-snapshot-threshold", 1_000_000, "durable mode: dump the index to the object store after this many stream messages (0: never)")
	n.replicas = fs.Int("nats-replicas", 1, "replicas of the JetStream stream, object store and discovery bucket (3 on a 3-node cluster)")
	n.discovery = fs.String("discovery", "static", "worker discovery: static (--worker flags) or nats (the kvroute-workers key-value bucket)")
	n.discoveryTT = fs.Duration("discovery-ttl", 10*time.Second, "nats discovery: a worker leaves after this long without a heartbeat")
	n.routerID = fs.String("router-id", "", "this router's id: the router_id label of its overhead metrics (default kvroute) and its name in replica sync (default: random)")
	return n
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// natsPlane is what newRouter and start started, stopped in reverse order.
type natsPlane struct {
	url       string
	replicaOn bool
	watcher   *natsplane.Watcher // --discovery nats
	srv       *server.Server
	tempStore string // the embedded server's store made here (no --nats-store-dir), removed at stop
	nc        *nats.Conn
	src       *natsplane.Source
	replica   *natsplane.ReplicaSync
	cancel    context.CancelFunc
	done      chan struct{}
}

// needsNATS reports whether any flag asks for NATS.
func (n *natsFlags) needsNATS(rcfg *router.Config) bool {
	return *n.eventPlane == "nats" || *n.discovery == "nats" || rcfg.Scoring.ReplicaSync || *n.embedded
}

// newRouter is router.New for the first model's core, connected to NATS when a flag asks for it (with
// replica sync, the core's load changes are published). The planes start with start, once every core
// exists.
func (n *natsFlags) newRouter(system *actor.ActorSystem, rcfg router.Config, log *slog.Logger) (*router.Router, error) {
	if *n.routerID != "" {
		rcfg.RouterID = *n.routerID // the router_id label of the overhead histograms
	}
	if !n.needsNATS(&rcfg) {
		return router.New(system, rcfg)
	}
	if err := n.validate(); err != nil {
		return nil, err
	}
	p := &natsPlane{replicaOn: rcfg.Scoring.ReplicaSync}
	n.plane = p
	url, err := n.connect(p, log)
	if err != nil {
		return nil, err
	}
	p.url = url
	if rcfg.Scoring.ReplicaSync {
		p.replica = natsplane.NewReplicaSync(p.nc, natsplane.ReplicaConfig{RouterID: *n.routerID})
		rcfg.OnLoad = p.replica.Observe
	}
	r, err := router.New(system, rcfg)
	if err != nil {
		n.stop()
		return nil, err
	}
	return r, nil
}

// loadObserver is what every router core reports its load changes to: replica sync's publisher when
// newRouter started it, else nil.
func (n *natsFlags) loadObserver() func(router.LoadEvent) {
	if n.plane == nil || n.plane.replica == nil {
		return nil
	}
	return n.plane.replica.Observe
}

// on reports whether newRouter connected the NATS planes: start then registers the --worker flags.
func (n *natsFlags) on() bool { return n.plane != nil }

// start runs the NATS planes over every model's cores (c.rs[0] is newRouter's): it registers each
// model's --worker flags (workers[i]; their ZMQ endpoints stripped when events come over NATS) and the
// workers discovery finds, each with its model's core for its role, before the event source subscribes;
// then replica sync, whose remote load changes each go to the core holding their worker. Nothing to do
// when the planes are off.
func (n *natsFlags) start(c *cores, workers []workerFlags, log *slog.Logger) error {
	p := n.plane
	if p == nil {
		return nil
	}
	c.strip, c.log = *n.eventPlane == "nats", log
	for i, ws := range workers {
		for _, w := range ws {
			if err := c.addTo(i, w); err != nil {
				return err
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	// Discovery first: the workers already registered are added before the event source subscribes, so
	// their events (the durable stream from its start) find their mirrors.
	var w *natsplane.Watcher
	if *n.discovery == "nats" {
		w = natsplane.NewWatcher(p.nc, c, natsplane.DiscoveryConfig{TTL: *n.discoveryTT, Replicas: *n.replicas})
		p.watcher = w
	}
	discoveryWatch.Go(func() {
		defer close(p.done)
		if w == nil {
			return
		}
		if err := w.Run(ctx); err != nil {
			log.Error("nats discovery stopped", "err", err)
		}
	})
	if w != nil {
		select {
		case <-w.Ready():
		case <-time.After(30 * time.Second):
			return errors.New("nats discovery: the workers bucket did not answer within 30s")
		}
	}
	if *n.eventPlane == "nats" {
		if err := n.startEventSource(ctx, p, c.fleet(), w); err != nil {
			return err
		}
	}
	if p.replica != nil {
		if err := p.replica.Start(c); err != nil {
			return err
		}
	}
	log.Info("nats planes", "url", p.url, "event_plane", *n.eventPlane, "durable", *n.durable, "replica_sync", p.replicaOn,
		"discovery", *n.discovery, "models", len(c.rs))
	return nil
}

// startEventSource subscribes the cores' fleet to the workers' KV events on NATS (--event-plane nats),
// after discovery (w, when on) has added the workers already registered.
func (n *natsFlags) startEventSource(ctx context.Context, p *natsPlane, fl natsplane.Fleet, w *natsplane.Watcher) error {
	scfg := natsplane.DefaultSourceConfig()
	scfg.Durable, scfg.Replicas = *n.durable, *n.replicas
	if *n.durable {
		scfg.SnapshotThreshold = *n.snapshot
	}
	var err error
	// The package sits below the actors: the cores' fleets and indexes are wired into its interfaces (cores.fleet).
	if p.src, err = natsplane.NewSource(p.nc, fl, scfg); err != nil {
		return err
	}
	if w != nil {
		w.SetOnRemove(p.src.Forget)
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	return p.src.Start(sctx)
}

// validate refuses plane flags that name no plane.
func (n *natsFlags) validate() error {
	switch {
	case *n.eventPlane != "zmq" && *n.eventPlane != "nats":
		return fmt.Errorf("--event-plane %q: want zmq or nats", *n.eventPlane)
	case *n.discovery != "static" && *n.discovery != "nats":
		return fmt.Errorf("--discovery %q: want static or nats", *n.discovery)
	case *n.durable && *n.eventPlane != "nats":
		return errors.New("--durable-kv-events needs --event-plane nats")
	}
	return nil
}

// connect starts the embedded NATS server when asked, connects to the server (p.nc) and resets the
// durable state with --router-reset-states; it returns the URL connected to.
func (n *natsFlags) connect(p *natsPlane, log *slog.Logger) (string, error) {
	url := *n.url
	if *n.embedded {
		dir := *n.storeDir
		if dir == "" {
			d, err := os.MkdirTemp("", "kvroute-nats-")
			if err != nil {
				return "", err
			}
			dir = d
		}
		port := *n.embedPort
		if port == 0 {
			port = -1
		}
		srv, err := natsplane.StartServer(natsplane.ServerConfig{Port: port, StoreDir: dir})
		if err != nil {
			if *n.storeDir == "" {
				_ = os.RemoveAll(dir)
			}
			return "", err
		}
		p.srv, url = srv, srv.ClientURL()
		if *n.storeDir == "" {
			p.tempStore = dir
		}
		log.Info("embedded NATS server", "url", url, "store", dir)
	}
	nc, err := nats.Connect(url, nats.Name("kvroute-frontend"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		n.stop()
		return "", fmt.Errorf("--nats-url %s: %w", url, err)
	}
	p.nc = nc
	if n.reset != nil && *n.reset {
		if !*n.durable {
			log.Info("--router-reset-states: nothing to reset without --router-durable-kv-events (no stream or snapshot is kept)")
		} else if err := resetStates(nc, log); err != nil {
			n.stop()
			return "", err
		}
	}
	return url, nil
}

// stop stops the planes (before the router stops); safe when nothing was started.
func (n *natsFlags) stop() {
	p := n.plane
	if p == nil {
		return
	}
	n.plane = nil
	if p.cancel != nil {
		p.cancel()
		<-p.done
	}
	if p.src != nil {
		p.src.Stop()
	}
	if p.replica != nil {
		p.replica.Stop()
	}
	if p.nc != nil {
		p.nc.Close()
	}
	if p.srv != nil {
		p.srv.Shutdown()
		p.srv.WaitForShutdown()
	}
	if p.tempStore != "" {
		_ = os.RemoveAll(p.tempStore) // a temporary store is this process's alone
	}
}

// resetStates is --router-reset-states: it purges the durable event stream and deletes the index
// snapshot, so this router (and any replica started after it) begins from an empty index.
func resetStates(nc *nats.Conn, log *slog.Logger) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	purged := uint64(0)
	if st, err := js.Stream(ctx, natsplane.EventStream); err == nil {
		info, _ := st.Info(ctx)
		if err := st.Purge(ctx); err != nil {
			return fmt.Errorf("--router-reset-states: purge %s: %w", natsplane.EventStream, err)
		}
		if info != nil {
			purged = info.State.Msgs
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("--router-reset-states: stream %s: %w", natsplane.EventStream, err)
	}
	if err := js.DeleteObjectStore(ctx, natsplane.SnapshotBucket); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) &&
		!errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("--router-reset-states: delete %s: %w", natsplane.SnapshotBucket, err)
	}
	log.Warn("--router-reset-states: event stream purged and index snapshot deleted", "purged_messages", purged)
	return nil
}
