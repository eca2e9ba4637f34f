//go:build amd64

package prefix

// touch2 brings the cache lines of a and b toward the core without waiting (prefetch_amd64.s); the
// result is 0.
//
//go:noescape
func touch2(a, b *uint64) uint64
