// Package topology turns pairwise link measurements between ranks into the
// cluster's communication hierarchy: ranks grouped by host (the intra-host
// level: HCCS, shared memory, loopback) and the links between hosts (the
// inter-host level: RoCE, TCP). For each level it derives Hockney α–β
// parameters, α = latency and β = seconds per byte, as the median of the
// measurements at that level, and it flags links far slower than their
// level's median (a degraded cable, a congested switch port) by rank pair.
//
// [Analyze] is a pure function of the measurements; the result
// ([Topology]) is JSON-serialisable, renders as text for `cann-train
// topo-scan` ([Topology.WriteText]) and produces the HCCL rank table for
// the cluster ([RankTable]).
package topology

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

var (
	// ErrInvalid reports unusable input: no ranks, an empty host id, a rank
	// out of range, a self link, a non-positive bandwidth, bad options.
	ErrInvalid = errors.New("topology: invalid input")
	// ErrMissingLink reports a pair of ranks with no measurement in
	// either direction.
	ErrMissingLink = errors.New("topology: missing link measurement")
	// ErrDuplicateLink reports the same directed pair measured twice.
	ErrDuplicateLink = errors.New("topology: duplicate link measurement")
	// ErrInterleaved reports hosts whose ranks are not one contiguous
	// block, which an HCCL rank table cannot express.
	ErrInterleaved = errors.New("topology: ranks interleave across hosts")
)

// LinkError is the error for one rank pair; Kind is ErrMissingLink,
// ErrDuplicateLink or ErrInvalid.
type LinkError struct {
	From, To int
	Kind     error
	Msg      string
}

func (e *LinkError) Error() string {
	return fmt.Sprintf("topology: link %d->%d: %s", e.From, e.To, e.Msg)
}

// Unwrap returns the sentinel.
func (e *LinkError) Unwrap() error { return e.Kind }

// Link is one measurement from rank From to rank To. Measurements are
// directional; a pair measured in one direction only is taken as symmetric.
type Link struct {
	From        int           `json:"from"`
	To          int           `json:"to"`
	Latency     time.Duration `json:"latency_ns"`    // one-way small-message latency (α)
	BytesPerSec float64       `json:"bytes_per_sec"` // large-message bandwidth (1/β)
}

// Level is a layer of the hierarchy.
type Level string

// The two levels.
const (
	IntraHost Level = "intra-host"
	InterHost Level = "inter-host"
)

// Options are the slow-link thresholds; a zero field takes its default.
type Options struct {
	// A link is slow when its bandwidth is below this fraction of its
	// level's median bandwidth. Default 0.5; must be in (0, 1].
	SlowBandwidthFactor float64 `json:"slow_bandwidth_factor"`
	// A link is slow when its latency exceeds this multiple of its level's
	// median latency. Default 3; must be ≥ 1.
	SlowLatencyFactor float64 `json:"slow_latency_factor"`
}

// DefaultOptions returns the default thresholds.
func DefaultOptions() Options { return Options{SlowBandwidthFactor: 0.5, SlowLatencyFactor: 3} }

func (o Options) withDefaults() (Options, error) {
	d := DefaultOptions()
	if o.SlowBandwidthFactor == 0 {
		o.SlowBandwidthFactor = d.SlowBandwidthFactor
	}
	if o.SlowLatencyFactor == 0 {
		o.SlowLatencyFactor = d.SlowLatencyFactor
	}
	if !(o.SlowBandwidthFactor > 0 && o.SlowBandwidthFactor <= 1) {
		return o, fmt.Errorf("%w: SlowBandwidthFactor %v not in (0, 1]", ErrInvalid, o.SlowBandwidthFactor)
	}
	if !(o.SlowLatencyFactor >= 1) || math.IsInf(o.SlowLatencyFactor, 0) {
		return o, fmt.Errorf("%w: SlowLatencyFactor %v not a finite value ≥ 1", ErrInvalid, o.SlowLatencyFactor)
	}
	return o, nil
}

// HostGroup is one host and its ranks, ascending.
type HostGroup struct {
	Host  string `json:"host"`
	Ranks []int  `json:"ranks"`
}

// LevelStats are the α–β parameters of one level: the medians over every
// measured link at that level.
type LevelStats struct {
	Level       Level         `json:"level"`
	Links       int           `json:"links"`           // measurements at this level
	Alpha       time.Duration `json:"alpha_ns"`        // median latency
	BytesPerSec float64       `json:"bytes_per_sec"`   // median bandwidth
	Beta        float64       `json:"beta_s_per_byte"` // 1 / BytesPerSec
}

// SlowLink is a measurement below its level's thresholds.
type SlowLink struct {
	Link
	Level          Level   `json:"level"`
	BandwidthRatio float64 `json:"bandwidth_ratio"` // BytesPerSec / level median
	LatencyRatio   float64 `json:"latency_ratio"`   // Latency / level median (0 when the median is 0)
	SlowBandwidth  bool    `json:"slow_bandwidth"`
	SlowLatency    bool    `json:"slow_latency"`
}

// Topology is the analysed cluster.
type Topology struct {
	RankHost []string     `json:"rank_host"` // host id of each rank
	Hosts    []HostGroup  `json:"hosts"`     // ordered by lowest rank
	Levels   []LevelStats `json:"levels"`    // intra-host first; a level without links is omitted
	Slow     []SlowLink   `json:"slow_links,omitempty"`
	Links    []Link       `json:"links"` // the measurements, sorted by (From, To)
	Options  Options      `json:"options"`
}

// Ranks is the number of ranks.
func (t *Topology) Ranks() int { return len(t.RankHost) }

// LevelOf returns the level of the link between two ranks.
func (t *Topology) LevelOf(from, to int) Level {
	if t.RankHost[from] == t.RankHost[to] {
		return IntraHost
	}
	return InterHost
}

// Stats returns the parameters of a level, if it has links.
func (t *Topology) Stats(l Level) (LevelStats, bool) {
	i := slices.IndexFunc(t.Levels, func(s LevelStats) bool { return s.Level == l })
	if i < 0 {
		return LevelStats{}, false
	}
	return t.Levels[i], true
}

// Measurement returns the link from→to, or the reverse measurement when
// only that one exists.
func (t *Topology) Measurement(from, to int) (Link, bool) {
	cmpLink := func(l Link, k [2]int) int {
		return cmp.Or(cmp.Compare(l.From, k[0]), cmp.Compare(l.To, k[1]))
	}
	if i, ok := slices.BinarySearchFunc(t.Links, [2]int{from, to}, cmpLink); ok {
		return t.Links[i], true
	}
	if i, ok := slices.BinarySearchFunc(t.Links, [2]int{to, from}, cmpLink); ok {
		return t.Links[i], true
	}
	return Link{}, false
}

// Contiguous reports whether every host holds one contiguous block of ranks
// (required by the HCCL rank table).
func (t *Topology) Contiguous() bool {
	for _, h := range t.Hosts {
		if len(h.Ranks) == 0 || h.Ranks[len(h.Ranks)-1]-h.Ranks[0]+1 != len(h.Ranks) {
			return false
		}
	}
	return true
}

// Analyze builds the topology of len(rankHost) ranks, rank r living on host
// rankHost[r], from link measurements. Every pair of distinct ranks must be
// measured in at least one direction, and no directed pair twice.
func Analyze(rankHost []string, links []Link, opts Options) (*Topology, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	n := len(rankHost)
	if n == 0 {
		return nil, fmt.Errorf("%w: no ranks", ErrInvalid)
	}
	t := &Topology{RankHost: slices.Clone(rankHost), Levels: []LevelStats{}, Links: append([]Link{}, links...), Options: opts}
	hostAt := map[string]int{}
	for r, h := range rankHost {
		if h == "" {
			return nil, fmt.Errorf("%w: rank %d has an empty host id", ErrInvalid, r)
		}
		i, ok := hostAt[h]
		if !ok {
			i = len(t.Hosts)
			hostAt[h] = i
			t.Hosts = append(t.Hosts, HostGroup{Host: h})
		}
		t.Hosts[i].Ranks = append(t.Hosts[i].Ranks, r)
	}

	seen := make(map[[2]int]bool, len(links))
	for _, l := range links {
		bad := func(format string, args ...any) error {
			return &LinkError{From: l.From, To: l.To, Kind: ErrInvalid, Msg: fmt.Sprintf(format, args...)}
		}
		switch {
		case l.From < 0 || l.From >= n || l.To < 0 || l.To >= n:
			return nil, bad("rank out of range 0..%d", n-1)
		case l.From == l.To:
			return nil, bad("a rank linked to itself")
		case l.Latency < 0:
			return nil, bad("negative latency %v", l.Latency)
		case !(l.BytesPerSec > 0) || math.IsInf(l.BytesPerSec, 0):
			return nil, bad("bandwidth %v B/s is not a positive finite number", l.BytesPerSec)
		}
		k := [2]int{l.From, l.To}
		if seen[k] {
			return nil, &LinkError{From: l.From, To: l.To, Kind: ErrDuplicateLink, Msg: "measured twice"}
		}
		seen[k] = true
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if !seen[[2]int{i, j}] && !seen[[2]int{j, i}] {
				return nil, &LinkError{From: i, To: j, Kind: ErrMissingLink, Msg: fmt.Sprintf("no measurement in either direction (ranks on %s and %s)", rankHost[i], rankHost[j])}
			}
		}
	}
	slices.SortFunc(t.Links, func(a, b Link) int { return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To)) })

	for _, lv := range []Level{IntraHost, InterHost} {
		var lat []time.Duration
		var bw []float64
		for _, l := range t.Links {
			if t.LevelOf(l.From, l.To) == lv {
				lat = append(lat, l.Latency)
				bw = append(bw, l.BytesPerSec)
			}
		}
		if len(lat) == 0 {
			continue
		}
		s := LevelStats{Level: lv, Links: len(lat), Alpha: median(lat), BytesPerSec: median(bw)}
		s.Beta = 1 / s.BytesPerSec
		t.Levels = append(t.Levels, s)
	}

	for _, l := range t.Links {
		s, _ := t.Stats(t.LevelOf(l.From, l.To))
		sl := SlowLink{Link: l, Level: s.Level, BandwidthRatio: l.BytesPerSec / s.BytesPerSec}
		sl.SlowBandwidth = l.BytesPerSec < opts.SlowBandwidthFactor*s.BytesPerSec
		if s.Alpha > 0 {
			sl.LatencyRatio = float64(l.Latency) / float64(s.Alpha)
			sl.SlowLatency = sl.LatencyRatio > opts.SlowLatencyFactor
		}
		if sl.SlowBandwidth || sl.SlowLatency {
			t.Slow = append(t.Slow, sl)
		}
	}
	return t, nil
}

// median of a non-empty slice; the mean of the middle two for even lengths.
func median[T ~int64 | ~float64](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return s[m-1] + (s[m]-s[m-1])/2
}
