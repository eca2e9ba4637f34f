package sched

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
)

// BenchmarkRemoveWorker: a worker leaving a fleet of W, whose workers have A active requests each on
// average, and joining again (a join appends its views). leave-us is the leave alone: the time it holds
// the machine while decisions wait.
func BenchmarkRemoveWorker(b *testing.B) {
	for _, c := range []struct{ workers, active int }{{1024, 0}, {1024, 8}, {8192, 0}, {8192, 8}} {
		b.Run(fmt.Sprintf("W=%d/A=%d", c.workers, c.active), func(b *testing.B) {
			m, now := kvMachine(b, c.workers), time.Unix(0, 0)
			for r := range c.workers * c.active {
				if _, _, err := m.Route(now, &Request{ID: strconv.Itoa(r), ISL: 100, Matched: true}); err != nil {
					b.Fatal(err)
				}
			}
			var leave time.Duration
			b.ResetTimer()
			for i := range b.N {
				id := uint64(i*7919) % uint64(c.workers)
				t0 := time.Now()
				m.RemoveWorker(now, id)
				leave += time.Since(t0)
				m.AddWorker(now, Worker{ID: id})
			}
			b.ReportMetric(float64(leave.Nanoseconds())/float64(b.N)/1e3, "leave-us")
		})
	}
}

// BenchmarkCapacityReport: one worker's capacity report (Machine.SetCapacity, sent after each health
// check of a worker registered without its capacity) in a fleet of W.
func BenchmarkCapacityReport(b *testing.B) {
	for _, w := range []int{1024, 8192} {
		b.Run(fmt.Sprintf("W=%d", w), func(b *testing.B) {
			m := kvMachine(b, w)
			b.ResetTimer()
			for i := range b.N {
				m.SetCapacity(uint64(i*7919)%uint64(w), 4000+i%2, 0)
			}
		})
	}
}

// BenchmarkTick: the machine's tick, once a second, over W workers with A active requests each (none
// stale): amortized over ticks, the stale-request sweeps included.
func BenchmarkTick(b *testing.B) {
	for _, c := range []struct{ workers, active int }{{1024, 8}, {8192, 8}} {
		b.Run(fmt.Sprintf("W=%d/A=%d", c.workers, c.active), func(b *testing.B) {
			m, now := kvMachine(b, c.workers), time.Unix(0, 0)
			for r := range c.workers * c.active {
				if _, _, err := m.Route(now, &Request{ID: strconv.Itoa(r), ISL: 100, Matched: true}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for range b.N {
				now = now.Add(time.Second)
				m.Tick(now)
			}
		})
	}
}

// BenchmarkRouteExcluding: a decision whose request excludes half of a fleet of W (a gateway's endpoint
// subset leaves the rest out), routed and freed.
func BenchmarkRouteExcluding(b *testing.B) {
	for _, w := range []int{1024, 8192} {
		b.Run(fmt.Sprintf("W=%d", w), func(b *testing.B) {
			m, now := kvMachine(b, w), time.Unix(0, 0)
			exclude := make([]uint64, 0, w/2)
			for i := 0; i < w; i += 2 {
				exclude = append(exclude, uint64(i))
			}
			b.ResetTimer()
			for i := range b.N {
				routeFree(b, m, now, Request{ID: strconv.Itoa(i), ISL: 100, Matched: true, Exclude: exclude})
			}
		})
	}
}

// BenchmarkRouteCosts: a decision returning its candidates' costs (a gateway picker naming fallback
// endpoints, return_routing), every row (top=0) or the cheapest T workers' rows (top=-1: no costs
// asked), over W workers carrying two active requests each, with nothing excluded (the vector kernel
// where the CPU has one) or half of the fleet excluded (the scalar loop); routed and freed.
func BenchmarkRouteCosts(b *testing.B) {
	for _, w := range []int{1024, 8192} {
		for _, half := range []bool{false, true} {
			for _, top := range []int{-1, 0, 3, 17} {
				b.Run(fmt.Sprintf("W=%d/excluding=%v/top=%d", w, half, top), func(b *testing.B) {
					m, now := kvMachine(b, w), time.Unix(0, 0)
					for r := range 2 * w {
						if _, _, err := m.Route(now, &Request{ID: "load-" + strconv.Itoa(r), ISL: 100 + r%700, Matched: true}); err != nil {
							b.Fatal(err)
						}
					}
					var exclude []uint64
					for i := 0; half && i < w; i += 2 {
						exclude = append(exclude, uint64(i))
					}
					b.ResetTimer()
					for i := range b.N {
						routeFree(b, m, now, Request{ID: strconv.Itoa(i), ISL: 300, Matched: true, ReturnCosts: top >= 0, CostsTop: max(top, 0),
							Exclude: exclude})
					}
				})
			}
		}
	}
}

// BenchmarkRouteSubset: a decision limited to a gateway's subset of S workers of W, given as the
// workers it may use (Only) or as every other worker excluded, or pinned to one worker (as session
// affinity pins), over W workers carrying A active requests each; routed and freed.
func BenchmarkRouteSubset(b *testing.B) {
	for _, c := range []struct{ workers, active int }{{1024, 0}, {8192, 0}, {8192, 2}} {
		for _, as := range []string{"exclude", "only", "pin"} {
			w := c.workers
			b.Run(fmt.Sprintf("W=%d/A=%d/S=4/as=%s", w, c.active, as), func(b *testing.B) {
				m, now := kvMachine(b, w), time.Unix(0, 0)
				loadFleet(b, m, now, c.active*w, true)
				subset := []uint64{7, uint64(w / 3), uint64(w / 2), uint64(w - 2)}
				var req Request
				switch as {
				case "pin":
					req.Pin = &scoring.WorkerKey{WorkerID: subset[1]}
				case "only":
					req.Only = subset
				default:
					for i := range w {
						if !slices.Contains(subset, uint64(i)) {
							req.Exclude = append(req.Exclude, uint64(i))
						}
					}
				}
				b.ResetTimer()
				for i := range b.N {
					req.ID, req.ISL, req.Matched = strconv.Itoa(i), 100, true
					if d := routeFree(b, m, now, req); !slices.Contains(subset, d.Worker.WorkerID) {
						b.Fatalf("routed to %v, out of the subset", d.Worker)
					}
				}
			})
		}
	}
}

// BenchmarkRouteOneUnhealthy: a decision in a fleet of W workers (two active requests each) where one
// worker is unhealthy (its health check failed; a large fleet mostly has one), or one worker excluded
// (a retry after it failed the request), or a busy threshold set that some workers are over, or none of
// these, by the kvroute cost or Dynamo's; routed and freed.
func BenchmarkRouteOneUnhealthy(b *testing.B) {
	for _, preset := range []scoring.Preset{scoring.PresetKVRoute, scoring.PresetDynamo} {
		for _, w := range []int{1024, 8192} {
			for _, as := range []string{"none", "unhealthy", "excluded", "busy"} {
				benchOneUnhealthy(b, preset, w, as)
			}
		}
	}
}

// benchOneUnhealthy is one case of BenchmarkRouteOneUnhealthy.
func benchOneUnhealthy(b *testing.B, preset scoring.Preset, w int, as string) {
	b.Run(fmt.Sprintf("%s/W=%d/%s", preset, w, as), func(b *testing.B) {
		m, now := kvMachine(b, w), time.Unix(0, 0)
		if preset != scoring.PresetKVRoute {
			cfg := *m.cfg
			cfg.Preset = preset
			if _, err := m.SetConfig(now, cfg); err != nil {
				b.Fatal(err)
			}
		}
		loadFleet(b, m, now, 2*w, false)
		var exclude []uint64
		switch as {
		case "unhealthy":
			m.SetHealthy(now, 5, false)
		case "excluded":
			exclude = []uint64{5}
		case "busy": // a busy threshold some workers are over
			cfg := *m.cfg
			cfg.ActivePrefillTokensThreshold = scoring.Some(1200)
			if _, err := m.SetConfig(now, cfg); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		for i := range b.N {
			routeFree(b, m, now, Request{ID: strconv.Itoa(i), ISL: 300, Matched: true, Exclude: exclude})
		}
	})
}

// loadFleet routes n requests onto m at now, which stay active: ISLs of 100 to 799 tokens, with short
// prompts (64 distinct ones) when prompts is set.
func loadFleet(b *testing.B, m *Machine, now time.Time, n int, prompts bool) {
	for r := range n {
		req := Request{ID: "load-" + strconv.Itoa(r), ISL: 100 + r%700, Matched: true}
		if prompts {
			req.Local = prompt(uint64(r%64), 8)
		}
		if _, _, err := m.Route(now, &req); err != nil {
			b.Fatal(err)
		}
	}
}

// routeFree routes req on m at now and frees it, and returns the decision.
func routeFree(b *testing.B, m *Machine, now time.Time, req Request) Decision {
	d, _, err := m.Route(now, &req)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Free(now, req.ID); err != nil {
		b.Fatal(err)
	}
	return d
}
