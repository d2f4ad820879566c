package carbon

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

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
// response into a Series (same step inference and gap rules as ReadCSV;
// errors name the forecast[i] element).
func ReadElectricityMapsForecast(r io.Reader) (*Series, error) {
	var doc emForecast
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("carbon: decoding Electricity Maps forecast: %w", err)
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
	return buildSeries(pts, doc.Zone)
}

func checkValue(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("%w: %v is not a finite non-negative number", ErrBadValue, v)
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

// ReadCarbonAwareForecasts decodes a Carbon Aware SDK forecasts response:
// a JSON array of {requestedAt, generatedAt, location, windowSize,
// optimalDataPoints|optimalDataPoint, forecastData:[{location, timestamp,
// duration, value}]}. Each element's forecastData becomes a Series (zone =
// the element's location); when durations are given they must agree with
// the inferred step.
func ReadCarbonAwareForecasts(r io.Reader) ([]CarbonAwareForecast, error) {
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
		s, err := buildSeries(pts, d.Location)
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
	return nil, fmt.Errorf("%w: location %q not among %q", ErrHeader, location, names)
}
