package natsplane

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/workers/kvevents"
)

// RelayConfig configures `kvroute relay`: one worker's ZMQ KV event streams republished on NATS.
type RelayConfig struct {
	// WorkerID is the worker's id at the frontends (registry.Spec.ID). Required.
	WorkerID uint64
	// Events lists the worker's ZMQ PUB endpoints, one per dp rank (rank r at index r). Required.
	Events []string
	// Replay lists the replay ROUTER endpoints per rank; empty entries (or a short list) disable replay.
	Replay []string
	// Topic is the ZMQ topic filter. Default "".
	Topic string
	// Durable publishes through JetStream (--durable-kv-events): each batch is retried until the stream
	// acknowledges it, with a message id so a retry is stored once. Default false (core NATS,
	// fire-and-forget).
	Durable bool
	// Replicas is the event stream's replica count in durable mode. Default 1.
	Replicas int
	// RetryMin / RetryMax bound the backoff of durable publish retries. Defaults 50ms and 2s.
	RetryMin, RetryMax time.Duration
}

// Validate checks the configuration.
func (c *RelayConfig) Validate() error {
	if len(c.Events) == 0 {
		return fmt.Errorf("%w: relay needs at least one ZMQ events endpoint", ErrBadConfig)
	}
	return nil
}

// RelayStats are a relay's counters.
type RelayStats struct {
	Batches       uint64 // batches published
	Events        uint64 // events in them
	Resets        uint64 // engine restarts forwarded
	PublishErrors uint64 // failed publish attempts (durable mode retries them)
}

// Relay subscribes to one worker's ZMQ event streams (with replay) and republishes every batch on the
// worker's NATS subject. Each rank's subscriber goroutine publishes its own batches, so per-rank order on
// the subject is the engine's order.
type Relay struct {
	cfg   RelayConfig
	nc    *nats.Conn
	js    jetstream.JetStream
	epoch string

	batches, events, resets, pubErrs atomic.Uint64
}

// NewRelay validates cfg and prepares a relay publishing on nc.
func NewRelay(nc *nats.Conn, cfg RelayConfig) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 50 * time.Millisecond
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = 2 * time.Second
	}
	r := &Relay{cfg: cfg, nc: nc, epoch: nuid.Next()}
	if cfg.Durable {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		r.js = js
	}
	return r, nil
}

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{Batches: r.batches.Load(), Events: r.events.Load(), Resets: r.resets.Load(), PublishErrors: r.pubErrs.Load()}
}

// relaySubscriber is one dp rank's ZMQ subscriber inside Relay.Run, which joins it.
var relaySubscriber = routine.Named("natsplane.relay-subscriber")

// Run relays until ctx is done. It fails only when a subscriber cannot be built.
func (r *Relay) Run(ctx context.Context) error {
	if r.js != nil {
		// The stream may be unavailable for a while (a node lost, a leader being elected): retry until it
		// exists. Batches published meanwhile wait in the worker's replay ring.
		backoff := r.cfg.RetryMin
		for {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := EnsureEventStream(sctx, r.js, r.cfg.Replicas)
			cancel()
			if err == nil {
				break
			}
			r.pubErrs.Add(1)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, r.cfg.RetryMax)
		}
	}
	var subs []*kvevents.Subscriber
	for rank, ep := range r.cfg.Events {
		cfg := kvevents.DefaultConfig()
		cfg.Endpoint, cfg.Topic = ep, r.cfg.Topic
		if rank < len(r.cfg.Replay) {
			cfg.ReplayEndpoint = r.cfg.Replay[rank]
		}
		p := r.newRankPublisher(ctx, rank)
		sub, err := kvevents.NewSubscriber(cfg, kvevents.Handler{OnBatch: p.batch, OnReset: p.reset})
		if err != nil {
			return fmt.Errorf("natsplane: relay worker %d rank %d: %w", r.cfg.WorkerID, rank, err)
		}
		subs = append(subs, sub)
	}
	var g routine.Group
	for _, s := range subs {
		g.Go(relaySubscriber, func() { _ = s.Run(ctx) })
	}
	g.Wait()
	return nil
}

// rankPublisher is one rank's publishing state, owned by that rank's subscriber goroutine.
type rankPublisher struct {
	r       *Relay
	ctx     context.Context
	rank    int
	subject string
	rankStr string
	buf     []byte
	resets  int
}

func (r *Relay) newRankPublisher(ctx context.Context, rank int) *rankPublisher {
	return &rankPublisher{r: r, ctx: ctx, rank: rank, subject: EventSubject(r.cfg.WorkerID), rankStr: strconv.Itoa(rank)}
}

func (p *rankPublisher) msg(seq uint64, reset bool) *nats.Msg {
	m := nats.NewMsg(p.subject)
	m.Header.Set(HeaderSeq, strconv.FormatUint(seq, 10))
	m.Header.Set(HeaderRank, p.rankStr)
	m.Header.Set(HeaderEpoch, p.r.epoch)
	if reset {
		m.Header.Set(HeaderReset, "1")
	}
	return m
}

func (p *rankPublisher) batch(seq uint64, b *kvevents.Batch) {
	if !b.HasDPRank {
		b.DPRank, b.HasDPRank = uint32(p.rank), true
	}
	p.buf = kvevents.AppendBatch(p.buf[:0], b, kvevents.LayoutMap)
	m := p.msg(seq, false)
	m.Data = p.buf
	// The message id names the batch within this relay instance and engine run, so a retried publish is
	// stored once (JetStream's duplicate window).
	p.publish(m, fmt.Sprintf("%d.%d.%s.%d.%d", p.r.cfg.WorkerID, p.rank, p.r.epoch, p.resets, seq))
	p.r.batches.Add(1)
	p.r.events.Add(uint64(len(b.Events)))
}

func (p *rankPublisher) reset() {
	p.resets++
	p.r.resets.Add(1)
	p.publish(p.msg(0, true), fmt.Sprintf("%d.%d.%s.%d.reset", p.r.cfg.WorkerID, p.rank, p.r.epoch, p.resets))
}

// publish sends m: core NATS fire-and-forget, or JetStream with retries until acknowledged or ctx ends.
func (p *rankPublisher) publish(m *nats.Msg, id string) {
	if p.r.js == nil {
		if err := p.r.nc.PublishMsg(m); err != nil {
			p.r.pubErrs.Add(1)
		}
		return
	}
	backoff := p.r.cfg.RetryMin
	for p.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
		_, err := p.r.js.PublishMsg(ctx, m, jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			return
		}
		p.r.pubErrs.Add(1)
		select {
		case <-p.ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, p.r.cfg.RetryMax)
	}
}
