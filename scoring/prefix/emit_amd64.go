//go:build amd64

package prefix

import "golang.org/x/sys/cpu"

// haveEmitKernel: Scores are written by a vector kernel (emit_amd64.s): four slots a step with
// AVX-512, else one a step with AVX2 and BMI1.
var haveEmitKernel = haveEmitAVX512 || haveEmitAVX2

var (
	haveEmitAVX512 = cpu.X86.HasAVX512F
	haveEmitAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasBMI1
)

// emitWide selects the AVX-512 kernel; a variable so that tests can run the AVX2 one where both exist.
var emitWide = haveEmitAVX512

// emitVector writes the Scores of set with the kernel the CPU has (haveEmitKernel must be true).
func emitVector(dst *Score, keys *WorkerKey, set uint64, depth uint32) {
	if emitWide {
		emitAVX512(dst, keys, set, depth)
		return
	}
	emitAVX2(dst, keys, set, depth)
}

//go:noescape
func emitAVX512(dst *Score, keys *WorkerKey, set uint64, depth uint32)

//go:noescape
func emitAVX2(dst *Score, keys *WorkerKey, set uint64, depth uint32)
