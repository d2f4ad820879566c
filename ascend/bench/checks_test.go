package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/pflag"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

// parseFlags parses args with RegisterFlags and reports which flags were
// given, as a command line's parser would.
func parseFlags(t *testing.T, args ...string) (Options, func(string) bool, error) {
	t.Helper()
	var o Options
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.RegisterFlags(fs)
	err := fs.Parse(args)
	return o, fs.Changed, err
}

// TestExplicitZeros: a value Options reads as "unset" is refused when it
// was given on the command line, rather than replaced by the default;
// the same values left out are the defaults.
func TestExplicitZeros(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "": accepted
	}{
		{nil, ""},
		{[]string{"-b", "0"}, "-b 0: want at least 1 byte (default 8)"},
		{[]string{"-e", "0"}, "-e 0: want at least 1 byte (default 256M)"},
		{[]string{"-i", "0"}, "-i 0: want at least 1 byte"},
		{[]string{"-f", "0"}, "-f 0 would never grow the size"},
		{[]string{"-f", "0", "-i", "4"}, ""}, // -i replaces -f
		{[]string{"-w", "0"}, "-w 0: want at least 1 warm-up iteration (default 5)"},
		{[]string{"--np", "0"}, "--np 0: want 1 or more ranks"},
		{[]string{"--minbytes", "0"}, "-b 0: want at least 1 byte"},
		{[]string{"--maxbytes", "0"}, "-e 0: want at least 1 byte"},
		{[]string{"--stepbytes", "0"}, "-i 0: want at least 1 byte"},
		{[]string{"--stepfactor", "0"}, "-f 0 would never grow the size"},
		{[]string{"--warmup-iters", "0"}, "-w 0: want at least 1 warm-up iteration"},
		{[]string{"--warmup_iters", "0"}, "-w 0: want at least 1 warm-up iteration"}, // nccl-tests' spelling, deprecated
		{[]string{"--target-time", "0s"}, "-T 0s: want a positive duration"},
		{[]string{"-T", "0s"}, "-T 0s: want a positive duration (default 200ms)"},
		{[]string{"-T", "-1s"}, "-T -1s: want a positive duration"},
		{[]string{"-b", "1", "-e", "1", "-f", "3", "-w", "1", "--np", "1", "-T", "1ms", "-n", "0"}, ""},
	} {
		o, set, err := parseFlags(t, tc.args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err = o.CheckSetFlags(set)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestFlagUsage: the usage shows the real defaults and names what each
// flag takes, and the errors of 0/1 and duration flags say what they
// want.
func TestFlagUsage(t *testing.T) {
	var o Options
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	o.RegisterFlags(fs)
	for name, want := range map[string]string{"minbytes": "8", "maxbytes": "256M", "stepfactor": "2", "warmup-iters": "5", "target-time": "200ms", "datatype": "float", "output": "table",
		"np": "2", "coll": "allreduce", "algo": "auto", "op": "sum", "check": "1", "limits": "1", "shared-buffers": "0"} {
		if f := fs.Lookup(name); f == nil || f.DefValue != want {
			t.Errorf("--%s: default %v, want %q", name, f, want)
		}
	}
	for name, want := range map[string]string{"minbytes": "size", "sockbuf": "size", "algo": "list", "coll": "list", "check": "0|1", "limits": "0|1", "shared-buffers": "0|1", "touch": "0|1", "target-time": "duration", "spin": "duration"} {
		if got := fs.Lookup(name).Value.Type(); got != want {
			t.Errorf("--%s: type %v, want %q", name, got, want)
		}
	}
	if u := fs.Lookup("algo").Usage; !strings.Contains(u, "auto, ring, hd, tree, rd, hier, pairwise") || !strings.Contains(u, "bruck") || !strings.Contains(u, "direct") {
		t.Errorf("--algo usage lists not every algorithm: %s", u)
	}
	for _, tc := range []struct {
		args       []string
		want, also string
	}{
		{[]string{"--limits", "2"}, "--limits", "want 0 or 1"},
		{[]string{"-c", "2"}, "-c", "want 0 or 1"},
		{[]string{"--spin", "-1"}, "--spin", "want a duration with its unit"},
		{[]string{"-T", "1"}, "-T", "want a duration with its unit"},
	} {
		_, _, err := parseFlags(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.also) || tc.want != "-c" && strings.Contains(err.Error(), "-c ") {
			t.Errorf("%v: %v, want an error naming %s: %s", tc.args, err, tc.want, tc.also)
		}
	}
	if o, _, err := parseFlags(t, "--spin", "-1ns"); err != nil || o.Spin != -1 {
		t.Errorf("-spin -1ns: %v, %v", o.Spin, err)
	}
}

// TestLaunchRefusesUpFront: options every rank would refuse, a forced
// direct algorithm without shared buffers (the ring would run under its
// name) and a sweep larger than the host's memory fail before any rank
// starts.
func TestLaunchRefusesUpFront(t *testing.T) {
	direct := small()
	direct.Algorithms = []ascend.Algorithm{ascend.AlgoDirect, ascend.AlgoRing}
	directShm := direct
	directShm.SharedMemory = true
	huge := small()
	huge.MaxBytes = 1 << 50
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"root", Options{Root: 5, Ranks: 2}, "-r 5: want a rank below the 2 launched"},
		{"negative root", Options{Root: -1}, "-r -1: want a rank, 0 or more"},
		{"negative chunk", Options{ChunkBytes: -5}, "--chunk -5: want 0 (the default) or 4 to"},
		{"tiny chunk", Options{ChunkBytes: 2}, "--chunk 2: want 0"},
		{"direct over TCP", direct, "--algo direct reads the peers' buffers in shared memory: it needs -R 1"},
		{"direct without -R 1", directShm, "--algo direct"},
	}
	if _, ok := memAvailable(); ok {
		cases = append(cases, struct {
			name string
			o    Options
			want string
		}{"memory", huge, "-e 1048576G needs 2097152.0 GiB of buffers per rank (send, receive) × 2 ranks = 4194304.0 GiB; this host has"})
	}
	for _, tc := range cases {
		var errs bytes.Buffer
		tc.o.Stderr = &errs
		err := Launch(context.Background(), tc.o, func(args ...string) *exec.Cmd {
			t.Errorf("%s: a rank was started", tc.name)
			return exec.Command("true")
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestCheckMemory(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		o         Options
		available uint64
		want      string // "": fits
	}{
		// allreduce: send and receive of -e each.
		{Options{MaxBytes: 1 * gib, Ranks: 2}, 4*gib + 1, ""},
		{Options{MaxBytes: 1 * gib, Ranks: 2}, 4*gib - 1, "-e 1G needs 2.0 GiB of buffers per rank (send, receive) × 2 ranks = 4.0 GiB; this host has 4.0 GiB available"},
		{Options{MaxBytes: 1 * gib, Ranks: 2, Touch: true}, 4*gib + 1, "(send, receive, pattern and sink (--touch 1)) × 2 ranks = 8.0 GiB"},
		// alltoall on 4 ranks: -e each way too.
		{Options{MaxBytes: 1 * gib, Ranks: 4, Collectives: []ascend.Collective{ascend.CollAllToAll}}, 7 * gib, "= 8.0 GiB"},
	} {
		err := tc.o.Defaults().checkMemory(tc.available)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v with %d B: %v, want %q", tc.o, tc.available, err, tc.want)
		}
	}
	for in, want := range map[string]uint64{
		"MemTotal:       32594420 kB\nMemFree:         1234 kB\nMemAvailable:   22334456 kB\n": 22334456 << 10,
		"MemTotal:       32594420 kB\n": 0,
		"MemAvailable:   x kB\n":        0,
	} {
		got, ok := parseMemAvailable(strings.NewReader(in))
		if got != want || ok != (want > 0) {
			t.Errorf("parseMemAvailable(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
}

// cancelOnRow is a writer that cancels when a table row (a line not
// starting with #) has been written.
type cancelOnRow struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelOnRow) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	for line := range strings.Lines(w.buf.String()) {
		if !strings.HasPrefix(line, "#") && strings.HasSuffix(line, "\n") {
			w.cancel()
		}
	}
	return n, err
}

func (w *cancelOnRow) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestRowsAsTheyCome: rank 0 prints each row as soon as its size is
// measured, so a run stopped early (here: cancelled once a row is out)
// keeps the header and the rows it measured; a complete run prints what
// WriteTable prints for its report.
func TestRowsAsTheyCome(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelOnRow{cancel: cancel}
	errs := make([]error, 2)
	opts := small()
	opts.MaxBytes = 1 << 20
	ascendtest.Spawn(t, 2, func(c *ascend.Communicator) {
		errs[c.Rank()] = RunRank(ctx, c, opts, out)
		if errs[c.Rank()] != nil {
			c.Close()
		}
	})
	s := out.String()
	if !errors.Is(errs[0], context.Canceled) {
		t.Errorf("rank 0: %v, want the cancellation", errs[0])
	}
	if !strings.HasPrefix(s, "# ascend collective benchmark") || !strings.Contains(s, "\n           8  ") {
		t.Errorf("a run stopped after its first row printed:\n%s", s)
	}

	var live bytes.Buffer
	var rep *Report
	opts = small()
	opts.Collectives = []ascend.Collective{ascend.CollAllReduce, ascend.CollAllGather}
	ascendtest.Spawn(t, 3, func(c *ascend.Communicator) {
		var tw *tableWriter
		if c.Rank() == 0 {
			tw = newTableWriter(&live)
		}
		r, err := run(context.Background(), c, opts, tw)
		if err != nil {
			t.Errorf("rank %d: %v", c.Rank(), err)
			c.Close()
			return
		}
		if c.Rank() == 0 {
			rep = r
		}
	})
	if t.Failed() {
		return
	}
	var whole bytes.Buffer
	if err := rep.WriteTable(&whole); err != nil {
		t.Fatal(err)
	}
	if live.String() != whole.String() {
		t.Errorf("printed as it went:\n%s\nWriteTable:\n%s", live.String(), whole.String())
	}
}

// TestEmptySizes: a size that rounds down to no element (per rank for
// reducescatter) gives one row of 0 bytes, as in nccl-tests, with a note,
// and does not count in the average; with -c 0 the footer says the values
// were not checked.
func TestEmptySizes(t *testing.T) {
	opts := small()
	opts.MinBytes, opts.MaxBytes, opts.StepFactor = 4, 64, 2
	opts.Collectives = []ascend.Collective{ascend.CollReduceScatter, ascend.CollAllReduce}
	opts.SkipCheck = true
	out, reps := runInProcess(t, 3, opts)
	if t.Failed() {
		return
	}
	rs, ar := reps[0].Tables[0], reps[0].Tables[1]
	var sizes []int64
	var sum float64
	n := 0
	for _, r := range rs.Rows {
		sizes = append(sizes, r.Size)
		if r.Size > 0 {
			sum += r.OutOfPlace.BusBW + r.InPlace.BusBW
			n += 2
		}
	}
	if fmt.Sprint(sizes) != "[0 12 24 60]" || ar.Rows[0].Size != 4 {
		t.Errorf("reducescatter sizes %v (want 4 and 8 B as one row of 0), allreduce from %d", sizes, ar.Rows[0].Size)
	}
	if n == 0 || !near(rs.AvgBusBW, sum/float64(n)) {
		t.Errorf("average %v, want %v: the mean over the %d placements of more than 0 bytes", rs.AvgBusBW, sum/float64(n), n)
	}
	want := "# sizes below 12 B round down to 0 float elements: nothing to move, left out of the average\n           0  "
	if strings.Count(out, "round down to 0") != 1 || !strings.Contains(out, want) {
		t.Errorf("want one note %q before the 0-byte row:\n%s", want, out)
	}
	if rs.Wrong != -1 || strings.Count(out, "# Wrong values         : not checked (-c 0)") != 2 || strings.Contains(out, "0 OK") {
		t.Errorf("unchecked: nwrong %d, footer:\n%s", rs.Wrong, out)
	}
}
