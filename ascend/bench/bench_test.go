package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/ascendtest"
)

// The test binary doubles as Launch's child: with BENCH_TEST_CHILD set it
// runs one rank and exits.
func TestMain(m *testing.M) {
	switch os.Getenv("BENCH_TEST_CHILD") {
	case "hang": // a rank that would run on: says its pid, then sleeps
		fmt.Fprintf(os.Stderr, "pid %d\n", os.Getpid())
		time.Sleep(10 * time.Minute)
		os.Exit(0)
	case "parent": // a launcher of two hanging ranks (TestRanksDieWithLauncher)
		exe, err := os.Executable()
		if err == nil {
			opts := small()
			err = Launch(context.Background(), opts, func(args ...string) *exec.Cmd {
				cmd := exec.Command(exe, append([]string{"-test.run=^$"}, args...)...)
				cmd.Env = append(os.Environ(), "BENCH_TEST_CHILD=hang")
				return cmd
			})
		}
		fmt.Fprintln(os.Stderr, "launch:", err)
		os.Exit(1)
	case "crash":
		fmt.Fprintln(os.Stderr, "child: crashing on purpose")
		os.Exit(3)
	case "1":
		args := os.Args[1:]
		for i, a := range args { // skip the test flags before the subcommand
			if a == ChildSubcommand {
				args = args[i:]
				break
			}
		}
		a, err := ParseChildArgs(args)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
			err = RunChild(ctx, a, os.Stdout)
			cancel()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func small() Options {
	return Options{MinBytes: 8, MaxBytes: 64 << 10, StepFactor: 8, Warmup: 2, TargetTime: time.Millisecond, MaxIters: 5, SkipLimits: true}
}

// runInProcess runs opts on world ranks in this process and returns rank
// 0's output and every rank's report.
func runInProcess(t *testing.T, world int, opts Options) (string, []*Report) {
	t.Helper()
	var out bytes.Buffer
	reps := make([]*Report, world)
	var mu sync.Mutex
	ascendtest.Spawn(t, world, func(c *ascend.Communicator) {
		rep, err := Run(context.Background(), c, opts)
		if err != nil {
			t.Errorf("rank %d: %v", c.Rank(), err)
			c.Close()
			return
		}
		mu.Lock()
		reps[c.Rank()] = rep
		mu.Unlock()
		if c.Rank() == 0 {
			if rep.Options.Format == "json" {
				err = rep.WriteJSON(&out)
			} else {
				err = rep.WriteTable(&out)
			}
			if err != nil {
				t.Error(err)
			}
		}
	})
	return out.String(), reps
}

func TestEveryCollectiveEveryAlgorithm(t *testing.T) {
	for _, world := range []int{1, 3, 4} {
		t.Run(fmt.Sprint("world=", world), func(t *testing.T) {
			opts := small()
			opts.Collectives = AllCollectives()
			opts.Algorithms = []ascend.Algorithm{ascend.AlgoAuto, ascend.AlgoRing, ascend.AlgoHD, ascend.AlgoTree}
			opts.Op = ascend.Avg
			opts.Root = world - 1
			out, reps := runInProcess(t, world, opts)
			if t.Failed() {
				return
			}
			rep := reps[0]
			// Every collective with every algorithm it implements.
			want := 0
			for _, c := range opts.Collectives {
				for _, a := range opts.Algorithms {
					if a.Implements(c) {
						want++
					}
				}
			}
			if len(rep.Tables) != want {
				t.Fatalf("%d tables, want %d", len(rep.Tables), want)
			}
			for _, tb := range rep.Tables {
				if tb.Wrong != 0 {
					t.Errorf("%s/%s: %d wrong values", tb.Collective, tb.Algorithm, tb.Wrong)
				}
				if len(tb.Rows) == 0 {
					t.Errorf("%s/%s: no rows", tb.Collective, tb.Algorithm)
				}
				for _, r := range tb.Rows {
					if r.OutOfPlace == nil || r.OutOfPlace.NWrong != 0 || (r.InPlace != nil && r.InPlace.NWrong != 0) {
						t.Errorf("%s/%s size %d: %+v %+v", tb.Collective, tb.Algorithm, r.Size, r.OutOfPlace, r.InPlace)
					}
					if tb.Algorithm != "auto" && world > 1 && r.Algorithm != tb.Algorithm {
						t.Errorf("%s forced %s but %s ran", tb.Collective, tb.Algorithm, r.Algorithm)
					}
				}
			}
			// Every rank computed the same aggregate numbers.
			for r, other := range reps {
				for i := range rep.Tables {
					if !reflect.DeepEqual(other.Tables[i], rep.Tables[i]) {
						t.Errorf("rank %d's table %d differs from rank 0's", r, i)
					}
				}
			}
			if !strings.Contains(out, "# Avg bus bandwidth") || !strings.Contains(out, "out-of-place") {
				t.Errorf("table output:\n%s", out)
			}
			t.Logf("\n%s", out)
		})
	}
}

// TestDataTypes: double and int32 (-d) run every collective through the
// typed functions, checked element by element, with the sizes in their
// element width; int32 refuses avg.
func TestDataTypes(t *testing.T) {
	for _, tc := range []struct {
		dtype string
		op    ascend.Op
		es    int64
	}{{DTypeDouble, ascend.Avg, 8}, {DTypeInt32, ascend.Max, 4}, {"float64", ascend.Sum, 8}} {
		t.Run(tc.dtype, func(t *testing.T) {
			opts := small()
			opts.Collectives = AllCollectives()
			opts.DType, opts.Op, opts.Root = tc.dtype, tc.op, 2
			out, reps := runInProcess(t, 3, opts)
			if t.Failed() {
				return
			}
			want := tc.dtype
			if want == "float64" {
				want = DTypeDouble
			}
			for _, tb := range reps[0].Tables {
				if tb.Wrong != 0 {
					t.Errorf("%s: %d wrong values", tb.Collective, tb.Wrong)
				}
				for _, r := range tb.Rows {
					if r.Type != want || r.OutOfPlace == nil || r.OutOfPlace.NWrong != 0 {
						t.Errorf("%s size %d: type %q, %+v", tb.Collective, r.Size, r.Type, r.OutOfPlace)
					}
					if tb.Collective == "allreduce" && r.Size != int64(r.Count)*tc.es {
						t.Errorf("allreduce: %d elements for %d bytes", r.Count, r.Size)
					}
				}
			}
			if !strings.Contains(out, "type") || !strings.Contains(out, " "+want+" ") {
				t.Errorf("table does not name %s:\n%s", want, out)
			}
		})
	}
	opts := small()
	opts.DType, opts.Op = DTypeInt32, ascend.Avg
	ascendtest.Spawn(t, 2, func(c *ascend.Communicator) {
		if _, err := Run(context.Background(), c, opts); err == nil || !strings.Contains(err.Error(), "avg is not defined on int32") {
			t.Errorf("int32 avg: %v", err)
		}
	})
	opts.DType = "half"
	if err := opts.Defaults().validate(); err == nil || !strings.Contains(err.Error(), `"half"`) {
		t.Errorf("unknown type: %v", err)
	}
}

// TestTableFormat: the rows parse like nccl-tests' (whitespace-separated
// columns in its order) and the bus bandwidth follows the factors.
func TestTableFormat(t *testing.T) {
	opts := small()
	opts.Collectives = []ascend.Collective{ascend.CollAllReduce, ascend.CollAllGather, ascend.CollBroadcast, ascend.CollAllToAll}
	out, reps := runInProcess(t, 4, opts)
	if t.Failed() {
		return
	}
	factor := map[string]float64{"allreduce": 1.5, "allgather": 0.75, "broadcast": 1, "alltoall": 0.75}
	for _, tb := range reps[0].Tables {
		for _, r := range tb.Rows {
			for _, res := range []*Result{r.OutOfPlace, r.InPlace} {
				if res == nil {
					continue
				}
				if alg := float64(r.Size) / (res.Time / 1e6) / 1e9; !near(alg, res.AlgBW) {
					t.Errorf("%s size %d: algbw %v, size/time %v", tb.Collective, r.Size, res.AlgBW, alg)
				}
				if !near(res.BusBW, res.AlgBW*factor[tb.Collective]) {
					t.Errorf("%s: busbw %v for algbw %v", tb.Collective, res.BusBW, res.AlgBW)
				}
			}
		}
	}
	rows := 0
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 14 || f[2] != "float" {
			t.Errorf("row %q: %d fields", line, len(f))
		}
		rows++
	}
	if rows == 0 {
		t.Errorf("no rows in:\n%s", out)
	}
}

func near(a, b float64) bool { return a == b || (a-b)/max(a, b) < 1e-3 && (b-a)/max(a, b) < 1e-3 }

func TestJSON(t *testing.T) {
	opts := small()
	opts.Format = "json"
	opts.MaxBytes = 1 << 10
	out, _ := runInProcess(t, 2, opts)
	var doc struct {
		Version int `json:"version"`
		Ranks   int `json:"ranks"`
		Options Options
		Tables  []struct {
			Collective string
			Results    []struct {
				Size       int64
				OutOfPlace struct {
					Time, BusBW float64
					NWrong      int64
				} `json:"out_of_place"`
			} `json:"results"`
			AvgBusBW float64 `json:"avg_bus_bandwidth"`
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if doc.Version != JSONVersion || doc.Ranks != 2 || len(doc.Tables) != 1 || doc.Tables[0].Collective != "allreduce" || len(doc.Tables[0].Results) == 0 {
		t.Errorf("%+v", doc)
	}
	if doc.Options.Format != "json" || doc.Options.Collectives[0] != ascend.CollAllReduce {
		t.Errorf("options did not round-trip: %+v", doc.Options)
	}
}

func TestExpectedMatchesBruteForce(t *testing.T) {
	for _, p := range []int{1, 2, 3, 8, 9} {
		for _, op := range []ascend.Op{ascend.Sum, ascend.Avg, ascend.Max, ascend.Min} {
			for i := range 200 {
				acc := value(7, 0, i)
				for r := 1; r < p; r++ {
					v := value(7, r, i)
					switch op {
					case ascend.Max:
						acc = max(acc, v)
					case ascend.Min:
						acc = min(acc, v)
					default:
						acc += v
					}
				}
				if op == ascend.Avg {
					acc /= float32(p)
				}
				if got := expected(7, i, p, op); got != acc {
					t.Fatalf("p=%d %v [%d]: %v, want %v", p, op, i, got, acc)
				}
			}
		}
	}
	if value(1, 0, 5) == value(1, 1, 5) {
		t.Error("values not distinct per rank")
	}
}

func TestFlagsAndSizes(t *testing.T) {
	var o Options
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	o.RegisterFlags(fs)
	err := fs.Parse([]string{"-b", "1K", "-e", "256M", "-f", "4", "-n", "7", "-c", "0", "--op", "max", "-o", "json",
		"--coll", "allreduce,all_gather", "--algo", "ring,hd", "--np", "3", "-r", "1", "--limits", "0", "--shm"})
	if err != nil {
		t.Fatal(err)
	}
	want := Options{MinBytes: 1 << 10, MaxBytes: 256 << 20, StepFactor: 4, Iters: 7, SkipCheck: true, Op: ascend.Max, Format: "json",
		Collectives: []ascend.Collective{ascend.CollAllReduce, ascend.CollAllGather}, Algorithms: []ascend.Algorithm{ascend.AlgoRing, ascend.AlgoHD},
		Ranks: 3, Root: 1, SkipLimits: true, SharedMemory: true,
		Warmup: 5, TargetTime: 200 * time.Millisecond, DType: DTypeFloat} // the defaults RegisterFlags fills in
	if !reflect.DeepEqual(o, want) {
		t.Errorf("parsed %+v\nwant   %+v", o, want)
	}
	if s := (Options{MinBytes: 8, MaxBytes: 100, StepFactor: 2}).Defaults().sizes(); !reflect.DeepEqual(s, []int64{8, 16, 32, 64}) {
		t.Errorf("sizes %v", s)
	}
	if s := (Options{MinBytes: 8, MaxBytes: 30, StepBytes: 8}).Defaults().sizes(); !reflect.DeepEqual(s, []int64{8, 16, 24}) {
		t.Errorf("sizes +8: %v", s)
	}
	for in, want := range map[string]int64{"8": 8, "1K": 1024, "256M": 256 << 20, "1G": 1 << 30, "2MiB": 2 << 20, "4kb": 4096} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v", in, got, err)
		}
		if got, _ := ParseSize(FormatSize(want)); got != want {
			t.Errorf("FormatSize(%d) does not round-trip", want)
		}
	}
	for _, bad := range []string{"12Q", "-1", "8589934592G", "17179869184G", "9223372036854775807K"} {
		if v, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", bad, v)
		}
	}
	if v, err := ParseSize("8589934591G"); err != nil || v != 8589934591<<30 {
		t.Errorf("the largest size in G: %d, %v", v, err)
	}
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{MinBytes: 1 << 10, MaxBytes: 512}, "-e 512 is below -b 1K"},
		{Options{StepFactor: 1}, "-f 1 would never grow"},
		{Options{StepFactor: -2}, "-f -2 would never grow"},
		{Options{Ranks: -1}, "--np -1"},
		{Options{Iters: -3}, "negative"},
		{Options{Algorithms: []ascend.Algorithm{ascend.AlgoPairwise}}, "--algo pairwise implements none of the collectives asked for ([allreduce])"},
	} {
		if err := tc.o.checkRange(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.o, err, tc.want)
		}
	}
	for _, ok := range []Options{{}, {MinBytes: 8, MaxBytes: 8}, {StepFactor: 1, StepBytes: 4}, {MinBytes: 1 << 20}} {
		if err := ok.checkRange(); err != nil {
			t.Errorf("%+v refused: %v", ok, err)
		}
	}
	a := ChildArgs{Rank: 1, Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, Session: "s", Token: []byte{1, 2, 3}, ListenFD: 3, Options: want}
	args, err := a.Args()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseChildArgs(append([]string{ChildSubcommand}, args...))
	if err != nil || !reflect.DeepEqual(back, a) {
		t.Errorf("child args round trip: %+v, %v\nwant %+v", back, err, a)
	}
}

// selfCmd makes Launch's children of this test binary (see TestMain).
func selfCmd(exe string) func(args ...string) *exec.Cmd {
	return func(args ...string) *exec.Cmd {
		cmd := exec.Command(exe, append([]string{"-test.run=^$"}, args...)...)
		cmd.Env = append(os.Environ(), "BENCH_TEST_CHILD=1")
		return cmd
	}
}

// TestLaunch runs ranks as separate processes (this test binary).
func TestLaunch(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	opts := small()
	opts.Ranks = 3
	opts.SkipLimits = false
	opts.Collectives = []ascend.Collective{ascend.CollAllReduce, ascend.CollReduceScatter}
	opts.Stdout, opts.Stderr = &out, &errs
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = Launch(ctx, opts, selfCmd(exe))
	if err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, errs.String())
	}
	s := out.String()
	if !strings.Contains(s, "3 ranks") || !strings.Contains(s, "limits before") || !strings.Contains(s, "limits after") || strings.Count(s, "# Avg bus bandwidth") != 2 || !strings.Contains(s, "Wrong values         : 0 OK") {
		t.Errorf("report:\n%s\nstderr:\n%s", s, errs.String())
	}
	t.Logf("\n%s", s)

	// A failing child fails the launch and stops the others.
	err = Launch(ctx, opts, func(args ...string) *exec.Cmd {
		cmd := exec.Command(exe, append([]string{"-test.run=^$"}, args...)...)
		cmd.Env = append(os.Environ(), "BENCH_TEST_CHILD=1")
		if strings.Contains(strings.Join(args, " "), "--rank 1 ") {
			cmd.Env = append(cmd.Env, "BENCH_TEST_CHILD=crash")
		}
		return cmd
	})
	if err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("launch with a dead rank: %v", err)
	}
}

func TestLimits(t *testing.T) {
	one, duplex, err := MeasureLoopbackTCP(context.Background(), 1<<20)
	if err != nil || one <= 0 || duplex <= 0 {
		t.Fatalf("%v %v %v", one, duplex, err)
	}
	if m := MeasureMemcpy(1 << 20); m <= 0 {
		t.Fatal(m)
	}
	l, err := MeasureLimits(context.Background(), 1<<20, 3)
	if err != nil || l.Ends != 3 || l.TCPRing <= 0 || l.MemcpyEach <= 0 {
		t.Fatalf("%+v %v", l, err)
	}
	if _, err := MeasureLoopbackRing(context.Background(), 1<<20, 1); err == nil {
		t.Error("a ring of one end was measured")
	}
	if l, err := MeasureLimits(context.Background(), 1<<20, 2); err != nil || l.Ends != 0 || l.TCPRing != 0 {
		t.Errorf("2 ranks: %+v %v", l, err)
	}
}

// TestManualReport runs a real benchmark in separate processes when
// ASCEND_BENCH_ARGS holds its flags (see Options.RegisterFlags), e.g.
//
//	ASCEND_BENCH_ARGS='--np 4 -b 4M -e 64M -f 16 --algo ring,hd,tree' \
//	    go test -run TestManualReport -v ./ascend/bench
func TestManualReport(t *testing.T) {
	spec := os.Getenv("ASCEND_BENCH_ARGS")
	if spec == "" {
		t.Skip("set ASCEND_BENCH_ARGS to run a benchmark")
	}
	var opts Options
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	opts.RegisterFlags(fs)
	if err := fs.Parse(strings.Fields(spec)); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	err = Launch(context.Background(), opts, func(args ...string) *exec.Cmd {
		cmd := exec.Command(exe, append([]string{"-test.run=^$"}, args...)...)
		cmd.Env = append(os.Environ(), "BENCH_TEST_CHILD=1")
		return cmd
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLaunchSharedBuffers: -shm -R 1 runs AllReduce on shared buffers
// with the direct algorithm (the algo column says so), checked at every
// size; -R 1 without -shm is refused.
func TestLaunchSharedBuffers(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	opts := small()
	opts.Ranks = 3
	opts.SharedMemory, opts.SharedBuffers = true, true
	opts.MaxBytes = 1 << 20
	opts.Stdout, opts.Stderr = &out, &errs
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	self := selfCmd(exe)
	if err := Launch(ctx, opts, self); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, errs.String())
	}
	s := out.String()
	rows := 0
	for l := range strings.Lines(s) {
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(l, "#") {
			rows++
			if f[len(f)-1] != "direct" {
				t.Errorf("row not direct: %s", l)
			}
		}
	}
	if rows < 4 || !strings.Contains(s, "-R 1") || !strings.Contains(s, "Wrong values         : 0 OK") {
		t.Errorf("report (%d rows):\n%s", rows, s)
	}
	opts.SharedMemory = false
	if err := Launch(ctx, opts, self); err == nil || !strings.Contains(err.Error(), "--shm") {
		t.Errorf("-R 1 without -shm: %v", err)
	}
}

func TestLimitSizes(t *testing.T) {
	for _, tc := range []struct {
		max  int64
		want []int64
	}{
		{8, []int64{1 << 20}}, // a tiny sweep: 8 B would time a message's latency
		{8 << 10, []int64{1 << 20}},
		{1 << 20, []int64{1 << 20}},
		{8 << 20, []int64{1 << 20, 4 << 20}},
		{256 << 20, []int64{1 << 20, 4 << 20, 16 << 20, 64 << 20}},
	} {
		if got := limitSizes(tc.max); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("limitSizes(%d) = %v, want %v", tc.max, got, tc.want)
		}
	}
}

// TestTouch: with Touch every timed call runs on the saved input, so an
// in-place AllReduce Sum timed five times leaves one sum of the input, not
// the input summed five times over; without it the sums compound. Touch
// also reads and writes the buffers each collective really uses, and a
// whole run with it checks clean and says so in its header.
func TestTouch(t *testing.T) {
	const world, n = 2, 1000
	for _, touch := range []bool{true, false} {
		ascendtest.Spawn(t, world, func(c *ascend.Communicator) {
			opts := small()
			opts.Touch = touch
			b := &bufs{send: make([]float32, n), recv: make([]float32, n), pattern: make([]float32, n), sink: make([]float32, n)}
			for i := range b.recv {
				b.recv[i] = float32(i % 7)
			}
			x := &op{comm: c, coll: ascend.CollAllReduce, opts: opts, count: n, send: b.send, recv: b.recv, inPlace: true, b: b}
			if _, err := x.time(context.Background(), 5); err != nil {
				t.Errorf("rank %d: %v", c.Rank(), err)
				c.Close()
				return
			}
			want := float32(world) // one sum; without touch 2^5 (one more per call)
			if !touch {
				want = 32
			}
			for i, v := range b.recv {
				if v != want*float32(i%7) {
					t.Errorf("touch=%v rank %d: recv[%d] = %v, want %v", touch, c.Rank(), i, v, want*float32(i%7))
					return
				}
			}
		})
	}
	send, recv := make([]float32, 8), make([]float32, 8)
	for _, tc := range []struct {
		coll    ascend.Collective
		inPlace bool
		in, out []float32
	}{
		{ascend.CollAllReduce, false, send, recv},
		{ascend.CollAllReduce, true, recv, recv},
		{ascend.CollReduceScatter, true, send, send},
		{ascend.CollAllGather, true, recv, recv},
		{ascend.CollAllToAll, true, send, recv},
	} {
		x := &op{coll: tc.coll, send: send, recv: recv, inPlace: tc.inPlace}
		if in, out := x.touched(); &in[0] != &tc.in[0] || &out[0] != &tc.out[0] {
			t.Errorf("%v in-place=%v: touches the wrong buffers", tc.coll, tc.inPlace)
		}
	}
	opts := small()
	opts.Touch = true
	opts.Collectives = AllCollectives()
	out, reps := runInProcess(t, 3, opts)
	for _, tb := range reps[0].Tables {
		if tb.Wrong != 0 {
			t.Errorf("%s: %d wrong values", tb.Collective, tb.Wrong)
		}
	}
	if !strings.Contains(out, "# touch: ") {
		t.Errorf("no touch line in the header:\n%s", out)
	}
}

func TestRankProcs(t *testing.T) {
	tests := []struct {
		procs  int
		envSet bool
		ranks  int
		want   int
	}{
		{0, false, 8, 1},   // default, ranks fill the cores: one P per rank
		{0, false, 12, 1},  // oversubscribed: one P per rank
		{0, false, 4, 0},   // spare cores: the runtime's own
		{0, true, 8, 0},    // GOMAXPROCS in the environment wins over the default
		{3, true, 8, 3},    // the flag wins over the environment
		{2, false, 4, 2},   //
		{-1, false, 12, 8}, // Go's default: the cores
	}
	for _, tc := range tests {
		if got := rankProcs(tc.procs, tc.envSet, tc.ranks, 8); got != tc.want {
			t.Errorf("rankProcs(%d, env %v, %d ranks) = %d, want %d", tc.procs, tc.envSet, tc.ranks, got, tc.want)
		}
	}
}
