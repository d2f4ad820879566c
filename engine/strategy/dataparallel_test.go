package strategy

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPlanDataParallel(t *testing.T) {
	ring := func(perStep time.Duration) func(int, float64, DPSlowdown) DPComm {
		// 2(d−1) steps of α plus a bandwidth term.
		return func(d int, _ float64, _ DPSlowdown) DPComm { return DPComm{Network: time.Duration(2*(d-1)) * perStep} }
	}
	// A codec cutting the traffic 32× at a fixed encoding cost.
	compressed := func(perStep, codec time.Duration) func(int, float64, DPSlowdown) DPComm {
		return func(d int, _ float64, _ DPSlowdown) DPComm {
			return DPComm{Network: time.Duration(2*(d-1)) * perStep / 32, Codec: codec, Name: "sign:1024"}
		}
	}
	hosts := func(n int, names ...string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = names[i%len(names)]
		}
		return out
	}
	cores := func(n, c int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = c
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   DPInput
		want int
	}{
		{"one host of 2 cores: the third rank only shares them",
			DPInput{GlobalBatch: 96, SecondsPerExample: 20e-6, StepOverhead: 200 * time.Microsecond,
				Hosts: hosts(3, "a"), Cores: cores(3, 2), Comm: ring(20 * time.Microsecond), MinRanks: 1, MaxRanks: 3}, 2},
		{"a host per rank, cheap links: all of them",
			DPInput{GlobalBatch: 96, SecondsPerExample: 20e-6, StepOverhead: 200 * time.Microsecond,
				Hosts: hosts(4, "a", "b", "c", "d"), Cores: cores(4, 8), Comm: ring(20 * time.Microsecond), MinRanks: 1, MaxRanks: 4}, 4},
		{"slow links and little computation: one",
			DPInput{GlobalBatch: 8, SecondsPerExample: 1e-6, Hosts: hosts(4, "a", "b", "c", "d"), Cores: cores(4, 8),
				Comm: ring(10 * time.Millisecond), MinRanks: 1, MaxRanks: 4}, 1},
		{"a host per rank, but one step in 20 stalls 30×: every step waits for the slowest rank, so two",
			DPInput{GlobalBatch: 96, SecondsPerExample: 20e-6, StepOverhead: 200 * time.Microsecond,
				Hosts: hosts(4, "a", "b", "c", "d"), Cores: cores(4, 8), Comm: ring(20 * time.Microsecond), MinRanks: 1, MaxRanks: 4,
				Spread: append(slices.Repeat([]float64{1}, 19), 30)}, 2},
		{"links slower than the computation they would split: one",
			DPInput{GlobalBatch: 96, SecondsPerExample: 20e-6, Hosts: hosts(4, "a", "b", "c", "d"), Cores: cores(4, 8),
				Comm: ring(time.Millisecond), MinRanks: 1, MaxRanks: 4}, 1},
		{"the same links, compressed 32×: all of them",
			DPInput{GlobalBatch: 96, SecondsPerExample: 20e-6, Hosts: hosts(4, "a", "b", "c", "d"), Cores: cores(4, 8),
				Comm: compressed(time.Millisecond, 100*time.Microsecond), MinRanks: 1, MaxRanks: 4}, 4},
		{"compressed, but the encoding costs more than the traffic it saves: one",
			DPInput{GlobalBatch: 8, SecondsPerExample: 1e-6, Hosts: hosts(4, "a", "b", "c", "d"), Cores: cores(4, 8),
				Comm: compressed(10*time.Microsecond, 5*time.Millisecond), MinRanks: 1, MaxRanks: 4}, 1},
		{"bounded below",
			DPInput{GlobalBatch: 8, SecondsPerExample: 1e-6, Hosts: hosts(4, "a", "b", "c", "d"), Cores: cores(4, 8),
				Comm: ring(10 * time.Millisecond), MinRanks: 3, MaxRanks: 4}, 3},
		{"nodes of 2 ranks on one host of 2 cores: one node",
			DPInput{GlobalBatch: 96, SecondsPerExample: 20e-6, StepOverhead: 200 * time.Microsecond,
				Hosts: hosts(6, "a"), Cores: cores(6, 2), Comm: ring(20 * time.Microsecond), MinRanks: 2, MaxRanks: 6, RankStep: 2}, 2},
		{"nodes of 2 ranks, a host of 2 cores each, cheap links: every node",
			DPInput{GlobalBatch: 96, SecondsPerExample: 20e-6, StepOverhead: 200 * time.Microsecond,
				Hosts: []string{"a", "a", "b", "b", "c", "c"}, Cores: cores(6, 2), Comm: ring(20 * time.Microsecond), MinRanks: 2, MaxRanks: 6, RankStep: 2}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanDataParallel(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if p.Ranks != tc.want {
				t.Fatalf("chose %d ranks, want %d: %s (%+v)", p.Ranks, tc.want, p.Reason, p.Candidates)
			}
			step := max(tc.in.RankStep, 1)
			if len(p.Candidates) != (tc.in.MaxRanks-tc.in.MinRanks)/step+1 {
				t.Errorf("%d candidates", len(p.Candidates))
			}
			for _, c := range p.Candidates {
				if c.Ranks%step != 0 {
					t.Errorf("candidate %+v: not whole nodes of %d ranks", c, step)
				}
				if c.StepSeconds < p.Candidates[(p.Ranks-tc.in.MinRanks)/step].StepSeconds {
					t.Errorf("candidate %+v beats the choice", c)
				}
				if want := ExpectedMax(tc.in.Spread, c.Ranks); len(tc.in.Spread) > 0 && c.Straggle != want {
					t.Errorf("candidate %+v: straggle %v, want %v", c, c.Straggle, want)
				}
				if c.Ranks == 1 && (c.CommSeconds != 0 || c.Codec != "") {
					t.Errorf("one rank communicates: %+v", c)
				}
				if x := tc.in.Comm(c.Ranks, c.ComputeSeconds, DPSlowdown{Cores: c.Oversubscription, Straggle: max(c.Straggle, 1)}); c.Ranks > 1 && c.Codec != x.Name {
					t.Errorf("candidate %+v: codec %q, priced %q", c, c.Codec, x.Name)
				}
			}
		})
	}
}

// TestPlanDataParallelCodecSharesCores: a compressed exchange's encoding
// and decoding slow down with the ranks sharing a host's cores and with
// the slowest rank, as computation does; the network part only with the
// slowest rank.
func TestPlanDataParallelCodecSharesCores(t *testing.T) {
	in := DPInput{GlobalBatch: 96, SecondsPerExample: 20e-6, Hosts: []string{"a", "a", "a"}, Cores: []int{2, 2, 2},
		Spread: []float64{1, 2}, MinRanks: 3, MaxRanks: 3,
		Comm: func(d int, compute float64, _ DPSlowdown) DPComm {
			return DPComm{Network: time.Millisecond, Codec: 2 * time.Millisecond, Name: "int8:256"}
		}}
	p, err := PlanDataParallel(in)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Candidates[0]
	s := ExpectedMax(in.Spread, 3)
	if math.Abs(c.CodecSeconds-2e-3*1.5*s) > 1e-12 || math.Abs(c.CommSeconds-(1e-3*s+c.CodecSeconds)) > 1e-12 {
		t.Errorf("3 ranks on 2 cores, straggle %v: codec %v s, comm %v s", s, c.CodecSeconds, c.CommSeconds)
	}
	if !strings.Contains(p.Reason, "int8:256 compressed") {
		t.Errorf("reason %q does not name the codec", p.Reason)
	}
}

func TestPlanDataParallelErrors(t *testing.T) {
	ok := DPInput{GlobalBatch: 8, SecondsPerExample: 1e-6, Hosts: []string{"a"}, Cores: []int{1},
		Comm: func(int, float64, DPSlowdown) DPComm { return DPComm{} }, MinRanks: 1, MaxRanks: 1}
	for _, tc := range []struct {
		name string
		edit func(*DPInput)
		want string
	}{
		{"no batch", func(in *DPInput) { in.GlobalBatch = 0 }, "global batch"},
		{"unmeasured", func(in *DPInput) { in.SecondsPerExample = 0 }, "measured"},
		{"ranks", func(in *DPInput) { in.MaxRanks = 2 }, "ranks"},
		{"cores", func(in *DPInput) { in.Cores = []int{0} }, "cores"},
		{"hosts", func(in *DPInput) { in.Cores = nil }, "core counts"},
		{"model", func(in *DPInput) { in.Comm = nil }, "communication model"},
		{"spread below 1", func(in *DPInput) { in.Spread = []float64{1, 0.5} }, "spread[1] = 0.5"},
		{"spread NaN", func(in *DPInput) { in.Spread = []float64{math.NaN()} }, "spread[0]"},
		{"step", func(in *DPInput) { in.RankStep = 2 }, "multiples of the step"},
	} {
		in := ok
		tc.edit(&in)
		if _, err := PlanDataParallel(in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestExpectedMax(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []float64
		d      int
		want   float64
	}{
		{"no values: undisturbed", nil, 3, 1},
		{"one draw: the mean", []float64{3, 1}, 1, 2},
		{"two draws of 1 or 3: 1 only if both are", []float64{1, 3}, 2, 1*0.25 + 3*0.75},
		{"a constant", []float64{2, 2, 2}, 5, 2},
		{"many draws: nearly the largest", []float64{1, 2}, 30, 2 - math.Pow(0.5, 30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExpectedMax(tc.values, tc.d); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("ExpectedMax(%v, %d) = %v, want %v", tc.values, tc.d, got, tc.want)
			}
		})
	}
}
