//go:build !amd64

package prefix

// haveChunkKernel: the vector chunk sum is amd64 assembly only (chunksum_amd64.s).
const haveChunkKernel = false

func chunkSumsAVX512(h *uint64, chunks int, mul *[chunkLen]uint64, out *uint64) {
	panic("prefix: no chunk-sum kernel on this architecture")
}
