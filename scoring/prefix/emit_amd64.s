//go:build amd64

#include "textflag.h"

// emitTab[m] for the four slots of a nibble m: byte 0 the mask of their key words (each slot's bit
// doubled: a WorkerKey is two words), bytes 1–2 the mask of the Score words to store (four per slot
// present: (1 << 4·popcount(m)) − 1), byte 3 the bytes stored (32 per slot present).
DATA emitTab<>+0(SB)/4, $0x00000000
DATA emitTab<>+4(SB)/4, $0x20000f03
DATA emitTab<>+8(SB)/4, $0x20000f0c
DATA emitTab<>+12(SB)/4, $0x4000ff0f
DATA emitTab<>+16(SB)/4, $0x20000f30
DATA emitTab<>+20(SB)/4, $0x4000ff33
DATA emitTab<>+24(SB)/4, $0x4000ff3c
DATA emitTab<>+28(SB)/4, $0x600fff3f
DATA emitTab<>+32(SB)/4, $0x20000fc0
DATA emitTab<>+36(SB)/4, $0x4000ffc3
DATA emitTab<>+40(SB)/4, $0x4000ffcc
DATA emitTab<>+44(SB)/4, $0x600fffcf
DATA emitTab<>+48(SB)/4, $0x4000fff0
DATA emitTab<>+52(SB)/4, $0x600ffff3
DATA emitTab<>+56(SB)/4, $0x600ffffc
DATA emitTab<>+60(SB)/4, $0x80ffffff
GLOBL emitTab<>(SB), RODATA|NOPTR, $64

// emitIdx: the first Score pair takes compressed keys 0 and 1 (words 0–3) each followed by the tail
// (words 8–9, the second table); the second pair keys 2 and 3.
DATA emitIdx<>+0(SB)/8, $0
DATA emitIdx<>+8(SB)/8, $1
DATA emitIdx<>+16(SB)/8, $8
DATA emitIdx<>+24(SB)/8, $9
DATA emitIdx<>+32(SB)/8, $2
DATA emitIdx<>+40(SB)/8, $3
DATA emitIdx<>+48(SB)/8, $8
DATA emitIdx<>+56(SB)/8, $9
DATA emitIdx<>+64(SB)/8, $4
DATA emitIdx<>+72(SB)/8, $5
DATA emitIdx<>+80(SB)/8, $8
DATA emitIdx<>+88(SB)/8, $9
DATA emitIdx<>+96(SB)/8, $6
DATA emitIdx<>+104(SB)/8, $7
DATA emitIdx<>+112(SB)/8, $8
DATA emitIdx<>+120(SB)/8, $9
GLOBL emitIdx<>(SB), RODATA|NOPTR, $128

// func emitAVX512(dst *Score, keys *WorkerKey, set uint64, depth uint32)
//
// For every slot s in set, in increasing order, writes Score{Worker: keys[s], Blocks: depth} (32 bytes:
// the key's two words, then depth and a zero word) at the next place from dst. Four slots per step:
// their keys are loaded under a mask (slots not in set are never read, so keys may end before slot 63),
// compressed to the front of a vector, interleaved with the tail by two permutes and stored under masks
// that cover only the Scores written.
TEXT ·emitAVX512(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ keys+8(FP), SI
	MOVQ set+16(FP), AX
	MOVLQZX depth+24(FP), BX
	VMOVQ BX, X5
	VMOVDQU64 emitIdx<>+0(SB), Z6
	VMOVDQU64 emitIdx<>+64(SB), Z7
	LEAQ emitTab<>(SB), R8

loop:
	TESTQ AX, AX
	JZ    done
	MOVQ  AX, BX
	ANDQ  $15, BX
	SHRQ  $4, AX
	MOVL  (R8)(BX*4), DX
	TESTQ BX, BX
	JZ    next
	CMPQ  BX, $15
	JEQ   four
	KMOVB DX, K1
	VMOVDQU64.Z (SI), K1, Z0
	VPCOMPRESSQ.Z Z0, K1, Z1
	VMOVDQA64 Z1, Z2
	VPERMT2Q Z5, Z6, Z1
	VPERMT2Q Z5, Z7, Z2
	MOVL  DX, CX
	SHRL  $8, CX
	KMOVW CX, K2
	KSHIFTRW $8, K2, K3
	VMOVDQU64 Z1, K2, (DI)
	VMOVDQU64 Z2, K3, 64(DI)
	SHRL  $24, DX
	ADDQ  DX, DI

next:
	ADDQ $64, SI
	JMP  loop

four:
	// All four slots: no masks.
	VMOVDQU64 (SI), Z1
	VMOVDQA64 Z1, Z2
	VPERMT2Q Z5, Z6, Z1
	VPERMT2Q Z5, Z7, Z2
	VMOVDQU64 Z1, (DI)
	VMOVDQU64 Z2, 64(DI)
	ADDQ $128, DI
	ADDQ $64, SI
	JMP  loop

done:
	VZEROUPPER
	RET

// func emitAVX2(dst *Score, keys *WorkerKey, set uint64, depth uint32)
//
// The same Scores as emitAVX512, for CPUs with AVX2 and BMI1 but not AVX-512 (AMD before Zen 4, most
// Intel client parts): one slot a step, TZCNT for its index and BLSR to clear it, the key's 16 bytes
// loaded and ORed with the tail (depth and zeros in the upper half) and stored as one 32-byte Score.
// The scalar loop's BSF reads its destination register on AMD, which the compiler gives the key loaded
// the step before, so every Score waited for the previous key's load; here the index does not depend on
// any load (the XOR breaks TZCNT's false dependency on the Intel parts that have one).
TEXT ·emitAVX2(SB), NOSPLIT, $0-28
	MOVQ    dst+0(FP), DI
	MOVQ    keys+8(FP), SI
	MOVQ    set+16(FP), AX
	MOVLQZX depth+24(FP), BX
	VMOVQ   BX, X1
	VPERM2I128 $0x08, Y1, Y1, Y1 // Y1 = [0, 0 | depth, 0]

loop2:
	TESTQ  AX, AX
	JZ     done2
	XORL   DX, DX
	TZCNTQ AX, DX
	BLSRQ  AX, AX
	SHLQ   $4, DX
	VMOVDQU (SI)(DX*1), X0
	VPOR   Y1, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ   $32, DI
	JMP    loop2

done2:
	VZEROUPPER
	RET
