//go:build record

package workflows

// Scripted external-job scenarios (see record_test.go): the run's world is
// played by scriptedWorld, RunExternal on the nodes' queues, which signals
// its checkpoints to the run as a node's first rank does and heartbeats
// while it hangs, so that a real server's cancellation reaches it.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/spec"
)

// TestRecordScriptedExternal records the external-job scenarios.
func TestRecordScriptedExternal(t *testing.T) {
	recordScenarios(t, []scenario{
		{name: "trainingrun_external_short_fails", run: recordExternalShortFails},
		{name: "trainingrun_external_start_fails", run: recordExternalStartFailRepeats},
		{name: "trainingrun_external_storage_fails", run: recordExternalStorageGivesUp},
		{name: "trainingrun_external_ask_again", run: recordExternalAskAgain},
	})
}

// scriptedWorld plays RunExternal for the run id: behave(n, in) decides
// each node's part of launch n (from 1, in order of the launches' first
// activities); the first rank's checkpoints are signalled with ckpt.
type scriptedWorld struct {
	r  *recorder
	id string
	mu sync.Mutex
	// sessions are the launches' sessions, in order of first start.
	sessions []string
	inputs   []spec.ExternalInput
	behave   func(ctx context.Context, n int, in spec.ExternalInput) (*spec.ChunkResult, error)
}

func (w *scriptedWorld) run(ctx context.Context, in spec.ExternalInput) (*spec.ChunkResult, error) {
	w.mu.Lock()
	w.inputs = append(w.inputs, in)
	n := slices.Index(w.sessions, in.Session)
	if n < 0 {
		w.sessions = append(w.sessions, in.Session)
		n = len(w.sessions) - 1
	}
	w.mu.Unlock()
	return w.behave(ctx, n+1, in)
}

// launches is how many launches started.
func (w *scriptedWorld) launches() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.sessions)
}

// ckpt signals the run that the launch of in uploaded its checkpoint at
// step (failed: its upload failed so).
func (w *scriptedWorld) ckpt(in spec.ExternalInput, step int64, failed string) {
	from := int64(0)
	if in.Restore != nil {
		from = in.Restore.Step
	}
	c := spec.CheckpointSaved{Session: in.Session,
		Ref:  spec.CheckpointRef{URL: "mem://", Run: in.Spec.Name, Step: step, Key: fmt.Sprintf("ckpt/%d", step), SHA256: fmt.Sprint(step)},
		Loss: 2.3 / float32(1+step), From: from, FirstLoss: 2.3 / float32(1+from)}
	if failed != "" {
		c = spec.CheckpointSaved{Session: in.Session, Ref: spec.CheckpointRef{Run: in.Spec.Name, Step: step}, Failed: failed}
	}
	w.r.signal(w.id, spec.SignalCheckpointSaved, c)
}

// finish is a node's clean end of its part at step end.
func finish(in spec.ExternalInput, started time.Time, end int64) *spec.ChunkResult {
	from := int64(0)
	if in.Restore != nil {
		from = in.Restore.Step
	}
	now := time.Now()
	return &spec.ChunkResult{NodeID: in.Membership.Nodes[in.Rank].ID, Rank: in.Rank, From: from, To: end,
		FirstLoss: 2.3 / float32(1+from), LastLoss: 2.3 / float32(1+end), Seconds: now.Sub(started).Seconds(),
		StartedAt: started, FirstStepAt: started.Add(100 * time.Millisecond), EndedAt: now}
}

// hang runs until the run cancels the activity, heartbeating so that the
// server's cancellation reaches it.
func hang(ctx context.Context) error {
	for {
		activity.RecordHeartbeat(ctx, spec.ChunkProgress{})
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// externalActivities are the activities an external run's scripted world
// needs, besides request (RequestCheckpoint, nil: none).
func externalActivities(cl *fakeCluster, w *scriptedWorld, request any) (control, node map[string]any) {
	control, node = runActivities(cl, &fakeChunks{})
	node[spec.ActivityRunExternal] = w.run
	node[spec.ActivityReservePort] = func(context.Context) (int, error) { return 29500, nil }
	node[spec.ActivityReadEnergy] = func(context.Context) (spec.EnergyReading, error) {
		return spec.EnergyReading{Reason: "no energy meter"}, nil
	}
	if request != nil {
		node[spec.ActivityRequestCheckpoint] = request
	}
	return control, node
}

// recordSpec is an external job on nodes nodes, with a short heartbeat
// timeout (a hanging world hears of its cancellation within seconds).
func recordSpec(name string, nodes int) spec.RunSpec {
	return spec.RunSpec{Name: name, Nodes: nodes, Steps: 100, MaxRestarts: 3, HeartbeatTimeout: spec.Duration(4 * time.Second),
		External: &spec.ExternalJob{Entrypoint: []string{"python3", "train.py"}, ProcsPerNode: 2, Workdir: "/w"}}.WithDefaults()
}

// finalStatus is the ended run id's status.
func (r *recorder) finalStatus(id string) spec.RunStatus {
	r.t.Helper()
	st, ok := r.status(id)
	if !ok {
		r.t.Fatalf("%s: no status", id)
	}
	return st
}

// recordExternalShortFails: a two-node job of 150 steps whose script
// exits 0 on every rank at step 100 fails, ShortOfSteps
// (versionExternalShortFails).
func recordExternalShortFails(t *testing.T, r *recorder) {
	const id = "run/external-short"
	nodes := testNodes("node-1", "node-2")
	cl := &fakeCluster{pool: nodes}
	w := &scriptedWorld{r: r, id: id}
	w.behave = func(ctx context.Context, n int, in spec.ExternalInput) (*spec.ChunkResult, error) {
		started := time.Now()
		if in.Rank == 0 {
			w.ckpt(in, 50, "")
		}
		time.Sleep(time.Second)
		return finish(in, started, 100), nil
	}
	control, node := externalActivities(cl, w, nil)
	r.serve(nodes, control, node)
	s := recordSpec("external-short", 2)
	s.Steps = 150
	_, err := r.run(id, RunInput{Spec: s}, 2*time.Minute)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeShortOfSteps || !strings.Contains(ae.Message(), "at step 100, short of the job's 150 steps") {
		t.Fatalf("want the run failed short of its steps, got %v", err)
	}
	if st := r.finalStatus(id); st.Phase != spec.PhaseFailed || st.Step != 100 {
		t.Fatalf("status %s at %d: want failed at 100", st.Phase, st.Step)
	}
	r.save(id, "", "trainingrun_external_short_fails", versionExternalShortFails)
}

// recordExternalStartFailRepeats: a one-node job whose script fails to
// import torch, before any rank reported a step, on two launches in a row
// fails the run, not retryable (versionStartFailRepeats), with restarts
// left.
func recordExternalStartFailRepeats(t *testing.T, r *recorder) {
	const id = "run/external-start-fails"
	nodes := testNodes("node-1")
	cl := &fakeCluster{pool: nodes}
	w := &scriptedWorld{r: r, id: id}
	noTorch := "Traceback (most recent call last):\n  File \"train.py\", line 20, in <module>\n    import torch\nModuleNotFoundError: No module named 'torch'\n"
	w.behave = func(ctx context.Context, n int, in spec.ExternalInput) (*spec.ChunkResult, error) {
		time.Sleep(500 * time.Millisecond) // (the interpreter starts, then fails)
		rank := n % 2                      // another rank each time: the same failure
		return nil, temporal.NewApplicationError(fmt.Sprintf("rank-%d on node node-1 exited with status 1 at step 0; log tail:\n%s", rank, noTorch),
			spec.ErrTypeRankExited, spec.RankExit{Rank: rank, Process: fmt.Sprintf("rank-%d", rank), Node: "node-1", ExitCode: 1,
				LogTail: noTorch, Program: "python3 = /usr/bin/python3", NoStep: true})
	}
	control, node := externalActivities(cl, w, nil)
	r.serve(nodes, control, node)
	_, err := r.run(id, RunInput{Spec: recordSpec("external-start-fails", 1)}, 2*time.Minute)
	if err == nil || !strings.Contains(err.Error(), "the job failed the same way on two launches in a row") {
		t.Fatalf("want the run failed for its repeated start failure, got %v", err)
	}
	if n := w.launches(); n != 2 {
		t.Fatalf("%d launches: want 2", n)
	}
	st := r.finalStatus(id)
	if st.Phase != spec.PhaseFailed || len(st.Recoveries) != 1 || !strings.Contains(st.Error, "No module named 'torch'") {
		t.Fatalf("status %s, %d recoveries, error %q: want failed after 1, naming the import", st.Phase, len(st.Recoveries), st.Error)
	}
	r.save(id, "", "trainingrun_external_start_fails", versionStartFailRepeats)
}

// recordExternalStorageGivesUp: a two-node world stores its checkpoint
// at 40, its upload at 80 fails, and its final checkpoint (100) cannot be
// stored either: the run fails at once, naming both, without a relaunch
// (versionStorageGivesUp).
func recordExternalStorageGivesUp(t *testing.T, r *recorder) {
	const id = "run/external-storage-gives-up"
	nodes := testNodes("node-1", "node-2")
	cl := &fakeCluster{pool: nodes}
	w := &scriptedWorld{r: r, id: id}
	w.behave = func(ctx context.Context, n int, in spec.ExternalInput) (*spec.ChunkResult, error) {
		started := time.Now()
		if in.Rank != 0 {
			time.Sleep(1500 * time.Millisecond)
			return finish(in, started, 100), nil
		}
		time.Sleep(300 * time.Millisecond)
		w.ckpt(in, 40, "")
		time.Sleep(300 * time.Millisecond)
		w.ckpt(in, 80, "write: no space left on device")
		time.Sleep(time.Second)
		return nil, temporal.NewApplicationError("save checkpoint: no space left on device", spec.ErrTypeCheckpointStorage,
			spec.CheckpointFailure{Step: 100, Error: "save checkpoint: no space left on device"})
	}
	control, node := externalActivities(cl, w, nil)
	r.serve(nodes, control, node)
	_, err := r.run(id, RunInput{Spec: recordSpec("external-storage-gives-up", 2)}, 2*time.Minute)
	if err == nil || !strings.Contains(err.Error(), "checkpoint storage keeps failing: the checkpoint at step 80 could not be stored, nor now the one at 100") {
		t.Fatalf("want the run failed for its storage, got %v", err)
	}
	if n := w.launches(); n != 1 {
		t.Fatalf("%d launches: want 1 (no relaunch)", n)
	}
	r.save(id, "", "trainingrun_external_storage_fails", versionStorageGivesUp)
}

// recordExternalAskAgain: on nodes that take checkpoint requests, a pause
// asks the world for a checkpoint (the first node picks 57) and is
// withdrawn (a resume) before it is uploaded: the world trains on. A
// later pause in the same launch asks again (versionAskAgain: the first
// node picks 80) and the run holds at 80; resumed, it relaunches from 80
// and completes.
func recordExternalAskAgain(t *testing.T, r *recorder) {
	const id = "run/external-ask-again"
	nodes := speaking(spec.ChunkProtocolCheckpointRequest, "node-1", "node-2", "spare")
	cl := &fakeCluster{pool: nodes, failed: map[string]bool{}}
	w := &scriptedWorld{r: r, id: id}
	first := make(chan struct{})
	var once sync.Once
	w.behave = func(ctx context.Context, n int, in spec.ExternalInput) (*spec.ChunkResult, error) {
		started := time.Now()
		if n > 1 {
			time.Sleep(time.Second)
			return finish(in, started, 100), nil
		}
		if in.Rank == 0 {
			w.ckpt(in, 20, "")
			once.Do(func() { close(first) })
		}
		return nil, hang(ctx)
	}
	var mu sync.Mutex
	var asked []string // "queue: step asked"
	picks := []int64{57, 80}
	request := func(ctx context.Context, in spec.CheckpointRequest) (int64, error) {
		mu.Lock()
		asked = append(asked, fmt.Sprintf("%s: %d", activity.GetInfo(ctx).TaskQueue, in.Step))
		if in.Step == 0 {
			step := picks[0]
			picks = picks[1:]
			mu.Unlock()
			return step, nil
		}
		mu.Unlock()
		if in.Step == 57 {
			r.signal(id, spec.SignalResume, nil) // withdrawn before the checkpoint
		}
		w.ckpt(spec.ExternalInput{Session: in.Session, Spec: spec.RunSpec{Name: "external-ask-again"}}, in.Step, "")
		return in.Step, nil
	}
	control, node := externalActivities(cl, w, request)
	r.serve(nodes, control, node)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-first:
		case <-time.After(time.Minute):
			t.Error("the first launch did not start")
			return
		}
		time.Sleep(time.Second)
		r.signal(id, spec.SignalPause, nil)
		// The first ask, its withdrawal and the checkpoint at 57.
		if !r.await(id, "training on past a checkpoint at 57, the pause withdrawn", 30*time.Second, func(st spec.RunStatus) bool {
			return st.LastCkpt != nil && st.LastCkpt.Step == 57 && !st.PauseRequested && st.Phase == spec.PhaseTraining
		}) {
			return
		}
		time.Sleep(time.Second)
		r.signal(id, spec.SignalPause, nil)
		if !r.await(id, "paused at 80", time.Minute, func(st spec.RunStatus) bool { return st.Phase == spec.PhasePaused && st.Step == 80 }) {
			return
		}
		time.Sleep(time.Second)
		r.signal(id, spec.SignalResume, nil)
	}()
	st, err := r.run(id, RunInput{Spec: recordSpec("external-ask-again", 2)}, 3*time.Minute)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != spec.PhaseCompleted || st.Step != 100 || len(st.Recoveries) != 0 {
		t.Fatalf("status %s at %d, %d recoveries: want completed at 100, none", st.Phase, st.Step, len(st.Recoveries))
	}
	mu.Lock()
	n1, n2 := spec.NodeTaskQueue("node-1"), spec.NodeTaskQueue("node-2")
	if want := []string{n1 + ": 0", n2 + ": 57", n1 + ": 0", n2 + ": 80"}; !slices.Equal(asked, want) {
		t.Errorf("asked %v: want %v", asked, want)
	}
	mu.Unlock()
	w.mu.Lock()
	for _, in := range w.inputs {
		if in.Session != w.sessions[0] && (in.Restore == nil || in.Restore.Step != 80) {
			t.Errorf("a relaunch restored %+v: want 80", in.Restore)
		}
	}
	w.mu.Unlock()
	if w.launches() != 2 {
		t.Errorf("%d launches: want 2", w.launches())
	}
	r.save(id, "", "trainingrun_external_ask_again", versionAskAgain)
}
