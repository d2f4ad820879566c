//go:build !purego

#include "textflag.h"

// func axpyAVX2(y, x *float32, a float32, n int)
//
// y[i] += a*x[i] for i < n: VMULPS then VADDPS (no FMA), the same two
// roundings as the portable loop. n > 0, a multiple of 8; 32 elements per
// iteration while at least 32 remain.
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	MOVQ         y+0(FP), DI
	MOVQ         x+8(FP), SI
	VBROADCASTSS a+16(FP), Y15
	MOVQ         n+24(FP), CX

loop32:
	CMPQ    CX, $32
	JB      loop8
	VMULPS  0(SI), Y15, Y0
	VMULPS  32(SI), Y15, Y1
	VMULPS  64(SI), Y15, Y2
	VMULPS  96(SI), Y15, Y3
	VADDPS  0(DI), Y0, Y0
	VADDPS  32(DI), Y1, Y1
	VADDPS  64(DI), Y2, Y2
	VADDPS  96(DI), Y3, Y3
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, SI
	ADDQ    $128, DI
	SUBQ    $32, CX
	JMP     loop32

loop8:
	TESTQ   CX, CX
	JZ      done
	VMULPS  0(SI), Y15, Y0
	VADDPS  0(DI), Y0, Y0
	VMOVUPS Y0, 0(DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     loop8

done:
	VZEROUPPER
	RET

// func adamAVX2(p, m, v, grad *float32, n int, k *adamConsts)
//
// Eight elements per iteration of adamPortable:
//   m = b1*m + omb1*g
//   v = b2*v + omb2*(g*g)
//   p = p - (step*m) / (sqrt(v)*invSqrtBC2 + eps)
// k points at float32s b1, omb1, b2, omb2, step, invSqrtBC2, eps.
TEXT ·adamAVX2(SB), NOSPLIT, $0-48
	MOVQ         p+0(FP), DI
	MOVQ         m+8(FP), SI
	MOVQ         v+16(FP), DX
	MOVQ         grad+24(FP), BX
	MOVQ         n+32(FP), CX
	MOVQ         k+40(FP), AX
	VBROADCASTSS 0(AX), Y8   // b1
	VBROADCASTSS 4(AX), Y9   // omb1
	VBROADCASTSS 8(AX), Y10  // b2
	VBROADCASTSS 12(AX), Y11 // omb2
	VBROADCASTSS 16(AX), Y12 // step
	VBROADCASTSS 20(AX), Y13 // invSqrtBC2
	VBROADCASTSS 24(AX), Y14 // eps

adamloop:
	VMOVUPS 0(BX), Y0       // g
	VMULPS  0(SI), Y8, Y1   // b1*m
	VMULPS  Y0, Y9, Y2      // omb1*g
	VADDPS  Y2, Y1, Y1      // m'
	VMULPS  Y0, Y0, Y3      // g*g
	VMULPS  Y3, Y11, Y3     // omb2*(g*g)
	VMULPS  0(DX), Y10, Y4  // b2*v
	VADDPS  Y3, Y4, Y4      // v'
	VMOVUPS Y1, 0(SI)
	VMOVUPS Y4, 0(DX)
	VSQRTPS Y4, Y5          // sqrt(v')
	VMULPS  Y13, Y5, Y5     // *invSqrtBC2
	VADDPS  Y14, Y5, Y5     // +eps
	VMULPS  Y1, Y12, Y6     // step*m'
	VDIVPS  Y5, Y6, Y6      // (step*m') / denom
	VMOVUPS 0(DI), Y7
	VSUBPS  Y6, Y7, Y7      // p - ...
	VMOVUPS Y7, 0(DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, BX
	SUBQ    $8, CX
	JNZ     adamloop
	VZEROUPPER
	RET

// func anyNonFiniteAVX2(x *float32, n int) bool
//
// OR over x[:n] of (bits & 0x7f800000) + 0x00800000, whose sign bit is set
// exactly for NaN and ±Inf; n > 0, a multiple of 8. 32 elements per
// iteration (four accumulators) while at least 32 remain.
TEXT ·anyNonFiniteAVX2(SB), NOSPLIT, $0-17
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	MOVL         $0x7f800000, AX
	MOVQ         AX, X14
	VPBROADCASTD X14, Y14
	MOVL         $0x00800000, AX
	MOVQ         AX, X13
	VPBROADCASTD X13, Y13
	VPXOR        Y0, Y0, Y0
	VPXOR        Y1, Y1, Y1
	VPXOR        Y2, Y2, Y2
	VPXOR        Y3, Y3, Y3

nf32:
	CMPQ   CX, $32
	JB     nf8
	VPAND  0(SI), Y14, Y4
	VPAND  32(SI), Y14, Y5
	VPAND  64(SI), Y14, Y6
	VPAND  96(SI), Y14, Y7
	VPADDD Y13, Y4, Y4
	VPADDD Y13, Y5, Y5
	VPADDD Y13, Y6, Y6
	VPADDD Y13, Y7, Y7
	VPOR   Y4, Y0, Y0
	VPOR   Y5, Y1, Y1
	VPOR   Y6, Y2, Y2
	VPOR   Y7, Y3, Y3
	ADDQ   $128, SI
	SUBQ   $32, CX
	JMP    nf32

nf8:
	TESTQ  CX, CX
	JZ     nfdone
	VPAND  0(SI), Y14, Y4
	VPADDD Y13, Y4, Y4
	VPOR   Y4, Y0, Y0
	ADDQ   $32, SI
	SUBQ   $8, CX
	JMP    nf8

nfdone:
	VPOR      Y1, Y0, Y0
	VPOR      Y3, Y2, Y2
	VPOR      Y2, Y0, Y0
	VMOVMSKPS Y0, AX
	TESTL     AX, AX
	SETNE     ret+16(FP)
	VZEROUPPER
	RET

// func axpyRows64AVX2(y, m *float32, stride int, idx *int32, vals *float32, k, last int) bool
//
// For t < k: y[0:64] += vals[t] * m[idx[t]*stride : +64], VMULPS then
// VADDPS (product first, as axpyAVX2), with y in Y0..Y7 from the first
// row to the last. k > 0, last ≥ 0. Every row is checked before it is
// read: a row outside 0..last (an unsigned compare of the sign-extended
// index) returns false with y untouched; else true.
TEXT ·axpyRows64AVX2(SB), NOSPLIT, $0-57
	MOVQ    y+0(FP), DI
	MOVQ    m+8(FP), SI
	MOVQ    stride+16(FP), R8
	SHLQ    $2, R8
	MOVQ    idx+24(FP), R9
	MOVQ    vals+32(FP), R10
	MOVQ    k+40(FP), CX
	MOVQ    last+48(FP), R11
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VMOVUPS 128(DI), Y4
	VMOVUPS 160(DI), Y5
	VMOVUPS 192(DI), Y6
	VMOVUPS 224(DI), Y7

rows64:
	MOVLQSX      (R9), AX
	CMPQ         AX, R11
	JA           bad64
	IMULQ        R8, AX
	ADDQ         SI, AX
	VBROADCASTSS (R10), Y15
	VMULPS       0(AX), Y15, Y8
	VMULPS       32(AX), Y15, Y9
	VMULPS       64(AX), Y15, Y10
	VMULPS       96(AX), Y15, Y11
	VADDPS       Y0, Y8, Y0
	VADDPS       Y1, Y9, Y1
	VADDPS       Y2, Y10, Y2
	VADDPS       Y3, Y11, Y3
	VMULPS       128(AX), Y15, Y12
	VMULPS       160(AX), Y15, Y13
	VMULPS       192(AX), Y15, Y14
	VMULPS       224(AX), Y15, Y8
	VADDPS       Y4, Y12, Y4
	VADDPS       Y5, Y13, Y5
	VADDPS       Y6, Y14, Y6
	VADDPS       Y7, Y8, Y7
	ADDQ         $4, R9
	ADDQ         $4, R10
	DECQ         CX
	JNZ          rows64

	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VMOVUPS Y4, 128(DI)
	VMOVUPS Y5, 160(DI)
	VMOVUPS Y6, 192(DI)
	VMOVUPS Y7, 224(DI)
	VZEROUPPER
	MOVB    $1, ret+56(FP)
	RET

bad64:
	VZEROUPPER
	MOVB $0, ret+56(FP)
	RET

// func axpyRows8AVX2(y, m *float32, stride int, idx *int32, vals *float32, k, last int) bool
//
// axpyRows64AVX2 for y[0:8].
TEXT ·axpyRows8AVX2(SB), NOSPLIT, $0-57
	MOVQ    y+0(FP), DI
	MOVQ    m+8(FP), SI
	MOVQ    stride+16(FP), R8
	SHLQ    $2, R8
	MOVQ    idx+24(FP), R9
	MOVQ    vals+32(FP), R10
	MOVQ    k+40(FP), CX
	MOVQ    last+48(FP), R11
	VMOVUPS 0(DI), Y0

rows8:
	MOVLQSX      (R9), AX
	CMPQ         AX, R11
	JA           bad8
	IMULQ        R8, AX
	ADDQ         SI, AX
	VBROADCASTSS (R10), Y15
	VMULPS       0(AX), Y15, Y8
	VADDPS       Y0, Y8, Y0
	ADDQ         $4, R9
	ADDQ         $4, R10
	DECQ         CX
	JNZ          rows8

	VMOVUPS Y0, 0(DI)
	VZEROUPPER
	MOVB    $1, ret+56(FP)
	RET

bad8:
	VZEROUPPER
	MOVB $0, ret+56(FP)
	RET

// func listNonzeroAVX2(x *float32, n int, idx *int32, val *float32, pack *[256][8]int32) int
//
// Eight elements per iteration: Y1 = lanes where x != 0 (or unordered),
// AX = their mask, Y2 = pack[AX], and the packed lane numbers plus the
// block's first index go to idx, the packed values to val, eight slots
// each; the count advances by popcount(AX). n > 0, a multiple of 8.
TEXT ·listNonzeroAVX2(SB), NOSPLIT, $0-48
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	MOVQ   idx+16(FP), DI
	MOVQ   val+24(FP), R8
	MOVQ   pack+32(FP), R9
	XORQ   R10, R10             // count
	XORQ   R11, R11             // index of the block's first element
	VXORPS Y15, Y15, Y15        // zeros

blocks:
	VMOVUPS    (SI), Y0
	VCMPPS     $4, Y15, Y0, Y1  // NEQ_UQ: x != 0, or NaN
	VMOVMSKPS  Y1, AX
	MOVQ       AX, DX
	SHLQ       $5, DX
	VMOVDQU    (R9)(DX*1), Y2   // pack[mask]
	VPERMPS    Y0, Y2, Y3       // packed values
	MOVL       R11, BX
	MOVL       BX, X4
	VPBROADCASTD X4, Y4
	VPADDD     Y2, Y4, Y4       // packed indices: first + lane
	VMOVDQU    Y4, (DI)(R10*4)
	VMOVUPS    Y3, (R8)(R10*4)
	POPCNTL    AX, AX
	ADDQ       AX, R10
	ADDQ       $32, SI
	ADDQ       $8, R11
	SUBQ       $8, CX
	JNZ        blocks

	MOVQ R10, ret+40(FP)
	VZEROUPPER
	RET

// func reluAVX2(x *float32, n int)
//
// x[i] = +0 where x[i] < 0 (an ordered comparison: NaN and -0 stay as they
// are), 8 elements at a time: VCMPPS less-than-ordered against zero, then
// VANDNPS clears the lanes it set. n > 0, a multiple of 8.
TEXT ·reluAVX2(SB), NOSPLIT, $0-16
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	VXORPS Y15, Y15, Y15

relu8:
	VMOVUPS 0(SI), Y0
	VCMPPS  $0x11, Y15, Y0, Y1
	VANDNPS Y0, Y1, Y0
	VMOVUPS Y0, 0(SI)
	ADDQ    $32, SI
	SUBQ    $8, CX
	JNZ     relu8
	VZEROUPPER
	RET

// func zeroWhereZeroAVX2(d, a *float32, n int)
//
// d[i] = +0 where a[i] is +0 or -0 (an ordered equality: a NaN a keeps
// d[i]), 8 elements at a time. n > 0, a multiple of 8.
TEXT ·zeroWhereZeroAVX2(SB), NOSPLIT, $0-24
	MOVQ   d+0(FP), DI
	MOVQ   a+8(FP), SI
	MOVQ   n+16(FP), CX
	VXORPS Y15, Y15, Y15

zwz8:
	VMOVUPS 0(SI), Y0
	VCMPPS  $0x00, Y15, Y0, Y1
	VMOVUPS 0(DI), Y2
	VANDNPS Y2, Y1, Y2
	VMOVUPS Y2, 0(DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JNZ     zwz8
	VZEROUPPER
	RET

// func prefetchLines(x *float32, n int)
//
// PREFETCHT0 every 64-byte line of x[:n] (n > 0): a hint, no loads.
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	SHLQ $2, CX
	ADDQ SI, CX

pf:
	PREFETCHT0 (SI)
	ADDQ       $64, SI
	CMPQ       SI, CX
	JB         pf
	RET
