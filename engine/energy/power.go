package energy

// Power meters for accelerators that report watts rather than an energy
// counter (npu-smi on Ascend, nvidia-smi/NVML on NVIDIA), and the choice of
// a host's meter.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cann-train/cann-train/ascend/npusmi"
)

// ErrNoMeter: the host has none of the meters asked for.
var ErrNoMeter = errors.New("energy: no energy meter on this host")

// ErrPower: a power reading failed or could not be parsed.
var ErrPower = errors.New("energy: bad power reading")

// PowerSource reads the instantaneous power of a set of devices.
type PowerSource interface {
	// Watts is the devices' total power now.
	Watts(ctx context.Context) (float64, error)
	// String names the source and its devices, for logs.
	String() string
}

// runner is r, or npusmi.ExecRunner when r is nil.
func runner(r npusmi.Runner) npusmi.Runner {
	if r == nil {
		return npusmi.ExecRunner
	}
	return r
}

// NPUSMI reads the "Power(W)" column of `npu-smi info` and sums it over
// the chips (of the NPUs listed in NPUs; all when empty). A chip whose
// power npu-smi prints as "-" (the second die of an A3 NPU, which its
// first die's figure covers) adds nothing; a table with no power at all
// is an error.
type NPUSMI struct {
	Run  npusmi.Runner // nil: npusmi.ExecRunner
	NPUs []int
}

// Watts implements PowerSource.
func (s NPUSMI) Watts(ctx context.Context) (float64, error) {
	out, err := runner(s.Run)(ctx, npusmi.Command, "info")
	if err != nil {
		return 0, fmt.Errorf("%w: npu-smi info: %w", ErrPower, err)
	}
	info, err := npusmi.ParseInfo(out)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrPower, err)
	}
	var w float64
	n := 0
	for _, c := range info.Chips {
		if len(s.NPUs) > 0 && !slices.Contains(s.NPUs, c.NPU) {
			continue
		}
		if !c.Known("Power(W)") {
			continue
		}
		if !(c.PowerW >= 0) || math.IsInf(c.PowerW, 0) {
			return 0, fmt.Errorf("%w: npu-smi: NPU %d chip %d power %v", ErrPower, c.NPU, c.Chip, c.PowerW)
		}
		w += c.PowerW
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: npu-smi info reports no chip power (NPUs %v of %d chips)", ErrPower, s.NPUs, len(info.Chips))
	}
	return w, nil
}

func (s NPUSMI) String() string {
	if len(s.NPUs) == 0 {
		return "npu-smi (all NPUs)"
	}
	return fmt.Sprintf("npu-smi (NPUs %v)", s.NPUs)
}

// NVIDIASMICommand is the executable NVIDIASMI runs.
const NVIDIASMICommand = "nvidia-smi"

// NVIDIASMI reads power.draw of the GPUs listed in GPUs (all when empty)
// through `nvidia-smi --query-gpu=index,power.draw --format=csv,noheader,nounits`,
// NVML's figure. A GPU that reports "[N/A]" or "[Not Supported]" is an error:
// the sum would undercount.
type NVIDIASMI struct {
	Run  npusmi.Runner // nil: npusmi.ExecRunner
	GPUs []int
}

// Watts implements PowerSource.
func (s NVIDIASMI) Watts(ctx context.Context) (float64, error) {
	out, err := runner(s.Run)(ctx, NVIDIASMICommand, "--query-gpu=index,power.draw", "--format=csv,noheader,nounits")
	if err != nil {
		return 0, fmt.Errorf("%w: nvidia-smi: %w", ErrPower, err)
	}
	return parseNVIDIASMIPower(out, s.GPUs)
}

func parseNVIDIASMIPower(out []byte, gpus []int) (float64, error) {
	var w float64
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		idx, val, ok := strings.Cut(text, ",")
		i, err := strconv.Atoi(strings.TrimSpace(idx))
		if !ok || err != nil {
			return 0, fmt.Errorf("%w: nvidia-smi line %d: %q is not \"index, power.draw\"", ErrPower, line, text)
		}
		if len(gpus) > 0 && !slices.Contains(gpus, i) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("%w: nvidia-smi line %d: GPU %d power.draw %q", ErrPower, line, i, strings.TrimSpace(val))
		}
		w += v
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: nvidia-smi reports no GPU power (GPUs %v)", ErrPower, gpus)
	}
	return w, nil
}

func (s NVIDIASMI) String() string {
	if len(s.GPUs) == 0 {
		return "nvidia-smi (all GPUs)"
	}
	return fmt.Sprintf("nvidia-smi (GPUs %v)", s.GPUs)
}

// SampledMeter is a Meter over a PowerSource: the energy is the
// trapezoidal integral of its readings, taken every Interval by a
// background goroutine (or by calls to Sample), and the last reading held
// up to the time Joules is asked for. Safe for concurrent use; Close stops
// the sampling.
type SampledMeter struct {
	src PowerSource
	pue float64

	mu      sync.Mutex
	lastT   time.Time
	lastW   float64
	total   float64 // joules up to lastT, before PUE
	lastErr error

	stop context.CancelFunc // ends the sampler (nil: none)
	done chan struct{}      // closed when the sampler has returned
}

// NewSampledMeter takes a first reading at now (a failure is returned)
// and, when interval > 0, keeps sampling every interval until Close.
// PUE 0 means 1.
func NewSampledMeter(ctx context.Context, src PowerSource, interval time.Duration, pue float64, now time.Time) (*SampledMeter, error) {
	if pue == 0 {
		pue = 1
	}
	if !(pue >= 1) || math.IsInf(pue, 0) {
		return nil, fmt.Errorf("%w: PUE %v is not ≥ 1", ErrInvalid, pue)
	}
	w, err := src.Watts(ctx)
	if err != nil {
		return nil, err
	}
	m := &SampledMeter{src: src, pue: pue, lastT: now, lastW: w}
	if interval > 0 {
		var sctx context.Context
		sctx, m.stop = context.WithCancel(context.Background())
		m.done = make(chan struct{})
		go m.loop(sctx, interval, m.done)
	}
	return m, nil
}

// loop samples every interval until ctx ends (Close); ctx also aborts a
// reading in progress.
func (m *SampledMeter) loop(ctx context.Context, interval time.Duration, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			_ = m.Sample(ctx, now) // a failed reading is kept for Joules to report
		}
	}
}

// Sample takes a reading at now and adds the interval since the last one.
func (m *SampledMeter) Sample(ctx context.Context, now time.Time) error {
	w, err := m.src.Watts(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.lastErr = err
		return err
	}
	if now.Before(m.lastT) {
		return nil // a reading that raced a later one: the later one counts
	}
	m.total += (m.lastW + w) / 2 * now.Sub(m.lastT).Seconds()
	m.lastT, m.lastW, m.lastErr = now, w, nil
	return nil
}

// Joules implements Meter: energy since NewSampledMeter up to now (the
// last reading held since it was taken), × PUE. The latest sampling error,
// if the last reading failed, is returned instead.
func (m *SampledMeter) Joules(ctx context.Context, now time.Time) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lastErr != nil {
		return 0, m.lastErr
	}
	j := m.total
	if now.After(m.lastT) {
		j += m.lastW * now.Sub(m.lastT).Seconds()
	}
	return j * m.pue, nil
}

// Close stops the background sampling and waits for it; later readings
// hold the last sample.
func (m *SampledMeter) Close() error {
	if m.stop != nil {
		m.stop()
		<-m.done
	}
	return nil
}

func (m *SampledMeter) String() string { return m.src.String() }

// Meter kinds OpenHostMeter knows.
const (
	MeterAuto   = "auto"
	MeterOff    = "off"
	MeterRAPL   = "rapl"
	MeterNPUSMI = "npu-smi"
	MeterNVIDIA = "nvidia-smi"
)

// HostMeterOptions configures OpenHostMeter.
type HostMeterOptions struct {
	// Kind is MeterAuto (RAPL when the host has readable counters: the
	// CPU package energy the built-in engine draws), MeterOff, or one
	// kind; the accelerator meters are used only when named.
	Kind string
	// RAPL options (Root for tests; IncludeDRAM).
	RAPL RAPLOptions
	// Run runs npu-smi and nvidia-smi (nil: npusmi.ExecRunner); LookPath
	// finds them (nil: exec.LookPath).
	Run      npusmi.Runner
	LookPath func(string) (string, error)
	// Interval is how often power meters sample (0: one second).
	Interval time.Duration
}

// HostMeter is a host's energy meter: Joules counts from the opening.
type HostMeter interface {
	Meter
	Close() error
	String() string
}

// OpenHostMeter opens the host's energy meter of the kind asked for, or
// returns ErrNoMeter saying why there is none (MeterOff: at once).
// Meters measure the whole host (RAPL) or all its accelerators: nodes that
// share a host split the figure (see activities.Node).
func OpenHostMeter(ctx context.Context, opts HostMeterOptions) (HostMeter, error) {
	look := opts.LookPath
	if look == nil {
		look = exec.LookPath
	}
	interval := opts.Interval
	if interval <= 0 {
		interval = time.Second
	}
	power := func(cmd string, src PowerSource) (HostMeter, error) {
		if _, err := look(cmd); err != nil {
			return nil, fmt.Errorf("%s: %w", cmd, err)
		}
		return NewSampledMeter(ctx, src, interval, 1, time.Now())
	}
	try := map[string]func() (HostMeter, error){
		MeterRAPL: func() (HostMeter, error) {
			r, err := OpenRAPL(opts.RAPL)
			if err != nil {
				return nil, err
			}
			return &raplMeter{r: r}, nil
		},
		MeterNPUSMI: func() (HostMeter, error) { return power(npusmi.Command, NPUSMI{Run: opts.Run}) },
		MeterNVIDIA: func() (HostMeter, error) { return power(NVIDIASMICommand, NVIDIASMI{Run: opts.Run}) },
	}
	kinds := []string{opts.Kind}
	switch opts.Kind {
	case MeterOff:
		return nil, errMeterOff{}
	case MeterAuto, "":
		kinds = []string{MeterRAPL}
	case MeterRAPL, MeterNPUSMI, MeterNVIDIA:
	default:
		return nil, fmt.Errorf("%w: meter kind %q (want %s, %s, %s, %s or %s)", ErrInvalid, opts.Kind, MeterAuto, MeterOff, MeterRAPL, MeterNPUSMI, MeterNVIDIA)
	}
	var why []string
	for _, k := range kinds {
		m, err := try[k]()
		if err == nil {
			return m, nil
		}
		// (Inside ErrNoMeter's "energy: ..." without a second "energy: ".)
		why = append(why, strings.TrimPrefix(err.Error(), "energy: "))
	}
	return nil, fmt.Errorf("%w (%s)", ErrNoMeter, strings.Join(why, "; "))
}

// errMeterOff is OpenHostMeter's answer for MeterOff: an ErrNoMeter that
// says the operator turned metering off, not that the host has no meter.
type errMeterOff struct{}

func (errMeterOff) Error() string { return "energy metering is off (--energy off)" }

func (errMeterOff) Is(target error) bool { return target == ErrNoMeter }

// raplMeter is RAPL as a HostMeter, safe for concurrent use.
type raplMeter struct {
	mu sync.Mutex
	r  *RAPL
}

func (m *raplMeter) Joules(ctx context.Context, now time.Time) (float64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.r.Joules(ctx, now)
}

func (m *raplMeter) Close() error { return nil }

func (m *raplMeter) String() string {
	names := make([]string, len(m.r.Domains))
	for i, d := range m.r.Domains {
		names[i] = d.Name
	}
	return "rapl (" + strings.Join(names, ", ") + ")"
}
