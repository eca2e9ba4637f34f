//go:build !amd64 || amd64.v3

package sched

// haveCostKernel: the vector cost kernel is amd64 assembly only (calcost_amd64.s), and only below
// GOAMD64=v3, where the compiler does not fuse the scalar loop's multiply-adds.
var haveCostKernel = false

func calCostsAVX512(a *costArgs) {
	panic("sched: no cost kernel on this architecture")
}

func calArgminAVX512(cost, k *float64, n int, ties *uint64) int {
	panic("sched: no cost kernel on this architecture")
}

func calActiveAVX512(lines *line, n int, active *uint8) {
	panic("sched: no cost kernel on this architecture")
}

func calLinearAVX512(a *linArgs) {
	panic("sched: no cost kernel on this architecture")
}
