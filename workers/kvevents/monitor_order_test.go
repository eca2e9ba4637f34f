package kvevents

import (
	"context"
	"testing"
	"time"
)

// TestConnectPrecedesItsMessages: the catch-up of a connection runs before any message the connection
// carries, even when the reader finds the SUB socket readable before the monitor's helper has woken it
// (here it never does). A new engine's batch read ahead of the catch-up that detects the restart is taken
// by its seq alone, and when that seq is our last+1 it is applied on top of the old engine's blocks.
func TestConnectPrecedesItsMessages(t *testing.T) {
	p, _ := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:*"})
	pubCtx, stopPub := context.WithCancel(context.Background())
	published := make(chan struct{})
	go func() {
		defer close(published)
		for id := uint64(1); pubCtx.Err() == nil; id++ {
			if err := p.Publish(pubCtx, testBatch(id)); err != nil {
				return
			}
			time.Sleep(time.Millisecond) // a stream of batches, not a synchronization
		}
	}()
	defer func() { stopPub(); <-published }()

	sub, err := newSub(1000, 10*time.Millisecond, 100*time.Millisecond, "")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	mon, stopMonitor, err := monitorConnects(sub, false)
	if err != nil {
		t.Fatal(err)
	}
	defer stopMonitor()
	if err := sub.Connect(p.Addr()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var order []string
	var c Counters
	_, err = readLoop(ctx, sub, 10*time.Millisecond, &c, func(_ []byte, _ uint64, _ []byte, _ int) {
		order = append(order, "message")
		if len(order) >= 5 {
			cancel()
		}
	}, loopHooks{mon: mon, onConnect: func() { order = append(order, "connect") }, waitIgnoresMonitor: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(order) < 5 || order[0] != "connect" {
		t.Fatalf("events in order %v, want the connect before the connection's first message", order)
	}
}
