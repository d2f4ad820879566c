package strategy

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// calibrationCSV is the published-runs file, relative to this package:
// /work/shared/data/strategy/calibration.csv here, ../shared beside the
// repository root in CI.
const calibrationCSV = "../../../shared/data/strategy/calibration.csv"

// calRow is one measured run of calibration.csv with its model, cluster and
// plan rebuilt from the row's own columns.
type calRow struct {
	ID       string
	Group    string
	Model    Model
	Cluster  Cluster
	Plan     Plan
	Measured float64 // measured step time, s (0: none)
	Derived  float64 // step time derived from measured TFLOP/s, s (0: none)
	TFLOPS   float64 // measured TFLOP/s per device (0: none)
}

// clusterFor maps a CSV group to the preset describing its machine.
func clusterFor(group string) string {
	switch {
	case strings.HasPrefix(group, "vtrain"):
		return "vtrain_a100_64"
	case strings.HasPrefix(group, "megatron_sc21"):
		return "selene_a100_384"
	case strings.HasPrefix(group, "bloom"):
		return "jeanzay_a100_384"
	}
	return ""
}

// precisionFor is the training recipe of a group: the fp16 runs (vTrain's
// Megatron-DeepSpeed, SC21 Megatron and DeepSpeed ZeRO-3) keep fp16
// gradients and reduce them in fp16 (2+2+12 = 16 B/param); BLOOM trains in
// bf16 with fp32 gradient accumulation (2+4+12 = 18 B/param, the default).
func precisionFor(group string) Precision {
	if strings.HasPrefix(group, "bloom") {
		return Precision{}
	}
	return Precision{Param: 2, Grad: 2, Optimizer: 12}
}

// leadingInt reads "50257 (vTrain default)" as 50257.
func leadingInt(s string) (int, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, fmt.Errorf("empty")
	}
	return strconv.Atoi(f[0])
}

func loadCalibration(t testing.TB) []calRow {
	t.Helper()
	path, _ := filepath.Abs(calibrationCSV)
	f, err := os.Open(calibrationCSV)
	if err != nil {
		t.Fatalf("calibration data missing: %v\nThe acceptance tests need %s (the shared data folder beside the repository, "+
			"shared/data/strategy/calibration.csv); check out ../shared next to the repo root.", err, path)
	}
	defer f.Close()
	return readCalibration(t, f, path)
}

// readCalibration reads published runs in calibration.csv's columns.
func readCalibration(t testing.TB, f io.Reader, path string) []calRow {
	t.Helper()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if len(recs) < 2 {
		t.Fatalf("%s: no rows", path)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for _, need := range []string{"row_id", "group", "model", "n_layers", "hidden", "ffn_hidden", "n_heads", "n_kv_heads", "vocab",
		"seq_len", "global_batch_seqs", "micro_batch", "tp", "pp", "dp", "cp", "ep", "vpp", "seq_parallel", "recompute",
		"optimizer_sharding", "n_devices", "devices_per_node", "measured_step_time_s", "measured_tflops_per_device", "derived_step_time_s"} {
		if _, ok := col[need]; !ok {
			t.Fatalf("%s: column %q missing", path, need)
		}
	}
	var rows []calRow
	for _, r := range recs[1:] {
		get := func(k string) string { // "" for a column the file lacks
			i, ok := col[k]
			if !ok || i >= len(r) {
				return ""
			}
			return strings.TrimSpace(r[i])
		}
		num := func(k string, def int) int {
			s := get(k)
			v, err := leadingInt(s)
			if err != nil {
				if def >= 0 {
					return def
				}
				t.Fatalf("row %s: %s=%q: %v", get("row_id"), k, s, err)
			}
			return v
		}
		flt := func(k string) float64 {
			v, err := strconv.ParseFloat(get(k), 64)
			if err != nil {
				return 0
			}
			return v
		}
		row := calRow{ID: get("row_id"), Group: get("group"), Measured: flt("measured_step_time_s"),
			Derived: flt("derived_step_time_s"), TFLOPS: flt("measured_tflops_per_device")}
		gated, flash, noDropout := rowModelKind(get("model"), get("notes")+" "+get("source"))
		row.Model = Model{
			Name: get("model"), Layers: num("n_layers", -1), Hidden: num("hidden", -1), FFNHidden: num("ffn_hidden", -1),
			Heads: num("n_heads", -1), KVHeads: num("n_kv_heads", -1), Vocab: num("vocab", -1), SeqLen: num("seq_len", -1),
			GlobalBatch: num("global_batch_seqs", -1), Experts: num("moe_experts", 0), TopK: num("moe_topk", 0),
			GatedMLP: gated, FlashAttention: flash, NoDropout: noDropout, Precision: precisionFor(get("group")),
		}.WithDefaults()
		var c Cluster
		if cname := clusterFor(row.Group); cname != "" {
			var err error
			if c, err = PresetCluster(cname); err != nil {
				t.Fatalf("row %s: %v", row.ID, err)
			}
			c.Name = cname
		} else { // a source without a preset: the row's own columns
			d, err := rowDevice(get("device"), flt("device_peak_tflops_16bit"), flt("device_mem_GB"))
			if err != nil {
				t.Fatalf("row %s: %v", row.ID, err)
			}
			c = Cluster{Name: row.Group, Device: d}
			c.IntraNodeGBps, c.IntraNodeEfficiency = rowIntraGBps(get("intra_node_link"), get("device"))
			c.InterNodeGBps, c.InterNodeEfficiency = rowInterGBps(get("inter_node_link"), num("devices_per_node", -1))
		}
		c.DevicesPerNode = num("devices_per_node", -1)
		c.Nodes = num("n_devices", -1) / c.DevicesPerNode
		c.Name = fmt.Sprintf("%s-%d", c.Name, c.Devices())
		row.Cluster = c.WithDefaults()
		rec := strings.ToLower(get("recompute"))
		p := Plan{TP: num("tp", -1), PP: num("pp", -1), DP: num("dp", -1), CP: num("cp", 1), EP: num("ep", 1),
			MicroBatch: num("micro_batch", -1), VPP: num("vpp", 1), SP: strings.HasPrefix(strings.ToLower(get("seq_parallel")), "y")}
		switch {
		case strings.HasPrefix(rec, "full"):
			p.Recompute = RecomputeFull
		case strings.HasPrefix(rec, "selective"):
			p.Recompute = RecomputeSelective
		default:
			p.Recompute = RecomputeNone
		}
		p.ZeRO = rowZeRO(get("optimizer_sharding"))
		row.Plan = p
		rows = append(rows, row)
	}
	return rows
}

// spearman is the rank correlation of x and y (average ranks for ties).
func spearman(x, y []float64) float64 {
	rx, ry := ranks(x), ranks(y)
	var mx, my float64
	for i := range rx {
		mx += rx[i]
		my += ry[i]
	}
	mx /= float64(len(rx))
	my /= float64(len(ry))
	var sxy, sxx, syy float64
	for i := range rx {
		sxy += (rx[i] - mx) * (ry[i] - my)
		sxx += (rx[i] - mx) * (rx[i] - mx)
		syy += (ry[i] - my) * (ry[i] - my)
	}
	return sxy / math.Sqrt(sxx*syy)
}

func ranks(v []float64) []float64 {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return v[idx[a]] < v[idx[b]] })
	r := make([]float64, len(v))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && v[idx[j+1]] == v[idx[i]] {
			j++
		}
		for k := i; k <= j; k++ {
			r[idx[k]] = float64(i+j)/2 + 1
		}
		i = j + 1
	}
	return r
}

func TestSpearman(t *testing.T) {
	tests := []struct {
		x, y []float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, []float64{10, 20, 30, 40}, 1},
		{[]float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}, -1},
		{[]float64{1, 2, 3, 4, 5}, []float64{2, 1, 4, 3, 5}, 0.8},
	}
	for _, tc := range tests {
		if got := spearman(tc.x, tc.y); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("spearman(%v, %v) = %g, want %g", tc.x, tc.y, got, tc.want)
		}
	}
}

// TestCalibration is the acceptance test against published measurements.
// Convention: predictions are step times; measured TFLOP/s rows are
// compared through their step time derived with Narayanan eq. 3.
func TestCalibration(t *testing.T) {
	rows := loadCalibration(t)
	if len(rows) < 40 {
		t.Fatalf("calibration.csv has %d rows, want the 48 published runs", len(rows))
	}
	var sumErr, maxErr float64
	var nMeasured int
	var sumDerived float64
	var nDerived int
	groups := map[string][]int{}
	preds := make([]Estimate, len(rows))
	for i, r := range rows {
		e := Evaluate(r.Model, r.Cluster, r.Plan)
		preds[i] = e
		if !e.Feasible {
			t.Errorf("row %s (%s %s): predicted infeasible: %s", r.ID, r.Model.Name, r.Plan, e.Reason)
			continue
		}
		ref := r.Measured
		kind := "measured"
		if ref == 0 {
			ref, kind = r.Derived, "derived"
		}
		rel := (e.StepTimeS - ref) / ref
		t.Logf("row %-3s %-11s t=%-2d p=%-2d d=%-4d b=%-2d m=%-3d z=%d  %s %8.3f  pred %8.3f  err %+6.1f%%  mem %5.1f GiB  tp %.2f pp %.2f dp %.2f bub %.2f",
			r.ID, r.Model.Name, r.Plan.TP, r.Plan.PP, r.Plan.DP, r.Plan.MicroBatch, e.Microbatches, r.Plan.ZeRO, kind, ref, e.StepTimeS, 100*rel,
			e.MemPerDeviceGiB, e.Time.TPCommS, e.Time.PPCommS, e.Time.DPCommS, e.Time.BubbleS)
		if r.Measured > 0 {
			sumErr += math.Abs(rel)
			maxErr = math.Max(maxErr, math.Abs(rel))
			nMeasured++
		} else if r.Derived > 0 {
			sumDerived += math.Abs(rel)
			nDerived++
		}
		if strings.HasPrefix(r.Group, "vtrain") && r.Measured > 0 {
			groups[r.Model.Name] = append(groups[r.Model.Name], i)
		}
	}
	mape := sumErr / float64(nMeasured)
	t.Logf("step time: MAPE %.2f%% over %d rows with measured times (max %.1f%%); %.2f%% over %d rows derived from measured TFLOP/s",
		100*mape, nMeasured, 100*maxErr, 100*sumDerived/float64(max(nDerived, 1)), nDerived)
	if nMeasured < 40 {
		t.Errorf("only %d rows with measured step times", nMeasured)
	}
	if mape > 0.10 {
		t.Errorf("mean absolute step-time error %.2f%% > 10%%", 100*mape)
	}
	if len(groups) < 2 {
		t.Errorf("found %d vTrain model groups, want 2", len(groups))
	}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		idx := groups[g]
		meas, pred := make([]float64, len(idx)), make([]float64, len(idx))
		best := idx[0]
		for k, i := range idx {
			meas[k], pred[k] = rows[i].Measured, preds[i].StepTimeS
			if rows[i].Measured < rows[best].Measured {
				best = i
			}
		}
		rho := spearman(meas, pred)
		// Rank of the measured best among the group's configurations, by
		// predicted step time.
		rank := 1
		bestPred := math.Inf(1)
		for _, i := range idx {
			if preds[i].StepTimeS < preds[best].StepTimeS {
				rank++
			}
			bestPred = math.Min(bestPred, preds[i].StepTimeS)
		}
		t.Logf("%s: %d configs, Spearman rho %.3f, measured best row %s (%s) ranks #%d by prediction (%.1f%% above predicted best)",
			g, len(idx), rho, rows[best].ID, rows[best].Plan, rank, 100*(preds[best].StepTimeS/bestPred-1))
		if rho < rhoFloor {
			t.Errorf("%s: Spearman rho %.3f < %.2f", g, rho, rhoFloor)
		}
		if rank > 3 && preds[best].StepTimeS > bestSlack*bestPred {
			t.Errorf("%s: measured best config ranks #%d and is %.1f%% slower than the predicted best", g, rank, 100*(preds[best].StepTimeS/bestPred-1))
		}
		// The planner's own search over the same space must not rank the
		// measured best far behind its choice.
		r0 := rows[best]
		res, err := Search(context.Background(), r0.Model, r0.Cluster, SearchOptions{TopK: 3, Recompute: []Recompute{RecomputeFull}, ZeRO: []int{0}, MaxVPP: 1, MaxCP: 1, NoSP: true})
		if err != nil || len(res) == 0 {
			t.Fatalf("%s: search: %v (%d results)", g, err, len(res))
		}
		t.Logf("%s: planner's best %s predicted %.3f s; measured best predicted %.3f s (%.1f%% above)",
			g, res[0].Config, res[0].StepTimeS, preds[best].StepTimeS, 100*(preds[best].StepTimeS/res[0].StepTimeS-1))
	}
}
