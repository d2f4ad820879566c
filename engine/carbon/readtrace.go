package carbon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// TraceOptions says what ReadTrace reads of a file.
type TraceOptions struct {
	// Zone is the zone column of a plain CSV or the zone id of an
	// Electricity Maps export (CSVOptions.Zone), the region of the UK
	// API's regional answers ("GB" or empty for its national ones), the
	// location of a Carbon Aware SDK emissions or forecasts answer, or the
	// zone an Electricity Maps answer must be for (JSONOptions.Zone); a
	// file for another zone, or without the one asked for, is refused
	// naming what it holds.
	Zone string
	// Column is an Electricity Maps export's intensity column
	// (CSVOptions.Column).
	Column string
	// MaxGapSteps is the gap rule of every reader (0: the default).
	MaxGapSteps int
}

// ReadTrace reads a carbon-intensity trace in any form this package reads,
// told apart by its content: JSON (its first character { or [) as one of
// the APIs answers — an Electricity Maps history or past-range
// ({zone, history|data:[{carbonIntensity, datetime}]}) or forecast
// ({zone, forecast:[…]}), the UK Carbon Intensity API ({data:[{from, to,
// intensity}]}, national or regional; a trace is what happened, so actual
// where measured and the forecast elsewhere), a Carbon Aware SDK
// emissions answer ([{location, time, rating}]) or forecasts answer
// ([{location, forecastData:[…]}]) — and anything else as CSV
// (ReadCSVOptions). A JSON document of none of these shapes is refused
// naming the keys it has.
func ReadTrace(r io.Reader, opts TraceOptions) (*Series, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("carbon: reading trace: %w", err)
	}
	body := bytes.TrimLeft(bytes.TrimPrefix(b, []byte("\ufeff")), " \t\r\n")
	if len(body) == 0 || body[0] != '{' && body[0] != '[' {
		return ReadCSVOptions(bytes.NewReader(b), CSVOptions(opts))
	}
	jo := JSONOptions{MaxGapSteps: opts.MaxGapSteps, Zone: opts.Zone, PreferActual: true}
	keys, err := jsonKeys(body)
	if err != nil {
		return nil, fmt.Errorf("carbon: trace is not valid JSON: %w", err)
	}
	has := func(k string) bool { return slices.Contains(keys, k) }
	rd := bytes.NewReader(body)
	switch {
	case body[0] == '{' && (has("history") || has("data") && dataHas(body, "carbonIntensity")):
		return ReadElectricityMapsHistory(rd, jo)
	case body[0] == '{' && has("forecast"):
		return ReadElectricityMapsForecastOptions(rd, jo)
	case body[0] == '{' && has("data"):
		return ReadUKIntensity(rd, jo)
	case body[0] == '[' && has("forecastData"):
		fs, err := ReadCarbonAwareForecastsOptions(rd, jo)
		if err != nil {
			return nil, err
		}
		if opts.Zone == "" && len(fs) == 1 {
			return fs[0].Series, nil
		}
		if opts.Zone == "" {
			var locs []string
			for _, f := range fs {
				locs = append(locs, f.Location)
			}
			return nil, fmt.Errorf("%w: Carbon Aware SDK forecasts for several locations %q; pass a zone to select one", ErrJSONAnswer, locs)
		}
		return SelectLocation(fs, opts.Zone)
	case body[0] == '[' && (has("rating") || has("time")):
		return ReadCarbonAwareEmissions(rd, jo)
	}
	return nil, fmt.Errorf("%w: a document with keys %q is none of the known answers (Electricity Maps history or forecast, UK Carbon Intensity, Carbon Aware SDK emissions or forecasts)",
		ErrJSONAnswer, keys)
}

// jsonKeys returns the keys of a JSON object, or of an array's first
// element.
func jsonKeys(b []byte) ([]string, error) {
	var one map[string]json.RawMessage
	if b[0] == '[' {
		var arr []json.RawMessage
		if err := json.Unmarshal(b, &arr); err != nil {
			return nil, err
		}
		if len(arr) == 0 {
			return nil, nil
		}
		b = arr[0]
		if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
			return nil, fmt.Errorf("array of %s, not of objects", strings.SplitN(string(t), ",", 2)[0])
		}
	}
	if err := json.Unmarshal(b, &one); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(one))
	for k := range one {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

// dataHas reports whether the first element of an object's "data" array
// has key.
func dataHas(b []byte, key string) bool {
	var doc struct {
		Data []map[string]json.RawMessage `json:"data"`
	}
	if json.Unmarshal(b, &doc) != nil || len(doc.Data) == 0 {
		return false
	}
	_, ok := doc.Data[0][key]
	return ok
}
