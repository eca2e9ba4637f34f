package sched

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
)

// replicaMachine is a fleet of w workers carrying a active requests each of its own and a of a peer
// router's (replica sync), and the peer's active list of them.
func replicaMachine(b *testing.B, w, a int) (*Machine, ActiveList) {
	m, now := kvMachine(b, w), time.Unix(0, 0)
	var peer ActiveList
	for i := range w {
		peer.Workers = append(peer.Workers, scoring.WorkerKey{WorkerID: uint64(i)})
	}
	for r := range w * a {
		if _, _, err := m.Route(now, &Request{ID: "chatcmpl-" + strconv.Itoa(r), ISL: 100, Matched: true}); err != nil {
			b.Fatal(err)
		}
		id, k := "peer-request-"+strconv.Itoa(r), scoring.WorkerKey{WorkerID: uint64(r % w)}
		if _, err := m.ApplyRemote(now, "peer", LoadEvent{Kind: LoadAdd, RequestID: id, Worker: k, ISL: 100}); err != nil {
			b.Fatal(err)
		}
		peer.Requests = append(peer.Requests, ActiveRequest{ID: id, Worker: k})
	}
	return m, peer
}

// part is how many targets actors/router's scheduler reads per hold of its lock for replica sync.
const part = 256

// BenchmarkActiveList: the machine's own active list (replica sync publishes one per core every list
// interval, taken under the scheduler's lock) with W workers and A requests each of its own and A of a
// peer's, read in parts of 256 targets as the router does. hold-us is a part's mean, max-hold-us the longest.
func BenchmarkActiveList(b *testing.B) {
	for _, c := range []struct{ workers, active int }{{1024, 8}, {8192, 8}} {
		b.Run(fmt.Sprintf("W=%d/A=%d", c.workers, c.active), func(b *testing.B) {
			m, _ := replicaMachine(b, c.workers, c.active)
			var hold, sum time.Duration
			holds := 0
			b.ResetTimer()
			for range b.N {
				n := 0
				for from := 0; from < c.workers; from += part {
					t0 := time.Now()
					n += len(m.ActiveList(from, part).Requests)
					d := time.Since(t0)
					sum, hold, holds = sum+d, max(hold, d), holds+1
				}
				if n != c.workers*c.active {
					b.Fatalf("%d requests listed", n)
				}
			}
			b.ReportMetric(float64(sum.Nanoseconds())/float64(holds)/1e3, "hold-us")
			b.ReportMetric(float64(hold.Nanoseconds())/1e3, "max-hold-us")
		})
	}
}

// BenchmarkReconcile: a peer's active list applied to a machine charging its W×A requests, all still
// listed (the steady state: nothing freed), the list whole or cut by workers into P messages (replica
// sync cuts a list at 256 KiB). locked-us is the time under the scheduler's lock per list, read in parts
// of 256 targets as the router does; hold-us is a hold's mean, max-hold-us the longest.
func BenchmarkReconcile(b *testing.B) {
	for _, c := range []struct{ workers, active, parts int }{{1024, 8, 1}, {8192, 8, 1}, {8192, 8, 8}} {
		b.Run(fmt.Sprintf("W=%d/A=%d/P=%d", c.workers, c.active, c.parts), func(b *testing.B) {
			m, peer := replicaMachine(b, c.workers, c.active)
			parts := make([]ActiveList, c.parts)
			for p := range parts {
				lo, hi := p*c.workers/c.parts, (p+1)*c.workers/c.parts
				parts[p].Workers = peer.Workers[lo:hi]
				for _, r := range peer.Requests {
					if int(r.Worker.WorkerID) >= lo && int(r.Worker.WorkerID) < hi {
						parts[p].Requests = append(parts[p].Requests, r)
					}
				}
			}
			now := time.Unix(0, 0)
			var locked, hold time.Duration
			holds := 0
			var ids []string
			b.ResetTimer()
			for range b.N {
				for _, l := range parts {
					ix := l.Index()
					ids = ids[:0]
					for lo := 0; lo < len(l.Workers); lo += part {
						t0 := time.Now()
						ids = m.Charged("peer", l.Workers[lo:min(lo+part, len(l.Workers))], ids)
						d := time.Since(t0)
						locked, hold, holds = locked+d, max(hold, d), holds+1
					}
					ids = ix.Unlisted("peer", ids)
					t1 := time.Now()
					if _, n := m.FreeRemote(now, ids); n != 0 {
						b.Fatalf("freed %d", n)
					}
					locked += time.Since(t1)
				}
			}
			b.ReportMetric(float64(locked.Nanoseconds())/float64(b.N)/1e3, "locked-us")
			b.ReportMetric(float64(locked.Nanoseconds())/float64(holds)/1e3, "hold-us")
			b.ReportMetric(float64(hold.Nanoseconds())/1e3, "max-hold-us")
		})
	}
}
