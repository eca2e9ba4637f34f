//go:build !amd64

package prefix

// haveEmitKernel: the vector emit is amd64 assembly only (emit_amd64.s).
const haveEmitKernel = false

func emitAVX512(dst *Score, keys *WorkerKey, set uint64, depth uint32) {
	panic("prefix: no emit kernel on this architecture")
}
