package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// The green policy at a chunk boundary. Reading the carbon signal (a trace
// file or an API) is I/O, so it happens in the PlanCarbon activity on the
// control worker, and so does the planner (engine/carbon.Plan): the
// activity returns only the small plan — a few slots — so history stays
// small whatever the forecast's length, this package keeps importing no
// engine code, and a change to the planner never affects replay (the plan
// is recorded). The workflow only compares the plan with workflow.Now and
// waits on a durable timer.

// maxUnpriced bounds the chunks kept for pricing while the signal is down.
const maxUnpriced = 64

// planGreen prices the finished chunks and, when plan is set and the
// policy applies now, re-plans the remaining work. It returns the next
// slot to wait for when now lies outside every planned slot.
func (r *run) planGreen(ctx workflow.Context, plan bool) (spec.CarbonSlot, bool) {
	g := r.st.Status.Green
	r.slotEnd = time.Time{}
	if r.spec.Green == nil || g == nil {
		return spec.CarbonSlot{}, false
	}
	now := workflow.Now(ctx)
	r.expireOverride(ctx, now)
	// The batch controller decides at every boundary the policy applies
	// (a resume cutting a wait short too); an override suspends it.
	batch := r.spec.Green.Batch != nil && !r.spec.IsExternal() && !g.Overridden
	// A non-interruptible run that has entered its window runs on to the end.
	asked := plan
	plan = plan && !g.Overridden && !(g.Started && !r.spec.Green.Interruptible)
	if !plan && !batch && len(r.st.Unpriced) == 0 {
		r.trainsUnasked(ctx, asked)
		return spec.CarbonSlot{}, false
	}
	out, ok := r.callCarbon(ctx, plan, batch)
	if !plan {
		r.trainsUnasked(ctx, asked)
		return spec.CarbonSlot{}, false
	}
	if !ok {
		r.trainsUnplanned(ctx)
		return spec.CarbonSlot{}, false
	}
	if out.PlanError != "" || out.Plan == nil {
		g.Note = "green plan failed: " + out.PlanError + "; training without waiting"
		workflow.GetLogger(ctx).Warn("green plan failed; training without waiting", "error", out.PlanError)
		r.trainsUnplanned(ctx)
		return spec.CarbonSlot{}, false
	}
	g.Plan, g.Note = out.Plan, out.PlanNote // the note: what the plan made do without
	for _, sl := range out.Plan.Slots {
		if !now.Before(sl.Start) && now.Before(sl.End) {
			g.Started = !r.spec.Green.Interruptible
			if r.spec.Green.Interruptible {
				r.slotEnd = sl.End // (the chunk in flight then ends: endAtSlotEnd)
			}
			return spec.CarbonSlot{}, false
		}
		if sl.Start.After(now) {
			return sl, true
		}
	}
	r.trainsUnplanned(ctx)
	return spec.CarbonSlot{}, false // nothing planned ahead: train now
}

// versionUnplannedStarts: a non-interruptible run that trains without a
// plan's window (its plan failed, the carbon signal was down, nothing was
// planned ahead) has entered its window and runs on to the end; before,
// a later plan could park it mid-run for a window of its own. Asked only
// for such a run, when it trains so.
const versionUnplannedStarts = "unplanned-starts"

// trainsUnplanned notes that the run trains now though no planned window
// holds now: a contiguous job then runs on to the end, as one that entered
// its window does.
func (r *run) trainsUnplanned(ctx workflow.Context) {
	g := r.st.Status.Green
	if r.spec.Green.Interruptible || g.Started ||
		workflow.GetVersion(ctx, versionUnplannedStarts, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	g.Started = true
	workflow.GetLogger(ctx).Info("a contiguous green job trains without a planned window: it runs on to the end", "step", r.st.Status.Step)
}

// trainsUnasked notes that a contiguous job trains now, outside any plan,
// because an override or a resume set its policy aside (asked: the
// boundary wanted a plan; false: a resume cut the wait): it has entered
// its window and runs on to the end (versionOverrideStarts). Before, a
// timed override's end, or the boundary after a resume, parked it
// mid-run for a window of its own.
func (r *run) trainsUnasked(ctx workflow.Context, asked bool) {
	g := r.st.Status.Green
	if r.spec.Green.Interruptible || g.Started || (asked && !g.Overridden) ||
		workflow.GetVersion(ctx, versionOverrideStarts, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	g.Started = true
	workflow.GetLogger(ctx).Info("a contiguous green job trains by override or resume: it runs on to the end", "step", r.st.Status.Step)
}

// versionOverrideStarts: see trainsUnasked. Asked only for a contiguous
// job that trains by override or resume before its window.
const versionOverrideStarts = "override-starts"

// recentSegments are the segments of segs (oldest first) that end within
// keep of now: what a re-plan needs to tell how long the run in progress
// has trained (spec.CarbonInput.Trained).
func recentSegments(segs []spec.Segment, now time.Time, keep time.Duration) []spec.Segment {
	i := len(segs)
	for i > 0 && !segs[i-1].End.Before(now.Add(-keep)) {
		i--
	}
	return slices.Clone(segs[i:])
}

// callCarbon runs PlanCarbon: it prices the unpriced chunks (and checks the
// budget) and, when plan is set, plans the remaining work; with batch it
// asks the batch controller too.
func (r *run) callCarbon(ctx workflow.Context, plan, batch bool) (spec.CarbonOutput, bool) {
	g := r.st.Status.Green
	now := workflow.Now(ctx)
	in := spec.CarbonInput{Policy: *r.spec.Green, RunStart: r.st.Status.StartedAt, Now: now, Plan: plan,
		Work: r.remainingWork(), Price: r.st.Unpriced,
		Trained: recentSegments(r.st.Status.Segments, now, r.spec.Green.MinSlot.D()+time.Hour)}
	if batch {
		gb, lr := r.batchAt(r.st.Status.Step)
		in.Batch = &spec.BatchInput{GlobalBatch: gb, LearningRate: lr, Nodes: max(len(r.st.Membership.Nodes), 1) * r.spec.LocalRanks(),
			BaseBatch: r.spec.GlobalBatch(), BaseLearningRate: r.spec.LearningRate}
	}
	summary := fmt.Sprintf("price %d chunk(s)", len(in.Price))
	if batch && !plan {
		summary = "batch controller; " + summary
	}
	if plan {
		deadline := in.RunStart.Add(r.spec.Green.Deadline.D())
		summary = fmt.Sprintf("plan %s of training by %s UTC; %s", in.Work.Round(time.Second),
			deadline.UTC().Format("2006-01-02 15:04"), summary)
	}
	// While PlanCarbon runs (a slow provider: up to its timeout per
	// try), the status says what the run waits for. (Status only.)
	st := &r.st.Status
	what := "the carbon trace"
	if r.spec.Green.Provider != "" {
		what = "the " + r.spec.Green.Provider + " API"
	}
	if asking := "reading the carbon intensity from " + what + " (PlanCarbon)"; st.Detail == "" {
		st.Detail = asking
		defer func() {
			if st.Detail == asking {
				st.Detail = ""
			}
		}()
	}
	var out spec.CarbonOutput
	if err := workflow.ExecuteActivity(carbonOptions(ctx, summary), spec.ActivityPlanCarbon, in).Get(ctx, &out); err != nil {
		g.Note = "carbon signal unavailable (" + message(err) + "); training without waiting"
		workflow.GetLogger(ctx).Warn("PlanCarbon failed; training without waiting", "error", err)
		r.trimUnpriced()
		return out, false
	}
	if out.NowGPerKWh > 0 {
		g.NowGPerKWh = out.NowGPerKWh
	}
	r.absorbPrices(ctx, out)
	r.takeBatch(ctx, out.Batch)
	return out, true
}

// schedule is the batch controller's changes so far (green.batch), in
// step order; every chunk trains under them. It lives in the status, so
// queries, the report and continue-as-new carry it.
func (r *run) schedule() []spec.BatchChange {
	if g := r.st.Status.Green; g != nil {
		return g.Schedule
	}
	return nil
}

// batchAt is the global batch and learning rate in force at step s: the
// last change of the schedule from s or before, else the spec's.
func (r *run) batchAt(s int64) (int, float64) {
	gb, lr := r.spec.GlobalBatch(), r.spec.LearningRate
	for _, b := range r.schedule() {
		if b.FromStep > s {
			break
		}
		gb, lr = b.GlobalBatch, b.LearningRate
	}
	return gb, lr
}

// minBatch is the smallest global batch of the run so far: a rescale may
// not exceed it (a checkpoint before its change may have to restore onto
// the new nodes, and every rank needs an example per step).
func (r *run) minBatch() int {
	gb := r.spec.GlobalBatch()
	for _, b := range r.schedule() {
		gb = min(gb, b.GlobalBatch)
	}
	return gb
}

// takeBatch applies the batch controller's decision from the current step
// on. After a rewind the steps up to the schedule's last change train as
// recorded (same batches, same bits) and the controller waits until the
// run is past it.
func (r *run) takeBatch(ctx workflow.Context, d *spec.BatchDecision) {
	g := r.st.Status.Green
	if d == nil || g == nil {
		return
	}
	from := r.st.Status.Step
	gb, lr := r.batchAt(from)
	g.BatchAction = d.Action
	if n := len(g.Schedule); d.GlobalBatch == gb || (n > 0 && g.Schedule[n-1].FromStep >= from) {
		g.Batch, g.LearningRate = gb, lr
		if d.GlobalBatch != gb {
			g.BatchAction = "hold (replaying the recorded schedule)"
		}
		return
	}
	// The linear scaling rule, from the spec's pair rather than chained
	// from change to change, so that a batch back at its start has its
	// learning rate back bit for bit. PlanCarbon computes the same from the
	// base pair in its input; the workflow keeps its own so that histories
	// recorded before the input carried the pair replay unchanged.
	lr = r.spec.LearningRate * float64(d.GlobalBatch) / float64(r.spec.GlobalBatch())
	g.Schedule = append(g.Schedule, spec.BatchChange{FromStep: from, GlobalBatch: d.GlobalBatch, LearningRate: lr})
	g.Batch, g.LearningRate = d.GlobalBatch, lr
	r.metrics(ctx).Gauge(metricGlobalBatch).Update(float64(d.GlobalBatch))
	workflow.GetLogger(ctx).Info("carbon batch controller", "action", d.Action, "g_per_kwh", d.GPerKWh,
		"from_step", from, "global_batch", d.GlobalBatch, "learning_rate", lr)
}

// priceChunks prices what the last chunks used (at the end of the run).
func (r *run) priceChunks(ctx workflow.Context) {
	if r.spec.Green != nil && r.st.Status.Green != nil && len(r.st.Unpriced) > 0 {
		r.callCarbon(ctx, false, false)
	}
}

func (r *run) trimUnpriced() {
	if n := len(r.st.Unpriced); n > maxUnpriced {
		r.st.Unpriced = slices.Clone(r.st.Unpriced[n-maxUnpriced:])
	}
}

// absorbPrices adds the priced chunks to the run's carbon figures.
func (r *run) absorbPrices(ctx workflow.Context, out spec.CarbonOutput) {
	g := r.st.Status.Green
	if out.PriceError != "" {
		g.PriceNote = out.PriceError
		r.trimUnpriced()
		return
	}
	if len(out.Priced) > 0 {
		g.PriceNote = ""
	}
	n := min(len(out.Priced), len(r.st.Unpriced))
	for _, p := range out.Priced[:n] {
		g.KWh += p.KWh
		g.Grams += p.Grams
	}
	r.st.Unpriced = slices.Clone(r.st.Unpriced[n:])
	if len(r.st.Unpriced) == 0 {
		r.st.Unpriced = nil
	}
	if g.KWh > 0 {
		g.GPerKWh = g.Grams / g.KWh
	}
	m := r.metrics(ctx)
	m.Gauge(metricCarbonGrams).Update(g.Grams)
	m.Gauge(metricEnergyKWh).Update(g.KWh)
	r.checkBudget(ctx)
}

// checkBudget raises the budget alert once at 95 % (and notes once when
// the budget is spent): a warning in the log, a memo on the execution and
// the status' budget fields. Training goes on.
func (r *run) checkBudget(ctx workflow.Context) {
	g := r.st.Status.Green
	if g.BudgetG <= 0 {
		return
	}
	g.BudgetUsedPct = 100 * g.Grams / g.BudgetG
	r.metrics(ctx).Gauge(metricBudgetUsed).Update(g.Grams / g.BudgetG)
	alert := !g.BudgetAlert && g.Grams >= spec.BudgetAlertFraction*g.BudgetG
	exceeded := !g.BudgetExceeded && g.Grams >= g.BudgetG
	if !alert && !exceeded {
		return
	}
	level := "alert"
	if exceeded {
		level = "exceeded"
	}
	r.metrics(ctx).WithTags(map[string]string{"level": level}).Counter(metricBudgetAlerts).Inc(1)
	g.BudgetAlert = true
	g.BudgetExceeded = g.BudgetExceeded || exceeded
	log := workflow.GetLogger(ctx)
	log.Warn("carbon budget alert", "used_g", g.Grams, "budget_g", g.BudgetG, "used_pct", g.BudgetUsedPct,
		"exceeded", g.BudgetExceeded, "step", r.st.Status.Step)
	memo := map[string]any{spec.MemoCarbon: map[string]any{
		"alert": true, "exceeded": g.BudgetExceeded, "used_g": g.Grams, "budget_g": g.BudgetG,
		"used_pct": g.BudgetUsedPct, "step": r.st.Status.Step, "at": workflow.Now(ctx),
	}}
	if err := workflow.UpsertMemo(ctx, memo); err != nil {
		log.Warn("upsert carbon memo", "error", err)
	}
	r.publish(ctx)
}

// remainingWork estimates the training time left: the measured wall time
// per step of the chunks so far, else the policy's estimate, else 0 (the
// planner then takes one forecast step). An external job has its own
// estimate (externalWork).
func (r *run) remainingWork() time.Duration {
	if r.spec.IsExternal() {
		return r.externalWork()
	}
	left := r.spec.Steps - r.st.Status.Step
	if left <= 0 {
		return 0
	}
	var wall float64
	var steps int64
	for _, seg := range r.st.Status.Segments {
		if seg.Lost {
			continue // its steps are trained again: not the pace
		}
		wall += seg.WallSeconds
		steps += seg.ToStep - seg.FromStep
	}
	if steps > 0 && wall > 0 {
		return time.Duration(wall / float64(steps) * float64(left) * float64(time.Second))
	}
	if w := r.spec.Green.Work.D(); w > 0 {
		return time.Duration(float64(w) * float64(left) / float64(r.spec.Steps))
	}
	return 0
}

// waitGreen waits on a durable timer (named for the slot in the Web UI)
// until the slot starts, or until a pause, resume, rescale or override
// arrives.
func (r *run) waitGreen(ctx workflow.Context, slot spec.CarbonSlot) error {
	r.settlePending(ctx)
	g, s := r.st.Status.Green, &r.st.Status
	now := workflow.Now(ctx)
	label := slot.Label(now)
	s.WaitUntil = slot.Start
	// (With what trains now: a first run of a green job waits hours, and
	// the override is what a user then looks for.)
	s.Detail = fmt.Sprintf("waiting for the green window until %s (%s); `cann-train green override %s` trains now",
		slot.Start.UTC().Format(time.RFC3339), label, r.spec.Name)
	if !r.st.GreenRecheck { // (a re-check goes on waiting: not a new wait)
		g.Waits++
		r.metrics(ctx).Counter(metricGreenWaits).Inc(1)
	}
	r.st.GreenRecheck = false
	g.WaitingSince = now
	r.setPhase(ctx, spec.PhaseGreenWait)
	workflow.GetLogger(ctx).Info("waiting for a green window", "until", slot.Start, "slot", label, "step", s.Step)
	was := r.st.Ctl
	timeout, rechecking := slot.Start.Sub(now), false
	if every := r.recheckEvery(); every > 0 && timeout > every &&
		workflow.GetVersion(ctx, versionRecheckGreenWait, workflow.DefaultVersion, 1) >= 1 {
		// Decide again at the next step, as the planner's policy does:
		// the present observed then may make now the time to train.
		timeout = every - now.Sub(now.Truncate(every))
		label += fmt.Sprintf("; decided again at %s", now.Add(timeout).UTC().Format("15:04"))
		rechecking = true
	}
	interrupted, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
		Timeout:      timeout,
		TimerOptions: workflow.TimerOptions{Summary: label},
	}, func() bool {
		c := r.st.Ctl
		return c.Paused || c.Resumes != was.Resumes || c.Rescale != was.Rescale || c.Overrides != was.Overrides
	})
	r.st.GreenRecheck = rechecking && !interrupted && err == nil
	g.WaitedSeconds += workflow.Now(ctx).Sub(now).Seconds()
	g.WaitingSince = time.Time{}
	s.WaitUntil, s.Detail = time.Time{}, ""
	r.heldBetweenChunks() // (the wait)
	return err
}

// versionRecheckGreenWait: a run waiting for its green window decides
// again at every step of its signal (the plan's Step, at least
// minRecheck), as the planner's online policy does — the present
// observed then may make now the time to train, and the re-plan knows
// the newer readings;
// before, it slept until the planned slot, through clean windows the
// plan had not foreseen. Asked for a wait longer than a step.
const versionRecheckGreenWait = "recheck-green-wait"

// versionRolloverInGreenWait: a green wait that has filled the history
// (ContinueAsNewSuggested: each re-decision adds a timer and a PlanCarbon
// call, ~8 events every 5 minutes or more) continues as new at a
// re-decision, and the next run goes on waiting; before, a wait of days
// grew one history towards Temporal's limits. Asked at such a
// re-decision.
const versionRolloverInGreenWait = "rollover-in-green-wait"

// errWaitRollover ends a chunk (launch) boundary that stopped a green
// wait to continue as new; the run's loop does so.
var errWaitRollover = errors.New("continue as new during a green wait")

// rollInWait: the green wait just ended to decide again and the history
// is long: continue as new now, the next run waiting on.
func (r *run) rollInWait(ctx workflow.Context) bool {
	return r.st.GreenRecheck && workflow.GetInfo(ctx).GetContinueAsNewSuggested() &&
		workflow.GetVersion(ctx, versionRolloverInGreenWait, workflow.DefaultVersion, 1) >= 1
}

// recheckEvery is how often a green wait decides again: the latest plan's
// step, at least minRecheck (0: unknown, a plan from an older build).
func (r *run) recheckEvery() time.Duration {
	g := r.st.Status.Green
	if g == nil || g.Plan == nil || g.Plan.Step <= 0 {
		return 0
	}
	return max(g.Plan.Step.D(), minRecheck)
}

// minRecheck bounds how often a green wait decides again: each decision
// is a timer and a PlanCarbon call in the run's history (a few events),
// and real signals step every 5 minutes or more.
const minRecheck = 5 * time.Minute

// expireOverride ends a green override whose time is up.
func (r *run) expireOverride(ctx workflow.Context, now time.Time) {
	c := &r.st.Ctl
	if c.Override && !c.OverrideUntil.IsZero() && !now.Before(c.OverrideUntil) {
		c.Override, c.OverrideUntil = false, time.Time{}
		workflow.GetLogger(ctx).Info("green override ended; the policy applies again")
	}
	r.noteOverride(ctx)
}

// noteOverride mirrors the override in the status.
func (r *run) noteOverride(workflow.Context) {
	if g := r.st.Status.Green; g != nil {
		g.Overridden, g.OverrideUntil = r.st.Ctl.Override, r.st.Ctl.OverrideUntil
	}
}

// versionEndAtSlotEnd: an interruptible green run whose chunk is still
// training when the planned window it started in ends asks the chunk's
// nodes to end it there (endInFlight), and waits for the next window at
// that boundary; before, the chunk trained on into the dirtier hours
// after the window, up to a chunk's length. Asked when such a chunk
// starts.
const versionEndAtSlotEnd = "end-at-slot-end"

// endAtSlotEnd starts, for the chunk in flight (ctx: its context, which
// ends with it), a durable timer to the end of the green window the run
// trains in (planGreen), at which the run asks the chunk to end early.
func (r *run) endAtSlotEnd(ctx workflow.Context) {
	end := r.slotEnd
	now := workflow.Now(ctx)
	if r.flight == nil || end.IsZero() || !end.After(now) ||
		workflow.GetVersion(ctx, versionEndAtSlotEnd, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	timer := workflow.NewTimerWithOptions(ctx, end.Sub(now), workflow.TimerOptions{
		Summary: fmt.Sprintf("end the chunk at the green window's end, %s UTC", end.UTC().Format("15:04")),
	})
	workflow.Go(ctx, func(ctx workflow.Context) {
		if timer.Get(ctx, nil) == nil {
			r.endInFlight(ctx, fmt.Sprintf("the green window ended at %s UTC", end.UTC().Format("15:04")))
		}
	})
}
