package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/policy"
)

// classMachine is a machine over one worker with the root profile of doc (block size 1: one block per
// uncached token).
func classMachine(t *testing.T, doc string) *Machine {
	t.Helper()
	pc, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	cfg := scoring.DefaultConfig()
	cfg.Mode, cfg.BlockSize = scoring.ModeKV, 1
	seed := uint64(1)
	m, err := New(cfg, nil, Options{Seed: &seed, Policy: pc.Profile("")})
	if err != nil {
		t.Fatal(err)
	}
	m.AddWorker(time.Unix(0, 0), Worker{ID: 1})
	return m
}

// req is a request of n uncached tokens (distinct blocks) in class.
func req(id string, n int, class string) *Request {
	local := make([]uint64, n)
	for i := range local {
		local[i] = rand.Uint64()
	}
	return &Request{ID: id, Local: local, ISL: n, Matched: true, PolicyClass: class}
}

// drrMachine queues 600 requests of random sizes (1..400 uncached tokens), 200 in each of three classes
// with quanta 1:2:3 that treat the worker as busy above threshold prefill tokens, behind a first
// request of blocker tokens. It returns the machine and each request's class.
func drrMachine(t *testing.T, threshold, blocker int) (*Machine, map[string]string) {
	m := classMachine(t, fmt.Sprintf(`
default_policy_family: a
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: a, policy_family: a, cache_bucket: all, quantum: 100, prefill_busy_threshold: %d}
  - {name: b, policy_family: b, cache_bucket: all, quantum: 200, prefill_busy_threshold: %d}
  - {name: c, policy_family: c, cache_bucket: all, quantum: 300, prefill_busy_threshold: %d}
`, threshold, threshold, threshold))
	now := time.Unix(1, 0)
	if _, q, err := m.Route(now, req("blocker", blocker, "")); q || err != nil {
		t.Fatalf("first request: queued %v, %v", q, err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	class := map[string]string{}
	for i := range 600 {
		c := string(rune('a' + i%3))
		id := fmt.Sprintf("%s%d", c, i)
		class[id] = c
		if _, q, err := m.Route(now, req(id, 1+rng.IntN(400), c)); !q || err != nil {
			t.Fatalf("%s: queued %v, %v", id, q, err)
		}
	}
	return m, class
}

// shares checks the prefill tokens served per class against the quanta 1:2:3: within tol of them, and
// in their order.
func shares(t *testing.T, served map[string]int, tol float64) {
	t.Helper()
	total := served["a"] + served["b"] + served["c"]
	if !(served["a"] < served["b"] && served["b"] < served["c"]) {
		t.Errorf("served tokens %v are not in the quanta's order", served)
	}
	for i, c := range []string{"a", "b", "c"} {
		share, want := float64(served[c])/float64(total), float64(i+1)/6
		if share < want*(1-tol) || share > want*(1+tol) {
			t.Errorf("class %s got %.3f of the prefill tokens, want %.3f ± %.0f%% (%v)", c, share, want, tol*100, served)
		}
	}
}

// TestDRRShareFollowsQuanta: when freed capacity lets many requests through at once, deficit round robin
// serves the backlogged classes prefill tokens in proportion to their quanta.
func TestDRRShareFollowsQuanta(t *testing.T) {
	m, class := drrMachine(t, 40_000, 40_001)
	rel, err := m.PrefillDone(time.Unix(1, 0), "blocker")
	if err != nil || len(rel) < 150 || len(rel) > 250 {
		t.Fatalf("one burst released %d requests: %v", len(rel), err)
	}
	served := map[string]int{}
	for _, r := range rel {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		served[class[r.ID]] += r.ISL
	}
	shares(t, served, 0.1)
}

// TestDRROneAtATime: released one request per freed capacity, a class that sends on credit left from
// its last turn is not granted a quantum for that visit (Dynamo's ring: carried credit is spent before a
// new quantum, and the turn passes on after each release), which flattens the shares; they still follow
// the quanta's order and stay within a third of them.
func TestDRROneAtATime(t *testing.T) {
	m, class := drrMachine(t, 0, 8)
	served := map[string]int{}
	cur := "blocker"
	for range 300 { // well before any class runs dry (200 requests each)
		rel, err := m.PrefillDone(time.Unix(1, 0), cur)
		if err != nil || len(rel) != 1 || rel[0].Err != nil {
			t.Fatalf("prefill done %s: %v %+v", cur, err, rel)
		}
		cur = rel[0].ID
		served[class[cur]] += rel[0].ISL
	}
	shares(t, served, 0.34)
}

// TestQueueLimitsScaleWithWorkers: a class's per-worker request limit is multiplied by the workers;
// a cancelled request gives its place back.
func TestQueueLimitsScaleWithWorkers(t *testing.T) {
	m := classMachine(t, `
default_policy_family: a
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: a, policy_family: a, cache_bucket: all, quantum: 1, prefill_busy_threshold: 0, request_queue_limit_per_worker: 1}
`)
	now := time.Unix(1, 0)
	m.AddWorker(now, Worker{ID: 2})
	for _, id := range []string{"x", "y"} {
		if _, q, err := m.Route(now, req(id, 4, "")); q || err != nil {
			t.Fatalf("%s: queued %v, %v", id, q, err)
		}
	}
	for _, id := range []string{"q1", "q2"} { // limit 1 × 2 workers
		if _, q, err := m.Route(now, req(id, 4, "")); !q || err != nil {
			t.Fatalf("%s: queued %v, %v", id, q, err)
		}
	}
	_, _, err := m.Route(now, req("q3", 4, ""))
	var rej *policy.Rejection
	if !errors.Is(err, ErrQueueRejected) || !errors.As(err, &rej) || rej.Kind != "requests" || rej.Limit != 2 {
		t.Fatalf("third queued request: %v", err)
	}
	if !m.Cancel("q1") {
		t.Fatal("q1 was not waiting")
	}
	if _, q, err := m.Route(now, req("q3", 4, "")); !q || err != nil {
		t.Fatalf("after a cancel: queued %v, %v", q, err)
	}
	if got := m.Classes(nil)[0].Requests; got != 2 {
		t.Fatalf("class holds %d requests, want 2", got)
	}
}

// TestSetConfigKeepsWaiting: without a policy document, changing the queue threshold while requests
// wait keeps them queued (and a looser threshold releases them).
func TestSetConfigKeepsWaiting(t *testing.T) {
	cfg := scoring.DefaultConfig()
	cfg.Mode, cfg.BlockSize, cfg.QueueThreshold = scoring.ModeKV, 1, scoring.Some(0)
	m, err := New(cfg, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1, 0)
	m.AddWorker(now, Worker{ID: 1, MaxNumBatchedTokens: 100})
	if _, q, err := m.Route(now, req("a", 10, "")); q || err != nil {
		t.Fatalf("a: %v %v", q, err)
	}
	if _, q, err := m.Route(now, req("b", 10, "")); !q || err != nil {
		t.Fatalf("b: %v %v", q, err)
	}
	cfg.QueueThreshold = scoring.Some(0.05) // still busy: 10 > 5
	if rel, err := m.SetConfig(now, cfg); err != nil || len(rel) != 0 || m.QueueLen() != 1 {
		t.Fatalf("tighter threshold: %v %v, %d waiting", rel, err, m.QueueLen())
	}
	cfg.QueuePolicy = scoring.QueueWSPT
	if _, err := m.SetConfig(now, cfg); !errors.Is(err, scoring.ErrBadConfig) {
		t.Fatalf("policy change while waiting: %v", err)
	}
	cfg.QueuePolicy, cfg.QueueThreshold = scoring.QueueFCFS, scoring.Some(0.5) // 10 ≤ 50: room
	rel, err := m.SetConfig(now, cfg)
	if err != nil || len(rel) != 1 || rel[0].ID != "b" || m.QueueLen() != 0 {
		t.Fatalf("looser threshold: %+v %v", rel, err)
	}
}
