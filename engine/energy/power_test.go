package energy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cann-train/cann-train/ascend/npusmi"
)

// canned answers cmd with out (or err) and counts the calls.
func canned(t *testing.T, cmd string, out []byte, err error, calls *atomic.Int64) npusmi.Runner {
	return func(_ context.Context, name string, args ...string) ([]byte, error) {
		if name != cmd {
			t.Errorf("ran %s %v, want %s", name, args, cmd)
		}
		if calls != nil {
			calls.Add(1)
		}
		return out, err
	}
}

func npuSample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "ascend", "npusmi", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNPUSMIPower(t *testing.T) {
	tests := []struct {
		name, file string
		npus       []int
		want       float64
		wantErr    error
	}{
		{"910B1 both NPUs", "info_910b1.txt", nil, 88.4 + 92.1, nil},
		{"910B1 NPU 1", "info_910b1.txt", []int{1}, 92.1, nil},
		{"A3: the second die's '-' adds nothing", "info_a3.txt", nil, 162.6, nil},
		{"no such NPU", "info_910b1.txt", []int{7}, 0, ErrPower},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NPUSMI{Run: canned(t, npusmi.Command, npuSample(t, tc.file), nil, nil), NPUs: tc.npus}
			w, err := s.Watts(context.Background())
			if !errors.Is(err, tc.wantErr) || (err == nil && math.Abs(w-tc.want) > 1e-9) {
				t.Fatalf("Watts = %v, %v; want %v, %v", w, err, tc.want, tc.wantErr)
			}
		})
	}
	t.Run("driver error", func(t *testing.T) {
		s := NPUSMI{Run: canned(t, npusmi.Command, []byte("dcmi module initialize failed. ret is -8005\n"), nil, nil)}
		if _, err := s.Watts(context.Background()); !errors.Is(err, ErrPower) || !errors.Is(err, npusmi.ErrFormat) {
			t.Fatalf("err = %v, want ErrPower wrapping npusmi.ErrFormat", err)
		}
	})
}

func TestNVIDIASMIPower(t *testing.T) {
	tests := []struct {
		name, out string
		gpus      []int
		want      float64
		wantText  string
	}{
		{"two GPUs", "0, 68.52\n1, 301.07\n", nil, 369.59, ""},
		{"one of them", "0, 68.52\n1, 301.07\n", []int{1}, 301.07, ""},
		{"not supported", "0, [N/A]\n", nil, 0, `GPU 0 power.draw "[N/A]"`},
		{"garbage", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", nil, 0, "line 1"},
		{"empty", "", nil, 0, "no GPU power"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NVIDIASMI{Run: canned(t, NVIDIASMICommand, []byte(tc.out), nil, nil), GPUs: tc.gpus}
			w, err := s.Watts(context.Background())
			if tc.wantText != "" {
				if !errors.Is(err, ErrPower) || !strings.Contains(err.Error(), tc.wantText) {
					t.Fatalf("err = %v, want ErrPower saying %q", err, tc.wantText)
				}
				return
			}
			if err != nil || math.Abs(w-tc.want) > 1e-9 {
				t.Fatalf("Watts = %v, %v; want %v", w, err, tc.want)
			}
		})
	}
}

// steps is a PowerSource that returns its readings in turn.
type steps struct {
	w   []float64
	i   int
	err error
}

func (s *steps) Watts(context.Context) (float64, error) {
	if s.err != nil {
		return 0, s.err
	}
	w := s.w[min(s.i, len(s.w)-1)]
	s.i++
	return w, nil
}

func (s *steps) String() string { return "steps" }

// TestSampledMeterIntegrates: trapezoids between readings, the last
// reading held to the time asked, × PUE.
func TestSampledMeterIntegrates(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	src := &steps{w: []float64{100, 200, 50}}
	m, err := NewSampledMeter(ctx, src, 0, 1.5, t0)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i, tc := range []struct {
		sample bool
		at     time.Duration
		want   float64 // joules before PUE
	}{
		{false, 0, 0},
		{false, 2 * time.Second, 200},      // 100 W held
		{true, time.Second, 150},           // reading 200 W at 1 s: (100+200)/2
		{false, 3 * time.Second, 550},      // + 200 W × 2 s
		{true, 3 * time.Second, 150 + 250}, // reading 50 W at 3 s: (200+50)/2 × 2
		{false, 5 * time.Second, 400 + 100},
	} {
		if tc.sample {
			if err := m.Sample(ctx, t0.Add(tc.at)); err != nil {
				t.Fatal(err)
			}
		}
		j, err := m.Joules(ctx, t0.Add(tc.at))
		if err != nil || math.Abs(j-1.5*tc.want) > 1e-9 {
			t.Errorf("step %d: Joules(%v) = %v, %v; want %v", i, tc.at, j, err, 1.5*tc.want)
		}
	}
	src.err = errors.New("driver gone")
	if err := m.Sample(ctx, t0.Add(6*time.Second)); err == nil {
		t.Fatal("sample: no error")
	}
	if _, err := m.Joules(ctx, t0.Add(6*time.Second)); err == nil || !strings.Contains(err.Error(), "driver gone") {
		t.Errorf("Joules after a failed reading: %v, want the reading's error", err)
	}
	if _, err := NewSampledMeter(ctx, &steps{w: []float64{1}}, 0, 0.5, t0); !errors.Is(err, ErrInvalid) {
		t.Errorf("PUE 0.5: %v, want ErrInvalid", err)
	}
}

// TestSampledMeterSamplesInBackground: with an interval the meter keeps
// reading until Close.
func TestSampledMeterSamplesInBackground(t *testing.T) {
	var calls atomic.Int64
	src := NVIDIASMI{Run: canned(t, NVIDIASMICommand, []byte("0, 10\n"), nil, &calls)}
	m, err := NewSampledMeter(context.Background(), src, time.Millisecond, 1, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for calls.Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	n := calls.Load()
	if n < 5 {
		t.Fatalf("%d readings in 10 s", n)
	}
	time.Sleep(5 * time.Millisecond)
	if calls.Load() != n {
		t.Error("still sampling after Close")
	}
	j, err := m.Joules(context.Background(), time.Now())
	if err != nil || j <= 0 {
		t.Errorf("Joules = %v, %v; want > 0", j, err)
	}
}

// TestOpenHostMeter: auto takes RAPL (and only RAPL); the accelerator
// meters when named; ErrNoMeter says why there is none.
func TestOpenHostMeter(t *testing.T) {
	ctx := context.Background()
	rapl := fakeRAPL(t)
	none := t.TempDir()
	smi := func(t *testing.T) npusmi.Runner {
		return func(_ context.Context, name string, _ ...string) ([]byte, error) {
			switch name {
			case npusmi.Command:
				return npuSample(t, "info_910b1.txt"), nil
			case NVIDIASMICommand:
				return []byte("0, 70\n"), nil
			}
			return nil, fmt.Errorf("unexpected %s", name)
		}
	}
	have := func(cmds ...string) func(string) (string, error) {
		return func(c string) (string, error) {
			for _, h := range cmds {
				if c == h {
					return "/usr/bin/" + c, nil
				}
			}
			return "", fmt.Errorf("exec: %q: executable file not found in $PATH", c)
		}
	}
	tests := []struct {
		name     string
		opts     HostMeterOptions
		want     string // prefix of the meter's String
		wantErr  error
		wantText string
	}{
		{"auto: rapl", HostMeterOptions{RAPL: RAPLOptions{Root: rapl}, LookPath: have(npusmi.Command)}, "rapl (package-0, package-1)", nil, ""},
		{"auto: no rapl, accelerators not taken", HostMeterOptions{RAPL: RAPLOptions{Root: none}, LookPath: have(npusmi.Command, NVIDIASMICommand)}, "", ErrNoMeter, "no RAPL package domain"},
		{"npu-smi", HostMeterOptions{Kind: MeterNPUSMI, LookPath: have(npusmi.Command, NVIDIASMICommand)}, "npu-smi", nil, ""},
		{"nvidia-smi", HostMeterOptions{Kind: MeterNVIDIA, LookPath: have(NVIDIASMICommand)}, "nvidia-smi", nil, ""},
		{"rapl named, none", HostMeterOptions{Kind: MeterRAPL, RAPL: RAPLOptions{Root: none}}, "", ErrNoMeter, "zones found"},
		{"named and absent", HostMeterOptions{Kind: MeterNPUSMI, LookPath: have(NVIDIASMICommand)}, "", ErrNoMeter, "npu-smi: exec"},
		{"off", HostMeterOptions{Kind: MeterOff, RAPL: RAPLOptions{Root: rapl}}, "", ErrNoMeter, "energy metering is off (--energy off)"},
		{"unknown kind", HostMeterOptions{Kind: "ipmi"}, "", ErrInvalid, `"ipmi"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Run = smi(t)
			m, err := OpenHostMeter(ctx, tc.opts)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantText) {
					t.Fatalf("err = %v, want %v saying %q", err, tc.wantErr, tc.wantText)
				}
				// Said once: no "energy: ... (energy: ...)", and "off" is
				// no claim that the host has no meter.
				if n := strings.Count(err.Error(), "energy:"); n > 1 {
					t.Errorf("err = %v: %d \"energy:\" prefixes, want at most 1", err, n)
				}
				if tc.opts.Kind == MeterOff && strings.Contains(err.Error(), "no energy meter") {
					t.Errorf("err = %v: metering turned off reads as no meter on the host", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if !strings.HasPrefix(m.String(), tc.want) {
				t.Errorf("meter %q, want %q", m, tc.want)
			}
			if _, err := m.Joules(ctx, time.Now()); err != nil {
				t.Errorf("Joules: %v", err)
			}
		})
	}
}
