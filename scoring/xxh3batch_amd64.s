//go:build amd64

#include "textflag.h"

// hashChain16x8AVX512 hashes 8 blocks of 16 tokens per iteration, one 64-bit lane per XXH3 product
// rather than one block per lane (see xxh3batch_amd64.go for the layout), and runs the prefix chain
// of each group in the scalar unit during the next group's vector work.

// MULFOLD leaves in a the fold hi^lo of the 128-bit products a·b, lane by lane, built from the four
// 32×32→64 partial products. cross = (p00>>32) + (p10 & m) + p01 cannot overflow: at most
// 2·(2³²−1) + (2³²−1)² = 2⁶⁴−1. hi = p11 + (p10>>32) + (cross>>32), lo = low32(cross)<<32 | low32(p00);
// VPSHUFD under the odd-dword mask K1 writes low32(cross) over the high half of p00 in place.
// Z30 holds 0x00000000ffffffff in every lane. The other arguments are scratch registers.
#define MULFOLD(a, b, ah, bh, p01, p10, p11, t) \
	MULPARTS(VPANDQ, Z30, a, b, ah, bh, p01, p10, p11, t); \
	VPSHUFD  $0xa0, t, K1, a;     \
	VPXORQ   a, p11, a

// MULPARTS leaves the 128-bit products' high words in p11, their low 32 bits in a and the cross sum in
// t, for both widths: AND is the width's VPAND and m its low-32 mask.
#define MULPARTS(AND, m, a, b, ah, bh, p01, p10, p11, t) \
	VPSRLQ   $32, a, ah;          \
	VPSRLQ   $32, b, bh;          \
	VPMULUDQ bh, a, p01;          \
	VPMULUDQ b, ah, p10;          \
	VPMULUDQ bh, ah, p11;         \
	VPMULUDQ b, a, a;             \
	VPSRLQ   $32, a, t;           \
	AND      m, p10, bh;          \
	VPADDQ   t, bh, t;            \
	VPADDQ   p01, t, t;           \
	VPSRLQ   $32, p10, p10;       \
	VPADDQ   p10, p11, p11;       \
	VPSRLQ   $32, t, ah;          \
	VPADDQ   ah, p11, p11

// ARGS loads the arguments both kernels share: tokens SI, groups CX, keys AX, prev R8, local DI,
// chain BX.
#define ARGS \
	MOVQ tokens+0(FP), SI;        \
	MOVQ groups+8(FP), CX;        \
	MOVQ keys+16(FP), AX;         \
	MOVQ prev+24(FP), R8;         \
	MOVQ local+32(FP), DI;        \
	MOVQ chain+40(FP), BX

// STARTCHAIN: a prompt's first block is its own chain value; the chain starts from the one value that
// ChainStep takes to it, rotr(h, 29)·chainMul⁻¹ ^ h, h the first hash at (DI).
#define STARTCHAIN \
	MOVQ  (DI), AX;               \
	MOVQ  AX, R8;                 \
	RORQ  $29, R8;                \
	MOVQ  $0xf1de83e19937733d, R10; \
	IMULQ R10, R8;                \
	XORQ  AX, R8

// CHAIN is ChainStep on the local hash at off(DI), writing the chain value to off(BX).
#define CHAIN(off) \
	XORQ  off(DI), R8;            \
	IMULQ R9, R8;                 \
	ROLQ  $29, R8;                \
	MOVQ  R8, off(BX)

// ROWS: row b is block b's eight words, xored with the keys (Z31).
#define ROWS \
	VPXORQ (0*64)(SI), Z31, Z0;   \
	VPXORQ (1*64)(SI), Z31, Z1;   \
	VPXORQ (2*64)(SI), Z31, Z2;   \
	VPXORQ (3*64)(SI), Z31, Z3;   \
	VPXORQ (4*64)(SI), Z31, Z4;   \
	VPXORQ (5*64)(SI), Z31, Z5;   \
	VPXORQ (6*64)(SI), Z31, Z6;   \
	VPXORQ (7*64)(SI), Z31, Z7

// PAIRS: 128-bit chunk c of E01 (Z8) is (block 0 word 2c, block 1 word 2c), of O01 (Z9) the odd
// words; likewise Z10…Z15 for blocks 2…7.
#define PAIRS \
	VPUNPCKLQDQ Z1, Z0, Z8;       \
	VPUNPCKHQDQ Z1, Z0, Z9;       \
	VPUNPCKLQDQ Z3, Z2, Z10;      \
	VPUNPCKHQDQ Z3, Z2, Z11;      \
	VPUNPCKLQDQ Z5, Z4, Z12;      \
	VPUNPCKHQDQ Z5, Z4, Z13;      \
	VPUNPCKLQDQ Z7, Z6, Z14;      \
	VPUNPCKHQDQ Z7, Z6, Z15

// SUMS1, SUMS2: sum each block's four folds. Chunk c of F01 (Z8) holds blocks 0 and 1 at product c:
// add chunks c and c+2, then c and c+1 across the pairs, which leaves block b in lane b of Z20; then
// 64·PRIME64_1.
#define SUMS1 \
	VSHUFI64X2 $0x44, Z10, Z8, Z16; \
	VSHUFI64X2 $0xee, Z10, Z8, Z17; \
	VPADDQ     Z16, Z17, Z16;     \
	VSHUFI64X2 $0x44, Z14, Z12, Z18; \
	VSHUFI64X2 $0xee, Z14, Z12, Z19; \
	VPADDQ     Z18, Z19, Z18

#define SUMS2 \
	VSHUFI64X2 $0x88, Z18, Z16, Z20; \
	VSHUFI64X2 $0xdd, Z18, Z16, Z21; \
	VPADDQ     Z20, Z21, Z20;     \
	VPADDQ     Z29, Z20, Z20

// AVALANCHE finishes the eight hashes and stores them at (DI).
#define AVALANCHE \
	VPSRLQ     $37, Z20, Z21;     \
	VPXORQ     Z21, Z20, Z20;     \
	VPMULLQ    Z28, Z20, Z20;     \
	VPSRLQ     $32, Z20, Z21;     \
	VPXORQ     Z21, Z20, Z20;     \
	VMOVDQU64  Z20, (DI)

// ADVANCE moves past a group: in bytes of tokens, out bytes of hashes and of chain values.
#define ADVANCE(in, out) \
	ADDQ $in, SI;                 \
	ADDQ $out, DI;                \
	ADDQ $out, BX

// func hashChain16x8AVX512(tokens *uint32, groups int, keys *[8]uint64, prev uint64, local *uint64, chain *uint64, start bool) uint64
TEXT ·hashChain16x8AVX512(SB), NOSPLIT, $0-64
	ARGS

	VMOVDQU64    (AX), Z31               // keys k0…k7, in block word order
	VPTERNLOGQ   $0xff, Z30, Z30, Z30
	VPSRLQ       $32, Z30, Z30           // low-32 mask
	MOVQ         $0x8dde6c617af2a1c0, AX // 64·PRIME64_1, wrapped
	VPBROADCASTQ AX, Z29
	MOVQ         $0x165667919e3779f9, AX // avalanche multiplier
	VPBROADCASTQ AX, Z28
	MOVQ         $0xaaaa, AX
	KMOVW        AX, K1                  // odd dwords
	MOVQ         $0x9e3779b97f4a7c15, R9 // chainMul

	// The first group alone: there is no chain to run beside it yet.
	ROWS
	PAIRS
	MULFOLD(Z8, Z9, Z16, Z17, Z18, Z19, Z20, Z21)
	MULFOLD(Z10, Z11, Z22, Z23, Z24, Z25, Z26, Z27)
	MULFOLD(Z12, Z13, Z0, Z1, Z2, Z3, Z4, Z5)
	MULFOLD(Z14, Z15, Z16, Z17, Z18, Z19, Z20, Z21)
	SUMS1
	SUMS2
	AVALANCHE

	CMPB start+48(FP), $0
	JEQ  advance
	STARTCHAIN

advance:
	ADVANCE(512, 64)
	DECQ CX
	JZ   last

loop:
	// The vector work of this group with the chain of the previous one, whose hashes were stored an
	// iteration ago, spread through it: the chain is a serial dependency of one multiply per block,
	// the vector work keeps the vector pipes busy, and the two overlap best when the chain's
	// instructions do not queue behind a whole group of vector instructions.
	ROWS
	CHAIN(-64)
	PAIRS
	CHAIN(-56)
	MULFOLD(Z8, Z9, Z16, Z17, Z18, Z19, Z20, Z21)
	CHAIN(-48)
	MULFOLD(Z10, Z11, Z22, Z23, Z24, Z25, Z26, Z27)
	CHAIN(-40)
	MULFOLD(Z12, Z13, Z0, Z1, Z2, Z3, Z4, Z5)
	CHAIN(-32)
	MULFOLD(Z14, Z15, Z16, Z17, Z18, Z19, Z20, Z21)
	CHAIN(-24)
	SUMS1
	CHAIN(-16)
	SUMS2
	CHAIN(-8)
	AVALANCHE
	ADVANCE(512, 64)
	DECQ CX
	JNZ  loop

last:
	CHAIN(-64)
	CHAIN(-56)
	CHAIN(-48)
	CHAIN(-40)
	CHAIN(-32)
	CHAIN(-24)
	CHAIN(-16)
	CHAIN(-8)

	VZEROUPPER
	MOVQ R8, ret+56(FP)
	RET

// The AVX2 form: 4 blocks per iteration in 256-bit vectors (CPUs without AVX-512, AMD before Zen 4
// and most Intel client parts). Sixteen vector registers: Y10/Y11 the keys, Y13 the avalanche
// multiplier, Y14 64·PRIME64_1, Y15 the low-32 mask; Y0–Y8 and Y12 work (the avalanche takes the
// multiplier's high half into Y12 each time), Y9 holds blocks 0–1's sums while blocks 2–3 are folded.

// MULFOLD2 is MULFOLD on 256-bit vectors: the masked VPSHUFD becomes a shuffle and a blend.
#define MULFOLD2(a, b, ah, bh, p01, p10, p11, t) \
	MULPARTS(VPAND, Y15, a, b, ah, bh, p01, p10, p11, t); \
	VPSHUFD  $0xa0, t, ah;        \
	VPBLENDD $0xaa, ah, a, a;     \
	VPXOR    a, p11, a

// PAIR2(off, s) leaves in s the sums of blocks off and off+1's folds: lanes 0 and 2 block off's
// products 0+2 and 1+3, lanes 1 and 3 block off+1's. Row words 0–3 then 4–7 of each block, xored with
// the keys, unpacked into even and odd words of the two blocks, folded, and the two halves added.
#define PAIR2(off, s) \
	VPXOR       (off*64)(SI), Y10, Y0;      \
	VPXOR       (off*64+32)(SI), Y11, Y1;   \
	VPXOR       (off*64+64)(SI), Y10, Y2;   \
	VPXOR       (off*64+96)(SI), Y11, Y3;   \
	VPUNPCKLQDQ Y2, Y0, Y4;                 \
	VPUNPCKHQDQ Y2, Y0, Y5;                 \
	MULFOLD2(Y4, Y5, Y0, Y2, Y6, Y7, Y8, Y12); \
	VPUNPCKLQDQ Y3, Y1, Y5;                 \
	VPUNPCKHQDQ Y3, Y1, Y0;                 \
	MULFOLD2(Y5, Y0, Y1, Y2, Y3, Y6, Y7, Y8); \
	VPADDQ      Y4, Y5, s

// SUMS4 adds block b's two lanes into lane b of Y5 (Y9: blocks 0–1, Y4: blocks 2–3), then 64·PRIME64_1.
#define SUMS4 \
	VPERM2I128 $0x20, Y4, Y9, Y5; \
	VPERM2I128 $0x31, Y4, Y9, Y6; \
	VPADDQ     Y5, Y6, Y5;        \
	VPADDQ     Y14, Y5, Y5

// AVALANCHE4 finishes the four hashes in Y5 and stores them at (DI); the 64-bit multiply is built from
// three 32×32→64 ones (lo·lo + (hi·lo + lo·hi)<<32).
#define AVALANCHE4 \
	VPSRLQ   $32, Y13, Y12;       \
	VPSRLQ   $37, Y5, Y6;         \
	VPXOR    Y6, Y5, Y5;          \
	VPMULUDQ Y13, Y5, Y6;         \
	VPSRLQ   $32, Y5, Y7;         \
	VPMULUDQ Y13, Y7, Y7;         \
	VPMULUDQ Y12, Y5, Y8;         \
	VPADDQ   Y7, Y8, Y7;          \
	VPSLLQ   $32, Y7, Y7;         \
	VPADDQ   Y7, Y6, Y5;          \
	VPSRLQ   $32, Y5, Y6;         \
	VPXOR    Y6, Y5, Y5;          \
	VMOVDQU  Y5, (DI)

// func hashChain16x4AVX2(tokens *uint32, groups int, keys *[8]uint64, prev uint64, local *uint64, chain *uint64, start bool) uint64
TEXT ·hashChain16x4AVX2(SB), NOSPLIT, $0-64
	ARGS

	VMOVDQU      (AX), Y10               // keys k0…k3
	VMOVDQU      32(AX), Y11             // keys k4…k7
	VPCMPEQQ     Y15, Y15, Y15
	VPSRLQ       $32, Y15, Y15           // low-32 mask
	MOVQ         $0x8dde6c617af2a1c0, AX // 64·PRIME64_1, wrapped
	VMOVQ        AX, X14
	VPBROADCASTQ X14, Y14
	MOVQ         $0x165667919e3779f9, AX // avalanche multiplier
	VMOVQ        AX, X13
	VPBROADCASTQ X13, Y13
	MOVQ         $0x9e3779b97f4a7c15, R9 // chainMul

	// The first group alone: there is no chain to run beside it yet.
	PAIR2(0, Y9)
	PAIR2(2, Y4)
	SUMS4
	AVALANCHE4

	CMPB start+48(FP), $0
	JEQ  advance4
	STARTCHAIN

advance4:
	ADVANCE(256, 32)
	DECQ CX
	JZ   last4

loop4:
	// This group's vector work with the previous group's chain spread through it.
	PAIR2(0, Y9)
	CHAIN(-32)
	CHAIN(-24)
	PAIR2(2, Y4)
	CHAIN(-16)
	CHAIN(-8)
	SUMS4
	AVALANCHE4
	ADVANCE(256, 32)
	DECQ CX
	JNZ  loop4

last4:
	CHAIN(-32)
	CHAIN(-24)
	CHAIN(-16)
	CHAIN(-8)

	VZEROUPPER
	MOVQ R8, ret+56(FP)
	RET
