package codec

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

func randVec(seed uint64, n int) []float32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func mustCodec(t testing.TB, s string) Codec {
	t.Helper()
	c, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTopKKeepsTheLargest(t *testing.T) {
	for _, n := range []int{1, 2, 7, 1000, 4097} {
		for _, ratio := range []float64{0.001, 0.01, 0.3, 1} {
			x := randVec(uint64(n), n)
			x[n/2] = 0 // zeros and ties must not break it
			tk, _ := NewTopK(ratio)
			enc := tk.Encode(nil, x, 0, 0)
			out := make([]float32, n)
			if err := tk.DecodeAdd(out, enc); err != nil {
				t.Fatal(err)
			}
			k := tk.K(n)
			kept := 0
			var minKept float32 = math.MaxFloat32
			for i, v := range out {
				if v != 0 {
					kept++
					if v != x[i] {
						t.Fatalf("n=%d: value %d is %v, want %v", n, i, v, x[i])
					}
					minKept = min(minKept, abs32(v))
				}
			}
			mags := make([]float32, n)
			for i, v := range x {
				mags[i] = abs32(v)
			}
			sort.Slice(mags, func(a, b int) bool { return mags[a] > mags[b] })
			if kept > k || (kept < k && mags[kept] != 0) {
				t.Fatalf("n=%d ratio=%v: kept %d, want %d", n, ratio, kept, k)
			}
			if kept > 0 && minKept < mags[k-1] {
				t.Fatalf("n=%d ratio=%v: kept a value of magnitude %v below the k-th largest %v", n, ratio, minKept, mags[k-1])
			}
		}
	}
}

// TestTopKThresholdExact: on long vectors, where the selection starts from
// a sampled guess, the threshold and the count above it are those of a
// full sort, whatever the sample sees: smooth, tied, sparse, NaN-laden and
// sample-dodging data, k from 1 to n.
func TestTopKThresholdExact(t *testing.T) {
	const n = 3 * sampledSelectMin
	shapes := map[string]func(i int, r float32) float32{
		"normal":   func(_ int, r float32) float32 { return r },
		"all tied": func(int, float32) float32 { return -2 },
		"sparse":   func(i int, r float32) float32 { return float32(i%97/96) * r },
		"nan": func(i int, r float32) float32 {
			return map[bool]float32{true: float32(math.NaN()), false: r}[i%500 == 7]
		},
		// The sample reads indices j·n/2048; the large values sit between.
		"dodging": func(i int, r float32) float32 {
			if i%(n/2048) == 1 {
				return 1000 + r
			}
			return r / 1000
		},
		"ascending": func(i int, _ float32) float32 { return float32(i) },
		// … or only there: the guess keeps too few, and the full selection runs.
		"sampled": func(i int, r float32) float32 {
			if i%(n/2048) == 0 {
				return 1000 + r
			}
			return r / 1000
		},
	}
	for name, shape := range shapes {
		x := randVec(5, n)
		for i := range x {
			x[i] = shape(i, x[i])
		}
		ref := make([]float64, n)
		for i, v := range x {
			ref[i] = float64(magnitude(v))
		}
		slices.Sort(ref)
		slices.Reverse(ref)
		for _, k := range []int{1, 7, n / 1000, n / 100, n / 20, n / 3, n - 1, n} {
			tk := &TopK{Ratio: float64(k) / n}
			thr, above := tk.threshold(x, k)
			wantAbove := 0
			for _, v := range ref {
				if v > ref[k-1] {
					wantAbove++
				}
			}
			if float64(thr) != ref[k-1] || above != wantAbove {
				t.Errorf("%s, k %d: threshold %v with %d above, want %v with %d", name, k, thr, above, ref[k-1], wantAbove)
			}
		}
	}
}

func TestTopKTiesDeterministic(t *testing.T) {
	x := []float32{1, -1, 1, 1, -1, 0.5}
	tk, _ := NewTopK(0.5) // k = 3
	out := make([]float32, len(x))
	if err := tk.DecodeAdd(out, tk.Encode(nil, x, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if want := []float32{1, -1, 1, 0, 0, 0}; !slices.Equal(out, want) {
		t.Errorf("got %v, want %v (ties in index order)", out, want)
	}
}

func TestSignAndInt8Bounds(t *testing.T) {
	x := randVec(3, 5000)
	s, _ := NewSign(100)
	out := make([]float32, len(x))
	if err := s.DecodeAdd(out, s.Encode(nil, x, 0, 0)); err != nil {
		t.Fatal(err)
	}
	for b := 0; b < len(x); b += 100 {
		var mean float64
		for _, v := range x[b : b+100] {
			mean += float64(abs32(v))
		}
		mean /= 100
		for i := b; i < b+100; i++ {
			if math.Abs(float64(abs32(out[i]))-mean) > 1e-6 || math.Signbit(float64(out[i])) != math.Signbit(float64(x[i])) {
				t.Fatalf("sign value %d: %v for %v (bucket mean %v)", i, out[i], x[i], mean)
			}
		}
	}
	q, _ := NewInt8(64)
	clear(out)
	if err := q.DecodeAdd(out, q.Encode(nil, x, 5, 1)); err != nil {
		t.Fatal(err)
	}
	for b := 0; b < len(x); b += 64 {
		var m float32
		for _, v := range x[b:min(len(x), b+64)] {
			m = max(m, abs32(v))
		}
		for i := b; i < min(len(x), b+64); i++ {
			if d := abs32(out[i] - x[i]); d > m/127*1.0001 {
				t.Fatalf("int8 value %d: %v for %v, error %v > scale %v", i, out[i], x[i], d, m/127)
			}
		}
	}
	// Unbiased: the mean of many encodings approaches x.
	mean := make([]float64, 64)
	const trials = 4000
	for step := range uint64(trials) {
		o := make([]float32, 64)
		if err := q.DecodeAdd(o, q.Encode(nil, x[:64], step, 0)); err != nil {
			t.Fatal(err)
		}
		for i, v := range o {
			mean[i] += float64(v) / trials
		}
	}
	var m float32
	for _, v := range x[:64] {
		m = max(m, abs32(v))
	}
	for i := range mean {
		if math.Abs(mean[i]-float64(x[i])) > float64(m/127)*0.1 {
			t.Errorf("int8 is biased at %d: mean %v, value %v", i, mean[i], x[i])
		}
	}
	// Reproducible: same step and rank, same bytes; another rank differs.
	if a, b := q.Encode(nil, x, 9, 2), q.Encode(nil, x, 9, 2); !slices.Equal(a, b) {
		t.Error("int8 encoding not reproducible")
	}
}

// TestFeedbackConservesMass: over any number of steps, what was decoded
// plus the final residual equals the sum of the gradients.
func TestFeedbackConservesMass(t *testing.T) {
	for _, name := range []string{"topk:0.01", "sign:256", "int8:128", "none"} {
		t.Run(name, func(t *testing.T) {
			const n, steps = 3000, 40
			f := NewFeedback(mustCodec(t, name), n)
			got := make([]float64, n)
			want := make([]float64, n)
			for s := range uint64(steps) {
				g := randVec(s+100, n)
				for i, v := range g {
					want[i] += float64(v)
				}
				enc, err := f.Encode(g, s, 0)
				if err != nil {
					t.Fatal(err)
				}
				dec := make([]float32, n)
				if err := f.Codec.DecodeAdd(dec, enc); err != nil {
					t.Fatal(err)
				}
				for i, v := range dec {
					got[i] += float64(v)
				}
			}
			for i := range got {
				if d := math.Abs(got[i] + float64(f.Residual[i]) - want[i]); d > 1e-3 {
					t.Fatalf("value %d: decoded %v + residual %v ≠ sum %v", i, got[i], f.Residual[i], want[i])
				}
			}
			// The residual round-trips through a checkpoint.
			b, _ := f.MarshalBinary()
			f2 := NewFeedback(mustCodec(t, name), n)
			if err := f2.UnmarshalBinary(b); err != nil || !slices.Equal(f2.Residual, f.Residual) {
				t.Fatalf("restore: %v", err)
			}
			other := NewFeedback(Dense{}, n)
			if name != "none" {
				if err := other.UnmarshalBinary(b); !errors.Is(err, ErrInvalid) {
					t.Errorf("restore into another codec: %v", err)
				}
			}
			if err := f2.UnmarshalBinary(b[:len(b)-3]); !errors.Is(err, ErrCorrupt) {
				t.Errorf("truncated state: %v", err)
			}
		})
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	x := randVec(1, 100)
	for _, name := range []string{"topk:0.1", "sign", "int8", "none"} {
		c := mustCodec(t, name)
		enc := c.Encode(nil, x, 0, 0)
		out := make([]float32, 100)
		for _, bad := range [][]byte{nil, enc[:len(enc)-1], append(slices.Clone(enc), 0), {enc[0] ^ 7}} {
			if err := c.DecodeAdd(out, bad); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%s: %d-byte garbage: %v", name, len(bad), err)
			}
		}
		if err := c.DecodeAdd(make([]float32, 99), enc); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: wrong length accepted", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	x := randVec(2, 37)
	for _, name := range []string{"topk:0.2", "sign:5", "int8:7", "none"} {
		c, _ := Parse(name)
		f.Add(c.Encode(nil, x, 0, 0))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, name := range []string{"topk:0.2", "sign:5", "int8:7", "none"} {
			c, _ := Parse(name)
			_ = c.DecodeAdd(make([]float32, 37), b)
		}
	})
}

func TestParse(t *testing.T) {
	for _, bad := range []string{"topk:0", "topk:2", "topk:x", "sign:0", "int8:-1", "gzip"} {
		if _, err := Parse(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v", bad, err)
		}
	}
}

// TestCompressedAllReduce: over real TCP ranks, every rank ends with the
// same bits, equal to the sum of every rank's decoded encoding.
func TestCompressedAllReduce(t *testing.T) {
	const world, n = 3, 10_000
	cl := ascendtest.NewCluster(t, world)
	for _, name := range []string{"topk:0.01", "sign", "int8", "none"} {
		t.Run(name, func(t *testing.T) {
			results := make([][]float32, world)
			want := make([]float32, n)
			var mu sync.Mutex
			cl.Run(t, func(c *ascend.Communicator) {
				f := NewFeedback(mustCodec(t, name), n)
				var x Exchange
				for step := range uint64(3) {
					g := randVec(uint64(c.Rank())*100+step, n)
					fcopy := NewFeedback(mustCodec(t, name), n)
					copy(fcopy.Residual, f.Residual)
					st, err := x.AllReduce(context.Background(), c, f, g, step, false)
					if err != nil {
						t.Error(err)
						return
					}
					if step == 2 {
						enc, _ := fcopy.Encode(randVec(uint64(c.Rank())*100+step, n), step, c.Rank())
						mu.Lock()
						if err := fcopy.Codec.DecodeAdd(want, enc); err != nil {
							t.Error(err)
						}
						results[c.Rank()] = g
						mu.Unlock()
						if name == "topk:0.01" && st.TrafficReduction < 16 {
							t.Errorf("topk:0.01 traffic reduction %.1f×", st.TrafficReduction)
						}
					}
				}
			})
			for r := 1; r < world; r++ {
				if !slices.Equal(results[r], results[0]) {
					t.Fatalf("rank %d differs from rank 0", r)
				}
			}
			for i := range want {
				if d := math.Abs(float64(results[0][i] - want[i])); d > 1e-4 {
					t.Fatalf("value %d: %v, want %v", i, results[0][i], want[i])
				}
			}
		})
	}
}

type commSum struct{ c *ascend.Communicator }

func (s commSum) Size() int { return s.c.Size() }
func (s commSum) AllReduceSum(ctx context.Context, b []float32) error {
	return s.c.AllReduce(ctx, b, ascend.Sum)
}

// TestPowerSGD: low-rank gradients come through exactly (the mean), full
// rank is the identity up to rounding, and the residual holds what a low
// rank drops.
func TestPowerSGD(t *testing.T) {
	const world = 2
	cl := ascendtest.NewCluster(t, world)
	cl.Run(t, func(c *ascend.Communicator) {
		p, _ := NewPowerSGD(2, 42)
		rows, cols := 30, 20
		// Rank-1 gradients u·vᵀ scaled per rank: the mean is rank 1.
		u, v := randVec(1, rows), randVec(2, cols)
		mk := func() []Matrix {
			d := make([]float32, rows*cols)
			for a := range rows {
				for b := range cols {
					d[a*cols+b] = u[a] * v[b] * float32(c.Rank()+1)
				}
			}
			bias := []float32{float32(c.Rank()), 1}
			return []Matrix{{rows, cols, d}, {1, 2, bias}}
		}
		mats := mk()
		if err := p.AllReduce(context.Background(), commSum{c}, mats); err != nil {
			t.Error(err)
			return
		}
		for a := range rows {
			for b := range cols {
				want := u[a] * v[b] * 1.5
				if d := math.Abs(float64(mats[0].Data[a*cols+b] - want)); d > 1e-4 {
					t.Errorf("rank %d: (%d,%d) = %v, want %v", c.Rank(), a, b, mats[0].Data[a*cols+b], want)
					return
				}
			}
		}
		if mats[1].Data[0] != 0.5 || mats[1].Data[1] != 1 {
			t.Errorf("vector: %v, want [0.5 1]", mats[1].Data)
		}
		comp, dense := p.Traffic(mats)
		if comp != (rows+cols)*2+2 || dense != rows*cols+2 {
			t.Errorf("traffic %d of %d", comp, dense)
		}
	})
}

// TestSignMatchesReference: the branch-free sign codec gives the bits of
// the plain definition (bit set for a clear sign bit, −0 included; decode
// adds the scale or subtracts it) at odd lengths and buckets.
func TestSignMatchesReference(t *testing.T) {
	for _, n := range []int{1, 7, 8, 9, 1000, 4099} {
		x := randVec(uint64(n), n)
		x[0] = float32(math.Copysign(0, -1))
		for _, bucket := range []int{1, 3, 1024} {
			s := &Sign{Bucket: bucket}
			enc := s.Encode(nil, x, 0, 0)
			bits := enc[len(enc)-(n+7)/8:]
			for i, v := range x {
				want := !math.Signbit(float64(v))
				if got := bits[i>>3]&(1<<(i&7)) != 0; got != want {
					t.Fatalf("n %d bucket %d: bit %d = %v for %v", n, bucket, i, got, v)
				}
			}
			out := randVec(uint64(n)+1, n)
			ref := append([]float32(nil), out...)
			if err := s.DecodeAdd(out, enc); err != nil {
				t.Fatal(err)
			}
			scales := enc[len(enc)-(n+7)/8-4*((n+bucket-1)/bucket) : len(enc)-(n+7)/8]
			for i := range ref {
				scale := math.Float32frombits(binary.LittleEndian.Uint32(scales[4*(i/bucket):]))
				if bits[i>>3]&(1<<(i&7)) != 0 {
					ref[i] += scale
				} else {
					ref[i] -= scale
				}
				if math.Float32bits(ref[i]) != math.Float32bits(out[i]) {
					t.Fatalf("n %d bucket %d: value %d decodes to %v, reference %v", n, bucket, i, out[i], ref[i])
				}
			}
		}
	}
}

// TestFusedFeedbackMatchesGeneric: a codec's fused error feedback leaves
// the encodings and residuals of the generic five-pass path, bit for bit,
// step after step (zeros of both signs, an all-zero bucket, and a step
// with infinities and a NaN included).
func TestFusedFeedbackMatchesGeneric(t *testing.T) {
	for _, name := range []string{"sign:64", "int8:64", "int8:256", "topk:0.01", "topk:0.3", "topk:1"} {
		for _, n := range []int{1, 9, 4099, 40009} {
			fused := NewFeedback(mustCodec(t, name), n)
			generic := NewFeedback(plainCodec{mustCodec(t, name)}, n)
			if _, ok := fused.Codec.(feedbackEncoder); !ok {
				t.Fatalf("%s has no fused path", name)
			}
			for step := range 6 {
				g := randVec(uint64(100*n+step), n)
				g[0], g[n/2] = float32(math.Copysign(0, -1)), 0
				if n > 200 {
					clear(g[64:128]) // a bucket of zeros (with a zero residual at step 0)
				}
				if step == 4 {
					g[n-1] = float32(math.Inf(1))
					g[0] = float32(math.NaN())
				}
				a, err := fused.Encode(g, uint64(step), 3)
				if err != nil {
					t.Fatal(err)
				}
				a = append([]byte(nil), a...)
				b, err := generic.Encode(g, uint64(step), 3)
				if err != nil {
					t.Fatal(err)
				}
				if string(a) != string(b) {
					t.Fatalf("%s n %d step %d: encodings differ", name, n, step)
				}
				for i := range fused.Residual {
					f, g := fused.Residual[i], generic.Residual[i]
					if math.Float32bits(f) != math.Float32bits(g) && !(f != f && g != g) {
						t.Fatalf("%s n %d step %d: residual %d is %v fused, %v generic", name, n, step, i, f, g)
					}
				}
				if step == 4 { // start clean again
					fused.Reset()
					generic.Reset()
				}
			}
		}
	}
}

// plainCodec hides a codec's fused path.
type plainCodec struct{ Codec }
