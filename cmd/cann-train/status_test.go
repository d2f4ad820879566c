package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/spec"
)

// TestEnergySummary: the measured segments' energy, mean power and
// training time; the unmeasured ones only counted; nothing measured, no
// summary (and no line in the status).
func TestEnergySummary(t *testing.T) {
	for _, tc := range []struct {
		name     string
		segs     []spec.Segment
		want     *EnergySummary
		wantLine string
	}{
		{"none", nil, nil, ""},
		{"modelled only", []spec.Segment{{WallSeconds: 60}}, nil, ""},
		{"measured", []spec.Segment{{WallSeconds: 60, Joules: 9000}, {WallSeconds: 30, Joules: 4500}},
			&EnergySummary{KWh: 13500 / 3.6e6, MeanWatts: 150, TrainedSeconds: 90, Measured: 2, Segments: 2},
			"energy       0.0037 kWh measured, 150 W over 1m30s of training\n"},
		{"mixed", []spec.Segment{{WallSeconds: 60, Joules: 12000}, {WallSeconds: 600}},
			&EnergySummary{KWh: 12000 / 3.6e6, MeanWatts: 200, TrainedSeconds: 60, Measured: 1, Segments: 2},
			"energy       0.0033 kWh measured, 200 W over 1m0s of training; 1 of 2 trained stretches (the others ran where a node had no meter)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := energySummary(tc.segs)
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Fatalf("summary %+v, want %+v", got, tc.want)
			}
			var b bytes.Buffer
			st := spec.RunStatus{RunID: "run/x", Phase: spec.PhaseCompleted, Segments: tc.segs, StartedAt: time.Unix(0, 0), UpdatedAt: time.Unix(90, 0)}
			if err := printStatus(&b, st, "table", "", "default"); err != nil {
				t.Fatal(err)
			}
			line := ""
			for _, l := range strings.SplitAfter(b.String(), "\n") {
				if strings.HasPrefix(l, "energy ") {
					line = l
				}
			}
			if line != tc.wantLine {
				t.Errorf("energy line %q, want %q", line, tc.wantLine)
			}
		})
	}
}
