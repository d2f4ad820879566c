package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// BatchChange switches the global batch and the learning rate from step
// FromStep on: one decision of a batch controller (the carbon-aware one
// shrinks the batch while the grid is dirty and grows it while it is
// clean, scaling the learning rate with it).
type BatchChange struct {
	FromStep     int64
	GlobalBatch  int
	LearningRate float64
}

// Batch schedule and data order. Without a schedule step s trains entries
// [(s mod E)·G, (s mod E)·G + G) of epoch s/E's permutation, E = N/G
// whole batches per epoch (the remainder of each epoch is skipped). With
// one, the same rule runs as a cursor over the epochs' permutations: a
// step takes the next G entries of the current epoch, or starts the next
// epoch when fewer than G are left, with the G in force at that step. The
// cursor before step s is a function of (N, Config.GlobalBatch, Schedule,
// s) only, so every rank, any world size and a restore compute the same
// one; for the steps before the first change it is the scheduleless
// position, bit for bit.

// scheduleErrs checks c.Schedule.
func (c Config) scheduleErrs() []error {
	if len(c.Schedule) == 0 {
		return nil
	}
	if c.GlobalBatch <= 0 {
		return []error{fmt.Errorf("config Schedule has %d changes without GlobalBatch: a batch schedule needs the global batch mode", len(c.Schedule))}
	}
	var errs []error
	prev := int64(-1)
	for i, b := range c.Schedule {
		switch {
		case b.FromStep <= prev:
			errs = append(errs, fmt.Errorf("config Schedule[%d].FromStep=%d, want > %d (changes in step order, from step 0 on)", i, b.FromStep, prev))
		case b.GlobalBatch < 1 || b.GlobalBatch > MaxGlobalBatch:
			errs = append(errs, fmt.Errorf("config Schedule[%d].GlobalBatch=%d, want 1..%d", i, b.GlobalBatch, MaxGlobalBatch))
		case c.World >= 1 && b.GlobalBatch < c.World:
			errs = append(errs, fmt.Errorf("config Schedule[%d].GlobalBatch=%d is smaller than World=%d", i, b.GlobalBatch, c.World))
		case c.World >= 1 && (int64(b.GlobalBatch)+int64(c.World)-1)/int64(c.World) > MaxBatchPerRank:
			errs = append(errs, fmt.Errorf("config Schedule[%d].GlobalBatch=%d over World=%d gives more than %d examples per rank", i, b.GlobalBatch, c.World, MaxBatchPerRank))
		case !(b.LearningRate > 0) || math.IsInf(b.LearningRate, 0):
			errs = append(errs, fmt.Errorf("config Schedule[%d].LearningRate=%v, want a finite value > 0", i, b.LearningRate))
		}
		prev = max(prev, b.FromStep)
	}
	return errs
}

// batchAt returns the global batch, the learning rate and the index of
// the schedule entry (-1: none) in force at step s.
func (c Config) batchAt(s int64) (g int, lr float64, seg int) {
	g, lr, seg = c.GlobalBatchSize(), c.LearningRate, -1
	for i, b := range c.Schedule {
		if b.FromStep > s {
			break
		}
		g, lr, seg = b.GlobalBatch, b.LearningRate, i
	}
	return g, lr, seg
}

// maxRows is the most examples this rank trains in one step under c.
func (c Config) maxRows() int {
	lo, hi := c.RankSlice()
	rows := hi - lo
	for _, b := range c.Schedule {
		lo, hi := c.sliceOf(b.GlobalBatch)
		rows = max(rows, hi-lo)
	}
	return rows
}

// sliceOf is RankSlice for a global batch of g.
func (c Config) sliceOf(g int) (lo, hi int) {
	c.GlobalBatch = g
	return c.RankSlice()
}

// position returns the epoch and the offset in its permutation of the
// first example of step s's global batch (see the data order above).
func (t *Trainer) position(s int64) (epoch, off int64) {
	n := int64(t.train.N)
	g := int64(t.cfg.GlobalBatchSize())
	sched := t.cfg.Schedule
	if len(sched) == 0 || s < sched[0].FromStep {
		spe := n / g
		return s / spe, (s % spe) * g
	}
	at := int64(0)
	for _, b := range sched {
		if b.FromStep > s {
			break
		}
		epoch, off = advance(epoch, off, g, b.FromStep-at, n)
		at, g = b.FromStep, int64(b.GlobalBatch)
	}
	epoch, off = advance(epoch, off, g, s-at, n)
	if off+g > n {
		epoch, off = epoch+1, 0
	}
	return epoch, off
}

// advance moves the cursor (epoch, off) over k steps of g examples in
// epochs of n: the cursor after the last of them, off + g of its start.
func advance(epoch, off, g, k, n int64) (int64, int64) {
	if k == 0 {
		return epoch, off
	}
	if off+g > n {
		epoch, off = epoch+1, 0
	}
	left := (n - off) / g
	if k <= left {
		return epoch, off + k*g
	}
	// The rest start the next epoch, spe to an epoch; the cursor stays
	// just after the last one (not wrapped: the next step's batch may be
	// smaller and still fit).
	k -= left
	spe := n / g
	return epoch + 1 + (k-1)/spe, ((k-1)%spe + 1) * g
}

// applyBatch sets the global batch, this rank's slice of it, the gradient
// scale and the learning rate in force at step s. Buffers are sized for
// the largest batch of the schedule, so nothing is allocated.
func (t *Trainer) applyBatch(s int64) {
	g, lr, seg := t.cfg.batchAt(s)
	if seg == t.seg {
		return
	}
	lo, hi := t.cfg.sliceOf(g)
	t.seg, t.lr, t.lo, t.rows = seg, lr, int64(lo), hi-lo
	if t.cfg.GlobalBatch > 0 {
		t.gradScale = float64(t.cfg.World) / float64(g)
	}
}

// Schedule returns a copy of the batch schedule in force.
func (t *Trainer) Schedule() []BatchChange { return slices.Clone(t.cfg.Schedule) }

// SetSchedule replaces the batch schedule of a trainer that has already
// trained: the steps before [Trainer.GlobalStep] must keep their batch,
// so the changes from before it must be those in force, and only later
// ones may differ (a run appends the controller's decision at a chunk
// boundary). On error the trainer is unchanged.
func (t *Trainer) SetSchedule(sched []BatchChange) error {
	cfg := t.cfg.clone()
	cfg.Schedule = slices.Clone(sched)
	if errs := cfg.scheduleErrs(); len(errs) > 0 {
		return fmt.Errorf("engine: set schedule: %w", errors.Join(errs...))
	}
	past := func(s []BatchChange) []BatchChange {
		i := 0
		for i < len(s) && s[i].FromStep < t.step {
			i++
		}
		return s[:i]
	}
	if have, want := past(t.cfg.Schedule), past(cfg.Schedule); !slices.Equal(have, want) {
		return fmt.Errorf("engine: set schedule: the changes before step %d differ (%v in force, %v given): steps already trained cannot change batch", t.step, have, want)
	}
	for i, b := range cfg.Schedule {
		if b.GlobalBatch > t.train.N {
			return fmt.Errorf("engine: set schedule: Schedule[%d].GlobalBatch=%d exceeds the %d training examples", i, b.GlobalBatch, t.train.N)
		}
	}
	if rows := cfg.maxRows(); rows > len(t.yb) {
		t.acts = allocActs(t.sizes, rows)
		t.deltas = allocActs(t.sizes, rows)
		t.deltas[0] = nil
		t.yb = make([]uint8, rows)
		t.nz.reserve(rows, widestInput(t.sizes))
		t.lists = newRowLists(t.sizes, rows)
	}
	t.cfg = cfg
	t.seg = -2 // re-derive at the next step
	return nil
}
