package faultproxy

import (
	"math/rand/v2"
	"time"
)

// Fault is what happens to one batch.
type Fault uint8

// The faults a batch can suffer.
const (
	// Pass forwards the batch at once.
	Pass Fault = iota
	// Drop forgets the batch (the subscriber sees a gap and replays).
	Drop
	// Duplicate sends the batch twice in a row.
	Duplicate
	// Reorder holds the batch until the next one has been sent (or DelayFor elapsed).
	Reorder
	// Delay holds the batch for DelayFor while later batches pass.
	Delay
)

func (f Fault) String() string {
	switch f {
	case Pass:
		return "pass"
	case Drop:
		return "drop"
	case Duplicate:
		return "duplicate"
	case Reorder:
		return "reorder"
	case Delay:
		return "delay"
	}
	return "unknown"
}

// Faults configures the faults of the event stream. The zero value passes everything.
type Faults struct {
	// Seed seeds the RNG that draws the probabilistic faults; the same seed and the same stream give the
	// same faults.
	Seed uint64
	// Drop, Duplicate, Reorder and Delay are per-batch probabilities in [0, 1], drawn in that order from
	// one uniform number (so their sum should stay ≤ 1; the rest passes).
	Drop, Duplicate, Reorder, Delay float64
	// DelayFor is how long a delayed batch is held, and how long a reordered batch waits at most for a
	// successor. Default 50ms.
	DelayFor time.Duration
	// BySeq forces a fault for explicit sequence numbers, before any probability is drawn.
	BySeq map[uint64]Fault
}

func (f *Faults) delayFor() time.Duration {
	if f.DelayFor <= 0 {
		return 50 * time.Millisecond
	}
	return f.DelayFor
}

// decide picks the fault of one batch. It is pure given the RNG state.
func (f *Faults) decide(seq uint64, rng *rand.Rand) Fault {
	if x, ok := f.BySeq[seq]; ok {
		return x
	}
	if f.Drop+f.Duplicate+f.Reorder+f.Delay <= 0 {
		return Pass
	}
	u := rng.Float64()
	switch {
	case u < f.Drop:
		return Drop
	case u < f.Drop+f.Duplicate:
		return Duplicate
	case u < f.Drop+f.Duplicate+f.Reorder:
		return Reorder
	case u < f.Drop+f.Duplicate+f.Reorder+f.Delay:
		return Delay
	}
	return Pass
}

func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
