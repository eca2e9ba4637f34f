package router

import (
	"fmt"

	"github.com/kvroute/kvroute/actors/worker"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/load"
)

// This file is the router side of replica sync (spec/router.md §7.1, workers/natsplane): the observer
// that reports this router's load changes, and the apply side that charges other routers' requests on the
// same workers' trackers. Remote requests live in the same active map under a namespaced id, so stale
// expiry and worker removal clean them up like local ones when their Free is lost.

// LoadEventKind is what happened to a routed request.
type LoadEventKind uint8

const (
	LoadAdd         LoadEventKind = iota + 1 // AddRequest: the request was charged on Worker
	LoadPrefillDone                          // MarkPrefillCompleted
	LoadFree                                 // Free
)

// LoadEvent is one active-load change of a request (Dynamo's ActiveSequenceEvent without router id).
type LoadEvent struct {
	Kind      LoadEventKind
	RequestID string
	Worker    scoring.WorkerKey
	// AddRequest fields (zero otherwise). SeqHashes is owned by the event.
	SeqHashes            []uint64
	ISL                  int
	OverlapBlocks        uint32
	ExpectedOutputTokens int
	AssumeKVReuse        bool
	TrackPrefillTokens   *bool
}

// remoteID namespaces a remote request id by its router so it never collides with a local one.
func remoteID(routerID, id string) string { return "\x00replica/" + routerID + "/" + id }

// observeCharge reports a charge to the replica-sync observer (Config.OnLoad). It runs on the request
// path: the observer must not block.
func (s *scheduler) observeCharge(t *target, req *RouteRequest, seq []uint64, isl int, overlap uint32, reuse bool) {
	if s.observe == nil {
		return
	}
	ev := LoadEvent{Kind: LoadAdd, RequestID: req.ID, Worker: t.key, SeqHashes: append([]uint64(nil), seq...), ISL: isl,
		OverlapBlocks: overlap, ExpectedOutputTokens: req.ExpectedOutputTokens, AssumeKVReuse: reuse}
	if req.Override != nil {
		ev.TrackPrefillTokens = req.Override.TrackPrefillTokens
	}
	s.observe(ev)
}

// observeLifecycle reports a prefill completion or a free to the observer.
func (s *scheduler) observeLifecycle(kind LoadEventKind, id string, t *target) {
	if s.observe != nil {
		s.observe(LoadEvent{Kind: kind, RequestID: id, Worker: t.key})
	}
}

// ApplyRemote applies another router's load event to this router's trackers, never reporting it to the
// observer (no echo). An AddRequest for a worker this router does not know fails with worker.ErrUnknown;
// lifecycle events of unknown requests fail with ErrUnknownRequest (the Add was dropped or expired).
func (r *Router) ApplyRemote(routerID string, ev LoadEvent) error {
	s := r.sched
	id := remoteID(routerID, ev.RequestID)
	switch ev.Kind {
	case LoadAdd:
		ts := s.targets.Load()
		i, ok := ts.pos.find(ev.Worker)
		if !ok {
			return fmt.Errorf("%w: %d rank %d", worker.ErrUnknown, ev.Worker.WorkerID, ev.Worker.DPRank)
		}
		t := ts.list[i]
		if !s.active.add(id, t) {
			return fmt.Errorf("%w: %q", ErrDuplicateRequest, id)
		}
		reuse := ev.AssumeKVReuse
		t.mu.Lock()
		err := t.t.AddRequest(load.Request{ID: id, SeqHashes: ev.SeqHashes, ISL: ev.ISL, OverlapBlocks: ev.OverlapBlocks,
			ExpectedOutputTokens: ev.ExpectedOutputTokens, AssumeKVReuse: &reuse, TrackPrefillTokens: ev.TrackPrefillTokens, Now: s.now()})
		if err == nil {
			t.publish()
		}
		t.mu.Unlock()
		if err != nil {
			s.active.remove(id)
		}
		return err
	case LoadPrefillDone, LoadFree:
		var t *target
		if ev.Kind == LoadFree {
			t = s.active.remove(id)
		} else {
			t = s.active.get(id)
		}
		if t == nil {
			return fmt.Errorf("%w: %q", ErrUnknownRequest, id)
		}
		t.mu.Lock()
		if ev.Kind == LoadFree {
			t.t.Free(id)
		} else {
			t.t.MarkPrefillCompleted(id)
		}
		t.publish()
		t.mu.Unlock()
		s.drain()
		return nil
	}
	return fmt.Errorf("%w: load event kind %d", ErrBadRequest, ev.Kind)
}
