package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

// TestLongFlagNames: every flag has a long name (nccl-tests' where it has
// one) beside the one-letter shorthand scripts use, both parse to the same
// options, CheckSetFlags sees a flag given either way, and the usage
// lists the pairs ("-b, --minbytes"), not a letter twice ("-b, --b").
func TestLongFlagNames(t *testing.T) {
	for _, tc := range []struct {
		short, long []string
	}{
		{[]string{"-b", "1K"}, []string{"--minbytes", "1K"}},
		{[]string{"-e", "64M"}, []string{"--maxbytes", "64M"}},
		{[]string{"-f", "4"}, []string{"--stepfactor", "4"}},
		{[]string{"-i", "8K"}, []string{"--stepbytes", "8K"}},
		{[]string{"-n", "7"}, []string{"--iters", "7"}},
		{[]string{"-w", "2"}, []string{"--warmup-iters", "2"}},
		{[]string{"-c", "0"}, []string{"--check", "0"}},
		{[]string{"-r", "1"}, []string{"--root", "1"}},
		{[]string{"-d", "double"}, []string{"--datatype", "double"}},
		{[]string{"-R", "1"}, []string{"--shared-buffers", "1"}},
		{[]string{"-T", "20ms"}, []string{"--target-time", "20ms"}},
		{[]string{"-o", "json"}, []string{"--output", "json"}},
		{[]string{"-o", "text"}, []string{"--output", "text"}},
	} {
		s, sSet, err := parseFlags(t, tc.short...)
		if err != nil {
			t.Errorf("%v: %v", tc.short, err)
			continue
		}
		l, lSet, err := parseFlags(t, tc.long...)
		if err != nil {
			t.Errorf("%v: %v", tc.long, err)
			continue
		}
		if !reflect.DeepEqual(s, l) {
			t.Errorf("%v parsed %+v\n%v parsed %+v", tc.short, s, tc.long, l)
		}
		if name := strings.TrimPrefix(tc.long[0], "--"); !sSet(name) || !lSet(name) {
			t.Errorf("%s: not seen as given (short %v, long %v)", name, sSet(name), lSet(name))
		}
		if reflect.DeepEqual(s, mustParse(t)) {
			t.Errorf("%v changed nothing", tc.short)
		}
	}
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	var o Options
	o.RegisterFlags(fs)
	usage := fs.FlagUsages()
	for _, want := range []string{"-b, --minbytes size", "-e, --maxbytes size", "-f, --stepfactor int", "-i, --stepbytes size", "-n, --iters int",
		"-w, --warmup-iters int", "-c, --check 0|1", "-r, --root int", "-d, --datatype string", "-R, --shared-buffers 0|1",
		"-T, --target-time duration", "-o, --output string", "table or text (the same), or json"} {
		if !strings.Contains(usage, want) {
			t.Errorf("usage lacks %q:\n%s", want, usage)
		}
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if len(f.Name) < 2 {
			t.Errorf("flag -%s has no long name", f.Name)
		}
	})
}

func mustParse(t *testing.T, args ...string) Options {
	t.Helper()
	o, _, err := parseFlags(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestOutputText: -o text is -o table, the word the other commands use;
// an unknown format names all three.
func TestOutputText(t *testing.T) {
	opts := small()
	opts.Format = "text"
	if d := opts.Defaults(); d.Format != "table" || d.validate() != nil {
		t.Errorf("text: format %q, %v", d.Format, d.validate())
	}
	var out bytes.Buffer
	ascendtest.Spawn(t, 2, func(c *ascend.Communicator) {
		w := io.Discard
		if c.Rank() == 0 {
			w = &out
		}
		if err := RunRank(context.Background(), c, opts, w); err != nil {
			t.Errorf("rank %d: %v", c.Rank(), err)
			c.Close()
		}
	})
	if !strings.HasPrefix(out.String(), "# ascend collective benchmark") || !strings.Contains(out.String(), "# Avg bus bandwidth") {
		t.Errorf("-o text did not print the table:\n%s", out.String())
	}
	opts.Format = "yaml"
	if err := opts.Defaults().validate(); err == nil || !strings.Contains(err.Error(), "want table, text (the same) or json") {
		t.Errorf("yaml: %v", err)
	}
}

// TestReportUnits: the Avg bus bandwidth line gives its unit after the
// figure (the figure stays nccl-tests' sixth field), a sweep that ends
// below 1 MiB says its limits were measured at 1M, and the JSON names
// every time's unit (time_us, target_time_us, spin_us) and the cost
// model's figures.
func TestReportUnits(t *testing.T) {
	opts := small().Defaults()
	opts.MaxBytes, opts.TargetTime, opts.Spin = 8<<10, 1500*time.Microsecond+1, -1
	rep := &Report{Ranks: 2, Options: opts, CostModel: "α=25µs",
		CostModelParams: costModelParams(ascend.CostModel{Alpha: 25 * time.Microsecond, Beta: 1 / 2e9, Gamma: 1 / 4e9}),
		Limits:          []Limits{{Bytes: 1 << 20, TCPOneWay: 3, TCPDuplex: 2, Memcpy: 9}},
		Tables: []Table{
			{Collective: "allreduce", Algorithm: "auto", AvgBusBW: 1.25, Rows: []Row{{Size: 8, Count: 2, Type: "float", RedOp: "sum", Root: -1, Algorithm: "ring", Iterations: 3,
				OutOfPlace: &Result{Time: 4, AlgBW: 0.002, BusBW: 0.002}, InPlace: &Result{Time: 4, AlgBW: 0.002, BusBW: 0.002}}}},
			{Collective: "reducescatter", Algorithm: "auto", Rows: []Row{{Size: 0, Type: "float", RedOp: "sum", Root: -1, Algorithm: "ring",
				OutOfPlace: &Result{}, InPlace: &Result{}}}},
		}}
	var tab bytes.Buffer
	if err := rep.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	s := tab.String()
	var avg []string
	for line := range strings.Lines(s) {
		if strings.HasPrefix(line, "# Avg bus bandwidth") {
			avg = append(avg, strings.TrimSpace(line))
		}
	}
	if want := []string{"# Avg bus bandwidth    : 1.25 GB/s", "# Avg bus bandwidth    : N/A"}; !reflect.DeepEqual(avg, want) {
		t.Errorf("footers %q, want %q", avg, want)
	}
	if f := strings.Fields(avg[0]); f[5] != "1.25" {
		t.Errorf("figure is field %q, not nccl-tests' sixth", f)
	}
	if !strings.Contains(s, "# limits measured at 1M transfers, above the sweep's -e 8K: smaller ones time the latency of a message, not a limit\n# limits before, 1M transfers") {
		t.Errorf("no word on the limits' size above the sweep:\n%s", s)
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	o := doc["options"].(map[string]any)
	res := doc["tables"].([]any)[0].(map[string]any)["results"].([]any)[0].(map[string]any)["out_of_place"].(map[string]any)
	cm := doc["cost_model_params"].(map[string]any)
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"version", doc["version"], float64(JSONVersion)},
		{"units.time", doc["units"].(map[string]any)["time"], "us"},
		{"target_time_us", o["target_time_us"], 1500.001},
		{"spin_us", o["spin_us"], -0.001},
		{"target_time (ns)", o["target_time"], nil},
		{"spin (ns)", o["spin"], nil},
		{"time_us", res["time_us"], 4.0},
		{"time", res["time"], nil},
		{"alpha_us", cm["alpha_us"], 25.0},
		{"alpha_all_us", cm["alpha_all_us"], 25.0},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if b, _ := cm["beta_gbps"].(float64); !near(b, 2) {
		t.Errorf("beta_gbps %v, want 2", cm["beta_gbps"])
	}
	// The children get their options as this JSON: the durations come back
	// to the nanosecond.
	var back Options
	if err := json.Unmarshal(mustJSON(t, opts), &back); err != nil || back.TargetTime != opts.TargetTime || back.Spin != opts.Spin {
		t.Errorf("round trip: -T %v, --spin %v (%v); want %v, %v", back.TargetTime, back.Spin, err, opts.TargetTime, opts.Spin)
	}
	if p := costModelParams(ascend.CostModel{}); p.BetaGBps != 0 || p.GammaGBps != 0 {
		t.Errorf("no model: %+v", p)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRingOnSharedBuffers: with -R 1 a forced ring runs direct (ascend's
// directFor: the same bits). Alone its heading says so; with direct also
// asked for it is measured once, as direct, and a line stands where its
// table would be. auto runs direct there too: --algo auto,direct prints
// one table, direct's, and auto,ring one, auto's; an algorithm asked for
// twice is measured once. A collective without a direct algorithm
// (reduce) keeps its ring and auto. Double allgather on shared buffers
// runs direct too (the typed collectives that move words run the float32
// machinery), and its rows say so.
func TestRingOnSharedBuffers(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	launch := func(opts Options) (string, string) {
		var out, errs bytes.Buffer
		opts.Ranks, opts.SharedMemory, opts.SharedBuffers = 2, true, true
		opts.MaxBytes = 1 << 10
		opts.Stdout, opts.Stderr = &out, &errs
		if err := Launch(ctx, opts, selfCmd(exe)); err != nil {
			t.Fatalf("%v\nstderr:\n%s", err, errs.String())
		}
		return out.String(), errs.String()
	}
	headings := func(s string) []string {
		var hs []string
		for line := range strings.Lines(s) {
			if strings.Contains(line, ", algorithm ") {
				hs = append(hs, strings.TrimSpace(line))
			}
		}
		return hs
	}
	rowAlgos := func(s string) map[string]bool {
		as := map[string]bool{}
		for line := range strings.Lines(s) {
			if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(line, "#") && f[0] != "0" { // a row of 0 bytes runs nothing
				as[f[len(f)-1]] = true
			}
		}
		return as
	}
	for _, tc := range []struct {
		name  string
		algos []ascend.Algorithm
		want  []string
	}{
		{"ring", []ascend.Algorithm{ascend.AlgoRing}, []string{
			"# allreduce, algorithm ring (runs direct on shared buffers: same bits)",
			"# reduce, algorithm ring"}},
		{"ring,direct", []ascend.Algorithm{ascend.AlgoRing, ascend.AlgoDirect}, []string{
			"# allreduce, algorithm ring: a ring on shared buffers runs direct (the same bits): measured once, as algorithm direct (below)",
			"# allreduce, algorithm direct",
			"# reduce, algorithm ring"}},
		{"direct,ring", []ascend.Algorithm{ascend.AlgoDirect, ascend.AlgoRing}, []string{
			"# allreduce, algorithm direct",
			"# allreduce, algorithm ring: a ring on shared buffers runs direct (the same bits): measured once, as algorithm direct (above)",
			"# reduce, algorithm ring"}},
		{"auto,direct", []ascend.Algorithm{ascend.AlgoAuto, ascend.AlgoDirect}, []string{
			"# allreduce, algorithm auto: auto on shared buffers runs direct: measured once, as algorithm direct (below)",
			"# allreduce, algorithm direct",
			"# reduce, algorithm auto"}},
		{"auto,ring", []ascend.Algorithm{ascend.AlgoAuto, ascend.AlgoRing}, []string{
			"# allreduce, algorithm auto",
			"# allreduce, algorithm ring: a ring on shared buffers runs direct (the same bits): measured once, as algorithm auto (above)",
			"# reduce, algorithm auto",
			"# reduce, algorithm ring"}},
		{"ring,ring", []ascend.Algorithm{ascend.AlgoRing, ascend.AlgoRing}, []string{
			"# allreduce, algorithm ring (runs direct on shared buffers: same bits)",
			"# allreduce, algorithm ring: asked for twice: measured once, as algorithm ring (above)",
			"# reduce, algorithm ring",
			"# reduce, algorithm ring: asked for twice: measured once, as algorithm ring (above)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := small()
			opts.Collectives = []ascend.Collective{ascend.CollAllReduce, ascend.CollReduce}
			opts.Algorithms = tc.algos
			out, _ := launch(opts)
			if got := headings(out); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("headings %q\nwant %q\n%s", got, tc.want, out)
			}
			if !strings.Contains(out, "Wrong values         : 0 OK") || strings.Contains(out, "FAILED") {
				t.Errorf("wrong values:\n%s", out)
			}
		})
	}
	opts := small()
	opts.Collectives, opts.Algorithms, opts.Format = []ascend.Collective{ascend.CollAllReduce}, []ascend.Algorithm{ascend.AlgoRing, ascend.AlgoDirect}, "json"
	out, _ := launch(opts)
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(rep.Tables) != 1 || rep.Tables[0].Algorithm != "direct" || len(rep.Skipped) != 1 || rep.Skipped[0].Algorithm != "ring" || rep.Skipped[0].MeasuredAs != "direct" {
		t.Errorf("JSON: tables %+v, skipped %+v", rep.Tables, rep.Skipped)
	}
	opts.Algorithms = []ascend.Algorithm{ascend.AlgoAuto, ascend.AlgoDirect}
	out, _ = launch(opts)
	rep = Report{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(rep.Tables) != 1 || rep.Tables[0].Algorithm != "direct" || len(rep.Skipped) != 1 || rep.Skipped[0].Algorithm != "auto" || rep.Skipped[0].MeasuredAs != "direct" {
		t.Errorf("JSON, auto,direct: tables %+v, skipped %+v", rep.Tables, rep.Skipped)
	}
	opts = small()
	opts.Collectives, opts.Algorithms, opts.DType = []ascend.Collective{ascend.CollAllGather}, []ascend.Algorithm{ascend.AlgoRing}, DTypeDouble
	out, _ = launch(opts)
	if got, want := headings(out), []string{"# allgather, algorithm ring (runs direct on shared buffers: same bits)"}; !reflect.DeepEqual(got, want) {
		t.Errorf("double allgather: headings %q, want %q", got, want)
	}
	if as := rowAlgos(out); !reflect.DeepEqual(as, map[string]bool{"direct": true}) {
		t.Errorf("double allgather rows ran %v, want direct:\n%s", as, out)
	}
}

// TestWriteTableSkipped: WriteTable prints a skipped table's line where
// the live table printed it, between the tables measured around it.
func TestWriteTableSkipped(t *testing.T) {
	rep := &Report{Ranks: 2, Options: small().Defaults(),
		Tables:  []Table{{Collective: "allreduce", Algorithm: "direct"}, {Collective: "reduce", Algorithm: "ring"}},
		Skipped: []Skipped{{Collective: "allreduce", Algorithm: "ring", MeasuredAs: "direct", Reason: "measured once (above)", at: 1}}}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	var hs []string
	for line := range strings.Lines(b.String()) {
		if strings.Contains(line, ", algorithm ") {
			hs = append(hs, strings.TrimSpace(line))
		}
	}
	if want := []string{"# allreduce, algorithm direct", "# allreduce, algorithm ring: measured once (above)", "# reduce, algorithm ring"}; !reflect.DeepEqual(hs, want) {
		t.Errorf("headings %q, want %q", hs, want)
	}
}

// TestWarmupItersAlias: -w's long name is --warmup-iters, kebab case as
// every other long flag; nccl-tests' --warmup_iters still parses to the
// same options (and an explicit 0 is refused the same way), but it is
// left out of the usage and using it prints a deprecation notice naming
// the new spelling on the flag set's output.
func TestWarmupItersAlias(t *testing.T) {
	var notice bytes.Buffer
	var o Options
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	fs.SetOutput(&notice)
	o.RegisterFlags(fs)
	if err := fs.Parse([]string{"--warmup_iters", "3"}); err != nil {
		t.Fatal(err)
	}
	if want := mustParse(t, "-w", "3"); !reflect.DeepEqual(o, want) {
		t.Errorf("--warmup_iters 3 parsed %+v\nwant (-w 3)     %+v", o, want)
	}
	if !strings.Contains(notice.String(), "--warmup_iters has been deprecated, use --warmup-iters (or -w)") {
		t.Errorf("no deprecation notice naming --warmup-iters: %q", notice.String())
	}
	if u := fs.FlagUsages(); strings.Contains(u, "warmup_iters") || !strings.Contains(u, "-w, --warmup-iters int") {
		t.Errorf("usage should list -w, --warmup-iters and not --warmup_iters:\n%s", u)
	}
	notice.Reset()
	var n Options
	fs = pflag.NewFlagSet("bench", pflag.ContinueOnError)
	fs.SetOutput(&notice)
	n.RegisterFlags(fs)
	if err := fs.Parse([]string{"--warmup-iters", "3"}); err != nil || n.Warmup != 3 || notice.Len() > 0 {
		t.Errorf("--warmup-iters 3: warm-up %d, %v, notice %q", n.Warmup, err, notice.String())
	}
}
