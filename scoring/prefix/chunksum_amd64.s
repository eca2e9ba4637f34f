//go:build amd64

#include "textflag.h"

// func chunkSumsAVX512(h *uint64, chunks int, mul *[64]uint64, out *uint64)
//
// out[c] = Σ_i h[64c+i]·mul[i] mod 2⁶⁴ for c < chunks: eight 64-bit lanes per VPMULLQ (AVX-512DQ), the
// 64 multipliers held in Z16…Z23, the eight products of a chunk summed in a tree and the lanes reduced
// 512 → 256 → 128 → 64 bits.
TEXT ·chunkSumsAVX512(SB), NOSPLIT, $0-32
	MOVQ h+0(FP), SI
	MOVQ chunks+8(FP), CX
	MOVQ mul+16(FP), DX
	MOVQ out+24(FP), DI
	VMOVDQU64 (0*64)(DX), Z16
	VMOVDQU64 (1*64)(DX), Z17
	VMOVDQU64 (2*64)(DX), Z18
	VMOVDQU64 (3*64)(DX), Z19
	VMOVDQU64 (4*64)(DX), Z20
	VMOVDQU64 (5*64)(DX), Z21
	VMOVDQU64 (6*64)(DX), Z22
	VMOVDQU64 (7*64)(DX), Z23
	TESTQ CX, CX
	JZ    done

loop:
	VPMULLQ (0*64)(SI), Z16, Z0
	VPMULLQ (1*64)(SI), Z17, Z1
	VPMULLQ (2*64)(SI), Z18, Z2
	VPMULLQ (3*64)(SI), Z19, Z3
	VPMULLQ (4*64)(SI), Z20, Z4
	VPMULLQ (5*64)(SI), Z21, Z5
	VPMULLQ (6*64)(SI), Z22, Z6
	VPMULLQ (7*64)(SI), Z23, Z7
	VPADDQ  Z1, Z0, Z0
	VPADDQ  Z3, Z2, Z2
	VPADDQ  Z5, Z4, Z4
	VPADDQ  Z7, Z6, Z6
	VPADDQ  Z2, Z0, Z0
	VPADDQ  Z6, Z4, Z4
	VPADDQ  Z4, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPADDQ  Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDQ  X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPADDQ  X1, X0, X0
	VMOVQ   X0, (DI)
	ADDQ    $512, SI
	ADDQ    $8, DI
	DECQ    CX
	JNZ     loop

done:
	VZEROUPPER
	RET
