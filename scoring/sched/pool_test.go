package sched

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/policy"
)

// TestPoolCountsAsAPass: each policy class's pool counts equal a pass over the fleet after every step of
// random routes, first tokens, frees, KV usage and capacity reports, health changes, workers joining,
// leaving and joining again, and configuration changes (the router's busy thresholds, the synthetic
// class's queue threshold, the queue turned off and on); and a pinned request's check over its worker's
// targets equals the pass with the pin. Three classes of a policy document with absolute, fractional and
// ratio rules, and the synthetic class.
func TestPoolCountsAsAPass(t *testing.T) {
	doc := `
default_policy_family: a
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: a, policy_family: a, cache_bucket: all, quantum: 100, prefill_busy_threshold: 300}
  - {name: b, policy_family: b, cache_bucket: all, quantum: 100, prefill_busy_threshold_frac: 0.05}
  - {name: c, policy_family: c, cache_bucket: all, quantum: 100, prefill_busy_threshold: 100, busy_worker_ratio: 0.5}
`
	pc, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	for _, profile := range []*policy.Profile{pc.Profile(""), nil} {
		rng := rand.New(rand.NewPCG(8, 8))
		cfg := scoring.DefaultConfig()
		cfg.Mode, cfg.BlockSize = scoring.ModeKV, 1
		cfg.QueueThreshold = scoring.Some(0.1)
		m, now := stepFleet(t, cfg, 3, profile)
		var active []string
		checked := 0
		for step := range 3000 {
			id := fleetStep(t, m, rng, step, &now, &active)
			for ci := range m.pq.classes {
				c := &m.pq.classes[ci]
				if !m.pq.on {
					continue
				}
				busy, eligible := m.poolPass(c, 0, len(m.list), nil, false, avoid{})
				if c.pool.busy != busy || c.pool.eligible != eligible {
					t.Fatalf("step %d, class %d: counts %d busy of %d eligible, a pass finds %d of %d", step, ci, c.pool.busy, c.pool.eligible, busy, eligible)
				}
				pin := scoring.WorkerKey{WorkerID: id, DPRank: uint32(rng.IntN(3))}
				pinRank := rng.IntN(2) == 0
				want := c.cls.PoolBusy(m.poolPass(c, 0, len(m.list), &pin, pinRank, avoid{}))
				if got := m.poolBusy(c, &pin, pinRank, avoid{}); got != want {
					t.Fatalf("step %d, class %d: pinned to %v (rank %v): busy %v, a pass says %v", step, ci, pin, pinRank, got, want)
				}
				if busy > 0 {
					checked++
				}
			}
		}
		if checked == 0 {
			t.Fatal("no class ever had a busy worker: the test did not reach the rule")
		}
	}
}

// seededMachine is a machine on cfg with no index, its random draws seeded with seed.
func seededMachine(tb testing.TB, cfg scoring.Config, seed uint64) *Machine {
	tb.Helper()
	m, err := New(cfg, nil, Options{Seed: &seed})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// stepFleet is the machine fleetStep drives: cfg, seeded, with the policy profile (nil: none), and
// workers 1 to 12 of 1 to 3 ranks, every other one with a KV capacity; and the time it starts at.
func stepFleet(t *testing.T, cfg scoring.Config, seed uint64, profile *policy.Profile) (*Machine, time.Time) {
	t.Helper()
	m, err := New(cfg, nil, Options{Seed: &seed, Policy: profile})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1, 0)
	for id := range 12 {
		m.AddWorker(now, Worker{ID: uint64(id + 1), DPRanks: 1 + id%3, TotalKVBlocks: 64 * (id % 2)})
	}
	return m, now
}

// fleetStep makes one random change to m, as a fleet lives it: a route (a policy class drawn), a first
// token, a free, a KV usage or capacity report, a health change, a worker leaving or joining (again),
// a configuration change (busy thresholds, the queue threshold, the queue off and on) or time passing
// with a tick. active holds the routed requests; it returns the worker id the step drew.
func fleetStep(t *testing.T, m *Machine, rng *rand.Rand, step int, now *time.Time, active *[]string) uint64 {
	t.Helper()
	id := uint64(1 + rng.IntN(14))
	switch op := rng.IntN(20); {
	case op < 7:
		r := fmt.Sprint("r", step)
		d, queued, err := m.Route(*now, &Request{ID: r, Local: prompt(uint64(step%9), 1+rng.IntN(50)), ISL: 10 + rng.IntN(600), Matched: true,
			PolicyClass: []string{"", "a", "b", "c"}[rng.IntN(4)]})
		if err == nil && !queued && d.Worker.WorkerID != 0 {
			*active = append(*active, r)
		}
	case op < 10 && len(*active) > 0:
		_, _ = m.PrefillDone(*now, (*active)[rng.IntN(len(*active))])
	case op < 13 && len(*active) > 0:
		k := rng.IntN(len(*active))
		_, _ = m.Free(*now, (*active)[k])
		(*active)[k] = (*active)[len(*active)-1]
		*active = (*active)[:len(*active)-1]
	case op < 14:
		m.SetKVUsage(scoring.WorkerKey{WorkerID: id, DPRank: uint32(rng.IntN(3))}, uint64(rng.IntN(80)))
	case op < 15:
		m.SetCapacity(id, 16+rng.IntN(100), 200+rng.IntN(4000))
	case op < 16:
		m.SetHealthy(*now, id, rng.IntN(3) != 0)
	case op < 17:
		m.RemoveWorker(*now, id)
	case op < 18:
		m.AddWorker(*now, Worker{ID: id, DPRanks: 1 + rng.IntN(3)})
	case op < 19:
		c := *m.cfg
		c.ActiveDecodeBlocksThreshold, c.ActivePrefillTokensThreshold = scoring.OptFloat{}, scoring.OptFloat{}
		if rng.IntN(2) == 0 {
			c.ActiveDecodeBlocksThreshold = scoring.Some(0.3 + rng.Float64()/2)
		}
		if rng.IntN(2) == 0 {
			c.ActivePrefillTokensThreshold = scoring.Some(float64(200 + rng.IntN(800)))
		}
		c.QueueThreshold = scoring.OptFloat{}
		if rng.IntN(4) != 0 {
			c.QueueThreshold = scoring.Some(0.02 + rng.Float64()/5)
		}
		if _, err := m.SetConfig(*now, c); err != nil {
			t.Fatal(err)
		}
	default:
		*now = now.Add(time.Duration(rng.IntN(500)) * time.Millisecond)
		m.Tick(*now)
	}
	return id
}

// BenchmarkPoolBusy: what a first token or a free costs the queue while requests wait and the pool is
// busy (the synthetic class, --router-queue-threshold): one drain, which asks the class's pool rule and
// finds it busy, over W workers each with a long prefill in flight.
func BenchmarkPoolBusy(b *testing.B) {
	for _, w := range []int{1024, 8192} {
		b.Run(fmt.Sprintf("W=%d", w), func(b *testing.B) {
			cfg := scoring.DefaultConfig()
			cfg.Mode, cfg.BlockSize = scoring.ModeKV, 16
			cfg.QueueThreshold = scoring.Some(0.1)
			m, err := New(cfg, nil, Options{})
			if err != nil {
				b.Fatal(err)
			}
			now := time.Unix(0, 0)
			for id := range w {
				m.AddWorker(now, Worker{ID: uint64(id)})
			}
			queued := 0
			for r := 0; queued < 8; r++ {
				_, q, err := m.Route(now, &Request{ID: fmt.Sprint("r", r), ISL: 100_000, Matched: true})
				if err != nil {
					b.Fatal(err)
				}
				if q {
					queued++
				}
			}
			b.ResetTimer()
			for range b.N {
				if rel := m.drain(now); len(rel) != 0 {
					b.Fatalf("%d released: the pool is not busy", len(rel))
				}
			}
		})
	}
}
