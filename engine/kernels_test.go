package engine

import (
	"math"
	"math/rand/v2"
	"testing"
)

// kernelValues mixes ordinary values with the ones rounding goes wrong
// on: subnormals, huge values whose products overflow, signed zeros.
func kernelValues(r *rand.Rand, n int) []float32 {
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -3e-39, 3e38, -2e38, 1, -1, 1e-8}
	out := make([]float32, n)
	for i := range out {
		if r.IntN(8) == 0 {
			out[i] = special[r.IntN(len(special))]
		} else {
			out[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(9)-4)))
		}
	}
	return out
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v (%#08x), want %v (%#08x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// TestAxpyMatchesPortable: the kernel axpy runs (a vector one with AVX2)
// gives the portable loop's bits for every length (vector body and tail)
// and alignment.
func TestAxpyMatchesPortable(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 8, 9, 10, 31, 32, 33, 40, 127, 128, 129, 1000} {
		for off := range 3 {
			x := kernelValues(r, n+off)[off:]
			y := kernelValues(r, n+off)[off:]
			for _, a := range []float32{0, 1, -0.37, 3e30, 1e-30} {
				want := append([]float32(nil), y...)
				axpyPortable(want, x, a)
				got := append([]float32(nil), y...)
				axpy(got, x, a)
				sameBits(t, "y", got, want)
			}
		}
	}
}

// TestAxpyRowsMatchesPortable: axpyRows (64 and 8 columns at a time in
// registers with AVX2) gives the bits of axpyPortable applied row by row in
// the list's order, for widths around the vector blocks, rows listed out of
// order and repeated, strides wider than y, and offsets into m.
func TestAxpyRowsMatchesPortable(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 7, 8, 9, 10, 63, 64, 65, 72, 128, 130, 200} {
		for _, extra := range []int{0, 5} { // stride = n + extra
			stride, rows := n+extra, 7
			m := kernelValues(r, rows*stride)
			for _, k := range []int{0, 1, 2, 13} {
				idx, vals := make([]int32, k), kernelValues(r, k)
				for t := range idx {
					idx[t] = int32(r.IntN(rows))
				}
				y := kernelValues(r, n)
				want := append([]float32(nil), y...)
				for t, j := range idx {
					axpyPortable(want, m[int(j)*stride:int(j)*stride+n], vals[t])
				}
				got := append([]float32(nil), y...)
				axpyRows(got, m, stride, idx, vals)
				sameBits(t, "y", got, want)
			}
		}
	}
	// A row outside m is refused, not read, wherever it is in the list
	// and whichever kernel meets it; y is left alone.
	for _, tc := range []struct {
		n, stride, mlen int
		idx             []int32
	}{
		{8, 8, 16, []int32{2}},
		{8, 8, 16, []int32{-1}},
		{10, 10, 40, []int32{0, 4, 1}},  // 8-column kernel
		{128, 128, 512, []int32{1, 4}},  // 64-column kernel, second row
		{130, 130, 520, []int32{0, -7}}, // negative, after a good row
		{64, 64, 127, []int32{0, 1}},    // the second row's block is cut short
		{72, 0, 71, []int32{0}},         // stride 0: m shorter than y
	} {
		y := make([]float32, tc.n)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%+v: a row outside the matrix was read", tc)
				}
			}()
			axpyRows(y, make([]float32, tc.mlen), tc.stride, tc.idx, make([]float32, len(tc.idx)))
		}()
	}
	// Stride 0 repeats m's first row.
	y, m := make([]float32, 16), kernelValues(r, 16)
	axpyRows(y, m, 0, []int32{0, 5}, []float32{1, 1})
	for i := range y {
		if want := (0 + m[i]) + m[i]; math.Float32bits(y[i]) != math.Float32bits(want) {
			t.Fatalf("stride 0: y[%d] = %v, want %v", i, y[i], want)
		}
	}
}

// TestListNonzeroMatchesPortable: listNonzero (eight at a time with
// AVX2) lists the same indices and values (bits) as the portable loop:
// both zeros skipped, NaN, subnormals and infinities kept, every length
// around the vector blocks, sparse and dense inputs.
func TestListNonzeroMatchesPortable(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(-1)), 1e-45, -1e-40}
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 64, 100, 784} {
		for _, zeros := range []int{0, 2, 8} { // in 8: none, a quarter, all
			x := make([]float32, n)
			for i := range x {
				switch {
				case r.IntN(8) < zeros:
					x[i] = specials[r.IntN(2)]
				case r.IntN(6) == 0:
					x[i] = specials[2+r.IntN(len(specials)-2)]
				default:
					x[i] = float32(r.NormFloat64())
				}
			}
			wantIdx, wantVal := make([]int32, n), make([]float32, n)
			want := listNonzeroPortable(x, wantIdx, wantVal)
			idx, val := make([]int32, n+listSlack), make([]float32, n+listSlack)
			got := listNonzero(x, idx, val)
			if got != want {
				t.Fatalf("n %d: %d listed, want %d", n, got, want)
			}
			for i := range want {
				if idx[i] != wantIdx[i] || math.Float32bits(val[i]) != math.Float32bits(wantVal[i]) {
					t.Fatalf("n %d: entry %d = %d:%v, want %d:%v", n, i, idx[i], val[i], wantIdx[i], wantVal[i])
				}
			}
		}
	}
}

// TestAdamMatchesPortable: adamUpdate gives the portable loop's bits for
// parameters, both moments, every length and several steps' constants.
func TestAdamMatchesPortable(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 7, 8, 9, 16, 17, 101770} {
		p, g := kernelValues(r, n), kernelValues(r, n)
		m := kernelValues(r, n)
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(math.Abs(float64(kernelValues(r, 1)[0])))
		}
		p2, m2, v2 := append([]float32(nil), p...), append([]float32(nil), m...), append([]float32(nil), v...)
		for step := int64(1); step <= 3; step++ {
			bc1, bc2 := 1-powInt(adamBeta1, step), 1-powInt(adamBeta2, step)
			k := adamConsts{b1: adamBeta1, omb1: 1 - adamBeta1, b2: adamBeta2, omb2: 1 - adamBeta2,
				step: float32(1e-3 / bc1), invSqrtBC2: float32(1 / math.Sqrt(bc2)), eps: adamEps}
			adamPortable(p, m, v, g, &k)
			adamUpdate(p2, m2, v2, g, &k)
			sameBits(t, "p", p2, p)
			sameBits(t, "m", m2, m)
			sameBits(t, "v", v2, v)
		}
	}
}

func BenchmarkAxpy(b *testing.B) {
	x, y := make([]float32, 128), make([]float32, 128)
	for i := range x {
		x[i] = float32(i)
	}
	b.SetBytes(3 * 4 * 128)
	b.Run("kernel", func(b *testing.B) {
		for b.Loop() {
			axpy(y, x, 0.5)
		}
	})
	b.Run("portable", func(b *testing.B) {
		for b.Loop() {
			axpyPortable(y, x, 0.5)
		}
	})
}

// TestAnyNonFinite: NaN and ±Inf anywhere (vector body, tail) are found,
// the largest finite values and subnormals are not, as by the portable
// test; firstNonFinite names the first.
func TestAnyNonFinite(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0xffc00001)}
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 100, 1000} {
		x := make([]float32, n)
		for i := range x {
			x[i] = []float32{math.MaxFloat32, -math.MaxFloat32, 1e-45, -0, 1}[i%5]
		}
		if anyNonFinite(x) || anyNonFinitePortable(x) || firstNonFinite(x) != -1 {
			t.Fatalf("n=%d: finite values reported non-finite", n)
		}
		for _, at := range []int{0, n / 2, n - 1} {
			if at < 0 || at >= n {
				continue
			}
			for _, b := range bad {
				y := append([]float32(nil), x...)
				y[at] = b
				if !anyNonFinite(y) || !anyNonFinitePortable(y) || firstNonFinite(y) != at {
					t.Fatalf("n=%d: %v at %d: any %v, portable %v, first %d", n, b, at, anyNonFinite(y), anyNonFinitePortable(y), firstNonFinite(y))
				}
			}
		}
	}
}

// TestGatherColumns: the nonzero inputs grouped by input, rows ascending,
// as a column walk finds them; ±0 skipped, subnormals and NaN kept.
func TestGatherColumns(t *testing.T) {
	for _, tc := range []struct {
		x    float32
		want int32
	}{{0, 0}, {float32(math.Copysign(0, -1)), 0}, {1e-45, 1}, {-1e-45, 1}, {float32(math.NaN()), 1}, {float32(math.Inf(-1)), 1}, {2, 1}} {
		if got := nonzero(tc.x); got != tc.want {
			t.Errorf("nonzero(%v) = %d, want %d", tc.x, got, tc.want)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	var c columns
	for _, shape := range []struct{ rows, in int }{{1, 1}, {3, 5}, {32, 784}, {7, 128}} {
		a := kernelValues(r, shape.rows*shape.in)
		for i := range a {
			if r.IntN(3) > 0 {
				a[i] = 0
			}
		}
		ls := newRowLists([]int{shape.in, 1}, shape.rows)
		for i := 0; i < shape.rows; i++ {
			ri, rv := ls[0].slot(i)
			ls[0].n[i] = int32(listNonzero(a[i*shape.in:(i+1)*shape.in], ri, rv))
		}
		nz := c.gather(&ls[0], shape.rows, shape.in)
		for k := 0; k < shape.in; k++ {
			var rows []int32
			var vals []float32
			for i := 0; i < shape.rows; i++ {
				if x := a[i*shape.in+k]; x != 0 {
					rows, vals = append(rows, int32(i)), append(vals, x)
				}
			}
			lo := k * nz.rows
			gotRows, gotVals := nz.row[lo:lo+int(nz.count[k])], nz.val[lo:lo+int(nz.count[k])]
			if len(gotRows) != len(rows) {
				t.Fatalf("%v input %d: %d nonzeros, want %d", shape, k, len(gotRows), len(rows))
			}
			for j := range rows {
				if gotRows[j] != rows[j] || math.Float32bits(gotVals[j]) != math.Float32bits(vals[j]) {
					t.Fatalf("%v input %d entry %d: row %d value %v, want row %d value %v", shape, k, j, gotRows[j], gotVals[j], rows[j], vals[j])
				}
			}
		}
	}
}

// dot returns sum x[j]*y[j] in index order from a zero sum, unfused: the
// reference for propagate.
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s float32
	for j := range x {
		s += float32(x[j] * y[j])
	}
	return s
}

// TestPropagateMatchesDot: propagate's deltas are, bit for bit, one scalar
// dot per input (zero where ReLU clamped the input), for output widths on
// either side of the kernels' 8 and 64 columns, with zeros, negative zeros
// and subnormals among the deltas and weights, and a NaN activation.
func TestPropagateMatchesDot(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	val := func() float32 {
		switch rng.IntN(8) {
		case 0:
			return 0
		case 1:
			return float32(math.Copysign(0, -1))
		case 2:
			return math.Float32frombits(uint32(rng.IntN(1 << 20))) // subnormal
		}
		return float32(rng.NormFloat64())
	}
	const rows = 5
	for _, in := range []int{1, 5, 64, 128, 131} {
		for _, out := range []int{1, 3, 8, 10, 64, 70, 130} {
			w, a, dz := make([]float32, in*out), make([]float32, rows*in), make([]float32, rows*out)
			for _, s := range [][]float32{w, a, dz} {
				for i := range s {
					s[i] = val()
				}
			}
			a[len(a)/2] = float32(math.NaN()) // nonzero, as x == 0 says
			outs := make([]int32, out)
			for j := range outs {
				outs[j] = int32(j)
			}
			da := make([]float32, rows*in)
			for i := range da {
				da[i] = float32(math.NaN()) // every element must be written
			}
			propagate(da, a, dz, w, make([]float32, in*out), outs, in, out)
			for i := range rows {
				for k := range in {
					want := float32(0)
					if a[i*in+k] != 0 {
						want = dot(dz[i*out:(i+1)*out], w[k*out:(k+1)*out])
					}
					if got := da[i*in+k]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("in %d out %d row %d input %d: %v (%#x), want %v (%#x)", in, out, i, k, got, math.Float32bits(got), want, math.Float32bits(want))
					}
				}
			}
		}
	}
}

// TestReluMatchesBranch: relu's bits (AVX2 and portable) are those of
// "if x < 0 { x = 0 }" for zeros of both signs, NaNs of both signs,
// infinities, subnormals and the largest finite values, and random floats;
// zeroWhereZero's are those of "if a == 0 { d = 0 }".
func TestReluMatchesBranch(t *testing.T) {
	x := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), -float32(math.NaN()), float32(math.Inf(1)),
		float32(math.Inf(-1)), math.Float32frombits(1), math.Float32frombits(0x80000001), math.MaxFloat32, -math.MaxFloat32,
		math.Float32frombits(0xffc00001), 1, -1}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		x = append(x, math.Float32frombits(rng.Uint32()))
	}
	for _, f := range []struct {
		name string
		fn   func([]float32)
	}{{"relu", relu}, {"reluPortable", reluPortable}} {
		for _, n := range []int{len(x), 1, 7, 8, 9, 130} { // around the vector blocks
			got := append([]float32(nil), x[len(x)-n:]...)
			f.fn(got)
			for i, v := range x[len(x)-n:] {
				want := v
				if v < 0 {
					want = 0
				}
				if math.Float32bits(got[i]) != math.Float32bits(want) {
					t.Fatalf("%s, %d elements: %v = %#x gives %#x, want %#x", f.name, n, v, math.Float32bits(v), math.Float32bits(got[i]), math.Float32bits(want))
				}
			}
		}
	}
	// Zeroing where another vector is zero: d is kept where a is nonzero
	// or NaN, +0 where a is ±0.
	for _, f := range []struct {
		name string
		fn   func(d, a []float32)
	}{{"zeroWhereZero", zeroWhereZero}, {"zeroWhereZeroPortable", zeroWhereZeroPortable}} {
		for _, n := range []int{len(x), 1, 7, 8, 9, 130} {
			a := x[len(x)-n:]
			d := make([]float32, n)
			for i := range d {
				d[i] = math.Float32frombits(rng.Uint32())
			}
			got := append([]float32(nil), d...)
			f.fn(got, a)
			for i := range d {
				want := d[i]
				if a[i] == 0 {
					want = 0
				}
				if math.Float32bits(got[i]) != math.Float32bits(want) {
					t.Fatalf("%s, %d elements: a %#x, d %#x gives %#x, want %#x", f.name, n, math.Float32bits(a[i]), math.Float32bits(d[i]), math.Float32bits(got[i]), math.Float32bits(want))
				}
			}
		}
	}
}

// TestPrefetchIsOnlyAHint: prefetching any length, aligned or not, from a
// slice's start up to its end changes nothing.
func TestPrefetchIsOnlyAHint(t *testing.T) {
	x := kernelValues(rand.New(rand.NewPCG(7, 7)), 1000)
	want := append([]float32(nil), x...)
	for _, n := range []int{0, 1, 15, 16, 17, 784, 999} {
		for _, off := range []int{0, 1} {
			prefetch(x[off : off+n])
		}
	}
	sameBits(t, "x", x, want)
}
