package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cann-train/cann-train/ascend"
)

// WriteTable prints the report as nccl-tests does: a header, one table
// per collective and algorithm with out-of-place and in-place columns
// (plus the algorithm that ran, appended as a last column), and the
// "Avg bus bandwidth" footer (the mean busbw over every size of more than
// 0 bytes and placement), with a line where a table was skipped. It is
// what RunRank prints as it goes. (A report read back from JSON, which
// does not keep where they stood, has its skipped lines first.)
func (rep *Report) WriteTable(w io.Writer) error {
	tw := newTableWriter(w)
	if err := tw.header(rep); err != nil {
		return err
	}
	skipped := func(at int) error { // the lines for the tables skipped here
		for _, sk := range rep.Skipped {
			if sk.at == at {
				if err := tw.skipped(sk); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for i := range rep.Tables {
		if err := skipped(i); err != nil {
			return err
		}
		t := &rep.Tables[i]
		if err := tw.tableStart(t); err != nil {
			return err
		}
		for _, r := range t.Rows {
			if err := tw.row(r); err != nil {
				return err
			}
		}
		if err := tw.tableEnd(t); err != nil {
			return err
		}
	}
	if err := skipped(len(rep.Tables)); err != nil {
		return err
	}
	return tw.footer(rep)
}

// tableWriter prints a report's table in pieces, each written through
// at once: the header, a table's heading, a row, a table's footer, the
// report's footer. A nil *tableWriter prints nothing.
type tableWriter struct {
	bw    *bufio.Writer
	rep   *Report // from header on
	table *Table  // from tableStart on
}

func newTableWriter(w io.Writer) *tableWriter { return &tableWriter{bw: bufio.NewWriter(w)} }

// header is the lines before the first table: the options, the cost
// model, the limits measured before the sweep.
func (tw *tableWriter) header(rep *Report) error {
	if tw == nil {
		return nil
	}
	tw.rep = rep
	bw, o := tw.bw, rep.Options
	dtype := o.DType
	if dtype == DTypeFloat {
		dtype = "float32"
	}
	fmt.Fprintf(bw, "# ascend collective benchmark: %d ranks (GOMAXPROCS %d), %s, sizes %s..%s ", rep.Ranks, rep.GOMAXPROCS, dtype, FormatSize(o.MinBytes), FormatSize(o.MaxBytes))
	if o.StepBytes > 0 {
		fmt.Fprintf(bw, "+%s", FormatSize(o.StepBytes))
	} else {
		fmt.Fprintf(bw, "×%d", o.StepFactor)
	}
	iters := fmt.Sprintf("%d", o.Iters)
	if o.Iters == 0 {
		iters = fmt.Sprintf("auto (%v per size, agreed from rank 0's median warm-up)", o.TargetTime)
	}
	check := "on"
	if o.SkipCheck {
		check = "off"
	}
	fmt.Fprintf(bw, ", warm-up %d, iterations %s, check %s\n", o.Warmup, iters, check)
	if o.SharedMemory {
		fmt.Fprintf(bw, "# links: shared memory where ranks share a host (else TCP)\n")
	}
	if o.SharedBuffers {
		fmt.Fprintf(bw, "# buffers: shared memory, read directly by the ranks of a host (-R 1)\n")
	}
	if o.Touch {
		fmt.Fprintf(bw, "# touch: every call's input rewritten just before it and its output read just after it, both in the time (--touch 1)\n")
	}
	fmt.Fprintf(bw, "# cost model: %s\n", rep.CostModel)
	if len(rep.Limits) > 0 && rep.Limits[0].Bytes > o.MaxBytes {
		fmt.Fprintf(bw, "# limits measured at %s transfers, above the sweep's -e %s: smaller ones time the latency of a message, not a limit\n",
			FormatSize(rep.Limits[0].Bytes), FormatSize(o.MaxBytes))
	}
	writeLimits(bw, "before", rep.Limits)
	return bw.Flush()
}

func (tw *tableWriter) tableStart(t *Table) error {
	if tw == nil {
		return nil
	}
	tw.table = t
	bw := tw.bw
	runs := ""
	if t.RunsAs != "" {
		runs = fmt.Sprintf(" (runs %s on shared buffers: same bits)", t.RunsAs)
	}
	fmt.Fprintf(bw, "#\n# %s, algorithm %s%s\n#\n", t.Collective, t.Algorithm, runs)
	fmt.Fprintf(bw, "# %10s  %12s  %8s  %6s  %6s           out-of-place                        in-place\n", "", "", "", "", "")
	fmt.Fprintf(bw, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %s\n",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "algo")
	fmt.Fprintf(bw, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
	return bw.Flush()
}

// minSize is the least size of a row of collective cd on p ranks with
// elements of es bytes that is not empty: one element, or one per rank.
func minSize(cd collective, p, es int) int64 {
	for _, size := range []int64{int64(es), int64(es * p)} {
		if n, _, _, _ := cd.shape(size, p, es); n > 0 {
			return size
		}
	}
	return int64(es * p)
}

func (tw *tableWriter) row(r Row) error {
	if tw == nil {
		return nil
	}
	bw := tw.bw
	if r.Size == 0 {
		least := "one element"
		if c, err := ascend.ParseCollective(tw.table.Collective); err == nil {
			least = fmt.Sprintf("%d B", minSize(collectives[c], tw.rep.Ranks, tw.rep.Options.elemBytes()))
		}
		fmt.Fprintf(bw, "# sizes below %s round down to 0 %s elements: nothing to move, left out of the average\n", least, r.Type)
	}
	fmt.Fprintf(bw, "%12d  %12d  %8s  %6s  %6d", r.Size, r.Count, r.Type, r.RedOp, r.Root)
	for _, res := range []*Result{r.OutOfPlace, r.InPlace} {
		if res == nil {
			fmt.Fprintf(bw, "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A")
			continue
		}
		nw := "N/A"
		if res.NWrong >= 0 {
			nw = fmt.Sprintf("%d", res.NWrong)
		}
		fmt.Fprintf(bw, "  %7s  %6s  %6s  %6s", floatStr(res.Time, 7), floatStr(res.AlgBW, 6), floatStr(res.BusBW, 6), nw)
	}
	fmt.Fprintf(bw, "  %s\n", r.Algorithm)
	return bw.Flush()
}

func (tw *tableWriter) tableEnd(t *Table) error {
	if tw == nil {
		return nil
	}
	switch {
	case t.Wrong < 0:
		fmt.Fprintf(tw.bw, "# Wrong values         : not checked (-c 0)\n")
	case t.Wrong > 0:
		fmt.Fprintf(tw.bw, "# Wrong values         : %d FAILED\n", t.Wrong)
	default:
		fmt.Fprintf(tw.bw, "# Wrong values         : 0 OK\n")
	}
	avg := "N/A" // no row of more than 0 bytes
	if slices.ContainsFunc(t.Rows, func(r Row) bool { return r.Size > 0 }) {
		avg = fmt.Sprintf("%g", round3(t.AvgBusBW))
	}
	// nccl-tests' line, with the unit after the figure (nccl-tests gives
	// none): the figure stays its sixth field.
	unit := ""
	if avg != "N/A" {
		unit = " GB/s"
	}
	fmt.Fprintf(tw.bw, "# Avg bus bandwidth    : %s%s\n", avg, unit)
	if row, res, ok := bestOfLimit(t); ok {
		place := "out-of-place"
		if res == row.InPlace {
			place = "in-place"
		}
		// The limit in the words of the header's limits line.
		name, ok := map[string]string{"tcp_oneway": "loopback TCP one-way", "tcp_duplex": "loopback TCP duplex", "tcp_ring": "loopback TCP ring",
			"memcpy": "memcpy", "memcpy_each": "memcpy"}[row.Limit.Name]
		if !ok {
			name = row.Limit.Name
		}
		per := ""
		if row.Limit.Name != "tcp_oneway" && row.Limit.Name != "memcpy" {
			per = " per end"
		}
		fmt.Fprintf(tw.bw, "# Best busbw of limit  : %s (%.2f GB/s at %s, %s; limit: %s %.2f GB/s%s, at %s transfers)\n",
			pctStr(*res.BusBWOfLimit), res.BusBW, FormatSize(row.Size), place, name, row.Limit.GBps, per, FormatSize(row.Limit.Bytes))
	}
	return tw.bw.Flush()
}

// bestOfLimit is the row and placement of t whose busbw comes nearest
// its limit (the highest percentage), if any row has a limit.
func bestOfLimit(t *Table) (row *Row, res *Result, ok bool) {
	for i := range t.Rows {
		r := &t.Rows[i]
		for _, x := range []*Result{r.OutOfPlace, r.InPlace} {
			if r.Size > 0 && r.Limit != nil && x != nil && x.BusBWOfLimit != nil && (res == nil || *x.BusBWOfLimit > *res.BusBWOfLimit) {
				row, res = r, x
			}
		}
	}
	return row, res, res != nil
}

// pctStr prints a percentage: whole numbers from 10%, two significant
// digits below.
func pctStr(v float64) string {
	if v >= 10 {
		return fmt.Sprintf("%.0f%%", v)
	}
	return strconv.FormatFloat(v, 'g', 2, 64) + "%"
}

// skipped is the line that stands for a table measured elsewhere.
func (tw *tableWriter) skipped(sk Skipped) error {
	if tw == nil {
		return nil
	}
	fmt.Fprintf(tw.bw, "#\n# %s, algorithm %s: %s\n", sk.Collective, sk.Algorithm, sk.Reason)
	return tw.bw.Flush()
}

// footer is the lines after the last table: the limits measured after
// the sweep, and the wrong values over all tables.
func (tw *tableWriter) footer(rep *Report) error {
	if tw == nil {
		return nil
	}
	fmt.Fprintf(tw.bw, "#\n")
	writeLimits(tw.bw, "after", rep.LimitsAfter)
	var wrong int64
	for _, t := range rep.Tables {
		wrong += max(t.Wrong, 0)
	}
	if wrong > 0 {
		fmt.Fprintf(tw.bw, "# %d wrong values\n", wrong)
	}
	return tw.bw.Flush()
}

func writeLimits(w io.Writer, when string, ls []Limits) {
	for _, l := range ls {
		fmt.Fprintf(w, "# limits %s, %s transfers: loopback TCP one-way %.2f GB/s, duplex %.2f GB/s per end; memcpy %.2f GB/s",
			when, FormatSize(l.Bytes), l.TCPOneWay, l.TCPDuplex, l.Memcpy)
		if l.Ends > 2 {
			fmt.Fprintf(w, "; %d ends at once: TCP ring %.2f GB/s, memcpy %.2f GB/s per end", l.Ends, l.TCPRing, l.MemcpyEach)
		}
		fmt.Fprintln(w)
	}
}

// JSONVersion is the version of WriteJSON's document. 2: times in µs
// under names that say so (time_us, target_time_us, spin_us; 1 had time
// in µs and target_time and spin in ns), cost_model_params, runs_as,
// skipped_tables and units. Later additions to 2, each a new key a reader
// of 2 may ignore: a row's limit {name, bytes, gbps} and each placement's
// bus_bw_pct_of_limit (where limits were measured), a skipped table's
// measured_as left out where no table measures its calls.
const JSONVersion = 2

// WriteJSON writes the report as one JSON object (keys after nccl-tests'
// table where they overlap: size, count, type, redop, root,
// out_of_place/in_place {time_us, alg_bw, bus_bw, nwrong}). Every time is
// in µs and every bandwidth in GB/s (1 GB = 1e9 B), as its "units" says.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Version int               `json:"version"`
		Units   map[string]string `json:"units"`
		*Report
	}{JSONVersion, map[string]string{"time": "us", "bandwidth": "GB/s (1 GB = 1e9 B)", "size": "bytes"}, rep})
}

// MarshalJSON names collectives and algorithms instead of numbering them,
// and gives durations in microseconds (target_time_us, spin_us), the unit
// of every time in the report.
func (o Options) MarshalJSON() ([]byte, error) {
	type plain Options
	var colls, algos []string
	for _, c := range o.Collectives {
		colls = append(colls, c.String())
	}
	for _, a := range o.Algorithms {
		algos = append(algos, a.String())
	}
	return json.Marshal(struct {
		plain
		Collectives  []string `json:"collectives,omitempty"`
		Algorithms   []string `json:"algorithms,omitempty"`
		Op           string   `json:"op"`
		TargetTimeUs float64  `json:"target_time_us,omitempty"`
		SpinUs       float64  `json:"spin_us,omitempty"`
	}{plain(o), colls, algos, o.Op.String(), us(o.TargetTime), us(o.Spin)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (o *Options) UnmarshalJSON(b []byte) error {
	type plain Options
	aux := struct {
		*plain
		Collectives  []string `json:"collectives,omitempty"`
		Algorithms   []string `json:"algorithms,omitempty"`
		Op           string   `json:"op"`
		TargetTimeUs float64  `json:"target_time_us,omitempty"`
		SpinUs       float64  `json:"spin_us,omitempty"`
	}{plain: (*plain)(o)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	o.Collectives, o.Algorithms = nil, nil
	o.TargetTime, o.Spin = fromUs(aux.TargetTimeUs), fromUs(aux.SpinUs)
	if len(aux.Collectives) > 0 {
		cs, err := parseCollectives(strings.Join(aux.Collectives, ","))
		if err != nil {
			return err
		}
		o.Collectives = cs
	}
	if len(aux.Algorithms) > 0 {
		if err := (listFlag[ascend.Algorithm]{p: &o.Algorithms, parse: ascend.ParseAlgorithm}).Set(strings.Join(aux.Algorithms, ",")); err != nil {
			return err
		}
	}
	if aux.Op != "" {
		return opFlag{p: &o.Op}.Set(aux.Op)
	}
	return nil
}

// us is d in microseconds; fromUs reads it back (to the nanosecond).
func us(d time.Duration) float64 { return float64(d) / 1e3 }

func fromUs(v float64) time.Duration { return time.Duration(math.Round(v * 1e3)) }

// floatStr formats v in width columns like nccl-tests' getFloatStr: two
// decimals while they fit, then fewer, then exponent notation.
func floatStr(v float64, width int) string {
	power := 0
	for x := 1.0; v >= x; x *= 10 {
		power++
	}
	switch {
	case power < width-2:
		return fmt.Sprintf("%*.2f", width, v)
	case power < width-1:
		return fmt.Sprintf("%*.1f", width, v)
	case power < width+1:
		return fmt.Sprintf("%*.0f", width, v)
	}
	return fmt.Sprintf("%*.1e", width, v)
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
