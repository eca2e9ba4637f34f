package worker

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/workers/registry"
)

// BenchmarkScrape: one Prometheus scrape of the fleet's event-plane metrics (Collector) with W workers
// registered without KV events.
func BenchmarkScrape(b *testing.B) {
	for _, w := range []int{1024, 8192} {
		b.Run(fmt.Sprintf("W=%d", w), func(b *testing.B) {
			system := actors.NewSystem(nil)
			defer system.Shutdown()
			index, err := indexer.New(system, indexer.DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			defer index.Stop()
			f, err := NewFleet(system, index, DefaultConfig(testBlockSize))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Stop()
			for id := range w {
				if err := f.Add(registry.Spec{ID: uint64(id + 1), URL: fmt.Sprintf("http://10.0.%d.%d:8000", id>>8, id&255)}); err != nil {
					b.Fatal(err)
				}
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(f.Collector())
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				mfs, err := reg.Gather()
				if err != nil || len(mfs) == 0 {
					b.Fatalf("gathered %d families: %v", len(mfs), err)
				}
			}
		})
	}
}
