package kvevents

import "testing"

func TestSeqTracker(t *testing.T) {
	type step struct {
		live       uint64
		want       verdict
		from       uint64
		reset, gap bool
		replayed   []uint64 // seqs the replay returns (committed when wanted)
		deliver    bool     // afterReplay result for replayFirst
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"in order from 0", []step{{live: 0, want: deliverLive}, {live: 1, want: deliverLive}, {live: 2, want: deliverLive}}},
		{"slow joiner replays from 0", []step{
			{live: 3, want: replayFirst, from: 0, replayed: []uint64{0, 1, 2, 3, 4}, deliver: false},
			{live: 4, want: dropDuplicate}, {live: 5, want: deliverLive}, {live: 6, want: deliverLive},
		}},
		{"gap replays from last+1", []step{
			{live: 0, want: deliverLive}, {live: 1, want: deliverLive},
			{live: 3, want: replayFirst, from: 2, gap: true, replayed: []uint64{2, 3}, deliver: false},
			{live: 4, want: deliverLive},
		}},
		{"replay unavailable", []step{
			{live: 0, want: deliverLive},
			{live: 5, want: replayFirst, from: 1, gap: true, deliver: true},
			{live: 6, want: deliverLive},
		}},
		{"restart", []step{
			{live: 0, want: deliverLive}, {live: 1, want: deliverLive}, {live: 2, want: deliverLive},
			{live: 0, want: deliverLive, reset: true}, {live: 1, want: deliverLive},
		}},
		{"restart seen late replays the new engine from 0", []step{
			{live: 0, want: deliverLive}, {live: 1, want: deliverLive}, {live: 9, want: replayFirst, from: 2, gap: true, deliver: true},
			{live: 4, want: replayFirst, reset: true, from: 0, replayed: []uint64{0, 1, 2, 3, 4}, deliver: false},
			{live: 5, want: deliverLive},
		}},
		{"same seq twice is a duplicate", []step{{live: 0, want: deliverLive}, {live: 0, want: dropDuplicate}}},
		{"backwards below the duplicate window is a restart", []step{
			{live: 5, want: replayFirst, replayed: []uint64{3, 4, 5, 6, 7}, deliver: false},
			{live: 6, want: dropDuplicate},
			{live: 2, want: replayFirst, reset: true, from: 0, deliver: true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tr seqTracker
			for i, s := range tc.steps {
				v, from, reset, gap := tr.onLive(s.live)
				if v != s.want || from != s.from || reset != s.reset || gap != s.gap {
					t.Fatalf("step %d (seq %d): got verdict %d from %d reset %v gap %v; want %d %d %v %v",
						i, s.live, v, from, reset, gap, s.want, s.from, s.reset, s.gap)
				}
				switch v {
				case deliverLive:
					tr.commit(s.live)
				case replayFirst:
					for _, r := range s.replayed {
						if tr.wantReplayed(r) {
							tr.commit(r)
						}
					}
					if got := tr.afterReplay(s.live); got != s.deliver {
						t.Fatalf("step %d: afterReplay = %v, want %v", i, got, s.deliver)
					}
					if s.deliver {
						tr.commit(s.live)
					}
				}
			}
		})
	}
}

func TestCommitLost(t *testing.T) {
	var tr seqTracker
	if lost := tr.commit(3); lost != 3 {
		t.Fatalf("first seq 3 lost %d, want 3", lost)
	}
	if lost := tr.commit(4); lost != 0 {
		t.Fatalf("lost %d", lost)
	}
	if lost := tr.commit(10); lost != 5 {
		t.Fatalf("lost %d, want 5", lost)
	}
}

func TestShouldBind(t *testing.T) {
	tests := []struct {
		ep   string
		bind bool
	}{
		{"tcp://*:5557", true}, {"tcp://[::]:5557", true}, {"ipc:///tmp/kv", true}, {"inproc://kv", true},
		{"tcp://router-host:5557", false}, {"tcp://127.0.0.1:5557", false},
	}
	for _, tc := range tests {
		if got := ShouldBind(tc.ep); got != tc.bind {
			t.Errorf("ShouldBind(%q) = %v", tc.ep, got)
		}
	}
}
