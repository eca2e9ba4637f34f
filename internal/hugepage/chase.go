package hugepage

import (
	"math/rand/v2"
	"time"
)

// ChaseLine is the stride of a pointer chase: one cache line.
const ChaseLine = 64

// Chase returns the mean time in ns of one dependent load through buf: its whole cache lines laid out as
// one random cycle (chaseBuffer), each load's address taken from the one before it, as a tree walk whose
// path is not in the cache does. It times steps loads after a warm-up of one lap or steps loads,
// whichever is fewer. buf needs at least two lines.
func Chase(buf []uint64, steps int) float64 {
	lines := len(buf) * 8 / ChaseLine
	chaseBuffer(buf, lines)
	p := uint64(0)
	for range min(lines, steps) {
		p = buf[p]
	}
	start := time.Now()
	for range steps {
		p = buf[p]
	}
	el := time.Since(start)
	chaseSink = p
	return float64(el.Nanoseconds()) / float64(steps)
}

// chaseBuffer lays lines cache lines of buf out as one random cycle: the first word of each line is the
// index (in words) of the next line's first word.
func chaseBuffer(buf []uint64, lines int) {
	const words = ChaseLine / 8
	order := make([]uint32, lines)
	for i := range order {
		order[i] = uint32(i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := lines - 1; i > 0; i-- { // Sattolo: a single cycle through every line
		j := rng.IntN(i)
		order[i], order[j] = order[j], order[i]
	}
	for i, l := range order {
		buf[int(l)*words] = uint64(order[(i+1)%lines]) * words
	}
}

// chaseSink keeps the chase's result alive, so that the loads are not dropped.
var chaseSink uint64
