package ascend

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// asBytes views f as its in-memory bytes without copying. On little-endian
// hosts this is exactly the wire format.
func asBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

func getF32(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }

// encodeLE writes src little-endian into dst (len(dst) >= 4*len(src)).
func encodeLE(dst []byte, src []float32) {
	dst = dst[:4*len(src)]
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

// decodeLE reads little-endian src into dst (len(src) >= 4*len(dst)).
func decodeLE(dst []float32, src []byte) {
	src = src[:4*len(dst)]
	for i := range dst {
		dst[i] = getF32(src[4*i:])
	}
}
