package spec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cann-train/cann-train/engine/checkpoint"
)

func TestParseValid(t *testing.T) {
	s, err := Parse("job.yaml", []byte("name: demo\nnodes: 2\nsteps: 40\nchunk_steps: 10\nnode_wait: 30s\nmodel:\n  hidden: [64, 32]\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if s.Nodes != 2 || s.Steps != 40 || s.ChunkSteps != 10 || s.NodeWait.D().Seconds() != 30 {
		t.Fatalf("decoded %+v", s)
	}
	if len(s.Model.Hidden) != 2 || s.Model.Hidden[0] != 64 || s.Model.Hidden[1] != 32 {
		t.Fatalf("hidden = %v", s.Model.Hidden)
	}
	if s.Model.Kind != ModelMLPMNIST || s.BatchPerRank != 32 || s.CheckpointEvery != 10 {
		t.Fatalf("defaults not applied: %+v", s)
	}
	// A pinned data set is read as sha256sum prints it, in either case.
	sum := "AC2983E2" + strings.Repeat("0f", 28)
	if s, err = Parse("job.yaml", []byte("name: demo\ndata_sha256: "+sum+"\n")); err != nil || s.DataSHA256 != strings.ToLower(sum) {
		t.Fatalf("data_sha256: %q %v", s.DataSHA256, err)
	}
}

func TestParseMinNodesAndGreen(t *testing.T) {
	s, err := Parse("job.yaml", []byte(`name: demo
nodes: 4
green:
  trace: ../shared/data/carbon/ES_2022_hourly.csv
  trace_start: 2022-03-01T08:00:00Z
  deadline: 24h
  interruptible: true
  min_slot: 2h
  budget_g: 500
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if s.MinNodes != 4 {
		t.Errorf("min_nodes defaults to nodes: got %d", s.MinNodes)
	}
	g := s.Green
	if g == nil || g.Forecast != ForecastPersistence || g.Deadline.D() != 24*time.Hour || g.MinSlot.D() != 2*time.Hour ||
		!g.Interruptible || g.BudgetG != 500 || g.NodeWatts != 300 || g.PUE != 1 {
		t.Fatalf("green = %+v", g)
	}
	if ts, ok, err := g.TraceStartTime(); !ok || err != nil || !ts.Equal(time.Date(2022, 3, 1, 8, 0, 0, 0, time.UTC)) {
		t.Errorf("trace start %v %v %v", ts, ok, err)
	}
	s, err = Parse("job.yaml", []byte("name: demo\nnodes: 4\nmin_nodes: 2\n"))
	if err != nil || s.MinNodes != 2 || s.Green != nil {
		t.Fatalf("min_nodes 2: %+v %v", s, err)
	}
	if got := (RunSpec{Nodes: 3, BatchPerRank: 32}).GlobalBatch(); got != 96 {
		t.Errorf("global batch %d", got)
	}
}

func TestExampleJobFilesParse(t *testing.T) {
	for _, f := range []string{"../examples/mnist.yaml", "../examples/mnist-green.yaml", "../examples/mnist-onebit.yaml", "../examples/mnist-auto.yaml",
		"../examples/torch-ddp/job-green.yaml"} {
		s, err := LoadFile(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		// A green example's trace is found from the job file, wherever
		// the CLI and the control worker run.
		if s, err = s.WithJobDir(filepath.Dir(f)); err != nil || (s.Green != nil && !filepath.IsAbs(s.Green.Trace)) {
			t.Errorf("%s: trace not found from the job file's directory: %+v (%v)", f, s.Green, err)
		}
	}
}

func TestSlotLabel(t *testing.T) {
	now := time.Date(2022, 3, 1, 9, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		slot CarbonSlot
		want string
	}{
		{CarbonSlot{Start: time.Date(2022, 3, 1, 14, 0, 0, 0, time.UTC), End: time.Date(2022, 3, 1, 18, 0, 0, 0, time.UTC), GPerKWh: 120.4},
			"green window 14:00–18:00 UTC, 120 g/kWh"},
		{CarbonSlot{Start: time.Date(2022, 3, 2, 10, 0, 0, 0, time.UTC), End: time.Date(2022, 3, 3, 0, 0, 0, 0, time.UTC), GPerKWh: 80},
			"green window 2022-03-02 10:00–00:00 UTC, 80 g/kWh"},
		{CarbonSlot{Start: time.Date(2022, 3, 1, 22, 0, 0, 0, time.UTC), End: time.Date(2022, 3, 2, 2, 0, 0, 0, time.UTC), GPerKWh: 99.6},
			"green window 2022-03-01 22:00–2022-03-02 02:00 UTC, 100 g/kWh"},
		{CarbonSlot{Start: time.Date(2022, 3, 1, 9, 30, 15, 0, time.UTC), End: time.Date(2022, 3, 1, 9, 31, 0, 0, time.UTC), GPerKWh: 50},
			"green window 09:30:15–09:31:00 UTC, 50 g/kWh"},
	} {
		if got := tc.slot.Label(now); got != tc.want {
			t.Errorf("Label = %q, want %q", got, tc.want)
		}
	}
}

func TestParseErrorsNameFieldAndLine(t *testing.T) {
	tests := []struct {
		name      string
		yaml      string
		wantField string
		wantLine  int
		wantMsg   string
	}{
		{"unknown field", "name: a\nnodse: 3\n", "nodse", 2, "unknown field; did you mean nodes?"},
		{"slow node factor at 1", "name: a\nslow_node_factor: 1\n", "slow_node_factor", 2, "out of range 1.05..100"},
		{"slow node chunks negative", "name: a\nslow_node_chunks: -2\n", "slow_node_chunks", 2, "out of range 1..1000"},
		{"unknown field like none", "name: a\nzzz: 3\n", "zzz", 2, "unknown field (check the spelling"},
		{"unknown field, second of two", "name: a\nnodse: 3\nmodel:\n  hiden: [8]\n", "model.hiden", 4, "did you mean hidden?"},
		{"wrong type", "name: a\nsteps: many\n", "steps", 2, ""},
		{"fraction", "name: a\nnodes: 2.7\n", "nodes", 2, "want a whole number, got 2.7"},
		{"nested fraction", "name: a\nmodel:\n  hidden: [64, 32.5]\n", "model.hidden[1]", 3, "want a whole number, got 32.5"},
		{"fraction in external", "name: a\nexternal:\n  entrypoint: [python, t.py]\n  procs_per_node: 1.5\n", "external.procs_per_node", 4, "want a whole number"},
		{"impossible value", "name: a\nnodes: 3\nsteps: -5\n", "steps", 3, "must be positive"},
		{"nested impossible", "name: a\nmodel:\n  hidden: [64, 0]\n", "model.hidden[1]", 3, "out of range"},
		{"bad duration", "name: a\nnode_wait: soon\n", "node_wait", 2, ""},
		{"bad cancel grace", "name: a\nnodes: 2\ncancel_grace: forever\n", "cancel_grace", 3, "not a duration"},
		{"negative cancel grace", "name: a\ncancel_grace: -1m\n", "cancel_grace", 2, "not a duration"},
		{"missing name", "nodes: 2\n", "name", 0, "required"},
		{"unknown model", "name: a\nmodel:\n  kind: gpt9\n", "model.kind", 3, "unknown model"},
		{"explicit zero", "name: a\nnodes: 0\n", "nodes", 2, "out of range"},
		{"explicit zero interval", "name: a\ncheckpoint_every: 0\n", "checkpoint_every", 2, "must be positive"},
		{"syntax", "name: [a\n", "", 0, ""},
		{"a tab", "name: a\nnodes: 2\n\tsteps: 5\n", "(syntax)", 3, "a tab character: YAML indents with spaces only"},
		{"a key indented too deep", "name: a\nnodes: 2\n  steps: 5\n", "(syntax)", 2,
			`a ':' where no key may start after "2 steps": a line indented deeper than the one before it`},
		{"a key twice", "name: a\nnodes: 2\nname: b\n", "name", 3, "written twice (first at line 1): a key appears once"},
		{"min_nodes above nodes", "name: a\nnodes: 2\nmin_nodes: 3\n", "min_nodes", 3, "out of range"},
		{"explicit zero min_nodes", "name: a\nmin_nodes: 0\n", "min_nodes", 2, "out of range"},
		{"green without source", "name: a\ngreen:\n  deadline: 24h\n", "green", 2, "trace file"},
		{"green unknown field", "name: a\ngreen:\n  trace: x.csv\n  deadlin: 24h\n", "green.deadlin", 4, "unknown field"},
		{"green bad forecast", "name: a\ngreen:\n  trace: x.csv\n  forecast: magic\n", "green.forecast", 4, "unknown forecast"},
		{"green bad duration", "name: a\ngreen:\n  trace: x.csv\n  min_slot: soon\n", "green.min_slot", 4, "not a duration"},
		{"green bad trace_start", "name: a\ngreen:\n  trace: x.csv\n  trace_start: yesterday\n", "green.trace_start", 4, "RFC 3339"},
		{"green provider needs zone", "name: a\ngreen:\n  provider: electricitymaps\n", "green.zone", 0, "zone"},
		{"green unknown provider", "name: a\ngreen:\n  provider: wattime\n", "green.provider", 3, "unknown provider"},
		{"green uk bad region", "name: a\ngreen:\n  provider: uk\n  zone: London\n", "green.zone", 4, "region id (1–17)"},
		{"green uk region out of range", "name: a\ngreen:\n  provider: uk\n  zone: \"18\"\n", "green.zone", 4, "outward code"},
		{"green negative budget", "name: a\ngreen:\n  trace: x.csv\n  budget_g: -1\n", "green.budget_g", 4, "negative"},
		{"green pue", "name: a\ngreen:\n  trace: x.csv\n  pue: 0.5\n", "green.pue", 4, "out of range"},
		{"batch without threshold", "name: a\ngreen:\n  trace: x.csv\n  batch:\n    min: 48\n", "green.batch.threshold_g", 0, "required"},
		{"batch min below nodes", "name: a\nnodes: 4\ngreen:\n  trace: x.csv\n  batch:\n    threshold_g: 200\n    min: 2\n", "green.batch.min", 7, "rank count 4"},
		{"batch min below ranks", "name: a\nnodes: 2\nranks_per_node: 3\ngreen:\n  trace: x.csv\n  batch:\n    threshold_g: 200\n    min: 4\n", "green.batch.min", 8, "rank count 6"},
		{"ranks per node negative", "name: a\nranks_per_node: -2\n", "ranks_per_node", 2, "out of range 1..64"},
		{"explicit zero keep_checkpoints", "name: a\nkeep_checkpoints: 0\n", "keep_checkpoints", 2, "keep at least 1 (leave it out for 8)"},
		{"negative keep_checkpoints", "name: a\nkeep_checkpoints: -3\n", "keep_checkpoints", 2, "must not be negative"},
		{"explicit zero green deadline", "name: a\ngreen:\n  trace: x.csv\n  deadline: 0s\n", "green.deadline", 4, "0 out of range"},
		{"explicit zero green deadline, external", "name: a\ngreen:\n  trace: x.csv\n  deadline: 0\nexternal:\n  launcher: torchrun\n  entrypoint: [python3, t.py]\n",
			"green.deadline", 4, "0 out of range"},
		{"negative keep_every", "name: a\nnodes: 2\nkeep_every: -100\n", "keep_every", 3, "must not be negative"},
		{"unknown slow node action", "name: a\nslow_node: evict\n", "slow_node", 2, "unknown action \"evict\" (want report, replace or drain)"},
		{"data set not a SHA-256", "name: a\ndata_sha256: ac2983e2\n", "data_sha256", 2, `"ac2983e2" is not a SHA-256 (64 hex digits`},
		{"data set read as a number", "name: a\ndata_sha256: " + strings.Repeat("0", 64) + "\n", "data_sha256", 2, `"0" is not a SHA-256 (64 hex digits, as ` + "`cann-train status`" + ` shows a run's data set); put it in quotes`},
		{"data set not hex", "name: a\ndata_sha256: " + strings.Repeat("g", 64) + "\n", "data_sha256", 2, "not a SHA-256"},
		{"batch max past the data", "name: a\ngreen:\n  trace: x.csv\n  batch:\n    threshold_g: 200\n    max: 70000\n", "green.batch.max", 6, "training set"},
		{"batch range excludes the run's", "name: a\ngreen:\n  trace: x.csv\n  batch:\n    threshold_g: 200\n    min: 100\n    max: 200\n", "green.batch", 4, "global batch 96"},
		{"batch unknown field", "name: a\ngreen:\n  trace: x.csv\n  batch:\n    threshold: 200\n", "green.batch.threshold", 5, "unknown field"},
		{"unknown optimizer", "name: a\noptimizer: lamb\n", "optimizer", 2, "unknown optimizer"},
		{"freeze_step with adam", "name: a\nfreeze_step: 10\n", "freeze_step", 2, "onebit-adam only"},
		{"freeze_step past the end", "name: a\nsteps: 100\noptimizer: onebit-adam\nfreeze_step: 100\n", "freeze_step", 4, "out of range"},
		{"unknown codec", "name: a\ncompression:\n  codec: zstd\n", "compression.codec", 3, "unknown codec"},
		{"powersgd in a run", "name: a\ncompression:\n  codec: powersgd:4\n", "compression.codec", 3, "does not checkpoint"},
		{"bad exchange", "name: a\ncompression:\n  exchange: ring\n", "compression.exchange", 3, "twophase"},
		{"warm-up past the end", "name: a\nsteps: 50\ncompression:\n  warmup_steps: 60\n", "compression.warmup_steps", 4, "out of range"},
		{"warm-up with onebit-adam", "name: a\noptimizer: onebit-adam\ncompression:\n  warmup_steps: 6\n", "compression.warmup_steps", 4, "freeze_step"},
		{"warm-up codec with adam", "name: a\ncompression:\n  warmup_codec: int8\n", "compression.warmup_codec", 3, "onebit-adam only"},
		{"compression unknown field", "name: a\ncompression:\n  ratio: 0.01\n", "compression.ratio", 3, "unknown field"},
		{"negative bucket", "name: a\noverlap:\n  bucket_kib: -4\n", "overlap.bucket_kib", 3, "out of range"},
		{"unknown strategy", "name: a\nstrategy: magic\n", "strategy", 2, "unknown strategy"},
		{"mem bucket", "name: a\nnodes: 2\ncheckpoint_url: mem://\n", "checkpoint_url", 3, "one process's memory"},
		{"mem bucket, external job", "name: a\nexternal:\n  entrypoint: [python, t.py]\ncheckpoint_url: mem://x\n", "checkpoint_url", 4, "one process's memory"},
		{"no bucket driver", "name: a\ncheckpoint_url: ftp://host/ckpt\n", "checkpoint_url", 2, "no storage driver"},
		{"file URL naming a host", "name: a\ncheckpoint_url: file://data/ckpt\n", "checkpoint_url", 2, `names host "data": a file:// URL is an absolute path`},
		{"file URL naming no directory", "name: a\ncheckpoint_url: file:///\n", "checkpoint_url", 2, "names no directory"},
		{"s3 URL naming no bucket", "name: a\ncheckpoint_url: s3://?region=x\n", "checkpoint_url", 2, "names no bucket (s3://bucket)"},
		{"gs URL naming no bucket", "name: a\ncheckpoint_url: gs:///x\n", "checkpoint_url", 2, "names no bucket (gs://bucket)"},
		{"s3 URL with tries that are no number", "name: a\ncheckpoint_url: s3://ckpt?max_attempts=once\n", "checkpoint_url", 2,
			`max_attempts="once" is not a number of tries (1 or more)`},
		// (The message shows the URL with its password masked.)
		{"s3 URL with a password and tries that are no number", "name: a\ncheckpoint_url: 's3://ckpt?endpoint=http://u:secret@minio:9000&max_attempts=x'\n",
			"checkpoint_url", 2, `"s3://ckpt?endpoint=http%3A%2F%2Fu%3Axxxxx%40minio%3A9000&max_attempts=x": max_attempts="x"`},
		// Documents with no body: each once panicked looking for lines.
		{"empty file", "", "(document)", 0, "empty: a job file names at least the run"},
		{"only a comment", "# to do\n", "(document)", 0, "empty"},
		{"bare document marker", "---\n", "(document)", 0, "empty"},
		{"two documents", "name: a\n---\nname: b\nnodes: 0\n", "(document)", 3, "2 YAML documents (separated by ---): a job file is one run"},
		{"a document and an empty one", "name: a\nnodes: 0\n---\n", "nodes", 2, "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("job.yaml", []byte(tc.yaml))
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("want *SpecError, got %T %v", err, err)
			}
			if !strings.Contains(err.Error(), "job.yaml") {
				t.Errorf("error does not name the file: %v", err)
			}
			if tc.wantField == "" {
				return
			}
			var hit *FieldError
			for i := range se.Fields {
				if se.Fields[i].Field == tc.wantField {
					hit = &se.Fields[i]
				}
			}
			if hit == nil {
				t.Fatalf("no error for field %q in %v", tc.wantField, err)
			}
			if hit.Line != tc.wantLine {
				t.Errorf("line = %d, want %d (%v)", hit.Line, tc.wantLine, err)
			}
			if !strings.Contains(hit.Msg, tc.wantMsg) {
				t.Errorf("msg %q lacks %q", hit.Msg, tc.wantMsg)
			}
		})
	}
}

func TestParseCollective(t *testing.T) {
	s, err := Parse("job.yaml", []byte("name: demo\ncollective: auto\n"))
	if err != nil || s.Collective != "auto" || !s.ScansTopology() {
		t.Fatalf("collective auto: %+v %v", s.Collective, err)
	}
	s, err = Parse("job.yaml", []byte("name: demo\n"))
	if err != nil || s.Collective != "ring" || s.ScansTopology() {
		t.Fatalf("default collective: %q %v", s.Collective, err)
	}
	_, err = Parse("job.yaml", []byte("name: demo\nnodes: 2\ncollective: warp\n"))
	var se *SpecError
	if !errors.As(err, &se) || len(se.Fields) != 1 || se.Fields[0].Field != "collective" || se.Fields[0].Line != 3 {
		t.Fatalf("bad collective: %v", err)
	}
	// 784·128 + 128 + 128·10 + 10 parameters, + the loss.
	if got := (RunSpec{Model: ModelSpec{Hidden: []int{128}}}).GradientFloats(); got != 101771 {
		t.Errorf("gradient floats %d", got)
	}
}

// TestParseSyncPolicy: the optimizer, compression and overlap blocks take
// their defaults (codec names canonical) and build the chunks' policy.
func TestParseSyncPolicy(t *testing.T) {
	s, err := Parse("job.yaml", []byte("name: a\nsteps: 1000\noptimizer: onebit-adam\ncompression: {}\noverlap:\n  bucket_kib: 64\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Compression
	if s.FreezeStep != 15 || c.Codec != "sign:1024" || c.Exchange != "twophase" || c.WarmupCodec != "none" || s.Overlap.BucketKiB != 64 {
		t.Fatalf("defaults: freeze %d, %+v, %+v", s.FreezeStep, c, s.Overlap)
	}
	if p := s.SyncPolicy(""); p.Codec != "sign:1024" || !p.Overlap {
		t.Errorf("policy %+v", p)
	}
	if auto, _ := s.AutoCodec(); auto || !s.KeepsCommState() {
		t.Errorf("auto %v, keeps comm state %v", auto, s.KeepsCommState())
	}
	s, err = Parse("job.yaml", []byte("name: a\nsteps: 1000\ncompression: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if auto, at := s.AutoCodec(); !auto || at != 20 {
		t.Errorf("adam default: auto %v from %d, want auto from 20 (2 %% of steps)", auto, at)
	}
	if p := s.SyncPolicy("int8:256"); p.Codec != "int8:256" || p.Warmup != 20 {
		t.Errorf("decided policy %+v", p)
	}
	if st := s.NewSyncStatus(); st == nil || st.Policy != "auto" || st.Codec != "" || st.CompressFrom != 20 {
		t.Errorf("status %+v", st)
	}
	plain, err := Parse("job.yaml", []byte("name: a\n"))
	if err != nil || plain.NewSyncStatus() != nil || plain.KeepsCommState() {
		t.Errorf("a plain run has a sync status or comm state: %v", err)
	}
}

// FuzzParse: whatever the bytes, a job file parses into a spec that
// validates, or fails with a *SpecError naming the file and at least one
// field; never a panic.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"../examples/mnist.yaml", "../examples/mnist-green.yaml", "../examples/mnist-onebit.yaml",
		"../examples/mnist-auto.yaml", "../examples/torch-ddp/job.yaml", "../examples/torch-ddp/job-green.yaml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{"", "---\n", "# c\n", "name: a\nnodes: [1\n", "name: a\nmodel: {hidden: [64, 0]}\n", "name: a\ngreen: {batch: {min: 1}}\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("fuzz.yaml", data)
		if err != nil {
			var se *SpecError
			if !errors.As(err, &se) || len(se.Fields) == 0 || !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("error is not a *SpecError naming the file and a field: %v", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("parsed spec does not validate: %v", err)
		}
	})
}

// TestParseNoDerivedProblems: a value out of range is said once, not
// again through the defaults derived from it (min_nodes from nodes).
func TestParseNoDerivedProblems(t *testing.T) {
	for _, doc := range []string{"name: a\nnodes: 0\n", "name: a\nnodes: -3\n", "name: a\nnodes: 5000\n"} {
		_, err := Parse("job.yaml", []byte(doc))
		var se *SpecError
		if !errors.As(err, &se) || len(se.Fields) != 1 || se.Fields[0].Field != "nodes" {
			t.Errorf("%q: %v; want one problem, nodes", doc, err)
		}
	}
}

func TestCheckNodeID(t *testing.T) {
	for id, ok := range map[string]bool{
		"node-1": true, "spare_2": true, "host.example.com": true, "N0": true,
		"": false, "bad id": false, "node/1": false, "nœud": false, strings.Repeat("n", 65): false,
		// Names of directories and bucket keys (checkpoint.ValidateRun's
		// rule): no parent, hidden file or flag.
		".": false, "..": false, "a..b": false, ".x": false, "-x": false, "_x": false, "a.b-c_d": true,
	} {
		if err := CheckNodeID(id); (err == nil) != ok {
			t.Errorf("CheckNodeID(%q) = %v, want ok %v", id, err, ok)
		}
		// A run name follows the same rule, and what passes it names a
		// run's checkpoints.
		if id == "" {
			continue
		}
		_, err := Parse("j.yaml", []byte(fmt.Sprintf("name: %q\n", id)))
		if (err == nil) != ok {
			t.Errorf("run name %q: %v, want ok %v", id, err, ok)
		}
		if ok {
			if err := checkpoint.ValidateRun(id); err != nil {
				t.Errorf("run name %q passes the spec but not the checkpoint store: %v", id, err)
			}
		}
	}
}

// TestCancelGrace: cancel_grace is read for built-in and external jobs
// alike; unset, it is a minute.
func TestCancelGrace(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       time.Duration
	}{
		{"built-in", "name: a\ncancel_grace: 10m\n", 10 * time.Minute},
		{"external", "name: a\ncancel_grace: 90s\nexternal:\n  entrypoint: [python3, train.py]\n", 90 * time.Second},
		{"unset", "name: a\n", time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("job.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got := s.CancelGraceD(); got != tc.want {
				t.Errorf("cancel grace %v, want %v", got, tc.want)
			}
		})
	}
}

// TestParseNamesEveryUnknownField: the decoder names one unknown field,
// picked from a map at random; the report names them all, in order, the
// same every time.
// TestParseSaysEveryProblem: a value of the wrong type stops the decoder
// at once; the file's other problems — more wrong types, unknown fields,
// impossible values — are said with it, in line order, once each.
func TestParseSaysEveryProblem(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"a wrong type and an unknown field", "name: a\nnodes: three\nlearing_rate: 1\n", []string{
			"line 2: nodes: want a whole number, got three",
			"line 3: learing_rate: unknown field; did you mean learning_rate?"}},
		{"a wrong type and an impossible value", "name: a\nsteps: many\nbatch_per_rank: -1\n", []string{
			"line 2: steps: want a whole number, got many",
			"line 3: batch_per_rank: "}},
		{"wrong types in order", "name: a\nnodes: x\nmodel:\n  kind: mlp-mnist\n  hidden: 64\nchunk_steps: [1]\n", []string{
			"line 2: nodes: want a whole number, got x",
			"line 5: model.hidden: want a list",
			"line 6: chunk_steps: "}},
		{"a nested fraction and a bad name", "name: a b\nmodel:\n  hidden: [64, 32.5]\n", []string{
			`line 1: name: "a b": use letters`,
			"line 3: model.hidden[1]: want a whole number, got 32.5"}},
		// Unset is one rank per node; written, 0 is out of range.
		{"ranks_per_node written 0", "name: a\nranks_per_node: 0\n", []string{"line 2: ranks_per_node: 0 out of range 1..64"}},
		// Values only Validate finds wrong, in another order than the file's.
		{"validation in line order", "name: a\ngreen:\n  trace: t.csv\n  deadline: 24h\n  forecast: bogus\n  budget_g: -5\n  min_slot: 48h\n", []string{
			"line 5: green.forecast: ",
			"line 6: green.budget_g: ",
			"line 7: green.min_slot: "}},
		{"an external job's", "name: a\nexternal:\n  entrypoint: [python, t.py]\n  procs_per_node: x\n  launcher: mpi\n", []string{
			"line 4: external.procs_per_node: want a whole number",
			"line 5: external.launcher: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("job.yaml", []byte(tc.doc))
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("Parse = %v; want a *SpecError", err)
			}
			if len(se.Fields) != len(tc.want) {
				t.Fatalf("%d problems; want %d:\n%v", len(se.Fields), len(tc.want), err)
			}
			for i, w := range tc.want {
				if got := se.Fields[i].Error(); !strings.HasPrefix(got, w) {
					t.Errorf("problem %d: %q; want it to start %q\n%v", i+1, got, w, err)
				}
			}
		})
	}
}

func TestParseNamesEveryUnknownField(t *testing.T) {
	doc := []byte("name: a\nlearing_rate: 0.1\nnodse: 3\nmodel:\n  hiden: [8]\nchunk_step: 10\n")
	want := "job.yaml: 4 problem(s):\n" +
		"  line 2: learing_rate: unknown field; did you mean learning_rate? (`cann-train run --help` lists the fields)\n" +
		"  line 3: nodse: unknown field; did you mean nodes? (`cann-train run --help` lists the fields)\n" +
		"  line 5: model.hiden: unknown field; did you mean hidden? (`cann-train run --help` lists the fields)\n" +
		"  line 6: chunk_step: unknown field; did you mean chunk_steps? (`cann-train run --help` lists the fields)"
	for range 20 {
		_, err := Parse("job.yaml", doc)
		if err == nil || err.Error() != want {
			t.Fatalf("Parse = %v\nwant %s", err, want)
		}
	}
}

// TestMaxRestartsZeroMeansNone: a job file's max_restarts: 0 allows no
// restart (NoRestarts), for built-in and external jobs alike; left out it
// is the default; negative is refused with its line. A RunSpec's 0 (the
// workflow input of a run started before NoRestarts) stays the default.
func TestMaxRestartsZeroMeansNone(t *testing.T) {
	ext := "external:\n  entrypoint: [python3, train.py]\n"
	for _, tc := range []struct {
		name, file string
		want       int    // MaxRestarts after Parse
		budget     int    // RestartBudget
		err        string // a problem Parse reports, "" for none
	}{
		{"built-in, left out", "name: a\n", DefaultMaxRestarts, DefaultMaxRestarts, ""},
		{"built-in, 0", "name: a\nmax_restarts: 0\n", NoRestarts, 0, ""},
		{"built-in, 2", "name: a\nmax_restarts: 2\n", 2, 2, ""},
		{"built-in, -1", "name: a\nmax_restarts: -1\n", 0, 0, "line 2: max_restarts: must not be negative, got -1 (0: no restarts"},
		{"built-in, -3", "name: a\nnodes: 2\nmax_restarts: -3\n", 0, 0, "line 3: max_restarts: must not be negative, got -3 (0: no restarts"},
		{"external, left out", "name: a\n" + ext, DefaultMaxRestarts, DefaultMaxRestarts, ""},
		{"external, 0", "name: a\nmax_restarts: 0\n" + ext, NoRestarts, 0, ""},
		{"external, 4", "name: a\nmax_restarts: 4\n" + ext, 4, 4, ""},
		{"external, -1", "name: a\nmax_restarts: -1\n" + ext, 0, 0, "line 2: max_restarts: must not be negative, got -1 (0: no restarts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("job.yaml", []byte(tc.file))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Count(err.Error(), "max_restarts") != 1 {
					t.Fatalf("Parse: %v; want one problem containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if s.MaxRestarts != tc.want || s.RestartBudget() != tc.budget {
				t.Errorf("max_restarts %d, budget %d; want %d, %d", s.MaxRestarts, s.RestartBudget(), tc.want, tc.budget)
			}
			// The workflow applies the defaults again and validates: the
			// value survives both.
			again := s.WithDefaults()
			if again.MaxRestarts != tc.want {
				t.Errorf("after WithDefaults: %d, want %d", again.MaxRestarts, tc.want)
			}
			if err := again.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
	// A workflow input's 0 (unset) is the default, as before.
	if got := (RunSpec{Name: "a"}).WithDefaults().MaxRestarts; got != DefaultMaxRestarts {
		t.Errorf("RunSpec 0 → %d, want %d", got, DefaultMaxRestarts)
	}
	if err := (RunSpec{Name: "a", MaxRestarts: -2}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "max_restarts") {
		t.Errorf("MaxRestarts -2 validated: %v", err)
	}
}
