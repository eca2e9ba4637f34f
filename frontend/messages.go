package frontend

import "github.com/kvroute/kvroute/actors/router"

// The request actor's messages (request.go). The handler sends prepareJob; every other message reports
// a concurrent stage of the request being prepared and carries its generation, so a late report of a
// request the actor has already answered is recognized (and its resources released), never applied to
// the next request the reused actor serves.

// requestMessage seals the set.
type requestMessage interface{ requestMessage() }

// prepareJob asks a request actor to tokenize and route one request; the answer goes to reply.
type prepareJob struct {
	j     *job
	reply chan prepared
}

// imagesResolved: the image stage (mm_hash · size probe · token count per image) has finished.
type imagesResolved struct{ gen uint64 }

// transferReady: the mm_kwargs handoff of image i has finished; member and release are nil when it
// failed (the worker fetches the URL instead).
type transferReady struct {
	gen     uint64
	i       int
	member  []byte
	release func()
}

// clientGone: the client closed its connection; the request's context is already cancelled, so every
// stage in flight (image fetch, transfer, the router's queue) is unwinding.
type clientGone struct{ gen uint64 }

// deadlineExpired: the request's timeout (--request-timeout) passed before it was routed.
type deadlineExpired struct{ gen uint64 }

func (*prepareJob) requestMessage()      {}
func (*imagesResolved) requestMessage()  {}
func (*transferReady) requestMessage()   {}
func (*clientGone) requestMessage()      {}
func (*deadlineExpired) requestMessage() {}

// prepared is the request actor's answer: the routing decision (or why there is none).
type prepared struct {
	// req is the route request of the first decision (routing tokens with image positions expanded,
	// namespace, priority, tier, pin, OSL, session); migration re-routes it with failed workers excluded.
	req   *router.RouteRequest
	route router.RouteResult
	// prefill is set for a disaggregated request: its prefill decision; route is then decided after the
	// prefill hop (disagg.go).
	prefill *router.RouteResult
	err     error
}
