package scoring

// The non-KV router modes. Each picks among the eligible candidates (pin and busy filters already
// applied through ok) using only in-flight counts; none reads overlap.

// pickPowerOfTwo samples two distinct eligible candidates and keeps the one with fewer in-flight requests
// (the first sampled on a tie).
func pickPowerOfTwo(cands []Candidate, f *filter, eligible int, rng RNG) int {
	if eligible == 1 {
		return nth(cands, f, 0)
	}
	a := rng.IntN(eligible)
	b := rng.IntN(eligible - 1)
	if b >= a {
		b++
	}
	ia, ib := nth(cands, f, a), nth(cands, f, b)
	if cands[ib].inflight() < cands[ia].inflight() {
		return ib
	}
	return ia
}

// leastLoaded returns the eligible candidate with the fewest in-flight requests, ties broken uniformly by
// reservoir sampling; group ≥ 0 restricts it to one device group.
func leastLoaded(cands []Candidate, f *filter, group int, rng RNG) int {
	best, ties := -1, 0
	var bestLoad uint32
	for i := range cands {
		if !f.ok(&cands[i]) || (group >= 0 && groupOf(cands[i].Device) != group) {
			continue
		}
		l := cands[i].inflight()
		switch {
		case best < 0 || l < bestLoad:
			best, bestLoad, ties = i, l, 1
		case l == bestLoad:
			ties++
			if rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// pickDeviceAware is device-aware-weighted: normalized_load(group) = inflight(group) /
// (count(group) × weight), CPU weight 1, other devices weight ratio. The lighter group wins (the GPU
// group on a tie, being the faster one), then its least-loaded worker. With one device class present it
// is least-loaded.
func pickDeviceAware(cands []Candidate, f *filter, ratio float64, rng RNG) int {
	var inflight, count [2]float64
	for i := range cands {
		if !f.ok(&cands[i]) {
			continue
		}
		g := groupOf(cands[i].Device)
		inflight[g] += float64(cands[i].inflight())
		count[g]++
	}
	group := 0 // GPU
	switch {
	case count[0] == 0:
		group = 1
	case count[1] == 0:
	default:
		gpu := inflight[0] / (count[0] * ratio)
		cpu := inflight[1] / (count[1] * 1)
		if cpu < gpu {
			group = 1
		}
	}
	return leastLoaded(cands, f, group, rng)
}

func groupOf(d Device) int {
	if d == DeviceCPU {
		return 1
	}
	return 0
}
