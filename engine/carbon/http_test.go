package carbon

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replay serves a testdata file (or a literal body) after checking the
// request with check.
func replay(t *testing.T, status int, body string, check func(*http.Request)) *httptest.Server {
	t.Helper()
	if strings.HasPrefix(body, "testdata/") {
		b, err := os.ReadFile(body)
		require.NoError(t, err)
		body = string(b)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if check != nil {
			check(r)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func env(kv ...string) func(string) string {
	return func(k string) string {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1]
			}
		}
		return ""
	}
}

func client(srv *httptest.Server, base string) Client {
	return Client{BaseURL: srv.URL + base, HTTP: srv.Client(), Getenv: env("ELECTRICITYMAPS_TOKEN", "tok", "CA_KEY", "k")}
}

func TestElectricityMapsForecast(t *testing.T) {
	srv := replay(t, 200, "testdata/em_forecast.json", func(r *http.Request) {
		assert.Equal(t, "/v3/carbon-intensity/forecast", r.URL.Path)
		assert.Equal(t, "DE", r.URL.Query().Get("zone"))
		assert.Equal(t, "5", r.URL.Query().Get("horizonHours"))
		assert.Equal(t, "lifecycle", r.URL.Query().Get("emissionFactorType"))
		assert.Equal(t, "tok", r.Header.Get("auth-token"))
	})
	p := &ElectricityMaps{Client: client(srv, "/v3"), Zone: "DE", EmissionFactorType: "lifecycle"}
	now := time.Date(2022, 7, 19, 18, 20, 0, 0, time.UTC)
	s, err := p.Forecast(context.Background(), now, 4*time.Hour+time.Minute)
	require.NoError(t, err)
	assert.InDeltaSlice(t, []float64{320, 310, 300, 290, 280}, s.Values, 1e-12)
}

func TestBindCutsToHorizon(t *testing.T) {
	srv := replay(t, 200, "testdata/uk_fw48h.json", func(r *http.Request) {
		assert.Equal(t, "/intensity/2018-01-20T11:30Z/fw48h", r.URL.Path)
	})
	p := &UKCarbonIntensity{Client: client(srv, "")}
	now := time.Date(2018, 1, 20, 12, 10, 0, 0, time.UTC)
	fc := Bind(context.Background(), p)
	s, err := fc.Forecast(now, 2*time.Hour)
	require.NoError(t, err)
	assert.True(t, s.Start.Equal(time.Date(2018, 1, 20, 12, 0, 0, 0, time.UTC)))
	assert.Equal(t, 30*time.Minute, s.Step)
	// 13:30 is missing and interpolated between 248 and 232.
	assert.InDeltaSlice(t, []float64{266, 259, 248, 240, 232}, s.Values, 1e-12)

	_, err = fc.Forecast(now, 48*time.Hour)
	require.ErrorIs(t, err, ErrOutOfRange)

	// Plan and evaluate a job on the live forecast.
	res, err := Evaluate(s, fc, Job{Work: time.Hour, Start: now, Deadline: now.Add(2 * time.Hour)})
	require.NoError(t, err)
	assert.Greater(t, res.SavingsPct, 0.0)
}

func TestElectricityMapsHistory(t *testing.T) {
	from := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	to := from.Add(7 * time.Hour)
	tests := []struct {
		name     string
		file     string
		from, to time.Time
		maxGap   int
		wantPath string
		want     []float64
		wantGap  *GapError
	}{
		{name: "last 24h, null interpolated", file: "testdata/em_history.json", wantPath: "/carbon-intensity/history",
			want: []float64{402, 388, 374, 360, 351}},
		{name: "past range, long gap kept, refused where used", file: "testdata/em_past_range.json", from: from, to: to, wantPath: "/carbon-intensity/past-range",
			wantGap: &GapError{Start: from.Add(3 * time.Hour), End: from.Add(6 * time.Hour), Missing: 3}},
		{name: "past range, max gap 3", file: "testdata/em_past_range.json", from: from, to: to, maxGap: 3, wantPath: "/carbon-intensity/past-range",
			want: []float64{41, 43, 44, 44, 44, 44, 44}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := replay(t, 200, tc.file, func(r *http.Request) {
				assert.Equal(t, tc.wantPath, r.URL.Path)
				if !tc.from.IsZero() {
					assert.Equal(t, "2024-01-01T00:00:00Z", r.URL.Query().Get("start"))
					assert.Equal(t, "2024-01-01T07:00:00Z", r.URL.Query().Get("end"))
				}
			})
			c := client(srv, "")
			c.MaxGapSteps = tc.maxGap
			s, err := (&ElectricityMaps{Client: c, Zone: "DE"}).History(context.Background(), tc.from, tc.to)
			if tc.wantGap != nil {
				require.NoError(t, err)
				err = useAll(s)
				var ge *GapError
				require.ErrorAs(t, err, &ge)
				require.ErrorIs(t, err, ErrGap)
				assert.True(t, ge.Start.Equal(tc.wantGap.Start), "start %s", ge.Start)
				assert.True(t, ge.End.Equal(tc.wantGap.End), "end %s", ge.End)
				assert.Equal(t, tc.wantGap.Missing, ge.Missing)
				assert.Contains(t, err.Error(), "2024-01-01T03:00:00Z")
				assert.Contains(t, err.Error(), "2024-01-01T06:00:00Z")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, time.Hour, s.Step)
			assert.InDeltaSlice(t, tc.want, s.Values, 1e-12)
		})
	}
}

func TestCarbonAwareSDK(t *testing.T) {
	t.Run("forecast", func(t *testing.T) {
		srv := replay(t, 200, "testdata/casdk_forecasts.json", func(r *http.Request) {
			assert.Equal(t, "/api/emissions/forecasts/current", r.URL.Path)
			assert.Equal(t, "northeurope", r.URL.Query().Get("location"))
			assert.Equal(t, "Bearer k", r.Header.Get("Authorization"))
		})
		p := &CarbonAwareSDK{Client: client(srv, "/api/"), Location: "northeurope", KeyEnv: "CA_KEY"}
		s, err := p.Forecast(context.Background(), time.Time{}, 0)
		require.NoError(t, err)
		assert.Equal(t, []float64{532.02, 500.5, 448.44, 460}, s.Values)
	})
	t.Run("history newest first, gap interpolated", func(t *testing.T) {
		from := time.Date(2022, 8, 23, 14, 0, 0, 0, time.UTC)
		srv := replay(t, 200, "testdata/casdk_bylocation.json", func(r *http.Request) {
			assert.Equal(t, "/emissions/bylocation", r.URL.Path)
			assert.Equal(t, "westus", r.URL.Query().Get("location"))
			assert.Equal(t, "2022-08-23T14:00:00Z", r.URL.Query().Get("time"))
			assert.Equal(t, "2022-08-23T14:30:00Z", r.URL.Query().Get("toTime"))
			assert.Empty(t, r.Header.Get("Authorization"))
		})
		p := &CarbonAwareSDK{Client: client(srv, ""), Location: "westus"}
		s, err := p.History(context.Background(), from, from.Add(30*time.Minute))
		require.NoError(t, err)
		assert.Equal(t, "CAISO_NORTH", s.Zone)
		assert.True(t, s.Start.Equal(from))
		assert.Equal(t, 5*time.Minute, s.Step)
		require.Len(t, s.Values, 7)
		assert.InDelta(t, (441.34537601+439.53100653)/2, s.Values[2], 1e-9)
		assert.InDelta(t, 439.07741416000005, s.Values[6], 1e-9)
	})
}

func TestUKHistoryPrefersActual(t *testing.T) {
	srv := replay(t, 200, "testdata/uk_fw48h.json", func(r *http.Request) {
		assert.Equal(t, "/intensity/2018-01-20T11:30Z/2018-01-20T16:00Z", r.URL.Path)
	})
	from := time.Date(2018, 1, 20, 11, 30, 0, 0, time.UTC)
	s, err := (&UKCarbonIntensity{Client: client(srv, "")}).History(context.Background(), from, from.Add(270*time.Minute))
	require.NoError(t, err)
	assert.Equal(t, "GB", s.Zone)
	assert.InDeltaSlice(t, []float64{268, 263, 259, 248, 240, 232, 221, 195, 187}, s.Values, 1e-12)
}

// TestUKRegional: with a Region the client asks the regional endpoints (by
// region id or postcode outward code) and reads their one-region answer,
// which has no actual: History and Measured read its modelled values.
func TestUKRegional(t *testing.T) {
	from := time.Date(2018, 5, 15, 11, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		region, path string
		fetch        func(p *UKCarbonIntensity) (*Series, error)
	}{
		{"13", "/regional/intensity/2018-05-15T11:00Z/fw48h/regionid/13", func(p *UKCarbonIntensity) (*Series, error) {
			return p.Forecast(context.Background(), from.Add(10*time.Minute), time.Hour)
		}},
		{"rg10", "/regional/intensity/2018-05-15T11:30Z/2018-05-15T14:30Z/postcode/RG10", func(p *UKCarbonIntensity) (*Series, error) {
			return p.History(context.Background(), from, from.Add(3*time.Hour))
		}},
		{"13", "/regional/intensity/2018-05-15T11:30Z/2018-05-15T14:30Z/regionid/13", func(p *UKCarbonIntensity) (*Series, error) {
			return p.Measured(context.Background(), from, from.Add(3*time.Hour))
		}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			srv := replay(t, 200, "testdata/uk_regional_fw48h.json", func(r *http.Request) {
				assert.Equal(t, tc.path, r.URL.Path)
			})
			s, err := tc.fetch(&UKCarbonIntensity{Client: client(srv, ""), Region: tc.region})
			require.NoError(t, err)
			assert.Equal(t, "London", s.Zone)
			assert.True(t, s.Start.Equal(from), "start %s", s.Start)
			// 12:30 is left out by the answer and interpolated.
			assert.InDeltaSlice(t, []float64{266, 259, 253.5, 248, 240, 232}, s.Values, 1e-12)
		})
	}
}

// providers runs every provider's fetch against one server.
var providers = []struct {
	name  string
	fetch func(ctx context.Context, c Client) (*Series, error)
}{
	{"electricitymaps forecast", func(ctx context.Context, c Client) (*Series, error) {
		return (&ElectricityMaps{Client: c, Zone: "DE"}).Forecast(ctx, time.Now(), time.Hour)
	}},
	{"electricitymaps history", func(ctx context.Context, c Client) (*Series, error) {
		return (&ElectricityMaps{Client: c, Zone: "DE"}).History(ctx, time.Time{}, time.Time{})
	}},
	{"casdk forecast", func(ctx context.Context, c Client) (*Series, error) {
		return (&CarbonAwareSDK{Client: c, Location: "x"}).Forecast(ctx, time.Now(), time.Hour)
	}},
	{"casdk history", func(ctx context.Context, c Client) (*Series, error) {
		return (&CarbonAwareSDK{Client: c, Location: "x"}).History(ctx, time.Now().Add(-time.Hour), time.Now())
	}},
	{"uk forecast", func(ctx context.Context, c Client) (*Series, error) {
		return (&UKCarbonIntensity{Client: c}).Forecast(ctx, time.Now(), time.Hour)
	}},
	{"uk history", func(ctx context.Context, c Client) (*Series, error) {
		return (&UKCarbonIntensity{Client: c}).History(ctx, time.Now().Add(-time.Hour), time.Now())
	}},
}

func TestProvidersErrors(t *testing.T) {
	long := `{"message":"` + strings.Repeat("x", 2000) + `"}`
	gapBodies := map[string]string{
		"electricitymaps forecast": `{"zone":"DE","forecast":[{"carbonIntensity":1,"datetime":"2024-01-01T00:00:00Z"},{"carbonIntensity":1,"datetime":"2024-01-01T01:00:00Z"},{"carbonIntensity":1,"datetime":"2024-01-01T05:00:00Z"}]}`,
		"electricitymaps history":  `{"zone":"DE","history":[{"carbonIntensity":1,"datetime":"2024-01-01T00:00:00Z"},{"carbonIntensity":1,"datetime":"2024-01-01T01:00:00Z"},{"carbonIntensity":1,"datetime":"2024-01-01T05:00:00Z"}]}`,
		"casdk forecast":           `[{"location":"x","forecastData":[{"timestamp":"2024-01-01T00:00:00Z","value":1},{"timestamp":"2024-01-01T01:00:00Z","value":1},{"timestamp":"2024-01-01T05:00:00Z","value":1}]}]`,
		"casdk history":            `[{"location":"x","time":"2024-01-01T05:00:00Z","rating":1},{"location":"x","time":"2024-01-01T01:00:00Z","rating":1},{"location":"x","time":"2024-01-01T00:00:00Z","rating":1}]`,
		"uk forecast":              `{"data":[{"from":"2024-01-01T00:00Z","to":"2024-01-01T01:00Z","intensity":{"forecast":1}},{"from":"2024-01-01T01:00Z","to":"2024-01-01T02:00Z","intensity":{"forecast":1}},{"from":"2024-01-01T05:00Z","to":"2024-01-01T06:00Z","intensity":{"forecast":1}}]}`,
		"uk history":               `{"data":[{"from":"2024-01-01T00:00Z","to":"2024-01-01T01:00Z","intensity":{"forecast":1}},{"from":"2024-01-01T01:00Z","to":"2024-01-01T02:00Z","intensity":{"forecast":1}},{"from":"2024-01-01T05:00Z","to":"2024-01-01T06:00Z","intensity":{"forecast":1}}]}`,
	}
	cases := []struct {
		name    string
		status  int
		body    string
		wantErr error
		errHas  []string
	}{
		{"unauthorized", 401, `{"message": "Invalid  auth-token"}`, ErrHTTPStatus, []string{"401 Unauthorized", `{"message": "Invalid auth-token"}`}},
		{"rate limited", 429, "", ErrHTTPStatus, []string{"429 Too Many Requests"}},
		{"server error, long body cut", 500, long, ErrHTTPStatus, []string{"500 Internal Server Error", `{"message":"xxx`}},
		{"malformed json", 200, `{"data":[`, nil, []string{"decoding", "unexpected EOF"}},
		{"gap", 200, "", ErrGap, []string{"2024-01-01T02:00:00Z", "2024-01-01T05:00:00Z"}},
	}
	for _, p := range providers {
		for _, tc := range cases {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				body := tc.body
				if tc.name == "gap" {
					body = gapBodies[p.name]
				}
				srv := replay(t, tc.status, body, nil)
				s, err := p.fetch(context.Background(), client(srv, ""))
				if tc.name == "gap" {
					// The answer reads; a use of the data in its gap is refused.
					require.NoError(t, err)
					err = useAll(s)
				}
				require.Error(t, err)
				if tc.wantErr != nil {
					require.ErrorIs(t, err, tc.wantErr)
				}
				for _, s := range tc.errHas {
					assert.Contains(t, err.Error(), s)
				}
				var se *StatusError
				if errors.As(err, &se) {
					assert.Equal(t, tc.status, se.StatusCode)
					assert.LessOrEqual(t, len(se.Body), snippetLen)
					assert.Contains(t, se.URL, srv.URL)
				}
			})
		}
	}
}

func TestProvidersTimeoutAndCancel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(srv.Close)
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			c := client(srv, "")
			c.Timeout = 20 * time.Millisecond
			_, err := p.fetch(context.Background(), c)
			require.ErrorIs(t, err, context.DeadlineExceeded)

			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err = p.fetch(ctx, client(srv, ""))
			require.ErrorIs(t, err, context.Canceled)
		})
	}
}

func TestProvidersConfigErrors(t *testing.T) {
	var hits atomic.Int32
	srv := replay(t, 200, "{}", func(*http.Request) { hits.Add(1) })
	c := client(srv, "")
	ctx := context.Background()
	noTok := c
	noTok.Getenv = env()
	tests := []struct {
		name    string
		fetch   func() (*Series, error)
		wantErr error
		errHas  string
	}{
		{"em no token", func() (*Series, error) {
			return (&ElectricityMaps{Client: noTok, Zone: "DE"}).Forecast(ctx, time.Now(), 0)
		}, ErrNoToken, "$ELECTRICITYMAPS_TOKEN"},
		{"em custom token env", func() (*Series, error) {
			return (&ElectricityMaps{Client: c, Zone: "DE", TokenEnv: "EM_OTHER"}).Forecast(ctx, time.Now(), 0)
		}, ErrNoToken, "$EM_OTHER"},
		{"em no zone", func() (*Series, error) {
			return (&ElectricityMaps{Client: c}).History(ctx, time.Time{}, time.Time{})
		}, ErrConfig, "Zone"},
		{"casdk key env empty", func() (*Series, error) {
			return (&CarbonAwareSDK{Client: noTok, Location: "x", KeyEnv: "CA_KEY"}).Forecast(ctx, time.Now(), 0)
		}, ErrNoToken, "$CA_KEY"},
		{"casdk no base url", func() (*Series, error) {
			return (&CarbonAwareSDK{Location: "x"}).Forecast(ctx, time.Now(), 0)
		}, ErrConfig, "BaseURL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.fetch()
			require.ErrorIs(t, err, tc.wantErr)
			assert.Contains(t, err.Error(), tc.errHas)
		})
	}
	assert.Zero(t, hits.Load(), "no request may be sent without configuration")
}
