package kvevents

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkPubSub: one op is one batch of E=8 BlockStored events × B=4 blocks of 16 tokens, encoded,
// published on a PUB socket, received over loopback TCP by a Subscriber, decoded and handed to a no-op
// handler. events/s is end-to-end throughput with both goroutines on the same 2 cores.
func BenchmarkPubSub(b *testing.B) {
	var src Batch
	if err := Decode(benchPayload(8, 4, 16, LayoutMap), &src); err != nil {
		b.Fatal(err)
	}
	p, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:*", HWM: 1 << 22, QueueSize: 4096})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	<-p.Ready()
	var got atomic.Uint64
	cfg := DefaultConfig()
	cfg.Endpoint, cfg.RcvHWM, cfg.PollInterval = p.Addr(), 1<<22, 10*time.Millisecond
	s, err := NewSubscriber(cfg, Handler{OnBatch: func(uint64, *Batch) { got.Add(1) }})
	if err != nil {
		b.Fatal(err)
	}
	subDone := make(chan struct{})
	go func() { s.Run(ctx); close(subDone) }()
	// Warm up past the slow-joiner window.
	for got.Load() == 0 {
		if err := p.Publish(ctx, &src); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	start := got.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := p.Publish(ctx, &src); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for got.Load()-start < uint64(b.N) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
	b.StopTimer()
	if n := got.Load() - start; n < uint64(b.N) {
		b.Fatalf("delivered %d of %d", n, b.N)
	}
	b.ReportMetric(float64(b.N*8)/b.Elapsed().Seconds(), "events/s")
	cancel()
	<-subDone
	<-p.Done()
}
