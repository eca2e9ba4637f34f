package faultproxy_test

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvroute/kvroute/workers/faultproxy"
	"github.com/kvroute/kvroute/workers/kvevents"
)

// TestProxyFaultsBySeqAndReplay publishes seqs 0..9 through the proxy with one explicit fault each on
// 1..5 and checks the order a subscriber sees, then replays through the pass-through.
func TestProxyFaultsBySeqAndReplay(t *testing.T) {
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:*", ReplayEndpoint: "tcp://127.0.0.1:*"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-pub.Done() }()
	go func() { _ = pub.Run(ctx) }()
	<-pub.Ready()
	px, err := faultproxy.Start(faultproxy.Config{Upstream: pub.Addr(), UpstreamReplay: pub.ReplayAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	sub, err := zmq.NewSocket(zmq.SUB)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	_ = sub.SetLinger(0)
	_ = sub.SetSubscribe("")
	_ = sub.SetRcvtimeo(20 * time.Millisecond)
	if err := sub.Connect(px.Addr()); err != nil {
		t.Fatal(err)
	}
	recv := func() (uint64, bool) {
		msg, err := sub.RecvMessageBytes(0)
		if err != nil || len(msg) != 3 {
			return 0, false
		}
		return binary.BigEndian.Uint64(msg[1]), true
	}
	// Both hops connected: probes (all faults off) until one comes through; they use seqs 0..k-1.
	var next uint64
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := pub.Publish(ctx, &kvevents.Batch{}); err != nil {
			t.Fatal(err)
		}
		next++
		if _, ok := recv(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing came through the proxy")
		}
	}
	for { // drain late probes
		if _, ok := recv(); !ok {
			break
		}
	}
	b := next // seqs b..b+9 carry the faults
	px.SetFaults(faultproxy.Faults{DelayFor: 300 * time.Millisecond, BySeq: map[uint64]faultproxy.Fault{
		b + 1: faultproxy.Drop, b + 2: faultproxy.Duplicate, b + 3: faultproxy.Reorder, b + 5: faultproxy.Delay,
	}})
	for range 10 {
		if err := pub.Publish(ctx, &kvevents.Batch{}); err != nil {
			t.Fatal(err)
		}
	}
	var got []uint64
	deadline = time.Now().Add(5 * time.Second)
	for len(got) < 10 && time.Now().Before(deadline) {
		if seq, ok := recv(); ok {
			got = append(got, seq-b)
		}
	}
	want := []uint64{0, 2, 2, 4, 3, 6, 7, 8, 9, 5}
	if !slices.Equal(got, want) {
		t.Fatalf("received %v (relative seqs), want %v; stats %+v", got, want, px.Stats())
	}

	// Replay through the pass-through: everything from b on, then the END marker.
	d, err := zmq.NewSocket(zmq.DEALER)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_ = d.SetLinger(0)
	_ = d.SetRcvtimeo(5 * time.Second)
	if err := d.Connect(px.ReplayAddr()); err != nil {
		t.Fatal(err)
	}
	var seq8 [8]byte
	binary.BigEndian.PutUint64(seq8[:], b)
	if _, err := d.SendMessage("", seq8[:]); err != nil {
		t.Fatal(err)
	}
	var replayed []uint64
	for {
		msg, err := d.RecvMessageBytes(0)
		if err != nil {
			t.Fatalf("replay: %v after %v", err, replayed)
		}
		if len(msg) != 3 || len(msg[0]) != 0 || len(msg[1]) != 8 {
			t.Fatalf("replay frame %q", msg)
		}
		s := binary.BigEndian.Uint64(msg[1])
		if s == ^uint64(0) {
			break
		}
		replayed = append(replayed, s-b)
	}
	if want := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(replayed, want) {
		t.Fatalf("replayed %v, want %v", replayed, want)
	}
}

// TestProxyCutDisconnects checks that a cut closes the PUB socket and binds the same address again.
func TestProxyCutRebinds(t *testing.T) {
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:*"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-pub.Done() }()
	go func() { _ = pub.Run(ctx) }()
	<-pub.Ready()
	px, err := faultproxy.Start(faultproxy.Config{Upstream: pub.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	sub, _ := zmq.NewSocket(zmq.SUB)
	defer sub.Close()
	_ = sub.SetLinger(0)
	_ = sub.SetSubscribe("")
	_ = sub.SetRcvtimeo(20 * time.Millisecond)
	_ = sub.Connect(px.Addr())
	through := func(d time.Duration) bool {
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			_ = pub.Publish(ctx, &kvevents.Batch{})
			if _, err := sub.RecvMessageBytes(0); err == nil {
				return true
			}
		}
		return false
	}
	if !through(5 * time.Second) {
		t.Fatal("nothing came through before the cut")
	}
	px.Cut(time.Hour)
	// Drain what was in flight, then nothing passes while cut.
	for through(100 * time.Millisecond) {
	}
	if through(300 * time.Millisecond) {
		t.Fatal("a batch passed during the cut")
	}
	px.Cut(0)
	if !through(5 * time.Second) {
		t.Fatalf("nothing came through after the cut: %+v", px.Stats())
	}
	if st := px.Stats(); st.Cuts != 1 || st.CutDropped == 0 {
		t.Fatalf("stats %+v", st)
	}
}
