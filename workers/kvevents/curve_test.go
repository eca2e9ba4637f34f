package kvevents

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// runSub starts a subscriber and counts the batches it delivers.
func runSub(t *testing.T, cfg Config) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	s, err := NewSubscriber(cfg, Handler{OnBatch: func(uint64, *Batch) { n.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &n
}

func startCurvePublisher(t *testing.T, secret string) *Publisher {
	t.Helper()
	p, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:*", ReplayEndpoint: "tcp://127.0.0.1:*", CurveSecretKey: secret})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-p.Done() })
	select {
	case <-p.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("publisher not ready")
	}
	return p
}

func oneBatch() *Batch {
	return &Batch{HasDPRank: true, Events: []Event{{Kind: Stored, BlockHashes: []uint64{1}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4, Medium: "GPU"}}}
}

func TestCurveAuthenticatedStream(t *testing.T) {
	pub, sec, err := NewCurveKeypair()
	if err != nil {
		t.Fatal(err)
	}
	if derived, err := CurvePublicKey(sec); err != nil || derived != pub {
		t.Fatalf("public key from secret: %q %v", derived, err)
	}
	good := startCurvePublisher(t, sec)
	n := runSub(t, Config{Endpoint: good.Addr(), ReplayEndpoint: good.ReplayAddr(), CurveServerKey: pub})
	deadline := time.Now().Add(10 * time.Second)
	for n.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the authenticated subscriber got nothing")
		}
		_ = good.Publish(context.Background(), oneBatch())
		time.Sleep(20 * time.Millisecond)
	}
}

// A process that does not hold the worker's secret key — a publisher with another key pair, or a plain
// one — cannot get a single batch into a subscriber that expects the worker's public key.
func TestCurveRejectsRoguePublishers(t *testing.T) {
	workerPub, _, err := NewCurveKeypair()
	if err != nil {
		t.Fatal(err)
	}
	_, rogueSec, _ := NewCurveKeypair()
	for name, secret := range map[string]string{"other key": rogueSec, "plain": ""} {
		t.Run(name, func(t *testing.T) {
			rogue := startCurvePublisher(t, secret)
			n := runSub(t, Config{Endpoint: rogue.Addr(), ReplayEndpoint: rogue.ReplayAddr(), CurveServerKey: workerPub,
				ReplayTimeout: 200 * time.Millisecond})
			for end := time.Now().Add(time.Second); time.Now().Before(end); {
				_ = rogue.Publish(context.Background(), oneBatch())
				time.Sleep(20 * time.Millisecond)
			}
			if got := n.Load(); got != 0 {
				t.Fatalf("rogue publisher delivered %d batches", got)
			}
		})
	}
	if err := (Config{Endpoint: "tcp://127.0.0.1:1", CurveServerKey: "short"}).Validate(); err == nil {
		t.Fatal("a malformed key was accepted")
	}
}
