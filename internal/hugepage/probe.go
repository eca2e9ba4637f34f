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
// margin over the chase's run-to-run spread (a few percent), well inside the gain where huge pages help
// (0.68 on the guest above).
const worthRatio = 0.85

// Worth reports whether huge pages cut a dependent load's cost here by the margin worthRatio asks.
func (p Probe) Worth() bool {
	return p.SmallNanos > 0 && p.HugeNanos > 0 && p.HugeNanos <= worthRatio*p.SmallNanos
}

// Measure chases steps loads (Chase) through a mapping of n bytes advised MADV_NOHUGEPAGE, then through
// one of huge pages (Mapped), one mapping at a time, each unmapped before the next: at most n bytes (and
// a huge page) are resident at once. It returns ErrUnsupported where the host has no transparent huge
// pages, with SmallNanos measured when the small mapping could be had.
func Measure(n, steps int) (Probe, error) {
	p := Probe{Bytes: n}
	small, release, err := MappedSmall(n)
	if err != nil {
		return p, err
	}
	p.SmallNanos = Chase(words(small), steps)
	release()
	huge, release, err := Mapped(n)
	if err != nil {
		return p, err
	}
	p.HugeNanos = Chase(words(huge), steps)
	release()
	return p, nil
}

// words views a mapping's bytes as words (the mapping holds no Go pointers).
func words(b []byte) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}
