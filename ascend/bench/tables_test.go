package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/cann-train/cann-train/ascend"
)

// TestTypedReductionsHaveNoForcedTable: double and int32 reductions
// (allreduce, reduce, reducescatter) run gather or shares whatever
// algorithm is forced, so a forced algorithm gets no table there — a line
// says why where its table would be — while the typed collectives that
// move words (allgather, broadcast) run it and keep theirs. Every table's
// heading names what its rows ran. Asked only of collectives where it
// would not run, the algorithm is refused up front.
func TestTypedReductionsHaveNoForcedTable(t *testing.T) {
	for _, dtype := range []string{DTypeDouble, DTypeInt32} {
		t.Run(dtype, func(t *testing.T) {
			opts := small()
			opts.DType = dtype
			opts.Collectives = []ascend.Collective{ascend.CollAllReduce, ascend.CollReduceScatter, ascend.CollAllGather, ascend.CollReduce, ascend.CollBroadcast}
			opts.Algorithms = []ascend.Algorithm{ascend.AlgoRing, ascend.AlgoAuto}
			out, reps := runInProcess(t, 2, opts)
			if t.Failed() {
				return
			}
			rep := reps[0]
			var tables []string
			for _, tb := range rep.Tables {
				tables = append(tables, tb.Collective+"/"+tb.Algorithm)
				for _, r := range tb.Rows {
					if ran := r.Algorithm; tb.Algorithm != "auto" && r.Size > 0 && ran != tb.Algorithm && ran != tb.RunsAs {
						t.Errorf("%s, algorithm %s (runs as %q): size %d ran %s", tb.Collective, tb.Algorithm, tb.RunsAs, r.Size, ran)
					}
				}
			}
			want := []string{"allreduce/auto", "reducescatter/auto", "allgather/ring", "allgather/auto", "reduce/auto", "broadcast/ring", "broadcast/auto"}
			if !reflect.DeepEqual(tables, want) {
				t.Errorf("tables %q, want %q", tables, want)
			}
			var skipped []string
			for _, sk := range rep.Skipped {
				skipped = append(skipped, sk.Collective+"/"+sk.Algorithm)
				if sk.MeasuredAs != "" || !strings.Contains(sk.Reason, dtype+" reductions run gather or shares whatever algorithm is forced") {
					t.Errorf("%s/%s skipped: measured as %q, %q", sk.Collective, sk.Algorithm, sk.MeasuredAs, sk.Reason)
				}
			}
			if want := []string{"allreduce/ring", "reducescatter/ring", "reduce/ring"}; !reflect.DeepEqual(skipped, want) {
				t.Errorf("skipped %q, want %q", skipped, want)
			}
			line := "# allreduce, algorithm ring: " + dtype + " reductions run gather or shares whatever algorithm is forced: no table of ring (algorithm auto measures them)"
			if !strings.Contains(out, line+"\n#\n# allreduce, algorithm auto\n") {
				t.Errorf("no line %q before allreduce's auto table:\n%s", line, out)
			}
		})
	}
	for _, tc := range []struct {
		o    Options
		want string // "": accepted
	}{
		{Options{DType: DTypeDouble, Algorithms: []ascend.Algorithm{ascend.AlgoRing}},
			"--algo ring with -d double: allreduce of double runs gather or shares whatever algorithm is forced, so no table would measure ring: use --algo auto, or -d float"},
		{Options{DType: "int", Collectives: []ascend.Collective{ascend.CollReduce, ascend.CollReduceScatter}, Algorithms: []ascend.Algorithm{ascend.AlgoAuto, ascend.AlgoRing}},
			"--algo ring with -d int32: reduce and reducescatter of int32 run gather or shares"},
		{Options{DType: DTypeDouble, Algorithms: []ascend.Algorithm{ascend.AlgoPairwise}}, "--algo pairwise implements none of the collectives asked for"},
		{Options{DType: DTypeDouble, Algorithms: []ascend.Algorithm{ascend.AlgoAuto}}, ""},
		{Options{DType: DTypeDouble, Collectives: []ascend.Collective{ascend.CollAllReduce, ascend.CollAllGather}, Algorithms: []ascend.Algorithm{ascend.AlgoRing}}, ""},
		{Options{Algorithms: []ascend.Algorithm{ascend.AlgoRing}}, ""},
	} {
		err := tc.o.checkRange()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("-d %q --coll %v --algo %v: %v, want %q", tc.o.DType, tc.o.Collectives, tc.o.Algorithms, err, tc.want)
		}
	}
}

// TestLimitForRow: a row's busbw is compared with the limit measured at
// the transfer size nearest its own (in ratio; the smaller of two as
// near), of the kind its links have: over TCP the duplex rate per end for
// 2 ranks (one-way for broadcast and reduce) and a ring of as many ends
// beyond; over shared memory (the links, or the direct algorithm) memcpy,
// per end beyond 2 ranks. No limits, one rank, ranks on several hosts or
// an empty row: none.
func TestLimitForRow(t *testing.T) {
	ls := []Limits{
		{Bytes: 1 << 20, TCPOneWay: 11, TCPDuplex: 12, Memcpy: 13, Ends: 4, TCPRing: 14, MemcpyEach: 15},
		{Bytes: 4 << 20, TCPOneWay: 21, TCPDuplex: 22, Memcpy: 23, Ends: 4, TCPRing: 24, MemcpyEach: 25},
		{Bytes: 16 << 20, TCPOneWay: 31, TCPDuplex: 32, Memcpy: 33, Ends: 4, TCPRing: 34, MemcpyEach: 35},
	}
	rep := func(ranks, hosts int, memory bool, limits []Limits) *Report {
		return &Report{Ranks: ranks, Limits: limits, Model: ascend.CostModel{Hosts: hosts, MemoryLinks: memory}}
	}
	for _, tc := range []struct {
		name string
		rep  *Report
		coll ascend.Collective
		size int64
		algo string
		want *RowLimit // nil: none
	}{
		{"tcp 2 ranks", rep(2, 1, false, ls), ascend.CollAllReduce, 4 << 20, "ring", &RowLimit{"tcp_duplex", 4 << 20, 22}},
		{"small rows: the smallest", rep(2, 1, false, ls), ascend.CollAllReduce, 8, "rd", &RowLimit{"tcp_duplex", 1 << 20, 12}},
		{"large rows: the largest", rep(2, 0, false, ls), ascend.CollAllGather, 256 << 20, "ring", &RowLimit{"tcp_duplex", 16 << 20, 32}},
		{"halfway: the smaller", rep(2, 1, false, ls), ascend.CollAllReduce, 2 << 20, "ring", &RowLimit{"tcp_duplex", 1 << 20, 12}},
		{"nearer the larger", rep(2, 1, false, ls), ascend.CollAllReduce, 12 << 20, "ring", &RowLimit{"tcp_duplex", 16 << 20, 32}},
		{"tcp broadcast", rep(2, 1, false, ls), ascend.CollBroadcast, 4 << 20, "ring", &RowLimit{"tcp_oneway", 4 << 20, 21}},
		{"tcp reduce", rep(2, 1, false, ls), ascend.CollReduce, 4 << 20, "tree", &RowLimit{"tcp_oneway", 4 << 20, 21}},
		{"tcp 4 ranks", rep(4, 1, false, ls), ascend.CollBroadcast, 4 << 20, "ring", &RowLimit{"tcp_ring", 4 << 20, 24}},
		{"shm 2 ranks", rep(2, 1, true, ls), ascend.CollBroadcast, 4 << 20, "ring", &RowLimit{"memcpy", 4 << 20, 23}},
		{"shm 4 ranks", rep(4, 1, true, ls), ascend.CollAllReduce, 4 << 20, "ring", &RowLimit{"memcpy_each", 4 << 20, 25}},
		{"direct", rep(2, 1, false, ls), ascend.CollAllReduce, 4 << 20, "direct", &RowLimit{"memcpy", 4 << 20, 23}},
		{"empty row", rep(2, 1, false, ls), ascend.CollAllReduce, 0, "ring", nil},
		{"no limits (--limits 0, ranks but 0)", rep(2, 1, false, nil), ascend.CollAllReduce, 4 << 20, "ring", nil},
		{"one rank", rep(1, 1, false, ls), ascend.CollAllReduce, 4 << 20, "ring", nil},
		{"several hosts", rep(4, 2, false, ls), ascend.CollAllReduce, 4 << 20, "ring", nil},
	} {
		if got := newLimiter(tc.rep).forRow(tc.coll, tc.size, tc.algo); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// A figure a run did not measure (no ring with 2 ranks): none.
	if got := newLimiter(rep(4, 1, false, []Limits{{Bytes: 1 << 20, TCPDuplex: 1}})).forRow(ascend.CollAllReduce, 1<<20, "ring"); got != nil {
		t.Errorf("ring not measured: %+v", got)
	}
}

// TestBusBWOfLimit: with limits measured, every row of more than 0 bytes
// carries its limit and each placement its busbw as a percentage of it
// (in -o json: limit, bus_bw_pct_of_limit), and each table's footer
// gives the best of them under nccl-tests' lines, the rows' columns left
// as they were; without limits there are neither.
func TestBusBWOfLimit(t *testing.T) {
	opts := small()
	opts.SkipLimits = false
	opts.Collectives = []ascend.Collective{ascend.CollAllReduce, ascend.CollBroadcast}
	out, reps := runInProcess(t, 2, opts)
	if t.Failed() {
		return
	}
	rep := reps[0]
	if len(rep.Limits) == 0 {
		t.Fatal("no limits measured")
	}
	figures := map[string]float64{"tcp_oneway": rep.Limits[0].TCPOneWay, "tcp_duplex": rep.Limits[0].TCPDuplex, "memcpy": rep.Limits[0].Memcpy}
	for _, tb := range rep.Tables {
		for _, r := range tb.Rows {
			if r.Size == 0 {
				continue
			}
			if r.Limit == nil || r.Limit.Bytes != rep.Limits[0].Bytes || r.Limit.GBps != figures[r.Limit.Name] {
				t.Errorf("%s %d B: limit %+v, want one of %v at %d B", tb.Collective, r.Size, r.Limit, figures, rep.Limits[0].Bytes)
				continue
			}
			for _, res := range []*Result{r.OutOfPlace, r.InPlace} {
				if res.BusBWOfLimit == nil || math.Abs(*res.BusBWOfLimit-100*res.BusBW/r.Limit.GBps) > 1e-9 {
					t.Errorf("%s %d B: %v%% of the limit, want 100 × %v / %v", tb.Collective, r.Size, res.BusBWOfLimit, res.BusBW, r.Limit.GBps)
				}
			}
		}
		row, res, ok := bestOfLimit(&tb)
		if !ok {
			t.Errorf("%s: no best row", tb.Collective)
			continue
		}
		place := "out-of-place"
		if res == row.InPlace {
			place = "in-place"
		}
		line := "# Avg bus bandwidth    : "
		if i := strings.Index(out, "# "+tb.Collective+", algorithm"); i < 0 || !strings.Contains(out[i:], line) {
			t.Fatalf("%s: no footer:\n%s", tb.Collective, out)
		}
		want := "\n# Best busbw of limit  : " + pctStr(*res.BusBWOfLimit) + " ("
		if !strings.Contains(out, want) || !strings.Contains(out, FormatSize(row.Size)+", "+place+"; limit: ") {
			t.Errorf("%s: no line %q…(%s, %s; limit: …):\n%s", tb.Collective, want, FormatSize(row.Size), place, out)
		}
	}
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(line, "#") && (len(f) != 14 || f[13] == "" || strings.ContainsAny(f[13], "%0123456789")) {
			t.Errorf("row not nccl-tests' 13 columns and the algorithm: %q", line)
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Version int `json:"version"`
		Tables  []struct {
			Results []map[string]any `json:"results"`
		} `json:"tables"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	r := doc.Tables[0].Results[len(doc.Tables[0].Results)-1]
	if doc.Version != 2 || r["limit"] == nil || r["out_of_place"].(map[string]any)["bus_bw_pct_of_limit"] == nil {
		t.Errorf("JSON version %d, row %v: want version 2 with limit and bus_bw_pct_of_limit", doc.Version, r)
	}

	opts.SkipLimits = true
	out, reps = runInProcess(t, 2, opts)
	js.Reset()
	if err := reps[0].WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "of limit") || strings.Contains(js.String(), `"limit"`) || strings.Contains(js.String(), "of_limit") {
		t.Errorf("--limits 0: a comparison with no limit:\n%s\n%s", out, js.String())
	}
}
