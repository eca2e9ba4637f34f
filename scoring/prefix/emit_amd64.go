//go:build amd64

package prefix

import "golang.org/x/sys/cpu"

// haveEmitKernel: Scores are written four slots at a time with AVX-512 (emit_amd64.s).
var haveEmitKernel = cpu.X86.HasAVX512F

//go:noescape
func emitAVX512(dst *Score, keys *WorkerKey, set uint64, depth uint32)
