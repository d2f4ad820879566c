// Package bench is the collective benchmark of ascend, in the style of
// nccl-tests (and HCCL Test, AWS nccom-test): a size sweep printing, per
// collective,
//
//	size count type redop root | time algbw busbw #wrong (out-of-place) | … (in-place)
//
// with GB = 1e9 B, busbw = algbw × the collective's bus factor (AllReduce
// 2(n-1)/n; ReduceScatter, AllGather, AllToAll (n-1)/n; Broadcast, Reduce
// 1), and an "Avg bus bandwidth" footer, so its numbers compare side by
// side with NCCL, HCCL, RCCL and Open MPI runs of the same shape. Time is
// the mean over ranks of back-to-back operations after a warm-up; the
// iteration count is agreed by broadcasting rank 0's median warm-up time
// (as Gloo's benchmark runner does), so ranks never disagree on how many
// operations to run. Every size is checked once (unless -c 0) with
// distinct seeded values per rank before it is timed (#wrong counts wrong
// elements over all ranks). The physical limits of the host, loopback TCP
// and memcpy, are measured in the same run and printed in the header, and
// each row's busbw is compared with the one its links face (JSON: limit,
// bus_bw_pct_of_limit), each table's footer giving the best of them.
//
// RunRank runs one rank over an existing communicator (rank 0 prints: a
// table row by row as the sizes are measured, or JSON at the end);
// Launch runs N ranks as separate OS processes of the calling program,
// which must hand its "bench-rank" subcommand's arguments to
// ParseChildArgs and RunChild.
package bench

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/cann-train/cann-train/ascend"
)

// Options describes a benchmark run. The zero value runs the defaults
// (see Defaults).
type Options struct {
	// Collectives to run, in order (default AllReduce). Each gets a table
	// per algorithm in Algorithms.
	Collectives []ascend.Collective `json:"collectives,omitempty"`
	// Algorithms to force, one table each; empty or AlgoAuto means the
	// communicator's choice (cost model or ASCEND_ALGO). Algorithms a
	// collective does not implement are skipped for it, and so are forced
	// ones on the reductions of double and int32 (which run gather or
	// shares whatever is forced); tables that would run the same calls
	// (on shared buffers auto, ring and direct all run direct) are
	// measured once (see planTables).
	Algorithms []ascend.Algorithm `json:"algorithms,omitempty"`
	// MinBytes and MaxBytes bound the sweep of nccl-tests sizes (-b, -e);
	// defaults 8 B and 256 MiB.
	MinBytes int64 `json:"min_bytes,omitempty"`
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// StepFactor multiplies the size each step (-f, default 2) unless
	// StepBytes (-i) is positive, which adds instead.
	StepFactor int   `json:"step_factor,omitempty"`
	StepBytes  int64 `json:"step_bytes,omitempty"`
	// Iters fixes the timed iterations per size (-n); 0 derives them from
	// the warm-up: TargetTime / median warm-up time, within [MinIters,
	// MaxIters].
	Iters      int           `json:"iters,omitempty"`
	Warmup     int           `json:"warmup,omitempty"`    // -w, default 5
	TargetTime time.Duration `json:"-"`                   // -T; JSON: target_time_us
	MinIters   int           `json:"min_iters,omitempty"` // default 3
	MaxIters   int           `json:"max_iters,omitempty"` // default 10000
	// SkipCheck skips the correctness check (-c 0).
	SkipCheck bool `json:"skip_check,omitempty"`
	// Op is the reduction (default Sum); Root the root of Broadcast and
	// Reduce (default 0).
	Op   ascend.Op `json:"op,omitempty"`
	Root int       `json:"root,omitempty"`
	// DType is the element type (-d): float (default), double or int32,
	// as nccl-tests names them; double and int32 run the typed
	// collectives (ascend.AllReduceOf and the others).
	DType string `json:"dtype,omitempty"`
	// Format is "table" (default; "text" is the same) or "json".
	Format string `json:"format,omitempty"`
	// SkipLimits skips measuring loopback TCP and memcpy.
	SkipLimits bool `json:"skip_limits,omitempty"`
	// Ranks is the number of processes Launch starts (default 2).
	Ranks int `json:"ranks,omitempty"`
	// ChunkBytes is the communicators' frame size (0: ascend's default).
	ChunkBytes int `json:"chunk_bytes,omitempty"`
	// SharedMemory makes Launch's ranks link over shared memory (they share
	// the host) instead of loopback TCP.
	SharedMemory bool `json:"shared_memory,omitempty"`
	// SharedBuffers puts the send and receive buffers in shared memory
	// (ascend.Communicator.AllocShared; needs SharedMemory), so ranks of one
	// host read each other's buffers directly: nccl-tests' -R (user-buffer
	// registration).
	SharedBuffers bool `json:"shared_buffers,omitempty"`
	// Touch makes every timed call part of a training step's pattern: its
	// input is rewritten just before it (copied from a saved pattern) and
	// its output read just after it (copied out), so the time includes
	// fetching data that another core wrote and finding the results
	// wherever the collective left them (another core's cache, memory),
	// which the bare loop of nccl-tests never pays. Off by default.
	Touch bool `json:"touch,omitempty"`
	// Spin is tcp.Options.Spin of Launch's ranks (0: automatic).
	Spin time.Duration `json:"-"` // JSON: spin_us
	// SocketBuffer is tcp.Options.SocketBuffer (0: kernel autotuning).
	SocketBuffer int64 `json:"socket_buffer,omitempty"`
	// Procs is GOMAXPROCS in each of Launch's rank processes. 0 means 1
	// where ranks are at least as many as cores — a rank's collectives run
	// on one goroutine plus the transport's syscalls, like an MPI rank's
	// one thread, and idle Ps of a Go process spin looking for work, taking
	// cores from the other ranks — and Go's default on a host with spare
	// cores or when the GOMAXPROCS variable is set; negative means Go's
	// default (the number of cores). The limits are measured with every
	// core either way.
	Procs int `json:"procs,omitempty"`

	// Stdout and Stderr receive the children's output in Launch (default
	// os.Stdout and os.Stderr). Only rank 0 writes to stdout.
	Stdout io.Writer `json:"-"`
	Stderr io.Writer `json:"-"`
}

// Data types (-d).
const (
	DTypeFloat  = "float"
	DTypeDouble = "double"
	DTypeInt32  = "int32"
)

// elemBytes is the size of one element of the data type.
func (o Options) elemBytes() int {
	if o.DType == DTypeDouble {
		return 8
	}
	return 4
}

// checkRange refuses what the user set that Defaults would otherwise
// quietly replace: a size sweep that ends below its start, a factor that
// never grows the size, negative counts. (A zero is the default here;
// CheckSetFlags refuses one given on the command line.)
func (o Options) checkRange() error {
	switch {
	case o.MinBytes > 0 && o.MaxBytes > 0 && o.MaxBytes < o.MinBytes:
		return fmt.Errorf("bench: -e %s is below -b %s", FormatSize(o.MaxBytes), FormatSize(o.MinBytes))
	case o.StepBytes == 0 && (o.StepFactor == 1 || o.StepFactor < 0):
		return neverGrows(o.StepFactor)
	case o.Ranks < 0:
		return fmt.Errorf("bench: --np %d: want 1 or more ranks", o.Ranks)
	case o.StepBytes < 0 || o.Iters < 0 || o.Warmup < 0:
		return fmt.Errorf("bench: negative -i %d, -n %d or -w %d", o.StepBytes, o.Iters, o.Warmup)
	}
	// An algorithm none of the collectives has would print no table.
	d := o.Defaults()
	colls := d.Collectives
	for _, a := range o.Algorithms {
		if slices.ContainsFunc(colls, func(c ascend.Collective) bool { return d.hasTable(a, c) }) {
			continue
		}
		var typed []string
		for _, c := range colls {
			if a.Implements(c) && d.typedReduction(c) {
				typed = append(typed, c.String())
			}
		}
		if len(typed) > 0 {
			verb := "runs"
			if len(typed) > 1 {
				verb = "run"
			}
			return fmt.Errorf("bench: --algo %s with -d %s: %s of %s %s gather or shares whatever algorithm is forced, so no table would measure %s: "+
				"use --algo auto, or -d float to compare algorithms", a, d.DType, strings.Join(typed, " and "), d.DType, verb, a)
		}
		return fmt.Errorf("bench: --algo %s implements none of the collectives asked for (%v)", a, colls)
	}
	return nil
}

func neverGrows(f int) error {
	return fmt.Errorf("bench: -f %d would never grow the size: want -f 2 or more, or -i for a fixed increment", f)
}

// The long names of the flags CheckSetFlags looks at (see RegisterFlags).
const (
	flagMinBytes   = "minbytes"
	flagMaxBytes   = "maxbytes"
	flagStepFactor = "stepfactor"
	flagStepBytes  = "stepbytes"
	flagIters      = "iters"
	flagWarmup     = "warmup-iters"
	// flagWarmupOld is nccl-tests' spelling of flagWarmup, still taken
	// (hidden, deprecated): scripts written for nccl-tests use it.
	flagWarmupOld  = "warmup_iters"
	flagRanks      = "np"
	flagTargetTime = "target-time"
)

// CheckSetFlags refuses a value given on the command line that Options
// reads as "unset" and Defaults would quietly replace: -b 0, -e 0, -i 0,
// -f 0 (without -i), -w 0, --np 0 and a -T that is not positive. set
// reports whether the flag of that long name (as RegisterFlags names it:
// minbytes, not b) was given: pflag's FlagSet.Changed. The errors name
// the flags by their shorthands, as scripts and nccl-tests write them.
func (o Options) CheckSetFlags(set func(name string) bool) error {
	d := Options{}.Defaults()
	switch {
	case set(flagMinBytes) && o.MinBytes == 0:
		return fmt.Errorf("bench: -b 0: want at least 1 byte (default %s)", FormatSize(d.MinBytes))
	case set(flagMaxBytes) && o.MaxBytes == 0:
		return fmt.Errorf("bench: -e 0: want at least 1 byte (default %s)", FormatSize(d.MaxBytes))
	case set(flagStepBytes) && o.StepBytes == 0:
		return errors.New("bench: -i 0: want at least 1 byte, or no -i to multiply the size by -f")
	case set(flagStepFactor) && o.StepFactor == 0 && o.StepBytes == 0:
		return neverGrows(0)
	case (set(flagWarmup) || set(flagWarmupOld)) && o.Warmup == 0:
		return fmt.Errorf("bench: -w 0: want at least 1 warm-up iteration (default %d)", d.Warmup)
	case set(flagRanks) && o.Ranks == 0:
		return errors.New("bench: --np 0: want 1 or more ranks")
	case set(flagTargetTime) && o.TargetTime <= 0:
		return fmt.Errorf("bench: -T %v: want a positive duration (default %v)", o.TargetTime, d.TargetTime)
	}
	return nil
}

// Defaults returns o with every unset field at its default.
func (o Options) Defaults() Options {
	if len(o.Collectives) == 0 {
		o.Collectives = []ascend.Collective{ascend.CollAllReduce}
	}
	if len(o.Algorithms) == 0 {
		o.Algorithms = []ascend.Algorithm{ascend.AlgoAuto}
	}
	if o.MinBytes <= 0 {
		o.MinBytes = 8
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 256 << 20
	}
	if o.MaxBytes < o.MinBytes {
		o.MaxBytes = o.MinBytes
	}
	if o.StepFactor < 2 {
		o.StepFactor = 2
	}
	if o.Warmup <= 0 {
		o.Warmup = 5
	}
	if o.TargetTime <= 0 {
		o.TargetTime = 200 * time.Millisecond
	}
	if o.MinIters <= 0 {
		o.MinIters = 3
	}
	if o.MaxIters <= 0 {
		o.MaxIters = 10000
	}
	if o.Format == "" || o.Format == "text" { // text: the word the other commands use
		o.Format = "table"
	}
	switch o.DType {
	case "", "float32":
		o.DType = DTypeFloat
	case "float64":
		o.DType = DTypeDouble
	case "int":
		o.DType = DTypeInt32
	}
	if o.Ranks <= 0 {
		o.Ranks = 2
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Format != "table" && o.Format != "json":
		return fmt.Errorf("bench: output format %q (want table, text (the same) or json)", o.Format)
	case o.Root < 0:
		return fmt.Errorf("bench: -r %d: want a rank, 0 or more", o.Root)
	case o.SharedBuffers && !o.SharedMemory && o.Ranks > 0:
		return errors.New("bench: -R 1 (shared buffers) needs shared-memory links (--shm)")
	case !o.SharedBuffers && slices.Contains(o.Algorithms, ascend.AlgoDirect):
		// Without them the communicator runs the ring, which the table
		// would label direct.
		return errors.New("bench: --algo direct reads the peers' buffers in shared memory: it needs -R 1 (and --shm)")
	case o.DType != DTypeFloat && o.DType != DTypeDouble && o.DType != DTypeInt32:
		return fmt.Errorf("bench: data type %q (want float, double or int32)", o.DType)
	case o.DType == DTypeInt32 && o.Op == ascend.Avg:
		for _, c := range o.Collectives {
			if collectives[c].reduces {
				return fmt.Errorf("bench: --op avg is not defined on int32 (%v reduces)", c)
			}
		}
	}
	for _, c := range o.Collectives {
		if _, ok := collectives[c]; !ok {
			return fmt.Errorf("bench: no benchmark for %v", c)
		}
	}
	return nil
}

// sizes is the sweep.
func (o Options) sizes() []int64 {
	var s []int64
	for b := o.MinBytes; b <= o.MaxBytes; {
		s = append(s, b)
		if o.StepBytes > 0 {
			b += o.StepBytes
		} else {
			b *= int64(o.StepFactor)
		}
	}
	return s
}

// ParseSize parses a byte count the way nccl-tests does: a number with an
// optional K, M or G suffix (powers of 1024; "B" and "iB" are accepted
// after the suffix).
func ParseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult, t = 1<<10, t[:n-1]
		case 'M':
			mult, t = 1<<20, t[:n-1]
		case 'G':
			mult, t = 1<<30, t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bench: bad size %q: want bytes, with an optional K, M or G suffix (powers of 1024)", s)
	}
	if v > math.MaxInt64/mult {
		return 0, fmt.Errorf("bench: size %q is too large (at most %dG)", s, int64(math.MaxInt64)>>30)
	}
	return v * mult, nil
}

// FormatSize prints a byte count the way ParseSize reads it.
func FormatSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

// The flag values below have pflag's Type method too, so that a cobra
// command's help names what each takes ("size", "0|1") rather than the Go
// type.

type sizeFlag struct{ p *int64 }

func (sizeFlag) Type() string { return "size" }

func (f sizeFlag) String() string {
	if f.p == nil {
		return ""
	}
	return FormatSize(*f.p)
}
func (f sizeFlag) Set(s string) error {
	v, err := ParseSize(s)
	if err == nil {
		*f.p = v
	}
	return err
}

type listFlag[T any] struct {
	p     *[]T
	parse func(string) (T, error)
	str   func(T) string
}

func (listFlag[T]) Type() string { return "list" }

func (f listFlag[T]) String() string {
	if f.p == nil {
		return ""
	}
	var parts []string
	for _, v := range *f.p {
		parts = append(parts, f.str(v))
	}
	return strings.Join(parts, ",")
}

func (f listFlag[T]) Set(s string) error {
	*f.p = nil
	for part := range strings.SplitSeq(s, ",") {
		v, err := f.parse(part)
		if err != nil {
			return err
		}
		*f.p = append(*f.p, v)
	}
	return nil
}

func parseCollectives(s string) ([]ascend.Collective, error) {
	if strings.EqualFold(strings.TrimSpace(s), "all") {
		return AllCollectives(), nil
	}
	var out []ascend.Collective
	err := listFlag[ascend.Collective]{p: &out, parse: ascend.ParseCollective}.Set(s)
	return out, err
}

// AllCollectives lists every collective the benchmark knows, in table
// order.
func AllCollectives() []ascend.Collective {
	return []ascend.Collective{ascend.CollAllReduce, ascend.CollReduceScatter, ascend.CollAllGather,
		ascend.CollBroadcast, ascend.CollReduce, ascend.CollAllToAll}
}

// opFlag takes a reduction (nccl-tests' -o) or, as the `bench collective
// --op allreduce` spelling has it, the collectives to run (then it is
// --coll).
type opFlag struct {
	p     *ascend.Op
	colls *[]ascend.Collective
}

func (opFlag) Type() string { return "op" }

func (f opFlag) String() string {
	if f.p == nil {
		return ""
	}
	return f.p.String()
}
func (f opFlag) Set(s string) error {
	for _, op := range []ascend.Op{ascend.Sum, ascend.Avg, ascend.Max, ascend.Min} {
		if strings.EqualFold(s, op.String()) {
			*f.p = op
			return nil
		}
	}
	if f.colls != nil {
		if v, err := parseCollectives(s); err == nil {
			*f.colls = v
			return nil
		}
	}
	return fmt.Errorf("bench: unknown op %q (want a reduction: sum, avg, max or min; or collectives: allreduce, reducescatter, allgather, broadcast, reduce, alltoall, all)", s)
}

type collFlag struct{ p *[]ascend.Collective }

func (collFlag) Type() string { return "list" }

func (f collFlag) String() string {
	if f.p == nil {
		return ""
	}
	return listFlag[ascend.Collective]{p: f.p, str: ascend.Collective.String}.String()
}
func (f collFlag) Set(s string) error {
	v, err := parseCollectives(s)
	if err == nil {
		*f.p = v
	}
	return err
}

// checkFlag is a 0/1 flag that is on (1) when *skip is false: -c and
// --limits.
type checkFlag struct{ skip *bool }

func (checkFlag) Type() string { return "0|1" }

func (f checkFlag) String() string {
	if f.skip != nil && *f.skip {
		return "0"
	}
	return "1"
}
func (f checkFlag) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v > 1 {
		return errors.New("want 0 or 1") // the flag packages name the flag and value
	}
	*f.skip = v == 0
	return nil
}

// flag01 is a boolean flag written 0 or 1, as nccl-tests' -R.
type flag01 struct{ on *bool }

func (flag01) Type() string { return "0|1" }

func (f flag01) String() string {
	if f.on != nil && *f.on {
		return "1"
	}
	return "0"
}

func (f flag01) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v > 1 {
		return errors.New("want 0 or 1")
	}
	*f.on = v == 1
	return nil
}

// durationFlag is a time.Duration flag whose error says that a unit is
// needed ("-1" is not a duration; "-1ns" is).
type durationFlag struct{ p *time.Duration }

func (durationFlag) Type() string { return "duration" }

func (f durationFlag) String() string {
	if f.p == nil {
		return ""
	}
	return f.p.String()
}

func (f durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration with its unit, e.g. 50us, 200ms, 2s: %w", err)
	}
	*f.p = d
	return nil
}

// RegisterFlags defines o's flags on fs, under nccl-tests' names where
// it has them, each with its one-letter shorthand: -b/--minbytes,
// -e/--maxbytes, -f/--stepfactor, -i/--stepbytes (sizes), -n/--iters,
// -w/--warmup-iters (nccl-tests' --warmup_iters, in the kebab case of
// every other long flag; --warmup_iters is still taken, as a hidden
// deprecated alias), -c/--check (0/1), -r/--root, -d/--datatype
// (float|double|int32); and ours: -R/--shared-buffers (0/1, nccl-tests'
// registration flag), -T/--target-time (per size), -o/--output
// (table|text|json; nccl-tests' -o is the reduction, here --op), plus
// --touch (0/1), --shm (shared-memory links), --op (sum|avg|max|min),
// --coll (list or "all"), --algo (list of auto, ring, hd, tree, rd, hier,
// pairwise, bruck, direct), --np (ranks for Launch), --chunk (frame
// bytes), --limits (0/1), --sockbuf, --spin and --procs. Fields of o that
// are unset are first set to their defaults (see Defaults), and the
// current values of o are the flags' defaults, so that the usage shows
// them. After parsing, pass fs.Changed to CheckSetFlags.
func (o *Options) RegisterFlags(fs *pflag.FlagSet) {
	d := o.Defaults()
	o.Collectives, o.Algorithms, o.MinBytes, o.MaxBytes, o.StepFactor = d.Collectives, d.Algorithms, d.MinBytes, d.MaxBytes, d.StepFactor
	o.Warmup, o.TargetTime, o.DType, o.Format, o.Ranks = d.Warmup, d.TargetTime, d.DType, d.Format, d.Ranks
	fs.VarP(sizeFlag{&o.MinBytes}, flagMinBytes, "b", "minimum size in bytes; K, M, G suffixes are powers of 1024 (8K = 8192)")
	fs.VarP(sizeFlag{&o.MaxBytes}, flagMaxBytes, "e", "maximum size in bytes (K, M, G suffixes)")
	fs.IntVarP(&o.StepFactor, flagStepFactor, "f", o.StepFactor, "size multiplication factor, 2 or more")
	fs.VarP(sizeFlag{&o.StepBytes}, flagStepBytes, "i", "size increment in bytes (K, M, G suffixes), instead of -f")
	fs.IntVarP(&o.Iters, flagIters, "n", o.Iters, "timed iterations per size (0: from the warm-up and -T)")
	fs.IntVarP(&o.Warmup, flagWarmup, "w", o.Warmup, "warm-up iterations per size")
	fs.IntVar(&o.Warmup, flagWarmupOld, o.Warmup, "warm-up iterations per size (nccl-tests' spelling of --warmup-iters)")
	// pflag writes the notice to the flag set's output when the old name is
	// used (a cobra command should make that its stderr: cobra's default
	// prints it with the command's Print, which is stdout where the command
	// has one set).
	_ = fs.MarkDeprecated(flagWarmupOld, "use --warmup-iters (or -w)") // the flag exists: no error
	fs.VarP(checkFlag{&o.SkipCheck}, "check", "c", "check results (1) or not (0)")
	fs.IntVarP(&o.Root, "root", "r", o.Root, "root rank of broadcast and reduce, below the number of ranks")
	fs.Var(opFlag{&o.Op, &o.Collectives}, "op", "reduction: sum, avg, max, min (nccl-tests' -o; here -o is --output); or a collective list as for --coll")
	fs.StringVarP(&o.DType, "datatype", "d", o.DType, "data type: float, double or int32")
	fs.StringVarP(&o.Format, "output", "o", o.Format, "output: table or text (the same), or json")
	fs.Var(collFlag{&o.Collectives}, "coll", "collectives, comma-separated, or all: allreduce, reducescatter, allgather, broadcast, reduce, alltoall")
	fs.Var(listFlag[ascend.Algorithm]{p: &o.Algorithms, parse: ascend.ParseAlgorithm, str: ascend.Algorithm.String}, "algo",
		"algorithms, comma-separated, one table each: auto, ring, hd, tree, rd, hier, pairwise (alltoall), bruck (alltoall), direct (needs -R 1); each runs on the collectives that have it. "+
			"With -R 1 a forced ring runs direct where direct exists (the same bits), as auto does: its table says so, and tables that would run the same calls are measured once. "+
			"double and int32 reductions (allreduce, reduce, reducescatter) run gather or shares whatever is forced: only auto has a table there")
	fs.IntVar(&o.Ranks, flagRanks, o.Ranks, "ranks (processes) to launch")
	fs.VarP(durationFlag{&o.TargetTime}, flagTargetTime, "T", "target timed duration per size when -n is 0 (with a unit: 200ms, 1s)")
	fs.IntVar(&o.ChunkBytes, "chunk", o.ChunkBytes, "frame size in bytes (0: default)")
	fs.Var(checkFlag{&o.SkipLimits}, "limits", "measure loopback TCP and memcpy (1) or not (0), at 1M transfers and up")
	fs.BoolVar(&o.SharedMemory, "shm", o.SharedMemory, "link the launched ranks over shared memory instead of TCP")
	fs.VarP(flag01{&o.SharedBuffers}, "shared-buffers", "R", "buffers in shared memory, read directly by the ranks of a host (1, needs --shm; nccl-tests' -R) or ordinary memory (0)")
	fs.Var(flag01{&o.Touch}, "touch", "rewrite every call's input before it and read its output after it, as a training step does (1), or not (0)")
	fs.Var(sizeFlag{&o.SocketBuffer}, "sockbuf", "SO_SNDBUF/SO_RCVBUF of TCP links in bytes, K, M, G suffixes (0: kernel autotuning)")
	fs.Var(durationFlag{&o.Spin}, "spin", "how long a TCP receive polls before sleeping, with a unit: 50us (0: auto, polling only while ranks ≤ cores; negative, e.g. -1ns: never)")
	fs.IntVar(&o.Procs, "procs", o.Procs, "GOMAXPROCS of each rank process (0: 1 where ranks >= cores, unless the GOMAXPROCS variable is set; negative: the number of cores)")
}
