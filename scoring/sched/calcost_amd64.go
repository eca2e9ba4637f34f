//go:build amd64 && !amd64.v3

package sched

import "golang.org/x/sys/cpu"

// haveCostKernel: the calibrated decision costs eight candidates at a time with AVX-512F/DQ
// (calcost_amd64.s). Not from GOAMD64=v3 on, where the compiler fuses the scalar loop's multiply-adds
// (calcost_other.go): the kernel's separate multiplies and adds would round differently.
var haveCostKernel = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ

//go:noescape
func calCostsAVX512(a *costArgs)

//go:noescape
func calArgminAVX512(cost, k *float64, n int, ties *uint64) int

//go:noescape
func calActiveAVX512(lines *line, n int, active *uint8)

//go:noescape
func calLinearAVX512(a *linArgs)
