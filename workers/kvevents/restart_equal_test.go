package kvevents

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvroute/kvroute/internal/testutil"
)

// rawPub is a PUB socket the test drives frame by frame: any topic, any sequence number.
type rawPub struct {
	t    *testing.T
	sock *zmq.Socket
}

func newRawPub(t *testing.T, endpoint string) *rawPub {
	t.Helper()
	s, err := zmq.NewSocket(zmq.PUB)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.SetLinger(0)
	if err := s.Connect(endpoint); err != nil {
		t.Fatal(err)
	}
	p := &rawPub{t: t, sock: s}
	t.Cleanup(p.close)
	return p
}

func (p *rawPub) close() {
	if p.sock != nil {
		p.sock.Close()
		p.sock = nil
	}
}

func (p *rawPub) send(topic string, seq uint64, payload []byte) {
	p.t.Helper()
	var s8 [8]byte
	binary.BigEndian.PutUint64(s8[:], seq)
	if _, err := p.sock.SendMessage(topic, s8[:], payload); err != nil {
		p.t.Fatal(err)
	}
}

// warmUp sends on an unregistered topic until the subscriber counts one, so the connection is through
// ZMQ's slow-joiner window and the next message is delivered.
func (p *rawPub) warmUp(s *BindSubscriber) {
	p.t.Helper()
	before := s.Stats().UnknownTopics
	deadline := time.Now().Add(testTimeout)
	for s.Stats().UnknownTopics == before {
		if time.Now().After(deadline) {
			p.t.Fatal("publisher never got through")
		}
		p.send("warm-up", 0, nil)
		time.Sleep(2 * time.Millisecond)
	}
}

// TestEqualSequenceRestart: a publisher that sent one batch (seq 0) restarts and sends seq 0 again. The
// sequence alone calls that a duplicate; the payload under the seq differs, so it is a new engine: the
// worker is reset and the new batch delivered. The same batch sent twice stays a duplicate, counted.
func TestEqualSequenceRestart(t *testing.T) {
	var col collector
	s := startBindSubscriber(t, 0, col.bindHandler())
	const topic = "kv@w1"
	s.AddTopic(topic, "")

	a := newRawPub(t, s.Addr())
	a.warmUp(s)
	a.send(topic, 0, AppendBatch(nil, testBatch(100), LayoutMap))
	testutil.Within(t, testTimeout, "the first engine's batch", func() bool { return col.count() == 1 })
	a.close()

	b := newRawPub(t, s.Addr())
	b.warmUp(s)
	second := AppendBatch(nil, testBatch(200), LayoutMap)
	b.send(topic, 0, second)
	testutil.Within(t, testTimeout, "the restarted engine's batch", func() bool { return col.count() == 2 })
	b.send(topic, 0, second) // a duplicate, truly
	b.send(topic, 1, AppendBatch(nil, testBatch(201), LayoutMap))
	testutil.Within(t, testTimeout, "the batch after the duplicate", func() bool { return col.count() == 3 })

	seqs, ids, resets := col.snapshot()
	if len(resets) != 1 || resets[0] != 1 {
		t.Fatalf("resets at %v, want one before the second batch", resets)
	}
	if ids[0] != 100 || ids[1] != 200 || ids[2] != 201 || seqs[1] != 0 {
		t.Fatalf("delivered seqs %v ids %v", seqs, ids)
	}
	if st := s.Stats(); st.Duplicates != 1 || st.Resets != 1 {
		t.Fatalf("stats %+v: want 1 duplicate, 1 reset", st)
	}
}

// TestBindReconnectVerifiesIdentity: in bind mode with replay, a restarted engine whose first batch to
// arrive is last+1 (its seq 0 lost to the slow-joiner window) looks in order by sequence. Its connection
// makes the stream verify the publisher against its replay ring first: the restart is found, the worker
// reset, and the new engine replayed from 0.
func TestBindReconnectVerifiesIdentity(t *testing.T) {
	var col collector
	s := startBindSubscriber(t, time.Second, col.bindHandler())
	const topic = "kv@w1"
	p1, stop1 := startPublisher(t, PublisherConfig{Endpoint: s.Addr(), ReplayEndpoint: "tcp://127.0.0.1:*", Topic: topic})
	replay := p1.ReplayAddr()
	s.AddTopic(topic, replay)
	pump(t, p1, 0, 100, "the first engine's batches", func() bool { return col.count() >= 1 })
	testutil.Within(t, testTimeout, "every batch published", func() bool { return uint64(col.count()) == p1.Stats().Published })
	n := col.count()
	stop1()

	// The new engine's batches 0..n-1 are in its replay ring but never sent (lost to the slow-joiner
	// window): the first to arrive carries seq n, the old engine's last+1.
	p2, _ := startPublisher(t, PublisherConfig{Endpoint: s.Addr(), ReplayEndpoint: replay, Topic: topic,
		SkipSend: func(seq uint64) bool { return seq < uint64(n) }})
	pump(t, p2, 0, 1<<20, "reset and the new engine's batches", func() bool {
		seqs, _, resets := col.snapshot()
		return len(resets) == 1 && len(seqs) >= resets[0]+n+3
	})
	seqs, ids, resets := col.snapshot()
	if resets[0] != n {
		t.Fatalf("reset after %d deliveries, want %d", resets[0], n)
	}
	checkContiguous(t, seqs[resets[0]:], ids[resets[0]:], 0, 1<<20)
}

// TestBindVerifiesOnlyTheReconnected: in bind mode each message names the connection it came on, so
// when one engine restarts (a new connection) its stream alone verifies its publisher: the restart is
// found (its first batch to arrive is last+1, which only the check can tell from the old engine's) and
// the worker reset, while the other workers' streams, on connections of their own that did not change,
// ask their publishers nothing. (Before, every connect made every stream with a replay endpoint ask, one
// round trip each on the socket's goroutine.)
func TestBindVerifiesOnlyTheReconnected(t *testing.T) {
	s := startBindSubscriber(t, time.Second, BindHandler{})
	topics := []string{"kv@a", "kv@b", "kv@c"}
	pubs := make([]*Publisher, len(topics))
	var stopA context.CancelFunc
	for i, topic := range topics {
		p, stop := startPublisher(t, PublisherConfig{Endpoint: s.Addr(), ReplayEndpoint: "tcp://127.0.0.1:*", Topic: topic})
		s.AddTopic(topic, p.ReplayAddr())
		pubs[i] = p
		if i == 0 {
			stopA = stop
		}
	}
	next := make([]uint64, len(topics))
	for i, p := range pubs {
		next[i] = pump(t, p, 0, 0, topics[i]+"'s first batches", func() bool { return s.TopicStats(topics[i]).Batches >= 3 })
	}
	for i, p := range pubs { // every batch in: no stream is left with a gap to fill
		testutil.Within(t, testTimeout, topics[i]+"'s batches", func() bool { return s.TopicStats(topics[i]).Batches == p.Stats().Published })
	}
	replays := func(i int) uint64 { return s.TopicStats(topics[i]).Replays }
	b0, c0 := replays(1), replays(2)

	n := s.TopicStats(topics[0]).Batches
	stopA()
	a2, _ := startPublisher(t, PublisherConfig{Endpoint: s.Addr(), ReplayEndpoint: pubs[0].ReplayAddr(), Topic: topics[0],
		SkipSend: func(seq uint64) bool { return seq < n }})
	pump(t, a2, 0, 1000, "the restart found", func() bool { return s.TopicStats(topics[0]).Resets == 1 })
	for i := 1; i < len(topics); i++ {
		before := s.TopicStats(topics[i]).Batches
		next[i] = pump(t, pubs[i], next[i], 0, topics[i]+"'s batches after the restart", func() bool {
			return s.TopicStats(topics[i]).Batches >= before+3
		})
	}
	if b, c := replays(1), replays(2); b != b0 || c != c0 {
		t.Fatalf("replays of the streams whose connections stayed: %d, %d (were %d, %d)", b, c, b0, c0)
	}
	if st := s.TopicStats(topics[0]); st.Replays == 0 || st.Resets != 1 {
		t.Fatalf("the restarted worker's stream: %+v", st)
	}
}

// TestBindObserve: a stream verifies its publisher when its message came on another connection than
// its last; on the same connection, not even after other publishers connected; and when the message
// names no connection, after any connect since the stream last looked.
func TestBindObserve(t *testing.T) {
	s, err := NewBindSubscriber(BindConfig{Endpoint: "tcp://127.0.0.1:*"}, BindHandler{})
	if err != nil {
		t.Fatal(err)
	}
	st := &stream{replayEndpoint: "tcp://127.0.0.1:1", conn: 1}
	s.connects = 5
	if s.observe(st, 1); st.verify {
		t.Fatal("the same connection, others connected: verified")
	}
	if s.observe(st, 2); !st.verify || st.conn != 2 {
		t.Fatalf("another connection: verify %v, conn %d", st.verify, st.conn)
	}
	st.verify = false
	if s.observe(st, 0); st.verify {
		t.Fatal("no connection named, no connect since: verified")
	}
	s.connects++
	if s.observe(st, 0); !st.verify {
		t.Fatal("no connection named, a connect since: not verified")
	}
	st.verify, st.replayDead = false, true
	if s.observe(st, 3); st.verify {
		t.Fatal("a dead replay endpoint: verified")
	}
}
