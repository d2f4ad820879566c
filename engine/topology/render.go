package topology

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText renders the topology for a terminal: the hierarchy, the α–β
// parameters per level, the slow links, then the latency (µs) and bandwidth
// (GB/s, 10⁹ B/s) matrices, row = from, column = to. A pair measured in one
// direction only shows that value both ways; the diagonal is "-".
func (t *Topology) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	n := t.Ranks()
	fmt.Fprintf(bw, "topology: %d ranks on %d host(s)\n\nhierarchy:\n", n, len(t.Hosts))
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	for _, h := range t.Hosts {
		fmt.Fprintf(tw, "  %s\tranks %s\t(%d)\n", h.Host, ranges(h.Ranks), len(h.Ranks))
	}
	tw.Flush()

	fmt.Fprintf(bw, "\nlevels:\n")
	tw = tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  level\tlinks\talpha\tbandwidth\tbeta\n")
	for _, s := range t.Levels {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%.3g s/B\n", s.Level, s.Links, us(s.Alpha)+" µs", gbps(s.BytesPerSec)+" GB/s", s.Beta)
	}
	if len(t.Levels) == 0 {
		fmt.Fprintf(tw, "  (none: a single rank has no links)\n")
	}
	tw.Flush()

	fmt.Fprintf(bw, "\nslow links (bandwidth < %g× or latency > %g× the level median): %d\n",
		t.Options.SlowBandwidthFactor, t.Options.SlowLatencyFactor, len(t.Slow))
	tw = tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	for _, s := range t.Slow {
		var why []string
		if s.SlowBandwidth {
			why = append(why, fmt.Sprintf("bandwidth %.2f× median", s.BandwidthRatio))
		}
		if s.SlowLatency {
			why = append(why, fmt.Sprintf("latency %.1f× median", s.LatencyRatio))
		}
		fmt.Fprintf(tw, "  %d -> %d\t%s\t%s µs\t%s GB/s\t%s\n", s.From, s.To, s.Level, us(s.Latency), gbps(s.BytesPerSec), strings.Join(why, ", "))
	}
	tw.Flush()

	t.matrix(bw, "latency (µs)", func(l Link) string { return us(l.Latency) })
	t.matrix(bw, "bandwidth (GB/s)", func(l Link) string { return gbps(l.BytesPerSec) })
	return bw.Flush()
}

func (t *Topology) matrix(w io.Writer, title string, cell func(Link) string) {
	n := t.Ranks()
	fmt.Fprintf(w, "\n%s, row = from, column = to:\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for j := range n {
		fmt.Fprintf(tw, "%d\t", j)
	}
	fmt.Fprintln(tw)
	for i := range n {
		fmt.Fprintf(tw, "%d\t", i)
		for j := range n {
			v := "-"
			if l, ok := t.Measurement(i, j); ok && i != j {
				v = cell(l)
			}
			fmt.Fprintf(tw, "%s\t", v)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

func us(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) }
func gbps(b float64) string     { return strconv.FormatFloat(b/1e9, 'f', 2, 64) }

// ranges renders ascending ranks as "0-3,8,10-11".
func ranges(rs []int) string {
	var b strings.Builder
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j == i {
			fmt.Fprintf(&b, "%d", rs[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", rs[i], rs[j])
		}
		i = j + 1
	}
	return b.String()
}
