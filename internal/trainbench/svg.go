package trainbench

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Curve is one named line of a loss picture.
type Curve struct {
	Name   string
	Color  string // CSS colour
	Values []float32
}

// WriteCurvesSVG draws loss curves (smoothed with a moving average of
// smooth steps; 1 for none) against the step on a log-scaled loss axis, as
// a self-contained SVG.
func WriteCurvesSVG(w io.Writer, title string, smooth int, curves ...Curve) error {
	const W, H, left, right, top, bottom = 760, 420, 60, 20, 40, 50
	smooth = max(smooth, 1)
	n := 0
	lo, hi := math.Inf(1), math.Inf(-1)
	sm := make([][]float64, len(curves))
	for i, c := range curves {
		n = max(n, len(c.Values))
		var sum float64
		for j, v := range c.Values {
			sum += float64(v)
			if j >= smooth {
				sum -= float64(c.Values[j-smooth])
			}
			m := sum / float64(min(j+1, smooth))
			if m > 0 && !math.IsInf(m, 0) {
				lo, hi = math.Min(lo, m), math.Max(hi, m)
			}
			sm[i] = append(sm[i], m)
		}
	}
	if n < 2 || !(lo < hi) {
		return fmt.Errorf("trainbench: nothing to draw (%d steps)", n)
	}
	llo, lhi := math.Log10(lo), math.Log10(hi)
	x := func(j int) float64 { return left + float64(j)/float64(n-1)*(W-left-right) }
	y := func(v float64) float64 {
		return top + (lhi-math.Log10(math.Max(v, lo)))/(lhi-llo)*(H-top-bottom)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="14">%s</text>`+"\n", left, xmlEscape(title))
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, H-bottom, W-right, H-bottom)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, top, left, H-bottom)
	for _, v := range []float64{lo, math.Sqrt(lo * hi), hi} {
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.3g</text>`+"\n", left-4, y(v)+4, v)
	}
	for _, j := range []int{0, (n - 1) / 2, n - 1} {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x(j), H-bottom+16, j)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">step</text>`+"\n", (W+left)/2, H-12)
	fmt.Fprintf(&b, `<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">training loss (log, %d-step mean)</text>`+"\n", (H)/2, H/2, smooth)
	for i, c := range curves {
		var pts strings.Builder
		for j, v := range sm[i] {
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(j), y(v))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", xmlEscape(c.Color), strings.TrimSpace(pts.String()))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", W-right-260, top+16*(i+1), xmlEscape(c.Color), xmlEscape(c.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
