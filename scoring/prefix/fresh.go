package prefix

import "unsafe"

// pageBytes is the smallest page the kernel maps: writeFirst stores once per this many bytes.
const pageBytes = 4096

// writeFirst stores a zero value into every page of s, so that the first access to each page is a
// write. A large make takes memory fresh from the kernel, which the runtime leaves as it is (already
// zero); a table is then filled by probing, and a probe reads a slot before it writes one. The first
// read of a fresh page maps the kernel's shared zero page, and the first write after it replaces that
// mapping, which flushes the old translation on every CPU the process runs on: an inter-processor
// interrupt to the cores answering queries, one per page: a 15 MB table's rehash would send about
// 3,700 in a few milliseconds, and a query running then takes them all. 45 k of the 47 k TLB
// shootdowns of a 4 s run of kvroute bench indexer came from rehash's probes (traced with the
// tlb:tlb_flush event). A first write maps a page of its own at once and flushes
// nothing. Memory the heap reuses was cleared by the runtime (written), so this only matters, and only
// costs a store per page, for fresh memory.
func writeFirst[T any](s []T) {
	var zero T
	step := max(1, pageBytes/int(unsafe.Sizeof(zero)))
	for i := 0; i < len(s); i += step {
		s[i] = zero
	}
}
