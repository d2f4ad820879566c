package activities

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/tcp"
	"github.com/cann-train/cann-train/engine"
	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/engine/energy"
	"github.com/cann-train/cann-train/engine/gradsync"
	"github.com/cann-train/cann-train/spec"
)

// Node holds one node worker's activity dependencies and the state that
// outlives a chunk: the loaded data set, open checkpoint buckets, and the
// trainer at the end of the last chunk, so that consecutive chunks of one
// generation continue in memory without a reload.
type Node struct {
	ID       string
	Listener *tcp.Listener
	Logger   *zap.Logger
	// DefaultCheckpointURL is used when the run spec names none.
	DefaultCheckpointURL string
	// MNISTDir overrides where the data set is read from.
	MNISTDir string
	// RendezvousPorts, lowest and highest, are the ports an external job's
	// rendezvous may take on this node (--rendezvous-ports; 0, 0: any
	// free port).
	RendezvousPorts [2]int
	// AllowFaults lets a chunk's KillAtStep SIGKILL (or SIGSTOP) this
	// process.
	AllowFaults bool
	// Incarnation is this worker process's spec.Node.Incarnation (empty:
	// not checked). A chunk planned for an earlier process of the node
	// (the run's membership still lists that one's address) fails at once
	// as NoState, and the run re-forms the group with this one.
	Incarnation string
	// Superseded, when set, is told (once or more) that a newer worker
	// process registered this node's ID: the run plans for that one, so
	// this one's chunks all fail; the worker stops serving.
	Superseded func(error)
	// WorkDir holds external jobs' per-run directories (logs, reports,
	// checkpoint directory, rank table) on this node.
	WorkDir string
	// PeerWatch, when positive, is how often an external job's node asks
	// its neighbour nodes' workers (their collective listeners) whether
	// they are alive; when a process exits non-zero it asks every node.
	// A node whose worker's address refuses connections is named
	// (PeerFailed) instead of the world waiting for its heartbeat timeout.
	// Zero: never (the members' addresses are not node workers').
	PeerWatch time.Duration
	// Energy, when set, is the host's energy meter (RAPL, npu-smi,
	// nvidia-smi): every chunk then reports its measured share of the
	// host's energy (ChunkResult.Joules), else the run models it.
	Energy   energy.Meter
	energyMu sync.Mutex
	// BucketGrace is how long this node may miss a run's last committed
	// checkpoint in the bucket before its chunks fail as
	// ErrTypeBucketNotShared (zero: DefaultBucketGrace): a shorter miss
	// may be a shared filesystem's directory cache (NFS trusts cached
	// attributes for up to a minute), not a bucket of its own.
	BucketGrace time.Duration
	// CheckpointRequestTimeout bounds each request this node's checkpoint
	// stores make to a bucket (checkpoint.Options.RequestTimeout: zero
	// is the default, a minute plus a second per MiB moved; negative,
	// none). A chunk that restores a checkpoint waits for its peers'
	// restores as long as such a load may take (connectTimeout): keep it
	// the same on every node.
	CheckpointRequestTimeout time.Duration
	// CheckpointGCGrace is the grace period of the chunk collection that
	// follows this node's checkpoint retention (checkpoint.Options.GCGrace:
	// zero is checkpoint.DefaultGCGrace, negative none): chunks written
	// less than this ago stay even when no checkpoint references them.
	CheckpointGCGrace time.Duration
	// connectWait replaces connectTimeout when positive (tests).
	connectWait time.Duration
	// observeBeats, when set, sees every beat of its TrainChunk
	// activities (tests).
	observeBeats func(spec.ChunkProgress)

	// world admits one external job's processes at a time on this node: a
	// relaunch waits until the last world's processes are gone, and a
	// built-in chunk too, for up to worldGoneWait (awaitNoWorld).
	world chan struct{}
	once  sync.Once
	// worldWait replaces worldGoneWait when positive, and onChunkWaits
	// hears a chunk begin to wait for a world (tests).
	worldWait    time.Duration
	onChunkWaits func()

	// faults are signalled faults armed on this worker (ArmFault).
	faults armedFaults

	mu    sync.Mutex
	train *engine.Dataset
	test  *engine.Dataset
	// began numbers the chunks this node began (warmTrainer.seq).
	began uint64
	// dataSum fingerprints train and test (dataFingerprint), read from
	// the directory dataAt.
	dataSum, dataAt string
	stores          map[string]*checkpoint.Store
	warm            []*warmTrainer // by local rank
	// pending is rank 0's checkpoint still uploading (AsyncCheckpoint).
	pending *pendingSave
	// jobs: by run name, the run (token or launch) whose job this process
	// stored last (recordJob).
	jobs map[string]string
	// sights: by run token and bucket URL, whether this process has seen
	// the run's checkpoints there (checkSharedBucket).
	sights map[string]*bucketSight
	// restored: the checkpoint (its key) each of the last few external
	// worlds restored here, by session (ProbeRead answers from it).
	restored []restoredIn
	// gc collects the chunks retention left unreferenced (retain).
	gc collector
	// running counts the chunks and external jobs in flight (Running).
	running atomic.Int32
	// ending: the chunks end early (EndChunks).
	ending atomic.Bool
	// endAsked are the sessions whose chunks the run asked to end early
	// (EndChunk; under mu).
	endAsked []string
	// asks reaches the external world running here (RequestCheckpoint;
	// under mu; nil: none).
	asks *worldAsks
}

type pendingSave struct {
	run, url string
	step     int64
	save     upload
	spec     spec.RunSpec // (its retention)
}

// upload is a background checkpoint save (*checkpoint.Pending).
type upload interface {
	Done() <-chan struct{}
	Wait(ctx context.Context) (checkpoint.Ref, error)
	Stats() checkpoint.SaveStats
}

type warmTrainer struct {
	run        string
	generation int64
	// token is the run's (new with every start, kept across recoveries and
	// continue-as-new): an earlier run of the same name never matches.
	token string
	codec string // the decided codec the syncer was built with
	sync  *gradsync.Syncer
	// seq is the sequence number of the chunk that kept it (Node.began).
	seq uint64
}

// Running is how many chunks and external jobs this node has in flight.
func (n *Node) Running() int { return int(n.running.Load()) }

// Settle waits, until ctx ends, for rank 0's checkpoint still uploading
// in the background (a chunk's AsyncCheckpoint): a stopping worker calls
// it before Close, so that the run finds that checkpoint committed when it
// recovers (ResolveCheckpoint) instead of rewinding past it. It says what
// it waited for: the run and step, zero when no upload was still going,
// and the upload's error.
func (n *Node) Settle(ctx context.Context) (run string, step int64, err error) {
	n.mu.Lock()
	p := n.pending
	n.mu.Unlock()
	if p == nil {
		return "", 0, nil
	}
	select {
	case <-p.save.Done():
		return "", 0, nil // over before: the next chunk reports how it went
	default:
	}
	if _, err = p.save.Wait(ctx); err != nil {
		err = n.waitError(ctx, p.url, p.step, err)
	}
	return p.run, p.step, err
}

// Close stops chunk collection and releases open buckets.
func (n *Node) Close() error {
	n.gc.close()
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for _, s := range n.stores {
		errs = append(errs, s.Close())
	}
	n.stores = nil
	return errors.Join(errs...)
}

// TrainChunk trains steps [in.From, in.To) as node rank in.Rank, with its
// spec's ranks_per_node ranks (one by default), each in its own goroutine
// with its own communicator and trainer: each connects to its peers,
// restores state (in memory, or from in.Restore), steps with gradients
// averaged by allreduce, honours cancellation between steps, and global
// rank 0 checkpoints and evaluates at the end. The node heartbeats its
// first rank's progress. A rank that fails cancels its node's others; the
// node fails with the first error, a lost peer named by its node rank.
func (n *Node) TrainChunk(ctx context.Context, in spec.ChunkInput) (_ *spec.ChunkResult, err error) {
	n.running.Add(1)
	defer n.running.Add(-1)
	var hb *heartbeater // (its progress names the step an error of temporalLost reached)
	defer func() { err = temporalLost(ctx, n.ID, hb.last(), err) }()
	defer n.endDone(in.Session)
	started := time.Now()
	n.mu.Lock()
	n.began++
	seq := n.began
	n.mu.Unlock()
	if err := n.checkInput(in); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadChunkInput", err)
	}
	if err := n.checkIncarnation(in.Membership.Nodes[in.Rank]); err != nil {
		return nil, err
	}
	if err := checkProtocols(in); err != nil {
		return nil, err
	}
	log := n.Logger.With(zap.String("run", in.RunID), zap.Int("rank", in.Rank), zap.String("session", in.Session))
	// Heartbeat from the start, not only after steps: connecting to peers
	// and restoring a checkpoint can take longer than the heartbeat
	// timeout, and only a dead process should miss it. The heartbeat is
	// also how a cancellation reaches this activity.
	hb = newHeartbeater(ctx, in)
	defer hb.stop()
	if n.observeBeats != nil {
		hb.mu.Lock()
		hb.observe = n.observeBeats
		hb.mu.Unlock()
	}
	if err := n.awaitNoWorld(ctx, log); err != nil {
		return nil, err
	}
	if err := n.checkSharedBucket(ctx, in.Token, in.Restore, log); err != nil {
		return nil, err
	}
	if err := n.openBucket(ctx, in.Spec); err != nil {
		return nil, err
	}
	train, test, err := n.data()
	if err != nil {
		return nil, unfitHost("node %s has no data set for %s: %w (give its worker --mnist-dir, or CANN_TRAIN_MNIST_DIR)", n.ID, in.Spec.Model.Kind, err)
	}
	if err := n.checkData(in); err != nil {
		return nil, err
	}
	k := in.Spec.LocalRanks()
	places := make([]place, k)
	examples := 0 // this node's examples per step (its ranks' slices)
	for local := range k {
		places[local] = place{local: local, global: in.Rank*k + local, world: len(in.Membership.Nodes) * k, perNode: k, seq: seq}
		lo, hi := engineConfig(in, places[local]).RankSlice()
		examples += hi - lo
	}
	cores := runtime.GOMAXPROCS(0)
	if want := k + 1; k > 1 && cores < want {
		// The ranks poll their links on up to k Ps (yielding the thread,
		// keeping the P); the worker's own goroutines — heartbeats, the
		// SDK's pollers — need one more, or they wait for a rank's
		// occasional Gosched (2 nodes of 2 ranks on 2 cores: 388–405
		// steps/s without the third P, 437–442 with it).
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(want))
	}
	outs := make([]*spec.ChunkResult, k)
	g, gctx := errgroup.WithContext(ctx)
	for local := range k {
		g.Go(func() error {
			p := places[local]
			p.nodeExamples = examples
			if local == 0 {
				p.hb = hb
			}
			res, err := n.trainRank(gctx, in, p, train, test, log)
			outs[local] = res
			return err
		})
	}
	if err := g.Wait(); err != nil {
		// Every rank has ended: the state any of them kept is suspect.
		n.forget(in, seq)
		if ctx.Err() != nil {
			return nil, ctx.Err() // cancelled: blame nobody
		}
		return nil, err
	}
	res := outs[0]
	res.NodeID, res.Rank, res.From, res.StartedAt = n.ID, in.Rank, in.From, started // (To: where the ranks ended)
	res.DataSHA256, res.Cores = n.dataSum, cores
	if k > 1 {
		var samples, comm float64
		for _, o := range outs {
			samples += o.SamplesPerSec
			comm += o.CommShare / float64(k)
			res.Seconds = max(res.Seconds, o.Seconds)
			if o.FirstStepAt.After(res.FirstStepAt) {
				res.FirstStepAt = o.FirstStepAt // the step is complete when the slowest rank has it
			}
		}
		res.SamplesPerSec, res.CommShare = samples, comm
	}
	res.EndedAt = time.Now()
	return res, nil
}

// place is one of a node's ranks in the run's world.
type place struct {
	local, global, world int
	perNode              int // ranks per node
	// nodeExamples is the node's examples per step, for the progress the
	// node's first rank reports (hb: nil for the others).
	nodeExamples int
	hb           *heartbeater
	seq          uint64 // the chunk's (Node.began)
}

// trainRank is one rank's part of TrainChunk: its figures in a
// ChunkResult (with the checkpoint and evaluation on global rank 0, and
// the node's measured energy on its first rank).
func (n *Node) trainRank(ctx context.Context, in spec.ChunkInput, p place, train, test *engine.Dataset, log *zap.Logger) (*spec.ChunkResult, error) {
	if p.perNode > 1 {
		log = log.With(zap.Int("global_rank", p.global))
	}
	sy, read, unread := n.trainerAt(ctx, in, p, train)
	compare := comparesReads(in)
	if unread != nil && (!compare || !unreachable(unread)) {
		return nil, unread
	}
	// (A read the storage did not serve is told to the peers once the
	// group has formed: agreeOnRead.)
	comm, err := n.connect(ctx, in, p)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err() // cancelled: blame nobody
		}
		return nil, peerError(err, in.From, p.perNode, in.Membership.Nodes)
	}
	defer comm.Close()
	if compare {
		if err := agreeOnRead(ctx, comm, in, p, read, unread); err != nil {
			return nil, err
		}
	}
	tr := sy.Trainer()
	if err := n.agreeOnData(ctx, comm, in, p); err != nil {
		return nil, err
	}
	if comm.CanShare() {
		// Ranks of one host keep the step buffer in shared memory, where
		// the peers read it directly (the direct algorithm: the ring's
		// bits, about one copy of the vector instead of the links' two).
		sb, err := comm.AllocShared(ctx, tr.BufferLen())
		if err != nil {
			return nil, peerError(err, in.From, p.perNode, in.Membership.Nodes)
		}
		if sb.Shared() { // else the ranks could not map each other's: stay
			restore, err := tr.UseStepBuffer(sb.Floats())
			if err != nil {
				return nil, err
			}
			defer restore() // before comm.Close unmaps it
		}
	}
	if err := sy.Begin(comm); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadChunkInput", err)
	}
	defer sy.End()
	before := sy.Stats()
	// This rank's examples per step (with a global batch the ranks' slices
	// may differ by one).
	lo, hi := tr.Config().RankSlice()
	perRank := float64(hi - lo)
	res := &spec.ChunkResult{}
	var ew *energyWindow
	if p.hb != nil {
		ew = n.startEnergy(ctx, in.Spec, in.Membership, in.Rank, log)
	}
	vote := newStopVote(comm, in, p, func() endReason {
		return endReason{stopping: n.ending.Load(), asked: n.endAskedFor(in.Session)}
	})
	loopStart := time.Now()
	for step := in.From; step < in.To; step++ {
		if err := ctx.Err(); err != nil {
			log.Info("chunk cancelled", zap.Int64("step", step))
			return nil, err
		}
		loss, err := sy.Step(ctx)
		if err != nil {
			if ctx.Err() != nil {
				log.Info("chunk cancelled", zap.Int64("step", step))
				return nil, ctx.Err()
			}
			return nil, peerError(err, step, p.perNode, in.Membership.Nodes)
		}
		if step == in.From {
			res.FirstLoss = loss
			res.FirstStepAt = time.Now()
		}
		res.LastLoss = loss
		if stop, by, err := vote.after(ctx, step+1); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, peerError(err, step+1, p.perNode, in.Membership.Nodes)
		} else if stop && step+1 < in.To {
			if by >= 0 {
				res.EndedBy, res.Stopping = in.Membership.Nodes[by/p.perNode].ID, n.ending.Load()
				log.Info("ending the chunk early: a node of the run is stopping; a checkpoint here lets the run go on without it",
					zap.Int64("step", step+1), zap.Int64("planned", in.To), zap.String("stopping", res.EndedBy))
			} else {
				log.Info("ending the chunk early, as the run asked; with a checkpoint here", zap.Int64("step", step+1), zap.Int64("planned", in.To))
			}
			in = endedAt(in, step+1)
			break
		}
		if p.hb == nil {
			continue
		}
		now := time.Now()
		el := now.Sub(loopStart).Seconds()
		done := step + 1 - in.From
		prog := spec.ChunkProgress{Step: step + 1, To: in.To, Loss: loss, FirstStepAt: res.FirstStepAt, At: now}
		if el > 0 {
			prog.SamplesPerSec = float64(done) * float64(p.nodeExamples) / el
			prog.CommShare = sy.Stats().Sub(before).Exposed.Seconds() / el
		}
		if in.Restore != nil {
			prog.LastCheckpoint = in.Restore.Step
		}
		p.hb.update(prog)
		if in.KillAtStep == step+1 {
			n.injectedFault(log, step+1, in.Freeze, nil)
		}
		n.strikeArmed(log, in.RunID, step+1, nil)
	}
	el := time.Since(loopStart).Seconds()
	res.Seconds, res.To = el, in.To
	d := sy.Stats().Sub(before)
	if el > 0 {
		res.SamplesPerSec = float64(in.To-in.From) * perRank / el
		res.CommShare = d.Exposed.Seconds() / el
	}
	if auto, at := in.Spec.AutoCodec(); auto && in.Codec == "" && (in.To == at || in.Calibrate) {
		// The warm-up ends here (or a resumed run measures what it lost)
		// and the workflow decides the codec next: time real exchanges
		// (every rank, collectively).
		if err := sy.Calibrate(ctx); err != nil {
			return nil, peerError(err, in.To, p.perNode, in.Membership.Nodes)
		}
	}
	res.Sync = chunkSync(in.Spec, sy, d)
	res.WeightsSHA256 = tr.WeightsSHA256()
	var commState [][]byte
	if in.Checkpoint && in.Spec.KeepsCommState() {
		// Every rank's error-feedback residuals go into rank 0's checkpoint.
		mine, err := sy.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("communication state: %w", err)
		}
		if commState, err = gradsync.GatherStates(ctx, comm, mine); err != nil {
			return nil, peerError(err, in.To, p.perNode, in.Membership.Nodes)
		}
	}
	if p.global == 0 {
		// An earlier chunk's checkpoint has had this whole chunk to upload.
		p.hb.storing(n.pendingStep(in.Spec.Name))
		res.EarlierCheckpoint, res.CheckpointFailed = n.finishPending(ctx, in, log)
		p.hb.storing(0)
	}
	if p.global == 0 && in.Checkpoint && in.AsyncCheckpoint {
		pend, err := n.saveAsync(in, snapshot(tr, commState))
		if err != nil {
			return nil, storageError(ctx, err, in.To)
		}
		res.PendingCheckpoint = pend
		log.Info("checkpoint uploading", zap.Int64("step", pend.Step))
	} else if p.global == saverRank(in, p) && in.Checkpoint {
		p.hb.storing(in.To)
		if err := n.saveNow(ctx, in, res, snapshot(tr, commState), log); err != nil {
			return nil, err
		}
		p.hb.storing(0)
	}
	if p.global == 0 && in.Evaluate {
		acc, _ := tr.Evaluate(test)
		res.EvalMetric, res.EvalValue = "test_accuracy", acc
	}
	n.keep(in, p.seq, p.local, sy)
	if ew != nil {
		res.Joules = ew.joules(ctx, log)
	}
	return res, nil
}

// saverRank is the global rank that stores in's synchronous checkpoint:
// rank 0, or in a save-only chunk the first rank of the node in.Saver
// names (every rank holds the whole state: the weights are replicated and
// GatherStates gave every rank every rank's residuals).
func saverRank(in spec.ChunkInput, p place) int {
	if in.From != in.To || in.Saver <= 0 || in.Saver >= len(in.Membership.Nodes) {
		return 0
	}
	return in.Saver * p.perNode
}

// endedAt is in for a chunk whose ranks agreed to end it at step, before
// in.To: it saves a checkpoint there, synchronously (the stopping node may
// hold rank 0), and neither evaluates nor calibrates (the run's next
// chunk, which reaches in.To, does).
func endedAt(in spec.ChunkInput, step int64) spec.ChunkInput {
	in.To, in.Checkpoint, in.AsyncCheckpoint, in.Evaluate, in.Calibrate = step, true, false, false, false
	return in
}

// saveNow stores st, the state at in.To, before the chunk ends (into
// res.Checkpoint). A bucket that refuses it fails the chunk
// (ErrTypeCheckpointStorage) or, with in.ReportStorageFailure, is
// reported in res.CheckpointFailed: the chunk succeeds and its ranks keep
// their state for the run to store again. A save-only chunk whose step
// the chunk before was uploading (committed since: res.EarlierCheckpoint)
// has nothing left to store.
func (n *Node) saveNow(ctx context.Context, in spec.ChunkInput, res *spec.ChunkResult, st *engine.State, log *zap.Logger) error {
	if e := res.EarlierCheckpoint; in.From == in.To && e != nil && e.Step == in.To {
		return nil
	}
	ref, err := n.save(ctx, in, st, time.Duration(res.Seconds*float64(time.Second)))
	switch {
	case err != nil && in.ReportStorageFailure && ctx.Err() == nil:
		log.Warn("checkpoint not stored; the ranks keep the state for the run to store it again", zap.Int64("step", in.To), zap.Error(err))
		res.CheckpointFailed = &spec.CheckpointFailure{Step: in.To, Error: err.Error()}
	case err != nil:
		return storageError(ctx, err, in.To)
	default:
		res.Checkpoint = ref
		log.Info("checkpoint committed", zap.Int64("step", ref.Step), zap.String("key", ref.Key))
	}
	return nil
}

// snapshot is tr's state with every rank's communication state.
func snapshot(tr *engine.Trainer, commState [][]byte) *engine.State {
	st := tr.Snapshot()
	st.CommState = commState
	return st
}

// chunkSync reports a chunk's gradient exchange (nil for plain runs).
func chunkSync(sp spec.RunSpec, sy *gradsync.Syncer, d gradsync.Stats) *spec.ChunkSync {
	if sp.NewSyncStatus() == nil {
		return nil
	}
	cs := &spec.ChunkSync{Phase: sy.Phase(), Codec: sy.Codec(), CompressedSteps: d.CompressedSteps,
		BytesSent: d.BytesSent, DenseBytes: d.DenseBytes, CommSeconds: d.Comm.Seconds(), ExposedSeconds: d.Exposed.Seconds()}
	m := sy.Measure()
	cs.BytesPerSec, cs.ComputeSeconds, cs.DenseSeconds = m.BytesPerSec, m.Compute.Seconds(), m.Dense.Seconds()
	if len(m.Exchange) > 0 {
		cs.ExchangeSeconds = map[string]float64{}
		for name, d := range m.Exchange {
			cs.ExchangeSeconds[name] = d.Seconds()
		}
	}
	return cs
}

// checkIncarnation refuses work planned for an earlier process of this
// node: its peers would dial that process's address, which nobody
// answers, and this one would wait for them until the connect timeout.
func (n *Node) checkIncarnation(me spec.Node) error {
	if me.Incarnation == "" || n.Incarnation == "" || me.Incarnation == n.Incarnation {
		return nil
	}
	err := fmt.Errorf("node %s restarted (process %s) after the run planned this chunk for its process %s at %s",
		n.ID, n.Incarnation, me.Incarnation, me.CommAddr)
	if startedBefore(n.Incarnation, me.Incarnation) {
		// This process is the older: nothing restarted, a second worker
		// registered the same ID since, and the two take each other's
		// chunks from the node's task queue.
		mine := "?"
		if n.Listener != nil {
			mine = n.Listener.Addr()
		}
		err = fmt.Errorf("two workers serve node %s: process %s at %s registered it after this one (process %s at %s), "+
			"and the run planned this chunk for it; stop one of them (--id must be unique)",
			n.ID, me.Incarnation, me.CommAddr, n.Incarnation, mine)
		if n.Superseded != nil {
			n.Superseded(err)
		}
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), spec.ErrTypeNoState, err)
}

// startedBefore reports whether incarnation a ("<unix ns>.<pid>", as
// workers make them) started before b; false when either says no time.
func startedBefore(a, b string) bool {
	at, aok := incarnationStart(a)
	bt, bok := incarnationStart(b)
	return aok && bok && at < bt
}

func incarnationStart(inc string) (int64, bool) {
	ns, _, _ := strings.Cut(inc, ".")
	t, err := strconv.ParseInt(ns, 10, 64)
	return t, err == nil
}

func (n *Node) checkInput(in spec.ChunkInput) error {
	if in.Rank < 0 || in.Rank >= len(in.Membership.Nodes) {
		return fmt.Errorf("rank %d outside membership of %d node(s)", in.Rank, len(in.Membership.Nodes))
	}
	if got := in.Membership.Nodes[in.Rank].ID; got != n.ID {
		return fmt.Errorf("chunk for rank %d is meant for node %q, this is %q", in.Rank, got, n.ID)
	}
	switch {
	case in.From < 0 || in.To < in.From:
		return fmt.Errorf("negative step range [%d, %d)", in.From, in.To)
	case in.To == in.From && (!in.Checkpoint || in.AsyncCheckpoint):
		return fmt.Errorf("empty step range [%d, %d) that saves no checkpoint (a save-only chunk checkpoints synchronously)", in.From, in.To)
	}
	return in.Spec.Validate()
}

// Preload reads the data set now rather than on the first chunk, so that
// a spare that takes over a failed rank starts training at once.
func (n *Node) Preload() error {
	_, _, err := n.data()
	return err
}

// DataSHA256 is the fingerprint of the data set the node loaded
// (Preload), empty before or without one.
func (n *Node) DataSHA256() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dataSum
}

func (n *Node) data() (train, test *engine.Dataset, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.train != nil {
		return n.train, n.test, nil
	}
	dir := n.MNISTDir
	if dir == "" {
		if dir, err = engine.MNISTDir(); err != nil {
			return nil, nil, err
		}
	}
	train, test, err = engine.LoadMNIST(dir)
	if err != nil {
		return nil, nil, err
	}
	n.train, n.test, n.dataSum, n.dataAt = train, test, dataFingerprint(train, test), dir
	return train, test, nil
}

// dataFingerprint is a node's data set's fingerprint (ChunkInput.DataSHA256):
// SHA-256 over its training and test sets' (about 0.2 s for MNIST, once
// per process).
func dataFingerprint(train, test *engine.Dataset) string {
	sum := sha256.Sum256([]byte(train.SHA256() + " " + test.SHA256()))
	return hex.EncodeToString(sum[:])
}

// agreeOnData compares, at a run's first chunk (no in.DataSHA256 yet),
// this node's data fingerprint with its peers' (an allgather of 16
// floats a rank, each two bytes of the SHA-256). All equal, and equal to
// the job's pin (in.Spec.DataSHA256) if it has one: nil. Else the run's
// data set is the pinned one where some node holds it, or without a pin
// the one more than half the nodes hold: a node without it is unfit
// (NodeUnfit, in its own words) and its peers name it (PeerFailed).
// Where no node holds the pinned set, or no majority agrees, nobody can
// tell which node is wrong (a mistyped pin must not mark every node it
// meets), and the chunk fails for good (DataMismatch), naming every
// node's.
func (n *Node) agreeOnData(ctx context.Context, comm *ascend.Communicator, in spec.ChunkInput, p place) error {
	if in.DataSHA256 != "" {
		return nil // checkData compared it
	}
	n.mu.Lock()
	mine, at := n.dataSum, n.dataAt
	n.mu.Unlock()
	pin := in.Spec.DataSHA256
	raw, err := hex.DecodeString(mine)
	if err != nil || len(raw) != sha256.Size {
		return fmt.Errorf("node %s: data fingerprint %q is not a SHA-256", n.ID, mine)
	}
	const words = sha256.Size / 2
	src := make([]float32, words)
	for i := range src {
		src[i] = float32(binary.BigEndian.Uint16(raw[2*i:])) // exact: no float bits to keep
	}
	all := make([]float32, words*p.world)
	if err := comm.AllGatherInto(ctx, all, src); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return peerError(err, in.From, p.perNode, in.Membership.Nodes)
	}
	nodes := len(in.Membership.Nodes)
	sums := make([]string, nodes) // by node rank (a node's ranks share its data)
	count := map[string]int{}
	for node := range nodes {
		b := make([]byte, 0, sha256.Size)
		for _, v := range all[node*p.perNode*words:][:words] {
			b = binary.BigEndian.AppendUint16(b, uint16(v))
		}
		sums[node] = hex.EncodeToString(b)
		count[sums[node]]++
	}
	if count[mine] == nodes && (pin == "" || mine == pin) {
		return nil
	}
	right, why := "", "" // the run's data set, and how this node's differs from it
	switch {
	case pin != "" && count[pin] > 0:
		right = pin
		why = fmt.Sprintf("the one the job pins (data_sha256): sha256 %s, not %s", short(mine), short(right))
	case pin == "":
		for sum, c := range count {
			if 2*c > nodes {
				right = sum
				why = fmt.Sprintf("its peers': sha256 %s, %d of %d nodes hold %s", short(mine), c, nodes, short(sum))
			}
		}
	}
	var odd []string
	for node, sum := range sums {
		if sum != right {
			odd = append(odd, fmt.Sprintf("%s %s", in.Membership.Nodes[node].ID, short(sum)))
		}
	}
	switch {
	case right == "" && pin != "":
		err := fmt.Errorf("no node holds the data set the job pins (data_sha256 %s): %s (check the pin, or give the workers its files)",
			short(pin), strings.Join(odd, ", "))
		return temporal.NewNonRetryableApplicationError(err.Error(), spec.ErrTypeDataMismatch, err)
	case right == "":
		err := fmt.Errorf("the nodes' data sets differ and no majority agrees on one: %s (give their workers the same files, or name the run's in the job file's data_sha256)", strings.Join(odd, ", "))
		return temporal.NewNonRetryableApplicationError(err.Error(), spec.ErrTypeDataMismatch, err)
	case mine != right:
		return unfitData(spec.DataDisagreement{Run: right, Node: mine},
			"node %s's data set (%s) differs from %s (give its worker the same files)", n.ID, at, why)
	}
	first := slices.IndexFunc(sums, func(sum string) bool { return sum != right })
	err = fmt.Errorf("node %s's data set differs from the run's, sha256 %s (%s)", in.Membership.Nodes[first].ID, short(right), strings.Join(odd, ", "))
	return temporal.NewApplicationErrorWithCause(err.Error(), spec.ErrTypePeerFailed, err,
		spec.PeerFailure{Rank: first, Step: in.From, NoticedAt: time.Now(), Data: &spec.DataDisagreement{Run: right, Node: sums[first]}})
}

// checkProtocols refuses, before a chunk whose nodes compare their data
// sets (a run's first: no in.DataSHA256), a membership with a node whose
// worker does not (an older build: spec.Node.ChunkProtocol below
// spec.ChunkProtocolDataCheck): it would
// never join the allgather, and every node would wait out its timeouts.
// Each node names the first such node (PeerFailed with Unfit, that node
// itself included): the run fails it as misconfigured, out of the pool
// until its worker registers again, upgraded. Later chunks do the same
// on every build.
func checkProtocols(in spec.ChunkInput) error {
	if in.DataSHA256 != "" {
		return nil
	}
	for rank, nd := range in.Membership.Nodes {
		if p := nd.ChunkProtocol(); p < spec.ChunkProtocolDataCheck {
			why := fmt.Sprintf("node %s runs an older cann-train build (chunk protocol %d, not %d: it does not compare data sets "+
				"at a run's first chunk); upgrade its worker", nd.ID, p, spec.ChunkProtocolDataCheck)
			return temporal.NewApplicationErrorWithCause(why, spec.ErrTypePeerFailed, errors.New(why),
				spec.PeerFailure{Rank: rank, Step: in.From, NoticedAt: time.Now(), Unfit: why})
		}
	}
	return nil
}

// short is a fingerprint as the node's messages show it: "ac2983e23822…".
func short(sum string) string { return spec.ShortSHA256(sum) + "…" }

// checkData refuses a chunk of a run whose data set (in.DataSHA256) this
// node does not hold: it would train another model, and nothing else
// would show it.
func (n *Node) checkData(in spec.ChunkInput) error {
	n.mu.Lock()
	sum, at := n.dataSum, n.dataAt
	n.mu.Unlock()
	if in.DataSHA256 == "" || sum == in.DataSHA256 {
		return nil
	}
	return unfitData(spec.DataDisagreement{Run: in.DataSHA256, Node: sum},
		"node %s's data set (%s) differs from the one run %s trains on: sha256 %s, not %s (give its worker the same files)",
		n.ID, at, in.RunID, short(sum), short(in.DataSHA256))
}

// unfitData is unfitHost for a node whose data set is not the run's,
// with both fingerprints as its detail: the run learns its data set
// from it, and gives the node back fit for runs on its own.
func unfitData(d spec.DataDisagreement, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return temporal.NewApplicationErrorWithCause(err.Error(), spec.ErrTypeNodeUnfit, err, d)
}

// trainerAt returns a trainer positioned at in.From, with the syncer that
// averages its gradients: the pair kept from the previous chunk of the same
// generation, the checkpoint in.Restore (this rank's error-feedback
// residuals included; read: it was read from the bucket), or a fresh one
// at step 0.
func (n *Node) trainerAt(ctx context.Context, in spec.ChunkInput, p place, train *engine.Dataset) (*gradsync.Syncer, bool, error) {
	n.mu.Lock()
	var w *warmTrainer
	if p.local < len(n.warm) {
		w, n.warm[p.local] = n.warm[p.local], nil
	}
	n.mu.Unlock()
	cfg := engineConfig(in, p)
	if w != nil && w.run == in.RunID && w.token == in.Token && w.generation == in.Membership.Generation && w.sync.Trainer().GlobalStep() == in.From &&
		sameShard(w.sync.Trainer().Config(), cfg) && w.sync.Trainer().SetSchedule(cfg.Schedule) == nil {
		// (SetSchedule takes the batch controller's latest change; it
		// refuses one that rewrites steps already trained, and then the
		// checkpoint below is the way back.)
		if w.codec == in.Codec {
			return w.sync, false, nil
		}
		// An auto codec decided at this boundary: the steps so far were
		// uncompressed, so the syncer starts its compressed phase fresh.
		if err := w.sync.Decide(in.Codec, nil); err == nil {
			return w.sync, false, nil
		}
	}
	tr, err := engine.NewTrainer(cfg, train)
	if err != nil {
		return nil, false, temporal.NewNonRetryableApplicationError(err.Error(), "BadModel", err)
	}
	sy, err := gradsync.New(tr, in.Spec.SyncPolicy(in.Codec))
	if err != nil {
		return nil, false, temporal.NewNonRetryableApplicationError(err.Error(), "BadModel", err)
	}
	switch {
	case in.Restore != nil && in.Restore.Step == in.From:
		store, err := n.store(ctx, in.Restore.URL)
		if err != nil {
			return nil, false, err
		}
		payload, err := store.Load(ctx, toRef(*in.Restore))
		var ce *checkpoint.CorruptError
		if errors.As(err, &ce) {
			return nil, false, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("checkpoint at step %d is corrupt: %s: %s", in.Restore.Step, ce.Key, ce.Reason), spec.ErrTypeCorruptCheckpoint, err)
		}
		if err != nil {
			return nil, false, n.loadError(ctx, in.Token, *in.Restore, err)
		}
		var st engine.State
		if err := st.UnmarshalBinary(payload); err != nil {
			return nil, false, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("checkpoint %s: %v", in.Restore.Key, err), spec.ErrTypeCorruptCheckpoint, err)
		}
		if err := tr.Restore(&st); err != nil {
			// Sound (its hashes held) but another job's: no fallback to
			// an earlier checkpoint would fit better.
			return nil, false, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("the checkpoint at step %d (%s) was written by a run of another job — the job file must match it: %v",
					in.Restore.Step, in.Restore.Key, err), spec.ErrTypeCheckpointUnfit, err)
		}
		switch {
		case len(st.CommState) == cfg.World:
			if err := sy.UnmarshalBinary(st.CommState[p.global]); err != nil {
				return nil, false, temporal.NewNonRetryableApplicationError(
					fmt.Sprintf("checkpoint %s: rank %d's communication state: %v", in.Restore.Key, p.global, err), spec.ErrTypeCorruptCheckpoint, err)
			}
		case len(st.CommState) > 0:
			// Another world size: the residuals belong to other shards.
			// Error feedback restarts from zero and loses only what it
			// was still holding back.
			n.Logger.Info("checkpoint from another world size: error-feedback residuals reset",
				zap.Int("saved_ranks", len(st.CommState)), zap.Int("ranks", cfg.World))
		}
		return sy, true, nil
	case in.From == 0:
		return sy, false, nil
	default:
		err := fmt.Errorf("node %s has no state at step %d and no checkpoint there", n.ID, in.From)
		return nil, false, temporal.NewNonRetryableApplicationError(err.Error(), spec.ErrTypeNoState, err)
	}
}

// engineConfig is the engine configuration of p's rank. With
// in.GlobalBatch set (the run's global batch, kept across rescales) the
// engine splits that many examples per step over the membership and
// normalises gradients by it, so a run that shrank or grew trains the same
// global batch; a checkpoint made on another world size restores into it
// (engine.Trainer.Restore reshards). 0 keeps BatchPerRank × world.
func engineConfig(in spec.ChunkInput, p place) engine.Config {
	cfg := engine.Config{
		Seed:         in.Spec.Seed,
		Hidden:       in.Spec.Model.Hidden,
		LearningRate: in.Spec.LearningRate,
		BatchPerRank: in.Spec.BatchPerRank,
		GlobalBatch:  in.GlobalBatch,
		Rank:         p.global,
		World:        p.world,
	}
	for _, b := range in.Schedule {
		cfg.Schedule = append(cfg.Schedule, engine.BatchChange(b))
	}
	if in.Spec.Optimizer == spec.OptimizerOneBitAdam {
		cfg.Optimizer, cfg.FreezeStep = engine.OneBitAdam, in.Spec.FreezeStep
	}
	if o := in.Spec.Overlap; o != nil {
		cfg.BucketBytes, cfg.FirstBucketBytes = o.BucketKiB<<10, o.FirstBucketKiB<<10
	}
	return cfg
}

// sameShard reports whether a kept trainer configured as have trains the
// same slice of the same global batch as want (a rescale normally also
// bumps the membership generation; this guards against one that does not).
func sameShard(have, want engine.Config) bool {
	return have.Rank == want.Rank && have.World == want.World && have.GlobalBatchSize() == want.GlobalBatchSize()
}

func (n *Node) keep(in spec.ChunkInput, seq uint64, local int, sy *gradsync.Syncer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if local >= len(n.warm) {
		n.warm = append(n.warm, make([]*warmTrainer, local+1-len(n.warm))...)
	}
	n.warm[local] = &warmTrainer{run: in.RunID, generation: in.Membership.Generation, token: in.Token, codec: in.Codec, sync: sy, seq: seq}
}

// forget drops the warm state a failed chunk (the seq-th this node began)
// leaves suspect: its run's, of its generation or an earlier one, kept by
// a chunk that began no later than it (a node's other local ranks may
// have kept theirs). Another run's, a later generation's, or one a later
// chunk kept stays: a chunk cancelled late — one that learnt of its
// cancellation only at its next heartbeat, after the node had moved on,
// in a new generation or in a retry of the same one (a run that held
// for its storage) — must not wipe the state of the chunk the node
// trains now.
func (n *Node) forget(in spec.ChunkInput, seq uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, w := range n.warm {
		if w != nil && w.run == in.RunID && w.generation <= in.Membership.Generation && w.seq <= seq {
			n.warm[i] = nil
		}
	}
}

func (n *Node) connect(ctx context.Context, in spec.ChunkInput, p place) (*ascend.Communicator, error) {
	addrs := make([]string, p.world)
	for g := range addrs {
		addrs[g] = in.Membership.Nodes[g/p.perNode].CommAddr // a node's ranks share its listener
	}
	// Determinism: the gradient allreduce uses one algorithm for the whole
	// run — the ring unless the job named another or its topology scan
	// chose one (recorded in history) — so the order in which floats are
	// summed, and so the weights, never depends on link speeds measured
	// later. A recovered run ends bit-identical to one that never failed.
	algo := ascend.AlgoRing
	if in.Algorithm != "" {
		a, err := ascend.ParseAlgorithm(in.Algorithm)
		if err != nil || a == ascend.AlgoAuto {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("chunk algorithm %q: %v", in.Algorithm, err), "BadChunkInput", err)
		}
		algo = a
	}
	return tcp.Connect(ctx, n.Listener, tcp.Group{
		Session: in.Session, Rank: p.global, Addrs: addrs, Token: []byte(in.Token),
	}, tcp.Options{
		ConnectTimeout:  n.connectTimeout(in),
		ReachWithin:     connectBase, // a peer no dial reaches is named then, however long a restore may take
		OpTimeout:       in.Spec.HeartbeatTimeout.D(),
		Algorithm:       algo,
		SkipCalibration: true,
		SharedMemory:    true, // links (and the step buffer) in shared memory within a host
		RefusedGrace:    peerRefusedGrace,
	})
}

// connectTimeout bounds forming a chunk's group: connectBase, and when the
// chunk starts from a checkpoint, as long as reading it may take
// (checkpoint.Options.LoadTimeout). A rank joins once it has its state:
// one whose reads are slower than its peers' (a node far from the
// bucket, one whose requests stall) or the only one reading (its peers
// kept theirs) is still loading when the others are ready. They must
// outwait its load, so that the reader reports the storage
// (CheckpointUnreachable: the run holds for it) instead of being blamed
// for never connecting — and replaced, and its replacement after it. A
// dead peer is found sooner anyway: its address refuses connections
// (peerRefusedGrace), or its heartbeat stops; one that no dial reaches (a
// partition, a firewall on its port) is named after connectBase
// (tcp.Options.ReachWithin).
func (n *Node) connectTimeout(in spec.ChunkInput) time.Duration {
	d := connectBase
	if n.connectWait > 0 {
		d = n.connectWait
	}
	if r := in.Restore; r != nil && r.Step == in.From {
		d += checkpoint.Options{RequestTimeout: n.CheckpointRequestTimeout}.LoadTimeout(r.Bytes)
	}
	return d
}

// connectBase is the connect timeout of a chunk that restores nothing.
const connectBase = 30 * time.Second

// peerRefusedGrace is how long a member's address may refuse connections
// before the rank dialling it names it as failed: a node worker's listener
// is up before it registers, so a refusal means its process is gone (a
// worker restarted since listens elsewhere and is told its new peers by the
// next generation). Without it the chunk waited out its 30 s connect
// timeout, or the dead node's heartbeat timeout. A listener refuses only
// when no process holds its port, so the grace need not cover slow starts,
// only a few retries (1 s until session 22: a kill between chunks then took
// 1.3–2.2 s to be named).
const peerRefusedGrace = 250 * time.Millisecond

// bucketURL is the bucket a run saves into: its spec's, else this node's
// default.
func (n *Node) bucketURL(s spec.RunSpec) string {
	if s.CheckpointURL != "" {
		return s.CheckpointURL
	}
	return n.DefaultCheckpointURL
}

// openBucket opens the bucket the run saves into before a chunk (or a
// world) starts: a URL no driver opens as given — an unknown query
// parameter, a directory that cannot be created — fails it at once, not
// retryable, instead of once a whole chunk trained and rank 0 saved.
func (n *Node) openBucket(ctx context.Context, s spec.RunSpec) error {
	if u := n.bucketURL(s); u != "" {
		_, err := n.store(ctx, u)
		return err
	}
	return nil
}

// loadError is a failed load of checkpoint ref (not a corrupt one) by a
// chunk of the run with token (an external job's: its run ID). One that
// is not there was deleted since it was committed, when this node found
// the run's checkpoints in that bucket before (CheckpointGone: the run
// falls back to the one before); else this node does not reach the bucket
// its saver wrote to (CheckpointNotHere: the run replaces the node;
// checkSharedBucket fails the whole run once the miss outlasts the
// grace). Without a token it says both. A load the bucket failed for
// another reason — an error of its own, no answer in time — is
// CheckpointUnreachable: the storage, not this node, is at fault, and
// the run holds for it. A cancelled chunk's is ctx's error: it blames
// nobody.
func (n *Node) loadError(ctx context.Context, token string, ref spec.CheckpointRef, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if !errors.Is(err, checkpoint.ErrNotFound) {
		err = fmt.Errorf("node %s cannot read the checkpoint at step %d from %s: %w", n.ID, ref.Step, checkpoint.Redact(ref.URL), err)
		return temporal.NewApplicationErrorWithCause(err.Error(), spec.ErrTypeCheckpointUnreachable, err,
			spec.CheckpointFailure{Step: ref.Step, Error: err.Error()})
	}
	if token == "" {
		return fmt.Errorf("load checkpoint %s: %w in %s as node %s opens it: deleted since it was committed, "+
			"or this node does not reach the bucket its saver wrote to (mem:// is each process's own, file:// each host's unless shared)",
			ref.Key, err, ref.URL, n.ID)
	}
	n.mu.Lock()
	sight := n.sights[sightKey(token, ref.URL)]
	seen := sight != nil && sight.seen
	n.mu.Unlock()
	// A node new to the run (a spare) that finds the run's other
	// checkpoints there reaches the bucket: this one was deleted. (Blamed
	// as not reaching it, the spare was replaced, and the run gave up
	// after its restarts, where its peers said "deleted".)
	others := !seen && n.holdsOthers(ctx, ref)
	if seen || others {
		where := "where it found the run's checkpoints before"
		if others {
			where = "where the run's other checkpoints are"
		}
		err = fmt.Errorf("node %s does not find the run's checkpoint at step %d (%s) in %s, %s: "+
			"it was deleted since it was committed (by hand, or by a lifecycle rule of the bucket): %w", n.ID, ref.Step, ref.Key, ref.URL, where, err)
		return temporal.NewApplicationErrorWithCause(err.Error(), spec.ErrTypeCheckpointGone, err)
	}
	err = fmt.Errorf("node %s does not find the run's checkpoint at step %d (%s) in %s, where the node that saved it committed it, "+
		"and has found none of the run's checkpoints there: this node does not reach the bucket the run's nodes share "+
		"(mem:// is each process's own, file:// each host's own disk unless the path is a shared filesystem): %w",
		n.ID, ref.Step, ref.Key, ref.URL, err)
	return temporal.NewApplicationErrorWithCause(err.Error(), spec.ErrTypeCheckpointNotHere, err)
}

// holdsOthers reports whether ref's bucket holds another checkpoint of
// ref's run (one readable manifest), bounded by sharedCheckTimeout; false
// when it cannot tell.
func (n *Node) holdsOthers(ctx context.Context, ref spec.CheckpointRef) bool {
	store, err := n.store(ctx, ref.URL)
	if err != nil {
		return false
	}
	lctx, cancel := context.WithTimeout(ctx, sharedCheckTimeout)
	defer cancel()
	refs, err := store.List(lctx, ref.Run)
	return err == nil && slices.ContainsFunc(refs, func(r checkpoint.Ref) bool { return r.Step != ref.Step && r.SHA256 != "" })
}

// sightKey keys Node.sights: a run (its token; an external job's run ID)
// and a bucket.
func sightKey(run, url string) string { return run + "\x00" + url }

// DefaultBucketGrace is Node.BucketGrace's default.
const DefaultBucketGrace = 90 * time.Second

// bucketSight is what a node knows of a run's checkpoints in a bucket.
type bucketSight struct {
	seen      bool      // it found one there
	missSince time.Time // the first of the misses since (zero: none)
}

// sharedCheckTimeout bounds checkSharedBucket's look at the bucket.
const sharedCheckTimeout = 5 * time.Second

// checkSharedBucket checks that this node reaches the bucket the run's
// checkpoints are in: that the last one committed (in.Restore, which
// global rank 0's node saved) is there as this process opens the bucket.
// Once found, it is not asked again for the run (its token; an external
// job's run ID) and bucket.
// A node that cannot see it could not restore from it either: with every
// node saving into its own bucket — mem:// (each process's memory),
// file:// on hosts that do not share the path — the run trains well until
// a recovery finds no checkpoint, hours later. So a miss that lasts
// BucketGrace fails the chunk, not retryable, saying so; a check that
// errs (a bucket's hiccup, no answer within sharedCheckTimeout) is asked
// again at the next chunk.
func (n *Node) checkSharedBucket(ctx context.Context, run string, r *spec.CheckpointRef, log *zap.Logger) error {
	if r == nil {
		return nil
	}
	key := sightKey(run, r.URL)
	n.mu.Lock()
	known := n.sights[key] != nil && n.sights[key].seen
	n.mu.Unlock()
	if known {
		return nil
	}
	store, err := n.store(ctx, r.URL)
	if err != nil {
		return err
	}
	// Bounded well inside the peers' connect timeout: this node's ranks
	// join the group only after it, and a bucket that does not answer
	// must not get this node blamed for its silence.
	cctx, cancel := context.WithTimeout(ctx, sharedCheckTimeout)
	found, err := store.Exists(cctx, toRef(*r))
	cancel()
	if err != nil {
		log.Warn("could not check that this node sees the run's checkpoints", zap.String("bucket", checkpoint.Redact(r.URL)), zap.Error(err))
		return nil
	}
	now := time.Now()
	n.mu.Lock()
	if n.sights == nil {
		n.sights = map[string]*bucketSight{}
	}
	sight := n.sights[key]
	if sight == nil {
		sight = &bucketSight{}
		n.sights[key] = sight
	}
	firstMiss := !found && sight.missSince.IsZero()
	if found {
		sight.seen, sight.missSince = true, time.Time{}
	} else if firstMiss {
		sight.missSince = now
	}
	missing := now.Sub(sight.missSince)
	n.mu.Unlock()
	if found {
		return nil
	}
	grace := n.BucketGrace
	if grace <= 0 {
		grace = DefaultBucketGrace
	}
	if missing < grace {
		if firstMiss {
			log.Warn("the run's last checkpoint is not in this node's bucket (yet?): its chunks fail if it stays missing", zap.String("bucket", checkpoint.Redact(r.URL)),
				zap.Int64("step", r.Step), zap.Duration("grace", grace))
		}
		return nil
	}
	err = fmt.Errorf("node %s does not find the run's last checkpoint (step %d, %s) in %s, where the node that saved it committed it (missing here for %s): "+
		"every node of a run must reach the same bucket (mem:// is each worker process's own memory, file:// each host's own disk unless the path is shared), "+
		"or no node could resume from it after a failure; set checkpoint_url (or every node worker's --checkpoint-url) to storage they all reach: "+
		"s3://, gs://, azblob://, or file:// on a shared filesystem",
		n.ID, r.Step, r.Key, r.URL, missing.Round(time.Millisecond))
	return temporal.NewNonRetryableApplicationError(err.Error(), spec.ErrTypeBucketNotShared, err)
}

func (n *Node) store(ctx context.Context, url string) (*checkpoint.Store, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.stores[url]; ok {
		return s, nil
	}
	s, err := checkpoint.OpenWithOptions(ctx, url, checkpoint.Options{RequestTimeout: n.CheckpointRequestTimeout, GCGrace: n.CheckpointGCGrace})
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("node %s: %v", n.ID, err), "BadCheckpointURL", err) // (err names the URL)
	}
	if n.stores == nil {
		n.stores = map[string]*checkpoint.Store{}
	}
	n.stores[url] = s
	return s, nil
}

// A synchronous save that fails is tried again, saveRetry apart
// (doubling, at most saveRetryMax), at least saveTries times in all and
// for as long as the chunk trained (at most saveMaxPatience): a bucket's
// hiccup — or a longer outage in a long chunk — then costs the wait, not
// a rewind to the last stored checkpoint and the chunk trained again. A
// bucket that keeps refusing is reported after that.
const (
	saveTries       = 3
	saveRetry       = 500 * time.Millisecond
	saveRetryMax    = 30 * time.Second
	saveMaxPatience = 5 * time.Minute
)

// retrySave calls once until it succeeds, ctx ends, or it has been tried
// tries times and patience has passed (counting the next wait); onRetry
// hears of each failure before its wait.
func retrySave(ctx context.Context, tries int, first, most, patience time.Duration, once func() (*spec.CheckpointRef, error),
	onRetry func(try int, wait time.Duration, err error)) (*spec.CheckpointRef, error) {
	start, wait := time.Now(), first
	for try := 1; ; try++ {
		ref, err := once()
		if err == nil || ctx.Err() != nil || try >= tries && time.Since(start)+wait > patience {
			return ref, err
		}
		onRetry(try, wait, err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, most)
	}
}

// save stores st as the run's checkpoint, retrying (retrySave) for up to
// trained, the chunk's training time. A save-only chunk tries once: it is
// a try of a run that holds for its storage, which tries again itself
// (and says when).
func (n *Node) save(ctx context.Context, in spec.ChunkInput, st *engine.State, trained time.Duration) (*spec.CheckpointRef, error) {
	payload, err := st.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	tries := saveTries
	if in.From == in.To {
		tries = 1
	}
	return retrySave(ctx, tries, saveRetry, saveRetryMax, min(trained, saveMaxPatience),
		func() (*spec.CheckpointRef, error) { return n.saveOnce(ctx, in, st.Step, payload) },
		func(try int, wait time.Duration, err error) {
			n.Logger.Warn("checkpoint save failed; retrying", zap.Int64("step", st.Step), zap.Int("try", try),
				zap.Duration("in", wait), zap.Error(err))
		})
}

// saveOnce stores payload as the run's checkpoint at step.
func (n *Node) saveOnce(ctx context.Context, in spec.ChunkInput, step int64, payload []byte) (*spec.CheckpointRef, error) {
	url := n.bucketURL(in.Spec)
	store, err := n.store(ctx, url)
	if err != nil {
		return nil, err
	}
	// Incremental: only chunks that changed since the last checkpoint are
	// uploaded; the manifest, written last, makes the checkpoint real.
	ref, stats, err := store.SaveIncremental(ctx, in.Spec.Name, step, payload)
	if err != nil {
		return nil, n.storeError(url, step, err)
	}
	n.Logger.Debug("checkpoint saved", zap.Int64("step", ref.Step), zap.Any("stats", stats))
	n.recordJob(ctx, store, in.Spec, in.Token)
	// Keep as many as the workflow may fall back to (and none past this
	// one: another timeline's).
	n.retain(ctx, store, url, in.Spec, ref.Step, n.Logger)
	out := FromStoreRef(url, ref)
	return &out, nil
}

// saveAsync snapshots the state (at this step boundary) and uploads it in
// the background; the next chunk on this node reports it (finishPending).
// The upload has its own context: it outlives this activity.
func (n *Node) saveAsync(in spec.ChunkInput, st *engine.State) (*spec.CheckpointRef, error) {
	url := n.bucketURL(in.Spec)
	bctx, cancel := context.WithTimeout(context.Background(), asyncSaveTimeout)
	store, err := n.store(bctx, url)
	if err != nil {
		cancel()
		return nil, err
	}
	payload, err := st.MarshalBinary()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	p, err := store.SaveAsync(bctx, in.Spec.Name, st.Step, payload)
	if err != nil {
		cancel()
		return nil, n.storeError(url, st.Step, err)
	}
	go func() {
		<-p.Done()
		if _, err := p.Wait(bctx); err == nil {
			n.recordJob(bctx, store, in.Spec, in.Token)
		}
		cancel()
	}()
	n.mu.Lock()
	n.pending = &pendingSave{run: in.Spec.Name, url: url, step: st.Step, save: p, spec: in.Spec}
	n.mu.Unlock()
	return &spec.CheckpointRef{URL: url, Run: in.Spec.Name, Step: st.Step}, nil
}

// recordJob stores the run's job next to its checkpoints (spec.JobKey)
// after this process's first checkpoint of the run (once: by run token,
// or an external job's launch): run --resume of a name the server no
// longer knows checks the job against it. Best effort: a bucket that
// refuses it is logged; the checkpoint is what counts.
func (n *Node) recordJob(ctx context.Context, store *checkpoint.Store, s spec.RunSpec, once string) {
	n.mu.Lock()
	done := once != "" && n.jobs[s.Name] == once
	n.mu.Unlock()
	if done {
		return
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err == nil {
		err = store.WriteBlob(ctx, spec.JobKey(s.Name), append(data, '\n'), "application/json")
	}
	if err != nil {
		n.Logger.Warn("the run's job is not stored next to its checkpoints", zap.String("run", s.Name), zap.String("bucket", store.URL()), zap.Error(err))
		return
	}
	n.mu.Lock()
	if n.jobs == nil {
		n.jobs = map[string]string{}
	}
	n.jobs[s.Name] = once
	n.mu.Unlock()
}

// asyncSaveTimeout bounds a background upload.
const asyncSaveTimeout = 30 * time.Minute

// pendingStep is the step of the checkpoint an earlier chunk of run left
// uploading (0: none).
func (n *Node) pendingStep(run string) int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.pending; p != nil && p.run == run {
		return p.step
	}
	return 0
}

// finishPending waits for the checkpoint an earlier chunk left uploading
// and returns it if it is this run's and committed; a failed upload of
// this run's is logged and returned as a CheckpointFailure (the run keeps
// its older checkpoints).
func (n *Node) finishPending(ctx context.Context, in spec.ChunkInput, log *zap.Logger) (*spec.CheckpointRef, *spec.CheckpointFailure) {
	n.mu.Lock()
	p := n.pending
	n.pending = nil
	n.mu.Unlock()
	if p == nil {
		return nil, nil
	}
	ref, err := p.save.Wait(ctx)
	if p.run != in.Spec.Name {
		return nil, nil
	}
	if err != nil {
		err = n.waitError(ctx, p.url, p.step, err)
		log.Warn("background checkpoint upload failed", zap.Int64("step", p.step), zap.Error(err))
		return nil, &spec.CheckpointFailure{Step: p.step, Error: err.Error()}
	}
	if store, err := n.store(ctx, p.url); err == nil {
		n.retain(ctx, store, p.url, p.spec, ref.Step, log)
	}
	log.Info("checkpoint committed", zap.Int64("step", ref.Step), zap.String("key", ref.Key), zap.Duration("upload", p.save.Stats().Duration))
	out := FromStoreRef(p.url, ref)
	return &out, nil
}

func toRef(r spec.CheckpointRef) checkpoint.Ref {
	return checkpoint.Ref{Run: r.Run, Step: r.Step, Key: r.Key, SHA256: r.SHA256, Bytes: r.Bytes}
}

// storeError is err, the bucket at url refusing (or not answering) this
// node's save of the checkpoint at step, naming the node and the bucket
// (its URL without secrets): the run's status and failure show it as it
// is, and a run of many nodes, or an operator of many runs and buckets,
// reads there where it failed.
func (n *Node) storeError(url string, step int64, err error) error {
	return fmt.Errorf("node %s cannot store the checkpoint at step %d in %s: %w", n.ID, step, checkpoint.Redact(url), err)
}

// waitError is err, a wait for the upload of the checkpoint at step to
// the bucket at url that failed: storeError where the upload itself
// failed; where the wait was cut (ctx ended: a stop's grace over, the
// activity cancelled) it says that the upload was still going — the
// bucket refused nothing.
func (n *Node) waitError(ctx context.Context, url string, step int64, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("node %s: the upload of the checkpoint at step %d to %s was still going when the wait for it ended: %w",
			n.ID, step, checkpoint.Redact(url), err)
	}
	return n.storeError(url, step, err)
}

// FromStoreRef is r, a checkpoint the store at url saved or listed, as
// runs name it.
func FromStoreRef(url string, r checkpoint.Ref) spec.CheckpointRef {
	return spec.CheckpointRef{URL: url, Run: r.Run, Step: r.Step, Key: r.Key, SHA256: r.SHA256, Bytes: r.Bytes}
}

// storageError types the checkpoint at step that could not be stored
// (ErrTypeCheckpointStorage, a spec.CheckpointFailure as detail: the
// workflow gives up when the storage keeps failing); a cancelled chunk's
// error stays as it is.
func storageError(ctx context.Context, err error, step int64) error {
	if ctx.Err() != nil {
		return err
	}
	return temporal.NewApplicationErrorWithCause(err.Error(), spec.ErrTypeCheckpointStorage, err,
		spec.CheckpointFailure{Step: step, Error: err.Error()})
}

// peerError maps a collective failure to PeerFailed with the lost rank's
// node (rank / perNode: the node ranks of a membership host perNode ranks
// each) as detail, so the workflow knows whom to blame (-1 when a peer left
// the forming group alive: this rank is a bystander of another's failure,
// and the workflow waits for the votes that name it); other errors stay
// retryable at the group level.
//
// The message names the lost rank's node when nodes (the membership's)
// has it: a survivor's failed activity in the Web UI then says whom it
// lost, not only the engine's rank.
func peerError(err error, step int64, perNode int, nodes []spec.Node) error {
	var pe *ascend.PeerError
	rank := -1
	switch {
	case errors.As(err, &pe):
		rank = pe.Rank / max(perNode, 1)
	case !errors.Is(err, tcp.ErrPeerLeft):
		return err
	}
	msg := err.Error()
	if rank >= 0 && rank < len(nodes) {
		msg = fmt.Sprintf("peer node %s failed: %s", nodes[rank].ID, msg)
	}
	return temporal.NewApplicationErrorWithCause(msg, spec.ErrTypePeerFailed, err,
		spec.PeerFailure{Rank: rank, Step: step, NoticedAt: time.Now()})
}

// heartbeater records the latest progress at a steady rate from its own
// goroutine (the SDK throttles and batches the calls to the server). With
// withLogs (RunExternal) every beat carries a second detail, the tail of
// the processes' logs (spec.NodeLogs, empty until setLogs), read afresh at
// every beat and bounded by spec.LogTail*, so a chatty script costs a
// heartbeat no more than a quiet one; workflows read only the first
// detail, `cann-train status` both.
type heartbeater struct {
	mu       sync.Mutex
	prog     spec.ChunkProgress
	withLogs bool
	logs     func() spec.NodeLogs
	// observe, when set, sees every beat (tests: the SDK throttles what
	// reaches a test environment's listener).
	observe func(spec.ChunkProgress)
	done    chan struct{}
	wg      sync.WaitGroup
}

// newHeartbeater is TrainChunk's heartbeater.
func newHeartbeater(ctx context.Context, in spec.ChunkInput) *heartbeater {
	prog := spec.ChunkProgress{Step: in.From, To: in.To}
	if in.Restore != nil {
		prog.LastCheckpoint = in.Restore.Step
	}
	return startHeartbeater(ctx, prog, in.Spec.HeartbeatTimeout.D(), false)
}

// startHeartbeater beats prog (then what update sets) four times per
// heartbeat timeout, at most every 100 ms and at least every 500 ms.
func startHeartbeater(ctx context.Context, prog spec.ChunkProgress, timeout time.Duration, withLogs bool) *heartbeater {
	h := &heartbeater{prog: prog, withLogs: withLogs, done: make(chan struct{})}
	// A quarter of the timeout, but at least twice a second: the reply to
	// a heartbeat is how the activity hears of its cancellation (the node
	// worker sends them at most a second apart: workers.heartbeatEvery).
	// (Beating once a second, the period of the SDK's batches, did not
	// deliver a cancel within 5 s: TestCancelStopsTheChunkInFlight.)
	every := min(max(timeout/4, 100*time.Millisecond), 500*time.Millisecond)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			h.mu.Lock()
			p, logs, observe := h.prog, h.logs, h.observe
			h.mu.Unlock()
			if observe != nil {
				observe(p)
			}
			if h.withLogs {
				var tail spec.NodeLogs
				if logs != nil {
					tail = logs()
				}
				activity.RecordHeartbeat(ctx, p, tail)
			} else {
				activity.RecordHeartbeat(ctx, p)
			}
			select {
			case <-h.done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return h
}

func (h *heartbeater) update(p spec.ChunkProgress) {
	h.mu.Lock()
	h.prog = p
	h.mu.Unlock()
}

// storing says, in the beats from now on, that the node stores the
// checkpoint of step (0: no longer); a nil heartbeater says nothing.
func (h *heartbeater) storing(step int64) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.prog.Storing == step {
		return
	}
	h.prog.Storing, h.prog.StoringSince = step, time.Time{}
	if step > 0 {
		h.prog.StoringSince = time.Now()
	}
}

// setLogs sets what reads the log tail of a withLogs heartbeater.
func (h *heartbeater) setLogs(f func() spec.NodeLogs) {
	h.mu.Lock()
	h.logs = f
	h.mu.Unlock()
}

// last is the progress it beats now (a nil h: none).
func (h *heartbeater) last() *spec.ChunkProgress {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.prog
	return &p
}

func (h *heartbeater) stop() {
	close(h.done)
	h.wg.Wait()
}

// injectedFault ends this process as a power cut would: no cleanup, no
// goodbye to peers or to Temporal. With freeze it hangs it instead, as a
// node stuck in a driver call: SIGSTOP to the process groups in groups
// (an external job's processes) and then to itself; its sockets stay
// open and its listener accepts, and it stays so until something kills
// it (or SIGCONTs it).
func (n *Node) injectedFault(log *zap.Logger, step int64, freeze bool, groups []int) {
	if !n.AllowFaults {
		log.Warn("fault injection requested but not allowed on this node (--allow-fault-injection)", zap.Int64("step", step))
		return
	}
	if !freeze {
		log.Warn("fault injection: SIGKILL", zap.Int64("step", step))
		_ = log.Sync()
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		return
	}
	log.Warn("fault injection: SIGSTOP (the node hangs)", zap.Int64("step", step), zap.Ints("process_groups", groups))
	_ = log.Sync()
	for _, g := range groups {
		_ = syscall.Kill(-g, syscall.SIGSTOP)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
}
