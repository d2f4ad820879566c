//go:build !purego

#include "textflag.h"

// func addAVX2(dst, a, b *float32, n int)
//
// dst[i] = a[i] + b[i] for i < n; n > 0 and a multiple of 32. dst may be
// a or b exactly: each 128-byte block is loaded before it is stored.
TEXT ·addAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX

loop:
	VMOVUPS 0(SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VADDPS  0(DX), Y0, Y0
	VADDPS  32(DX), Y1, Y1
	VADDPS  64(DX), Y2, Y2
	VADDPS  96(DX), Y3, Y3
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, SI
	ADDQ    $128, DX
	ADDQ    $128, DI
	SUBQ    $32, CX
	JNZ     loop
	VZEROUPPER
	RET

// func addAVX2NT(dst, a, b *float32, n int)
//
// addAVX2 with non-temporal stores: dst must be 32-byte aligned. The
// stores bypass the caches (no read-for-ownership of dst) and are fenced
// (SFENCE) before returning, so a flag published after the call orders
// after them.
TEXT ·addAVX2NT(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX

loopnt:
	VMOVUPS  0(SI), Y0
	VMOVUPS  32(SI), Y1
	VMOVUPS  64(SI), Y2
	VMOVUPS  96(SI), Y3
	VADDPS   0(DX), Y0, Y0
	VADDPS   32(DX), Y1, Y1
	VADDPS   64(DX), Y2, Y2
	VADDPS   96(DX), Y3, Y3
	VMOVNTPS Y0, 0(DI)
	VMOVNTPS Y1, 32(DI)
	VMOVNTPS Y2, 64(DI)
	VMOVNTPS Y3, 96(DI)
	ADDQ     $128, SI
	ADDQ     $128, DX
	ADDQ     $128, DI
	SUBQ     $32, CX
	JNZ      loopnt
	SFENCE
	VZEROUPPER
	RET

// func addAVX2Two(dst, far, a, b *float32, scale float32, n int, mode int)
// stores (a[i]+b[i])·scale into dst[i] and far[i] for i < n (n > 0, a
// multiple of 32): mode bit 0 stores into far, bit 1 into dst, around the
// caches (non-temporal; that output 32-byte aligned), else ordinary
// stores. Each may be a or b exactly: every 128-byte block is loaded
// before it is stored. Fenced, so the non-temporal stores are ordered
// before the caller's next store (a peer told "done" reads them).
TEXT ·addAVX2Two(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ far+8(FP), R8
	MOVQ a+16(FP), SI
	MOVQ b+24(FP), DX
	VBROADCASTSS scale+32(FP), Y4
	MOVQ n+40(FP), CX
	MOVQ mode+48(FP), R9

looptwo:
	VMOVUPS  0(SI), Y0
	VMOVUPS  32(SI), Y1
	VMOVUPS  64(SI), Y2
	VMOVUPS  96(SI), Y3
	VADDPS   0(DX), Y0, Y0
	VADDPS   32(DX), Y1, Y1
	VADDPS   64(DX), Y2, Y2
	VADDPS   96(DX), Y3, Y3
	VMULPS   Y4, Y0, Y0
	VMULPS   Y4, Y1, Y1
	VMULPS   Y4, Y2, Y2
	VMULPS   Y4, Y3, Y3
	TESTQ    $2, R9
	JNZ      dstnt
	VMOVUPS  Y0, 0(DI)
	VMOVUPS  Y1, 32(DI)
	VMOVUPS  Y2, 64(DI)
	VMOVUPS  Y3, 96(DI)
	JMP      far

dstnt:
	VMOVNTPS Y0, 0(DI)
	VMOVNTPS Y1, 32(DI)
	VMOVNTPS Y2, 64(DI)
	VMOVNTPS Y3, 96(DI)

far:
	TESTQ    $1, R9
	JNZ      farnt
	VMOVUPS  Y0, 0(R8)
	VMOVUPS  Y1, 32(R8)
	VMOVUPS  Y2, 64(R8)
	VMOVUPS  Y3, 96(R8)
	JMP      next

farnt:
	VMOVNTPS Y0, 0(R8)
	VMOVNTPS Y1, 32(R8)
	VMOVNTPS Y2, 64(R8)
	VMOVNTPS Y3, 96(R8)

next:
	ADDQ     $128, SI
	ADDQ     $128, DX
	ADDQ     $128, DI
	ADDQ     $128, R8
	SUBQ     $32, CX
	JNZ      looptwo
	SFENCE
	VZEROUPPER
	RET

// func copyAVX2NT(dst, src *float32, n int)
//
// dst[i] = src[i] for i < n with non-temporal stores; dst 32-byte
// aligned, n > 0 a multiple of 32; fenced like addAVX2NT.
TEXT ·copyAVX2NT(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

loopcp:
	VMOVUPS  0(SI), Y0
	VMOVUPS  32(SI), Y1
	VMOVUPS  64(SI), Y2
	VMOVUPS  96(SI), Y3
	VMOVNTPS Y0, 0(DI)
	VMOVNTPS Y1, 32(DI)
	VMOVNTPS Y2, 64(DI)
	VMOVNTPS Y3, 96(DI)
	ADDQ     $128, SI
	ADDQ     $128, DI
	SUBQ     $32, CX
	JNZ      loopcp
	SFENCE
	VZEROUPPER
	RET

// func scaleAVX2(buf *float32, s float32, n int, div int)
// buf[i] *= s, or with div != 0 buf[i] /= s (the same correctly rounded
// division as the scalar one), for i < n (n > 0, a multiple of 32).
TEXT ·scaleAVX2(SB), NOSPLIT, $0-32
	MOVQ buf+0(FP), DI
	VBROADCASTSS s+8(FP), Y4
	MOVQ n+16(FP), CX
	MOVQ div+24(FP), R9

loopscale:
	VMOVUPS  0(DI), Y0
	VMOVUPS  32(DI), Y1
	VMOVUPS  64(DI), Y2
	VMOVUPS  96(DI), Y3
	TESTQ    R9, R9
	JNZ      divide
	VMULPS   Y4, Y0, Y0
	VMULPS   Y4, Y1, Y1
	VMULPS   Y4, Y2, Y2
	VMULPS   Y4, Y3, Y3
	JMP      store

divide:
	VDIVPS   Y4, Y0, Y0
	VDIVPS   Y4, Y1, Y1
	VDIVPS   Y4, Y2, Y2
	VDIVPS   Y4, Y3, Y3

store:
	VMOVUPS  Y0, 0(DI)
	VMOVUPS  Y1, 32(DI)
	VMOVUPS  Y2, 64(DI)
	VMOVUPS  Y3, 96(DI)
	ADDQ     $128, DI
	SUBQ     $32, CX
	JNZ      loopscale
	VZEROUPPER
	RET
