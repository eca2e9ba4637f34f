package frontend

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/workers/faultproxy"
)

// TestE2EQueueReleasesOnePerCapacity: through the HTTP router API of a real stack (simulated workers
// with real ZMQ events), five requests wait behind --router-queue-threshold 0 and leave one per freed
// capacity: each prefill_done lets exactly one through, in fcfs order, in wspt order, and with a strict
// tier first.
func TestE2EQueueReleasesOnePerCapacity(t *testing.T) {
	type queued struct {
		id   string
		body string // extra JSON fields
	}
	toks := func(from, n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprint(&b, from+i)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name   string
		policy scoring.QueuePolicy
		reqs   []queued
		want   []string
	}{
		{"fcfs", scoring.QueueFCFS,
			[]queued{{"q1", ""}, {"q2", ""}, {"q3", ""}, {"q4", ""}, {"q5", ""}},
			[]string{"q1", "q2", "q3", "q4", "q5"}},
		{"fcfs-priority", scoring.QueueFCFS,
			[]queued{{"q1", ""}, {"q2", ""}, {"q3", `,"priority":60`}, {"q4", ""}, {"q5", ""}},
			[]string{"q3", "q1", "q2", "q4", "q5"}},
		{"wspt", scoring.QueueWSPT,
			// Uncached prompt sizes 160, 16, 96, 48, 320 tokens: shortest first.
			[]queued{{"q1", "160"}, {"q2", "16"}, {"q3", "96"}, {"q4", "48"}, {"q5", "320"}},
			[]string{"q2", "q4", "q3", "q1", "q5"}},
		{"strict", scoring.QueueFCFS,
			[]queued{{"q1", ""}, {"q2", `,"priority":1000`}, {"q3", ""}, {"q4", `,"strict_priority":1`}, {"q5", `,"strict_priority":2`}},
			[]string{"q5", "q4", "q2", "q1", "q3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One worker: with threshold 0 it is busy while any request's prefill is outstanding, so each
			// prefill_done frees exactly one capacity. (With several workers Dynamo's rule releases while
			// some worker is not busy, and the cost may still pick a busy one, letting a second through.)
			s := startStack(t, stackOpts{workers: 1, speedup: 100, scoring: func(c *scoring.Config) {
				c.QueueThreshold, c.QueuePolicy = scoring.Some(0), tc.policy
			}})
			t.Cleanup(s.router.FailWaiting) // a failed run leaves no request waiting behind the server's shutdown
			if code, body := call(t, "POST", s.base+"/v1/route", fmt.Sprintf(`{"request_id":"a","tokens":[%s]}`, toks(1000, 64))); code != 200 {
				t.Fatalf("route a: %d %v", code, body)
			}
			released := make(chan string, len(tc.reqs))
			for k, q := range tc.reqs {
				body := fmt.Sprintf(`{"request_id":%q,"tokens":[%s]%s}`, q.id, toks(10000*(k+1), 32), q.body)
				if tc.policy == scoring.QueueWSPT {
					var n int
					fmt.Sscan(q.body, &n)
					body = fmt.Sprintf(`{"request_id":%q,"tokens":[%s]}`, q.id, toks(10000*(k+1), n))
				}
				go func() {
					resp, err := http.Post(s.base+"/v1/route", "application/json", strings.NewReader(body))
					if err != nil {
						released <- fmt.Sprintf("%s: %v", q.id, err)
						return
					}
					raw, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						released <- fmt.Sprintf("%s: %d %s", q.id, resp.StatusCode, raw)
						return
					}
					released <- q.id
				}()
				// Arrivals in order: the next request is sent once this one waits.
				testutil.Eventually(t, q.id+" queued", func() bool { return s.router.Waiting() == k+1 })
				time.Sleep(time.Millisecond) // distinct arrival times for FCFS keys with no priority
			}
			holder := "a"
			for i, want := range tc.want {
				if code, _ := call(t, "POST", s.base+"/v1/route/"+holder+"/prefill_done", ""); code != 200 {
					t.Fatalf("prefill_done %s: %d", holder, code)
				}
				// Exactly one request left the queue, and it is the expected one.
				if got := s.router.Waiting(); got != len(tc.want)-i-1 {
					t.Fatalf("after prefill_done of %s: %d waiting, want %d", holder, got, len(tc.want)-i-1)
				}
				select {
				case got := <-released:
					if got != want {
						t.Fatalf("release %d: %s, want %s (order %v)", i, got, want, tc.want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("release %d: nothing released", i)
				}
				holder = want
			}
		})
	}
}

// TestE2EPredictedTTLBeatsEventDelay: with every worker's KV events held back 500 ms by a fault proxy, a
// repeated prompt sent right after the first lands on the same worker when --router-predicted-ttl-secs
// is set (the side index knows the first decision); without it the repeat sees no overlap and the tie
// between the idle workers is drawn at random.
func TestE2EPredictedTTLBeatsEventDelay(t *testing.T) {
	run := func(t *testing.T, ttl time.Duration, hold time.Duration) (same, total int) {
		seed := uint64(7)
		s := startStack(t, stackOpts{workers: 2, speedup: 100, seed: &seed,
			eventFaults: &faultproxy.Faults{Delay: 1, DelayFor: hold},
			scoring:     func(c *scoring.Config) { c.PredictedTTL = scoring.SomeDuration(ttl) }})
		for i := range 8 {
			prompt := longText(fmt.Sprintf("repeat%d", i), 120)
			first := s.post(t, "/v1/chat/completions", chatBody(s.name, prompt, ""))
			second := s.post(t, "/v1/chat/completions", chatBody(s.name, prompt, ""))
			if first.status != 200 || second.status != 200 {
				t.Fatalf("pair %d: %d %d %s %s", i, first.status, second.status, first.raw, second.raw)
			}
			total++
			if second.worker == first.worker {
				same++
				if ttl > 0 && second.overlap == "0" {
					t.Fatalf("pair %d: same worker but no predicted overlap", i)
				}
			}
		}
		return same, total
	}
	t.Run("predicted", func(t *testing.T) {
		if same, total := run(t, 5*time.Second, 500*time.Millisecond); same != total {
			t.Fatalf("%d of %d repeats on the first one's worker, want all", same, total)
		}
	})
	t.Run("without", func(t *testing.T) {
		// Events held long enough that none arrives during the run; with this seed some repeat is drawn
		// onto the other idle worker.
		if same, total := run(t, 0, time.Minute); same == total {
			t.Fatalf("all %d repeats on the first one's worker without prediction: the test shows nothing", total)
		}
	})
}
