package activities

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
)

// readings is a meter that returns its values in turn (then fails).
type readings struct {
	mu sync.Mutex
	j  []float64
}

func (r *readings) Joules(context.Context, time.Time) (float64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.j) == 0 {
		return 0, errors.New("meter unplugged")
	}
	j := r.j[0]
	r.j = r.j[1:]
	return j, nil
}

// TestTrainChunkReportsMeasuredEnergy: a chunk reports its share of the
// host meter's energy over the chunk (nodes on one host split it evenly),
// times the run's PUE; a node whose meter fails mid-chunk reports none,
// so the run models that chunk.
func TestTrainChunkReportsMeasuredEnergy(t *testing.T) {
	nodes, m := newNodes(t, 3, "file://"+t.TempDir())
	// Nodes 1 and 2 share a host; node 3 is alone on its own.
	hosts := []string{"10.0.0.1 (a)", "10.0.0.1 (a)", "10.0.0.2 (b)"}
	for i := range m.Nodes {
		m.Nodes[i].Host = hosts[i]
	}
	nodes[0].Energy = &readings{j: []float64{1000, 1600}}
	nodes[1].Energy = &readings{j: []float64{5000, 5600}}
	nodes[2].Energy = &readings{j: []float64{70}} // fails at the end
	s := spec.RunSpec{Name: "energy", Nodes: 3, Steps: 10, ChunkSteps: 10,
		Green: &spec.GreenPolicy{Trace: "unused.csv", PUE: 1.5}}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/energy", Spec: s, Membership: m, Session: "run/energy/g1/e1", Token: "t", From: 0, To: 10}
	res, errs := runChunk(t, nodes, in)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	for i, want := range []float64{600 * 1.5 / 2, 600 * 1.5 / 2, 0} {
		if math.Abs(res[i].Joules-want) > 1e-9 {
			t.Errorf("rank %d on %s: %v J, want %v", i, hosts[i], res[i].Joules, want)
		}
	}

	// Without a meter nothing is reported.
	plain, m2 := newNodes(t, 2, "file://"+t.TempDir())
	in2 := in
	in2.Membership, in2.Session = m2, "run/energy/g2/e1"
	in2.Spec = spec.RunSpec{Name: "energy", Nodes: 2, Steps: 10, ChunkSteps: 10}.WithDefaults()
	res2, errs := runChunk(t, plain, in2)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
		if res2[i].Joules != 0 {
			t.Errorf("rank %d without a meter reports %v J", i, res2[i].Joules)
		}
	}
}

// TestReadEnergy: the host meter's figure, or why there is none (no
// meter; the meter failed), never an error that would fail the run.
func TestReadEnergy(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		meter  *readings
		want   float64
		reason string
	}{
		{"reads", &readings{j: []float64{1234.5}}, 1234.5, ""},
		{"no meter", nil, 0, "node n1 has no energy meter"},
		{"meter fails", &readings{}, 0, "node n1: meter unplugged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Node{ID: "n1"}
			if tc.meter != nil {
				n.Energy = tc.meter
			}
			got, err := n.ReadEnergy(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got.Joules != tc.want || got.Reason != tc.reason || (got.Meter != "") != (tc.reason == "") {
				t.Errorf("reading %+v, want %v J, reason %q", got, tc.want, tc.reason)
			}
		})
	}
}
