package router

import "github.com/kvroute/kvroute/scoring/sched"

// This file is the router side of replica sync (workers/natsplane): the observer
// that reports this router's load changes, and the apply side that charges other routers' requests on the
// same workers' trackers. Remote requests live in the same active map under a namespaced id, so stale
// expiry and worker removal clean them up like local ones when their Free is lost.

// LoadEventKind is what happened to a routed request (sched.LoadEventKind).
type LoadEventKind = sched.LoadEventKind

// The kinds of load event.
const (
	LoadAdd         = sched.LoadAdd         // AddRequest: the request was charged on Worker
	LoadPrefillDone = sched.LoadPrefillDone // MarkPrefillCompleted
	LoadFree        = sched.LoadFree        // Free
	LoadBind        = sched.LoadBind        // a session was bound to Worker (RequestID is the session id)
)

// LoadEvent is one active-load change of a request (Dynamo's ActiveSequenceEvent without router id), or
// a session binding (sched.LoadEvent).
type LoadEvent = sched.LoadEvent

// ApplyRemote applies another router's load event to this router's trackers, never reporting it to the
// observer (no echo). An AddRequest for a worker this router does not know fails with worker.ErrUnknown;
// lifecycle events of unknown requests fail with ErrUnknownRequest (the Add was dropped or expired).
func (r *Router) ApplyRemote(routerID string, ev LoadEvent) error {
	return r.sched.applyRemote(routerID, ev)
}

// ActiveLists hands emit this router's active list (sched.ActiveList: its workers and its own active
// requests) in parts of up to 256 workers, each while its scheduler's lock is held, so that each part
// is exact for its workers and in order with the load events it reports to OnLoad: replica sync
// publishes both through one queue. Decisions run between the parts.
func (r *Router) ActiveLists(emit func(sched.ActiveList)) { r.sched.activeList(emit) }

// ReconcileRemote frees the requests this router charges for routerID on the workers l covers that l
// does not list (their Free was lost) and returns their number. Decisions wait only while it reads and
// frees a part of the workers, not while it checks the requests against the list.
func (r *Router) ReconcileRemote(routerID string, l sched.ActiveList) int {
	return r.sched.reconcile(routerID, l)
}
