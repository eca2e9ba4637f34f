package hugepage

import "unsafe"

// Probe is what one dependent load costs on this host through a buffer of Bytes mapped with small (4 KiB)
// pages and through one mapped with 2 MiB pages: whether huge pages under an index pay here. They do on a
// guest whose host backs it with huge pages (a TLB entry then covers 2 MiB, and a miss walks shorter
// tables): 4 KiB 272 ns, 2 MiB 186 ns a load into 392 MiB on the 2-vCPU KVM guest of docs/benchmarks.md.
// They do not where the host's pages are small: the guest's huge page leaves the host's walk as it was
// (another guest there: 326 ns with small pages, 401 ns with THP at 400 MiB), and the index bench got worse.
type Probe struct {
	Bytes      int
	SmallNanos float64
	HugeNanos  float64 // 0 where no huge-page mapping could be had
}

// worthRatio is the most a huge page's load may cost, as a share of a small page's, for Worth: a
// margin over the chase's spread, well away from both kinds of host. On the guest above, probes at
// 256 MiB gave 0.78–0.88 from one process to the next (the small pages' load 193–234 ns, the huge
// pages' 168–183 ns); on the other, 1.23.
const worthRatio = 0.9

// probeLaps is how many times Measure chases each mapping; it keeps the fastest.
const probeLaps = 3

// Worth reports whether huge pages cut a dependent load's cost here by the margin worthRatio asks.
func (p Probe) Worth() bool {
	return p.SmallNanos > 0 && p.HugeNanos > 0 && p.HugeNanos <= worthRatio*p.SmallNanos
}

// Measure chases steps loads (Chase) probeLaps times through a mapping of n bytes advised
// MADV_NOHUGEPAGE, then through one of huge pages (Mapped), and keeps each one's fastest lap; one mapping
// at a time, each unmapped before the next: at most n bytes (and a huge page) are resident at once. It
// returns ErrUnsupported where the host has no transparent huge pages.
func Measure(n, steps int) (Probe, error) {
	p := Probe{Bytes: n}
	var err error
	if p.SmallNanos, err = fastestChase(MappedSmall, n, steps); err != nil {
		return p, err
	}
	p.HugeNanos, err = fastestChase(Mapped, n, steps)
	return p, err
}

// fastestChase maps n bytes with mapped, chases them probeLaps times and unmaps them.
func fastestChase(mapped func(int) ([]byte, func(), error), n, steps int) (float64, error) {
	buf, release, err := mapped(n)
	if err != nil {
		return 0, err
	}
	defer release()
	best := Chase(Words(buf), steps)
	for range probeLaps - 1 {
		best = min(best, Chase(Words(buf), steps))
	}
	return best, nil
}

// Words views a mapping's bytes (Mapped, MappedSmall) as the words Chase takes; the mapping holds no Go
// pointers.
func Words(b []byte) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}
