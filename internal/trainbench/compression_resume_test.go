package trainbench

import (
	"context"
	"testing"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/engine"
)

// ranksFor builds a group of o.Ranks runners for the compressed run.
func ranksFor(t *testing.T, o CompressionOptions, train *engine.Dataset) ([]*ascend.Communicator, []*rankRunner) {
	t.Helper()
	comms, err := group(context.Background(), o.Ranks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAll(comms) })
	runners := make([]*rankRunner, o.Ranks)
	for r := range runners {
		if runners[r], err = newRankRunner(o, true, comms[r], train); err != nil {
			t.Fatal(err)
		}
	}
	return comms, runners
}

func stepAll(t *testing.T, comms []*ascend.Communicator, runners []*rankRunner, steps int) {
	t.Helper()
	err := onRanks(comms, func(r int) error {
		for range steps {
			if _, err := runners[r].step(context.Background()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sameWeights(runners); err != nil {
		t.Fatal(err)
	}
}

// TestCompressedResume: a compressed run snapshotted mid-way (engine
// state plus every rank's error-feedback residuals in State.CommState,
// through the binary encoding) and restored into fresh ranks ends
// bit-identical to the uninterrupted run; restored without the residuals
// it does not, so they are what the snapshot must carry.
func TestCompressedResume(t *testing.T) {
	train, _, err := loadData("")
	if err != nil {
		t.Skipf("MNIST not available: %v", err)
	}
	const n, k = 24, 13
	tests := []struct {
		name string
		o    CompressionOptions
	}{
		{"1-bit Adam, sign, two-phase, int8 warm-up", CompressionOptions{Ranks: 3, Steps: n, Optimizer: "onebit-adam", Codec: "sign", FreezeStep: 6, GradCodec: "int8"}},
		{"Adam, top-k, allgather", CompressionOptions{Ranks: 3, Steps: n, Codec: "topk:0.01", Warmup: 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := tc.o.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			comms, full := ranksFor(t, o, train)
			stepAll(t, comms, full, n)
			want := full[0].t.WeightsSHA256()

			comms, first := ranksFor(t, o, train)
			stepAll(t, comms, first, k)
			snap := first[0].t.Snapshot()
			for _, rr := range first {
				b, err := rr.commState()
				if err != nil {
					t.Fatal(err)
				}
				snap.CommState = append(snap.CommState, b)
			}
			blob, err := snap.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			for _, withComm := range []bool{true, false} {
				var st engine.State
				if err := st.UnmarshalBinary(blob); err != nil {
					t.Fatal(err)
				}
				comms, resumed := ranksFor(t, o, train)
				for r, rr := range resumed {
					if err := rr.t.Restore(&st); err != nil {
						t.Fatal(err)
					}
					if withComm {
						if err := rr.setCommState(st.CommState[r]); err != nil {
							t.Fatal(err)
						}
					}
				}
				stepAll(t, comms, resumed, n-k)
				got := resumed[0].t.WeightsSHA256()
				if withComm && got != want {
					t.Fatalf("resumed run %s, uninterrupted %s", got, want)
				}
				if !withComm && got == want {
					t.Fatal("resumed without the residuals and still identical: the test proves nothing")
				}
			}
			// Two-phase residuals name their rank (allgather ones are
			// plain vectors).
			if err := first[0].setCommState(snap.CommState[1]); o.Exchange == ExchangeTwoPhase && err == nil {
				t.Error("rank 0 accepted rank 1's residuals")
			}
		})
	}
}
