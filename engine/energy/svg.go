package energy

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cann-train/cann-train/engine/carbon"
)

// Timeline is what RenderSVG draws.
type Timeline struct {
	Series  *carbon.Series // the intensity curve (required)
	Chunks  []Span         // what ran: one shaded rect (class "chunk") each
	Lost    []Span         // optional failed chunks, trained again: orange rects (class "lost")
	Planned []Span         // optional planned slots: dashed outlines (class "planned")
	Title   string
	// Width and Height in pixels; 0 means 960 × 320.
	Width, Height int
}

const (
	marginL, marginR, marginT, marginB = 64.0, 16.0, 28.0, 44.0
)

// tickSteps are the candidate time-axis tick spacings.
var tickSteps = []time.Duration{
	5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour,
}

// RenderSVG writes tl as a standalone SVG document: the intensity step
// curve (gCO2eq/kWh) over UTC time, the chunks that ran as shaded
// rectangles (failed ones in orange), planned slots as dashed outlines,
// and labelled axes. The time
// range covers the series and every span, so each chunk gets a rectangle.
func RenderSVG(w io.Writer, tl Timeline) error {
	s := tl.Series
	if err := s.Validate(); err != nil {
		return fmt.Errorf("energy: timeline: %w", err)
	}
	for i, sp := range slices.Concat(tl.Chunks, tl.Lost, tl.Planned) {
		if !sp.Start.Before(sp.End) {
			return fmt.Errorf("%w: timeline span %d is empty", ErrInvalid, i)
		}
	}
	W, H := float64(tl.Width), float64(tl.Height)
	if W == 0 {
		W = 960
	}
	if H == 0 {
		H = 320
	}
	if W < marginL+marginR+10 || H < marginT+marginB+10 {
		return fmt.Errorf("%w: timeline size %v×%v too small", ErrInvalid, W, H)
	}
	t0, t1 := s.Start, s.End()
	for _, sp := range slices.Concat(tl.Chunks, tl.Lost, tl.Planned) {
		if sp.Start.Before(t0) {
			t0 = sp.Start
		}
		if sp.End.After(t1) {
			t1 = sp.End
		}
	}
	vmax := 0.0
	for _, v := range s.Values {
		vmax = math.Max(vmax, v)
	}
	ystep := niceStep(vmax / 5)
	ytop := math.Max(ystep, math.Ceil(vmax/ystep)*ystep)
	pw, ph := W-marginL-marginR, H-marginT-marginB
	x := func(t time.Time) float64 { return marginL + pw*float64(t.Sub(t0))/float64(t1.Sub(t0)) }
	y := func(v float64) float64 { return marginT + ph*(1-v/ytop) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="11">`+"\n", W, H, W, H)
	// Legend, right-aligned on the title's line: what each mark is.
	type key struct{ label, swatch string }
	keys := []key{{"intensity", `stroke="#c62828" stroke-width="1.5"`}}
	if len(tl.Chunks) > 0 {
		keys = append(keys, key{"trained", `stroke="#2e7d32" stroke-opacity="0.4" stroke-width="8"`})
	}
	if len(tl.Lost) > 0 {
		keys = append(keys, key{"lost (trained again)", `stroke="#e65100" stroke-opacity="0.45" stroke-width="8"`})
	}
	if len(tl.Planned) > 0 {
		keys = append(keys, key{"planned", `stroke="#1565c0" stroke-dasharray="4 3"`})
	}
	const swatch, gap, charW = 14.0, 12.0, 6.2 // (11 px sans-serif: about 6 px a character)
	legendW := 0.0
	for _, k := range keys {
		legendW += swatch + 4 + charW*float64(utf8.RuneCountInString(k.label)) + gap
	}
	lx := W - marginR - legendW + gap
	b.WriteString(`<g class="legend">` + "\n")
	for _, k := range keys {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="12" x2="%.1f" y2="12" %s/><text x="%.1f" y="16">%s</text>`+"\n", lx, lx+swatch, k.swatch, lx+swatch+4, esc(k.label))
		lx += swatch + 4 + charW*float64(utf8.RuneCountInString(k.label)) + gap
	}
	b.WriteString("</g>\n")
	if tl.Title != "" {
		// Cut to the room left of the legend (the whole title on hover).
		room := int((W - marginR - legendW - marginL - 8) / 7.8) // (13 px bold: about 8 px a character)
		title := []rune(tl.Title)
		if room < 1 {
			title = nil
		} else if len(title) > room {
			title = append(title[:room-1], '…')
		}
		fmt.Fprintf(&b, `<g class="title"><title>%s</title><text x="%g" y="16" font-size="13" font-weight="bold">%s</text></g>`+"\n", esc(tl.Title), marginL, esc(string(title)))
	}
	// Y axis: grid lines and g/kWh labels.
	b.WriteString(`<g class="y-axis" stroke="#ccc">` + "\n")
	for v := 0.0; v <= ytop+ystep/2; v += ystep {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", marginL, y(v), marginL+pw, y(v))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" stroke="none" fill="#333" text-anchor="end">%s</text>`+"\n", marginL-6, y(v)+4, fmtNum(v))
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(&b, `<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle">gCO2eq/kWh</text>`+"\n", marginT+ph/2, marginT+ph/2)
	// X axis: UTC ticks.
	span := t1.Sub(t0)
	step := tickSteps[len(tickSteps)-1]
	for _, c := range tickSteps {
		if span/c <= 8 {
			step = c
			break
		}
	}
	layout := "15:04"
	switch {
	case step >= 24*time.Hour:
		layout = "01-02"
	case span > 24*time.Hour:
		layout = "01-02 15:04"
	}
	fmt.Fprintf(&b, `<g class="x-axis"><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", marginL, marginT+ph, marginL+pw, marginT+ph)
	for t := t0.UTC().Truncate(step); !t.After(t1); t = t.Add(step) {
		if t.Before(t0) {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`, x(t), marginT+ph, x(t), marginT+ph+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(t), marginT+ph+16, t.UTC().Format(layout))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">time (UTC) from %s</text></g>`+"\n",
		marginL+pw/2, H-8, t0.UTC().Format("2006-01-02 15:04"))
	// Spans below the curve.
	rect := func(class, style string, sp Span) {
		x0, x1 := x(sp.Start), x(sp.End)
		fmt.Fprintf(&b, `<rect class="%s" x="%.2f" y="%.1f" width="%.2f" height="%.1f" %s><title>%s – %s UTC</title></rect>`+"\n",
			class, x0, marginT, math.Max(1, x1-x0), ph, style,
			sp.Start.UTC().Format("2006-01-02 15:04"), sp.End.UTC().Format("2006-01-02 15:04"))
	}
	for _, sp := range tl.Chunks {
		rect("chunk", `fill="#2e7d32" fill-opacity="0.25"`, sp)
	}
	for _, sp := range tl.Lost {
		rect("lost", `fill="#e65100" fill-opacity="0.3"`, sp)
	}
	for _, sp := range tl.Planned {
		rect("planned", `fill="none" stroke="#1565c0" stroke-dasharray="4 3"`, sp)
	}
	// Intensity step curve: Values[i] holds on [TimeAt(i), TimeAt(i+1)).
	fmt.Fprintf(&b, `<path class="intensity" fill="none" stroke="#c62828" stroke-width="1.5" d="M%.2f %.2f`, x(s.Start), y(s.Values[0]))
	for i, v := range s.Values {
		if i > 0 {
			fmt.Fprintf(&b, " V%.2f", y(v))
		}
		fmt.Fprintf(&b, " H%.2f", x(s.TimeAt(i+1)))
	}
	b.WriteString(`"/>` + "\n</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceStep rounds v up to 1, 2 or 5 × 10^k (at least 1).
func niceStep(v float64) float64 {
	if !(v > 1) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func fmtNum(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%g", v)
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
