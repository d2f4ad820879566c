package activities

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/cann-train/cann-train/ascend"
	"github.com/cann-train/cann-train/ascend/tcp"
	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/engine/launch"
	"github.com/cann-train/cann-train/python"
	"github.com/cann-train/cann-train/spec"
)

// keepWorlds is how many launches' logs and reports a run keeps per node.
const keepWorlds = 10

// RunExternal runs this node's processes of an external job until they
// all exit: it restores the run's last checkpoint into the job's
// checkpoint directory, starts procs_per_node processes with the
// launcher's environment, heartbeats (liveness, and the script's progress
// when it reports through python/cann_train.py), uploads the checkpoints
// that global rank 0 commits and tells the run about each, and on
// cancellation stops the processes (SIGTERM, SIGKILL after stop_grace)
// before it returns. A process exiting non-zero fails it with a
// RankExited error naming the rank, its exit status and its log tail —
// except a process that is not a rank (msrun's scheduler) once every rank
// has exited cleanly: the job is done, and the node stops it (SIGTERM,
// then stop_grace) however it ends (launch.Group.Wait).
func (n *Node) RunExternal(ctx context.Context, in spec.ExternalInput) (_ *spec.ChunkResult, err error) {
	n.running.Add(1)
	defer n.running.Add(-1)
	var hb *heartbeater
	defer func() { err = temporalLost(ctx, n.ID, hb.last(), err) }()
	hb = newExternalHeartbeater(ctx, in)
	defer hb.stop()
	return n.runExternal(ctx, in, externalHooks{
		progress: hb.update,
		logs:     hb.setLogs,
		saved: func(c spec.CheckpointSaved) error {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return activity.GetClient(ctx).SignalWorkflow(sctx, in.RunID, "", spec.SignalCheckpointSaved, c)
		},
	})
}

// ReservePort finds a TCP port that is free on this node now, for the
// rendezvous of an external job whose first node this is: one of its
// RendezvousPorts, or any free port where it has none (ReservePortIn).
func (n *Node) ReservePort(ctx context.Context) (int, error) {
	return ReservePortIn(ctx, n.RendezvousPorts[0], n.RendezvousPorts[1])
}

// ReservePortIn is ReservePort within lo..hi (a node worker's
// --rendezvous-ports, which a firewall opens), or any free port for 0, 0:
// the first port there that is free on every interface now, trying from a
// random one (two worlds starting on one host then rarely pick the same).
func ReservePortIn(ctx context.Context, lo, hi int) (int, error) {
	if lo == 0 && hi == 0 {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return 0, fmt.Errorf("reserve a port: %w", err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	if lo < 1 || hi > 65535 || lo > hi {
		return 0, fmt.Errorf("reserve a port: range %d-%d is not within 1-65535", lo, hi)
	}
	n := hi - lo + 1
	first := rand.IntN(n)
	var last error
	for i := range n {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("reserve a port in %d-%d: %w", lo, hi, err)
		}
		port := lo + (first+i)%n
		l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
		if err != nil {
			last = err
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("reserve a port: none of %d-%d (--rendezvous-ports) is free on this node: %w", lo, hi, last)
}

// externalHooks connect runExternal to Temporal (tests substitute them).
type externalHooks struct {
	progress func(spec.ChunkProgress)
	saved    func(spec.CheckpointSaved) error
	// logs, when set, receives (once the processes run) what reads the
	// tail of their logs.
	logs func(func() spec.NodeLogs)
}

// newExternalHeartbeater is RunExternal's heartbeater: progress, and the
// processes' log tails as a second detail.
func newExternalHeartbeater(ctx context.Context, in spec.ExternalInput) *heartbeater {
	from := restoredStep(in)
	return startHeartbeater(ctx, spec.ChunkProgress{Step: from, To: in.Spec.Steps, LastCheckpoint: from}, in.Spec.HeartbeatTimeout.D(), true)
}

// nodeLogs reads the tail of every process's log: the last
// spec.LogTailLines lines, within the node's byte budget.
func (n *Node) nodeLogs(in spec.ExternalInput, specs []launch.Spec) spec.NodeLogs {
	out := spec.NodeLogs{Node: n.ID, NodeRank: in.Rank, Session: in.Session, Procs: make([]spec.ProcessTail, 0, len(specs)),
		Dir: n.paths(in).dir}
	budget := spec.LogTailBudget(len(specs))
	for _, sp := range specs {
		out.Procs = append(out.Procs, spec.ProcessTail{Process: sp.Name, Rank: sp.Rank,
			Lines: launch.LastLines(sp.LogPath, spec.LogTailLines, budget)})
	}
	return out
}

func restoredStep(in spec.ExternalInput) int64 {
	if in.Restore != nil {
		return in.Restore.Step
	}
	return 0
}

// world is one launch's paths on this node.
type worldPaths struct {
	run, dir, ckpt, lib string
}

func (n *Node) paths(in spec.ExternalInput) worldPaths {
	run := filepath.Join(n.workDir(), "runs", in.Spec.Name)
	p := worldPaths{
		run:  run,
		dir:  filepath.Join(run, "worlds", safeName(in.Session)),
		ckpt: filepath.Join(run, "checkpoint"),
		lib:  filepath.Join(n.workDir(), "lib"),
	}
	if d := in.Spec.External.CheckpointDir; d != "" {
		p.ckpt = in.Spec.External.JoinWorkdir(d)
	}
	return p
}

func (n *Node) workDir() string {
	if n.WorkDir != "" {
		return n.WorkDir
	}
	return filepath.Join(os.TempDir(), "cann-train-"+safeName(n.ID))
}

// safeName keeps [A-Za-z0-9._-] and replaces the rest with '_'.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, s)
}

// admit waits until no other world runs on this node.
func (n *Node) admit(ctx context.Context) (release func(), err error) {
	n.once.Do(func() { n.world = make(chan struct{}, 1) })
	select {
	case n.world <- struct{}{}:
		return func() { <-n.world }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// awaitNoWorld waits until no world runs on this node, for up to
// worldGoneWait, before a built-in chunk starts: a cancelled world's
// processes outlive its activity by up to stop_grace (the workflow does
// not wait for a cancellation), and the chunk of the next run this node
// serves would start beside them — on an NPU they hold its memory. Past
// worldGoneWait (connectBase less the default stop_grace and a margin:
// the chunk's peers, waiting to connect, must not blame this node for
// the wait) the chunk goes ahead beside them, and the log says so. A
// world does not wait for chunks: a cancelled chunk ends within a step.
func (n *Node) awaitNoWorld(ctx context.Context, log *zap.Logger) error {
	n.once.Do(func() { n.world = make(chan struct{}, 1) })
	select {
	case n.world <- struct{}{}:
		<-n.world
		return nil
	default:
	}
	if n.onChunkWaits != nil {
		n.onChunkWaits()
	}
	wait := worldGoneWait
	if n.worldWait > 0 {
		wait = n.worldWait
	}
	log.Info("an external job's processes still run on this node: the chunk waits for them to stop", zap.Duration("up_to", wait))
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case n.world <- struct{}{}:
		<-n.world
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		log.Warn("an external job's processes still run on this node: the chunk starts beside them", zap.Duration("waited", wait))
		return nil
	}
}

// worldGoneWait bounds how long a chunk waits for a world's processes.
const worldGoneWait = 15 * time.Second

func badJob(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return temporal.NewNonRetryableApplicationError(err.Error(), spec.ErrTypeBadJob, err)
}

// unfitHost is a failure of this node's own setup (no data set for the
// built-in model, a work directory it cannot write): NodeUnfit, so that
// the run replaces the node rather than fail.
func unfitHost(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return temporal.NewApplicationErrorWithCause(err.Error(), spec.ErrTypeNodeUnfit, err)
}

func (n *Node) runExternal(ctx context.Context, in spec.ExternalInput, hooks externalHooks) (*spec.ChunkResult, error) {
	started := time.Now()
	if err := n.checkExternal(in); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "BadChunkInput", err)
	}
	x := *in.Spec.External
	log := n.Logger.With(zap.String("run", in.RunID), zap.Int("node_rank", in.Rank), zap.String("session", in.Session))
	admitted, err := n.admit(ctx)
	if err != nil {
		return nil, err
	}
	release := sync.OnceFunc(admitted)
	defer release()
	// Asks come from now on: until the loop below answers them, the
	// world is still being set up (RequestCheckpoint).
	asks, unserve := n.serveAsks(in.Session)
	defer unserve()
	// (Keyed by the run's ID: a world's input carries no token.)
	if err := n.checkSharedBucket(ctx, in.RunID, in.Restore, log); err != nil {
		return nil, err
	}
	if err := n.openBucket(ctx, in.Spec); err != nil {
		return nil, err
	}
	p := n.paths(in)
	pidFile := filepath.Join(n.workDir(), "groups.json")
	if k, err := launch.SweepPidFile(pidFile); err != nil || k > 0 {
		log.Warn("swept process groups left by an earlier node worker", zap.Int("groups", k), zap.Error(err))
	}
	for _, d := range []string{p.dir, p.lib} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, unfitHost("node %s: work directory: %v", n.ID, err)
		}
	}
	pruneWorlds(filepath.Dir(p.dir), keepWorlds)
	if err := os.WriteFile(filepath.Join(p.lib, python.HelperModule), python.Helper, 0o644); err != nil {
		return nil, unfitHost("node %s: write the python helper: %v", n.ID, err)
	}

	// Before the checkpoint directory: one relative to a missing workdir
	// would create it.
	if x.Workdir != "" {
		switch st, err := os.Stat(x.Workdir); {
		case err != nil:
			return nil, badJob("node %s: workdir %s: %w", n.ID, x.Workdir, err)
		case st.Mode().IsRegular():
			return nil, badJob("node %s: workdir %s is a file, not a directory", n.ID, x.Workdir)
		case !st.IsDir():
			return nil, badJob("node %s: workdir %s is not a directory (%v)", n.ID, x.Workdir, st.Mode().Type())
		}
	}
	// The checkpoint directory: emptied, then the run's last checkpoint.
	// The node worker's own is its whatever it holds; the job's
	// (checkpoint_dir) only once the worker has made it or found it empty
	// (launch.DirMarker): what else it holds may be the user's files.
	reset := launch.ResetOwnDir
	if x.CheckpointDir != "" {
		reset = launch.ResetDir
	}
	if err := reset(p.ckpt); err != nil {
		var no *launch.NotOwnedError
		if errors.As(err, &no) {
			return nil, badJob("node %s: external.checkpoint_dir %w: the node worker empties checkpoint_dir before every launch, "+
				"so give a new or empty directory", n.ID, err)
		}
		return nil, unfitHost("node %s: checkpoint directory %s: %v", n.ID, p.ckpt, err)
	}
	from := restoredStep(in)
	if in.KeepRefused {
		n.keptBefore(in.RunID, from) // (any the run needs it has stored)
	}
	var restoredSum [32]byte
	if in.Restore != nil {
		if err := n.restoreDir(ctx, in.RunID, *in.Restore, p.ckpt); err != nil {
			return nil, err
		}
		n.noteRestored(in.Session, in.Restore.Key)
		if payload, _, err := launch.PackDir(p.ckpt, checkpoint.DefaultChunkBytes); err == nil {
			restoredSum = sha256.Sum256(payload)
		}
		log.Info("checkpoint restored", zap.Int64("step", from), zap.String("dir", p.ckpt))
	}

	w := launch.World{
		Launcher: launch.Launcher(x.Launcher), RunID: in.RunID, ProcsPerNode: x.ProcsPerNode,
		MasterPort: in.MasterPort, RestartCount: in.Restarts, MaxRestarts: in.Spec.RestartBudget(),
		RankTableFile: filepath.Join(p.dir, "rank_table.json"),
		ErrorFile:     func(rank int) string { return filepath.Join(p.dir, fmt.Sprintf("rank-%d.error.json", rank)) },
	}
	for _, m := range in.Membership.Nodes {
		host := m.CommAddr
		if h, _, err := net.SplitHostPort(m.CommAddr); err == nil {
			host = h
		}
		w.Nodes = append(w.Nodes, launch.Node{ID: m.ID, Host: host, DeviceIPs: m.DeviceIPs, DeviceIDs: m.NPUIDs})
	}
	if w.Launcher == launch.Ascend {
		n.resolveHosts(ctx, w.Nodes, x.ProcsPerNode, log)
		tab, err := launch.RankTable(w)
		if err != nil {
			return nil, badJob("node %s: %v", n.ID, err)
		}
		b, err := tab.Marshal()
		if err == nil {
			err = os.WriteFile(w.RankTableFile, b, 0o644)
		}
		if err != nil {
			return nil, badJob("node %s: rank table: %v", n.ID, err)
		}
	}
	if w.Launcher == launch.Ascend {
		// The NPUs its runtime sees (the job's env wins, as in the
		// processes' environment): a process addresses its NPU by its
		// index there.
		v, ok := x.Env["ASCEND_RT_VISIBLE_DEVICES"]
		if !ok {
			v = os.Getenv("ASCEND_RT_VISIBLE_DEVICES")
		}
		vis, err := launch.VisibleDevices(v)
		if err != nil {
			return nil, badJob("node %s: %v", n.ID, err)
		}
		w.Nodes[in.Rank].Visible = vis
	}
	procs, err := launch.Procs(w, in.Rank)
	if err != nil {
		return nil, badJob("node %s: %v", n.ID, err)
	}
	base := os.Environ()
	pyPath := p.lib
	for _, kv := range base {
		if v, ok := strings.CutPrefix(kv, "PYTHONPATH="); ok && v != "" {
			pyPath = v + string(os.PathListSeparator) + p.lib // the user's own copy wins
		}
	}
	if v, ok := x.Env["PYTHONPATH"]; ok && v != "" {
		pyPath = v + string(os.PathListSeparator) + p.lib
	}
	jobEnv := map[string]string{}
	for k, v := range x.Env {
		jobEnv[k] = v
	}
	jobEnv["PYTHONPATH"] = pyPath
	var specs []launch.Spec
	reports := map[string]*launch.ReportReader{}
	lead := "" // the process whose reports are this node's progress
	for _, pr := range procs {
		rank := pr.Rank
		helper := map[string]string{
			spec.EnvCheckpointDir:   p.ckpt,
			spec.EnvRestoredStep:    strconv.FormatInt(from, 10),
			spec.EnvCheckpointEvery: strconv.FormatInt(in.Spec.CheckpointEvery, 10),
			spec.EnvReportFile:      filepath.Join(p.dir, pr.Name+".jsonl"),
			spec.EnvAckFile:         filepath.Join(p.dir, pr.Name+".ack"),
			spec.EnvRequestFile:     filepath.Join(p.dir, requestFile),
			spec.EnvRank:            strconv.Itoa(rank),
			spec.EnvWorldSize:       strconv.Itoa(w.WorldSize()),
			spec.EnvTotalSteps:      strconv.FormatInt(in.Spec.Steps, 10),
			spec.EnvRestartCount:    strconv.Itoa(in.Restarts),
		}
		specs = append(specs, launch.Spec{
			Name: pr.Name, Rank: rank, Argv: x.Entrypoint, Dir: x.Workdir,
			Env:     launch.Environ(base, pr, jobEnv, helper),
			LogPath: filepath.Join(p.dir, pr.Name+".log"),
		})
		reports[pr.Name] = &launch.ReportReader{Path: helper[spec.EnvReportFile]}
		if lead == "" && rank >= 0 {
			lead = pr.Name
		}
	}

	g, err := launch.Start(specs)
	var se *launch.ScriptError
	switch {
	case errors.As(err, &se) && x.Workdir == "":
		wd, _ := os.Getwd()
		return nil, badJob("node %s: %v: the job names no external.workdir (raw input has no job file to take it from), "+
			"so its processes run in the node worker's own directory %s; give external.workdir, the directory that holds the script on every node", n.ID, se, wd)
	case errors.As(err, &se):
		return nil, badJob("node %s: %v (external.workdir; every node needs the script there)", n.ID, se)
	case err != nil:
		return nil, badJob("node %s: %v", n.ID, err)
	}
	// However the world ends, its logs go to the run's bucket too: the
	// node's disk may not outlive the node. The next world may start here
	// meanwhile (its logs are its own): a slow or unreachable bucket
	// holds this activity's end, not the node.
	defer func() {
		// The checkpoint directory is still this worker's, even if the
		// script deleted the marker with the rest (emptying it itself):
		// marked again before the next world may start here.
		if err := launch.MarkDir(p.ckpt); err != nil {
			log.Warn("checkpoint directory marker", zap.String("dir", p.ckpt), zap.Error(err))
		}
		release()
		n.uploadLogs(in, specs, log)
	}()
	if err := g.WritePidFile(pidFile); err != nil {
		log.Warn("pid file", zap.Error(err))
	}
	defer os.Remove(pidFile)
	log.Info("external job started", zap.String("launcher", x.Launcher), zap.Strings("program", g.Programs()),
		zap.Ints("pids", g.Pids()), zap.String("logs", p.dir), zap.Int64("from", from))

	sup := &supervision{
		n: n, in: in, log: log, hooks: hooks, paths: p, reports: reports, lead: lead,
		res:  &spec.ChunkResult{NodeID: n.ID, Rank: in.Rank, From: from, To: from, StartedAt: started},
		last: map[string]int64{},
		prog: spec.ChunkProgress{Step: from, To: in.Spec.Steps, LastCheckpoint: from},
		// The restored directory counts as committed: a clean exit that
		// left it unchanged uploads nothing.
		lastSaved: from, lastSum: restoredSum, committed: in.Restore != nil,
		groups: g.Pids(), asked: map[string]bool{}, quietSince: time.Now(),
	}
	if hooks.logs != nil {
		hooks.logs(func() spec.NodeLogs { return sup.withWarning(n.nodeLogs(in, specs)) })
	}
	// wctx stops the world when a watched peer is gone.
	wctx, stopWorld := context.WithCancel(ctx)
	defer stopWorld()
	waited := make(chan error, 1)
	go func() { waited <- g.Wait(wctx, x.StopGrace.D()) }()
	lostPeer := make(chan error, 1)
	if n.PeerWatch > 0 {
		go n.watchPeers(wctx, in, lostPeer)
	}
	n.serve(asks)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var werr, lost error
loop:
	for {
		select {
		case werr = <-waited:
			break loop
		case a := <-asks.ask:
			sup.poll(ctx) // the processes' latest steps
			sup.ask(a)
		case lost = <-lostPeer:
			log.Warn("a neighbour node's worker is gone: stopping the world", zap.Error(lost))
			stopWorld()
			lostPeer = nil
		case <-tick.C:
			sup.poll(ctx)
			sup.answerWaiting(false)
		}
	}
	sup.answerWaiting(true)
	unserve()     // (later asks: the world does not run here)
	sup.poll(ctx) // what the processes wrote last
	sup.res.EndedAt = time.Now()
	sup.res.Seconds = sup.res.EndedAt.Sub(started).Seconds()
	var ee *launch.ExitError
	switch {
	case lost != nil && ctx.Err() == nil:
		return nil, peerError(lost, sup.prog.Step, 1, nil)
	case werr == nil:
		for _, e := range g.Ignored() {
			log.Warn("a process that is not a rank failed or was stopped after every rank had exited cleanly: the job is done, its status ignored",
				zap.String("process", e.Name), zap.Stringer("exit", e))
		}
	case errors.As(werr, &ee):
		// The process may have died because a node did: name the node
		// rather than restart the world on it.
		if gone := n.peersGone(ctx, in); gone != nil {
			return nil, peerError(fmt.Errorf("%w; meanwhile %v", gone, ee), sup.prog.Step, 1, nil)
		}
		return nil, sup.rankExited(ee)
	case ctx.Err() != nil:
		log.Info("external job stopped: activity cancelled", zap.Error(werr))
		return nil, ctx.Err()
	default:
		return nil, werr
	}
	// A clean exit: upload what the directory holds now if that is not
	// the last committed checkpoint (a script without the helper, or one
	// that wrote after its last saved()).
	if in.Rank == 0 {
		step := max(sup.prog.Step, sup.lastSaved)
		if err := sup.upload(ctx, step, true); err != nil {
			if sup.keptAt != step || ctx.Err() != nil {
				return nil, storageError(ctx, err, step)
			}
			// Kept: the run stores it once the bucket takes it.
			sup.res.CheckpointFailed = &spec.CheckpointFailure{Step: step, Error: err.Error()}
		}
	}
	log.Info("external job finished", zap.Int64("step", sup.res.To), zap.Float64("seconds", sup.res.Seconds))
	return sup.res, nil
}

// watchPeers asks the neighbour nodes' workers (node ranks Rank±1 of the
// membership) every PeerWatch whether they are alive, and sends on lost
// a *lostNodeError for the first that is gone (its address refuses
// connections: the worker and the processes it ran are dead, though this
// node's processes may hang in a collective rather than exit).
func (n *Node) watchPeers(ctx context.Context, in spec.ExternalInput, lost chan<- error) {
	nodes := in.Membership.Nodes
	var watch []int
	for _, d := range []int{-1, 1} {
		r := (in.Rank + d + len(nodes)) % len(nodes)
		if r != in.Rank && !slices.Contains(watch, r) && nodes[r].CommAddr != "" {
			watch = append(watch, r)
		}
	}
	if len(watch) == 0 {
		return
	}
	t := time.NewTicker(n.PeerWatch)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, r := range watch {
			if _, gone := tcp.Probe(ctx, r, nodes[r].CommAddr, peerRefusedGrace); gone != nil {
				lost <- lostNode(in, r, gone)
				return
			}
		}
	}
}

// peersGone asks every other node's worker at once whether it is alive
// (with PeerWatch set): a *lostNodeError for the lowest node rank that is
// gone, or nil.
func (n *Node) peersGone(ctx context.Context, in spec.ExternalInput) error {
	if n.PeerWatch <= 0 {
		return nil
	}
	var others []int
	for r := range in.Membership.Nodes {
		if r != in.Rank {
			others = append(others, r)
		}
	}
	for i, g := range goneNodes(ctx, in.Membership.Nodes, others) {
		if g != nil {
			return lostNode(in, others[i], g)
		}
	}
	return nil
}

// lostNodeError is a node of an external job's world whose worker is
// gone, told in the job's terms: the node's ID, its index in the world and
// the ranks it ran. It wraps the probe's *ascend.PeerError (Rank: the
// node index), which peerError types as PeerFailed.
type lostNodeError struct {
	id           string
	index, nodes int
	perNode      int
	err          error
}

func (e *lostNodeError) Error() string {
	// The probe's own words are about a collective's peer rank; the
	// reason it found is what a user needs.
	why := e.err
	var pe *ascend.PeerError
	if errors.As(e.err, &pe) && pe.Err != nil {
		why = pe.Err
	}
	ranks := fmt.Sprintf("rank %d", e.index*e.perNode)
	if e.perNode > 1 {
		ranks = fmt.Sprintf("ranks %d-%d", e.index*e.perNode, (e.index+1)*e.perNode-1)
	}
	return fmt.Sprintf("node %s (node_rank %d of the world's %d nodes: %s) is gone: %v", e.id, e.index, e.nodes, ranks, why)
}

func (e *lostNodeError) Unwrap() error { return e.err }

// lostNode names node index r of in's world, gone as err says.
func lostNode(in spec.ExternalInput, r int, err error) error {
	per := 1
	if x := in.Spec.External; x != nil {
		per = max(x.ProcsPerNode, 1)
	}
	return &lostNodeError{id: in.Membership.Nodes[r].ID, index: r, nodes: len(in.Membership.Nodes), perNode: per, err: err}
}

// resolveHosts gives each node of an ascend world whose address is a host
// name, and whose /etc/hccn.conf does not name every NPU's address, the IP
// it resolves to (HostIP: the rank table's stand-in device_ip), all at
// once within 5 s. A name that does not resolve is left so: the rank table
// then says what to give.
func (n *Node) resolveHosts(ctx context.Context, nodes []launch.Node, procs int, log *zap.Logger) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range nodes {
		nd := &nodes[i]
		if _, err := netip.ParseAddr(nd.Host); err == nil || nd.Host == "" || hasDeviceIPs(*nd, procs) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			addrs, err := net.DefaultResolver.LookupNetIP(rctx, "ip", nd.Host)
			if nd.HostIP = pickHostIP(addrs); nd.HostIP != "" {
				log.Info("rank table: a node's address is a host name; its IP stands in for the device_ip its /etc/hccn.conf does not give",
					zap.String("node", nd.ID), zap.String("host", nd.Host), zap.String("ip", nd.HostIP))
				return
			}
			log.Warn("rank table: a node's host name does not resolve to an IP address", zap.String("node", nd.ID),
				zap.String("host", nd.Host), zap.Error(err))
		}()
	}
	wg.Wait()
}

// hasDeviceIPs reports whether the node's hccn.conf names the address of
// each NPU its first procs processes take.
func hasDeviceIPs(nd launch.Node, procs int) bool {
	for lr := range procs {
		if id := nd.Device(lr); id < 0 || id >= len(nd.DeviceIPs) || nd.DeviceIPs[id] == "" {
			return false
		}
	}
	return true
}

// pickHostIP picks a host name's address for a rank table: a routable one
// before a loopback one, IPv4 before IPv6, never a link-local one or one
// with an IPv6 zone (HCCL takes none).
func pickHostIP(addrs []netip.Addr) string {
	best, rank := "", 0
	for _, a := range addrs {
		a = a.Unmap()
		r := 0
		switch {
		case !a.IsValid() || a.Zone() != "" || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast():
		case !a.IsLoopback() && a.Is4():
			r = 4
		case !a.IsLoopback():
			r = 3
		case a.Is4():
			r = 2
		default:
			r = 1
		}
		if r > rank {
			best, rank = a.String(), r
		}
	}
	return best
}

// LogKey is where a process's log of one launch (session) is stored in the
// run's bucket.
func LogKey(run, session, process string) string {
	return "runs/" + run + "/logs/" + safeName(session) + "/" + process + ".log"
}

// uploadLogs copies every process's log file into the run's bucket
// (best effort, with its own deadline: it also runs after a cancellation).
func (n *Node) uploadLogs(in spec.ExternalInput, specs []launch.Spec, log *zap.Logger) {
	url := n.bucketURL(in.Spec)
	if url == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := n.store(ctx, url)
	if err != nil {
		log.Warn("logs not uploaded", zap.String("bucket", checkpoint.Redact(url)), zap.Error(err))
		return
	}
	for _, sp := range specs {
		data, err := os.ReadFile(sp.LogPath)
		if err != nil {
			continue
		}
		if err := store.WriteBlob(ctx, LogKey(in.Spec.Name, in.Session, sp.Name), data, "text/plain"); err != nil {
			log.Warn("log not uploaded", zap.String("process", sp.Name), zap.String("bucket", checkpoint.Redact(url)), zap.Error(err))
		}
	}
}

func (n *Node) checkExternal(in spec.ExternalInput) error {
	if in.Spec.External == nil {
		return errors.New("not an external job")
	}
	if in.Rank < 0 || in.Rank >= len(in.Membership.Nodes) {
		return fmt.Errorf("node rank %d outside membership of %d node(s)", in.Rank, len(in.Membership.Nodes))
	}
	if got := in.Membership.Nodes[in.Rank].ID; got != n.ID {
		return fmt.Errorf("node rank %d is meant for node %q, this is %q", in.Rank, got, n.ID)
	}
	if in.MasterPort < 1 || in.MasterPort > 65535 {
		return fmt.Errorf("master port %d", in.MasterPort)
	}
	return in.Spec.Validate()
}

// restoreDir fills dir with checkpoint ref of run.
func (n *Node) restoreDir(ctx context.Context, run string, ref spec.CheckpointRef, dir string) error {
	store, err := n.store(ctx, ref.URL)
	if err != nil {
		return err
	}
	payload, err := store.Load(ctx, toRef(ref))
	var ce *checkpoint.CorruptError
	if errors.As(err, &ce) {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("checkpoint at step %d is corrupt: %s: %s", ref.Step, ce.Key, ce.Reason), spec.ErrTypeCorruptCheckpoint, err)
	}
	if err != nil {
		return n.loadError(ctx, run, ref, err)
	}
	if !launch.IsPackedDir(payload) {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("checkpoint %s is not a checkpoint directory of an external job", ref.Key), spec.ErrTypeCorruptCheckpoint, nil)
	}
	if _, err := launch.UnpackDir(payload, dir); err != nil {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("checkpoint %s: %v", ref.Key, err), spec.ErrTypeCorruptCheckpoint, err)
	}
	return nil
}

// supervision is one running world's bookkeeping.
type supervision struct {
	n       *Node
	in      spec.ExternalInput
	log     *zap.Logger
	hooks   externalHooks
	paths   worldPaths
	reports map[string]*launch.ReportReader
	lead    string
	res     *spec.ChunkResult
	prog    spec.ChunkProgress
	last    map[string]int64 // last step each process reported
	// lastSaved is the last step committed in this world; lastSum the
	// SHA-256 of the directory then.
	lastSaved int64
	lastSum   [32]byte
	committed bool
	firstSeen bool
	// firstStep and firstTime are the lead process's first reported step
	// and when it reported it (the script's clock, seconds); lastTime when
	// it reported its last (prog.Step): its pace.
	firstStep           int64
	firstTime, lastTime float64
	// waiting are checkpoint requests waiting for the lead's pace (ask).
	waiting []ckptAsk
	// requested is the step the run asked rank 0 to checkpoint at, until
	// it is past (0: none); savedAt the last step rank 0 committed.
	requested, savedAt int64
	// groups are the processes' group IDs (a frozen node stops them too).
	groups []int
	// keptAt is the step of the last refused upload the node kept on its
	// disk (in.KeepRefused; 0: none).
	keptAt int64
	// asked are the processes that read the restored step
	// (launch.EventRestored).
	asked map[string]bool
	// quietSince is when rank 0 last said saved (the launch's start
	// before); quietWarned whether the stretch since was warned about.
	quietSince  time.Time
	quietWarned bool
	// warning is what the heartbeat's log tails add to rank 0's (""
	// none): read by the heartbeater's goroutine.
	warnMu  sync.Mutex
	warning string
}

// A rank 0 that goes on without committing a checkpoint (no saved())
// trains for nothing should the job fail or stop: the node warns, in its
// log and in the heartbeat's log tails, once rank 0 has reported
// quietCheckpoints times the job's checkpoint_every steps past its last
// checkpoint (or the launch's start) and quietFloor has passed since —
// or, when it reports no steps at all, once quietNoSteps has.
const quietCheckpoints = 2

var (
	quietFloor   = time.Minute
	quietNoSteps = 30 * time.Minute
)

// quietWarningPrefix starts the line the heartbeat's tail of rank 0's log
// ends with while it goes without a checkpoint.
const quietWarningPrefix = "⚠ cann-train: "

// checkQuiet sets (or clears) the warning about a rank 0 that commits no
// checkpoint, and logs it once per stretch.
func (s *supervision) checkQuiet(now time.Time) {
	const r0 = "rank-0"
	if _, ok := s.reports[r0]; !ok {
		return // (rank 0 runs on another node: its node warns)
	}
	warning := ""
	since := now.Sub(s.quietSince).Round(time.Second)
	base := max(s.savedAt, s.res.From)
	baseText := fmt.Sprintf("its last checkpoint, at step %d", base)
	if s.savedAt == 0 {
		baseText = fmt.Sprintf("the launch began (at step %d)", base)
	}
	todo := "write the checkpoint into cann_train.checkpoint_dir() (CANN_TRAIN_CHECKPOINT_DIR) and then call " +
		"cann_train.saved(step) on rank 0 — at the steps cann_train.should_checkpoint(step) says —; only what saved() commits is kept"
	every := max(s.in.Spec.CheckpointEvery, 1)
	step, reported := s.last[r0]
	switch {
	case reported && step-base >= quietCheckpoints*every && since >= quietFloor:
		warning = fmt.Sprintf("rank 0 (%s on node %s) has gone %s without a checkpoint: it reported step %d, %d steps since %s "+
			"(the job's checkpoint_every is %d), and has not called cann_train.saved(): should the job fail or stop now, "+
			"those steps are lost; %s", r0, s.n.ID, since, step, step-base, baseText, every, todo)
	case !reported && since >= quietNoSteps:
		warning = fmt.Sprintf("rank 0 (%s on node %s) has gone %s without a checkpoint: it has neither reported a step "+
			"(cann_train.report) nor called cann_train.saved() since %s: should the job fail or stop now, what it trained "+
			"is lost (without saved(), only what the checkpoint directory holds when every rank has exited cleanly is uploaded); %s",
			r0, s.n.ID, since, baseText, todo)
	}
	if warning != "" && !s.quietWarned {
		s.quietWarned = true
		s.log.Warn("no checkpoint committed: "+warning, zap.String("process", r0), zap.Duration("without_checkpoint", since),
			zap.Int64("step", step), zap.Int64("last_checkpoint", base))
	}
	s.warnMu.Lock()
	s.warning = warning
	s.warnMu.Unlock()
}

// onSaved starts a new stretch: rank 0 said saved.
func (s *supervision) onSaved(now time.Time) {
	s.quietSince, s.quietWarned = now, false
}

// withWarning adds the warning about rank 0 (checkQuiet), if any, to the
// end of its log tail.
func (s *supervision) withWarning(l spec.NodeLogs) spec.NodeLogs {
	s.warnMu.Lock()
	w := s.warning
	s.warnMu.Unlock()
	if w == "" {
		return l
	}
	for i := range l.Procs {
		if p := &l.Procs[i]; p.Process == "rank-0" {
			p.Lines = append(p.Lines, quietWarningPrefix+w)
			p.Lines = p.Lines[max(0, len(p.Lines)-spec.LogTailLines):]
		}
	}
	return l
}

// poll reads every process's new report lines, updates the progress,
// handles checkpoint commits of global rank 0, and injects a fault when
// asked.
func (s *supervision) poll(ctx context.Context) {
	names := make([]string, 0, len(s.reports))
	for name := range s.reports {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		evs, err := s.reports[name].Poll()
		if err != nil {
			s.log.Warn("report file", zap.String("process", name), zap.Error(err))
			continue
		}
		for _, e := range evs {
			switch e.Event {
			case launch.EventReport:
				s.last[name] = max(s.last[name], e.Step)
				if name == s.lead {
					s.onReport(e)
				}
			case launch.EventRestored:
				s.asked[name] = true
			case launch.EventSaved:
				if name == "rank-0" {
					s.onSaved(time.Now())
					s.savedAt = max(s.savedAt, e.Step)
					if err := s.upload(ctx, e.Step, false); errors.Is(err, ErrEmptyCheckpoint) {
						// (Not the storage's fault: the run is not told a
						// refusal, which would hold it for the storage.)
						s.log.Error("checkpoint not committed", zap.Int64("step", e.Step), zap.Error(err))
					} else if err != nil {
						kept := s.keptAt == e.Step
						s.log.Warn("checkpoint upload failed; the script goes on", zap.Int64("step", e.Step), zap.Bool("kept", kept), zap.Error(err))
						s.tell(spec.CheckpointSaved{Session: s.in.Session, Ref: spec.CheckpointRef{Run: s.in.Spec.Name, Step: e.Step},
							Failed: err.Error(), Kept: kept})
					}
				}
			}
		}
	}
	s.missedRequest()
	s.checkQuiet(time.Now())
	s.hooks.progress(s.prog)
	if k := s.in.KillAtStep; k > 0 && s.prog.Step >= k {
		s.in.KillAtStep = 0 // once (a node that does not allow it only warns)
		s.n.injectedFault(s.log, s.prog.Step, s.in.Freeze, s.groups)
	}
	s.n.strikeArmed(s.log, s.in.RunID, s.prog.Step, s.groups)
}

func (s *supervision) onReport(e launch.Event) {
	now := time.Now()
	if !s.firstSeen {
		s.firstSeen = true
		s.firstStep, s.firstTime = e.Step, e.Time
		s.res.FirstStepAt, s.prog.FirstStepAt = now, now
		if e.Loss != nil {
			s.res.FirstLoss = float32(*e.Loss)
		}
	}
	s.prog.Step, s.prog.At, s.lastTime = e.Step, now, e.Time
	s.res.To = e.Step
	if e.Loss != nil {
		s.prog.Loss = float32(*e.Loss)
		s.res.LastLoss = float32(*e.Loss)
	}
	if v, ok := e.Metrics["samples_per_sec"]; ok {
		// The process's own throughput; the node's, ranks being alike, is
		// procs_per_node times that.
		v *= float64(s.in.Spec.External.ProcsPerNode)
		s.prog.SamplesPerSec = v
		s.res.SamplesPerSec = v
	}
}

// ErrEmptyCheckpoint: the script said a checkpoint was saved, with its
// checkpoint directory empty. Nothing is committed.
var ErrEmptyCheckpoint = errors.New("empty checkpoint directory")

// upload commits the checkpoint directory at step: copy it (then the
// script may go on: ack), save it incrementally, keep the last few, and
// tell the run. final uploads only if the directory changed since the last
// commit (and is not empty).
func (s *supervision) upload(ctx context.Context, step int64, final bool) error {
	payload, st, err := launch.PackDir(s.paths.ckpt, checkpoint.DefaultChunkBytes)
	ack := func() {
		if !final {
			if err := launch.WriteAck(filepath.Join(s.paths.dir, "rank-0.ack"), step); err != nil {
				s.log.Warn("checkpoint ack", zap.Error(err))
			}
		}
	}
	if err != nil {
		ack() // do not leave the script waiting
		return err
	}
	ack()
	sum := sha256.Sum256(payload)
	if final && (st.Files == 0 || (s.committed && sum == s.lastSum)) {
		return nil
	}
	if st.Files == 0 {
		// (A script saying saved(N) over a directory it wrote nothing to:
		// committed, it would be restored as the checkpoint, with nothing
		// to load. The helper refuses it in the script already.)
		return fmt.Errorf("%w: rank 0 said saved(%d) with nothing in its checkpoint directory %s: "+
			"write the checkpoint's files into cann_train.checkpoint_dir() (CANN_TRAIN_CHECKPOINT_DIR) before saying saved",
			ErrEmptyCheckpoint, step, s.paths.ckpt)
	}
	url := s.n.bucketURL(s.in.Spec)
	store, err := s.n.store(ctx, url)
	var ref checkpoint.Ref
	var stats checkpoint.SaveStats
	if err == nil {
		if ref, stats, err = store.SaveIncremental(ctx, s.in.Spec.Name, step, payload); err != nil {
			err = s.n.storeError(url, step, err)
		}
	}
	if err != nil {
		s.keep(ctx, step, payload)
		return err
	}
	s.n.recordJob(ctx, store, s.in.Spec, s.in.Session)
	s.n.retain(ctx, store, url, s.in.Spec, ref.Step, s.log)
	if s.in.KeepRefused {
		// Refused checkpoints kept before this one (by this world, or an
		// earlier one of the run that failed): no run asks for a
		// checkpoint older than one stored, and a run that completes
		// never launches again to drop them.
		s.n.keptBefore(s.in.RunID, step+1)
		s.keptAt = 0
	}
	out := FromStoreRef(url, ref)
	s.lastSaved, s.lastSum, s.committed = step, sum, true
	s.res.Checkpoint = &out
	s.prog.LastCheckpoint = step
	s.log.Info("checkpoint uploaded", zap.Int64("step", step), zap.Int("files", st.Files), zap.Int64("bytes", st.Bytes),
		zap.Int("chunks", stats.Chunks), zap.Int("chunks_written", stats.ChunksWritten), zap.Int("chunks_refreshed", stats.ChunksRefreshed), zap.Bool("final", final))
	if len(st.Skipped) > 0 {
		s.log.Warn("checkpoint directory entries not saved (not regular files)", zap.Strings("paths", st.Skipped))
	}
	s.tell(spec.CheckpointSaved{Session: s.in.Session, Ref: out, Loss: s.prog.Loss, From: s.res.From, FirstLoss: s.res.FirstLoss,
		FirstStepAt: s.res.FirstStepAt})
	return nil
}

// keep keeps payload, the checkpoint at step the bucket refused, on the
// node's disk when the run asked (in.KeepRefused): keptAt says so.
func (s *supervision) keep(ctx context.Context, step int64, payload []byte) {
	if !s.in.KeepRefused || ctx.Err() != nil {
		return
	}
	if err := s.n.keepRefused(s.in.RunID, step, payload); err != nil {
		s.log.Warn("refused checkpoint not kept", zap.Int64("step", step), zap.Error(err))
		return
	}
	s.keptAt = step
	s.log.Info("refused checkpoint kept on the node's disk", zap.Int64("step", step), zap.String("dir", s.n.keptDir(s.in.RunID)))
}

// tell signals the run a checkpoint uploaded, or one that failed to.
func (s *supervision) tell(c spec.CheckpointSaved) {
	if s.hooks.saved == nil {
		return
	}
	if err := s.hooks.saved(c); err != nil {
		s.log.Warn("could not tell the run about the checkpoint", zap.Int64("step", c.Ref.Step), zap.Error(err))
	}
}

// rankExited is the RankExited error for a process that did not exit
// cleanly: the rank, its status, the step it had reached, and its log tail
// (torchrun's error file too, when the script wrote one).
func (s *supervision) rankExited(ee *launch.ExitError) error {
	// A process that reported no step (msrun's scheduler reports none)
	// failed where its node's ranks were: the run's failed-at step and
	// lost steps count from there.
	step, reported := s.last[ee.Name]
	if !reported {
		step = s.prog.Step
	}
	d := spec.RankExit{Rank: ee.Rank, Process: ee.Name, Node: s.n.ID, ExitCode: ee.Code,
		Step: step, LogTail: ee.Tail, LogFile: ee.LogPath, Program: ee.Program,
		NoStep: len(s.last) == 0 && s.savedAt == 0, FirstStepAt: s.res.FirstStepAt}
	if url := s.n.bucketURL(s.in.Spec); url != "" && !spec.MemoryBucket(url) {
		d.BucketLog = LogKey(s.in.Spec.Name, s.in.Session, ee.Name)
	}
	if ee.Signal != 0 {
		d.Signal = launch.SignalName(ee.Signal)
	}
	if ee.Rank >= 0 {
		if b, err := os.ReadFile(filepath.Join(s.paths.dir, fmt.Sprintf("rank-%d.error.json", ee.Rank))); err == nil && len(b) > 0 {
			d.LogTail += "\n--- " + filepath.Base(s.paths.dir) + " error file ---\n" + string(b[:min(len(b), 2048)])
		}
	}
	status := fmt.Sprintf("exited with status %d", ee.Code)
	if d.Signal != "" {
		status = "was killed by " + d.Signal
	}
	at := fmt.Sprintf("at step %d", d.Step)
	if !reported {
		at = fmt.Sprintf("with its node's ranks at step %d", d.Step)
	}
	msg := fmt.Sprintf("%s on node %s %s %s", ee.Name, s.n.ID, status, at)
	if d.NoStep && d.Program != "" {
		msg += s.startHint(ee.Name, d.Program)
	}
	if tail := lastLines(ee.Tail, 5, 800); tail != "" {
		msg += "; log tail:\n" + tail
	}
	msg += "\n" + d.Where(s.n.bucketURL(s.in.Spec))
	s.log.Warn("external job process failed", zap.String("process", ee.Name), zap.Int("code", ee.Code),
		zap.String("signal", d.Signal), zap.String("log", ee.LogPath))
	return temporal.NewApplicationErrorWithCause(msg, spec.ErrTypeRankExited, ee, d)
}

// startHint says, for a process that failed before any process of its
// node reported a step, how far it is known to have got: a fresh launch
// failed while starting (an import, the script's syntax, a missing
// module: often another interpreter than the one meant); a launch that
// restored a checkpoint runs a program that ran before (the run's
// earlier launches reached that checkpoint), and one whose process read
// the restored step (cann_train.restored_step()) got past its start, on
// to loading the checkpoint.
func (s *supervision) startHint(process, program string) string {
	ran := fmt.Sprintf("it ran %s%s", program, pathOf(*s.in.Spec.External))
	from := s.res.From
	if s.in.Restore == nil || from == 0 {
		return fmt.Sprintf(", before any step (%s)", ran)
	}
	if s.asked[process] {
		return fmt.Sprintf(", before any step, after it read the restored step %d (cann_train.restored_step()): it got past its "+
			"start and failed loading the checkpoint restored into %s, or on the way to its first step — not at its imports (%s)",
			from, s.paths.ckpt, ran)
	}
	asked := ""
	if len(s.asked) > 0 {
		asked = " (another process of its node did)"
	}
	return fmt.Sprintf(", before any step, in a launch that restored the checkpoint of step %d into %s: the run's earlier "+
		"launches ran this job up to that checkpoint; this process failed before it read the restored step "+
		"(cann_train.restored_step())%s — while starting on this node (%s) or loading the checkpoint",
		from, s.paths.ckpt, asked, ran)
}

// pathOf says where a job's entrypoint was looked up: "" for a path, else
// the PATH of the job's env, or the node worker's own.
func pathOf(x spec.ExternalJob) string {
	if len(x.Entrypoint) == 0 || strings.Contains(x.Entrypoint[0], "/") {
		return ""
	}
	if _, ok := x.Env["PATH"]; ok {
		return ", found in the PATH of the job's external.env"
	}
	return ", found in the node worker's PATH"
}

// lastLines is the last n lines of s, at most max bytes.
func lastLines(s string, n, maxBytes int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := strings.Join(lines, "\n")
	if len(out) > maxBytes {
		out = "…" + out[len(out)-maxBytes:]
	}
	return out
}

// pruneWorlds keeps the newest keep world directories of a run.
func pruneWorlds(dir string, keep int) {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) <= keep {
		return
	}
	type aged struct {
		name string
		t    time.Time
	}
	var ws []aged
	for _, e := range entries {
		if info, err := e.Info(); err == nil && e.IsDir() {
			ws = append(ws, aged{e.Name(), info.ModTime()})
		}
	}
	slices.SortFunc(ws, func(a, b aged) int { return a.t.Compare(b.t) })
	for _, w := range ws[:max(0, len(ws)-keep)] {
		_ = os.RemoveAll(filepath.Join(dir, w.name))
	}
}
