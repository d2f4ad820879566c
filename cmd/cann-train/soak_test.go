//go:build soak

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/cann-train/cann-train/dev"
	"github.com/cann-train/cann-train/spec"
	"github.com/cann-train/cann-train/workflows"
)

// TestSoak (make soak; not in CI): one long run meets ≥ 20 faults of
// random node workers — SIGKILLs, and every third a SIGTERM (a graceful
// stop: the chunk in flight may end early, at a checkpoint) — which come
// back under the same ID, and one restart of the Temporal server itself
// (SQLite file, same port). It must complete with weights bit-identical to
// a fault-free run of the same spec, and lose no step to a stop.
// SOAK_KILLS sets the number of faults; SOAK_CHUNK_STEPS the chunk (and
// checkpoint) length, 40 by default — with chunks longer than the ranks'
// vote interval (~0.2 s; 2000 steps here) stops end chunks mid-way;
// SOAK_LOGS keeps the node workers' logs in that directory.
func TestSoak(t *testing.T) {
	kills := 20
	if v, err := strconv.Atoi(os.Getenv("SOAK_KILLS")); err == nil && v > 0 {
		kills = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir := t.TempDir()
	startServer := serverOnDisk(ctx, t, dir)
	srv := startServer()
	t.Cleanup(func() { srv.Stop() }) // srv changes on restart; runs after the control worker's cleanup
	c := controlInProcess(ctx, t, srv)

	logs := filepath.Join(dir, "logs")
	if v := os.Getenv("SOAK_LOGS"); v != "" { // keep the node workers' logs there
		logs = v
	}
	l := newLauncher(dir)
	l.LogDir = logs
	defer func() { _ = l.StopAll(5 * time.Second) }()
	ids := []string{"node-1", "node-2", "node-3", "node-4", "node-5"}
	procs := map[string]*dev.Proc{}
	start := func(id string) {
		p, err := l.Start(id+"-"+strconv.FormatInt(time.Now().UnixNano(), 36), "worker", "node", "--id", id,
			"--address", srv.FrontendAddr(), "--checkpoint-url", "file://"+filepath.Join(dir, "ckpt"),
			"--lease-every", "1s", "--log-level", "warn")
		if err != nil {
			t.Fatal(err)
		}
		procs[id] = p
	}
	for _, id := range ids {
		start(id)
	}
	waitRegistered(ctx, t, c, len(ids))

	chunk := int64(40)
	if v, err := strconv.ParseInt(os.Getenv("SOAK_CHUNK_STEPS"), 10, 64); err == nil && v > 0 {
		chunk = v
	}
	base := spec.RunSpec{Nodes: 3, Steps: 400 + 3*chunk*int64(kills), ChunkSteps: chunk, CheckpointEvery: chunk,
		MaxRestarts: 3 * kills, HeartbeatTimeout: spec.Duration(4 * time.Second)}.WithDefaults()
	run := func(name string) client.WorkflowRun {
		s := base
		s.Name = name
		r := startRun(ctx, t, c, workflows.RunInput{Spec: s})
		return r
	}
	var ref spec.RunStatus
	if err := run("soak-reference").Get(ctx, &ref); err != nil {
		t.Fatal(err)
	}

	rng := rand.New(rand.NewPCG(7, 7))
	r := run("soak")
	began := time.Now()
	done, restarted, stops := 0, false, 0
	// changes: recoveries, and moves off a stopping node at a boundary.
	lastChanges, lastStep := 0, int64(0)
	for done < kills || !restarted {
		st, _, closed, err := readProgress(ctx, c, r.GetID())
		if closed {
			t.Fatalf("run closed after %d kills: %+v %v", done, st, err)
		}
		// Act only once the run has moved on since the last fault.
		changes := len(st.Recoveries) + len(st.Rescalings)
		if err != nil || changes < lastChanges || st.Step < lastStep+80 || len(st.Nodes) == 0 || st.Phase != spec.PhaseTraining {
			select {
			case <-ctx.Done():
				t.Fatal("soak timed out")
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		lastStep, lastChanges = st.Step, changes
		if !restarted && done == kills/2 {
			t.Logf("restarting the Temporal server at step %d", st.Step)
			srv.Stop()
			srv = startServer()
			restarted = true
			continue
		}
		victim := st.Nodes[rng.IntN(len(st.Nodes))]
		if done%3 == 2 {
			t.Logf("stop %d: %s at step %d", done+1, victim, st.Step)
			if err := syscall.Kill(procs[victim].Pid(), syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			stops++
		} else {
			t.Logf("kill %d: %s at step %d", done+1, victim, st.Step)
			if err := procs[victim].Kill(); err != nil {
				t.Fatal(err)
			}
		}
		<-procs[victim].Done()
		done++
		start(victim) // the machine comes back
		lastChanges++
	}
	var st spec.RunStatus
	if err := r.Get(ctx, &st); err != nil {
		t.Fatalf("soak run failed: %v", err)
	}
	var resume []float64
	stopped := 0
	for i, rec := range st.Recoveries {
		if rec.Stopped {
			stopped++
			if rec.LostSteps != 0 {
				t.Errorf("recovery %d after a stop lost %d steps", i+1, rec.LostSteps)
			}
		}
		if !rec.ResumedAt.IsZero() && !rec.NoticedAt.IsZero() {
			resume = append(resume, rec.ResumedAt.Sub(rec.NoticedAt).Seconds())
		}
		first := "no chunk ended before the next fault" // (ResumedAt unset)
		if !rec.ResumedAt.IsZero() {
			first = fmt.Sprintf("seen→first step %.2fs", rec.ResumedAt.Sub(rec.SeenAt).Seconds())
		}
		t.Logf("recovery %d: %v → %v at step %d; detect %.2fs, notice→seen %.2fs, replace %.2fs, %s: %s",
			i+1, rec.FailedNodes, rec.Replacement, rec.FailedAtStep, rec.DetectSeconds, rec.SeenAt.Sub(rec.NoticedAt).Seconds(),
			rec.ReplaceSeconds, first, rec.Reason)
	}
	slices.Sort(resume)
	med := 0.0
	if len(resume) > 0 {
		med = resume[len(resume)/2]
	}
	t.Logf("soak: %d kills, %d stops + 1 server restart, %d recoveries (%d at a chunk its stopping node ended early), %d moves off a stopping node "+
		"at a chunk boundary, %d steps in %.0fs; median notice→first step %.2fs; identical %v",
		done-stops, stops, len(st.Recoveries), stopped, len(st.Rescalings), st.Step, time.Since(began).Seconds(), med, st.WeightsSHA256 == ref.WeightsSHA256)
	if st.Phase != spec.PhaseCompleted || st.WeightsSHA256 != ref.WeightsSHA256 {
		t.Fatalf("soak run %s, weights %s vs reference %s", st.Phase, st.WeightsSHA256, ref.WeightsSHA256)
	}
	moved := 0 // off a stopping node at a chunk boundary (the Cluster told the run)
	for _, rs := range st.Rescalings {
		if strings.Contains(rs.Reason, " stopping") {
			moved++
		}
	}
	if len(st.Recoveries)+moved < kills {
		t.Errorf("%d recoveries and %d moves off a stopping node for %d faults", len(st.Recoveries), moved, kills)
	}
}
