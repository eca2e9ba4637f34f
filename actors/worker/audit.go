package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/workers/kvevents"
)

// This file makes event-plane trouble visible: a worker whose stream shows a problem for longer than the
// grace period is marked degraded with the reason (on /v1/workers, as kvroute_worker_kv_events_degraded
// on /metrics, and in one log line), and topics no worker claims are remembered for the reason.

// auditEvery is how often the fleet audits its mirrors at most (wall clock; the audit itself reads
// Config.Clock); a shorter grace period audits four times per grace period, so a problem shows within
// 1.25 × Grace.
const auditEvery = time.Second

func (f *Fleet) startAudit() {
	every := auditEvery
	if g := f.deps.cfg.Grace; g > 0 && g/4 < every {
		every = max(g/4, 10*time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.auditStop, f.auditDone = cancel, make(chan struct{})
	auditLoop.Go(func() {
		defer close(f.auditDone)
		routine.Every(ctx.Done(), every, func() { f.Audit(f.deps.now()) })
	})
}

// Audit marks each worker whose event stream has shown a problem for longer than Config.Grace as
// degraded with the reason, and clears the mark once the problem is gone. Problems:
//   - no batch yet, Grace after the worker was added, and either no connection (a wrong endpoint or
//     port, a publisher that never connects) or, in bind mode, messages under unregistered topics (a
//     wrong topic): the reason names the worker's topic and the topics seen. A connected engine that
//     is only idle publishes nothing and is not marked;
//   - every store rejected (indexed_blocks 0 while rejected_stores grows): the parent chain cannot be
//     followed, so nothing is ever cached for routing;
//   - batches naming a dp rank the worker does not have (dp_size too small).
//
// It returns the workers whose mark changed. The degraded mark of the registration self-test is separate
// and left alone.
func (f *Fleet) Audit(now time.Time) []uint64 {
	grace := f.deps.cfg.Grace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	var changed []uint64
	for _, m := range f.Mirrors() {
		reason := ""
		if m.Spec.PublishesEvents() && now.Sub(m.added) >= grace {
			reason = f.problem(m, grace)
		}
		old := ""
		if p := m.audit.Load(); p != nil {
			old = *p
		}
		if reason == old {
			continue
		}
		m.audit.Store(&reason)
		changed = append(changed, m.Spec.ID)
		if log := f.deps.cfg.Log; log != nil {
			if reason != "" {
				log.Warn("worker degraded", "worker", m.Spec.ID, "reason", reason)
			} else {
				log.Info("worker events recovered", "worker", m.Spec.ID)
			}
		}
	}
	return changed
}

// problem is the reason a worker's events cannot be used, "" when there is none.
func (f *Fleet) problem(m *Mirror, grace time.Duration) string {
	if n := m.c.badRanks.Load(); n > 0 {
		return fmt.Sprintf("%d batches named a dp rank >= dp_size %d: not indexed", n, m.Spec.DPRanks())
	}
	if m.c.batches.Load() == 0 {
		// An idle engine publishes nothing (vLLM sends a batch only when blocks change), so silence alone
		// is not a problem: a connection that never came up is, and so are messages under topics nobody
		// registered while this worker's topic stays silent.
		if !m.bound {
			if m.eventStats().Connects == 0 {
				why := fmt.Sprintf("never connected to the event publisher at %s within %v", m.Spec.Events, grace)
				for _, sub := range m.subs {
					if err := sub.err(); err != nil {
						why += ": " + err.Error()
						if kvevents.OutOfSockets(err) {
							why += fmt.Sprintf(" (ZMQ socket limit %d, about four a followed worker: raise the open-file limit)", kvevents.SocketLimit())
						}
						return why
					}
				}
				return why
			}
			return ""
		}
		// The sockets' session-wide counts: summing every topic's (BindStats) per silent worker made an
		// audit of 8,192 silent bound workers take 7 s.
		bs := f.bindSessions()
		if topics, n := f.bindOwner().unknown.list(), bs.UnknownTopics; n > 0 {
			return fmt.Sprintf("no KV event batch on topic %q within %v, but %d messages under unregistered topics %q", m.Spec.Topic, grace, n, topics)
		}
		if bs.Connects == 0 {
			return fmt.Sprintf("no publisher connected to the bind sockets %v within %v (topic %q)", f.BindAddrs(), grace, m.Spec.Topic)
		}
		return ""
	}
	is := f.deps.index.Stats(m.Spec.ID)
	if is.RejectedStores > 0 && f.indexedBlocks(m) == 0 {
		return fmt.Sprintf("all %d stores rejected (parent block unknown): nothing indexed", is.RejectedStores)
	}
	return ""
}

func (f *Fleet) indexedBlocks(m *Mirror) int {
	n := 0
	for r := 0; r < m.Spec.DPRanks(); r++ {
		n += f.deps.index.Blocks(rankKey(m.Spec.ID, r))
	}
	return n
}

// maxUnknownTopics bounds the unregistered topics remembered (and logged).
const maxUnknownTopics = 16

// unknownTopics remembers the first distinct unregistered topics seen on the bind sockets, logging each
// once. Written by the bind goroutines, read by the audit.
type unknownTopics struct {
	mu     sync.Mutex
	topics []string
}

func (u *unknownTopics) saw(log *slog.Logger, topic []byte, endpoint string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.topics) >= maxUnknownTopics {
		return
	}
	t := strings.ToValidUTF8(string(topic), "?")
	if len(t) > 128 {
		t = t[:128]
	}
	for _, k := range u.topics {
		if k == t {
			return
		}
	}
	u.topics = append(u.topics, t)
	if log != nil {
		log.Warn("KV events with a topic no worker is registered with: dropped", "topic", t, "bind", endpoint)
	}
}

func (u *unknownTopics) list() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.topics...)
}
