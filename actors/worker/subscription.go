package worker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/registry"
)

// subscription is one dp rank's KV event stream of a worker. A fresh kvevents.Subscriber is built for
// every (re)start, so a restart also resets sequence tracking and replays from 0; counters of earlier
// subscribers are kept in base.
type subscription struct {
	rank   int
	dpSize int
	cfg    kvevents.Config
	wcfg   Config
	id     uint64

	// gen is the generation whose batches the mirror accepts; a resync bumps it before clearing the
	// index, so batches still in flight from the retired subscriber are dropped instead of re-stored.
	gen atomic.Uint64

	mu   sync.Mutex
	cur  *kvevents.Subscriber
	base kvevents.Stats
}

func newSubscription(spec registry.Spec, rank int, wcfg Config) (*subscription, error) {
	ep, err := registry.RankEndpoint(spec.Events, rank)
	if err != nil {
		return nil, err
	}
	rep, err := registry.RankEndpoint(spec.Replay, rank)
	if err != nil {
		return nil, err
	}
	cfg := kvevents.DefaultConfig()
	cfg.Endpoint, cfg.ReplayEndpoint, cfg.Topic = ep, rep, spec.Topic
	cfg.CurveServerKey = spec.CurveKey
	if wcfg.ReplayTimeout > 0 {
		cfg.ReplayTimeout = wcfg.ReplayTimeout
	}
	if wcfg.IdentityCheck != 0 {
		cfg.IdentityCheck = wcfg.IdentityCheck
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("worker %d rank %d: %w", spec.ID, rank, err)
	}
	wcfg.ImageTokenID, wcfg.ImageEndTokenID = wcfg.imageTokensFor(&spec)
	return &subscription{rank: rank, dpSize: spec.DPRanks(), cfg: cfg, wcfg: wcfg, id: spec.ID}, nil
}

// stats returns the counters of every subscriber this subscription ran, summed.
func (s *subscription) stats() kvevents.Stats {
	s.mu.Lock()
	st := s.base
	cur := s.cur
	s.mu.Unlock()
	if cur != nil {
		addStats(&st, cur.Stats())
	}
	return st
}

// err is why the current subscriber's last socket session failed, nil if none did.
func (s *subscription) err() error {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur == nil {
		return nil
	}
	return cur.Err()
}

// addStats adds the counters /v1/workers reports of c to st.
func addStats(st *kvevents.Stats, c kvevents.Stats) {
	st.Gaps += c.Gaps
	st.Replays += c.Replays
	st.ReplayTimeouts += c.ReplayTimeouts
	st.DecodeErrors += c.DecodeErrors
	st.Stale += c.Stale
	st.Discarded += c.Discarded
	st.Duplicates += c.Duplicates
	st.Lost += c.Lost
	st.Connects += c.Connects
}

// open builds a new subscriber that forwards to mirror, retiring the previous one's counters into base.
func (s *subscription) open(system *actor.ActorSystem, mirror *actor.PID) (*kvevents.Subscriber, error) {
	conv := converter{workerID: s.id, rank: s.rank, dpSize: s.dpSize, gen: s.gen.Load(), blockSize: s.wcfg.BlockSize, imageTok: s.wcfg.ImageTokenID, imageEnd: s.wcfg.ImageEndTokenID}
	sub, err := kvevents.NewSubscriber(s.cfg, kvevents.Handler{
		OnBatch: func(seq uint64, b *kvevents.Batch) {
			msg := conv.convert(seq, b)
			system.Root.Send(mirror, msg)
		},
		OnReset: func() {
			conv.salted = nil // the new engine holds nothing; its replay from 0 re-reads every salt
			system.Root.Send(mirror, &engineReset{Rank: s.rank})
		},
	})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.cur != nil {
		addStats(&s.base, s.cur.Stats())
	}
	s.cur = sub
	s.mu.Unlock()
	return sub, nil
}

// converter turns decoded vLLM batches into index ops. It runs on the subscriber goroutine, so re-keying
// (the CPU work of ingestion) happens off the mirror and shard actors.
type converter struct {
	workerID uint64
	// rank is the dp rank of batches that do not carry one (v0.9); dpSize bounds the ranks a batch may
	// name: a batch of a rank the worker does not have is counted and not indexed (it could never be
	// routed to).
	rank      int
	dpSize    int
	gen       uint64
	blockSize int
	imageTok  uint32
	imageEnd  uint32

	lastLora string
	lastSeed uint64
	local    []uint64
	// salted maps the engine hash of every held block of a salted chain (vLLM cache_salt) to the seed its
	// chain is re-keyed with: the salt appears on a chain's first block only, and a continuation batch
	// inherits its parent's. Unsalted chains (the usual case) take no entry.
	salted map[uint64]uint64
}

// storedSeed is the re-keying seed of a BlockStored event: LoRA name and cache salt, the salt read from
// the chain's first block or inherited from the parent block.
func (c *converter) storedSeed(ev *kvevents.Event) (seed uint64, salted bool) {
	if ev.HasParent {
		if s, ok := c.salted[ev.ParentHash]; ok {
			return s, true
		}
	} else if salt := ev.CacheSalt(); salt != "" {
		return scoring.DeriveSeed(ev.LoraName, salt), true
	}
	return c.seed(ev.LoraName), false
}

func (c *converter) seed(lora string) uint64 {
	if lora == "" {
		return scoring.Seed
	}
	if lora != c.lastLora {
		c.lastLora, c.lastSeed = lora, scoring.DeriveSeed(lora, "")
	}
	return c.lastSeed
}

// convert copies what the index needs out of b (which the subscriber reuses) into a message.
func (c *converter) convert(seq uint64, b *kvevents.Batch) *eventsArrived {
	rank := uint32(c.rank)
	if b.HasDPRank {
		rank = b.DPRank
	}
	msg := &eventsArrived{Rank: c.rank, Gen: c.gen, Seq: seq, Events: len(b.Events), Apply: &indexer.Apply{WorkerID: c.workerID}}
	if c.dpSize > 0 && int64(rank) >= int64(c.dpSize) {
		msg.BadRank, msg.Events = int64(rank), 0
		return msg
	}
	msg.BadRank = -1
	ops := make([]indexer.Op, 0, len(b.Events))
	for i := range b.Events {
		ev := &b.Events[i]
		switch ev.Kind {
		case kvevents.Stored:
			var partial int
			seed, salted := c.storedSeed(ev)
			if c.imageTok != 0 {
				c.local, partial = kvevents.RekeyImages(ev, c.blockSize, seed, c.imageTok, c.imageEnd, c.local[:0])
			} else {
				c.local, partial = kvevents.Rekey(ev, c.blockSize, seed, c.local[:0])
			}
			if salted {
				if c.salted == nil {
					c.salted = make(map[uint64]uint64)
				}
				for _, h := range ev.BlockHashes {
					c.salted[h] = seed
				}
			}
			msg.Partial += partial
			if len(c.local) == 0 {
				continue
			}
			blocks := make([]prefix.Block, len(c.local))
			for j, h := range c.local {
				blocks[j] = prefix.Block{EngineHash: ev.BlockHashes[j], LocalHash: h}
			}
			ops = append(ops, indexer.Op{Kind: indexer.OpStore, DPRank: rank, Parent: ev.ParentHash, HasParent: ev.HasParent, Blocks: blocks, Medium: ev.Tier})
		case kvevents.Removed:
			if len(c.salted) > 0 {
				for _, h := range ev.BlockHashes {
					delete(c.salted, h)
				}
			}
			ops = append(ops, indexer.Op{Kind: indexer.OpRemove, DPRank: rank, Hashes: append([]uint64(nil), ev.BlockHashes...), Medium: ev.Tier})
		case kvevents.Cleared:
			c.salted = nil
			ops = append(ops, indexer.Op{Kind: indexer.OpClear, DPRank: rank})
		}
	}
	msg.Apply.Ops = ops
	return msg
}

// subscriberActor runs one subscription's goroutine. It is a child of the mirror, supervised with
// exponential backoff: when Run fails (or a resync is requested) the actor panics, protoactor restarts
// it after the backoff, and the restart opens a fresh subscriber that replays from sequence 0.
type subscriberActor struct {
	sub    *subscription
	mirror *actor.PID
	system *actor.ActorSystem
	c      *counters

	cancel context.CancelFunc
	done   chan struct{}
}

func (a *subscriberActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *actor.Restarting:
		a.c.restarts.Add(1)
		a.stop()
	case *actor.Stopping:
		a.stop()
	case *actor.Stopped:
	case *subscriberExited:
		panic(msg.Err) // hand the failure to the mirror's supervisor strategy
	}
}

// The goroutines of the event path, joined by their owners' done channels (stop, Fleet.Stop).
var (
	subscriberRun  = routine.Named("worker.subscriber")
	bindSubscriber = routine.Named("worker.bind-subscriber")
	auditLoop      = routine.Named("worker.audit")
)

func (a *subscriberActor) start(ctx actor.Context) {
	s, err := a.sub.open(a.system, a.mirror)
	if err != nil {
		ctx.Send(ctx.Self(), &subscriberExited{Err: err})
		return
	}
	runCtx, cancel := context.WithCancel(context.Background())
	a.cancel, a.done = cancel, make(chan struct{})
	self := ctx.Self()
	subscriberRun.Go(func() {
		defer close(a.done)
		if err := s.Run(runCtx); err != nil && runCtx.Err() == nil {
			a.system.Root.Send(self, &subscriberExited{Err: err})
		}
	})
}

func (a *subscriberActor) stop() {
	if a.cancel == nil {
		return
	}
	a.cancel()
	<-a.done
	a.cancel, a.done = nil, nil
}
