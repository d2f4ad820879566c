package energy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeZone writes a powercap zone directory.
func fakeZone(t *testing.T, root, dir, name string, uj, maxUJ uint64) {
	t.Helper()
	d := filepath.Join(root, dir)
	require.NoError(t, os.MkdirAll(d, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(d, "name"), []byte(name+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(d, "max_energy_range_uj"), []byte(strconv.FormatUint(maxUJ, 10)+"\n"), 0o644))
	setUJ(t, root, dir, uj)
}

func setUJ(t *testing.T, root, dir string, uj uint64) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(root, dir, "energy_uj"), []byte(strconv.FormatUint(uj, 10)+"\n"), 0o644))
}

// fakeRAPL is a two-socket server: packages, their core and dram subzones,
// and a psys zone that must never be summed.
func fakeRAPL(t *testing.T) string {
	root := t.TempDir()
	const rng = 262143328850
	fakeZone(t, root, "intel-rapl:0", "package-0", 1_000_000, rng)
	fakeZone(t, root, "intel-rapl:0:0", "core", 500_000, rng)
	fakeZone(t, root, "intel-rapl:0:1", "dram", 100_000, 65532610987)
	fakeZone(t, root, "intel-rapl:1", "package-1", rng-1_000_000, rng) // about to wrap
	fakeZone(t, root, "intel-rapl:1:0", "dram", 200_000, 65532610987)
	fakeZone(t, root, "intel-rapl:2", "psys", 9_000_000, rng)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "intel-rapl"), 0o755)) // the control type, not a zone
	return root
}

func TestRAPL(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		opts      RAPLOptions
		wantNames []string
		advance   func(t *testing.T, root string)
		wantJ     float64
	}{
		{"packages only, one wraps", RAPLOptions{}, []string{"package-0", "package-1"}, func(t *testing.T, root string) {
			setUJ(t, root, "intel-rapl:0", 3_000_000)   // +2 J
			setUJ(t, root, "intel-rapl:1", 2_000_000)   // +1 J to max, +2 J after the wrap
			setUJ(t, root, "intel-rapl:0:0", 9_000_000) // ignored: inside package-0
			setUJ(t, root, "intel-rapl:2", 99_000_000)  // ignored: psys
		}, 5},
		{"with dram and PUE", RAPLOptions{IncludeDRAM: true, PUE: 1.5}, []string{"package-0", "dram", "package-1", "dram"}, func(t *testing.T, root string) {
			setUJ(t, root, "intel-rapl:0", 3_000_000)   // +2 J
			setUJ(t, root, "intel-rapl:0:1", 1_100_000) // +1 J
			setUJ(t, root, "intel-rapl:1:0", 1_200_000) // +1 J
		}, 4 * 1.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeRAPL(t)
			tc.opts.Root = root
			r, err := OpenRAPL(tc.opts)
			require.NoError(t, err)
			var names []string
			for _, d := range r.Domains {
				names = append(names, d.Name)
			}
			assert.Equal(t, tc.wantNames, names)
			j, err := r.Joules(ctx, time.Now())
			require.NoError(t, err)
			assert.Zero(t, j)
			tc.advance(t, root)
			j, err = r.Joules(ctx, time.Now())
			require.NoError(t, err)
			assert.InDelta(t, tc.wantJ, j, 1e-9)
			// Cumulative: no change, same total.
			j2, err := r.Joules(ctx, time.Now())
			require.NoError(t, err)
			assert.InDelta(t, j, j2, 1e-12)
		})
	}
}

func TestRAPLErrors(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, root string)
		opts    RAPLOptions
		wantErr error
		errHas  string
		onRead  bool // the error comes from Joules, not OpenRAPL
	}{
		{"empty tree", func(t *testing.T, root string) {}, RAPLOptions{}, ErrNoRAPL, "zones found", false},
		{"only psys", func(t *testing.T, root string) { fakeZone(t, root, "intel-rapl:0", "psys", 1, 10) }, RAPLOptions{}, ErrNoRAPL, "psys", false},
		{"garbage counter", func(t *testing.T, root string) {
			fakeZone(t, root, "intel-rapl:0", "package-0", 1, 10)
			require.NoError(t, os.WriteFile(filepath.Join(root, "intel-rapl:0", "energy_uj"), []byte("n/a"), 0o644))
		}, RAPLOptions{}, ErrRAPL, "energy_uj", false},
		{"counter above max", func(t *testing.T, root string) { fakeZone(t, root, "intel-rapl:0", "package-0", 11, 10) }, RAPLOptions{}, ErrRAPL, "exceeds", false},
		{"pue below 1", func(t *testing.T, root string) { fakeZone(t, root, "intel-rapl:0", "package-0", 1, 10) }, RAPLOptions{PUE: 0.9}, ErrInvalid, "PUE", false},
		{"counter vanishes", func(t *testing.T, root string) { fakeZone(t, root, "intel-rapl:0", "package-0", 1, 10) }, RAPLOptions{}, ErrRAPL, "energy_uj", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.setup(t, root)
			tc.opts.Root = root
			r, err := OpenRAPL(tc.opts)
			if tc.onRead {
				require.NoError(t, err)
				require.NoError(t, os.Remove(filepath.Join(root, "intel-rapl:0", "energy_uj")))
				_, err = r.Joules(context.Background(), time.Now())
			}
			require.ErrorIs(t, err, tc.wantErr)
			assert.Contains(t, err.Error(), tc.errHas)
		})
	}
}

func TestModel(t *testing.T) {
	tests := []struct {
		name    string
		m       Model
		busy    float64
		want    float64
		wantErr bool
	}{
		{"one device idle", Model{BusyW: 300, IdleW: 100}, 0, 100, false},
		{"8 devices 50% busy, PUE 1.2", Model{Devices: 8, BusyW: 300, IdleW: 100, PUE: 1.2}, 0.5, 8 * 250 * 1.2, false},
		{"full", Model{Devices: 2, BusyW: 300, IdleW: 100}, 1, 800, false},
		{"busy > 1", Model{BusyW: 1}, 1.1, 0, true},
		{"pue < 1", Model{BusyW: 1, PUE: 0.5}, 0, 0, true},
		{"negative power", Model{IdleW: -1}, 0, 0, true},
		{"negative devices", Model{Devices: -1}, 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := tc.m.Watts(tc.busy)
			if tc.wantErr {
				require.ErrorIs(t, err, ErrInvalid)
				return
			}
			require.NoError(t, err)
			assert.InDelta(t, tc.want, w, 1e-9)
			j, err := tc.m.Joules(time.Hour, tc.busy)
			require.NoError(t, err)
			assert.InDelta(t, tc.want*3600, j, 1e-6)
		})
	}
}

func TestModelMeter(t *testing.T) {
	ctx := context.Background()
	busy := []float64{1, 0.5, 0}
	m := &ModelMeter{Model: Model{Devices: 2, BusyW: 200, IdleW: 50, PUE: 1.5}, Busy: func(context.Context) (float64, error) {
		b := busy[0]
		busy = busy[1:]
		return b, nil
	}}
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	j, err := m.Joules(ctx, t0)
	require.NoError(t, err)
	assert.Zero(t, j)
	var want float64
	for i, w := range []float64{2 * 250 * 1.5, 2 * 150 * 1.5, 2 * 50 * 1.5} {
		j, err = m.Joules(ctx, t0.Add(time.Duration(i+1)*time.Minute))
		require.NoError(t, err)
		want += w * 60
		assert.InDelta(t, want, j, 1e-9)
	}
	_, err = m.Joules(ctx, t0)
	require.ErrorIs(t, err, ErrInvalid)

	failing := &ModelMeter{Busy: func(context.Context) (float64, error) { return 0, errors.New("npu-smi: timeout") }}
	_, err = failing.Joules(ctx, t0)
	require.NoError(t, err)
	_, err = failing.Joules(ctx, t0.Add(time.Second))
	require.ErrorContains(t, err, "npu-smi: timeout")
}
