package natsplane

import (
	"context"

	"path/filepath"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/registry"
)

// benchBatch is batch i of the relay benchmark: E events, each storing one 16-token block under a fresh
// root and removing the block stored E events earlier, so the index stays small and every event costs a
// re-key and an index write at each frontend.
func benchBatch(b *kvevents.Batch, i, events int) {
	b.Reset()
	b.TS = float64(i)
	for e := 0; e < events; e++ {
		n := uint64(i*events + e + 1)
		if e%2 == 0 {
			toks := make([]uint32, testBlockSize)
			for j := range toks {
				toks[j] = uint32(n*31 + uint64(j))
			}
			b.Events = append(b.Events, kvevents.Event{Kind: kvevents.Stored, BlockHashes: []uint64{n}, TokenIDs: toks, BlockSize: testBlockSize})
		} else {
			b.Events = append(b.Events, kvevents.Event{Kind: kvevents.Removed, BlockHashes: []uint64{n - 1}})
		}
	}
}

// BenchmarkRelayToFrontends measures the event plane end to end: a vLLM-compatible ZMQ publisher, one
// relay, NATS, and 3 frontends (router cores) whose NATS sources decode, re-key and index every batch.
// One op is one batch of 8 events published by the engine and applied by all 3 frontends; events/s
// counts engine events (each applied 3 times).
func BenchmarkRelayToFrontends(b *testing.B) {
	const events, frontends = 8, 3
	modes := []struct {
		name    string
		nodes   int
		durable bool
	}{
		{"nodes=1/core", 1, false},
		{"nodes=1/durable", 1, true},
		{"nodes=3/core", 3, false},
		{"nodes=3/durable-R3", 3, true},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			var url string
			if m.nodes == 1 {
				s, err := StartServer(ServerConfig{StoreDir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(s.Shutdown)
				url = s.ClientURL()
			} else {
				url = startTestCluster(b).URL()
			}
			dir := b.TempDir()
			pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "ipc://" + filepath.Join(dir, "ev"),
				ReplayEndpoint: "ipc://" + filepath.Join(dir, "rp"), BufferSteps: 100_000})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			pdone := make(chan struct{})
			go func() { defer close(pdone); _ = pub.Run(ctx) }()
			b.Cleanup(func() { cancel(); <-pdone })
			<-pub.Ready()

			scfg := DefaultSourceConfig()
			scfg.Durable, scfg.Replicas = m.durable, m.nodes
			var fs []*frontend
			for i := 0; i < frontends; i++ {
				sys := actors.NewSystem(nil)
				cfg := router.DefaultConfig(testBlockSize)
				cfg.TickInterval = -1
				r, err := router.New(sys, cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(r.Stop)
				if err := r.AddWorker(registry.Spec{ID: 1, URL: "http://127.0.0.1:1", BlockSize: testBlockSize}); err != nil {
					b.Fatal(err)
				}
				src, err := NewSource(connect(b, url), fleetOf(r), scfg)
				if err != nil {
					b.Fatal(err)
				}
				sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
				if err := src.Start(sctx); err != nil {
					b.Fatal(err)
				}
				scancel()
				b.Cleanup(src.Stop)
				fs = append(fs, &frontend{r: r, src: src})
			}
			rl, err := NewRelay(connect(b, url), RelayConfig{WorkerID: 1, Events: []string{pub.Addr()}, Replay: []string{pub.ReplayAddr()},
				Durable: m.durable, Replicas: m.nodes})
			if err != nil {
				b.Fatal(err)
			}
			rctx, rcancel := context.WithCancel(context.Background())
			rdone := make(chan struct{})
			go func() { defer close(rdone); _ = rl.Run(rctx) }()
			b.Cleanup(func() { rcancel(); <-rdone })

			var batch kvevents.Batch
			i := 0
			publish := func() {
				benchBatch(&batch, i, events)
				i++
				if err := pub.Publish(ctx, &batch); err != nil {
					b.Fatal(err)
				}
			}
			waitAll := func(n uint64) {
				deadline := time.Now().Add(2 * time.Minute)
				for _, f := range fs {
					for f.src.Stats().Batches < n {
						if time.Now().After(deadline) {
							b.Fatalf("frontend stuck at %+v, want %d batches", f.src.Stats(), n)
						}
						time.Sleep(time.Millisecond)
					}
				}
			}
			publish() // warm up: the relay is subscribed and every frontend has the stream
			waitAll(1)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for n := 0; n < b.N; n++ {
				publish()
			}
			waitAll(uint64(b.N + 1))
			el := time.Since(start)
			b.StopTimer()
			for _, f := range fs {
				if st := f.src.Stats(); st.Gaps != 0 || st.BadMessages != 0 || st.Dropped != 0 {
					b.Fatalf("frontend %+v", st)
				}
			}
			b.ReportMetric(float64(b.N*events)/el.Seconds(), "events/s")
			b.ReportMetric(float64(b.N)/el.Seconds(), "batches/s")
		})
	}
}
