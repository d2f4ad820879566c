//go:build !purego

#include "textflag.h"

// func quantizeAVX2(y *float32, u *float64, out *byte, scale float32, n int)
//
// Four values per iteration: y/scale (VDIVPS), widened (VCVTPS2PD), + u
// (VADDPD), rounded down (VROUNDPD $9: toward −∞, no precision
// exception), truncated to int32 (exact after rounding), clamped to
// [−127, 127], packed to bytes; then y − (0 + float32(q)·scale).
TEXT ·quantizeAVX2(SB), NOSPLIT, $0-40
	MOVQ         y+0(FP), DI
	MOVQ         u+8(FP), SI
	MOVQ         out+16(FP), BX
	VBROADCASTSS scale+24(FP), X4
	MOVQ         n+32(FP), CX
	MOVL         $127, AX
	VMOVD        AX, X5
	VPBROADCASTD X5, X5
	MOVL         $-127, AX
	VMOVD        AX, X6
	VPBROADCASTD X6, X6
	VXORPS       X7, X7, X7

loop:
	VMOVUPS     0(DI), X0
	VDIVPS      X4, X0, X1
	VCVTPS2PD   X1, Y1
	VADDPD      0(SI), Y1, Y1
	VROUNDPD    $9, Y1, Y1
	VCVTTPD2DQY Y1, X1
	VPMINSD     X5, X1, X1
	VPMAXSD     X6, X1, X1
	VPACKSSDW   X1, X1, X2
	VPACKSSWB   X2, X2, X2
	VMOVD       X2, AX
	MOVL        AX, 0(BX)
	VCVTDQ2PS   X1, X3
	VMULPS      X4, X3, X3
	VADDPS      X3, X7, X3
	VSUBPS      X3, X0, X0
	VMOVUPS     X0, 0(DI)
	ADDQ        $16, DI
	ADDQ        $32, SI
	ADDQ        $4, BX
	SUBQ        $4, CX
	JNZ         loop
	VZEROUPPER
	RET
