package carbon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode/utf8"
)

var (
	// ErrHTTPStatus: a signal API answered with a non-2xx status. The
	// concrete error is a *StatusError.
	ErrHTTPStatus = errors.New("carbon: HTTP error status")
	// ErrNoToken: the environment variable that should hold an API token is
	// unset or empty.
	ErrNoToken = errors.New("carbon: API token not set")
	// ErrConfig: a provider lacks a required setting (zone, location, URL).
	ErrConfig = errors.New("carbon: provider not configured")
)

const (
	// DefaultTimeout bounds one request when Client.Timeout is zero.
	DefaultTimeout = 30 * time.Second
	// maxBody bounds the response bytes decoded (a 10-day 5-minute
	// past-range answer is well under 1 MiB).
	maxBody = 16 << 20
	// snippetLen bounds the body quoted in a StatusError.
	snippetLen = 512
)

// StatusError is a non-2xx answer. It matches ErrHTTPStatus with errors.Is.
type StatusError struct {
	Method, URL string
	StatusCode  int
	Status      string // "429 Too Many Requests"
	Body        string // the start of the body, whitespace collapsed
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("carbon: %s %s: %s", e.Method, e.URL, e.Status)
	}
	return fmt.Sprintf("carbon: %s %s: %s: %s", e.Method, e.URL, e.Status, e.Body)
}

// Is makes errors.Is(err, ErrHTTPStatus) true.
func (e *StatusError) Is(target error) bool { return target == ErrHTTPStatus }

// Client is what the HTTP providers share. The zero value is usable: the
// provider's default base URL, http.DefaultClient, DefaultTimeout and the
// process environment.
type Client struct {
	// BaseURL replaces the provider's default (tests point it at an
	// httptest server). No trailing slash needed.
	BaseURL string
	// HTTP is the client used; nil means http.DefaultClient.
	HTTP *http.Client
	// Timeout bounds each request (on top of the caller's context);
	// 0 means DefaultTimeout, negative means none.
	Timeout time.Duration
	// Getenv reads the token variables; nil means os.Getenv.
	Getenv func(string) string
	// MaxGapSteps is the gap rule of the decoded series (see JSONOptions).
	MaxGapSteps int
}

func (c *Client) base(def string) string {
	if c.BaseURL != "" {
		return strings.TrimRight(c.BaseURL, "/")
	}
	return def
}

func (c *Client) env(name string) string {
	if c.Getenv != nil {
		return c.Getenv(name)
	}
	return os.Getenv(name)
}

// getJSON GETs u with the given headers and hands the body to decode. Non-2xx
// answers become a *StatusError; transport errors (including the timeout,
// which matches context.DeadlineExceeded) and decode errors are wrapped with
// the URL.
func (c *Client) getJSON(ctx context.Context, u string, hdr http.Header, decode func(io.Reader) error) error {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("carbon: GET %s: %w", u, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("carbon: GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, snippetLen))
		return &StatusError{Method: http.MethodGet, URL: u, StatusCode: resp.StatusCode, Status: resp.Status, Body: snippet(b)}
	}
	if err := decode(io.LimitReader(resp.Body, maxBody)); err != nil {
		return fmt.Errorf("carbon: GET %s: %w", u, err)
	}
	return nil
}

// snippet collapses whitespace and drops a trailing partial rune.
func snippet(b []byte) string {
	for len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1]
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

// Provider fetches a forecast from a signal API. The series covers at least
// the step containing now; how far it reaches depends on the API.
type Provider interface {
	Forecast(ctx context.Context, now time.Time, horizon time.Duration) (*Series, error)
}

// Bind adapts a Provider to the context-free Forecaster interface (for
// Evaluate): every Forecast call uses ctx, and the answer is cut to the
// steps covering [now, now+horizon) like Perfect does; an answer that does
// not cover them fails with ErrOutOfRange. Bind the context of one
// operation; do not keep the Forecaster beyond it.
func Bind(ctx context.Context, p Provider) Forecaster {
	return bound{ctx: ctx, p: p}
}

type bound struct {
	ctx context.Context
	p   Provider
}

func (b bound) Forecast(now time.Time, horizon time.Duration) (*Series, error) {
	s, err := b.p.Forecast(b.ctx, now, horizon)
	if err != nil {
		return nil, err
	}
	return Perfect{Trace: s}.Forecast(now, horizon)
}

// DefaultElectricityMapsURL and DefaultElectricityMapsTokenEnv are the
// ElectricityMaps defaults.
const (
	DefaultElectricityMapsURL      = "https://api.electricitymap.org/v3"
	DefaultElectricityMapsTokenEnv = "ELECTRICITYMAPS_TOKEN"
)

// ElectricityMaps is a client of the Electricity Maps v3 carbon-intensity
// API. The token is sent in the auth-token header.
type ElectricityMaps struct {
	Client
	// Zone is the zone key, e.g. "DE".
	Zone string
	// TokenEnv names the environment variable holding the token; empty
	// means DefaultElectricityMapsTokenEnv.
	TokenEnv string
	// EmissionFactorType, when set, is sent as emissionFactorType
	// ("lifecycle" or "direct"); empty leaves the API's default.
	EmissionFactorType string
}

func (p *ElectricityMaps) get(ctx context.Context, path string, q url.Values, decode func(io.Reader) error) error {
	env := p.TokenEnv
	if env == "" {
		env = DefaultElectricityMapsTokenEnv
	}
	if p.Zone == "" {
		return fmt.Errorf("%w: Electricity Maps needs a Zone", ErrConfig)
	}
	tok := p.env(env)
	if tok == "" {
		return fmt.Errorf("%w: Electricity Maps needs $%s", ErrNoToken, env)
	}
	q.Set("zone", p.Zone)
	if p.EmissionFactorType != "" {
		q.Set("emissionFactorType", p.EmissionFactorType)
	}
	u := p.base(DefaultElectricityMapsURL) + path + "?" + q.Encode()
	return p.getJSON(ctx, u, http.Header{"Auth-Token": {tok}}, decode)
}

// Forecast implements Provider with GET /carbon-intensity/forecast. The API
// forecasts from the current hour on whatever now is; horizon, when
// positive, is sent as horizonHours (rounded up to whole hours).
func (p *ElectricityMaps) Forecast(ctx context.Context, now time.Time, horizon time.Duration) (*Series, error) {
	q := url.Values{}
	if horizon > 0 {
		q.Set("horizonHours", fmt.Sprint(int64((horizon+time.Hour-1)/time.Hour)))
	}
	var s *Series
	err := p.get(ctx, "/carbon-intensity/forecast", q, func(r io.Reader) (err error) {
		s, err = ReadElectricityMapsForecastOptions(r, JSONOptions{MaxGapSteps: p.MaxGapSteps})
		return err
	})
	return s, err
}

// History returns measured intensity: the last 24 hours from GET
// /carbon-intensity/history when from and to are both zero, otherwise
// [from, to] from GET /carbon-intensity/past-range (the API caps a range
// at 10 days of hourly data).
func (p *ElectricityMaps) History(ctx context.Context, from, to time.Time) (*Series, error) {
	path, q := "/carbon-intensity/history", url.Values{}
	if !from.IsZero() || !to.IsZero() {
		path = "/carbon-intensity/past-range"
		q.Set("start", from.UTC().Format(time.RFC3339))
		q.Set("end", to.UTC().Format(time.RFC3339))
	}
	var s *Series
	err := p.get(ctx, path, q, func(r io.Reader) (err error) {
		s, err = ReadElectricityMapsHistory(r, JSONOptions{MaxGapSteps: p.MaxGapSteps})
		return err
	})
	return s, err
}

// CarbonAwareSDK is a client of a Green Software Foundation Carbon Aware
// SDK WebAPI deployment (there is no public default; BaseURL is required).
type CarbonAwareSDK struct {
	Client
	// Location is the SDK location, e.g. "westus" or "northeurope".
	Location string
	// KeyEnv optionally names an environment variable holding a key for a
	// gateway in front of the WebAPI, sent as "Authorization: Bearer …".
	// The WebAPI itself has no authentication.
	KeyEnv string
}

func (p *CarbonAwareSDK) get(ctx context.Context, path string, q url.Values, decode func(io.Reader) error) error {
	if p.BaseURL == "" || p.Location == "" {
		return fmt.Errorf("%w: Carbon Aware SDK needs a BaseURL and a Location", ErrConfig)
	}
	hdr := http.Header{}
	if p.KeyEnv != "" {
		key := p.env(p.KeyEnv)
		if key == "" {
			return fmt.Errorf("%w: Carbon Aware SDK key $%s", ErrNoToken, p.KeyEnv)
		}
		hdr.Set("Authorization", "Bearer "+key)
	}
	q.Set("location", p.Location)
	return p.getJSON(ctx, p.base("")+path+"?"+q.Encode(), hdr, decode)
}

// Forecast implements Provider with GET /emissions/forecasts/current for
// Location. It sends no dataStartAt/dataEndAt (the SDK rejects bounds
// outside its forecast), so the whole current forecast comes back.
func (p *CarbonAwareSDK) Forecast(ctx context.Context, now time.Time, horizon time.Duration) (*Series, error) {
	var s *Series
	err := p.get(ctx, "/emissions/forecasts/current", url.Values{}, func(r io.Reader) error {
		fs, err := ReadCarbonAwareForecastsOptions(r, JSONOptions{MaxGapSteps: p.MaxGapSteps})
		if err != nil {
			return err
		}
		s, err = SelectLocation(fs, p.Location)
		return err
	})
	return s, err
}

// History returns measured intensity in [from, to] from GET
// /emissions/bylocation?location=…&time=…&toTime=….
func (p *CarbonAwareSDK) History(ctx context.Context, from, to time.Time) (*Series, error) {
	q := url.Values{}
	q.Set("time", from.UTC().Format(time.RFC3339))
	q.Set("toTime", to.UTC().Format(time.RFC3339))
	var s *Series
	err := p.get(ctx, "/emissions/bylocation", q, func(r io.Reader) (err error) {
		s, err = ReadCarbonAwareEmissions(r, JSONOptions{MaxGapSteps: p.MaxGapSteps})
		return err
	})
	return s, err
}

// DefaultUKCarbonIntensityURL is the UK National Grid ESO Carbon Intensity
// API (no key; half-hour periods; national data from 2017-09-26).
const DefaultUKCarbonIntensityURL = "https://api.carbonintensity.org.uk"

// ukTime is the API's path time form, e.g. 2018-01-20T12:00Z.
const ukTime = "2006-01-02T15:04Z"

// UKCarbonIntensity is a client of the UK Carbon Intensity API: national,
// or one region's.
type UKCarbonIntensity struct {
	Client
	// Region selects the regional endpoints: a region id (1–17, the API's
	// regionid) or a postcode's outward code (e.g. RG10). Empty: national.
	// Regional answers carry the API's modelled forecast only, no actual,
	// so History and Measured read that forecast.
	Region string
}

// regional returns the path suffix of the regional endpoints, or "" for
// national ones.
func (p *UKCarbonIntensity) regional() string {
	r := strings.TrimSpace(p.Region)
	switch {
	case r == "":
		return ""
	case strings.Trim(r, "0123456789") == "":
		return "/regionid/" + r
	}
	return "/postcode/" + url.PathEscape(strings.ToUpper(r))
}

// path is the intensity endpoint for the time part tail (e.g.
// "{from}/fw48h"), national or regional.
func (p *UKCarbonIntensity) path(tail string) string {
	if r := p.regional(); r != "" {
		return "/regional/intensity/" + tail + r
	}
	return "/intensity/" + tail
}

func (p *UKCarbonIntensity) get(ctx context.Context, path string, opts JSONOptions) (*Series, error) {
	var s *Series
	err := p.getJSON(ctx, p.base(DefaultUKCarbonIntensityURL)+path, nil, func(r io.Reader) (err error) {
		s, err = ReadUKIntensity(r, opts)
		return err
	})
	return s, err
}

// Forecast implements Provider with GET /intensity/{from}/fw48h (the
// forecast field; with a Region, /regional/intensity/{from}/fw48h/regionid/{id}
// or …/postcode/{outward code}). from is the half hour before the one containing now, so
// the answer covers now whichever period the API starts with; the API
// reaches 48 h ahead.
func (p *UKCarbonIntensity) Forecast(ctx context.Context, now time.Time, horizon time.Duration) (*Series, error) {
	from := now.UTC().Truncate(30 * time.Minute).Add(-30 * time.Minute)
	return p.get(ctx, p.path(from.Format(ukTime)+"/fw48h"), JSONOptions{MaxGapSteps: p.MaxGapSteps})
}

// History returns [from, to] from GET /intensity/{from}/{to}, reading the
// actual intensity where the API has it and the forecast otherwise (the API
// caps a range at 14 days).
func (p *UKCarbonIntensity) History(ctx context.Context, from, to time.Time) (*Series, error) {
	return p.get(ctx, p.path(from.UTC().Format(ukTime)+"/"+to.UTC().Format(ukTime)),
		JSONOptions{MaxGapSteps: p.MaxGapSteps, PreferActual: true})
}

// Measured is History without the forecast: [from, to] from the same
// endpoint, reading only the actual intensity; periods not yet measured
// (actual null, as the latest ones usually are) are missing steps. It is
// what planner online observes the present with. Regional answers have no
// actual: with a Region it reads their (modelled) values, as History does.
func (p *UKCarbonIntensity) Measured(ctx context.Context, from, to time.Time) (*Series, error) {
	return p.get(ctx, p.path(from.UTC().Format(ukTime)+"/"+to.UTC().Format(ukTime)),
		JSONOptions{MaxGapSteps: p.MaxGapSteps, ActualOnly: p.regional() == "", PreferActual: true})
}
