package workflows

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// refusingBucket plays the bucket of rank 0's checkpoints as a node with
// ReportStorageFailure reports it: refuse(in, tries) says whether the
// tries-th save at in.To is refused; background uploads (AsyncCheckpoint)
// are reported by the next chunk, refused when refuse says so.
type refusingBucket struct {
	mu      sync.Mutex
	refuse  func(in spec.ChunkInput, tries int) bool
	tries   map[int64]int // save attempts per step
	pending *spec.ChunkInput
}

func (b *refusingBucket) edit(in spec.ChunkInput, res *spec.ChunkResult) {
	if in.Rank != 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tries == nil {
		b.tries = map[int64]int{}
	}
	if p := b.pending; p != nil {
		// The upload the chunk before left in flight.
		b.pending = nil
		b.tries[p.To]++
		if b.refuse(*p, b.tries[p.To]) {
			res.CheckpointFailed = &spec.CheckpointFailure{Step: p.To, Error: "write: no space left on device"}
		} else {
			res.EarlierCheckpoint = &spec.CheckpointRef{URL: "mem://", Run: p.RunID, Step: p.To, Key: "ckpt"}
		}
	}
	switch {
	case !in.Checkpoint:
	case in.AsyncCheckpoint:
		res.Checkpoint = nil // reported by the next chunk
		b.pending = &in
	default:
		b.tries[in.To]++
		if b.refuse(in, b.tries[in.To]) {
			res.Checkpoint = nil
			res.CheckpointFailed = &spec.CheckpointFailure{Step: in.To, Error: "write: no space left on device"}
		}
	}
}

// saveOnlySteps are the save-only chunks' steps, in order.
func saveOnlySteps(ins []spec.ChunkInput) []int64 {
	var out []int64
	for _, in := range ins {
		if in.From == in.To && in.Rank == 0 {
			out = append(out, in.From)
		}
	}
	return out
}

// TestTrainingRunHoldsForStorage: a run whose bucket refuses the
// checkpoint it needs — its last chunk's, or a second upload in a row —
// holds at the boundary with the state its nodes keep and stores it with
// save-only chunks (at once, then after 15 s, 30 s, … or at a resume)
// until the bucket takes it: it neither trains on without checkpoints,
// nor retrains, nor fails. A node lost during the hold is a recovery
// from the last stored checkpoint — the held state's, when the save-only
// chunk stored it before the loss. One refused upload alone is noted,
// not held for.
func TestTrainingRunHoldsForStorage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse func(in spec.ChunkInput, tries int) bool
		// loseOnSave: rank 1's node is lost in the first save-only chunk.
		loseOnSave bool
		resumeAt   time.Duration // a resume signal (0: none)
		saves      []int64       // the save-only chunks' steps
		recoveries int
		// queries during the hold (offsets from the start) and the
		// WaitUntil each expects.
		at, waitUntil []time.Duration
		trained       []int64 // the first step of every chunk that trained, in order
	}{
		{name: "the last chunk's, refused three times",
			refuse:   func(in spec.ChunkInput, tries int) bool { return in.To == 400 && tries <= 3 },
			resumeAt: 5 * time.Second, saves: []int64{400, 400, 400},
			// Refused, then in the save-only chunk right after; a 15 s
			// wait cut by the resume at 5 s; refused; a 30 s wait.
			at: []time.Duration{2 * time.Second, 10 * time.Second}, waitUntil: []time.Duration{15 * time.Second, 35 * time.Second},
			trained: []int64{0, 100, 200, 300}},
		{name: "two uploads in a row",
			refuse: func(in spec.ChunkInput, _ int) bool { return in.To == 100 || in.To == 200 },
			// 100 refused (noted), 200 refused: hold at 300, where the
			// upload of 300 in flight is taken (no save of its own).
			saves: []int64{300}, trained: []int64{0, 100, 200, 300}},
		{name: "one upload refused",
			refuse:  func(in spec.ChunkInput, _ int) bool { return in.To == 200 },
			trained: []int64{0, 100, 200, 300}},
		{name: "a node lost during the hold, the state stored",
			refuse:     func(in spec.ChunkInput, tries int) bool { return in.To == 400 && tries <= 1 },
			loseOnSave: true, saves: []int64{400}, recoveries: 1,
			// rank 0 stored 400 before node-2 was lost: kept, nothing
			// trained again (versionSaverKept)
			trained: []int64{0, 100, 200, 300}},
		{name: "a node lost during the hold, the state refused",
			refuse:     func(in spec.ChunkInput, tries int) bool { return in.To == 400 && tries <= 2 },
			loseOnSave: true, saves: []int64{400}, recoveries: 1,
			// back to the last stored checkpoint (300) and train again
			trained: []int64{0, 100, 200, 300, 300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare-1")}
			b := &refusingBucket{refuse: tc.refuse}
			lost := false
			// The phase the run last published as each save-only chunk
			// starts.
			var (
				mu      sync.Mutex
				phase   string
				storing []string
			)
			ch := &fakeChunks{edit: b.edit, fail: func(in spec.ChunkInput) error {
				if in.From == in.To && in.Rank == 0 {
					mu.Lock()
					storing = append(storing, phase)
					mu.Unlock()
				}
				if tc.loseOnSave && in.From == in.To && in.Rank == 1 && !lost {
					lost = true
					return temporal.NewApplicationErrorWithCause("peer 0 reset", spec.ErrTypePeerFailed, errors.New("reset"), spec.PeerFailure{Rank: 1, Step: in.From})
				}
				return nil
			}}
			env := newRunEnv(t, cl, ch)
			env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
				sa := args.Get(0).(temporal.SearchAttributes)
				mu.Lock()
				defer mu.Unlock()
				phase, _ = sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(spec.SearchAttrStatus))
			})
			env.SetTestTimeout(30 * time.Second)
			if tc.resumeAt > 0 {
				env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, tc.resumeAt)
			}
			start := env.Now()
			held := make([]spec.RunStatus, len(tc.at))
			for i, d := range tc.at {
				env.RegisterDelayedCallback(func() { held[i] = queryStatus(t, env) }, d)
			}
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100, HeartbeatTimeout: spec.Duration(time.Hour)}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			require.Equal(t, spec.PhaseCompleted, st.Phase)
			require.EqualValues(t, 400, st.Step)
			require.NotNil(t, st.LastCkpt)
			require.EqualValues(t, 400, st.LastCkpt.Step)
			require.Nil(t, st.CheckpointFailed, "cleared by the checkpoints stored since")
			require.Len(t, st.Recoveries, tc.recoveries)
			require.Equal(t, len(tc.trained), st.Chunks, "save-only chunks are no chunks")
			require.Equal(t, "test_accuracy", st.EvalMetric, "the last chunk's evaluation stays")

			ins := ch.all()
			require.Equal(t, tc.saves, saveOnlySteps(ins))
			// Each try says so, the first (at once) too.
			require.Len(t, storing, len(tc.saves))
			for i, p := range storing {
				require.Equal(t, string(spec.PhaseStorageWait), p, "save-only chunk %d", i)
			}
			var trained []int64
			for i, in := range ins {
				if in.Rank != 0 {
					continue
				}
				if in.From == in.To {
					require.True(t, in.Checkpoint && in.ReportStorageFailure && !in.AsyncCheckpoint && !in.Evaluate,
						"save-only chunk %+v", in)
					// Nothing trains before the state is stored (or lost).
					if j := slices.IndexFunc(ins[i:], func(x spec.ChunkInput) bool { return x.From < x.To }); j >= 0 && !tc.loseOnSave {
						require.GreaterOrEqual(t, ins[i+j].From, in.From)
					}
					continue
				}
				trained = append(trained, in.From)
				require.Equal(t, in.Checkpoint && !in.AsyncCheckpoint, in.ReportStorageFailure, "chunk from %d", in.From)
			}
			require.Equal(t, tc.trained, trained)
			for i, want := range tc.waitUntil {
				require.Equal(t, spec.PhaseStorageWait, held[i].Phase, "at %v", tc.at[i])
				require.WithinDuration(t, start.Add(want), held[i].WaitUntil, 0, "at %v", tc.at[i])
				require.Contains(t, held[i].Detail, "its nodes keep the state at step 400")
				require.NotNil(t, held[i].CheckpointFailed)
				require.EqualValues(t, 400, held[i].CheckpointFailed.Step)
			}
		})
	}
}

// nextStorageWait doubles from storageRetryFirst up to storageRetryMax.
func TestNextStorageWait(t *testing.T) {
	var got []time.Duration
	for d := time.Duration(0); len(got) < 8; {
		d = nextStorageWait(d)
		got = append(got, d)
	}
	m := time.Minute
	require.Equal(t, []time.Duration{15 * time.Second, 30 * time.Second, m, 2 * m, 4 * m, 8 * m, 10 * m, 10 * m}, got)
}

// TestStorageHoldCrossesContinueAsNew: a hold begun as the run continues
// as new (its last chunk's checkpoint refused at the execution's last
// chunk) goes on in the next execution, from the state it carries.
func TestStorageHoldCrossesContinueAsNew(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b")}
	b := &refusingBucket{refuse: func(in spec.ChunkInput, tries int) bool { return in.To == 400 && tries <= 2 }}
	ch := &fakeChunks{edit: b.edit}
	env := newRunEnv(t, cl, ch)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100, ChunksPerRun: 4}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(env.GetWorkflowError(), &can), "want continue-as-new, got %v", env.GetWorkflowError())
	var next RunInput
	require.NoError(t, decodeArgs(can, &next))
	require.True(t, next.State.StorageHeld, "the hold is carried")
	require.EqualValues(t, 400, next.State.Status.Step)
	require.Empty(t, saveOnlySteps(ch.all()), "no save-only chunk before continue-as-new")

	env2 := newRunEnv(t, cl, ch)
	continueRun(env2, next)
	st := result(t, env2)
	require.Equal(t, spec.PhaseCompleted, st.Phase)
	require.EqualValues(t, 400, st.LastCkpt.Step)
	require.Equal(t, []int64{400, 400}, saveOnlySteps(ch.all()), "refused once more, then stored")
	require.Equal(t, 1, cl.calls, "the nodes (and their state) are kept")
}

// TestCancelledWhileHeldSaysNoMore: a run cancelled while it holds for
// its storage, with a pause asked for, ends cancelled without the hold's
// words, its retry time or the pause request (its status said them ever
// after), the refused checkpoint still named.
func TestCancelledWhileHeldSaysNoMore(t *testing.T) {
	cl := &fakeCluster{pool: testNodes("a", "b")}
	b := &refusingBucket{refuse: func(in spec.ChunkInput, _ int) bool { return in.To == 400 }}
	env := newRunEnv(t, cl, &fakeChunks{edit: b.edit})
	var held spec.RunStatus
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalPause, nil) }, time.Second)
	env.RegisterDelayedCallback(func() { held = queryStatus(t, env) }, 5*time.Second)
	env.RegisterDelayedCallback(env.CancelWorkflow, 10*time.Second)
	s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100}.WithDefaults()
	env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
	require.True(t, env.IsWorkflowCompleted())
	require.Error(t, env.GetWorkflowError())
	require.Equal(t, spec.PhaseStorageWait, held.Phase)
	require.True(t, held.PauseRequested && held.Detail != "" && !held.WaitUntil.IsZero(), "while held: %+v", held)
	st := queryStatus(t, env)
	require.Equal(t, spec.PhaseCancelled, st.Phase)
	require.True(t, st.Detail == "" && st.WaitUntil.IsZero() && !st.PauseRequested, "ended: detail %q, until %v, pause %v",
		st.Detail, st.WaitUntil, st.PauseRequested)
	require.NotNil(t, st.CheckpointFailed)
	require.EqualValues(t, 400, st.CheckpointFailed.Step)
}

// failedIn lists the nodes cl has marked failed, sorted.
func failedIn(cl *fakeCluster) []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var failed []string
	for id, f := range cl.failed {
		if f {
			failed = append(failed, id)
		}
	}
	slices.Sort(failed)
	return failed
}

// unreadable is the error a node sends when the storage does not serve
// the checkpoint it restores from.
func unreadable(node string, step int64) error {
	msg := fmt.Sprintf("node %s cannot read the checkpoint at step %d from s3://ckpt: the bucket did not answer in time", node, step)
	return temporal.NewApplicationErrorWithCause(msg, spec.ErrTypeCheckpointUnreachable, errors.New("stalled"),
		spec.CheckpointFailure{Step: step, Error: msg})
}

// TestTrainingRunWaitsToReadItsCheckpoint: after node-2 is lost at step
// 250, the new generation's nodes cannot read the checkpoint at 200
// (the storage is down): the run blames no node and counts no restart —
// max_restarts is 1 — but holds in waiting-storage, saying which node
// could not read what, and tries again after 15 s, then 30 s (a resume
// cuts a wait short). When the storage serves it again the run trains
// on from 200 and completes.
func TestTrainingRunWaitsToReadItsCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name string
		// unread(in, tries): the tries-th chunk from 200 after the loss
		// fails to read on this rank.
		unread     func(in spec.ChunkInput, tries int) error
		resumeAt   time.Duration
		evictAt    time.Duration   // spare-1 drained (0: not)
		at         []time.Duration // queries during the holds, from the loss
		waitUntil  []time.Duration
		recoveries int
		rescalings int
		failed     []string // nodes the Cluster has marked failed
		trained    []int64  // the chunks' first steps
		// detail: in every hold's status too; reason: in the last
		// recovery's. (max_restarts is 1.)
		detail, reason string
		shun           []spec.NodeProcess // in the last acquire request
	}{
		{name: "every rank, three times",
			unread: func(in spec.ChunkInput, tries int) error {
				if tries <= 3 {
					return unreadable(in.Membership.Nodes[in.Rank].ID, 200)
				}
				return nil
			},
			resumeAt: 5 * time.Second,
			// 15 s cut by the resume at 5 s; then 30 s, then 60 s.
			at: []time.Duration{2 * time.Second, 10 * time.Second, 50 * time.Second}, waitUntil: []time.Duration{15 * time.Second, 35 * time.Second, 95 * time.Second},
			recoveries: 1, failed: []string{"node-2"},
			trained: []int64{0, 100, 200, 200, 200, 200, 200, 300}},
		{name: "one rank",
			unread: func(in spec.ChunkInput, tries int) error {
				switch {
				case tries > 1:
					return nil
				case in.Rank == 1:
					return unreadable(in.Membership.Nodes[1].ID, 200)
				}
				// It saw rank 1 leave the forming group alive.
				return temporal.NewApplicationErrorWithCause("peer 1 left", spec.ErrTypePeerFailed, errors.New("EOF"), spec.PeerFailure{Rank: -1, Step: 200})
			},
			at: []time.Duration{2 * time.Second}, waitUntil: []time.Duration{15 * time.Second},
			recoveries: 1, failed: []string{"node-2"},
			trained: []int64{0, 100, 200, 200, 200, 300}},
		{name: "one node cut off, drained",
			unread: func(in spec.ChunkInput, _ int) error {
				switch {
				case !slices.Contains(in.Membership.NodeIDs(), "spare-1"):
					return nil
				case in.Membership.Nodes[in.Rank].ID == "spare-1":
					return unreadable("spare-1", 200)
				}
				return temporal.NewApplicationErrorWithCause("peer 1 left", spec.ErrTypePeerFailed, errors.New("EOF"), spec.PeerFailure{Rank: -1, Step: 200})
			},
			// Held until the drain and the resume after it.
			evictAt: 4 * time.Second, resumeAt: 5 * time.Second,
			at: []time.Duration{2 * time.Second}, waitUntil: []time.Duration{15 * time.Second},
			recoveries: 1, failed: []string{"node-2", "spare-1"}, rescalings: 1, // (spare-1: the drain)
			trained: []int64{0, 100, 200, 200, 200, 300}},
		{name: "one node cut off twice, replaced",
			// spare-1 (node-2's replacement) cannot read what node-1 reads,
			// both tries: held once, then replaced by spare-2 — with
			// max_restarts 1, spent on node-2's loss: it costs none.
			unread: func(in spec.ChunkInput, _ int) error {
				if !slices.Contains(in.Membership.NodeIDs(), "spare-1") {
					return nil
				}
				return readsCompared(in, []string{"spare-1"}, []string{"node-1"})
			},
			at: []time.Duration{2 * time.Second}, waitUntil: []time.Duration{15 * time.Second},
			detail:     "(node node-1 read it); the run replaces node spare-1 if the next try fails so again",
			recoveries: 2, failed: []string{"node-2", "spare-1"}, shun: []spec.NodeProcess{{ID: "spare-1"}},
			reason:  "node spare-1 could not read the checkpoint at step 200 in two tries in a row while node node-1 read it: cut off from the bucket (node spare-1 cannot read the checkpoint at step 200 from s3://ckpt",
			trained: []int64{0, 100, 200, 200, 200, 200, 300}},
		{name: "a different node each try, held",
			// Each node reads what the other cannot once: a bucket that
			// serves some requests and not others, nobody cut off.
			unread: func(in spec.ChunkInput, tries int) error {
				switch tries {
				case 1:
					return readsCompared(in, []string{"spare-1"}, []string{"node-1"})
				case 2:
					return readsCompared(in, []string{"node-1"}, []string{"spare-1"})
				}
				return nil
			},
			at: []time.Duration{2 * time.Second, 20 * time.Second}, waitUntil: []time.Duration{15 * time.Second, 45 * time.Second},
			detail:     "the run replaces node ",
			recoveries: 1, failed: []string{"node-2"},
			trained: []int64{0, 100, 200, 200, 200, 200, 300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &fakeCluster{pool: testNodes("node-1", "node-2", "spare-1", "spare-2")}
			var shun []spec.NodeProcess
			cl.onAcquire = func(req spec.AcquireRequest) { shun = req.Shun }
			var (
				mu        sync.Mutex
				lossChunk string // the session of the chunk node-2 is lost in
				lost      time.Time
				tries     int    // chunks from 200 after it
				last      string // the session of the last
			)
			var env *testsuite.TestWorkflowEnvironment
			ch := &fakeChunks{fail: func(in spec.ChunkInput) error {
				mu.Lock()
				defer mu.Unlock()
				if in.From != 200 {
					return nil
				}
				if lossChunk == "" {
					lossChunk, lost = in.Session, env.Now()
				}
				if in.Session == lossChunk {
					return temporal.NewApplicationErrorWithCause("peer 1 gone", spec.ErrTypePeerFailed, errors.New("reset"), spec.PeerFailure{Rank: 1, Step: 250})
				}
				if in.Session != last {
					tries, last = tries+1, in.Session
				}
				return tc.unread(in, tries)
			}}
			env = newRunEnv(t, cl, ch)
			env.SetTestTimeout(30 * time.Second)
			start := env.Now()
			if tc.resumeAt > 0 {
				env.RegisterDelayedCallback(func() { env.SignalWorkflow(spec.SignalResume, nil) }, tc.resumeAt)
			}
			if tc.evictAt > 0 {
				env.RegisterDelayedCallback(func() {
					cl.mu.Lock()
					cl.failed["spare-1"] = true // (the Cluster offers no drained node)
					cl.mu.Unlock()
					env.SignalWorkflow(spec.SignalEvict, spec.Evict{NodeID: "spare-1", Reason: "no route to the bucket"})
				}, tc.evictAt)
			}
			held := make([]spec.RunStatus, len(tc.at))
			for i, d := range tc.at {
				env.RegisterDelayedCallback(func() { held[i] = queryStatus(t, env) }, d)
			}
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 400, ChunkSteps: 100, MaxRestarts: 1,
				HeartbeatTimeout: spec.Duration(time.Hour)}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			if tc.reason != "" {
				require.Contains(t, st.Recoveries[len(st.Recoveries)-1].Reason, tc.reason)
			}
			require.Equal(t, tc.shun, shun, "the last acquire shuns the nodes cut off")
			var cutOff []string
			for _, p := range tc.shun {
				cutOff = append(cutOff, p.ID)
			}
			require.Equal(t, cutOff, st.CutOff)
			require.Equal(t, spec.PhaseCompleted, st.Phase)
			require.EqualValues(t, 400, st.Step)
			require.Len(t, st.Recoveries, tc.recoveries, "a storage that does not serve the checkpoint is no recovery")
			require.Len(t, st.Rescalings, tc.rescalings)
			require.Empty(t, st.Detail)
			require.Equal(t, tc.failed, failedIn(cl))
			// By session: a rank cancelled before it ran has no input.
			var trained []int64
			seen := map[string]bool{}
			for _, in := range ch.all() {
				if !seen[in.Session] {
					seen[in.Session] = true
					trained = append(trained, in.From)
				}
			}
			require.Equal(t, tc.trained, trained)
			require.Equal(t, start, lost, "the loss is at the start: the queries' offsets count from it")
			for i, want := range tc.waitUntil {
				require.Equal(t, spec.PhaseStorageWait, held[i].Phase, "at %v", tc.at[i])
				require.WithinDuration(t, start.Add(want), held[i].WaitUntil, 0, "at %v", tc.at[i])
				require.Contains(t, held[i].Detail, "cannot read the checkpoint at step 200 from s3://ckpt")
				require.Contains(t, held[i].Detail, "the run reads it again at")
				require.Contains(t, held[i].Detail, tc.detail)
			}
		})
	}
}

// readsCompared is the error every rank of a chunk sends when its ranks
// compared their reads of the checkpoint at step 200 (a node worker of
// spec.ChunkProtocolReadCheck): the nodes unread could not read it, those
// in readBy did. A node of unread says so in its own words.
func readsCompared(in spec.ChunkInput, unread, readBy []string) error {
	me := in.Membership.Nodes[in.Rank].ID
	msg := fmt.Sprintf("%s cannot read the checkpoint at step 200 from s3://ckpt", spec.NodesWord(unread))
	if slices.Contains(unread, me) {
		msg = fmt.Sprintf("node %s cannot read the checkpoint at step 200 from s3://ckpt: the bucket did not answer in time", me)
	}
	msg += fmt.Sprintf(" (%s read it)", spec.NodesWord(readBy))
	return temporal.NewApplicationErrorWithCause(msg, spec.ErrTypeCheckpointUnreachable, errors.New("stalled"),
		spec.CheckpointFailure{Step: 200, Error: msg, Unread: unread, ReadBy: readBy})
}

// TestTrainingRunStoresFromAnotherNode: node-1 (rank 0) cannot write to
// the bucket, node-2 can, and both speak spec.ChunkProtocolSaver. Two
// uploads refused in a row (100, 200) hold the run at 300, where the
// save-only chunk names node-2 the saver: stored at once, and the run
// trains on, remembering node-1. Refused twice again (400, 500), the run
// holds at 600, node-2 stores it, and the run moves off node-1 there —
// spare-1 takes its rank, nothing is retrained, no restart counted — and
// shuns it. Nodes of an older build keep rank 0 the saver: the run holds
// until node-1 writes again. A hold whose checkpoint node-1's own upload
// stored too (it landed as node-2 stored it) blames nobody.
func TestTrainingRunStoresFromAnotherNode(t *testing.T) {
	all := []int64{0, 100, 200, 300, 400, 500, 600, 700}
	for _, tc := range []struct {
		name     string
		protocol int
		// refuse: node-1 refuses its n-th save, of the state at step to
		// (async: an upload).
		refuse  func(n int, to int64, async bool) bool
		savers  []int   // the save-only chunks' savers (node ranks)
		steps   []int64 // … and steps
		nodes   []string
		trained []int64
	}{
		{name: "any saver", protocol: spec.ChunkProtocolSaver, refuse: func(int, int64, bool) bool { return true },
			savers: []int{1, 1}, steps: []int64{300, 600}, nodes: []string{"spare-1", "node-2"}, trained: all},
		{name: "older nodes", protocol: spec.ChunkProtocolReadCheck, refuse: func(n int, _ int64, _ bool) bool { return n <= 4 },
			savers: []int{0, 0}, steps: []int64{300, 300}, nodes: []string{"node-1", "node-2"}, trained: all},
		// node-1's upload of 300 lands as node-2 stores it: node-1 wrote,
		// the hold at 300 blames nobody; the one at 600 is a first time.
		{name: "rank 0's upload lands too", protocol: spec.ChunkProtocolSaver,
			refuse: func(_ int, to int64, async bool) bool { return to <= 600 && (to != 300 || !async) },
			savers: []int{1, 1}, steps: []int64{300, 600}, nodes: []string{"node-1", "node-2"}, trained: all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := testNodes("node-1", "node-2", "spare-1")
			for i := range pool {
				pool[i].Protocol = tc.protocol
			}
			cl := &fakeCluster{pool: pool}
			var shun []spec.NodeProcess
			cl.onAcquire = func(req spec.AcquireRequest) { shun = req.Shun }
			var (
				mu      sync.Mutex
				pending *spec.ChunkInput // rank 0's upload in flight
				refused int              // node-1's saves so far
			)
			stores := func(in spec.ChunkInput, rank int) bool {
				if in.Membership.Nodes[rank].ID != "node-1" {
					return true
				}
				refused++
				return !tc.refuse(refused, in.To, in.AsyncCheckpoint)
			}
			ch := &fakeChunks{edit: func(in spec.ChunkInput, res *spec.ChunkResult) {
				mu.Lock()
				defer mu.Unlock()
				saver := 0
				if in.From == in.To {
					saver = in.Saver
				}
				res.Checkpoint = nil
				if p := pending; in.Rank == 0 && p != nil {
					pending = nil
					if stores(*p, 0) {
						res.EarlierCheckpoint = &spec.CheckpointRef{URL: "mem://", Run: p.RunID, Step: p.To, Key: fmt.Sprintf("ckpt/%d", p.To)}
					} else {
						res.CheckpointFailed = &spec.CheckpointFailure{Step: p.To, Error: "dial tcp: no route to host"}
					}
				}
				switch {
				case in.Rank != saver || !in.Checkpoint:
				case in.AsyncCheckpoint:
					pending = &in
				case stores(in, in.Rank):
					res.Checkpoint = &spec.CheckpointRef{URL: "mem://", Run: in.RunID, Step: in.To, Key: fmt.Sprintf("ckpt/%d", in.To)}
				default:
					res.CheckpointFailed = &spec.CheckpointFailure{Step: in.To, Error: "dial tcp: no route to host"}
				}
			}}
			env := newRunEnv(t, cl, ch)
			env.SetTestTimeout(30 * time.Second)
			s := spec.RunSpec{Name: "t", Nodes: 2, Steps: 800, ChunkSteps: 100, HeartbeatTimeout: spec.Duration(time.Hour)}.WithDefaults()
			env.ExecuteWorkflow(spec.WorkflowTrainingRun, RunInput{Spec: s})
			st := result(t, env)
			require.Equal(t, spec.PhaseCompleted, st.Phase)
			require.Equal(t, tc.nodes, st.Nodes)
			require.EqualValues(t, 800, st.LastCkpt.Step)
			require.Empty(t, st.Recoveries)
			var savers []int
			var steps []int64
			for _, in := range ch.all() {
				if in.From == in.To && in.Rank == 0 {
					savers, steps = append(savers, in.Saver), append(steps, in.From)
				}
			}
			require.Equal(t, tc.savers, savers)
			require.Equal(t, tc.steps, steps)
			var trained []int64
			for _, in := range ch.all() {
				if in.Rank == 0 && in.From < in.To {
					trained = append(trained, in.From)
				}
			}
			require.Equal(t, tc.trained, trained, "nothing trained twice")
			if tc.nodes[0] == "node-1" {
				require.Empty(t, st.Rescalings)
				require.Empty(t, shun)
				require.Empty(t, st.CutOff)
				return
			}
			require.NotEmpty(t, st.Rescalings)
			rec := st.Rescalings[len(st.Rescalings)-1]
			require.Contains(t, rec.Reason, "node-1 replaced: cut off from the bucket: could not store the run's checkpoint in two holds in a row while node node-2 stored it")
			require.Equal(t, []spec.NodeProcess{{ID: "node-1"}}, shun, "the move's acquire shuns node-1")
			require.Equal(t, []string{"node-1"}, st.CutOff)
		})
	}
}
