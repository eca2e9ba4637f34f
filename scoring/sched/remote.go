package sched

import (
	"fmt"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/load"
)

// This file is the machine's side of replica sync: the load events it reports for its own requests
// (Options.Observer), and the apply side that charges other routers' requests on the same workers'
// trackers. Remote requests live in the same active map under a namespaced id, so stale expiry and
// worker removal clean them up like local ones when their Free is lost.

// LoadEventKind is what happened to a routed request.
type LoadEventKind uint8

const (
	LoadAdd         LoadEventKind = iota + 1 // AddRequest: the request was charged on Worker
	LoadPrefillDone                          // MarkPrefillCompleted
	LoadFree                                 // Free
	LoadBind                                 // a session was bound to Worker (RequestID is the session id)
)

// LoadEvent is one active-load change of a request (Dynamo's ActiveSequenceEvent without router id), or
// a session binding.
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

// RemoteID namespaces a remote request id by its router so it never collides with a local one.
func RemoteID(routerID, id string) string { return "\x00replica/" + routerID + "/" + id }

// ErrUnknownWorker: a remote event names a worker rank this machine does not route to.
var ErrUnknownWorker = fmt.Errorf("%w: unknown worker", ErrBadRequest)

// ApplyRemote applies another router's load event at now, never reporting it to the observer (no echo).
// An AddRequest for an unknown worker rank fails with ErrUnknownWorker; lifecycle events of unknown
// requests fail with ErrUnknownRequest (the Add was dropped or expired).
func (m *Machine) ApplyRemote(now time.Time, routerID string, ev LoadEvent) ([]Released, error) {
	if ev.Kind == LoadBind {
		if m.find(ev.Worker) == nil {
			return nil, fmt.Errorf("%w: %d rank %d", ErrUnknownWorker, ev.Worker.WorkerID, ev.Worker.DPRank)
		}
		m.sess.bind(now, ev.RequestID, ev.Worker)
		return nil, nil
	}
	id := RemoteID(routerID, ev.RequestID)
	switch ev.Kind {
	case LoadAdd:
		t := m.find(ev.Worker)
		if t == nil {
			return nil, fmt.Errorf("%w: %d rank %d", ErrUnknownWorker, ev.Worker.WorkerID, ev.Worker.DPRank)
		}
		if m.active[id] != nil {
			return nil, fmt.Errorf("%w: %q", ErrDuplicateRequest, id)
		}
		reuse := ev.AssumeKVReuse
		if err := t.t.AddRequest(load.Request{ID: id, SeqHashes: ev.SeqHashes, ISL: ev.ISL, OverlapBlocks: ev.OverlapBlocks,
			ExpectedOutputTokens: ev.ExpectedOutputTokens, AssumeKVReuse: &reuse, TrackPrefillTokens: ev.TrackPrefillTokens, Now: now}); err != nil {
			return nil, err
		}
		m.active[id] = t
		m.publish(t)
		return nil, nil
	case LoadPrefillDone, LoadFree:
		t := m.active[id]
		if t == nil {
			return nil, fmt.Errorf("%w: %q", ErrUnknownRequest, id)
		}
		if ev.Kind == LoadFree {
			delete(m.active, id)
			t.t.Free(id)
		} else {
			t.t.MarkPrefillCompleted(id)
		}
		m.publish(t)
		return m.drain(now), nil
	}
	return nil, fmt.Errorf("%w: load event kind %d", ErrBadRequest, ev.Kind)
}
