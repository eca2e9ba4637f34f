package sched

import (
	"fmt"
	"slices"
	"strings"
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

// RemoteID namespaces a remote request id by its router so it never collides with a local one. A NUL
// ends the router id (replica sync refuses router ids holding one), so no two routers' ids share a
// namespace.
func RemoteID(routerID, id string) string { return remotePrefix + routerID + "\x00" + id }

// remotePrefix starts every RemoteID: no id a client or the API gives can start with a NUL.
const remotePrefix = "\x00replica/"

// ErrUnknownWorker: a remote event names a worker rank this machine does not route to.
var ErrUnknownWorker = fmt.Errorf("%w: unknown worker", ErrBadRequest)

// ApplyRemote applies another router's load event at now, never reporting it to the observer (no echo).
// An AddRequest for an unknown worker rank fails with ErrUnknownWorker; lifecycle events of unknown
// requests fail with ErrUnknownRequest (the Add was dropped or expired).
func (m *Machine) ApplyRemote(now time.Time, routerID string, ev LoadEvent) ([]Released, error) {
	if strings.IndexByte(routerID, 0) >= 0 {
		return nil, fmt.Errorf("%w: a router id holds a NUL", ErrBadRequest)
	}
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

// ActiveList is one router core's own requests active on its targets at one moment: replica sync's
// reconciliation. A replica that receives it frees the requests it holds for that router on those
// targets and the list lacks (their Free was lost: core NATS is best-effort), instead of charging them
// until stale-request expiry.
type ActiveList struct {
	Workers  []scoring.WorkerKey // the targets the list covers, idle ones included
	Requests []ActiveRequest
	// All covers every target, Workers or not: a router gone silent (replica sync frees what it charged
	// for a router whose lists stopped).
	All bool
}

// ActiveRequest is a request of an ActiveList: its id and the target it is active on.
type ActiveRequest struct {
	ID     string
	Worker scoring.WorkerKey
}

// ActiveList returns the machine's targets from..from+n (fewer at the end of its list, none past it)
// and their requests of its own (remote ones left out), in target order (a target's requests in no
// order). Taken between two decisions, it is in order with the load events the observer reported. A
// caller lists a large fleet in parts, releasing its lock between them (every part is a list of its
// own targets, exact when taken): it reads those targets' requests, not the active map, and sorts
// nothing (BenchmarkActiveList).
func (m *Machine) ActiveList(from, n int) ActiveList {
	lo, hi := min(from, len(m.list)), min(from+n, len(m.list))
	ts, reqs := m.list[lo:hi], 0
	for _, ln := range m.lines[lo:hi] {
		reqs += int(ln.active) // remote ones included: an upper bound
	}
	l := ActiveList{Workers: make([]scoring.WorkerKey, len(ts)), Requests: make([]ActiveRequest, 0, reqs)}
	for i, t := range ts {
		l.Workers[i] = t.key
		for id := range t.t.Requests() {
			if !isRemoteID(id) {
				l.Requests = append(l.Requests, ActiveRequest{ID: id, Worker: t.key})
			}
		}
	}
	return l
}

// Targets appends the key of every target, in target order, to dst and returns the extended slice.
func (m *Machine) Targets(dst []scoring.WorkerKey) []scoring.WorkerKey {
	dst = slices.Grow(dst, len(m.list))
	for _, t := range m.list {
		dst = append(dst, t.key)
	}
	return dst
}

// ActiveIndex is an ActiveList's request ids as a set. Building it needs no machine, so a caller builds
// it before taking the lock it reconciles under.
type ActiveIndex struct{ listed map[string]struct{} }

// Index returns l's request ids as a set.
func (l ActiveList) Index() ActiveIndex {
	ix := ActiveIndex{listed: make(map[string]struct{}, len(l.Requests))}
	for _, r := range l.Requests {
		ix.listed[r.ID] = struct{}{}
	}
	return ix
}

// Reconcile frees, at now, the requests this machine holds for routerID on the targets l covers (every
// target when l.All) that l does not list, and returns the releases that frees and their number.
// Requests on targets l does not cover are left alone (another core of that router lists them), and so
// are listed requests this machine never saw (a lost Add cannot be rebuilt from a list).
//
// A caller holding a lock that decisions wait on runs it in steps, and only the first and the last
// under the lock, in parts: Charged (routerID's requests on some of the covered targets), then outside
// the lock ActiveIndex.Unlisted (those the list lacks), then FreeRemote. One pass over that router's
// requests checked against the list held the lock for 22–36 ms per list message with 65,536 of them
// on 8,192 targets (BenchmarkReconcile).
func (m *Machine) Reconcile(now time.Time, routerID string, l ActiveList) ([]Released, int) {
	workers := l.Workers
	if l.All {
		workers = m.Targets(nil)
	}
	return m.FreeRemote(now, l.Index().Unlisted(routerID, m.Charged(routerID, workers, nil)))
}

// Charged appends to ids the RemoteIDs of the requests this machine charges for routerID on the targets
// of workers (keys it does not route to are skipped), and returns the extended slice. It reads those
// targets' requests only, so the messages of one list read each active request once.
func (m *Machine) Charged(routerID string, workers []scoring.WorkerKey, ids []string) []string {
	ns := RemoteID(routerID, "")
	for _, k := range workers {
		t := m.find(k)
		if t == nil {
			continue
		}
		for id := range t.t.Requests() {
			if strings.HasPrefix(id, ns) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// Unlisted keeps, in place, the ids (RemoteIDs of routerID's requests, from Charged) that l does not
// list, and returns them.
func (l ActiveIndex) Unlisted(routerID string, ids []string) []string {
	n := len(RemoteID(routerID, ""))
	return slices.DeleteFunc(ids, func(id string) bool {
		_, listed := l.listed[id[n:]]
		return listed
	})
}

// FreeRemote frees, at now, the remote requests ids that are still active (one that left since Charged
// listed it is skipped), and returns the releases that frees and their number.
func (m *Machine) FreeRemote(now time.Time, ids []string) ([]Released, int) {
	freed := 0
	for _, id := range ids {
		t := m.active[id]
		if t == nil || !isRemoteID(id) {
			continue
		}
		delete(m.active, id)
		t.t.Free(id)
		m.publish(t)
		freed++
	}
	if freed == 0 {
		return nil, 0
	}
	return m.drain(now), freed
}

// isRemoteID reports whether an active id is another router's request (RemoteID).
func isRemoteID(id string) bool { return strings.HasPrefix(id, remotePrefix) }
