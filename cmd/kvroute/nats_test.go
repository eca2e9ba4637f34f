package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/natsplane"
	"github.com/kvroute/kvroute/workers/registry"
)

// TestNATSFlagsNewRouter: --nats-embedded --event-plane nats --router-replica-sync --discovery nats
// builds a router whose static worker gets its events over NATS from a relay, and a worker registered in
// the bucket appears.
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
	workers := workerFlags{{ID: 1, URL: "http://127.0.0.1:1", Events: "tcp://127.0.0.1:1"}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := n.newRouter(actor.NewActorSystem(), rcfg, &workers, log)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	defer n.stop()
	if len(workers) != 0 || len(r.Workers()) != 1 || r.Workers()[0].Events != "" {
		t.Fatalf("static workers not taken over: %v, %+v", workers, r.Workers())
	}
	url := n.plane.srv.ClientURL()

	dir := t.TempDir()
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "ipc://" + filepath.Join(dir, "ev"), ReplayEndpoint: "ipc://" + filepath.Join(dir, "rp")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = pub.Run(ctx) }()
	<-pub.Ready()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rl, err := natsplane.NewRelay(nc, natsplane.RelayConfig{WorkerID: 1, Events: []string{pub.Addr()}, Replay: []string{pub.ReplayAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = rl.Run(ctx) }()
	go func() {
		_ = natsplane.Register(ctx, nc, registry.Spec{ID: 2, URL: "http://127.0.0.1:2"}, natsplane.DiscoveryConfig{TTL: 2 * time.Second}, true)
	}()
	toks := make([]uint32, 16)
	if err := pub.Publish(ctx, &kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.Stored, BlockHashes: []uint64{99}, TokenIDs: toks, BlockSize: 16}}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := r.Fleet.StatusOf(1)
		if st.IndexedBlocks == 1 && len(r.Workers()) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker 1 %+v, %d workers", st, len(r.Workers()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
