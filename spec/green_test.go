package spec

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Planner online needs something to observe the present with: a trace
// file or a live provider; with neither the job file is refused on
// green.planner (and on green, which needs a source anyway).
func TestGreenPlannerOnlineSources(t *testing.T) {
	tests := []struct {
		name       string
		green      string
		wantFields []string // nil: valid
		wantLine   int      // of green.planner
		wantMsg    []string
	}{
		{name: "trace", green: "  trace: x.csv\n  planner: online\n"},
		{name: "uk", green: "  provider: uk\n  planner: online\n"},
		{name: "uk region", green: "  provider: uk\n  zone: 13\n  planner: online\n"},
		{name: "uk postcode", green: "  provider: uk\n  zone: RG10\n  planner: online\n"},
		{name: "electricitymaps", green: "  provider: electricitymaps\n  zone: DE\n  planner: online\n  interruptible: true\n"},
		{name: "carbon-aware-sdk", green: "  provider: carbon-aware-sdk\n  zone: westus\n  provider_url: http://sdk:8080\n  planner: online\n"},
		{name: "provider, replan", green: "  provider: uk\n  planner: replan\n"},
		{name: "neither", green: "  planner: online\n  deadline: 24h\n", wantFields: []string{"green.planner", "green"}, wantLine: 3,
			wantMsg: []string{"online needs", "green.trace", "green.provider"}},
		{name: "unknown planner", green: "  provider: uk\n  planner: psychic\n", wantFields: []string{"green.planner"}, wantLine: 4,
			wantMsg: []string{"unknown planner", "online"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("job.yaml", []byte("name: a\ngreen:\n"+tc.green))
			if tc.wantFields == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if s.Green == nil || (strings.Contains(tc.green, "online") && s.Green.Planner != PlannerOnline) {
					t.Fatalf("green = %+v", s.Green)
				}
				return
			}
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("want *SpecError, got %T %v", err, err)
			}
			for _, f := range tc.wantFields {
				var hit *FieldError
				for i := range se.Fields {
					if se.Fields[i].Field == f {
						hit = &se.Fields[i]
					}
				}
				if hit == nil {
					t.Fatalf("no error for %s in %v", f, err)
				}
				if f != "green.planner" {
					continue
				}
				if hit.Line != tc.wantLine {
					t.Errorf("green.planner on line %d, want %d (%v)", hit.Line, tc.wantLine, err)
				}
				for _, m := range tc.wantMsg {
					if !strings.Contains(hit.Msg, m) {
						t.Errorf("green.planner message %q lacks %q", hit.Msg, m)
					}
				}
			}
			if !strings.Contains(err.Error(), "green.planner") {
				t.Errorf("error %q does not name green.planner", err)
			}
		})
	}
}

// Source names the online planner for providers as for traces.
func TestGreenSourceOnline(t *testing.T) {
	for _, tc := range []struct {
		g    GreenPolicy
		want string
	}{
		{GreenPolicy{Provider: ProviderElectricityMaps, Zone: "DE", Planner: PlannerOnline}, "electricitymaps DE, online planner"},
		{GreenPolicy{Provider: ProviderUK, Planner: PlannerOnline}, "uk, online planner"},
		{GreenPolicy{Provider: ProviderUK}, "uk"},
		{GreenPolicy{Trace: "t.csv", Zone: "DE", Forecast: ForecastPersistence, Planner: PlannerOnline}, "t.csv (DE), persistence forecast, online planner"},
	} {
		if got := tc.g.Source(); got != tc.want {
			t.Errorf("Source() = %q, want %q", got, tc.want)
		}
	}
}

// TestGreenMinSlotNeedsInterruptible: min_slot without interruptible: true
// is refused on its line, as green plan refuses --min-slot without
// --interruptible (the audit's run v4 trained contiguously, min_slot
// ignored); with it, it is kept.
func TestGreenMinSlotNeedsInterruptible(t *testing.T) {
	_, err := Parse("job.yaml", []byte("name: a\ngreen:\n  trace: x.csv\n  deadline: 24h\n  min_slot: 2h\n"))
	var se *SpecError
	if !errors.As(err, &se) || len(se.Fields) != 1 || se.Fields[0].Field != "green.min_slot" || se.Fields[0].Line != 5 ||
		!strings.Contains(se.Fields[0].Msg, "add interruptible: true") {
		t.Fatalf("err %v; want green.min_slot on line 5 asking for interruptible: true", err)
	}
	s, err := Parse("job.yaml", []byte("name: a\ngreen:\n  trace: x.csv\n  deadline: 24h\n  interruptible: true\n  min_slot: 2h\n"))
	if err != nil || s.Green.MinSlot.D() != 2*time.Hour {
		t.Fatalf("interruptible with min_slot: %v %+v", err, s.Green)
	}
}
