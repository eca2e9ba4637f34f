package kvevents

import (
	"context"
	"fmt"
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
	publishTimed(b, ctx, p, &src, &got)
	cancel()
	<-subDone
	<-p.Done()
}

// publishTimed publishes src until got counts a delivery (past ZMQ's slow-joiner window), then times
// b.N publishes until all are delivered and reports events/s (8 events a batch).
func publishTimed(b *testing.B, ctx context.Context, p *Publisher, src *Batch, got *atomic.Uint64) {
	b.Helper()
	for got.Load() == 0 {
		if err := p.Publish(ctx, src); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	start := got.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := p.Publish(ctx, src); err != nil {
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
}

// BenchmarkBindPubSub is BenchmarkPubSub in bind mode: the publisher connects to a BindSubscriber's
// bound SUB socket under a registered topic (no replay endpoint), so each message is also attributed to
// its topic's stream and its connection.
func BenchmarkBindPubSub(b *testing.B) {
	var src Batch
	if err := Decode(benchPayload(8, 4, 16, LayoutMap), &src); err != nil {
		b.Fatal(err)
	}
	var got atomic.Uint64
	s, err := NewBindSubscriber(BindConfig{Endpoint: "tcp://127.0.0.1:*", RcvHWM: 1 << 22, PollInterval: 10 * time.Millisecond},
		BindHandler{OnBatch: func(string, uint64, *Batch) { got.Add(1) }})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subDone := make(chan struct{})
	go func() { _ = s.Run(ctx); close(subDone) }()
	<-s.Ready()
	s.AddTopic("kv@bench", "")
	p, err := NewPublisher(PublisherConfig{Endpoint: s.Addr(), Topic: "kv@bench", HWM: 1 << 22, QueueSize: 4096})
	if err != nil {
		b.Fatal(err)
	}
	go p.Run(ctx)
	<-p.Ready()
	publishTimed(b, ctx, p, &src, &got)
	cancel()
	<-subDone
	<-p.Done()
}

// BenchmarkBindConnect: W workers publish to one BindSubscriber, each with a replay endpoint and a
// stream that has state. One op: another publisher connects (a worker joining or restarting), then every
// worker publishes one batch; the op ends when all W are delivered. replays/op counts the replay
// exchanges the connect caused on the socket's goroutine.
func BenchmarkBindConnect(b *testing.B) {
	for _, w := range []int{16, 128} {
		b.Run(fmt.Sprintf("W=%d", w), func(b *testing.B) { benchBindConnect(b, w) })
	}
}

func benchBindConnect(b *testing.B, w int) {
	var src Batch
	if err := Decode(benchPayload(8, 4, 16, LayoutMap), &src); err != nil {
		b.Fatal(err)
	}
	var got atomic.Uint64
	s, err := NewBindSubscriber(BindConfig{Endpoint: "tcp://127.0.0.1:*", PollInterval: 10 * time.Millisecond},
		BindHandler{OnBatch: func(string, uint64, *Batch) { got.Add(1) }})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Run(ctx) }()
	<-s.Ready()
	pubs := make([]*Publisher, w)
	for i := range pubs {
		topic := fmt.Sprintf("kv@w%d", i)
		p, err := NewPublisher(PublisherConfig{Endpoint: s.Addr(), ReplayEndpoint: "tcp://127.0.0.1:*", Topic: topic})
		if err != nil {
			b.Fatal(err)
		}
		go p.Run(ctx)
		<-p.Ready()
		s.AddTopic(topic, p.ReplayAddr())
		pubs[i] = p
	}
	// Every stream gets state: publish until each has delivered.
	for deadline := time.Now().Add(30 * time.Second); ; {
		done := 0
		for i, p := range pubs {
			if s.TopicStats(fmt.Sprintf("kv@w%d", i)).Batches > 0 {
				done++
				continue
			}
			if err := p.Publish(ctx, &src); err != nil {
				b.Fatal(err)
			}
		}
		if done == w {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d streams started", done, w)
		}
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the start-up's replays answered
	replays0 := s.Stats().Replays
	b.ResetTimer()
	for range b.N {
		connects := s.Stats().Connects // before the connection: it may be seen before Ready returns
		extra, err := NewPublisher(PublisherConfig{Endpoint: s.Addr(), Topic: "kv@joining"})
		if err != nil {
			b.Fatal(err)
		}
		ectx, ecancel := context.WithCancel(ctx)
		go extra.Run(ectx)
		<-extra.Ready()
		for deadline := time.Now().Add(10 * time.Second); s.Stats().Connects == connects; { // the monitor saw the handshake
			if time.Now().After(deadline) {
				b.Fatalf("no handshake seen: %+v", s.Stats())
			}
			if err := extra.Publish(ctx, &src); err != nil {
				b.Fatal(err)
			}
			time.Sleep(100 * time.Microsecond)
		}
		want := got.Load() + uint64(w)
		for _, p := range pubs {
			if err := p.Publish(ctx, &src); err != nil {
				b.Fatal(err)
			}
		}
		for deadline := time.Now().Add(30 * time.Second); got.Load() < want; {
			if time.Now().After(deadline) {
				b.Fatal("batches not delivered")
			}
			time.Sleep(20 * time.Microsecond)
		}
		ecancel()
		<-extra.Done()
	}
	b.StopTimer()
	b.ReportMetric(float64(s.Stats().Replays-replays0)/float64(b.N), "replays/op")
}
