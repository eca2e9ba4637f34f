package policy

import (
	"fmt"
	"math"
	"sort"

	"github.com/kvroute/kvroute/scoring"
)

// SyntheticClass names the single class of a router without a policy document.
const SyntheticClass = "default"

// Opt is an optional non-negative integer of the document (tokens, requests).
type Opt struct {
	V   uint64
	Set bool
}

func optOf(p *uint64) Opt {
	if p == nil {
		return Opt{}
	}
	return Opt{V: *p, Set: true}
}

// Class is one policy class: a queue with its own order, DRR weight, busy rule and limits.
type Class struct {
	// Name identifies the class (metrics, errors, and explicit selection by header).
	Name string
	// QueuePolicy orders the class's waiting requests: fcfs (default) or wspt (lcfs only in the
	// synthetic class of --router-queue-policy).
	QueuePolicy scoring.QueuePolicy
	// Quantum is the class's deficit-round-robin credit per round, in uncached prompt tokens (> 0):
	// classes with backlogs are served in proportion to their quanta.
	Quantum uint64
	// PrefillBusyThreshold: a worker is busy for this class above this many active prefill tokens.
	PrefillBusyThreshold Opt
	// PrefillBusyThresholdFrac: ... or above this fraction of its max_num_batched_tokens (≥ 0, may
	// exceed 1). With neither threshold the class never queues.
	PrefillBusyThresholdFrac scoring.OptFloat
	// BusyWorkerRatio in (0, 1]: the pool is busy once this share of the eligible workers is busy;
	// unset, only when every eligible worker is.
	BusyWorkerRatio scoring.OptFloat
	// Queue limits per worker (multiplied by the number of workers): waiting requests, their raw ISL
	// tokens, their cached tokens. A request that finds its class at a limit is rejected (HTTP 529).
	RequestLimitPerWorker     Opt
	RawISLTokenLimitPerWorker Opt
	CachedTokenLimitPerWorker Opt
}

// Queues reports whether the class ever queues (it has a busy threshold).
func (c *Class) Queues() bool { return c.PrefillBusyThreshold.Set || c.PrefillBusyThresholdFrac.Set }

// WorkerBusy reports whether a worker with this many active prefill tokens and this token budget is
// busy for the class.
func (c *Class) WorkerBusy(prefill, maxBatched uint64) bool {
	if c.PrefillBusyThreshold.Set && prefill > c.PrefillBusyThreshold.V {
		return true
	}
	return c.PrefillBusyThresholdFrac.Set && float64(prefill) > c.PrefillBusyThresholdFrac.V*float64(maxBatched)
}

// PoolBusy reports whether eligible workers of which busy are busy make the pool busy: all of them, or
// at least BusyWorkerRatio of them. With no eligible worker it is false, so the request falls through to
// the selection's error instead of waiting forever.
func (c *Class) PoolBusy(busy, eligible int) bool {
	if eligible == 0 {
		return false
	}
	if c.BusyWorkerRatio.Set {
		return float64(busy) >= c.BusyWorkerRatio.V*float64(eligible)
	}
	return busy == eligible
}

// Stats is what a class's queue holds: waiting requests, their raw ISL tokens and their cached tokens.
type Stats struct {
	Requests, RawISLTokens, CachedTokens uint64
}

// Rejection is a request turned away because its class's queue is at a limit (Dynamo's QueueRejected).
type Rejection struct {
	Class   string
	Kind    string // requests, raw_isl_tokens or cached_tokens
	Current uint64
	Limit   uint64
}

func (r *Rejection) Error() string {
	return fmt.Sprintf("policy class %q queue %s limit reached (current=%d, limit=%d)", r.Class, r.Kind, r.Current, r.Limit)
}

// Admit checks the class's limits, scaled by the number of workers, against what its queue holds before
// the new request is added: the request that crosses a limit is accepted, the next one is rejected.
func (c *Class) Admit(st Stats, workers int) *Rejection {
	for _, l := range [...]struct {
		kind    string
		current uint64
		limit   Opt
	}{{"requests", st.Requests, c.RequestLimitPerWorker}, {"raw_isl_tokens", st.RawISLTokens, c.RawISLTokenLimitPerWorker},
		{"cached_tokens", st.CachedTokens, c.CachedTokenLimitPerWorker}} {
		if !l.limit.Set {
			continue
		}
		limit := satMul(l.limit.V, uint64(max(workers, 0)))
		if l.current >= limit {
			return &Rejection{Class: c.Name, Kind: l.kind, Current: l.current, Limit: limit}
		}
	}
	return nil
}

func satMul(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}

// Profile is one resolved profile: its classes and how a request is classified into one.
type Profile struct {
	// Classes in document order; a class index is a position here.
	Classes []Class

	synthetic     bool
	defaultFamily int
	families      map[string]int
	explicit      map[string]int
	buckets       []uint64 // min_tokens, strictly increasing from 0
	cells         []int    // cells[family*len(buckets)+bucket] is a class index
}

// Synthetic is the profile of a router without a policy document: one class named "default" that
// queues behind --router-queue-threshold (a fraction of max_num_batched_tokens) in --router-queue-policy
// order, with no limits.
func Synthetic(threshold scoring.OptFloat, qp scoring.QueuePolicy) *Profile {
	return &Profile{synthetic: true, Classes: []Class{{Name: SyntheticClass, QueuePolicy: qp, Quantum: 1,
		PrefillBusyThresholdFrac: threshold}}}
}

// IsSynthetic reports whether p is the single class of a router without a policy document.
func (p *Profile) IsSynthetic() bool { return p.synthetic }

// Direct returns the class a request is in without looking at the cache: the synthetic class, or the
// explicit class its header names. ok is false when classification needs the uncached ISL.
func (p *Profile) Direct(requested string) (class int, ok bool) {
	if p.synthetic {
		return 0, true
	}
	if requested == "" {
		return 0, false
	}
	class, ok = p.explicit[requested]
	return class, ok
}

// Classify returns the class of a request that asked for requested ("" none) and has uncached prompt
// tokens after the best cached prefix: an explicit class by name, else the requested family (or the
// default family when requested names none) in the bucket of uncached.
func (p *Profile) Classify(requested string, uncached int) int {
	if c, ok := p.Direct(requested); ok {
		return c
	}
	f, ok := p.families[requested]
	if !ok {
		f = p.defaultFamily
	}
	u := uint64(max(uncached, 0))
	b := sort.Search(len(p.buckets), func(i int) bool { return p.buckets[i] > u }) - 1
	return p.cells[f*len(p.buckets)+max(b, 0)]
}

// Config is a parsed policy document: the root profile and the per-model profiles.
type Config struct {
	root   *Profile
	models map[string]*Profile
}

// Profile returns the profile for model: its own when the document has one, else the root; nil when
// neither applies (the router then uses Synthetic).
func (c *Config) Profile(model string) *Profile {
	if c == nil {
		return nil
	}
	if p, ok := c.models[model]; ok && model != "" {
		return p
	}
	return c.root
}

// Models lists the model names that have their own profile, sorted.
func (c *Config) Models() []string {
	out := make([]string, 0, len(c.models))
	for m := range c.models {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}
