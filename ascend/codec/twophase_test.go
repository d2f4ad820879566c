package codec

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

// TestTwoPhaseAllReduce: over real TCP ranks every rank ends with the same
// bits; lossless codecs give the exact mean; the lossy ones keep what they
// drop in the residuals (the mean over three steps of the outputs plus the
// residuals' change equals the mean input); the traffic reduction is the
// codec's compression ratio.
func TestTwoPhaseAllReduce(t *testing.T) {
	const world, n, steps = 3, 10_001, 3
	cl := ascendtest.NewCluster(t, world)
	tests := []struct {
		codec      string
		exact      bool
		minTraffic float64
	}{
		{"none", true, 0.95},
		{"sign", false, 25},
		{"int8", false, 3.5},
		{"topk:0.01", false, 20},
	}
	for _, tc := range tests {
		t.Run(tc.codec, func(t *testing.T) {
			results := make([][]float32, world)
			var mu sync.Mutex
			cl.Run(t, func(c *ascend.Communicator) {
				x, err := NewTwoPhase(mustCodec(t, tc.codec), n, c.Rank(), c.Size())
				if err != nil {
					t.Error(err)
					return
				}
				for step := range uint64(steps) {
					g := randVec(uint64(c.Rank())*100+step, n)
					st, err := x.AllReduce(context.Background(), c, g, step, true)
					if err != nil {
						t.Error(err)
						return
					}
					if st.TrafficReduction < tc.minTraffic {
						t.Errorf("%s: traffic reduction %.2f×, want ≥ %v", tc.codec, st.TrafficReduction, tc.minTraffic)
					}
					if step == steps-1 {
						mu.Lock()
						results[c.Rank()] = g
						mu.Unlock()
					}
				}
			})
			for r := 1; r < world; r++ {
				if !slices.Equal(results[r], results[0]) {
					t.Fatalf("rank %d differs from rank 0", r)
				}
			}
			want := make([]float32, n)
			for r := range world {
				for i, v := range randVec(uint64(r)*100+steps-1, n) {
					want[i] += v / world
				}
			}
			var errSum, norm float64
			for i := range want {
				d := float64(results[0][i] - want[i])
				errSum += d * d
				norm += float64(want[i]) * float64(want[i])
			}
			rel := math.Sqrt(errSum / norm)
			if tc.exact && rel > 1e-6 {
				t.Errorf("lossless codec: relative error %.2g", rel)
			}
			if !tc.exact && (rel < 1e-4 || rel > 1.5) {
				t.Errorf("lossy codec: relative error %.2g, want lossy but sane", rel)
			}
		})
	}
}

// TestTwoPhaseFeedbackConservesMass: on one rank the two residuals hold
// exactly what the two encodings dropped: input + old residuals = output +
// new residuals, element by element (up to float rounding).
func TestTwoPhaseFeedbackConservesMass(t *testing.T) {
	const n = 5000
	for _, name := range []string{"sign", "topk:0.05", "int8"} {
		t.Run(name, func(t *testing.T) {
			x, err := NewTwoPhase(mustCodec(t, name), n, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			comm := soloComm{}
			inSum := make([]float64, n)
			outSum := make([]float64, n)
			for step := range uint64(20) {
				g := randVec(step, n)
				for i, v := range g {
					inSum[i] += float64(v)
				}
				if _, err := x.AllReduce(context.Background(), comm, g, step, true); err != nil {
					t.Fatal(err)
				}
				for i, v := range g {
					outSum[i] += float64(v)
				}
			}
			for i := range inSum {
				left := outSum[i] + float64(x.work[0].Residual[i]) + float64(x.serv.Residual[i])
				if d := math.Abs(left - inSum[i]); d > 1e-3 {
					t.Fatalf("value %d: inputs %v, outputs + residuals %v", i, inSum[i], left)
				}
			}
		})
	}
}

// soloComm is a one-rank communicator.
type soloComm struct{}

func (soloComm) Rank() int                                  { return 0 }
func (soloComm) Size() int                                  { return 1 }
func (soloComm) AllGather(context.Context, []float32) error { return nil }
func (soloComm) AllGatherV(_ context.Context, dst, src []float32, _ []int) error {
	copy(dst, src)
	return nil
}
func (soloComm) AllToAllV(_ context.Context, dst, src []float32, _, _ []int) error {
	copy(dst, src)
	return nil
}

func TestTwoPhaseStateRoundTrip(t *testing.T) {
	const n = 1000
	mk := func(rank int) *TwoPhase {
		x, err := NewTwoPhase(mustCodec(t, "sign:64"), n, rank, 1)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	a := mk(0)
	for step := range uint64(3) {
		if _, err := a.AllReduce(context.Background(), soloComm{}, randVec(step, n), step, true); err != nil {
			t.Fatal(err)
		}
	}
	blob, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	b := mk(0)
	if err := b.UnmarshalBinary(blob); err != nil {
		t.Fatal(err)
	}
	ga, gb := randVec(9, n), randVec(9, n)
	a.AllReduce(context.Background(), soloComm{}, ga, 9, true)
	b.AllReduce(context.Background(), soloComm{}, gb, 9, true)
	if !slices.Equal(ga, gb) {
		t.Fatal("restored state gives a different next step")
	}
	tests := []struct {
		name string
		x    *TwoPhase
		data []byte
		is   error
	}{
		{"truncated", mk(0), blob[:len(blob)-3], ErrCorrupt},
		{"garbage", mk(0), []byte("nonsense"), ErrCorrupt},
		{"trailing", mk(0), append(slices.Clone(blob), 0), ErrCorrupt},
	}
	other, _ := NewTwoPhase(mustCodec(t, "sign:64"), n, 1, 2)
	tests = append(tests, struct {
		name string
		x    *TwoPhase
		data []byte
		is   error
	}{"other rank", other, blob, ErrInvalid})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := tc.x.MarshalBinary()
			err := tc.x.UnmarshalBinary(tc.data)
			if !errors.Is(err, tc.is) {
				t.Fatalf("UnmarshalBinary = %v, want %v", err, tc.is)
			}
			after, _ := tc.x.MarshalBinary()
			if !slices.Equal(before, after) {
				t.Error("failed UnmarshalBinary changed the state")
			}
		})
	}
}
