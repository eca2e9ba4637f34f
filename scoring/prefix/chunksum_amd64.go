//go:build amd64

package prefix

import "golang.org/x/sys/cpu"

// haveChunkKernel: chunk sums eight products at a time with AVX-512DQ's 64-bit multiply
// (chunksum_amd64.s).
var haveChunkKernel = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ

//go:noescape
func chunkSumsAVX512(h *uint64, chunks int, mul *[chunkLen]uint64, out *uint64)
