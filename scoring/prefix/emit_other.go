//go:build !amd64

package prefix

// haveEmitKernel: the vector emit is amd64 assembly only (emit_amd64.s).
const haveEmitKernel = false

const haveEmitAVX512, haveEmitAVX2 = false, false

// emitWide: no AVX-512 kernel here either.
var emitWide = false

func emitVector(dst *Score, keys *WorkerKey, set uint64, depth uint32) {
	panic("prefix: no emit kernel on this architecture")
}
