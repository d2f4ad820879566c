package energy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors; every error of this package wraps one of them (or an
// underlying error) with %w.
var (
	// ErrInvalid: an argument is out of range (negative energy, PUE < 1,
	// time going backwards, overlapping intervals…).
	ErrInvalid = errors.New("energy: invalid argument")
	// ErrNoRAPL: no usable RAPL domain under the powercap root.
	ErrNoRAPL = errors.New("energy: no RAPL package domain")
	// ErrRAPL: a RAPL counter file cannot be read or parsed, or a reading
	// is outside [0, max_energy_range_uj].
	ErrRAPL = errors.New("energy: bad RAPL reading")
)

// Meter reports cumulative energy.
type Meter interface {
	// Joules returns the energy used since the meter was opened, as of now.
	// Successive calls must pass non-decreasing times.
	Joules(ctx context.Context, now time.Time) (float64, error)
}

// DefaultPowercapRoot is where Linux exposes the powercap zones.
const DefaultPowercapRoot = "/sys/class/powercap"

// RAPLOptions configures OpenRAPL.
type RAPLOptions struct {
	// Root is the powercap directory; empty means DefaultPowercapRoot.
	// Tests point it at a fake tree.
	Root string
	// IncludeDRAM adds the "dram" zones, which (on servers) the package
	// counter does not include. Core/uncore subzones are never added (the
	// package counter includes them), nor is psys (it overlaps everything).
	IncludeDRAM bool
	// PUE multiplies the measured energy; 0 means 1.
	PUE float64
}

// RAPLDomain is one counter that RAPL sums.
type RAPLDomain struct {
	Dir   string // e.g. /sys/class/powercap/intel-rapl:0
	Name  string // e.g. package-0, dram
	MaxUJ uint64 // max_energy_range_uj: the counter wraps to 0 after it
}

// RAPL is a Meter over the Linux powercap RAPL counters. Counters are in
// µJ and wrap at max_energy_range_uj; one wrap between two reads is
// detected and undone, so read at least once per wrap period (minutes to
// hours, depending on the CPU and its power).
type RAPL struct {
	Domains []RAPLDomain
	pue     float64
	last    []uint64
	totalUJ float64
}

// OpenRAPL discovers the package domains (top-level intel-rapl:N zones
// named package-*) and, optionally, the dram zones, and takes the first
// reading: Joules counts from here.
func OpenRAPL(opts RAPLOptions) (*RAPL, error) {
	root := opts.Root
	if root == "" {
		root = DefaultPowercapRoot
	}
	pue := opts.PUE
	if pue == 0 {
		pue = 1
	}
	if !(pue >= 1) || math.IsInf(pue, 0) {
		return nil, fmt.Errorf("%w: PUE %v is not ≥ 1", ErrInvalid, pue)
	}
	dirs, err := filepath.Glob(filepath.Join(root, "intel-rapl:*"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoRAPL, err)
	}
	slices.Sort(dirs)
	r := &RAPL{pue: pue}
	var seen []string
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "name"))
		if err != nil {
			continue // not a zone
		}
		name := strings.TrimSpace(string(b))
		seen = append(seen, filepath.Base(d)+"="+name)
		top := strings.Count(filepath.Base(d), ":") == 1
		if !(top && strings.HasPrefix(name, "package")) && !(opts.IncludeDRAM && name == "dram") {
			continue
		}
		mx, err := readUJ(filepath.Join(d, "max_energy_range_uj"))
		if err != nil {
			return nil, err
		}
		r.Domains = append(r.Domains, RAPLDomain{Dir: d, Name: name, MaxUJ: mx})
	}
	if len(r.Domains) == 0 {
		return nil, fmt.Errorf("%w under %s (zones found: %q)", ErrNoRAPL, root, seen)
	}
	if r.last, err = r.read(); err != nil {
		return nil, err
	}
	return r, nil
}

func readUJ(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return 0, fmt.Errorf("%w: %w (energy_uj is root-only on kernels patched for CVE-2020-8694)", ErrRAPL, err)
		}
		return 0, fmt.Errorf("%w: %w", ErrRAPL, err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrRAPL, path, err)
	}
	return v, nil
}

func (r *RAPL) read() ([]uint64, error) {
	out := make([]uint64, len(r.Domains))
	for i, d := range r.Domains {
		v, err := readUJ(filepath.Join(d.Dir, "energy_uj"))
		if err != nil {
			return nil, err
		}
		if d.MaxUJ > 0 && v > d.MaxUJ {
			return nil, fmt.Errorf("%w: %s energy_uj %d exceeds max_energy_range_uj %d", ErrRAPL, d.Dir, v, d.MaxUJ)
		}
		out[i] = v
	}
	return out, nil
}

// Joules implements Meter: the energy of all domains since OpenRAPL, × PUE.
// now is not used (the counters carry their own time).
func (r *RAPL) Joules(ctx context.Context, _ time.Time) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	cur, err := r.read()
	if err != nil {
		return 0, err
	}
	for i, d := range r.Domains {
		prev, v := r.last[i], cur[i]
		if v >= prev {
			r.totalUJ += float64(v - prev)
		} else { // wrapped once: prev → max, 0 → v
			if d.MaxUJ == 0 {
				return 0, fmt.Errorf("%w: %s counter went back from %d to %d and max_energy_range_uj is 0", ErrRAPL, d.Dir, prev, v)
			}
			r.totalUJ += float64(d.MaxUJ-prev) + float64(v)
		}
	}
	r.last = cur
	return r.totalUJ / 1e6 * r.pue, nil
}

// Model is a power model for devices without an energy counter: each of
// Devices draws IdleW plus BusyW × the busy fraction, and the facility
// multiplies by PUE.
type Model struct {
	Devices int     // 0 means 1
	BusyW   float64 // extra watts per device at 100 % busy
	IdleW   float64 // watts per device when idle
	PUE     float64 // ≥ 1; 0 means 1
}

// Watts is the facility power at busy fraction busy ∈ [0, 1].
func (m Model) Watts(busy float64) (float64, error) {
	n, pue := m.Devices, m.PUE
	if n == 0 {
		n = 1
	}
	if pue == 0 {
		pue = 1
	}
	switch {
	case n < 0:
		return 0, fmt.Errorf("%w: %d devices", ErrInvalid, n)
	case !finiteNonNeg(m.BusyW) || !finiteNonNeg(m.IdleW):
		return 0, fmt.Errorf("%w: power busy %v W, idle %v W", ErrInvalid, m.BusyW, m.IdleW)
	case !(pue >= 1) || math.IsInf(pue, 0):
		return 0, fmt.Errorf("%w: PUE %v is not ≥ 1", ErrInvalid, pue)
	case !(busy >= 0 && busy <= 1):
		return 0, fmt.Errorf("%w: busy fraction %v not in [0, 1]", ErrInvalid, busy)
	}
	return float64(n) * (m.BusyW*busy + m.IdleW) * pue, nil
}

// Joules is the facility energy over d at busy fraction busy.
func (m Model) Joules(d time.Duration, busy float64) (float64, error) {
	if d < 0 {
		return 0, fmt.Errorf("%w: negative duration %s", ErrInvalid, d)
	}
	w, err := m.Watts(busy)
	return w * d.Seconds(), err
}

func finiteNonNeg(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }

// ModelMeter is a Meter that integrates a Model. At each read, Busy gives
// the mean busy fraction since the previous read (nil means always busy);
// the first read starts the clock and returns 0.
type ModelMeter struct {
	Model Model
	Busy  func(ctx context.Context) (float64, error)

	started bool
	last    time.Time
	total   float64
}

// Joules implements Meter.
func (m *ModelMeter) Joules(ctx context.Context, now time.Time) (float64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if !m.started {
		if _, err := m.Model.Watts(0); err != nil {
			return 0, err
		}
		m.started, m.last = true, now
		return 0, nil
	}
	if now.Before(m.last) {
		return 0, fmt.Errorf("%w: time went back from %s to %s", ErrInvalid, m.last.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	busy := 1.0
	if m.Busy != nil {
		b, err := m.Busy(ctx)
		if err != nil {
			return 0, fmt.Errorf("energy: busy fraction: %w", err)
		}
		busy = b
	}
	j, err := m.Model.Joules(now.Sub(m.last), busy)
	if err != nil {
		return 0, err
	}
	m.total += j
	m.last = now
	return m.total, nil
}
