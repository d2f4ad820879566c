package activities

import (
	"context"
	"math"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/cann-train/cann-train/engine/launch"
	"github.com/cann-train/cann-train/spec"
)

// minRequestSteps is the least lead in steps (a job that reports seldom
// or has no measured pace yet).
const minRequestSteps = 2

// requestFile is the name of a world's checkpoint request file in its
// directory on each node (spec.EnvRequestFile).
const requestFile = "checkpoint.request"

// worldAsks is how RequestCheckpoint reaches the world running on this
// node (one at a time: admit): its supervision loop answers asks.
type worldAsks struct {
	session string
	ask     chan ckptAsk
	done    chan struct{} // closed when the world's loop is gone
	// running: the world's processes have started and its supervision
	// loop answers asks (under Node.mu); before, the world is still
	// being set up here (its checkpoint restored: minutes for a large
	// one), and RequestCheckpoint answers for it.
	running bool
}

type ckptAsk struct {
	ctx  context.Context // the asking activity's: once done, nobody hears the answer
	step int64
	// stopUnreported: answer spec.StepUnreported for a world that has
	// reported nothing (CheckpointRequest.StopUnreported).
	stopUnreported bool
	reply          chan int64 // buffered: the loop never blocks on it
}

// serveAsks registers the world of session for checkpoint requests, as
// soon as it is admitted here; call serve once its supervision loop
// answers them, and the returned func when it stops answering.
func (n *Node) serveAsks(session string) (*worldAsks, func()) {
	w := &worldAsks{session: session, ask: make(chan ckptAsk), done: make(chan struct{})}
	n.mu.Lock()
	n.asks = w
	n.mu.Unlock()
	var once sync.Once
	return w, func() {
		once.Do(func() {
			n.mu.Lock()
			if n.asks == w {
				n.asks = nil
			}
			n.mu.Unlock()
			close(w.done)
		})
	}
}

// serve marks w's world as running: its supervision loop answers asks.
func (n *Node) serve(w *worldAsks) {
	n.mu.Lock()
	w.running = true
	n.mu.Unlock()
}

// RequestCheckpoint is ActivityRequestCheckpoint: the run asks the world
// in.Session running here to checkpoint at in.Step (0: at a step this
// node picks, the job's request_lead ahead of its rank 0, once its pace
// is known). It returns the step written to the processes' request file, or 0 when
// none was: the world does not run here (any more), its processes have
// reported no step yet (a script without the helper never does; asked
// with in.StopUnreported, spec.StepUnreported says so), or the
// step is past the job's end or already passed here. Rank 0's node then
// watches the step: passed without a checkpoint, it tells the run
// (CheckpointSaved.Missed).
func (n *Node) RequestCheckpoint(ctx context.Context, in spec.CheckpointRequest) (int64, error) {
	n.mu.Lock()
	w := n.asks
	running := w != nil && w.running
	n.mu.Unlock()
	log := n.Logger.With(zap.String("run", in.RunID), zap.String("session", in.Session), zap.String("why", in.Why))
	if w == nil || w.session != in.Session {
		log.Info("checkpoint requested for a world that does not run here")
		return 0, nil
	}
	if !running {
		// Still restoring its checkpoint or starting its processes:
		// nothing trained yet.
		log.Info("no checkpoint requested: the world is still being set up here")
		if in.Step == 0 && in.StopUnreported {
			return spec.StepUnreported, nil
		}
		return 0, nil
	}
	a := ckptAsk{ctx: ctx, step: in.Step, stopUnreported: in.StopUnreported, reply: make(chan int64, 1)}
	select {
	case w.ask <- a:
	case <-w.done:
		return 0, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	var step int64
	select {
	case step = <-a.reply:
	case <-ctx.Done():
		return 0, ctx.Err() // (a waiting ask is then answered 0, and asks nothing)
	}
	if step == spec.StepUnreported {
		log.Info("no checkpoint requested: the world's processes have reported no step since their launch")
		return step, nil
	}
	log.Info("checkpoint requested of the world's processes", zap.Int64("asked", in.Step), zap.Int64("step", step))
	return step, nil
}

// ask answers a (RequestCheckpoint's): at once when it gives the step,
// or once the lead process's pace is known (its second report, by the
// times the script wrote) when this node is to pick it.
func (s *supervision) ask(a ckptAsk) {
	switch {
	case a.step == 0 && !s.firstSeen && a.stopUnreported && s.savedAt == 0:
		a.reply <- spec.StepUnreported // still starting: nothing to lose by stopping it
	case a.step == 0 && !s.firstSeen:
		a.reply <- 0 // nothing reported yet: no pace to go by, perhaps no helper
	case a.step == 0 && !s.paced():
		s.waiting = append(s.waiting, a)
	default:
		a.reply <- s.request(a.step)
	}
}

// answerWaiting answers the asks waiting for the pace, once it is known;
// with over (the world has ended) it answers them 0.
func (s *supervision) answerWaiting(over bool) {
	if len(s.waiting) == 0 || !over && !s.paced() {
		return
	}
	for _, a := range s.waiting {
		if over || a.ctx.Err() != nil {
			// (A request the run never heard of would have this node's
			// ranks alone checkpoint: a collective save would hang.)
			a.reply <- 0
		} else {
			a.reply <- s.request(0)
		}
	}
	s.waiting = nil
}

// paced: the lead process has reported two steps at two times, so its
// pace is known.
func (s *supervision) paced() bool {
	return s.firstSeen && s.prog.Step > s.firstStep && s.lastTime > s.firstTime && s.firstTime > 0
}

// request has this node's processes checkpoint at step (0: request_lead
// ahead of the lead process's last report, at its measured pace) by
// writing it to their request file, and returns it; 0 when it cannot
// (see RequestCheckpoint).
func (s *supervision) request(step int64) int64 {
	if step == 0 {
		if !s.paced() {
			return 0
		}
		step = aheadBy(s.prog.Step, s.firstStep, s.lastTime-s.firstTime, s.in.Spec.External.Lead())
	}
	if step <= s.prog.Step || (s.in.Spec.Steps > 0 && step >= s.in.Spec.Steps) {
		return 0 // passed already; or the job ends first, and uploads its end
	}
	if err := launch.WriteAck(filepath.Join(s.paths.dir, requestFile), step); err != nil {
		s.log.Warn("checkpoint request not written", zap.Int64("step", step), zap.Error(err))
		return 0
	}
	if s.in.Rank == 0 {
		s.requested = step // watched: missedRequest
	}
	return step
}

// missedRequest tells the run, once, that rank 0 went past the step it
// asked a checkpoint at without committing one there (its script
// checkpoints on its own schedule): a run waiting for that checkpoint to
// stop the world need not wait any longer.
func (s *supervision) missedRequest() {
	if s.requested == 0 || s.prog.Step <= s.requested {
		return
	}
	if s.savedAt < s.requested {
		s.log.Info("the processes went past the requested checkpoint without taking it", zap.Int64("step", s.requested))
		s.tell(spec.CheckpointSaved{Session: s.in.Session, Ref: spec.CheckpointRef{Run: s.in.Spec.Name, Step: s.requested}, Missed: true})
	}
	s.requested = 0
}

// aheadBy is the step lead ahead of step at the pace of the steps from
// first to step in took seconds (at least minRequestSteps ahead): the
// run must tell the other nodes, and their ranks read the request file,
// before any rank gets there (every rank must take the same step's
// checkpoint: a sharded save is collective).
func aheadBy(step, first int64, took float64, lead time.Duration) int64 {
	pace := float64(step-first) / took // steps a second
	return step + max(minRequestSteps, int64(math.Ceil(pace*lead.Seconds())))
}
