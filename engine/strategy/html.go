package strategy

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
)

// Report is what WriteHTML renders: the ranked estimates of one model on
// one cluster.
type Report struct {
	// Title heads the page; empty means "Parallel strategies: <model> on
	// <cluster>".
	Title     string
	Model     Model
	Cluster   Cluster
	Estimates []Estimate // in rank order, best first
	// Space says what the search covered (SearchOptions.Describe); empty
	// for a default search or a single evaluated plan.
	Space string
	// Evaluated marks the estimates of plans the user gave (cann-train
	// search --evaluate), not a search's ranking: the page heads them
	// "Plan evaluated" and marks none best.
	Evaluated bool
	// Error, when set, is why the search found no plan: the page says so
	// in place of the table (a report asked for is never an empty file).
	Error string
}

// WriteHTML writes r as one self-contained HTML page (inline CSS, no
// scripts, no external assets): the model and cluster, then one table row
// per estimate with its predicted step time, throughput, TFLOP/s and MFU
// per device, memory per device against the device's capacity (with
// headroom and a bar: used, reserved, free), the communication and bubble
// shares, a bar of the step-time breakdown, the failure blast radius and
// the plan's parameters. Infeasible estimates show their reason. Every
// name is HTML-escaped (html/template). The output is deterministic.
func WriteHTML(w io.Writer, r Report) error {
	m, c := r.Model.WithDefaults(), r.Cluster.WithDefaults()
	v := htmlView{Title: r.Title, Model: m, Cluster: c, Devices: c.Devices(), Space: r.Space, Evaluated: r.Evaluated,
		ParamsB: m.Params() / 1e9, ActiveB: m.ActiveParams() / 1e9, MoE: m.moe(), Convention: FLOPConvention,
		Notes: append(notes(r.Estimates), capNotes(r.Estimates)...), Error: r.Error}
	if v.Title == "" {
		v.Title = fmt.Sprintf("Parallel strategies: %s on %s", m.Name, c.Name)
	}
	for i, e := range r.Estimates {
		v.Rows = append(v.Rows, newHTMLRow(i+1, e, c.Device.MemoryGiB))
	}
	if err := reportTemplate.Execute(w, v); err != nil {
		return fmt.Errorf("strategy: html report: %w", err)
	}
	return nil
}

type htmlView struct {
	Title            string
	Model            Model
	Cluster          Cluster
	Devices          int
	ParamsB, ActiveB float64
	MoE              bool
	Convention       string
	Space            string
	Evaluated        bool
	Notes            []string // Estimate.Note, each once, then capNotes
	Rows             []htmlRow
	Error            string
}

// htmlRow is one estimate with its bars precomputed (widths in percent).
type htmlRow struct {
	Rank int
	E    Estimate
	// Memory bar: used, reserved, free, of the device's capacity.
	MemUsedPct, MemReservedPct, MemFreePct float64
	Over                                   bool // does not fit
	Time                                   []htmlSegment
	ZeRO                                   string // zeroLabel: "3→1" where another stage is priced
	Split, SplitFlags                      string // Estimate.LayerSplit, Estimate.MegatronSplit
}

type htmlSegment struct {
	Name, Class string
	Seconds     float64
	Pct         float64
}

func pct(part, whole float64) float64 {
	if !(whole > 0) || math.IsNaN(part) || part <= 0 {
		return 0
	}
	return math.Round(1000*min(part/whole, 1)) / 10
}

func newHTMLRow(rank int, e Estimate, capGiB float64) htmlRow {
	row := htmlRow{Rank: rank, E: e, ZeRO: zeroLabel(e), Split: e.LayerSplit(), SplitFlags: e.MegatronSplit()}
	row.MemUsedPct = pct(e.MemPerDeviceGiB, capGiB)
	row.MemReservedPct = min(pct(e.Mem.ReservedGiB, capGiB), 100-row.MemUsedPct)
	row.MemFreePct = max(0, math.Round(10*(100-row.MemUsedPct-row.MemReservedPct))/10)
	row.Over = e.MemHeadroomGiB < 0
	t := e.Time
	for _, s := range []htmlSegment{
		{Name: "compute", Class: "compute", Seconds: t.ComputeS},
		{Name: "TP comm", Class: "tp", Seconds: t.TPCommS},
		{Name: "CP comm", Class: "cp", Seconds: t.CPCommS},
		{Name: "EP comm", Class: "ep", Seconds: t.EPCommS},
		{Name: "PP comm", Class: "pp", Seconds: t.PPCommS},
		{Name: "DP comm", Class: "dp", Seconds: t.DPCommS},
		{Name: "bubble", Class: "bubble", Seconds: t.BubbleS},
		{Name: "optimizer", Class: "opt", Seconds: t.OptimizerS},
	} {
		if s.Seconds > 0 && e.StepTimeS > 0 {
			s.Pct = pct(s.Seconds, e.StepTimeS)
			row.Time = append(row.Time, s)
		}
	}
	return row
}

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"f": func(prec int, v float64) string { return fmt.Sprintf("%.*f", prec, v) },
	// num writes a spec's number as given: 12.5 GB/s stays 12.5, 0.21
	// TFLOP/s stays 0.21 (f 0 rounded them to 12 and 0).
	"num": func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) },
	"pct": func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) },
	"thousands": func(v float64) string {
		s := fmt.Sprintf("%.0f", v)
		out := []byte{}
		for i := range len(s) {
			if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
				out = append(out, ',')
			}
			out = append(out, s[i])
		}
		return string(out)
	},
}).Parse(reportHTML))

const reportHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<meta name="viewport" content="width=device-width, initial-scale=1"/>
<title>{{.Title}}</title>
<style>
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em; color: #1d232b; background: #fff; }
h1 { font-size: 1.35em; margin: 0 0 .6em; }
h2 { font-size: 1.1em; margin: 1.4em 0 .5em; }
.specs { display: flex; flex-wrap: wrap; gap: 1em 3em; }
.specs table td { padding: 1px 10px 1px 0; }
.specs table td:first-child { color: #5a6573; }
table.plans { border-collapse: collapse; width: 100%; }
table.plans th, table.plans td { border-bottom: 1px solid #e1e5ea; padding: 4px 6px; text-align: right; white-space: nowrap; vertical-align: middle; }
table.plans th { background: #f3f5f8; position: sticky; top: 0; font-weight: 600; }
table.plans td.l, table.plans th.l { text-align: left; }
table.plans tr.best td { background: #f1f9f1; }
table.plans tr.infeasible td { color: #8a939e; }
.bar { display: flex; width: 160px; height: 12px; background: #eef0f3; border-radius: 2px; overflow: hidden; }
.bar span { display: block; height: 100%; }
.used { background: #3b7dd8; } .over { background: #d8463b; } .reserved { background: #a9b4c2; } .free { background: #eef0f3; }
.compute { background: #3b7dd8; } .tp { background: #e8a33d; } .cp { background: #c9d84a; } .ep { background: #9c6ad8; }
.pp { background: #3dbfb0; } .dp { background: #d8463b; } .bubble { background: #a9b4c2; } .opt { background: #6b7480; }
.legend span { display: inline-block; width: 10px; height: 10px; margin: 0 3px 0 10px; vertical-align: -1px; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; }
.note { color: #5a6573; font-size: 12px; max-width: 70em; }
.reason { white-space: normal; text-align: left; min-width: 20em; }
.error { color: #b3261e; max-width: 70em; white-space: pre-wrap; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<div class="specs">
<table>
<tr><td>model</td><td><b>{{.Model.Name}}</b></td></tr>
<tr><td>parameters</td><td>{{f 2 .ParamsB}} B{{if .MoE}} ({{f 2 .ActiveB}} B active, {{.Model.Experts}} experts, top-{{.Model.TopK}}){{end}}</td></tr>
<tr><td>layers × hidden</td><td>{{.Model.Layers}} × {{.Model.Hidden}} (ffn {{.Model.FFNHidden}}, heads {{.Model.Heads}}/{{.Model.KVHeads}} kv)</td></tr>
<tr><td>sequence × batch</td><td>{{.Model.SeqLen}} × {{.Model.GlobalBatch}} sequences, vocab {{.Model.Vocab}}</td></tr>
</table>
<table>
<tr><td>cluster</td><td><b>{{.Cluster.Name}}</b></td></tr>
<tr><td>devices</td><td>{{.Cluster.Nodes}} × {{.Cluster.DevicesPerNode}} = {{.Devices}} {{.Cluster.Device.Name}}</td></tr>
<tr><td>device</td><td>{{num .Cluster.Device.PeakTFLOPS}} TFLOP/s peak, {{num .Cluster.Device.MemoryGiB}} GiB, {{num .Cluster.Device.HBMGBps}} GB/s</td></tr>
<tr><td>fabric</td><td>{{num .Cluster.IntraNodeGBps}} GB/s intra-node, {{num .Cluster.InterNodeGBps}} GB/s inter-node (per device, one way)</td></tr>
</table>
</div>

{{if .Error}}<h2>No plan</h2>
<p class="error">{{.Error}}</p>
{{else}}<h2>{{if .Evaluated}}Plan{{if ne (len .Rows) 1}}s{{end}} evaluated{{else}}Top {{len .Rows}} plan{{if ne (len .Rows) 1}}s{{end}}{{end}}</h2>
{{if .Space}}<p class="note">searched: {{.Space}}</p>
{{end}}<p class="legend note">memory: <span class="used"></span>used <span class="reserved"></span>reserved <span class="free"></span>free ·
time: <span class="compute"></span>compute <span class="tp"></span>TP <span class="cp"></span>CP <span class="ep"></span>EP <span class="pp"></span>PP <span class="dp"></span>DP <span class="bubble"></span>bubble <span class="opt"></span>optimizer</p>
<table class="plans">
<thead>
<tr><th>#</th><th>step s</th><th>tokens/s</th><th title="executed FLOPs, recomputation included (HFU); MFU counts the model FLOPs">hw TFLOP/s/dev</th><th>MFU</th><th>mem GiB/dev</th><th>headroom GiB</th><th class="l">memory</th><th>comm</th><th>bubble</th><th class="l">step time</th><th>blast radius</th>
<th>tp</th><th>pp</th><th>dp</th><th>cp</th><th>ep</th><th>mb</th><th>vpp</th><th>sp</th><th>recompute</th><th>zero</th><th>overlap</th><th>µbatches</th><th title="layers per pipeline stage: 12×8 is 8 stages of 12; 3+8×12+6 an uneven split (first, the stages in between, last)">layers</th><th class="l">plan</th></tr>
</thead>
<tbody>
{{- range .Rows}}
<tr class="plan{{if not .E.Feasible}} infeasible{{else if and (eq .Rank 1) (not $.Evaluated)}} best{{end}}">
<td>{{.Rank}}</td>
{{- if .E.Feasible}}
<td>{{f 3 .E.StepTimeS}}</td><td>{{thousands .E.TokensPerS}}</td><td>{{f 1 .E.TFLOPSPerDevice}}</td><td>{{pct .E.MFU}}</td>
{{- else}}
<td class="reason" colspan="4">{{.E.Reason}}</td>
{{- end}}
<td>{{f 1 .E.MemPerDeviceGiB}}</td><td>{{f 1 .E.MemHeadroomGiB}}</td>
<td class="l"><div class="bar" title="{{f 1 .E.MemPerDeviceGiB}} GiB used, {{f 1 .E.Mem.ReservedGiB}} GiB reserved, {{f 1 .E.MemHeadroomGiB}} GiB free (params {{f 1 .E.Mem.ParamsGiB}}, grads {{f 1 .E.Mem.GradsGiB}}, optimizer {{f 1 .E.Mem.OptimizerGiB}}, activations {{f 1 .E.Mem.ActivationsGiB}})"><span class="{{if .Over}}over{{else}}used{{end}}" style="width: {{.MemUsedPct}}%"></span><span class="reserved" style="width: {{.MemReservedPct}}%"></span><span class="free" style="width: {{.MemFreePct}}%"></span></div></td>
{{- if .E.Feasible}}
<td>{{pct .E.CommShare}}</td><td>{{pct .E.BubbleShare}}</td>
<td class="l"><div class="bar">{{range .Time}}<span class="{{.Class}}" style="width: {{.Pct}}%" title="{{.Name}} {{f 4 .Seconds}} s"></span>{{end}}</div></td>
{{- else}}
<td>-</td><td>-</td><td class="l">-</td>
{{- end}}
<td>{{.E.BlastRadius}}</td>
<td>{{.E.Plan.TP}}</td><td>{{.E.Plan.PP}}</td><td>{{.E.Plan.DP}}</td><td>{{.E.Plan.CP}}</td><td>{{.E.Plan.EP}}</td><td>{{.E.Plan.MicroBatch}}</td><td>{{.E.Plan.VPP}}</td><td>{{.E.Plan.SP}}</td><td>{{.E.Plan.Recompute}}</td><td>{{.ZeRO}}</td><td>{{.E.Plan.Overlap}}</td><td>{{.E.Microbatches}}</td><td{{if .SplitFlags}} title="Megatron-Core: {{.SplitFlags}}"{{end}}>{{or .Split "-"}}</td>
<td class="l"><code>{{.E.Plan.String}}</code></td>
</tr>
{{- end}}
</tbody>
</table>
{{range .Notes}}<p class="note">note: {{.}}</p>
{{end}}{{end}}<p class="note">Predictions of the analytical cost model of cann-train's engine/strategy, not measurements. Throughput ranks the plans (ties: more headroom, then smaller blast radius). Comm is exposed communication as a share of the step, bubble the pipeline fill, drain and stage imbalance. Blast radius: devices whose state no surviving device holds when one device fails. Layers: per pipeline stage, first + those in between + last where the split is uneven. FLOP convention: {{.Convention}}.</p>
</body>
</html>
`
