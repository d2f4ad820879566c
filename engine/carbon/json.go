package carbon

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// JSONOptions tunes the JSON readers.
type JSONOptions struct {
	// MaxGapSteps is the longest run of missing steps filled by linear
	// interpolation: 0 means the default (MaxInterpolatedSteps, or an hour of
	// steps on a finer grid), negative means none. Longer runs are kept
	// as the series' gaps (Series.Gaps).
	MaxGapSteps int
	// PreferActual makes ReadUKIntensity use intensity.actual where it is
	// not null (falling back to intensity.forecast); the default reads the
	// forecast. Other readers ignore it.
	PreferActual bool
	// ActualOnly makes ReadUKIntensity read intensity.actual only: a
	// period whose actual is null (not yet measured) is a missing step,
	// never its forecast. It wins over PreferActual; other readers ignore
	// it.
	ActualOnly bool
	// Zone is the zone asked for, compared without case as
	// CSVOptions.Zone is: it selects a region of the UK API's regional
	// answers (its short name or id; ReadUKIntensity), where a national
	// answer takes only "GB", and a location of a Carbon Aware SDK
	// emissions answer (ReadCarbonAwareEmissions) or forecasts answer
	// (ReadTrace); an Electricity Maps answer for another zone is
	// refused. A refusal (ErrJSONAnswer) names what the answer holds.
	// Empty: the only one.
	Zone string
}

// emForecast is the Electricity Maps v3 /carbon-intensity/forecast shape:
// {zone, forecast:[{carbonIntensity, datetime}], updatedAt}.
type emForecast struct {
	Zone     string `json:"zone"`
	Forecast []struct {
		CarbonIntensity *float64 `json:"carbonIntensity"`
		Datetime        string   `json:"datetime"`
	} `json:"forecast"`
	UpdatedAt string `json:"updatedAt"`
}

// ReadElectricityMapsForecast decodes an Electricity Maps v3 forecast
// response with default options; see ReadElectricityMapsForecastOptions.
func ReadElectricityMapsForecast(r io.Reader) (*Series, error) {
	return ReadElectricityMapsForecastOptions(r, JSONOptions{})
}

// ReadElectricityMapsForecastOptions decodes an Electricity Maps v3 forecast
// response into a Series (same step inference and gap rules as ReadCSV;
// errors name the forecast[i] element). A null carbonIntensity is an error:
// a forecast has no reason to miss a value. A forecast for another zone
// than opts.Zone (when both are given) is refused.
func ReadElectricityMapsForecastOptions(r io.Reader, opts JSONOptions) (*Series, error) {
	var doc emForecast
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("carbon: decoding Electricity Maps forecast: %w", err)
	}
	if err := answerZone(doc.Zone, opts.Zone, "zone", "Electricity Maps forecast"); err != nil {
		return nil, err
	}
	pts := make([]point, 0, len(doc.Forecast))
	for i, f := range doc.Forecast {
		where := fmt.Sprintf("forecast[%d]", i)
		t, err := parseTime(f.Datetime)
		if err != nil {
			return nil, fmt.Errorf("%s.datetime: %w", where, err)
		}
		if f.CarbonIntensity == nil {
			return nil, fmt.Errorf("%w: %s.carbonIntensity is missing or null", ErrBadValue, where)
		}
		if err := checkValue(*f.CarbonIntensity); err != nil {
			return nil, fmt.Errorf("%s.carbonIntensity: %w", where, err)
		}
		pts = append(pts, point{t: t, v: *f.CarbonIntensity, where: where})
	}
	return buildSeries(pts, doc.Zone, opts.MaxGapSteps)
}

// emHistory is the Electricity Maps v3 /carbon-intensity/history shape
// ({zone, history:[…]}) and the /carbon-intensity/past-range shape ({zone,
// data:[…]}); elements are {zone, carbonIntensity, datetime, updatedAt,
// createdAt, emissionFactorType, isEstimated, estimationMethod}.
type emHistory struct {
	Zone    string    `json:"zone"`
	History []emPoint `json:"history"`
	Data    []emPoint `json:"data"`
}

type emPoint struct {
	Zone            string   `json:"zone"`
	CarbonIntensity *float64 `json:"carbonIntensity"`
	Datetime        string   `json:"datetime"`
}

// answerZone refuses an answer for zone has (named at field; "": it does
// not say) when zone want is asked for and is another one (compared
// without case, as CSVOptions.Zone).
func answerZone(has, want, field, answer string) error {
	if want == "" || has == "" || strings.EqualFold(strings.TrimSpace(has), want) {
		return nil
	}
	return fmt.Errorf("%w: %s: the %s is for zone %q, not %q", ErrJSONAnswer, field, answer, has, want)
}

// ReadElectricityMapsHistory decodes an Electricity Maps v3 history or
// past-range response. An element whose carbonIntensity is null has no
// measurement: it is dropped and counts as missing (filled by the gap
// rule, or kept as a gap), as is an hour the API leaves out. An answer for another zone
// than opts.Zone (the document's zone or an element's, when given) is
// refused.
func ReadElectricityMapsHistory(r io.Reader, opts JSONOptions) (*Series, error) {
	var doc emHistory
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("carbon: decoding Electricity Maps history: %w", err)
	}
	name, elems := "history", doc.History
	if elems == nil {
		name, elems = "data", doc.Data
	}
	answer := "Electricity Maps history"
	if name == "data" {
		answer = "Electricity Maps past-range answer"
	}
	if err := answerZone(doc.Zone, opts.Zone, "zone", answer); err != nil {
		return nil, err
	}
	pts := make([]point, 0, len(elems))
	for i, e := range elems {
		where := fmt.Sprintf("%s[%d]", name, i)
		if err := answerZone(e.Zone, opts.Zone, where+".zone", answer); err != nil {
			return nil, err
		}
		t, err := parseTime(e.Datetime)
		if err != nil {
			return nil, fmt.Errorf("%s.datetime: %w", where, err)
		}
		if e.CarbonIntensity == nil {
			pts = append(pts, point{t: t, where: where, missing: true})
			continue
		}
		if err := checkValue(*e.CarbonIntensity); err != nil {
			return nil, fmt.Errorf("%s.carbonIntensity: %w", where, err)
		}
		pts = append(pts, point{t: t, v: *e.CarbonIntensity, where: where})
	}
	return buildSeries(pts, doc.Zone, opts.MaxGapSteps)
}

func checkValue(v float64) error {
	if why := valueProblem(v); why != "" {
		return fmt.Errorf("%w: %v %s", ErrBadValue, v, why)
	}
	return nil
}

// DataPoint is one Carbon Aware SDK EmissionsDataDTO:
// {location, timestamp, duration (minutes), value (g/kWh)}.
type DataPoint struct {
	Location  string    `json:"location"`
	Timestamp time.Time `json:"timestamp"`
	Duration  int       `json:"duration"`
	Value     float64   `json:"value"`
}

// CarbonAwareForecast is one element of the Carbon Aware SDK
// /emissions/forecasts/current response.
type CarbonAwareForecast struct {
	Location    string
	RequestedAt time.Time
	GeneratedAt time.Time
	WindowSize  time.Duration
	// Optimal holds optimalDataPoints (the DTO form, an array) or the
	// tutorial's singular optimalDataPoint; both are accepted.
	Optimal []DataPoint
	// Series is forecastData as a regular series.
	Series *Series
}

type caForecastDTO struct {
	RequestedAt       time.Time   `json:"requestedAt"`
	GeneratedAt       time.Time   `json:"generatedAt"`
	Location          string      `json:"location"`
	WindowSize        int         `json:"windowSize"`
	OptimalDataPoints []DataPoint `json:"optimalDataPoints"`
	OptimalDataPoint  *DataPoint  `json:"optimalDataPoint"`
	ForecastData      []struct {
		Location  string   `json:"location"`
		Timestamp string   `json:"timestamp"`
		Duration  int      `json:"duration"`
		Value     *float64 `json:"value"`
	} `json:"forecastData"`
}

// ReadCarbonAwareForecasts decodes a Carbon Aware SDK forecasts response
// with default options; see ReadCarbonAwareForecastsOptions.
func ReadCarbonAwareForecasts(r io.Reader) ([]CarbonAwareForecast, error) {
	return ReadCarbonAwareForecastsOptions(r, JSONOptions{})
}

// ReadCarbonAwareForecastsOptions decodes a Carbon Aware SDK forecasts response:
// a JSON array of {requestedAt, generatedAt, location, windowSize,
// optimalDataPoints|optimalDataPoint, forecastData:[{location, timestamp,
// duration, value}]}. Each element's forecastData becomes a Series (zone =
// the element's location); when durations are given they must agree with
// the inferred step.
func ReadCarbonAwareForecastsOptions(r io.Reader, opts JSONOptions) ([]CarbonAwareForecast, error) {
	var docs []caForecastDTO
	if err := json.NewDecoder(r).Decode(&docs); err != nil {
		return nil, fmt.Errorf("carbon: decoding Carbon Aware SDK forecasts: %w", err)
	}
	out := make([]CarbonAwareForecast, 0, len(docs))
	for k, d := range docs {
		pts := make([]point, 0, len(d.ForecastData))
		for i, f := range d.ForecastData {
			where := fmt.Sprintf("[%d].forecastData[%d]", k, i)
			t, err := parseTime(f.Timestamp)
			if err != nil {
				return nil, fmt.Errorf("%s.timestamp: %w", where, err)
			}
			if f.Value == nil {
				return nil, fmt.Errorf("%w: %s.value is missing or null", ErrBadValue, where)
			}
			if err := checkValue(*f.Value); err != nil {
				return nil, fmt.Errorf("%s.value: %w", where, err)
			}
			pts = append(pts, point{t: t, v: *f.Value, where: where})
		}
		s, err := buildSeries(pts, d.Location, opts.MaxGapSteps)
		if err != nil {
			return nil, fmt.Errorf("[%d] (%s): %w", k, d.Location, err)
		}
		for i, f := range d.ForecastData {
			if f.Duration != 0 && time.Duration(f.Duration)*time.Minute != s.Step {
				return nil, fmt.Errorf("%w: [%d].forecastData[%d].duration %d min disagrees with the spacing %s",
					ErrIrregular, k, i, f.Duration, s.Step)
			}
		}
		c := CarbonAwareForecast{
			Location:    d.Location,
			RequestedAt: d.RequestedAt,
			GeneratedAt: d.GeneratedAt,
			WindowSize:  time.Duration(d.WindowSize) * time.Minute,
			Optimal:     d.OptimalDataPoints,
			Series:      s,
		}
		if d.OptimalDataPoint != nil {
			c.Optimal = append(c.Optimal, *d.OptimalDataPoint)
		}
		out = append(out, c)
	}
	return out, nil
}

// SelectLocation returns the forecast for location (case-insensitive).
func SelectLocation(fs []CarbonAwareForecast, location string) (*Series, error) {
	var names []string
	for _, f := range fs {
		if strings.EqualFold(f.Location, location) {
			return f.Series, nil
		}
		names = append(names, f.Location)
	}
	return nil, fmt.Errorf("%w: location %q not among %q", ErrJSONAnswer, location, names)
}

// caEmission is one Carbon Aware SDK EmissionsData element of
// /emissions/bylocation: {location, time, rating (g/kWh), duration
// (a .NET TimeSpan such as "00:05:00")}.
type caEmission struct {
	Location string   `json:"location"`
	Time     string   `json:"time"`
	Rating   *float64 `json:"rating"`
	Duration string   `json:"duration"`
}

// ReadCarbonAwareEmissions decodes a Carbon Aware SDK /emissions/bylocation
// or /emissions/bylocations response (a JSON array, which the SDK returns
// newest first) into a Series in time order. The zone is the elements'
// location: opts.Zone picks one (compared without case) where the answer
// holds several, and must be among them; without it the elements must
// agree. Durations, when given, must equal the inferred step. Null ratings
// count as missing steps.
func ReadCarbonAwareEmissions(r io.Reader, opts JSONOptions) (*Series, error) {
	var docs []caEmission
	if err := json.NewDecoder(r).Decode(&docs); err != nil {
		return nil, fmt.Errorf("carbon: decoding Carbon Aware SDK emissions: %w", err)
	}
	pts := make([]point, 0, len(docs))
	durs := make(map[time.Time]string, len(docs))
	zone := ""
	var locs []string // every location, in the order of its first element
	var firsts []int  // the index of that element
	for i, d := range docs {
		where := fmt.Sprintf("[%d]", i)
		if !slices.ContainsFunc(locs, func(l string) bool { return strings.EqualFold(l, d.Location) }) {
			locs, firsts = append(locs, d.Location), append(firsts, i)
		}
		if opts.Zone != "" && !strings.EqualFold(strings.TrimSpace(d.Location), opts.Zone) {
			continue // another location of a /emissions/bylocations answer
		}
		if zone == "" {
			zone = d.Location
		}
		t, err := parseTime(d.Time)
		if err != nil {
			return nil, fmt.Errorf("%s.time: %w", where, err)
		}
		if d.Rating == nil {
			pts = append(pts, point{t: t, where: where, missing: true})
			continue
		}
		if err := checkValue(*d.Rating); err != nil {
			return nil, fmt.Errorf("%s.rating: %w", where, err)
		}
		pts = append(pts, point{t: t, v: *d.Rating, where: where})
		if d.Duration != "" {
			durs[t] = d.Duration
		}
	}
	if opts.Zone != "" && zone == "" {
		return nil, fmt.Errorf("%w: location %q not among the elements' locations %q", ErrJSONAnswer, opts.Zone, locs)
	}
	if opts.Zone == "" && len(locs) > 1 {
		at := make([]string, len(locs))
		for k, l := range locs {
			at[k] = fmt.Sprintf("%q at [%d].location", l, firsts[k])
		}
		return nil, fmt.Errorf("%w: several locations: %s; pass a zone to select one", ErrJSONAnswer, strings.Join(at, ", "))
	}
	slices.SortStableFunc(pts, func(a, b point) int { return a.t.Compare(b.t) })
	s, err := buildSeries(pts, zone, opts.MaxGapSteps)
	if err != nil {
		return nil, err
	}
	for _, p := range pts {
		raw, ok := durs[p.t]
		if !ok {
			continue
		}
		d, err := parseTimeSpan(raw)
		if err != nil {
			return nil, fmt.Errorf("%s.duration: %w", p.where, err)
		}
		if d != s.Step {
			return nil, fmt.Errorf("%w: %s.duration %q disagrees with the spacing %s", ErrIrregular, p.where, raw, s.Step)
		}
	}
	return s, nil
}

// parseTimeSpan parses a .NET TimeSpan in its constant form,
// "[d.]hh:mm:ss[.fffffff]".
func parseTimeSpan(s string) (time.Duration, error) {
	bad := fmt.Errorf("%w: duration %q is not [d.]hh:mm:ss[.fffffff]", ErrBadValue, s)
	var days int64
	rest := s
	if i := strings.IndexByte(rest, '.'); i >= 0 && i < strings.IndexByte(rest, ':') {
		d, err := strconv.ParseInt(rest[:i], 10, 32)
		if err != nil || d < 0 {
			return 0, bad
		}
		days, rest = d, rest[i+1:]
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 {
		return 0, bad
	}
	h, err1 := strconv.ParseUint(parts[0], 10, 8)
	m, err2 := strconv.ParseUint(parts[1], 10, 8)
	sec, err3 := strconv.ParseFloat(parts[2], 64)
	if err1 != nil || err2 != nil || err3 != nil || h > 23 || m > 59 || sec < 0 || sec >= 60 {
		return 0, bad
	}
	return time.Duration(days)*24*time.Hour + time.Duration(h)*time.Hour + time.Duration(m)*time.Minute +
		time.Duration(math.Round(sec*1e9)), nil
}

// ukPeriod is one half-hour of the UK Carbon Intensity API:
// {"from","to","intensity":{"forecast","actual","index"}}.
type ukPeriod struct {
	From      string      `json:"from"`
	To        string      `json:"to"`
	Intensity ukIntensity `json:"intensity"`
}

type ukIntensity struct {
	Forecast *float64 `json:"forecast"`
	Actual   *float64 `json:"actual"`
	Index    string   `json:"index"`
}

// ukRegion is a region of the API's regional answers: its periods (data)
// in the one-region shapes, its intensity in the all-regions one.
type ukRegion struct {
	RegionID  *int        `json:"regionid"`
	ShortName string      `json:"shortname"`
	Data      []ukPeriod  `json:"data"`
	Intensity ukIntensity `json:"intensity"`
}

// ukElement is an element of "data": a national period, a region (with its
// periods), or a period of every region.
type ukElement struct {
	ukPeriod
	RegionID  *int       `json:"regionid"`
	ShortName string     `json:"shortname"`
	Data      []ukPeriod `json:"data"`
	Regions   []ukRegion `json:"regions"`
}

// name is a region's zone name: its short name, else its id.
func (r ukRegion) name() string {
	if r.ShortName != "" || r.RegionID == nil {
		return r.ShortName
	}
	return "region " + strconv.Itoa(*r.RegionID)
}

// matches reports whether zone names the region (short name without case,
// or id).
func (r ukRegion) matches(zone string) bool {
	return strings.EqualFold(r.ShortName, zone) || r.RegionID != nil && strconv.Itoa(*r.RegionID) == strings.TrimSpace(zone)
}

// pickRegion returns the region of rs that opts.Zone names, or the only
// one; where says where the regions were listed.
func pickRegion(rs []ukRegion, zone, where string) (ukRegion, error) {
	var names []string
	for _, r := range rs {
		if zone != "" && r.matches(zone) {
			return r, nil
		}
		names = append(names, r.name())
	}
	if zone == "" && len(rs) == 1 {
		return rs[0], nil
	}
	if zone == "" {
		return ukRegion{}, fmt.Errorf("%w: %s: several regions %q; pass a zone (short name or region id) to select one", ErrJSONAnswer, where, names)
	}
	return ukRegion{}, fmt.Errorf("%w: %s: region %q not among %q", ErrJSONAnswer, where, zone, names)
}

// ukPeriods finds the periods of a UK API answer, national or regional,
// and its zone: "GB" nationally, else the region's short name.
func ukPeriods(r io.Reader, zone string) ([]ukPeriod, string, error) {
	var doc struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return nil, "", fmt.Errorf("carbon: decoding UK carbon intensity: %w", err)
	}
	raw := strings.TrimSpace(string(doc.Data))
	if strings.HasPrefix(raw, "{") { // /regional/intensity/{from}/{to}/regionid/{id}
		var one ukRegion
		if err := json.Unmarshal(doc.Data, &one); err != nil {
			return nil, "", fmt.Errorf("carbon: decoding UK carbon intensity: data: %w", err)
		}
		if zone != "" && !one.matches(zone) {
			return nil, "", fmt.Errorf("%w: data: region %q, not %q", ErrJSONAnswer, one.name(), zone)
		}
		return one.Data, one.name(), nil
	}
	var elems []ukElement
	if raw != "" && raw != "null" {
		if err := json.Unmarshal(doc.Data, &elems); err != nil {
			return nil, "", fmt.Errorf("carbon: decoding UK carbon intensity: data: %w", err)
		}
	}
	switch {
	case len(elems) > 0 && elems[0].Regions != nil: // every region, period by period
		periods := make([]ukPeriod, len(elems))
		name := ""
		for i, e := range elems {
			r, err := pickRegion(e.Regions, zone, fmt.Sprintf("data[%d].regions", i))
			if err != nil {
				return nil, "", err
			}
			periods[i] = ukPeriod{From: e.From, To: e.To, Intensity: r.Intensity}
			name = r.name()
		}
		return periods, name, nil
	case len(elems) > 0 && (elems[0].RegionID != nil || elems[0].Data != nil): // /regional/regionid/{id}, /regional/postcode/{pc}
		rs := make([]ukRegion, len(elems))
		for i, e := range elems {
			rs[i] = ukRegion{RegionID: e.RegionID, ShortName: e.ShortName, Data: e.Data}
		}
		r, err := pickRegion(rs, zone, "data")
		if err != nil {
			return nil, "", err
		}
		return r.Data, r.name(), nil
	}
	if zone != "" && !strings.EqualFold(strings.TrimSpace(zone), "GB") {
		return nil, "", fmt.Errorf("%w: data: the answer is national (zone \"GB\", /intensity…) and has no region %q; "+
			"a zone selects a region of the API's regional answers (/regional/…, by short name or region id)", ErrJSONAnswer, zone)
	}
	periods := make([]ukPeriod, len(elems))
	for i, e := range elems {
		periods[i] = e.ukPeriod
	}
	return periods, "GB", nil
}

// ReadUKIntensity decodes a UK National Grid ESO Carbon Intensity API
// response (half-hour periods, UTC) into a Series: the national answers
// (/intensity…) with zone "GB" (an opts.Zone other than "GB" is refused:
// it names a region, which only the regional answers hold), and the
// regional ones — one region's periods (/regional/regionid/{id},
// /regional/postcode/{pc}, /regional/intensity/{from}/{to}/regionid/{id};
// opts.Zone, if given, must name it) or every region's per period
// (/regional/intensity/{from}/fw24h…, where opts.Zone picks the region by
// short name or id) — with the region's short name. The
// forecast is read unless opts.PreferActual, which reads actual where it
// is not null (it is null for periods not yet measured, and regional
// answers have none) and the forecast otherwise, or opts.ActualOnly, which
// reads actual only. A period with no usable value counts as a missing
// step; every period's to-from must equal the inferred step.
func ReadUKIntensity(r io.Reader, opts JSONOptions) (*Series, error) {
	periods, zone, err := ukPeriods(r, opts.Zone)
	if err != nil {
		return nil, err
	}
	doc := struct{ Data []ukPeriod }{periods}
	pts := make([]point, 0, len(doc.Data))
	spans := make([]time.Duration, 0, len(doc.Data))
	for i, d := range doc.Data {
		where := fmt.Sprintf("data[%d]", i)
		from, err := parseTime(d.From)
		if err != nil {
			return nil, fmt.Errorf("%s.from: %w", where, err)
		}
		to, err := parseTime(d.To)
		if err != nil {
			return nil, fmt.Errorf("%s.to: %w", where, err)
		}
		v, field := d.Intensity.Forecast, "forecast"
		if opts.ActualOnly || opts.PreferActual && d.Intensity.Actual != nil {
			v, field = d.Intensity.Actual, "actual"
		}
		if v == nil {
			continue
		}
		if err := checkValue(*v); err != nil {
			return nil, fmt.Errorf("%s.intensity.%s: %w", where, field, err)
		}
		pts = append(pts, point{t: from, v: *v, where: where})
		spans = append(spans, to.Sub(from))
	}
	s, err := buildSeries(pts, zone, opts.MaxGapSteps)
	if err != nil {
		return nil, err
	}
	for i, d := range spans {
		if d != s.Step {
			return nil, fmt.Errorf("%w: %s: period of %s disagrees with the spacing %s", ErrIrregular, pts[i].where, d, s.Step)
		}
	}
	return s, nil
}
