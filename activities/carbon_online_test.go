package activities

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/cann-train/cann-train/engine/carbon"
	"github.com/cann-train/cann-train/spec"
)

// answer is one canned HTTP answer: a status and a body, or the name of a
// provider fixture in engine/carbon/testdata.
type answer struct {
	status int
	body   string
}

// providerServer replays a provider: forecast answers the forecast
// endpoints (Electricity Maps and Carbon Aware SDK .../forecast..., the UK
// API's .../fw48h), history every other path (past-range, bylocation,
// /intensity/{from}/{to}).
func providerServer(t *testing.T, forecast, history answer) *httptest.Server {
	t.Helper()
	load := func(a answer) answer {
		if strings.HasSuffix(a.body, ".json") && !strings.HasPrefix(a.body, "{") && !strings.HasPrefix(a.body, "[") {
			b, err := os.ReadFile("../engine/carbon/testdata/" + a.body)
			require.NoError(t, err)
			a.body = string(b)
		}
		if a.status == 0 {
			a.status = http.StatusOK
		}
		return a
	}
	forecast, history = load(forecast), load(history)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := history
		if strings.Contains(r.URL.Path, "forecast") || strings.HasSuffix(r.URL.Path, "/fw48h") {
			a = forecast
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(a.body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func testCarbon(srv *httptest.Server) *Carbon {
	return &Carbon{HTTP: srv.Client(), Getenv: func(k string) string {
		if k == carbon.DefaultElectricityMapsTokenEnv {
			return "tok"
		}
		return ""
	}}
}

// emPastRange is an Electricity Maps v3 /carbon-intensity/past-range
// answer for zone DE on the day of testdata/em_forecast.json; at is
// "HH:MM" → intensity ("null" for an hour without a value).
func emPastRange(at ...string) string {
	var b strings.Builder
	b.WriteString(`{"zone":"DE","data":[`)
	for i := 0; i+1 < len(at); i += 2 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"zone":"DE","carbonIntensity":` + at[i+1] + `,"datetime":"2022-07-19T` + at[i] + `:00.000Z",` +
			`"updatedAt":"2022-07-19T18:19:00.000Z","createdAt":"2022-07-16T18:47:00.000Z","emissionFactorType":"lifecycle",` +
			`"isEstimated":true,"estimationMethod":"TIME_SLICER_AVERAGE"}`)
	}
	b.WriteString("]}")
	return b.String()
}

// caByLocation is a Carbon Aware SDK /emissions/bylocation answer (newest
// first) for the 5-minute periods before testdata/casdk_forecasts.json.
const caByLocation = `[
  {"location": "IE", "time": "2022-07-19T18:40:00+00:00", "rating": 400, "duration": "00:05:00"},
  {"location": "IE", "time": "2022-07-19T18:35:00+00:00", "rating": 410, "duration": "00:05:00"},
  {"location": "IE", "time": "2022-07-19T18:30:00+00:00", "rating": 420, "duration": "00:05:00"}
]`

var (
	emNow = time.Date(2022, 7, 19, 18, 20, 0, 0, time.UTC)                                 // em_forecast.json: 18:00 320, 19:00 310, (20:00 300), 21:00 290, 22:00 280
	caNow = time.Date(2022, 7, 19, 18, 42, 5, 0, time.UTC)                                 // casdk_forecasts.json northeurope: 18:45 532.02, 18:50 500.5, 18:55 448.44, 19:00 460
	ukNow = time.Date(2018, 1, 20, 12, 10, 0, 0, time.UTC)                                 // uk_fw48h.json: 12:00 forecast 266, actual 263
	ukOld = time.Date(2018, 1, 20, 12, 40, 0, 0, time.UTC)                                 // 12:30 not yet measured (forecast 259)
	at    = func(hhmm string) time.Time { return mustTime("2022-07-19T" + hhmm + ":00Z") } // on the EM/CA day
)

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func providerPolicy(provider, url, planner string, work time.Duration) spec.GreenPolicy {
	p := spec.GreenPolicy{Provider: provider, ProviderURL: url, Planner: planner, Interruptible: true,
		Deadline: spec.Duration(12 * time.Hour), Work: spec.Duration(work)}
	switch provider {
	case spec.ProviderElectricityMaps:
		p.Zone = "DE"
	case spec.ProviderCarbonAwareSDK:
		p.Zone = "northeurope"
	}
	return p.WithDefaults()
}

// TestOnlineProviderPricesObservedPresent: planner online on each provider
// prices the present step at the provider's measurement, the rest at its
// forecast, and plans on that: a clean present makes a short interruptible
// job run now where the forecast alone (planner replan) sends it to wait.
func TestOnlineProviderPricesObservedPresent(t *testing.T) {
	tests := []struct {
		name             string
		provider         string
		forecast         string
		history          string
		now              time.Time
		work             time.Duration
		wantPrices       []float64 // online prices from the present step
		wantStart        time.Time // the present step
		replanNow        float64   // planner replan's intensity now (0: its forecast starts later)
		onlineSlot       time.Time // first planned slot, online
		replanSlot       time.Time // and replan
		wantOnlineNowGPK float64
	}{
		{name: "electricitymaps", provider: spec.ProviderElectricityMaps, forecast: "em_forecast.json",
			history: emPastRange("16:00", "260", "17:00", "250", "18:00", "200"), now: emNow, work: time.Hour,
			wantPrices: []float64{200, 310, 300, 290, 280}, wantStart: at("18:00"), replanNow: 320,
			onlineSlot: at("18:00"), replanSlot: at("22:00"), wantOnlineNowGPK: 200},
		{name: "carbon-aware-sdk, forecast from the next period", provider: spec.ProviderCarbonAwareSDK, forecast: "casdk_forecasts.json",
			history: caByLocation, now: caNow, work: 5 * time.Minute,
			wantPrices: []float64{400, 532.02, 500.5, 448.44, 460}, wantStart: at("18:40"), replanNow: 0,
			onlineSlot: at("18:40"), replanSlot: at("18:55"), wantOnlineNowGPK: 400},
		{name: "uk, actual not forecast", provider: spec.ProviderUK, forecast: "uk_fw48h.json", history: "uk_fw48h.json",
			now: ukNow, work: 30 * time.Minute,
			wantPrices: []float64{263, 259, 248, 240, 232, 221, 195, 187}, wantStart: ukNow.Truncate(30 * time.Minute), replanNow: 266,
			onlineSlot: time.Date(2018, 1, 20, 15, 30, 0, 0, time.UTC), replanSlot: time.Date(2018, 1, 20, 15, 30, 0, 0, time.UTC),
			wantOnlineNowGPK: 263},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := providerServer(t, answer{body: tc.forecast}, answer{body: tc.history})
			c := testCarbon(srv)

			sig, err := c.Open(providerPolicy(tc.provider, srv.URL, spec.PlannerOnline, tc.work), tc.now)
			require.NoError(t, err)
			prices, err := sig.Forecast(context.Background(), tc.now, 12*time.Hour)
			require.NoError(t, err)
			assert.True(t, prices.Start.Equal(tc.wantStart), "prices start %s", prices.Start)
			assert.InDeltaSlice(t, tc.wantPrices, prices.Values, 1e-9)
			assert.Empty(t, sig.(noter).Notes())

			for _, pl := range []struct {
				planner string
				slot    time.Time
				now     float64
			}{{spec.PlannerOnline, tc.onlineSlot, tc.wantOnlineNowGPK}, {spec.PlannerReplan, tc.replanSlot, tc.replanNow}} {
				p := providerPolicy(tc.provider, srv.URL, pl.planner, tc.work)
				out := runPlanCarbonWith(t, c, spec.CarbonInput{Policy: p, RunStart: tc.now, Now: tc.now, Plan: true, Work: tc.work})
				require.Empty(t, out.PlanError, pl.planner)
				assert.Empty(t, out.PlanNote, pl.planner)
				assert.Equal(t, pl.now, out.NowGPerKWh, "%s: intensity now", pl.planner)
				require.NotEmpty(t, out.Plan.Slots, pl.planner)
				assert.True(t, out.Plan.Slots[0].Start.Equal(pl.slot), "%s: first slot %+v, want from %s", pl.planner, out.Plan.Slots[0], pl.slot)
			}
		})
	}
}

// TestOnlineProviderWithoutObservation: a stale measurement (up to two
// steps) stands for the present; without one — too old, none, a failing
// or unreadable history — the present is priced at the forecast, and the
// output says so (PlanNote); a failing forecast is a plan error, and a
// cancelled activity fails.
func TestOnlineProviderWithoutObservation(t *testing.T) {
	tests := []struct {
		name      string
		provider  string
		forecast  answer
		history   answer
		now       time.Time
		wantNow   float64  // the present step's price (0: no plan)
		noteHas   []string // in PlanNote ("" none)
		planErrIs []string // in PlanError
	}{
		{name: "em, one step old", provider: spec.ProviderElectricityMaps, forecast: answer{body: "em_forecast.json"},
			history: answer{body: emPastRange("15:00", "260", "16:00", "255", "17:00", "250", "18:00", "null")}, now: emNow,
			wantNow: 250, noteHas: []string{"no measurement of the present step 2022-07-19T18:00:00Z", "2022-07-19T17:00:00Z", "1 step(s) old"}},
		{name: "uk, one step old: the actual, not History's forecast", provider: spec.ProviderUK, forecast: answer{body: "uk_fw48h.json"},
			history: answer{body: "uk_fw48h.json"}, now: ukOld,
			wantNow: 263, noteHas: []string{"2018-01-20T12:00:00Z", "1 step(s) old"}},
		{name: "em, three steps old", provider: spec.ProviderElectricityMaps, forecast: answer{body: "em_forecast.json"},
			history: answer{body: emPastRange("14:00", "260", "15:00", "250")}, now: emNow,
			wantNow: 320, noteHas: []string{"no usable electricitymaps measurement", "3 steps", "priced the present step at the forecast"}},
		{name: "em, history 500", provider: spec.ProviderElectricityMaps, forecast: answer{body: "em_forecast.json"},
			history: answer{status: 500, body: `{"message":"upstream down"}`}, now: emNow,
			wantNow: 320, noteHas: []string{"500 Internal Server Error", "upstream down", "at the forecast"}},
		{name: "em, no values in the window", provider: spec.ProviderElectricityMaps, forecast: answer{body: "em_forecast.json"},
			history: answer{body: emPastRange("17:00", "null", "18:00", "null")}, now: emNow,
			wantNow: 320, noteHas: []string{"need at least 2 readings", "at the forecast"}},
		{name: "carbon-aware-sdk, history unauthorized", provider: spec.ProviderCarbonAwareSDK, forecast: answer{body: "casdk_forecasts.json"},
			history: answer{status: 401, body: `{"title":"Unauthorized"}`}, now: caNow,
			wantNow: 0, noteHas: []string{"401 Unauthorized", "at the forecast"}},
		{name: "uk, nothing measured yet", provider: spec.ProviderUK, forecast: answer{body: "uk_fw48h.json"},
			history: answer{body: `{"data":[{"from":"2018-01-20T12:00Z","to":"2018-01-20T12:30Z","intensity":{"forecast":266,"actual":null,"index":"moderate"}}]}`},
			now:     ukNow, wantNow: 266, noteHas: []string{"no usable uk measurement", "at the forecast"}},
		{name: "forecast refused", provider: spec.ProviderElectricityMaps, forecast: answer{status: 404, body: `{"error":"zone not found"}`},
			history: answer{body: emPastRange("17:00", "250", "18:00", "200")}, now: emNow,
			planErrIs: []string{"forecast", "404 Not Found", "zone not found"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := providerServer(t, tc.forecast, tc.history)
			p := providerPolicy(tc.provider, srv.URL, spec.PlannerOnline, time.Hour)
			out := runPlanCarbonWith(t, testCarbon(srv), spec.CarbonInput{Policy: p, RunStart: tc.now, Now: tc.now, Plan: true, Work: 5 * time.Minute})
			if len(tc.planErrIs) > 0 {
				assert.Nil(t, out.Plan)
				for _, s := range tc.planErrIs {
					assert.Contains(t, out.PlanError, s)
				}
				return
			}
			require.Empty(t, out.PlanError)
			require.NotNil(t, out.Plan)
			assert.Equal(t, tc.wantNow, out.NowGPerKWh)
			for _, s := range tc.noteHas {
				assert.Contains(t, out.PlanNote, s)
			}
			assert.Contains(t, out.PlanNote, "green.planner online")
		})
	}
}

// A cancelled activity fails rather than falling back: the attempt is
// retried as any transient signal error.
func TestOnlineProviderCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc, err := os.ReadFile("../engine/carbon/testdata/em_forecast.json")
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/forecast") {
			_, _ = w.Write(fc)
			return
		}
		cancel()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	sig, err := testCarbon(srv).Open(providerPolicy(spec.ProviderElectricityMaps, srv.URL, spec.PlannerOnline, time.Hour), emNow)
	require.NoError(t, err)
	_, err = sig.Forecast(ctx, emNow, 12*time.Hour)
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "electricitymaps measurements")
	assert.True(t, transient(ctx, err))
	assert.False(t, errors.Is(err, carbon.ErrNoObservation))
}

// A run of a few seconds on a live provider is priced: its range holds one
// hourly reading (or none), and a series needs two to know its step, so
// the provider is asked for the hours before it too. (Before, such runs
// stayed "not priced yet" for good: 0 g, no budget.)
func TestProviderPricesAShortRun(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from, err1 := time.Parse(time.RFC3339, r.URL.Query().Get("start"))
		to, err2 := time.Parse(time.RFC3339, r.URL.Query().Get("end"))
		if !strings.HasSuffix(r.URL.Path, "/past-range") || err1 != nil || err2 != nil {
			http.Error(w, "want past-range with start and end", http.StatusBadRequest)
			return
		}
		asked = append(asked, r.URL.Query().Get("start")+"/"+r.URL.Query().Get("end"))
		// The hours whose readings the range touches, 100 g/kWh + the hour.
		var at []string
		for h := from.Truncate(time.Hour); !h.After(to); h = h.Add(time.Hour) {
			at = append(at, h.Format("15:04"), fmt.Sprint(100+h.Hour()))
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(emPastRange(at...)))
	}))
	t.Cleanup(srv.Close)
	p := providerPolicy(spec.ProviderElectricityMaps, srv.URL, spec.PlannerOnline, time.Hour)
	p.NodeWatts = 360
	start := at("13:53")
	seg := spec.Segment{Start: start, End: start.Add(4 * time.Second), Nodes: 1, WallSeconds: 4, ToStep: 4000}
	out := runPlanCarbonWith(t, testCarbon(srv), spec.CarbonInput{Policy: p, RunStart: start, Now: start.Add(5 * time.Second), Price: []spec.Segment{seg}})
	require.Empty(t, out.PriceError, "asked %v", asked)
	require.Len(t, out.Priced, 1)
	require.InDelta(t, 113, out.Priced[0].GPerKWh, 1e-9, "the 13:00 reading")
	require.Greater(t, out.Priced[0].Grams, 0.0)
}

// A provider that does not answer costs one timeout, not one per attempt
// and per chunk boundary: PlanCarbon then answers at once, for a while,
// with the reason (no retry: the run trains on), and asks again after.
func TestProviderNotAnsweringRests(t *testing.T) {
	var mu sync.Mutex
	asked := 0
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked++
		mu.Unlock()
		select { // hangs until the client gives up (or the test ends)
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	c := testCarbon(srv)
	c.ProviderTimeout = 100 * time.Millisecond
	p := providerPolicy(spec.ProviderUK, srv.URL, spec.PlannerOnline, time.Hour)
	in := spec.CarbonInput{Policy: p, RunStart: ukNow, Now: ukNow, Plan: true, Work: time.Hour}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(c.PlanCarbon)
	if _, err := env.ExecuteActivity(c.PlanCarbon, in); err == nil {
		t.Fatal("the first call: no error; want the timeout (a retryable failure)")
	}
	start := time.Now()
	v, err := env.ExecuteActivity(c.PlanCarbon, in)
	require.NoError(t, err, "the next call answers, not fails")
	var out spec.CarbonOutput
	require.NoError(t, v.Get(&out))
	require.Contains(t, out.PlanError, "uk did not answer at ")
	require.Contains(t, out.PlanError, "not asked again before ")
	require.Less(t, time.Since(start), time.Second, "without waiting for the provider")
	mu.Lock()
	require.Equal(t, 1, asked, "the provider was asked once")
	mu.Unlock()

	// Once the rest is over it is asked again.
	c.mu.Lock()
	for k, d := range c.down {
		d.until = time.Now().Add(-time.Second)
		c.down[k] = d
	}
	c.mu.Unlock()
	if _, err := env.ExecuteActivity(c.PlanCarbon, in); err == nil {
		t.Fatal("after the rest: no error; want the provider asked (and timing out) again")
	}
	mu.Lock()
	require.Equal(t, 2, asked)
	mu.Unlock()
}
