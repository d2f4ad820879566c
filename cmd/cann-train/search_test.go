package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/cann-train/cann-train/engine/strategy"
)

func TestSearchCommand(t *testing.T) {
	run := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		root.SetArgs(append([]string{"search"}, args...))
		err := root.Execute()
		return out.String(), err
	}
	out, err := run("--model", "gpt3_3.6b", "--cluster", "vtrain_a100_64", "--top", "3", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var plans []map[string]any
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 3 {
		t.Fatalf("want 3 plans as JSON, got %v\n%s", err, out)
	}
	out, err = run("--model", "gpt3_3.6b", "--cluster", "vtrain_a100_64", "--evaluate", "tp=2,pp=1,dp=32,mb=4,recompute=full,zero=0", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var est map[string]any
	if err := json.Unmarshal([]byte(out), &est); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"step_time_s", "tokens_per_s", "tflops_per_device", "mfu", "mem_per_device_gib", "comm_share", "bubble_share", "feasible", "reason"} {
		if _, ok := est[k]; !ok {
			t.Errorf("evaluate JSON lacks %q", k)
		}
	}
	if _, err := run("--model", "no-such-model", "--cluster", "vtrain_a100_64"); err == nil || !strings.Contains(err.Error(), "no-such-model") ||
		!strings.Contains(err.Error(), "known: 1024_ascend910b, ") {
		t.Errorf("unknown preset: %v", err)
	}
	// A file that is not there is said to be missing, not an unknown preset.
	for _, missing := range []string{"./m.yaml", "specs/m", "m.yml"} {
		if _, err := run("--model", missing, "--cluster", "vtrain_a100_64"); err == nil || !strings.Contains(err.Error(), missing+": no such file") ||
			!strings.Contains(err.Error(), "nor is it a preset (--list-presets lists them)") {
			t.Errorf("--model %s: %v; want the file said missing", missing, err)
		}
	}
	if _, err := run("--model", "gpt3_3.6b", "--cluster", "vtrain_a100_64", "--evaluate", "tp=three"); err == nil || !strings.Contains(err.Error(), "tp") {
		t.Errorf("bad plan string: %v", err)
	}
}

// TestSearchPresets: the help's --list-presets lists every preset (each
// one loads as --model or --cluster), --show-preset prints one a spec file
// can start from, and the help names the spec files' fields, so that a
// typo's "did you mean" points at a field the user can look up.
func TestSearchPresets(t *testing.T) {
	run := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
		root.SetOut(&out)
		root.SetArgs(append([]string{"search"}, args...))
		err := root.Execute()
		return out.String(), err
	}
	out, err := run("--list-presets")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range strategy.Presets() {
		if name := strings.TrimSuffix(file, ".yaml"); !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` `).MatchString(out) {
			t.Errorf("--list-presets does not list %s:\n%s", name, out)
		}
	}
	out, err = run("--list-presets", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Models   []struct{ Preset string } `json:"models"`
		Clusters []struct{ Preset string } `json:"clusters"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Models)+len(list.Clusters) != len(strategy.Presets()) {
		t.Fatalf("--list-presets -o json: %v, %d models and %d clusters for %d presets", err, len(list.Models), len(list.Clusters), len(strategy.Presets()))
	}
	m, c := list.Models[0].Preset, list.Clusters[0].Preset
	if _, err := run("--model", m, "--cluster", c, "--top", "1"); err != nil {
		t.Errorf("listed presets %s and %s do not search: %v", m, c, err)
	}

	// A spec file started from --show-preset, with a typo.
	out, err = run("--show-preset", "gpt3_3.6b")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(out, "seq_len:", "seq_lne:", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = run("--model", file, "--cluster", "vtrain_a100_64")
	if err == nil || !strings.Contains(err.Error(), "seq_lne: unknown field; did you mean seq_len?") {
		t.Errorf("a typo in a spec started from --show-preset: %v", err)
	}
	// Model and cluster files swapped: said so, not 13 field errors.
	cl, err := run("--show-preset", "vtrain_a100_64")
	if err != nil {
		t.Fatal(err)
	}
	model, cluster := filepath.Join(dir, "model.yaml"), filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cluster, []byte(cl), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(model, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err = run("--model", cluster, "--cluster", model); err == nil || err.Error() != cluster+" is a cluster spec, not a model (--cluster takes it)" {
		t.Errorf("swapped files: %v", err)
	}
	help, err := run("--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"seq_len", "global_batch", "devices_per_node", "inter_node_gbps", "peak_tflops", "a100-80gb"} {
		if !strings.Contains(help, field) {
			t.Errorf("search --help does not name %s", field)
		}
	}
	if _, err := run("--show-preset", "no_such"); err == nil || !strings.Contains(err.Error(), "no_such") {
		t.Errorf("--show-preset no_such: %v", err)
	}
}

// TestSearchSpaceFlags narrows the search to what a framework offers: every
// plan returned keeps to the flags, and a bad flag is refused by name.
func TestSearchSpaceFlags(t *testing.T) {
	run := searchGPT18
	plans := func(args ...string) []strategy.Estimate {
		t.Helper()
		out, err := run(append(args, "-o", "json")...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var res []strategy.Estimate
		if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) == 0 {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return res
	}
	free := plans("--top", "50")
	narrowed := plans("--top", "50", "--zero", "1", "--recompute", "full,selective", "--max-tp", "4", "--max-mb", "2",
		"--max-vpp", "1", "--no-sp", "--overlap", "--min-headroom", "20")
	for _, e := range narrowed {
		p := e.Plan
		if p.ZeRO != 1 || p.Recompute == strategy.RecomputeNone || p.TP > 4 || p.MicroBatch > 2 || p.VPP != 1 || p.SP || !p.Overlap || e.MemHeadroomGiB < 20 {
			t.Errorf("outside the narrowed space: %s (headroom %.1f GiB)", e.Config, e.MemHeadroomGiB)
		}
	}
	// The narrowing must bite: the free search's best is outside it.
	if p := free[0].Plan; p.ZeRO == 1 && p.Recompute != strategy.RecomputeNone && p.TP <= 4 && p.MicroBatch <= 2 && p.VPP == 1 && !p.SP {
		t.Errorf("the free search's best %s is inside the narrowed space: the test proves nothing", free[0].Config)
	}
	// --overlap prices the same plan faster or equal, never slower.
	plain := plans("--zero", "1", "--max-vpp", "1", "--top", "1")[0]
	if p := plain.Plan; p.Overlap {
		t.Fatalf("overlap without --overlap: %s", plain.Config)
	}
	p := plain.Plan
	p.Overlap = true
	out, err := run("--evaluate", p.String(), "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var over strategy.Estimate
	if err := json.Unmarshal([]byte(out), &over); err != nil || over.StepTimeS > plain.StepTimeS {
		t.Errorf("%s with overlap: %v, %.3f s against %.3f s", p, err, over.StepTimeS, plain.StepTimeS)
	}
	page, err := run("--zero", "1", "--max-vpp", "1", "--top", "2", "-o", "html")
	if err != nil || !strings.Contains(page, "searched: ZeRO 1 · no interleaving") {
		t.Errorf("the HTML report does not say what was searched: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--zero", "4"}, "--zero 4"},
		{[]string{"--zero", "one"}, "--zero"},
		{[]string{"--recompute", "most"}, `--recompute "most"`},
		{[]string{"--max-tp", "3"}, "--max-tp 3: want a power of two"},
		{[]string{"--max-vpp", "0"}, "--max-vpp 0: want at least 1"},
		{[]string{"--max-mb", "-2"}, "--max-mb -2"},
		{[]string{"--min-headroom", "-1"}, "--min-headroom -1"},
		{[]string{"--top", "0"}, "--top 0"},
		{[]string{"--evaluate", "tp=8,pp=1,dp=32,mb=8,recompute=full", "--zero", "1", "--overlap"}, "--zero, --overlap: search-space flags do not apply to --evaluate"},
	} {
		if _, err := run(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

// TestBenchCollectiveProcesses runs `bench collective` for real: three rank
// processes over loopback TCP, every size checked.
func TestBenchCollectiveProcesses(t *testing.T) {
	t.Setenv("GOMAXPROCS", "") // the ranks' default, not the caller's
	var out, errb bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs([]string{"bench", "collective", "--ranks", "3", "--transport", "tcp", "-b", "8", "-e", "256K", "-f", "32",
		"--coll", "allreduce,allgather,broadcast", "-n", "5", "-w", "1", "--limits", "0", "-o", "json"})
	if err := root.Execute(); err != nil {
		t.Fatalf("bench collective: %v\n%s", err, errb.String())
	}
	var rep struct {
		Ranks      int `json:"ranks"`
		GOMAXPROCS int `json:"gomaxprocs"`
		Tables     []struct {
			Collective string `json:"collective"`
			Results    []struct {
				Size int64 `json:"size"`
				Out  struct {
					Wrong int     `json:"nwrong"`
					BusBW float64 `json:"bus_bw"`
				} `json:"out_of_place"`
			} `json:"results"`
		} `json:"tables"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	wantProcs := 1 // ranks fill the cores: one P per rank process
	if runtime.NumCPU() > 3 {
		wantProcs = runtime.GOMAXPROCS(0) // spare cores: the runtime's own
	}
	if rep.Ranks != 3 || len(rep.Tables) != 3 || rep.GOMAXPROCS != wantProcs {
		t.Fatalf("ranks %d, tables %d, GOMAXPROCS %d (want %d)", rep.Ranks, len(rep.Tables), rep.GOMAXPROCS, wantProcs)
	}
	for _, tb := range rep.Tables {
		if len(tb.Results) != 4 {
			t.Errorf("%s: %d sizes, want 4 (8, 256, 8K, 256K)", tb.Collective, len(tb.Results))
		}
		for _, r := range tb.Results {
			// As in nccl-tests, a size smaller than one element per rank
			// rounds down to 0 bytes for allgather.
			if r.Out.Wrong != 0 || (r.Size > 0 && r.Out.BusBW <= 0) {
				t.Errorf("%s size %d: #wrong %d, busbw %g", tb.Collective, r.Size, r.Out.Wrong, r.Out.BusBW)
			}
		}
	}
}

// TestSearchHTML: -o html is one self-contained page with a table row per
// plan, and names from the user's files are escaped.
func TestSearchHTML(t *testing.T) {
	preset, err := strategy.Preset("gpt3_3.6b")
	if err != nil {
		t.Fatal(err)
	}
	const evil = `<i>evil</i> & "co"`
	yaml := regexp.MustCompile(`(?m)^name: .*$`).ReplaceAll(preset, []byte(`name: '`+evil+`'`))
	model := filepath.Join(t.TempDir(), "model.yaml")
	if err := os.WriteFile(model, yaml, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		rows int
	}{
		{"top 3", []string{"--top", "3"}, 3},
		{"top 1", []string{"--top", "1"}, 1},
		{"evaluate", []string{"--evaluate", "tp=2,pp=1,dp=32,mb=4,recompute=full,zero=0"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
			root.SetArgs(append([]string{"search", "--model", model, "--cluster", "vtrain_a100_64", "-o", "html"}, tc.args...))
			if err := root.Execute(); err != nil {
				t.Fatalf("search -o html: %v\n%s", err, errb.String())
			}
			page := out.String()
			if !strings.HasPrefix(page, "<!DOCTYPE html>") || !strings.HasSuffix(page, "</html>\n") {
				t.Fatalf("not one HTML page:\n%.300s", page)
			}
			if got := strings.Count(page, `<tr class="plan`); got != tc.rows {
				t.Errorf("%d plan rows, want %d", got, tc.rows)
			}
			if strings.Contains(page, "<i>evil") || !strings.Contains(page, "&lt;i&gt;evil&lt;/i&gt; &amp; &#34;co&#34;") {
				t.Errorf("model name not escaped")
			}
			for _, asset := range []string{"<script", "<link", "src=", "http://", "https://"} {
				if strings.Contains(page, asset) {
					t.Errorf("page has an external asset or script: %q", asset)
				}
			}
		})
	}
}

// TestSearchEvaluateSaysWhatItPrices: `--evaluate ""` (say an unset shell
// variable) is an error, not a search of every plan; a pipelined zero=3
// plan says, in every output, that it is priced as a lower stage and why;
// the HTML page of an evaluation says "Plan evaluated".
func TestSearchEvaluateSaysWhatItPrices(t *testing.T) {
	run := searchGPT18
	const z3 = "tp=8,pp=2,dp=16,mb=2,recompute=full,zero=3"
	const note = "zero=3 with pp > 1 is priced as ZeRO-1"
	for _, tc := range []struct {
		name     string
		args     []string
		err      string   // "" succeeds
		contains []string // in the output
		not      []string
	}{
		{"empty plan", []string{"--evaluate", ""}, `--evaluate: empty plan: want one such as "tp=8,pp=12,dp=4,mb=1,recompute=full,zero=1" (leave --evaluate out to search)`, nil, nil},
		{"blank plan", []string{"--evaluate", "  "}, "--evaluate: empty plan", nil, nil},
		{"empty plan, json", []string{"--evaluate=", "-o", "json"}, "--evaluate: empty plan", nil, nil},
		{"zero=3 table", []string{"--evaluate", z3}, "", []string{" 3→1 ", "note: " + note}, nil},
		{"zero=3 json", []string{"--evaluate", z3, "-o", "json"}, "", []string{`"zero": 3`, `"priced_zero": 1`, `"note": "` + note}, nil},
		{"zero=3 html", []string{"--evaluate", z3, "-o", "html"}, "", []string{"<h2>Plan evaluated</h2>", "<td>3→1</td>", "note: zero=3 with pp &gt; 1 is priced as ZeRO-1", "12.5 GB/s inter-node"},
			[]string{"Top 1 plan", "plan best"}},
		{"zero=1 json", []string{"--evaluate", strings.Replace(z3, "zero=3", "zero=1", 1), "-o", "json"}, "", []string{`"priced_zero": 1`}, []string{`"note"`}},
		{"boolean the message names", []string{"--evaluate", z3 + ",overlap=1,sp=0"}, "", nil, nil},
		{"boolean it does not", []string{"--evaluate", z3 + ",sp=yes"}, `sp: "yes": want true, false, 1 or 0`, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(tc.args...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				if out != "" {
					t.Errorf("printed %d bytes, want nothing:\n%.300s", len(out), out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.contains {
				if !strings.Contains(out, s) {
					t.Errorf("output lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(out, s) {
					t.Errorf("output has %q", s)
				}
			}
		})
	}
	// A search lists each configuration once: its zero=3 twins of pipelined
	// ZeRO-1 plans are gone (gpt3_18.4b's top 6 were 3 plans, each twice).
	out, err := run("--top", "6", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var res []strategy.Estimate
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) != 6 {
		t.Fatalf("%v, %d plans", err, len(res))
	}
	seen := map[string]bool{}
	for _, e := range res {
		key := fmt.Sprintf("%.9g %.9g", e.StepTimeS, e.MemPerDeviceGiB)
		if seen[key] {
			t.Errorf("%s: a second plan with the same step time and memory (%s)", e.Config, key)
		}
		seen[key] = true
	}
}

// TestSearchSpecFiles: model and cluster files that are not one YAML
// document are refused naming the file (and the line of the second
// document), and a file's problems come in line order.
func TestSearchSpecFiles(t *testing.T) {
	dir := t.TempDir()
	model, err := strategy.Preset("gpt3_3.6b")
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := strategy.Preset("vtrain_a100_64")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	goodM, goodC := write("m.yaml", string(model)), write("c.yaml", string(cluster))
	mLines, cLines := strings.Count(string(model), "\n"), strings.Count(string(cluster), "\n")
	for _, tc := range []struct {
		name           string
		model, cluster string
		want           string
	}{
		{"model, second document", write("m2.yaml", string(model)+"---\nlayers: -5\nbogus: 1\n"), goodC,
			fmt.Sprintf("m2.yaml: 1 problem(s):\n  line %d: (document): a second YAML document (---): one spec per file", mLines+1)},
		{"cluster, second document", goodM, write("c2.yaml", string(cluster)+"---\nnodes: 1\n"),
			fmt.Sprintf("c2.yaml: 1 problem(s):\n  line %d: (document): a second YAML document (---): one spec per file", cLines+1)},
		{"empty model", write("empty.yaml", ""), goodC, "empty.yaml: 1 problem(s):\n  (document): empty file (no YAML mapping)"},
		{"comments-only cluster", goodM, write("comments.yaml", "# to do\n"), "comments.yaml: 1 problem(s):\n  (document): empty file (no YAML mapping)"},
		{"bare --- model", write("dashes.yaml", "---\n"), goodC, "dashes.yaml: 1 problem(s):\n  (document): empty file (no YAML mapping)"},
		{"problems in line order", goodM, write("bad.yaml", "name: c\nnodes: 8\ndevices_per_node: 8\ndevice: a100-80gb\nintra_node_gbps: 300\ninter_node_gbps: 0\nreserved_gib: 0\n"),
			"bad.yaml: 2 problem(s):\n  line 6: inter_node_gbps: 0 out of range (0, 1e+06]\n  line 7: reserved_gib: 0 is out of range: leave it out for the default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
			root.SetArgs([]string{"search", "--model", tc.model, "--cluster", tc.cluster, "--top", "1"})
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nwant one containing %q", err, tc.want)
			}
		})
	}
}

// searchGPT18 runs `cann-train search` for the gpt3_18.4b preset on
// vtrain_a100_256 with args and returns its standard output.
func searchGPT18(args ...string) (string, error) {
	var out, errb bytes.Buffer
	root := newRootCmd(&env{out: &out, err: &errb, command: childCommand})
	root.SetArgs(append([]string{"search", "--model", "gpt3_18.4b", "--cluster", "vtrain_a100_256"}, args...))
	err := root.Execute()
	return out.String(), err
}
