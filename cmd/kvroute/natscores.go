package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/frontend"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/scoring/sched"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/natsplane"
	"github.com/kvroute/kvroute/workers/registry"
)

// cores are every served model's router cores as the NATS planes see them: one worker set for
// discovery and the --worker flags, where a worker joins its model's prefill or decode core by its
// spec's model and role as over the admin API, and one event sink, index and barrier over all of them
// for the NATS event plane. Worker ids are unique over the frontend, so a batch belongs to the one core
// that holds its worker.
type cores struct {
	names []string // served models, in --model order
	rs    []*router.Router
	pds   []*frontend.Disagg // rs[i]'s model's prefill side
	// strip adds workers without their ZMQ endpoints: their events come over NATS.
	strip bool
	log   *slog.Logger // discovered workers refused (nil: not logged)
}

// all lists every core: each model's decode core, then its prefill core.
func (c *cores) all() []*router.Router {
	rs := make([]*router.Router, 0, 2*len(c.rs))
	for i, r := range c.rs {
		rs = append(rs, r, c.pds[i].Prefill)
	}
	return rs
}

// model is the index of the model a worker spec names: "" (and any name when one model is served) is
// the first, as a registration over the admin API.
func (c *cores) model(name string) (int, error) {
	if name == "" || len(c.names) == 1 {
		return 0, nil
	}
	for i, n := range c.names {
		if n == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: model %q is not served here", registry.ErrBadSpec, name)
}

// AddWorker registers a discovered worker with its model's core for its role; a refusal is logged (the
// watcher only counts it, and tries again at the worker's next heartbeat).
func (c *cores) AddWorker(spec registry.Spec) error {
	i, err := c.model(spec.Model)
	if err == nil {
		err = c.addTo(i, spec)
	}
	if err != nil && c.log != nil {
		c.log.Warn("nats discovery: worker refused", "worker_id", spec.ID, "model", spec.Model, "role", spec.RoleOf(), "err", err)
	}
	return err
}

// addTo registers a worker with model i's core for its role.
func (c *cores) addTo(i int, spec registry.Spec) error {
	if c.strip {
		spec.Events, spec.Replay, spec.Topic = "", "", ""
	}
	return frontend.RegisterWorker(c.rs[i], c.pds[i], spec)
}

// Has reports whether a core holds worker id.
func (c *cores) Has(id uint64) bool {
	for i, r := range c.rs {
		if r.Has(id) || c.pds[i].Prefill.Has(id) {
			return true
		}
	}
	return false
}

// RemoveWorker unregisters a worker from whichever core holds it.
func (c *cores) RemoveWorker(id uint64) error {
	for i, r := range c.rs {
		if _, ok := c.pds[i].Prefill.Fleet.Get(id); ok {
			return c.pds[i].RemoveWorker(id) // keeps its count of prefill workers
		}
		if _, ok := r.Fleet.Get(id); ok {
			return r.RemoveWorker(id)
		}
	}
	return c.rs[0].RemoveWorker(id) // its answer: unknown worker
}

// ApplyRemote applies another router replica's load change to the core holding its worker (replica
// sync): a request routed to a prefill worker is charged on that model's prefill core, one routed to a
// decode worker on its decode core, even when both hops of a disaggregated request share its id.
func (c *cores) ApplyRemote(routerID string, ev router.LoadEvent) error {
	// Every remote event comes here: look through the cores in place rather than list them (c.all).
	for i, r := range c.rs {
		for _, core := range [2]*router.Router{r, c.pds[i].Prefill} {
			if _, ok := core.Fleet.Get(ev.Worker.WorkerID); ok {
				return core.ApplyRemote(routerID, ev)
			}
		}
	}
	return c.rs[0].ApplyRemote(routerID, ev) // its answer: unknown worker
}

// ReconcileRemote applies another replica's active list to every core: each frees only what it charges
// on the workers the list covers, which are one core's.
func (c *cores) ReconcileRemote(routerID string, l sched.ActiveList) int {
	n := 0
	for _, r := range c.all() {
		n += r.ReconcileRemote(routerID, l)
	}
	return n
}

// ActiveLists emits every core's active list, each under its own core's lock.
func (c *cores) ActiveLists(emit func(sched.ActiveList)) {
	for _, r := range c.all() {
		r.ActiveLists(emit)
	}
}

// fleet wires the cores into the NATS event source: batches go to the core holding their worker,
// snapshots dump and restore every core's index, and the barrier waits for all of them.
func (c *cores) fleet() natsplane.Fleet {
	rs := c.all()
	s := make(multiSink, len(rs))
	for k, r := range rs {
		s[k] = r.Fleet.NewInjector()
	}
	return natsplane.Fleet{Sink: s, Index: multiIndex(rs), Barrier: func() {
		for _, r := range rs {
			r.Fleet.Sync()
		}
	}}
}

// multiSink hands a batch to the first sink whose fleet holds its worker (one goroutine owns it, as
// each of its sinks).
type multiSink []natsplane.EventSink

func (s multiSink) Deliver(workerID uint64, rank int, seq uint64, b *kvevents.Batch) error {
	var err error
	for _, k := range s {
		if err = k.Deliver(workerID, rank, seq, b); !errors.Is(err, registry.ErrUnknownWorker) {
			return err
		}
	}
	return err
}

func (s multiSink) Reset(workerID uint64, rank int) error {
	var err error
	for _, k := range s {
		if err = k.Reset(workerID, rank); !errors.Is(err, registry.ErrUnknownWorker) {
			return err
		}
	}
	return err
}

func (s multiSink) Forget(workerID uint64) {
	for _, k := range s {
		k.Forget(workerID)
	}
}

// multiIndex is every core's index as one snapshot: Dump emits each core's entries in turn, and Restore
// hands each entry to the core holding its worker (the first core when none does yet).
type multiIndex []*router.Router

func (m multiIndex) Dump(fn func(prefix.DumpEntry)) (skipped int) {
	for _, r := range m {
		skipped += r.Index.Dump(fn)
	}
	return skipped
}

func (m multiIndex) Restore(entries []prefix.DumpEntry) {
	if len(m) == 1 {
		m[0].Index.Restore(entries)
		return
	}
	per := make([][]prefix.DumpEntry, len(m))
	for _, e := range entries {
		k := 0
		for j, r := range m {
			if _, ok := r.Fleet.Get(e.Worker.WorkerID); ok {
				k = j
				break
			}
		}
		per[k] = append(per[k], e)
	}
	for j, r := range m {
		if len(per[j]) > 0 {
			r.Index.Restore(per[j])
		}
	}
}

func (m multiIndex) Flush() {
	for _, r := range m {
		r.Index.Flush()
	}
}
