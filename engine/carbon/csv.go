package carbon

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CSVOptions selects what ReadCSVOptions extracts.
type CSVOptions struct {
	// Zone selects the zone. In the Electricity Maps form only rows whose
	// "Zone Id" equals Zone (case-insensitive) are read; empty means "the
	// zone of the first row", and then every row must have that zone. In the
	// plain form Zone names the value column (like the --zone flag of the
	// Let's Wait Awhile scripts); empty is allowed only with one value column.
	Zone string
	// Column overrides the intensity column in the Electricity Maps form:
	// "direct" (default), "lca", or an exact header name.
	Column string
	// MaxGapSteps is the longest run of missing steps filled by linear
	// interpolation: 0 means the default (MaxInterpolatedSteps, or an hour of
	// steps on a finer grid), negative means none. Longer runs are kept
	// as the series' gaps (Series.Gaps).
	MaxGapSteps int
}

// ReadCSV reads a carbon-intensity trace; see ReadCSVOptions.
func ReadCSV(r io.Reader, zone string) (*Series, error) {
	return ReadCSVOptions(r, CSVOptions{Zone: zone})
}

// timeLayouts are tried in order: RFC 3339, then a date and a time of day
// (minutes or seconds, T or a space between) in UTC or with an offset —
// Z, +01:00 or +0100 (ISO 8601 basic, strftime's %z), right after the time
// or after a space (strftime's "%Y-%m-%d %H:%M:%S %z") —, then a date with
// slashes in UTC. Layouts without a zone are read as UTC; fractions of a
// second are read after the seconds. parseTime also strips a trailing
// " UTC" or " GMT" first.
var timeLayouts = func() []string {
	ls := []string{time.RFC3339Nano}
	for _, date := range []string{"2006-01-02 ", "2006-01-02T"} {
		for _, clock := range []string{"15:04:05", "15:04"} { // the UK Carbon Intensity API: 2018-01-20T12:00Z
			for _, zone := range []string{"", "Z07:00", "Z0700", " Z07:00", " Z0700"} {
				ls = append(ls, date+clock+zone)
			}
		}
	}
	return append(ls, "2006/01/02 15:04:05", "2006/01/02 15:04")
}()

// timeForms says what parseTime accepts, for its errors.
const timeForms = `RFC 3339; YYYY-MM-DD HH:MM[:SS[.fff]] (T or a space between) in UTC, or with an offset ` +
	`Z, +01:00 or +0100, also after a space; YYYY/MM/DD HH:MM[:SS] in UTC; any of these with a trailing " UTC" or " GMT"; ` +
	`or Unix seconds (9-11 digits) or milliseconds (12-13)`

// ParseTime reads a time in any form the trace readers accept (timeForms:
// RFC 3339, a date and a time of day to the minute or second, T or a
// space between, in UTC or with an offset, a trailing " UTC", Unix
// seconds or milliseconds); a time without a zone is UTC. Errors wrap
// ErrBadTime and name the forms.
func ParseTime(s string) (time.Time, error) { return parseTime(s) }

func parseTime(s string) (time.Time, error) {
	orig := s
	s = strings.TrimSpace(s)
	if t, ok := unixTime(s); ok {
		return t, nil
	}
	for _, utc := range []string{" UTC", " GMT"} { // "2024-03-01 00:00:00 UTC", as BigQuery writes times
		if len(s) > len(utc) && strings.EqualFold(s[len(s)-len(utc):], utc) {
			s = s[:len(s)-len(utc)]
		}
	}
	for _, l := range timeLayouts {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: %q (want %s)", ErrBadTime, strings.TrimSpace(orig), timeForms)
}

// unixTime reads a Unix timestamp: 9–11 digits are seconds, 12–13
// milliseconds (as WattTime-style exports and JavaScript write them).
func unixTime(s string) (time.Time, bool) {
	if len(s) < 9 || len(s) > 13 || strings.TrimLeft(s, "0123456789") != "" {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	if len(s) >= 12 {
		return time.UnixMilli(n).UTC(), true
	}
	return time.Unix(n, 0).UTC(), true
}

// delimiter guesses a CSV file's field separator from its first line: a
// comma, else a semicolon (European spreadsheet exports) or a tab.
func delimiter(first []byte) rune {
	if i := bytes.IndexByte(first, '\n'); i >= 0 {
		first = first[:i]
	}
	switch {
	case bytes.IndexByte(first, ',') >= 0:
		return ','
	case bytes.IndexByte(first, ';') >= 0:
		return ';'
	case bytes.IndexByte(first, '\t') >= 0:
		return '\t'
	}
	return ','
}

// ReadCSVOptions reads a trace in one of two forms, detected by the header:
//
//   - Electricity Maps export: "Datetime (UTC),Country,Zone Name,Zone Id,
//     Carbon Intensity gCO₂eq/kWh (direct),Carbon Intensity gCO₂eq/kWh (LCA),…"
//     (names compared without case; newer exports call the LCA column
//     "(Life cycle)"). The direct column is read unless opts.Column says
//     otherwise.
//   - plain: "time,<zone>[,<zone>…]", as in the Let's Wait Awhile traces:
//     the first column whose name says time or date (time, timestamp,
//     from, Datetime (UTC), point_time, …) is the time; other times (to,
//     end) and labels (zone_name, ba, market, … see plainLabel) are not
//     zones, so WattTime's "point_time,value,frequency,market,ba,…" reads
//     its value column. Of several value columns, one named
//     carbon_intensity_avg (older Electricity Maps exports), carbon_intensity
//     or actual (the UK API's, beside its forecast) is read; otherwise
//     opts.Zone must name one.
//
// Fields are separated by commas, or by semicolons or tabs when the header
// has no comma (and then a value may have a decimal comma, "212,5").
// Timestamps are RFC3339, "YYYY-MM-DD HH:MM[:SS]" (UTC, or with an offset
// Z, +01:00 or +0100 right after the time or after a space; also with
// slashes in UTC, or with a trailing " UTC") or Unix seconds or
// milliseconds (timeForms). The step is
// inferred (smallest spacing) and checked; gaps of at most
// opts.MaxGapSteps (default 2, or an hour of steps on a finer grid) missing steps are filled
// linearly; longer ones are kept as the series' gaps (Series.Gaps), and a
// use that needs data inside one is refused with a *GapError (ErrGap)
// naming the missing range and the file line after it. A row whose value cell is
// empty, or holds a missing-value marker (NaN, NA, N/A, null, none), is a
// missing step (as a null is in the JSON forms); a row repeating
// the previous row's time and value is dropped, a repeated time with
// another value is refused (ErrIrregular) naming both (as in the JSON
// forms: buildSeries).
// Bad values give ErrBadValue naming line and column.
func ReadCSVOptions(r io.Reader, opts CSVOptions) (*Series, error) {
	br := bufio.NewReader(r)
	head, _ := br.Peek(br.Size()) // the first line, if it is that short (a read error shows below)
	cr := csv.NewReader(br)
	cr.Comma = delimiter(head)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%w: reading header: %w", ErrHeader, err)
	}
	header = append([]string(nil), header...)
	for i := range header {
		header[i] = strings.TrimSpace(strings.TrimPrefix(header[i], "\ufeff"))
	}
	tc, vc, zc, zone, err := selectColumns(header, opts)
	if err != nil {
		return nil, err
	}
	var pts []point
	var others []string // the zones of rows skipped for another zone
	empty := 0          // rows without a value (missingCell)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("carbon: reading csv: %w", err)
		}
		line, _ := cr.FieldPos(0)
		where := fmt.Sprintf("line %d", line)
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		if zc >= 0 {
			z := strings.TrimSpace(rec[zc])
			if zone == "" {
				zone = z
			}
			if !strings.EqualFold(z, zone) {
				if opts.Zone != "" {
					if !slices.Contains(others, z) && len(others) < 20 {
						others = append(others, z)
					}
					continue // another zone in a multi-zone export
				}
				return nil, fmt.Errorf("%w: %s column %d (%s): zone %q differs from %q; pass a zone to select one",
					ErrHeader, where, zc+1, header[zc], z, zone)
			}
		}
		t, err := parseTime(rec[tc])
		if err != nil {
			return nil, fmt.Errorf("%s column %d (%s): %w", where, tc+1, header[tc], err)
		}
		raw := strings.TrimSpace(rec[vc])
		if missingCell(raw) {
			// No reading (Electricity Maps leaves the cell empty; pandas
			// may write NaN, R NA): a missing step, interpolated or
			// refused like a missing row.
			empty++
			pts = append(pts, point{t: t, where: where, missing: true})
			continue
		}
		if cr.Comma != ',' && strings.Count(raw, ",") == 1 && !strings.Contains(raw, ".") {
			raw = strings.Replace(raw, ",", ".", 1) // a decimal comma (e.g. "212,5;" in a German export)
		}
		v, perr := strconv.ParseFloat(raw, 64)
		why := valueProblem(v)
		if perr != nil {
			why = "is not a finite non-negative number"
		}
		if why != "" {
			return nil, fmt.Errorf("%w: %s column %d (%s): %q %s", ErrBadValue, where, vc+1, header[vc], raw, why)
		}
		pts = append(pts, point{t: t, v: v, where: where})
	}
	if len(pts) == 0 && zc >= 0 && opts.Zone != "" {
		if len(others) == 0 {
			return nil, fmt.Errorf("%w: the Electricity Maps export has no rows for zone %q", ErrZone, opts.Zone)
		}
		return nil, fmt.Errorf("%w: the Electricity Maps export is for zone %s, not %q (column %d, %s); pass one of them as the zone",
			ErrZone, quoteAll(others), opts.Zone, zc+1, header[zc])
	}
	s, err := buildSeries(pts, zone, opts.MaxGapSteps)
	if err != nil && empty > 0 {
		return nil, fmt.Errorf("%w (%d rows have no value in %s)", err, empty, header[vc])
	}
	if err != nil {
		return nil, err
	}
	if empty > 0 {
		// A gap may be rows without a value rather than missing rows.
		for k := range s.gaps {
			s.gaps[k].where += fmt.Sprintf(" (%d rows have no value in %s)", empty, header[vc])
		}
	}
	return s, nil
}

// missingCell: raw, a value cell, says there is no reading — empty, or a
// missing-value marker of the tools that write such files (NaN, NA, N/A,
// null, none; any case).
func missingCell(raw string) bool {
	return raw == "" || slices.ContainsFunc([]string{"nan", "na", "n/a", "null", "none"}, func(m string) bool {
		return strings.EqualFold(raw, m)
	})
}

// timeLike reports whether a lower-cased header names a time: time,
// timestamp, date, from, start, anything with "time" or "date" in it
// (Datetime (UTC), point_time as WattTime names it, timestamp_utc), to and
// end (an interval's end). The first such column is the time column.
func timeLike(l string) bool {
	switch l {
	case "time", "timestamp", "date", "from", "start", "to", "end":
		return true
	}
	return strings.Contains(l, "time") || strings.Contains(l, "date")
}

// plainLabel reports whether a lower-cased header of the plain form
// labels the series rather than holding a zone's readings: the zone's or
// region's name, and the balancing authority, market, frequency, data
// type, version and unit columns WattTime's exports carry next to their
// value.
func plainLabel(l string) bool {
	switch l {
	case "zone", "zone_name", "zone name", "zone id", "zone_id", "country", "region",
		"ba", "market", "frequency", "datatype", "version", "unit", "units", "index":
		return true
	}
	return false
}

// readingColumn picks, among several value columns of the plain form, the
// one that is the grid's measured intensity by its name: Electricity Maps'
// older exports' carbon_intensity_avg (next to its production, import and
// discharge intensities and power averages), a bare carbon_intensity, or
// the UK API's actual (next to its forecast). -1: none, or more than one.
func readingColumn(h []string, tc int) int {
	found := -1
	for i, name := range h {
		if i == tc {
			continue
		}
		switch strings.NewReplacer(" ", "_", "-", "_").Replace(strings.ToLower(name)) {
		case "carbon_intensity_avg", "carbon_intensity", "actual":
			if found >= 0 {
				return -1
			}
			found = i
		}
	}
	return found
}

// selectColumns returns the time, value and zone-id (-1 if none) column
// indexes and the zone name implied by the header.
func selectColumns(h []string, opts CSVOptions) (tc, vc, zc int, zone string, err error) {
	tc, vc, zc = -1, -1, -1
	var direct, lca = -1, -1
	for i, name := range h {
		l := strings.ToLower(name)
		switch {
		case timeLike(l):
			if tc < 0 {
				tc = i
			}
		case l == "zone id":
			zc = i
		case strings.HasPrefix(l, "carbon intensity") && strings.Contains(l, "(direct)"):
			direct = i
		case strings.HasPrefix(l, "carbon intensity") && (strings.Contains(l, "(lca)") || strings.Contains(l, "(life cycle)")):
			lca = i
		}
	}
	if tc < 0 {
		return 0, 0, 0, "", fmt.Errorf("%w: no time column (time, timestamp or Datetime…) in %q", ErrHeader, h)
	}
	if direct >= 0 || lca >= 0 { // Electricity Maps export
		// Only its intensity columns: direct, lca (life cycle), or one of
		// them by its header name.
		switch c := strings.ToLower(opts.Column); {
		case c == "" || c == "direct" || direct >= 0 && opts.Column == h[direct]:
			vc = direct
		case c == "lca" || lca >= 0 && opts.Column == h[lca]:
			vc = lca
		}
		if vc < 0 {
			var valid []string
			if direct >= 0 {
				valid = append(valid, fmt.Sprintf("direct (%q)", h[direct]))
			}
			if lca >= 0 {
				valid = append(valid, fmt.Sprintf("lca (%q)", h[lca]))
			}
			return 0, 0, 0, "", fmt.Errorf("%w: column %q is not an intensity column of this Electricity Maps export; want %s",
				ErrHeader, cmpOr(opts.Column, "direct"), strings.Join(valid, " or "))
		}
		return tc, vc, zc, opts.Zone, nil
	}
	if opts.Column != "" {
		return 0, 0, 0, "", fmt.Errorf("%w: a column (%q) picks an Electricity Maps export's intensity column (direct or lca), "+
			"and this is a plain CSV (%q) without them: leave the column out (the zone names a plain CSV's column)", ErrHeader, opts.Column, h)
	}
	// Plain form: every column but the times and the series' labels
	// (plainLabel) is a zone; --zone may still name any column.
	var zones []string
	only := -1
	for i, name := range h {
		if i == tc {
			continue
		}
		if opts.Zone != "" && strings.EqualFold(name, opts.Zone) {
			vc = i
		}
		if l := strings.ToLower(name); timeLike(l) || plainLabel(l) {
			continue
		}
		zones = append(zones, name)
		only = i
	}
	switch {
	case opts.Zone == "" && len(zones) == 1:
		vc = only
	case opts.Zone == "" && len(zones) > 1:
		if vc = readingColumn(h, tc); vc < 0 {
			return 0, 0, 0, "", fmt.Errorf("%w: several zone columns %q; pass a zone to select one", ErrHeader, zones)
		}
	}
	if vc < 0 && opts.Zone == "" {
		var labels []string
		for i, name := range h {
			if i != tc {
				labels = append(labels, name)
			}
		}
		return 0, 0, 0, "", fmt.Errorf("%w: no zone column: %q after the time column %q are read as labels (a zone's name, a market, a unit…); pass a zone to read one of them",
			ErrHeader, labels, h[tc])
	}
	if vc < 0 {
		return 0, 0, 0, "", fmt.Errorf("%w: zone %q not among columns %q", ErrHeader, opts.Zone, zones)
	}
	return tc, vc, -1, h[vc], nil
}

// quoteAll quotes each of names, joined with commas.
func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// cmpOr is s, or def when s is empty.
func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
