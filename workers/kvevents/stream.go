package kvevents

import (
	"context"
	"encoding/binary"
	"time"

	zmq "github.com/pebbe/zmq4"
	"github.com/zeebo/xxh3"
)

// endSeq is the replay END marker: (-1).to_bytes(8, "big", signed=True), sent with an empty payload.
const endSeq = ^uint64(0)

// stream is the state of one publisher as seen by a subscriber: sequence tracking, the reused decode
// batch, and the lazily opened DEALER replay socket. It is owned by the goroutine that reads the SUB
// socket: every method runs there, including the replay exchange, which blocks live reading (the SUB
// socket queues meanwhile, up to its HWM).
type stream struct {
	replayEndpoint string // "" disables replay
	curveServerKey string // the publisher's CURVE public key, "" for plain sockets
	replayTimeout  time.Duration
	poll           time.Duration

	tr      seqTracker
	batch   Batch
	c       *Counters
	onBatch func(seq uint64, b *Batch)
	onReset func()
	// discard, when set, reads and drops every message queued in the SUB socket and returns how many
	// (connect mode: the socket carries this stream only). Set per socket session.
	discard func() uint64

	dealer *zmq.Socket
	poller *zmq.Poller

	// lastDigest is the xxh3 of the payload of the last consumed seq: on a reconnect it tells whether the
	// publisher is still the engine we were following.
	lastDigest uint64
	// recent holds the digests of the last consumed seqs (slot seq % len): a live seq at or below last is
	// told apart by content, not by its number: the same payload is a duplicate (a late or replayed
	// batch), another payload under a seq we consumed is a new incarnation of the engine, even when its
	// sequence equals ours (it sent as many batches before as the old one had).
	recent [recentDigests]seqDigest
	// verify asks for the publisher's identity to be checked before the next live batch (bind mode: a
	// publisher connected, and it may be this stream's, restarted). replayDead is set while the last
	// replay exchange timed out: bind mode then skips the check (each would stall every worker's stream
	// sharing the socket for a replay timeout) until a replay of this stream is answered again.
	verify     bool
	replayDead bool
	// connects is the bind socket's count of connections when this stream last looked, and conn the
	// ordinal of the connection its last message came on (0: not known) (BindSubscriber).
	connects, conn uint64
	// join repeats the catch-up until a live message proves that the publisher has our subscription.
	join joinProbe
}

// recentDigests is how many consumed seqs keep their payload digest (16 bytes each).
const recentDigests = 64

type seqDigest struct {
	seq, digest uint64
	ok          bool
}

func (s *stream) remember(seq, digest uint64) {
	s.lastDigest = digest
	s.recent[seq%recentDigests] = seqDigest{seq: seq, digest: digest, ok: true}
}

// digestOf returns the digest of a consumed seq still remembered.
func (s *stream) digestOf(seq uint64) (uint64, bool) {
	r := s.recent[seq%recentDigests]
	return r.digest, r.ok && r.seq == seq
}

// handle processes one live message.
func (s *stream) handle(ctx context.Context, seq uint64, payload []byte) {
	if s.verify {
		s.verify = false
		if s.tr.have {
			s.catchUp(ctx)
		}
	}
	if s.tr.have && seq <= s.tr.last {
		if d, ok := s.digestOf(seq); ok {
			if d == xxh3.Hash(payload) {
				s.c.Duplicates.Add(1)
				return
			}
			// Another batch under a seq we consumed: the engine restarted. With replay, everything it
			// holds (this batch included) comes back from seq 0.
			if s.restartedLive(ctx) {
				return
			}
		}
	}
	if s.replayEndpoint != "" && s.tr.ambiguous(seq) && s.resolve(ctx, seq) {
		return
	}
	v, from, reset, gap := s.tr.onLive(seq)
	if reset {
		s.c.Resets.Add(1)
		if s.onReset != nil {
			s.onReset()
		}
	}
	switch v {
	case dropDuplicate:
		s.c.Duplicates.Add(1)
		return
	case replayFirst:
		if gap {
			s.c.Gaps.Add(1)
		}
		completed := s.replay(ctx, from)
		if !s.tr.afterReplay(seq) {
			s.c.Duplicates.Add(1)
			return
		}
		if completed {
			s.dropStale(seq)
			return
		}
	}
	s.deliver(seq, payload)
}

// dropStale drops a live batch that a replay asked for after it arrived does not hold. vLLM's publisher
// thread appends each batch to its replay ring right after sending it and serves replay requests between
// batches, so every batch of the engine we follow is in the ring before our request is
// read. A batch that is not comes from an earlier incarnation of the engine: sent before a restart and
// still queued in the SUB socket (a replay that waited out a dead engine holds up reading for seconds).
// Delivered by the sequence rules as "the batch after the gap" it would put the old engine's blocks on
// top of the new engine's, and the next batch of the new engine would then fail verification again: one
// reset and full replay per leftover batch.
func (s *stream) dropStale(seq uint64) {
	s.c.Stale.Add(1)
}

// resolve settles an ambiguous live seq (seqTracker.ambiguous) by asking the publisher, as catchUp does
// on a reconnect: it replays from our last seq and checks that the batch under it is still the one we
// consumed (payload digest).
//   - Still ours: the same engine. A gap is filled by the replay; a late batch (reordered or delayed on
//     the way) is a duplicate. The live sequence going backwards is not taken for a restart.
//   - Not ours (the answer ended without it): the engine restarted, possibly already past our last seq,
//     which the live sequence alone would take for a gap and fill with the new engine's batches on top of
//     the old engine's blocks. The worker is reset and replayed from 0.
//
// handled is false when the publisher did not answer: the sequence rules decide alone.
// resolveAttempts bounds the verification replays of one ambiguous sequence.
const resolveAttempts = 3

func (s *stream) resolve(ctx context.Context, seq uint64) (handled bool) {
	if seq > s.tr.last+1 {
		s.c.Gaps.Add(1)
	}
	// An unanswered verification is retried: giving up would let the sequence rules fill a "gap" with a
	// restarted engine's batches on top of the old engine's blocks, the one mistake that leaves stale
	// blocks behind. A lost request or answer is the usual cause; a dead replay socket costs
	// resolveAttempts × the replay timeout once.
	var completed, verified bool
	for attempt := 0; attempt < resolveAttempts && !completed && ctx.Err() == nil; attempt++ {
		completed, verified = s.replayVerify(ctx, s.tr.last)
	}
	reset := false
	switch {
	case verified:
	case completed:
		completed = s.restarted(ctx)
		reset = true
	default:
		return false
	}
	deliver := s.tr.afterReplay(seq)
	if reset {
		// Every live seq up to the new engine's last was just replayed, or belongs to the old engine.
		s.tr.afterCatchUp(0)
	}
	if !deliver {
		s.c.Duplicates.Add(1)
		return true
	}
	if completed {
		// The whole ring came back without seq: a leftover of the engine's previous incarnation.
		s.dropStale(seq)
		return true
	}
	// The replay was cut short: the sequence rules take the live batch from here.
	return false
}

// catchUp runs each time the SUB socket (re)connects. Batches published while no connection existed are
// lost to ZMQ (the slow-joiner window at start, the outage on a reconnect), and when the router starts
// after the worker they are the whole picture so far. With a replay endpoint:
//   - on a fresh stream it replays everything buffered from seq 0;
//   - otherwise it replays from the last consumed seq and checks that the publisher still holds the same
//     batch under that seq (payload digest). If it does, the outage is filled in. If not (the engine
//     restarted while we were away, possibly already past our last seq, or its buffer moved on) the
//     worker is reset and everything buffered is replayed from 0.
//
// Live messages the replay already covered are then dropped as duplicates.
func (s *stream) catchUp(ctx context.Context) {
	if s.replayEndpoint == "" {
		return
	}
	if s.tr.have {
		from := s.tr.last
		completed, verified := s.replayVerify(ctx, from)
		if verified || !completed {
			// Verified: the outage is filled in; live batches queued meanwhile from `from` on were just
			// replayed and are duplicates. Not completed (the replay socket is unreachable): keep what we
			// know and let the live stream's sequence checks decide.
			s.tr.afterCatchUp(from)
			return
		}
		s.restarted(ctx)
	} else {
		s.replay(ctx, 0)
	}
	s.tr.afterCatchUp(0)
}

// restarted handles an engine restart that the publisher confirmed (it no longer holds our last batch):
// the consumer drops the worker, the live batches still queued in the SUB socket are discarded, and the
// new engine is replayed from 0. completed is the replay's.
//
// The queue is discarded because it can still hold batches the old engine sent before it died (a
// replay that waited out the dead engine holds up reading for seconds meanwhile). Their seqs mean
// nothing to the new engine's stream: one that happened to equal the new engine's last+1 would be
// delivered as in order, on top of the new engine's blocks, and nothing would ever check it. Every batch
// of the new engine in the queue was published before our replay request and comes back with the
// replay; those that arrive after it are the new engine's.
func (s *stream) restarted(ctx context.Context) (completed bool) {
	s.tr = seqTracker{}
	s.recent = [recentDigests]seqDigest{}
	s.c.Resets.Add(1)
	if s.onReset != nil {
		s.onReset()
	}
	if s.discard != nil {
		n := s.discard()
		s.c.Discarded.Add(n)
	}
	return s.replay(ctx, 0)
}

// restartedLive handles a restart that a live batch proved (another payload under a seq we consumed).
// With replay it is restarted's; handled reports that the replay from 0 completed, which delivered the
// live batch too. Without replay (or with an unanswered one) the live batch goes on as the first of a
// fresh stream.
func (s *stream) restartedLive(ctx context.Context) (handled bool) {
	if s.replayEndpoint != "" {
		if s.restarted(ctx) {
			s.tr.afterCatchUp(0)
			return true
		}
		return false
	}
	s.tr = seqTracker{}
	s.recent = [recentDigests]seqDigest{}
	s.c.Resets.Add(1)
	if s.onReset != nil {
		s.onReset()
	}
	return false
}

// deliver decodes payload and hands it to the consumer. A malformed batch still consumes its seq, or it
// would be requested again forever.
func (s *stream) deliver(seq uint64, payload []byte) bool {
	s.remember(seq, xxh3.Hash(payload))
	lost := s.tr.commit(seq)
	if lost > 0 {
		s.c.Lost.Add(lost)
	}
	decode := Decode
	if IsTRTLLM(payload) { // TensorRT-LLM's JSON event list (trtllm.go); vLLM batches are msgpack arrays
		decode = decodeTRTLLMRouterBlocks
	}
	if err := decode(payload, &s.batch); err != nil {
		s.c.DecodeErrors.Add(1)
		return false
	}
	var partial int
	for i := range s.batch.Events {
		partial += PartialBlocks(&s.batch.Events[i])
	}
	s.c.Batches.Add(1)
	s.c.Events.Add(uint64(len(s.batch.Events)))
	if partial > 0 {
		s.c.PartialBlocks.Add(uint64(partial))
	}
	if s.batch.Skipped > 0 {
		s.c.SkippedEvents.Add(uint64(s.batch.Skipped))
	}
	if s.onBatch != nil {
		s.onBatch(seq, &s.batch)
	}
	return true
}

// replay asks the publisher's ROUTER for every buffered batch from seq from on, and delivers the new
// ones in order until the END marker. It gives up when the socket stays silent for replayTimeout; the
// DEALER is then closed so that late answers cannot be mistaken for the next replay's.
//
// An answer can arrive cut short: a ROUTER socket silently drops what exceeds its send HWM (vLLM's
// replay socket keeps ZMQ's default of 1000 messages, and a relay adds hops of its own), so a long
// replay loses a stretch in the middle, or its tail and the END marker. The ring is contiguous, so a
// stretch is seen as two answered seqs that do not follow each other, a lost tail as silence. Either way
// the rest is asked for again from the first missing seq, as long as each answer brings something new.
// completed reports that an answer was read whole to its END marker.
func (s *stream) replay(ctx context.Context, from uint64) (completed bool) {
	for {
		last, have := s.tr.last, s.tr.have
		var a answer
		completed = s.exchange(ctx, from, func(seq uint64, payload []byte) bool {
			return s.take(&a, seq, payload)
		})
		if completed && !a.cut {
			return true
		}
		if ctx.Err() != nil || (s.tr.last == last && s.tr.have == have) {
			return false // no progress: what was not delivered is lost
		}
		from = s.tr.next()
	}
}

// answer follows the seqs of one replay answer.
type answer struct {
	prev    uint64
	started bool
	// cut: two answered seqs did not follow each other; the rest of the answer was ignored.
	cut bool
}

// take delivers one answered batch if it is new. It returns false, marking the answer cut, when seq does
// not follow the previous answered one (the first may start later than asked: the ring wrapped).
func (s *stream) take(a *answer, seq uint64, payload []byte) bool {
	if a.started && seq != a.prev+1 {
		a.cut = true
		return false
	}
	a.started, a.prev = true, seq
	if s.tr.wantReplayed(seq) && s.deliver(seq, payload) {
		s.c.ReplayedBatches.Add(1)
	}
	return true
}

// replayVerify replays from seq last, which must come back first with the digest of the batch consumed
// under it; the batches after it are delivered (an answer cut short is completed by replay). completed
// reports that the publisher answered to the END marker; verified that it still holds our last batch.
func (s *stream) replayVerify(ctx context.Context, last uint64) (completed, verified bool) {
	first := true
	var a answer
	completed = s.exchange(ctx, last, func(seq uint64, payload []byte) bool {
		if first {
			first = false
			verified = seq == last && xxh3.Hash(payload) == s.lastDigest
			a.started, a.prev = true, seq
			return verified
		}
		return s.take(&a, seq, payload)
	})
	switch {
	case !verified && !first:
		completed = true // the answer was read to its END; it just was not ours
	case verified && (a.cut || !completed):
		completed = s.replay(ctx, s.tr.next())
	}
	return completed, verified
}

// exchange sends one replay request from seq from and hands each answer to fn until the END marker
// (returning true), fn returning false (the rest of the answer is drained), a timeout or an error
// (returning false).
func (s *stream) exchange(ctx context.Context, from uint64, fn func(seq uint64, payload []byte) bool) bool {
	if s.replayEndpoint == "" {
		return false
	}
	s.c.Replays.Add(1)
	if s.dealer == nil {
		if err := s.openDealer(); err != nil {
			s.c.ReplayTimeouts.Add(1)
			return false
		}
	}
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], from)
	// DONTWAIT: a DEALER with no usable peer would block the socket goroutine.
	if _, err := s.dealer.SendBytes(nil, zmq.SNDMORE|zmq.DONTWAIT); err != nil {
		s.c.ReplayTimeouts.Add(1)
		s.closeDealer()
		return false
	}
	if _, err := s.dealer.SendBytes(req[:], zmq.DONTWAIT); err != nil {
		s.c.ReplayTimeouts.Add(1)
		s.closeDealer()
		return false
	}
	deadline := time.Now().Add(s.replayTimeout)
	wanted := true
	for {
		if ctx.Err() != nil {
			s.closeDealer()
			return false
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			s.c.ReplayTimeouts.Add(1)
			s.replayDead = true
			s.closeDealer()
			return false
		}
		polled, err := s.poller.Poll(min(wait, s.poll))
		if err != nil {
			s.closeDealer()
			return false
		}
		if len(polled) == 0 {
			continue
		}
		msg, err := s.dealer.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			continue
		}
		deadline = time.Now().Add(s.replayTimeout)
		// ROUTER sent [identity, "", seq8, payload]; the DEALER sees [ "", seq8, payload ].
		if len(msg) != 3 || len(msg[0]) != 0 || len(msg[1]) != 8 {
			s.c.DecodeErrors.Add(1)
			continue
		}
		seq := binary.BigEndian.Uint64(msg[1])
		if seq == endSeq && len(msg[2]) == 0 {
			s.replayDead = false
			return wanted
		}
		if wanted {
			wanted = fn(seq, msg[2])
		}
	}
}

func (s *stream) openDealer() error {
	d, err := zmq.NewSocket(zmq.DEALER)
	if err != nil {
		return err
	}
	if err := d.SetLinger(0); err != nil {
		d.Close()
		return err
	}
	if err := curveClient(d, s.curveServerKey); err != nil {
		d.Close()
		return err
	}
	if err := d.Connect(s.replayEndpoint); err != nil {
		d.Close()
		return err
	}
	s.dealer = d
	s.poller = zmq.NewPoller()
	s.poller.Add(d, zmq.POLLIN)
	return nil
}

// closeDealer closes the replay socket; the next replay opens a fresh one.
func (s *stream) closeDealer() {
	if s.dealer != nil {
		s.dealer.Close()
		s.dealer, s.poller = nil, nil
	}
}

// splitMessage checks the 3-frame shape [topic, seq_be8, payload].
func splitMessage(msg [][]byte) (topic []byte, seq uint64, payload []byte, ok bool) {
	if len(msg) != 3 || len(msg[1]) != 8 {
		return nil, 0, nil, false
	}
	return msg[0], binary.BigEndian.Uint64(msg[1]), msg[2], true
}
