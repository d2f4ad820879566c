package energy

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cann-train/cann-train/engine/carbon"
)

// svgStats decodes an SVG document strictly and counts rects by class and
// texts.
func svgStats(t *testing.T, doc []byte) (rects map[string]int, texts []string) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	rects = map[string]int{}
	depth, roots := 0, 0
	inText := false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "not well-formed XML")
		switch e := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
				assert.Equal(t, "svg", e.Name.Local)
				assert.Equal(t, "http://www.w3.org/2000/svg", e.Name.Space)
			}
			depth++
			if e.Name.Local == "rect" {
				for _, a := range e.Attr {
					if a.Name.Local == "class" {
						rects[a.Value]++
					}
				}
			}
			inText = e.Name.Local == "text"
		case xml.EndElement:
			depth--
			inText = false
		case xml.CharData:
			if inText {
				texts = append(texts, string(e))
			}
		}
	}
	assert.Equal(t, 0, depth)
	assert.Equal(t, 1, roots)
	return rects, texts
}

func TestRenderSVG(t *testing.T) {
	day := &carbon.Series{Start: t0, Step: 15 * time.Minute, Zone: "DE", Values: make([]float64, 96)}
	for i := range day.Values {
		day.Values[i] = 150 + float64(i%24)*10
	}
	tests := []struct {
		name    string
		tl      Timeline
		chunks  int
		planned int
		texts   []string
	}{
		{"chunks and plan on a day", Timeline{Series: day, Title: `run <A&B> "x"`,
			Chunks:  []Span{{at(1), at(2)}, {at(4), at(4.25)}, {at(20), at(23)}},
			Planned: []Span{{at(1), at(2)}, {at(4), at(5)}}},
			3, 2, []string{`run <A&B> "x"`, "gCO2eq/kWh", "00:00", "03:00", "21:00", "400", "time (UTC) from 2024-01-01 00:00"}},
		{"no chunks", Timeline{Series: series}, 0, 0, []string{"01:00", "07:00", "0", "400", "intensity"}},
		// A title longer than the room left of the legend is cut, not
		// drawn past the canvas; the legend names each mark shown.
		{"a long title", Timeline{Series: day, Title: strings.Repeat("carbon timeline of run/mnist-green ", 6),
			Chunks: []Span{{at(1), at(2)}}, Planned: []Span{{at(1), at(2)}}},
			1, 1, []string{"intensity", "trained", "planned"}},
		{"chunk outside the series widens the axis", Timeline{Series: series, Chunks: []Span{{at(-2), at(-1)}, {at(7), at(10)}}, Width: 400, Height: 200},
			2, 0, []string{"22:00"}},
		{"one tiny chunk in a week", Timeline{Series: &carbon.Series{Start: t0, Step: time.Hour, Values: make([]float64, 7*24)},
			Chunks: []Span{{at(10), at(10).Add(time.Second)}}}, 1, 0, []string{"01-01", "01-08"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, RenderSVG(&buf, tc.tl))
			rects, texts := svgStats(t, buf.Bytes())
			assert.Equal(t, tc.chunks, rects["chunk"])
			assert.Equal(t, tc.planned, rects["planned"])
			assert.Len(t, rects, boolInt(tc.chunks > 0)+boolInt(tc.planned > 0), "no other rects: %v", rects)
			for _, s := range tc.texts {
				assert.Contains(t, texts, s)
			}
			assert.Equal(t, 1, strings.Count(buf.String(), `class="intensity"`))
		})
	}
}

// A title longer than the room left of the legend is cut, not drawn
// past the canvas (it was one <text> wider than 960 px).
func TestRenderSVGCutsALongTitle(t *testing.T) {
	title := strings.Repeat("carbon timeline of run/mnist-green ", 6)
	var buf bytes.Buffer
	require.NoError(t, RenderSVG(&buf, Timeline{Series: series, Title: title, Lost: []Span{{at(1), at(2)}}}))
	_, texts := svgStats(t, buf.Bytes())
	i := slices.IndexFunc(texts, func(s string) bool { return strings.HasPrefix(s, "carbon timeline") })
	require.GreaterOrEqual(t, i, 0, "no title in %v", texts)
	cut := []rune(texts[i])
	assert.Equal(t, '…', cut[len(cut)-1])
	assert.Less(t, 64+7.8*float64(len(cut)), 960.0-16-150, "the cut title leaves the legend its room")
	assert.Contains(t, texts, "lost (trained again)")
	assert.Contains(t, buf.String(), "<title>"+title+"</title>", "the whole title on hover")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestRenderSVGErrors(t *testing.T) {
	tests := []struct {
		name    string
		tl      Timeline
		wantErr error
	}{
		{"no series", Timeline{}, carbon.ErrInvalidSeries},
		{"empty chunk", Timeline{Series: series, Chunks: []Span{{at(1), at(1)}}}, ErrInvalid},
		{"too small", Timeline{Series: series, Width: 50, Height: 50}, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, RenderSVG(io.Discard, tc.tl), tc.wantErr)
		})
	}
}
