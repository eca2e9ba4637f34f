//go:build amd64 && !amd64.v3

#include "textflag.h"
#include "go_asm.h"

// costPerm: VPERMT2Q indexes over two registers holding two lines each (a line is four words: prefill,
// decode, unique|active, prefilling|pad). At 0 the four lines' prefill words then their decode words; at
// 64 their unique|active words (twice); at 128 and 192 the low and the high halves of two registers.
// From 256 the four steps that take eight templates' totalKV words (a template is five words, totalKV
// its third: words 2, 7, …, 37 of forty): 2, 7 and 12 of the first sixteen to lanes 0–2; 17, 22 and 27
// of the next sixteen to lanes 3–5; the two joined; 32 and 37 of the last eight to lanes 6 and 7.
DATA costPerm<>+0(SB)/8, $0
DATA costPerm<>+8(SB)/8, $4
DATA costPerm<>+16(SB)/8, $8
DATA costPerm<>+24(SB)/8, $12
DATA costPerm<>+32(SB)/8, $1
DATA costPerm<>+40(SB)/8, $5
DATA costPerm<>+48(SB)/8, $9
DATA costPerm<>+56(SB)/8, $13
DATA costPerm<>+64(SB)/8, $2
DATA costPerm<>+72(SB)/8, $6
DATA costPerm<>+80(SB)/8, $10
DATA costPerm<>+88(SB)/8, $14
DATA costPerm<>+96(SB)/8, $2
DATA costPerm<>+104(SB)/8, $6
DATA costPerm<>+112(SB)/8, $10
DATA costPerm<>+120(SB)/8, $14
DATA costPerm<>+128(SB)/8, $0
DATA costPerm<>+136(SB)/8, $1
DATA costPerm<>+144(SB)/8, $2
DATA costPerm<>+152(SB)/8, $3
DATA costPerm<>+160(SB)/8, $8
DATA costPerm<>+168(SB)/8, $9
DATA costPerm<>+176(SB)/8, $10
DATA costPerm<>+184(SB)/8, $11
DATA costPerm<>+192(SB)/8, $4
DATA costPerm<>+200(SB)/8, $5
DATA costPerm<>+208(SB)/8, $6
DATA costPerm<>+216(SB)/8, $7
DATA costPerm<>+224(SB)/8, $12
DATA costPerm<>+232(SB)/8, $13
DATA costPerm<>+240(SB)/8, $14
DATA costPerm<>+248(SB)/8, $15
DATA costPerm<>+256(SB)/8, $2
DATA costPerm<>+264(SB)/8, $7
DATA costPerm<>+272(SB)/8, $12
DATA costPerm<>+280(SB)/8, $0
DATA costPerm<>+288(SB)/8, $0
DATA costPerm<>+296(SB)/8, $0
DATA costPerm<>+304(SB)/8, $0
DATA costPerm<>+312(SB)/8, $0
DATA costPerm<>+320(SB)/8, $0
DATA costPerm<>+328(SB)/8, $0
DATA costPerm<>+336(SB)/8, $0
DATA costPerm<>+344(SB)/8, $1
DATA costPerm<>+352(SB)/8, $6
DATA costPerm<>+360(SB)/8, $11
DATA costPerm<>+368(SB)/8, $0
DATA costPerm<>+376(SB)/8, $0
DATA costPerm<>+384(SB)/8, $0
DATA costPerm<>+392(SB)/8, $1
DATA costPerm<>+400(SB)/8, $2
DATA costPerm<>+408(SB)/8, $11
DATA costPerm<>+416(SB)/8, $12
DATA costPerm<>+424(SB)/8, $13
DATA costPerm<>+432(SB)/8, $0
DATA costPerm<>+440(SB)/8, $0
DATA costPerm<>+448(SB)/8, $0
DATA costPerm<>+456(SB)/8, $1
DATA costPerm<>+464(SB)/8, $2
DATA costPerm<>+472(SB)/8, $3
DATA costPerm<>+480(SB)/8, $4
DATA costPerm<>+488(SB)/8, $5
DATA costPerm<>+496(SB)/8, $8
DATA costPerm<>+504(SB)/8, $13
GLOBL costPerm<>(SB), RODATA|NOPTR, $512

DATA costConst<>+0(SB)/8, $0xffffffff00000000 // a line's active half of its unique|active word
DATA costConst<>+8(SB)/8, $0x3ff0000000000000 // 1.0
DATA costConst<>+16(SB)/8, $0x3fe0000000000000 // 0.5
DATA costConst<>+24(SB)/8, $0x7ff0000000000000 // +Inf
DATA costConst<>+32(SB)/8, $8
GLOBL costConst<>(SB), RODATA|NOPTR, $40

// costIota: the lanes' indexes.
DATA costIota<>+0(SB)/8, $0
DATA costIota<>+8(SB)/8, $1
DATA costIota<>+16(SB)/8, $2
DATA costIota<>+24(SB)/8, $3
DATA costIota<>+32(SB)/8, $4
DATA costIota<>+40(SB)/8, $5
DATA costIota<>+48(SB)/8, $6
DATA costIota<>+56(SB)/8, $7
GLOBL costIota<>(SB), RODATA|NOPTR, $64

// LINES8SETUP loads what LINES8 reads: the permutes into Z26–Z29 and the active half's mask into Z30.
#define LINES8SETUP \
	VPBROADCASTQ costConst<>+0(SB), Z30; \
	VMOVDQU64 costPerm<>+0(SB), Z26; \
	VMOVDQU64 costPerm<>+64(SB), Z27; \
	VMOVDQU64 costPerm<>+128(SB), Z28; \
	VMOVDQU64 costPerm<>+192(SB), Z29

// LINES8 transposes the eight lines at DX by the permutes in Z26–Z29: Z4 their decode words, Z5 their
// prefill words, Z8 their unique|active words (Z6, Z7, Z9 scratch), and sets K2 to the lines with
// active requests among K7's lanes (Z30: the active half's mask).
#define LINES8 \
	VMOVDQU64 0(DX), Z4; \
	VMOVDQU64 64(DX), Z5; \
	VMOVDQU64 128(DX), Z6; \
	VMOVDQU64 192(DX), Z7; \
	VMOVDQA64 Z4, Z8; \
	VPERMT2Q  Z5, Z27, Z8; \
	VPERMT2Q  Z5, Z26, Z4; \
	VMOVDQA64 Z6, Z9; \
	VPERMT2Q  Z7, Z27, Z9; \
	VPERMT2Q  Z7, Z26, Z6; \
	VPERMT2Q  Z9, Z28, Z8; \
	VMOVDQA64 Z4, Z5; \
	VPERMT2Q  Z6, Z28, Z5; \
	VPERMT2Q  Z6, Z29, Z4; \
	VPTESTMQ  Z30, Z8, K7, K2

// func calCostsAVX512(a *costArgs)
//
// The calibrated decision's cost and active blocks k of targets 0…a.n−1 (a.n a multiple of 8) into
// a.cost and a.k, eight per step: the scalar loop's operations (Machine.calibrated, scoring.SharedCost)
// in its order, unfused, its conditionals as compares and masked moves. The lines are transposed by
// permutes, and so are the templates' capacities (vectorCosts checks both layouts).
TEXT ·calCostsAVX512(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), DI
	MOVQ costArgs_ov(DI), SI
	MOVQ costArgs_lines(DI), DX
	MOVQ costArgs_tmpl(DI), R8
	MOVQ costArgs_proj(DI), R9
	MOVQ costArgs_cost(DI), R10
	MOVQ costArgs_k(DI), R11
	MOVQ costArgs_n(DI), CX
	MOVQ costArgs_projOn(DI), AX
	KMOVB AX, K7
	SHRQ $3, CX
	JZ   done
	VBROADCASTSD costArgs_fbs(DI), Z16
	VBROADCASTSD costArgs_fisl(DI), Z17
	VBROADCASTSD costArgs_nchain(DI), Z18
	VBROADCASTSD costArgs_hCached(DI), Z19
	VBROADCASTSD costArgs_hSettled(DI), Z20
	VBROADCASTSD costArgs_creditBelow(DI), Z21
	VBROADCASTSD costArgs_queued(DI), Z22
	VBROADCASTSD costArgs_slowK(DI), Z23
	VBROADCASTSD costArgs_gamma(DI), Z24
	VBROADCASTSD costConst<>+8(SB), Z25
	LINES8SETUP
	VMOVDQU64 costPerm<>+256(SB), Z31
	VMOVDQU64 costPerm<>+320(SB), Z11
	VMOVDQU64 costPerm<>+384(SB), Z12
	VMOVDQU64 costPerm<>+448(SB), Z13
	VPXORQ    Z14, Z14, Z14

loop:
	// Eight templates' capacities (Z10).
	VMOVDQU64 0(R8), Z10
	VPERMT2Q  64(R8), Z31, Z10
	VMOVDQU64 128(R8), Z1
	VPERMT2Q  192(R8), Z11, Z1
	VPERMT2Q  Z1, Z12, Z10
	VPERMT2Q  256(R8), Z13, Z10

	LINES8 // Z4 decode, Z5 prefill, Z8 unique|active; K2 active, projections on

	VCVTUDQ2PD (SI), Z0
	VMULPD     Z16, Z0, Z0 // cached = ov·bs
	VCMPPD     $1, Z17, Z0, K1
	VSUBPD.Z   Z0, Z17, K1, Z1 // u = isl − cached if cached < isl, else 0
	VMOVAPD    Z18, Z2
	VMOVUPD    (R9), K2, Z2 // add = projection if active, else len(chain)
	VADDPD     Z2, Z4, Z3 // k = decode + add
	VCVTQQ2PD  Z5, Z5
	VMULPD.BCST costArgs_q0(DI), Z5, Z5 // q = q0·prefill
	VCMPPD     $0x1e, Z20, Z0, K3
	VMOVAPD    Z20, Z6
	VMOVAPD    Z0, K3, Z6 // held = max(settled, cached)
	VSUBPD     Z6, Z19, Z6
	VCMPPD     $5, Z14, Z6, K3
	VMOVAPD.Z  Z6, K3, Z6 // dead = the holder's cached − held, 0 if negative

	// saved: sharers·(queued − q)/2 if queued > q, plus slowPer·(slowK − k) if k < slowK; 0 unless
	// cached < creditBelow (the settled prefix with a credit, −∞ without).
	VCMPPD     $0x1e, Z5, Z22, K4
	VSUBPD     Z5, Z22, Z7
	VMULPD.BCST costArgs_sharers(DI), Z7, Z7
	VMULPD.BCST.Z costConst<>+16(SB), Z7, K4, Z7
	VCMPPD     $1, Z23, Z3, K4
	VSUBPD     Z3, Z23, Z8
	VMULPD.BCST costArgs_slowPer(DI), Z8, Z8
	VADDPD     Z8, Z7, K4, Z7
	VCMPPD     $1, Z21, Z0, K4
	VMOVAPD.Z  Z7, K4, Z7

	// scoring.ExpectedTTFT: (q + u)(1 + γk), plus (k − capacity)·bs·(1 + γk) over a known capacity.
	VMULPD     Z3, Z24, Z8
	VADDPD     Z25, Z8, Z8
	VADDPD     Z1, Z5, Z9
	VMULPD     Z8, Z9, Z9
	VPTESTMQ   Z10, Z10, K5
	VCVTQQ2PD  Z10, Z10
	VSUBPD     Z10, Z3, Z10
	VCMPPD     $0x1e, Z14, Z10, K5, K5
	VMULPD     Z16, Z10, Z10
	VMULPD     Z8, Z10, Z10
	VADDPD     Z10, Z9, K5, Z9

	// scoring.SharedCost: + load·u + (WorkWeight − load)·dead − saved.
	VMULPD.BCST costArgs_load(DI), Z1, Z1
	VADDPD     Z1, Z9, Z9
	VMULPD.BCST costArgs_wwl(DI), Z6, Z6
	VADDPD     Z6, Z9, Z9
	VSUBPD     Z7, Z9, Z9
	VMOVUPD    Z9, (R10)
	VMOVUPD    Z3, (R11)

	ADDQ $32, SI
	ADDQ $256, DX
	ADDQ $320, R8
	ADDQ $64, R9
	ADDQ $64, R10
	ADDQ $64, R11
	DECQ CX
	JNZ  loop

done:
	VZEROUPPER
	RET

// func calLinearAVX512(a *linArgs)
//
// The linear policy's cost of targets 0…a.n−1 (a.n a multiple of 8) into a.cost, eight per step:
// scoring.Linear's operations in its order, unfused, fmax(x, 0) as a compare and a zeroing move. The
// lines are transposed as in calCostsAVX512.
TEXT ·calLinearAVX512(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), DI
	MOVQ linArgs_ov(DI), SI
	MOVQ linArgs_lines(DI), DX
	MOVQ linArgs_proj(DI), R9
	MOVQ linArgs_cost(DI), R10
	MOVQ linArgs_n(DI), CX
	MOVQ linArgs_projOn(DI), AX
	KMOVB AX, K7
	SHRQ $3, CX
	JZ   ldone
	VBROADCASTSD linArgs_pf(DI), Z16
	VBROADCASTSD linArgs_islPf(DI), Z17
	VBROADCASTSD linArgs_invBs(DI), Z18
	VBROADCASTSD linArgs_credit(DI), Z19
	VBROADCASTSD linArgs_scale(DI), Z20
	VBROADCASTSD linArgs_weight(DI), Z21
	VBROADCASTSD linArgs_nchain(DI), Z22
	LINES8SETUP
	VPXORQ    Z14, Z14, Z14

lloop:
	LINES8 // Z4 decode, Z5 prefill, Z8 unique|active; K2 active, projections on

	VCVTQQ2PD  Z5, Z5
	VMULPD     Z16, Z5, Z5 // prefill·pf
	VADDPD     Z17, Z5, Z5 // + ISL·pf
	VMULPD     Z18, Z5, Z5 // raw = … / bs
	VCVTUDQ2PD (SI), Z0
	VMULPD     Z19, Z0, Z0 // credit·overlap
	VSUBPD     Z0, Z5, Z5
	VCMPPD     $0x1e, Z14, Z5, K3
	VMOVAPD.Z  Z5, K3, Z5 // adjusted = raw − credit·overlap if > 0, else 0
	VMULPD     Z20, Z5, Z5 // scale·adjusted
	VMOVAPD    Z22, Z2
	VMOVUPD    (R9), K2, Z2 // additional = projection if active, else len(chain)
	VADDPD     Z2, Z4, Z4 // decode + additional
	VADDPD     Z4, Z5, Z5
	VPSRLQ     $32, Z8, Z8
	VCVTQQ2PD  Z8, Z8 // requests
	VMULPD     Z21, Z8, Z8
	VADDPD     Z8, Z5, Z5 // + weight·requests
	VMOVUPD    Z5, (R10)

	ADDQ $32, SI
	ADDQ $256, DX
	ADDQ $64, R9
	ADDQ $64, R10
	DECQ CX
	JNZ  lloop

ldone:
	VZEROUPPER
	RET

// BLOCKMASK sets K1 to the lanes of the block CX counts down to: all eight but in the last block
// (CX = 1), where R12 (n mod 8 lanes, or all eight).
#define BLOCKMASK \
	MOVQ    $0xff, AX; \
	CMPQ    CX, $1; \
	CMOVQEQ R12, AX; \
	KMOVB   AX, K1

// HMIN reduces Z's eight lanes to their least, broadcast to every lane (X, Y its lower halves, T a
// scratch register's).
#define HMIN(Z, Y, X, ZT, YT, XT) \
	VEXTRACTF64X4 $1, Z, YT; \
	VMINPD        YT, Y, Y; \
	VEXTRACTF128  $1, Y, XT; \
	VMINPD        XT, X, X; \
	VPERMILPD     $1, X, XT; \
	VMINPD        XT, X, X; \
	VBROADCASTSD  X, Z

// func calArgminAVX512(cost, k *float64, n int, ties *uint64) int
//
// The calibrated decision's argmin over cost[0:n] and k[0:n] (n > 0; both readable to a multiple of
// eight): the least cost, then among the targets of that cost the least k, and the targets of both in
// order into ties (room for n+8), their count returned; −1 when a cost is NaN (the scalar argmin's
// comparisons then do not reduce to a minimum). Three passes, eight lanes per step: the least cost
// (and whether any is NaN), the least k at that cost, the indexes of both compressed.
TEXT ·calArgminAVX512(SB), NOSPLIT, $0-40
	MOVQ cost+0(FP), SI
	MOVQ k+8(FP), DX
	MOVQ n+16(FP), BX
	MOVQ ties+24(FP), DI
	MOVQ BX, CX
	ANDQ $7, CX
	MOVQ $1, R12
	SHLQ CX, R12
	DECQ R12
	MOVQ $0xff, AX
	TESTQ CX, CX
	CMOVQEQ AX, R12
	LEAQ 7(BX), R13
	SHRQ $3, R13

	VBROADCASTSD costConst<>+24(SB), Z0
	KXORB K2, K2, K2
	MOVQ SI, R8
	MOVQ R13, CX

least:
	BLOCKMASK
	VMOVUPD.Z (R8), K1, Z1
	VCMPPD    $3, Z1, Z1, K1, K3 // unordered: NaN
	KORB      K3, K2, K2
	VMINPD    Z1, Z0, K1, Z0
	ADDQ      $64, R8
	DECQ      CX
	JNZ       least
	KORTESTB  K2, K2
	JNZ       nan
	HMIN(Z0, Y0, X0, Z1, Y1, X1)

	VBROADCASTSD costConst<>+24(SB), Z2
	MOVQ SI, R8
	MOVQ DX, R9
	MOVQ R13, CX

leastK:
	BLOCKMASK
	VCMPPD $0, (R8), Z0, K1, K3 // cost == least
	VMINPD (R9), Z2, K3, Z2
	ADDQ   $64, R8
	ADDQ   $64, R9
	DECQ   CX
	JNZ    leastK
	HMIN(Z2, Y2, X2, Z1, Y1, X1)

	VMOVDQU64    costIota<>(SB), Z3
	VPBROADCASTQ costConst<>+32(SB), Z4
	XORQ BX, BX
	MOVQ SI, R8
	MOVQ DX, R9
	MOVQ R13, CX

tied:
	BLOCKMASK
	VCMPPD   $0, (R8), Z0, K1, K3
	VCMPPD   $0, (R9), Z2, K3, K3
	KORTESTB K3, K3
	JZ       next
	VPCOMPRESSQ Z3, K3, Z5
	VMOVDQU64   Z5, (DI)(BX*8)
	KMOVB       K3, AX
	POPCNTL     AX, AX
	ADDQ        AX, BX

next:
	VPADDQ Z4, Z3, Z3
	ADDQ   $64, R8
	ADDQ   $64, R9
	DECQ   CX
	JNZ    tied
	MOVQ   BX, ret+32(FP)
	VZEROUPPER
	RET

nan:
	MOVQ $-1, ret+32(FP)
	VZEROUPPER
	RET

// func calActiveAVX512(lines *line, n int, active *uint8)
//
// Bit j of active[b] is whether lines[8b+j] has active requests, for n a multiple of eight: the lines'
// unique|active words transposed as in calCostsAVX512 and tested.
TEXT ·calActiveAVX512(SB), NOSPLIT, $0-24
	MOVQ lines+0(FP), DX
	MOVQ n+8(FP), CX
	MOVQ active+16(FP), DI
	SHRQ $3, CX
	JZ   adone
	VMOVDQU64    costPerm<>+64(SB), Z27
	VMOVDQU64    costPerm<>+128(SB), Z28
	VPBROADCASTQ costConst<>+0(SB), Z30

aloop:
	VMOVDQU64 0(DX), Z8
	VPERMT2Q  64(DX), Z27, Z8
	VMOVDQU64 128(DX), Z9
	VPERMT2Q  192(DX), Z27, Z9
	VPERMT2Q  Z9, Z28, Z8
	VPTESTMQ  Z30, Z8, K1
	KMOVB     K1, AX
	MOVB      AX, (DI)
	ADDQ      $256, DX
	INCQ      DI
	DECQ      CX
	JNZ       aloop

adone:
	VZEROUPPER
	RET
