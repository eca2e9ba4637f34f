package sched

import (
	"errors"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// sharedMachine is a kvroute-preset machine over n workers (block size 1: a block per token), with
// predict-on-route at ttl (0: off).
func sharedMachine(t *testing.T, ttl time.Duration, n int) *Machine {
	t.Helper()
	cfg := scoring.DefaultConfig()
	cfg.Mode, cfg.BlockSize = scoring.ModeKV, 1
	cfg.PredictedTTL = scoring.SomeDuration(ttl)
	m := seededMachine(t, cfg, 1)
	for id := range n {
		m.AddWorker(time.Unix(0, 0), Worker{ID: uint64(id + 1)})
	}
	return m
}

// prompt is the shared prefix's n blocks (family 0) followed by a suffix of 100 blocks of its own.
func prompt(family uint64, shared int) []uint64 {
	local := make([]uint64, shared+100)
	for i := range local {
		local[i] = uint64(i+1) * 1000003
		if i >= shared {
			local[i] ^= family << 32
		}
	}
	return local
}

// onWorker1 is the primary index's report that worker 1 holds blocks of the prompt.
func onWorker1(blocks uint32) []prefix.Score {
	return []prefix.Score{{Worker: prefix.WorkerKey(scoring.WorkerKey{WorkerID: 1}), Blocks: blocks}}
}

// TestSharedPrefixReplicates: worker 1 holds a 1,000-block system prompt (the engines reported it) and
// every request shares it with its own 100-block question. While the requests queue on worker 1, the
// prompt is in use there: a copy on idle worker 2 is a replica, priced at the fleet's load and credited
// with the wait it spares the sharers to come, so the queue moves once it is worth about one prefill of
// the prompt. Priced as a dead copy (8 × 1,000 tokens) the queue would grow to ~9,000 tokens (90
// requests) first: the herding trap.
func TestSharedPrefixReplicates(t *testing.T) {
	m := sharedMachine(t, 0, 2)
	now := time.Unix(1, 0)
	for i := range 30 {
		d, _, err := m.Route(now, &Request{ID: string(rune('a' + i)), Local: prompt(uint64(i+1), 1000), ISL: 1100,
			Scores: onWorker1(1000), Matched: true})
		if err != nil {
			t.Fatal(err)
		}
		if d.Worker.WorkerID == 2 {
			if i < 5 {
				t.Fatalf("request %d left the holder with only %d queued requests", i, i)
			}
			t.Logf("request %d replicated the prompt to worker 2", i)
			return
		}
	}
	t.Fatal("30 requests queued on worker 1 behind a shared prompt; none replicated it to idle worker 2")
}

// TestIdlePrefixStays: the same prompt cached idle on worker 1 (no active request there shares it: a
// conversation's earlier turn), behind one unrelated request of 2,000 tokens pinned there (more queued
// prefill than moved the shared prompt above, at a lower load). Copying it to idle worker 2 would leave
// a dead copy: the request stays.
func TestIdlePrefixStays(t *testing.T) {
	m := sharedMachine(t, 0, 2)
	now := time.Unix(1, 0)
	pin := scoring.WorkerKey{WorkerID: 1}
	long := make([]uint64, 2000)
	for i := range long {
		long[i] = uint64(i+1) * 7919
	}
	if _, _, err := m.Route(now, &Request{ID: "other", Local: long, ISL: 2000, Pin: &pin, Matched: true}); err != nil {
		t.Fatal(err)
	}
	d, _, err := m.Route(now, &Request{ID: "turn", Local: prompt(99, 1000), ISL: 1100, Scores: onWorker1(1000), Matched: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Worker.WorkerID != 1 {
		t.Fatalf("the turn left its idle cached prefix for worker %d", d.Worker.WorkerID)
	}
}

// TestFanoutCopiesStay: best-of-N copies of one prompt arrive together; worker 1 holds its first 200
// blocks (the engines reported them), the other 900 are fresh. After the first copy, the whole prompt is
// predicted on worker 1 and in use there, but only the 200 blocks are settled: the copies ride on the
// first copy's prefill of the rest, and a copy of that part elsewhere is a dead copy, not a replica.
// All eight go to worker 1, on a fleet of eight where the load (the first copies in prefill) is low.
func TestFanoutCopiesStay(t *testing.T) {
	m := sharedMachine(t, 5*time.Second, 8)
	now := time.Unix(1, 0)
	local := prompt(7, 1000)
	for i := range 8 {
		d, _, err := m.Route(now, &Request{ID: string(rune('a' + i)), Local: local, ISL: 1100, Scores: onWorker1(200), Matched: true})
		if err != nil {
			t.Fatal(err)
		}
		if d.Worker.WorkerID != 1 {
			t.Fatalf("copy %d went to worker %d", i, d.Worker.WorkerID)
		}
	}
}

// TestReplicaCountsExistingCopies: the shared prompt is on workers 1 and 2, and ten requests sharing it
// queue on worker 1 (pinned). A copy on idle worker 3 would spare the next sharers nothing against worker
// 2's copy, which has no queue: the next request goes to worker 2, not to a third copy.
func TestReplicaCountsExistingCopies(t *testing.T) {
	m := sharedMachine(t, 0, 3)
	now := time.Unix(1, 0)
	both := append(onWorker1(1000), prefix.Score{Worker: prefix.WorkerKey(scoring.WorkerKey{WorkerID: 2}), Blocks: 1000})
	pin := scoring.WorkerKey{WorkerID: 1}
	for i := range 10 {
		if _, _, err := m.Route(now, &Request{ID: string(rune('a' + i)), Local: prompt(uint64(i+1), 1000), ISL: 1100,
			Scores: both, Matched: true, Pin: &pin}); err != nil {
			t.Fatal(err)
		}
	}
	d, _, err := m.Route(now, &Request{ID: "next", Local: prompt(99, 1000), ISL: 1100, Scores: both, Matched: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Worker.WorkerID != 2 {
		t.Fatalf("went to worker %d, want worker 2's idle copy", d.Worker.WorkerID)
	}
}

// TestCalibratedFilters drives the kvroute cost's filters (exclusions, the pin, busy thresholds) through
// the machine's dry decision: a busy worker is listed as busy among the returned costs, in target order,
// and never chosen, and each way of filtering every worker out gives Select's error.
func TestCalibratedFilters(t *testing.T) {
	cfg := scoring.DefaultConfig()
	cfg.Mode, cfg.BlockSize = scoring.ModeKV, 1
	cfg.ActivePrefillTokensThreshold = scoring.Some(500)
	m := seededMachine(t, cfg, 1)
	now := time.Unix(0, 0)
	for id := range 3 {
		m.AddWorker(now, Worker{ID: uint64(id + 1)})
	}
	// 1,100 prefill tokens pinned to worker 2: over the threshold of 500.
	if _, _, err := m.Route(now, &Request{ID: "load", Local: prompt(1, 1000), ISL: 1100, Matched: true,
		Pin: &scoring.WorkerKey{WorkerID: 2}}); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		d, err := m.Query(now, &Request{ID: "q", Local: prompt(2, 1000), ISL: 1100, Matched: true, ReturnCosts: true})
		if err != nil {
			t.Fatal(err)
		}
		if d.Worker.WorkerID == 2 {
			t.Fatal("the busy worker was chosen")
		}
		if len(d.Candidates) != 3 {
			t.Fatalf("costs %+v: want the three workers", d.Candidates)
		}
		for i, c := range d.Candidates {
			if c.Worker.WorkerID != uint64(i+1) || c.Busy != (i == 1) {
				t.Fatalf("cost %d is %+v: want worker %d, busy only for worker 2", i, c, i+1)
			}
		}
	}
	for _, c := range []struct {
		name    string
		pin     *scoring.WorkerKey
		exclude []uint64
		want    error
	}{
		{"pinned to the busy worker", &scoring.WorkerKey{WorkerID: 2}, nil, scoring.ErrPinnedBusy},
		{"pinned to no worker", &scoring.WorkerKey{WorkerID: 9}, nil, scoring.ErrPinnedNotFound},
		{"all but the busy worker excluded", nil, []uint64{1, 3}, scoring.ErrAllBusy},
		{"every worker excluded", nil, []uint64{1, 2, 3}, scoring.ErrNoWorkers},
	} {
		_, err := m.Query(now, &Request{ID: "q", Local: prompt(2, 1000), ISL: 1100, Matched: true, Pin: c.pin,
			Exclude: c.exclude})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	// Pinned to an idle worker, the pin decides.
	d, err := m.Query(now, &Request{ID: "q", Local: prompt(2, 1000), ISL: 1100, Matched: true,
		Pin: &scoring.WorkerKey{WorkerID: 3}})
	if err != nil || d.Worker.WorkerID != 3 {
		t.Fatalf("pinned to worker 3: %v, %v", d.Worker, err)
	}
}

// TestSoleSharerContextStays: worker 1 runs a conversation's previous turn (its 1,000-block context,
// reported by the engines) behind 1,200 tokens of another request's prefill; the next turn extends the
// context by 100 blocks. Only that one request shares the context, so a copy on an idle worker would serve
// no one once it ends: priced at the fleet's load (2 requests in prefill over 8 workers, 0.25 a token)
// the turn would move as soon as ~830 tokens queued; at scoring.SoleSharerWeight it waits for ~2,000.
func TestSoleSharerContextStays(t *testing.T) {
	m := sharedMachine(t, 0, 8)
	now := time.Unix(1, 0)
	pin := scoring.WorkerKey{WorkerID: 1}
	ctx := prompt(5, 1000)[:1000]
	if _, _, err := m.Route(now, &Request{ID: "prev", Local: ctx, ISL: 1000, Scores: onWorker1(1000), Matched: true, Pin: &pin}); err != nil {
		t.Fatal(err)
	}
	other := make([]uint64, 1200)
	for i := range other {
		other[i] = uint64(i+1) * 7919
	}
	if _, _, err := m.Route(now, &Request{ID: "other", Local: other, ISL: 1200, Pin: &pin, Matched: true}); err != nil {
		t.Fatal(err)
	}
	d, _, err := m.Route(now, &Request{ID: "turn", Local: prompt(5, 1000), ISL: 1100, Scores: onWorker1(1000), Matched: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Worker.WorkerID != 1 {
		t.Fatalf("the turn left its running context for worker %d", d.Worker.WorkerID)
	}
}

// TestDecodeBatchReplicates: the shared 1,000-block prompt on worker 1, and the requests sharing it there
// all past their prefill (no queue to spare anyone: the herding trap at low load, where one worker decodes
// for the whole fleet). γ is 1e-3 per block: each decoding sharer's 100 blocks slow every prefill there.
// The next request is credited with the slowdown a copy spares the sharers to come, so the prompt is
// copied to idle worker 2 once about 20 requests decode on worker 1; without the credit, only past 200.
func TestDecodeBatchReplicates(t *testing.T) {
	m := sharedMachine(t, 0, 2)
	m.cal.Prior = 1e-3
	now := time.Unix(1, 0)
	for i := range 30 {
		id := string(rune('a' + i))
		d, _, err := m.Route(now, &Request{ID: id, Local: prompt(uint64(i+1), 1000), ISL: 1100, Scores: onWorker1(1000), Matched: true})
		if err != nil {
			t.Fatal(err)
		}
		if d.Worker.WorkerID == 2 {
			if i < 10 {
				t.Fatalf("request %d copied the prompt with only %d requests decoding on the holder", i, i)
			}
			t.Logf("request %d copied the prompt to worker 2", i)
			return
		}
		if _, err := m.PrefillDone(now, id); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("30 requests decode on worker 1 behind a shared prompt; none copied it to idle worker 2")
}
