package natsplane

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/workers/registry"
)

// BenchmarkRouteFrontends measures routing throughput of F router cores in one process on the same 8
// workers, with and without replica sync over NATS. One op is Route + PrefillDone + Free of one 1,024-token request on
// one frontend (frontends taken in turn, b.RunParallel over GOMAXPROCS goroutines); with sync each op also
// publishes 3 load events that the other F−1 frontends apply. Reports routes/s and the sync events
// applied per op.
func BenchmarkRouteFrontends(b *testing.B) {
	for _, m := range []struct {
		fr   int
		sync bool
	}{{1, false}, {3, false}, {3, true}} {
		fr := m.fr
		b.Run(fmt.Sprintf("F=%d/sync=%v", fr, m.sync), func(b *testing.B) {
			s, err := StartServer(ServerConfig{StoreDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(s.Shutdown)
			var rs []*router.Router
			var syncs []*ReplicaSync
			for i := 0; i < fr; i++ {
				cfg := router.DefaultConfig(testBlockSize)
				cfg.TickInterval = -1
				var sy *ReplicaSync
				if m.sync {
					sy = NewReplicaSync(connect(b, s.ClientURL()), ReplicaConfig{RouterID: fmt.Sprint(i)})
					b.Cleanup(sy.Stop)
					cfg.OnLoad = sy.Observe
					syncs = append(syncs, sy)
				}
				r, err := router.New(actors.NewSystem(nil), cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(r.Stop)
				for w := uint64(1); w <= 8; w++ {
					if err := r.AddWorker(registry.Spec{ID: w, URL: "http://127.0.0.1:1", BlockSize: testBlockSize}); err != nil {
						b.Fatal(err)
					}
				}
				if sy != nil {
					if err := sy.Start(r); err != nil {
						b.Fatal(err)
					}
				}
				rs = append(rs, r)
			}
			p := newPrompts(11, 8)
			var toks [][]uint32
			for i := 0; i < 256; i++ {
				t := p.next()
				for len(t) < 1024 {
					t = append(t, uint32(len(t)))
				}
				toks = append(toks, t[:1024])
			}
			var next atomicCounter
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := next.add()
					r := rs[n%uint64(fr)]
					id := fmt.Sprintf("r%d", n)
					if _, err := r.Route(context.Background(), &router.RouteRequest{ID: id, Tokens: toks[n%uint64(len(toks))]}); err != nil {
						b.Fatal(err)
					}
					_ = r.PrefillDone(id)
					_ = r.Free(id)
				}
			})
			el := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/el.Seconds(), "routes/s")
			if len(syncs) > 0 {
				var applied, dropped uint64
				for _, sy := range syncs {
					st := sy.Stats()
					applied += st.Applied
					dropped += st.Dropped + st.RemoteDropped
				}
				b.ReportMetric(float64(applied)/float64(b.N), "sync-applied/op")
				b.ReportMetric(float64(dropped), "sync-dropped")
			}
		})
	}
}
