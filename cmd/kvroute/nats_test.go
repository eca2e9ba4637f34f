package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/frontend"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/natsplane"
	"github.com/kvroute/kvroute/workers/registry"
)

// TestNATSFlagsNewRouter: --nats-embedded --event-plane nats --router-replica-sync --discovery nats
// builds a router whose static workers get their events over NATS from relays, and workers registered in
// the bucket appear; a prefill worker, static or discovered, joins the prefill core and its events reach
// that core's index, not the decode core's.
func TestNATSFlagsNewRouter(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	n := addNATSFlags(fs)
	if err := fs.Parse([]string{"--nats-embedded", "--nats-embedded-port", "0", "--nats-store-dir", t.TempDir(),
		"--event-plane", "nats", "--discovery", "nats", "--discovery-ttl", "2s"}); err != nil {
		t.Fatal(err)
	}
	rcfg := router.DefaultConfig(16)
	rcfg.TickInterval = -1
	rcfg.Scoring.ReplicaSync = true
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	system := actor.NewActorSystem()
	r, err := n.newRouter(system, rcfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	defer n.stop()
	pcfg := rcfg
	pcfg.Scoring, pcfg.Registerer = frontend.PrefillConfig(rcfg.Scoring), nil
	pr, err := router.New(system, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Stop()
	pd, err := frontend.NewDisagg(pr, frontend.DefaultDisaggConfig())
	if err != nil {
		t.Fatal(err)
	}
	workers := []workerFlags{{{ID: 1, URL: "http://127.0.0.1:1", Events: "tcp://127.0.0.1:1"},
		{ID: 3, URL: "http://127.0.0.1:3", Events: "tcp://127.0.0.1:3", Role: registry.RolePrefill}}}
	if err := n.start(&cores{names: []string{"m"}, rs: []*router.Router{r}, pds: []*frontend.Disagg{pd}}, workers, log); err != nil {
		t.Fatal(err)
	}
	if len(r.Workers()) != 1 || r.Workers()[0].Events != "" || len(pr.Workers()) != 1 || pr.Workers()[0].ID != 3 {
		t.Fatalf("static workers: decode core %+v, prefill core %+v", r.Workers(), pr.Workers())
	}
	url := n.plane.srv.ClientURL()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Worker 1 (decode) stores block 99, worker 3 (prefill) block 77, each through its own relay.
	for _, w := range []struct {
		id    uint64
		block uint64
	}{{1, 99}, {3, 77}} {
		dir := t.TempDir()
		pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "ipc://" + filepath.Join(dir, "ev"), ReplayEndpoint: "ipc://" + filepath.Join(dir, "rp")})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = pub.Run(ctx) }()
		<-pub.Ready()
		rl, err := natsplane.NewRelay(nc, natsplane.RelayConfig{WorkerID: w.id, Events: []string{pub.Addr()}, Replay: []string{pub.ReplayAddr()}})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = rl.Run(ctx) }()
		toks := make([]uint32, 16)
		if err := pub.Publish(ctx, &kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.Stored, BlockHashes: []uint64{w.block}, TokenIDs: toks, BlockSize: 16}}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, spec := range []registry.Spec{{ID: 2, URL: "http://127.0.0.1:2"}, {ID: 4, URL: "http://127.0.0.1:4", Role: registry.RolePrefill}} {
		go func() {
			_ = natsplane.Register(ctx, nc, spec, natsplane.DiscoveryConfig{TTL: 2 * time.Second}, true)
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st1, _ := r.Fleet.StatusOf(1)
		st3, _ := pr.Fleet.StatusOf(3)
		if st1.IndexedBlocks == 1 && st3.IndexedBlocks == 1 && len(r.Workers()) == 2 && len(pr.Workers()) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker 1 %+v, worker 3 %+v, decode core %d workers, prefill core %d", st1, st3, len(r.Workers()), len(pr.Workers()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := pr.Fleet.StatusOf(4); !ok {
		t.Fatal("the discovered prefill worker 4 is not in the prefill core")
	}
}

// registerInBucket registers specs in the discovery bucket of the NATS server at url, each kept alive by
// its own heartbeat until the test ends.
func registerInBucket(t *testing.T, url string, specs ...registry.Spec) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); nc.Close() })
	for _, spec := range specs {
		go func() {
			_ = natsplane.Register(ctx, nc, spec, natsplane.DiscoveryConfig{TTL: 2 * time.Second}, true)
		}()
	}
}

// TestNATSDiscoveryTwoModels: a frontend serving two models with the NATS planes: a worker registered in
// the discovery bucket joins the core of the model its spec names, by its role; one naming a model not
// served here joins none.
func TestNATSDiscoveryTwoModels(t *testing.T) {
	args := append(twoModelArgs(t), "--no-worker-self-test", "--health-check-interval", "0", "--nats-embedded",
		"--nats-embedded-port", "0", "--nats-store-dir", t.TempDir(), "--discovery", "nats", "--event-plane", "nats")
	app := launchFrontend(t, args)
	registerInBucket(t, app.nats.plane.srv.ClientURL(), registry.Spec{ID: 5, URL: "http://127.0.0.1:5", Model: "llama"},
		registry.Spec{ID: 6, URL: "http://127.0.0.1:6", Model: "llama", Role: registry.RolePrefill},
		registry.Spec{ID: 7, URL: "http://127.0.0.1:7", Model: "qwen"}, registry.Spec{ID: 8, URL: "http://127.0.0.1:8", Model: "mistral"})
	llama, llamaPrefill, qwen := app.routers[1], app.pds[1].Prefill, app.routers[0]
	waitUntil(t, "the discovered workers in their models' cores, and mistral's refused", func() bool {
		_, a := llama.Fleet.StatusOf(5)
		_, b := llamaPrefill.Fleet.StatusOf(6)
		_, c := qwen.Fleet.StatusOf(7)
		return a && b && c && app.nats.plane.watcher.Stats().Errors > 0
	})
	if len(llama.Workers()) != 1 || len(llamaPrefill.Workers()) != 1 || len(qwen.Workers()) != 1 || len(app.pds[0].Prefill.Workers()) != 0 {
		t.Fatalf("llama %d (+%d prefill), qwen %d (+%d prefill) workers", len(llama.Workers()), len(llamaPrefill.Workers()),
			len(qwen.Workers()), len(app.pds[0].Prefill.Workers()))
	}
}

// TestReplicaSyncTwoModels: two frontends serving the same two models share load with
// --router-replica-sync over one NATS: a request routed by one replica to a worker of the second model is
// charged on the other replica's core of that model, a request it routes to a prefill worker on that
// model's prefill core (and not on the decode core, though the decode hop may use the same id), and
// their frees release both.
func TestReplicaSyncTwoModels(t *testing.T) {
	common := append(twoModelArgs(t), "--no-worker-self-test", "--health-check-interval", "0", "--discovery", "nats",
		"--router-replica-sync")
	a := launchFrontend(t, append(append([]string(nil), common...), "--nats-embedded", "--nats-embedded-port", "0",
		"--nats-store-dir", t.TempDir(), "--router-id", "a"))
	url := a.nats.plane.srv.ClientURL()
	b := launchFrontend(t, append(append([]string(nil), common...), "--nats-url", url, "--router-id", "b"))
	registerInBucket(t, url, registry.Spec{ID: 5, URL: "http://127.0.0.1:5", Model: "llama"},
		registry.Spec{ID: 6, URL: "http://127.0.0.1:6", Model: "llama", Role: registry.RolePrefill},
		registry.Spec{ID: 7, URL: "http://127.0.0.1:7", Model: "qwen"})
	ctx := context.Background()
	known := func(app *frontendApp) bool {
		_, l := app.routers[1].Fleet.StatusOf(5)
		_, p := app.pds[1].Prefill.Fleet.StatusOf(6)
		_, q := app.routers[0].Fleet.StatusOf(7)
		return l && p && q
	}
	waitUntil(t, "both replicas know the discovered workers", func() bool { return known(a) && known(b) })
	// active is the number of requests core r of a replica has charged on worker id.
	active := func(r *router.Router, id uint64) int {
		for _, l := range r.Loads() {
			if l.Worker.WorkerID == id {
				return l.Load.ActiveRequests
			}
		}
		return -1
	}
	toks := make([]uint32, 64)
	for i := range toks {
		toks[i] = uint32(i + 1)
	}
	if _, err := a.routers[1].Route(ctx, &router.RouteRequest{ID: "req-1", Tokens: toks}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.pds[1].Prefill.Route(ctx, &router.RouteRequest{ID: "req-1", Tokens: toks}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "replica b charges both hops on llama's cores", func() bool {
		return active(b.routers[1], 5) == 1 && active(b.pds[1].Prefill, 6) == 1
	})
	if n := active(b.routers[0], 7); n != 0 {
		t.Fatalf("qwen's worker 7 on replica b has %d active requests, want 0", n)
	}
	if err := a.pds[1].Prefill.Free("req-1"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "replica b frees the prefill hop only", func() bool { return active(b.pds[1].Prefill, 6) == 0 })
	if n := active(b.routers[1], 5); n != 1 {
		t.Fatalf("the decode hop on replica b: %d active requests after the prefill hop's free, want 1", n)
	}
	if err := a.routers[1].Free("req-1"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "replica b frees the decode hop", func() bool { return active(b.routers[1], 5) == 0 })
	// The planes' counters are on /metrics: replica b applied a's two Adds and two Frees and discovered
	// the three workers.
	resp, err := http.Get("http://" + b.ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for name, want := range map[string]string{"kvroute_replica_events_applied_total": "4", "kvroute_nats_discovery_added_total": "3"} {
		if !strings.Contains(string(page), "\n"+name+" "+want+"\n") {
			t.Errorf("/metrics has no %s %s", name, want)
		}
	}
}

// TestNATSEmbeddedTempStore: --nats-embedded without --nats-store-dir keeps JetStream in a temporary
// directory of its own, removed when the planes stop (it was left behind at every exit).
func TestNATSEmbeddedTempStore(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	n := addNATSFlags(fs)
	if err := fs.Parse([]string{"--nats-embedded", "--nats-embedded-port", "0"}); err != nil {
		t.Fatal(err)
	}
	p := &natsPlane{}
	n.plane = p
	if _, err := n.connect(p, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	made, err := filepath.Glob(filepath.Join(tmp, "kvroute-nats-*"))
	if err != nil || len(made) != 1 || p.tempStore != made[0] {
		t.Fatalf("temporary stores %v (%v), the plane's %q", made, err, p.tempStore)
	}
	n.stop()
	if _, err := os.Stat(made[0]); !os.IsNotExist(err) {
		t.Fatalf("the temporary store is still there after stop: %v", err)
	}
}
