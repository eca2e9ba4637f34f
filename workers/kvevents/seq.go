package kvevents

// verdict is what the owner of a stream does with a live message, decided by seqTracker.
type verdict uint8

const (
	// deliverLive: decode and hand the batch to the consumer.
	deliverLive verdict = iota
	// dropDuplicate: a batch already delivered (through replay).
	dropDuplicate
	// replayFirst: request replay from the returned seq, then offer the live batch again with wantLive.
	replayFirst
)

// seqTracker is the pure sequence-number state machine of one publisher stream. It performs no I/O:
// the socket goroutine asks it what to do and reports what it delivered (raft style).
//
// Rules:
//   - nothing seen yet (start, or after a reset) and seq > 0: batches were lost to ZMQ's slow-joiner
//     window; replay from 0;
//   - seq == last+1: in order;
//   - seq > last+1: a gap; replay from last+1;
//   - seq <= last: a duplicate if it lies in the window of live messages that a replay already covered
//     (or equals last); otherwise the engine restarted (its counter began again at 0): reset.
type seqTracker struct {
	last uint64
	have bool
	// After a replay triggered by live seq dupLow, the SUB queue still holds live messages dupLow+1..last
	// that the replay already delivered; they are dropped until the live stream reaches last+1.
	dupLow    uint64
	dupWindow bool
}

// onLive classifies a live seq. reset reports an engine restart, which the caller announces before acting
// on the verdict; from is the replay start for replayFirst; gap is true when the replay fills a gap
// rather than the slow-joiner window.
func (t *seqTracker) onLive(seq uint64) (v verdict, from uint64, reset, gap bool) {
	if t.have && seq <= t.last {
		if seq == t.last || (t.dupWindow && seq >= t.dupLow) {
			return dropDuplicate, 0, false, false
		}
		*t = seqTracker{}
		reset = true
	}
	switch {
	case !t.have && seq == 0:
		return deliverLive, 0, reset, false
	case !t.have:
		return replayFirst, 0, reset, false
	case seq == t.last+1:
		t.dupWindow = false
		return deliverLive, 0, false, false
	}
	return replayFirst, t.last + 1, false, true
}

// ambiguous reports a live seq that the sequence alone cannot explain: a forward gap (batches lost, or
// an engine that restarted and already published past last) or a backward step outside the duplicate
// window (a late batch of this engine, or an engine that restarted below last). Only the publisher can
// tell which: the owner asks it whether it still holds our last batch under last (replay + digest).
func (t *seqTracker) ambiguous(seq uint64) bool {
	if !t.have {
		return false
	}
	if seq > t.last+1 {
		return true
	}
	return seq < t.last && !(t.dupWindow && seq >= t.dupLow)
}

// afterReplay is called once the replay requested for live seq trigger is over (complete or not). It
// opens the duplicate window and reports whether the live batch itself still needs delivering.
func (t *seqTracker) afterReplay(trigger uint64) (deliver bool) {
	if t.have && trigger <= t.last {
		t.dupLow, t.dupWindow = trigger, true
		return false
	}
	return true
}

// wantReplayed reports whether a replayed seq is new.
func (t *seqTracker) wantReplayed(seq uint64) bool {
	return !t.have || seq > t.last
}

// commit records that seq was consumed (delivered, or dropped as malformed) and returns how many
// sequence numbers were skipped without ever being seen: batches lost for good.
func (t *seqTracker) commit(seq uint64) (lost uint64) {
	switch {
	case !t.have:
		lost = seq
	case seq > t.last+1:
		lost = seq - t.last - 1
	}
	t.last, t.have = seq, true
	return lost
}

// next is the first seq not yet consumed: 0 on a fresh stream.
func (t *seqTracker) next() uint64 {
	if !t.have {
		return 0
	}
	return t.last + 1
}

// afterCatchUp is called after the replay that follows a (re)connect, which asked for everything from
// seq from on. Live messages from from up to the last replayed seq were queued meanwhile; they are
// duplicates, not a restart.
func (t *seqTracker) afterCatchUp(from uint64) {
	if t.have && t.last >= from {
		t.dupLow, t.dupWindow = from, true
	}
}
